#include "runtime/bfloat16_matmul.h"

#include <oneapi/dnnl/dnnl.hpp>

#include <array>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "runtime/lru_map.h"
#include "runtime/onednn_context.h"
#include "runtime/openmp.h"

namespace onnxtrain {
namespace {

using dnnl::memory;

struct Primitive {
  bool usable = false;
  dnnl::matmul matmul;
  memory::desc a, b, c, bias, scratchpad;
};

// Everything a primitive is built for; alpha and the pointers are given at run time.
using Key = std::array<int64_t, 12>;

Key key_of(const Bfloat16Product& p) {
  return {p.trans_a, p.trans_b, p.m, p.n, p.k, p.lda, p.ldb, p.ldc, p.accumulate, p.bias != nullptr, p.c_bfloat16,
          p.alpha != 1.0f};
}

// Building a primitive JIT-compiles its kernels (about a millisecond), so each shape builds once;
// a run over many shapes (batch sizes, sequence lengths) keeps at most kMaxPrimitives.
constexpr size_t kMaxPrimitives = 256;
std::mutex primitives_mutex;

Primitive build(const Bfloat16Product& q) {
  const int64_t m = q.m, n = q.n, k = q.k;
  Primitive p;
  p.a = memory::desc({m, k}, memory::data_type::bf16, q.trans_a ? memory::dims{1, q.lda} : memory::dims{q.lda, 1});
  p.b = memory::desc({k, n}, memory::data_type::bf16, q.trans_b ? memory::dims{1, q.ldb} : memory::dims{q.ldb, 1});
  p.c = memory::desc({m, n}, q.c_bfloat16 ? memory::data_type::bf16 : memory::data_type::f32,
                     memory::dims{q.ldc, 1});
  if (q.bias) p.bias = memory::desc({1, n}, memory::data_type::f32, memory::dims{n, 1});
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  if (q.alpha != 1.0f) attr.set_output_scales(0, {DNNL_RUNTIME_F32_VAL});
  if (q.accumulate) {
    dnnl::post_ops ops;
    ops.append_sum(1.0f);
    attr.set_post_ops(ops);
  }
  try {
    const auto desc = q.bias ? dnnl::matmul::desc(p.a, p.b, p.bias, p.c) : dnnl::matmul::desc(p.a, p.b, p.c);
    dnnl::matmul::primitive_desc pd(desc, attr, onednn_engine());
    p.matmul = dnnl::matmul(pd);
    p.scratchpad = pd.scratchpad_desc();
    p.usable = true;
  } catch (const dnnl::error&) {
    p.usable = false;
  }
  return p;
}

LruMap<Key, std::shared_ptr<const Primitive>> primitives(kMaxPrimitives);  // under primitives_mutex

std::shared_ptr<const Primitive> primitive_for(const Bfloat16Product& q) {
  std::lock_guard<std::mutex> lock(primitives_mutex);
  return primitives.get_or_build(key_of(q), [&] { return std::make_shared<const Primitive>(build(q)); });
}

}  // namespace

bool run_bfloat16_product(const Bfloat16Product& q) {
  // oneDNN sizes a primitive's work split by the OpenMP thread count when it is built: one, as the
  // pool's chunk runs it.
  SingleThreadedOpenMP one_thread;
  const auto p = primitive_for(q);
  if (!p->usable) return false;
  thread_local std::vector<unsigned char> scratch;
  const size_t scratch_bytes = p->scratchpad.get_size();
  if (scratch.size() < scratch_bytes) scratch.resize(scratch_bytes);
  dnnl::engine& engine = onednn_engine();
  std::unordered_map<int, memory> args{{DNNL_ARG_SRC, memory(p->a, engine, const_cast<BHalf*>(q.a))},
                                       {DNNL_ARG_WEIGHTS, memory(p->b, engine, const_cast<BHalf*>(q.b))},
                                       {DNNL_ARG_DST, memory(p->c, engine, q.c)},
                                       {DNNL_ARG_SCRATCHPAD, memory(p->scratchpad, engine, scratch.data())}};
  if (q.bias) args.emplace(DNNL_ARG_BIAS, memory(p->bias, engine, const_cast<float*>(q.bias)));
  float alpha = q.alpha;
  if (alpha != 1.0f) args.emplace(DNNL_ARG_ATTR_OUTPUT_SCALES, memory({{1}, memory::data_type::f32, {1}}, engine, &alpha));
  p->matmul.execute(onednn_thread_stream(), args);
  onednn_thread_stream().wait();
  return true;
}

bool bfloat16_primitives_enabled() {
  static const bool enabled = [] {
    const char* env = std::getenv("ONNXTRAIN_BF16_PRODUCT");
    return !(env && std::string(env) == "gemm");
  }();
  return enabled;
}

size_t bfloat16_matmul_primitives_kept() {
  std::lock_guard<std::mutex> lock(primitives_mutex);
  return primitives.size();
}

}  // namespace onnxtrain
