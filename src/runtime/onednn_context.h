#pragma once
// The one oneDNN CPU engine of the process, and a stream per thread (the pool's threads each run
// their own primitives): shared by the convolutions and the bfloat16 products.
#include <oneapi/dnnl/dnnl.hpp>

namespace onnxtrain {

inline dnnl::engine& onednn_engine() {
  static dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  return engine;
}

inline dnnl::stream& onednn_thread_stream() {
  thread_local dnnl::stream stream(onednn_engine());
  return stream;
}

}  // namespace onnxtrain
