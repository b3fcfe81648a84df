#include "ops/nn/conv_onednn.h"

#include <oneapi/dnnl/dnnl.hpp>

#include <algorithm>
#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "opdef/kernel.h"
#include "runtime/lru_map.h"
#include "runtime/onednn_context.h"
#include "runtime/openmp.h"
#include "runtime/thread_pool.h"

namespace onnxtrain {
namespace {

using dnnl::memory;
using tag = dnnl::memory::format_tag;

enum class Pass { Forward, BackwardData, BackwardWeights };

// One thread's part of a weight reorder: the weights' rows [first, last) of dim 0 (output
// channels, or groups), whole blocks of the convolution's layout.
struct WeightSlice {
  memory::desc user, blocked;
  dnnl::primitive reorder;
};

// Everything to run one pass for one batch size: the convolution, its scratchpad, and the
// reorders between the user's layouts and the convolution's. Built once per geometry.
struct Plan {
  bool usable = false;
  dnnl::primitive conv;
  memory::desc src_user, wei_user, dst_user, bias_user;
  memory::desc src, wei, dst, scratchpad;  // as the convolution wants them
  dnnl::primitive src_reorder, wei_reorder, dst_reorder;  // user -> conv (src, weights, diff_dst)
  dnnl::primitive dst_out, src_out, wei_out;              // conv -> user (dst, diff_src, diff_weights)
  // wei_reorder split across the pool's threads (empty: one reorder). The weights are reordered
  // on every call (the optimizer changes them in place), and ResNet's 3x3 weights alone took a
  // quarter of a step on one thread while the other waited.
  std::vector<WeightSlice> wei_slices;
};

memory::dims dims_of(std::initializer_list<int64_t> lead, const std::array<int64_t, kMaxSpatial>& spatial, int n) {
  memory::dims d(lead.begin(), lead.end());
  for (int i = kMaxSpatial - n; i < kMaxSpatial; ++i) d.push_back(spatial[i]);
  return d;
}

memory::dims spatial_of(const std::array<int64_t, kMaxSpatial>& v, int n, int64_t minus = 0) {
  memory::dims d;
  for (int i = kMaxSpatial - n; i < kMaxSpatial; ++i) d.push_back(v[i] - minus);
  return d;
}

using dt = memory::data_type;

dt data_type_of(ConvElements e) { return e == ConvElements::BFloat16 ? dt::bf16 : dt::f32; }
size_t element_bytes(ConvElements e) { return e == ConvElements::BFloat16 ? 2 : 4; }

memory::desc plain(const memory::dims& d, dt type, tag t) { return memory::desc(d, type, t); }
memory::desc any(const memory::dims& d, dt type) { return memory::desc(d, type, tag::any); }

tag data_tag(int spatial) { return spatial == 1 ? tag::ncw : spatial == 2 ? tag::nchw : tag::ncdhw; }
tag weight_tag(int spatial, bool grouped) {
  if (grouped) return spatial == 1 ? tag::goiw : spatial == 2 ? tag::goihw : tag::goidhw;
  return spatial == 1 ? tag::oiw : spatial == 2 ? tag::oihw : tag::oidhw;
}

// Only oneDNN's direct JIT kernels beat our im2col; its gemm and reference kernels do not. In
// bfloat16 its brgemm ones count too: with AMX they are the forward kernels oneDNN 2.6 picks
// ("brgconv"), and the alternative is a widened float32 convolution. float32 leaves them to
// im2col, as measured.
bool is_direct_kernel(const std::string& impl, ConvElements elements) {
  if (elements == ConvElements::BFloat16 && impl.rfind("brgconv", 0) == 0) return true;
  return impl.find("jit") != std::string::npos && impl.find("gemm") == std::string::npos;
}

dnnl::primitive reorder_if_needed(const memory::desc& from, const memory::desc& to) {
  if (from == to) return dnnl::primitive();
  return dnnl::reorder(dnnl::reorder::primitive_desc(onednn_engine(), from, onednn_engine(), to));
}

// The block size of dim 0 in a blocked layout (1 where dim 0 is not blocked).
int64_t dim0_block(const memory::desc& d) {
  const dnnl_blocking_desc_t& b = d.data.format_desc.blocking;
  int64_t block = 1;
  for (int i = 0; i < b.inner_nblks; ++i)
    if (b.inner_idxs[i] == 0) block *= b.inner_blks[i];
  return block;
}

// The reorder user -> blocked in `slices` parts along dim 0, at whole blocks; none where dim 0
// does not divide into blocks (the padding of a partial block must be written whole).
std::vector<WeightSlice> weight_slices(const memory::desc& user, const memory::desc& blocked, int64_t slices) {
  std::vector<WeightSlice> out;
  if (slices <= 1 || blocked.data.format_kind != dnnl_blocked) return out;
  const memory::dims dims = user.dims();
  const int64_t block = dim0_block(blocked);
  if (dims[0] % block != 0 || dims[0] / block < 2) return out;
  const int64_t blocks = dims[0] / block, parts = std::min(slices, blocks);
  try {
    for (int64_t i = 0; i < parts; ++i) {
      const int64_t b0 = blocks * i / parts, b1 = blocks * (i + 1) / parts;
      memory::dims sub = dims, offsets(dims.size(), 0);
      sub[0] = (b1 - b0) * block;
      offsets[0] = b0 * block;
      WeightSlice slice{user.submemory_desc(sub, offsets), blocked.submemory_desc(sub, offsets), {}};
      slice.reorder = dnnl::reorder(dnnl::reorder::primitive_desc(onednn_engine(), slice.user, onednn_engine(), slice.blocked));
      out.push_back(std::move(slice));
    }
  } catch (const dnnl::error&) {
    out.clear();  // oneDNN cannot view this layout in parts: one reorder
  }
  return out;
}

// `col_stride`: the channels of the tensor the column side (Y, dY) is a channel slice of (0: its
// own; ConvGradW splits a large weight gradient's output channels among threads). Images, weights
// and their gradients are of `elements`, except the weight gradient and the bias: float32 always
// (the weight gradient is summed over chunks of the batch before it is rounded).
Plan build_plan(const ConvGeometry& g, Pass pass, ConvElements elements, int64_t batch, bool bias, int64_t threads,
                int64_t col_stride) {
  Plan p;
  const dt data = data_type_of(elements);
  const dt weights = pass == Pass::BackwardWeights ? dt::f32 : data;
  const int n = g.spatial;
  const bool grouped = g.group > 1;
  const memory::dims src = dims_of({batch, g.image_channels}, g.in, n);
  const memory::dims dst = dims_of({batch, g.col_channels}, g.out, n);
  memory::dims wei = grouped ? dims_of({g.group, g.col_channels / g.group, g.image_channels / g.group}, g.kernel, n)
                             : dims_of({g.col_channels, g.image_channels}, g.kernel, n);
  p.src_user = plain(src, data, data_tag(n));
  p.dst_user = plain(dst, data, data_tag(n));
  if (col_stride > g.col_channels) {
    memory::dims strides(dst.size(), 1);
    for (size_t i = dst.size() - 1; i > 0; --i) strides[i - 1] = strides[i] * dst[i];
    strides[0] = col_stride * strides[1];
    p.dst_user = memory::desc(dst, data, strides);
  }
  p.wei_user = plain(wei, weights, weight_tag(n, grouped));
  p.bias_user = plain({g.col_channels}, dt::f32, tag::x);
  const memory::dims strides = spatial_of(g.stride, n), dilates = spatial_of(g.dilation, n, 1);
  const memory::dims pad_l = spatial_of(g.pad_begin, n), pad_r = spatial_of(g.pad_end, n);
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  const memory::desc no_bias;
  dnnl::convolution_forward::primitive_desc fwd(
      dnnl::convolution_forward::desc(dnnl::prop_kind::forward_training, dnnl::algorithm::convolution_direct,
                                      any(src, data), any(wei, data), bias ? p.bias_user : no_bias, any(dst, data),
                                      strides, dilates, pad_l, pad_r),
      attr, onednn_engine());
  std::string impl;
  if (pass == Pass::Forward) {
    impl = fwd.impl_info_str();
    p.src = fwd.src_desc();
    p.wei = fwd.weights_desc();
    p.dst = fwd.dst_desc();
    p.scratchpad = fwd.scratchpad_desc();
    p.conv = dnnl::convolution_forward(fwd);
    p.src_reorder = reorder_if_needed(p.src_user, p.src);
    p.wei_reorder = reorder_if_needed(p.wei_user, p.wei);
    if (p.wei_reorder) p.wei_slices = weight_slices(p.wei_user, p.wei, threads);
    p.dst_out = reorder_if_needed(p.dst, p.dst_user);
  } else if (pass == Pass::BackwardData) {
    dnnl::convolution_backward_data::primitive_desc bwd(
        dnnl::convolution_backward_data::desc(dnnl::algorithm::convolution_direct, any(src, data), any(wei, data),
                                              any(dst, data),
                                              strides, dilates, pad_l, pad_r),
        attr, onednn_engine(), fwd);
    impl = bwd.impl_info_str();
    p.src = bwd.diff_src_desc();
    p.wei = bwd.weights_desc();
    p.dst = bwd.diff_dst_desc();
    p.scratchpad = bwd.scratchpad_desc();
    p.conv = dnnl::convolution_backward_data(bwd);
    p.dst_reorder = reorder_if_needed(p.dst_user, p.dst);
    p.wei_reorder = reorder_if_needed(p.wei_user, p.wei);
    if (p.wei_reorder) p.wei_slices = weight_slices(p.wei_user, p.wei, threads);
    p.src_out = reorder_if_needed(p.src, p.src_user);
  } else {
    dnnl::convolution_backward_weights::primitive_desc bwd(
        dnnl::convolution_backward_weights::desc(dnnl::algorithm::convolution_direct, any(src, data),
                                                 any(wei, weights), any(dst, data),
                                                 strides, dilates, pad_l, pad_r),
        attr, onednn_engine(), fwd);
    impl = bwd.impl_info_str();
    p.src = bwd.src_desc();
    p.wei = bwd.diff_weights_desc();
    p.dst = bwd.diff_dst_desc();
    p.scratchpad = bwd.scratchpad_desc();
    p.conv = dnnl::convolution_backward_weights(bwd);
    p.src_reorder = reorder_if_needed(p.src_user, p.src);
    p.dst_reorder = reorder_if_needed(p.dst_user, p.dst);
    p.wei_out = reorder_if_needed(p.wei, p.wei_user);
  }
  p.usable = is_direct_kernel(impl, elements);
  return p;
}

// Plans by geometry, element type, pass, batch size and thread count: building one JIT-compiles
// kernels (milliseconds), so it happens once per shape and every later step reuses it. At most
// kMaxPlans are kept, the least recently used going first (a run over many batch sizes would
// otherwise keep every one's kernels); a caller's shared_ptr keeps an evicted plan alive.
constexpr size_t kMaxPlans = 512;

std::mutex plans_mutex;
LruMap<std::vector<int64_t>, std::shared_ptr<const Plan>> plans(kMaxPlans);  // under plans_mutex

std::shared_ptr<const Plan> plan_for(const ConvGeometry& g, Pass pass, ConvElements elements, int64_t batch,
                                     bool bias, int64_t threads, int64_t col_stride = 0) {
  std::vector<int64_t> key{static_cast<int64_t>(pass), static_cast<int64_t>(elements), batch, bias, threads,
                           col_stride, g.spatial, g.image_channels, g.col_channels, g.group};
  for (const auto* v : {&g.in, &g.out, &g.kernel, &g.stride, &g.dilation, &g.pad_begin, &g.pad_end})
    key.insert(key.end(), v->begin(), v->end());
  std::lock_guard<std::mutex> lock(plans_mutex);
  return plans.get_or_build(key, [&] {
    auto plan = std::make_shared<Plan>();
    try {
      *plan = build_plan(g, pass, elements, batch, bias, threads, col_stride);
    } catch (const dnnl::error&) {
      plan->usable = false;  // oneDNN rejects this geometry: the im2col path handles it
    }
    return std::shared_ptr<const Plan>(std::move(plan));
  });
}

size_t align(size_t bytes) { return (bytes + 63) / 64 * 64; }

// Scratch for one chunk: the blocked copies the plan needs, and the convolution's own scratchpad.
size_t chunk_bytes(const Plan& p, bool weights_per_chunk) {
  size_t b = align(p.scratchpad.get_size());
  if (p.src_user != p.src) b += align(p.src.get_size());
  if (p.dst_user != p.dst) b += align(p.dst.get_size());
  if (weights_per_chunk) b += align(p.wei.get_size()) + align(p.wei_user.get_size());
  return b;
}

struct Chunks {
  int64_t count, size, last;  // `count` chunks of `size` images; the last one has `last`
};

Chunks split_batch(ThreadPool& pool, int64_t batch) {
  const int64_t count = std::max<int64_t>(1, std::min<int64_t>(pool.num_threads(), batch));
  const int64_t size = (batch + count - 1) / count;
  const int64_t used = (batch + size - 1) / size;
  return {used, size, batch - (used - 1) * size};
}

void run_reorder(const dnnl::primitive& reorder, dnnl::stream& s, const memory& from, const memory& to) {
  reorder.execute(s, {{DNNL_ARG_FROM, from}, {DNNL_ARG_TO, to}});
}

// A memory object over `user` data, or over the chunk's blocked buffer filled from it.
memory bring_in(const dnnl::primitive& reorder, const memory::desc& user, const memory::desc& want, const char* data,
                char*& scratch, dnnl::stream& s) {
  memory user_mem(user, onednn_engine(), const_cast<char*>(data));
  if (!reorder) return user_mem;
  memory blocked(want, onednn_engine(), scratch);
  scratch += align(want.get_size());
  run_reorder(reorder, s, user_mem, blocked);
  return blocked;
}

// A memory object to write into: the user's data, or a blocked buffer reordered out afterwards.
memory output_buffer(const dnnl::primitive& reorder, const memory::desc& user, const memory::desc& have, void* data,
                     char*& scratch) {
  if (!reorder) return memory(user, onednn_engine(), data);
  memory blocked(have, onednn_engine(), scratch);
  scratch += align(have.get_size());
  return blocked;
}

bool plans_usable(const Plan& a, const Plan& b) { return a.usable && b.usable; }

// The weights as the convolution reads them: the user's, or reordered into `scratch`, each of the
// plan's slices by one of the pool's threads.
memory bring_in_weights(ThreadPool& pool, const Plan& p, const void* w, char* scratch) {
  void* user = const_cast<void*>(w);
  if (!p.wei_reorder) return memory(p.wei_user, onednn_engine(), user);
  memory blocked(p.wei, onednn_engine(), scratch);
  if (p.wei_slices.empty()) {
    run_reorder(p.wei_reorder, onednn_thread_stream(), memory(p.wei_user, onednn_engine(), user), blocked);
    onednn_thread_stream().wait();
    return blocked;
  }
  pool.parallel_for(static_cast<int64_t>(p.wei_slices.size()), 1, [&](int64_t s0, int64_t s1) {
    SingleThreadedOpenMP slice_thread;
    dnnl::stream& s = onednn_thread_stream();
    for (int64_t i = s0; i < s1; ++i) {
      const WeightSlice& slice = p.wei_slices[static_cast<size_t>(i)];
      run_reorder(slice.reorder, s, memory(slice.user, onednn_engine(), user), memory(slice.blocked, onednn_engine(), scratch));
    }
    s.wait();
  });
  return blocked;
}

}  // namespace

namespace {
std::atomic<size_t> bfloat16_runs{0};
// Called where a call returns true: its convolution ran on oneDNN.
void count_run(ConvElements elements) {
  if (elements == ConvElements::BFloat16) bfloat16_runs.fetch_add(1, std::memory_order_relaxed);
}
}  // namespace

size_t onednn_bfloat16_convolutions_run() { return bfloat16_runs.load(std::memory_order_relaxed); }

size_t onednn_conv_plans_kept() {
  std::lock_guard<std::mutex> lock(plans_mutex);
  return plans.size();
}

Bfloat16Instructions onednn_bfloat16_instructions() {
  // The ISA values are bit sets: avx2_vnni is numerically above avx512_core_bf16 but lacks it.
  static const Bfloat16Instructions instructions = [] {
    const auto has = [isa = dnnl_get_effective_cpu_isa()](dnnl_cpu_isa_t set) { return (isa & set) == set; };
    if (has(dnnl_cpu_isa_avx512_core_amx)) return Bfloat16Instructions::Amx;
    if (has(dnnl_cpu_isa_avx512_core_bf16)) return Bfloat16Instructions::Avx512Bf16;
    return Bfloat16Instructions::None;
  }();
  return instructions;
}

bool onednn_bfloat16_convolutions_native() { return onednn_bfloat16_instructions() != Bfloat16Instructions::None; }

namespace {

// Forward and data gradient share a shape: weights reordered once, then one oneDNN call per chunk
// of the batch, each in one of the pool's threads. `body(plan, first image, scratch, stream, weights)`
// runs a chunk. False when oneDNN has no JIT kernel for the geometry.
template <typename Body>
bool run_chunked(KernelContext& ctx, const ConvGeometry& g, Pass pass, ConvElements elements, bool bias, const void* w,
                 Body body) {
  if (g.batch == 0) return false;  // oneDNN rejects empty batches; im2col handles them
  // oneDNN sizes its work split by the OpenMP thread count when a primitive is created: one.
  SingleThreadedOpenMP one_thread;
  ThreadPool& pool = ctx.threads();
  const Chunks c = split_batch(pool, g.batch);
  const auto full_plan = plan_for(g, pass, elements, c.size, bias, pool.num_threads());
  const auto last_plan = plan_for(g, pass, elements, c.last, bias, pool.num_threads());
  const Plan &full = *full_plan, &last = *last_plan;
  if (!plans_usable(full, last)) return false;
  const size_t per_chunk = chunk_bytes(full, false), weights = align(full.wei.get_size());
  char* base = static_cast<char*>(ctx.scratch(weights + per_chunk * static_cast<size_t>(c.count)));
  memory wei = bring_in_weights(pool, full, w, base);
  pool.parallel_for(c.count, 1, [&](int64_t c0, int64_t c1) {
    SingleThreadedOpenMP chunk_thread;
    dnnl::stream& s = onednn_thread_stream();
    for (int64_t i = c0; i < c1; ++i) {
      body(i + 1 == c.count ? last : full, i * c.size, base + weights + per_chunk * static_cast<size_t>(i), s, wei);
      s.wait();
    }
  });
  count_run(elements);
  return true;
}

}  // namespace

bool onednn_conv_forward(KernelContext& ctx, const ConvGeometry& g, ConvElements elements, const void* x_data,
                         const void* w, const float* b, void* y_data) {
  const int64_t bytes = static_cast<int64_t>(element_bytes(elements));
  const int64_t x_step = g.image_channels * g.in_size() * bytes, y_step = g.col_channels * g.out_size() * bytes;
  const char* x = static_cast<const char*>(x_data);
  char* y = static_cast<char*>(y_data);
  return run_chunked(ctx, g, Pass::Forward, elements, b != nullptr, w,
                     [&](const Plan& p, int64_t n0, char* scratch, dnnl::stream& s, const memory& wei) {
                       memory src = bring_in(p.src_reorder, p.src_user, p.src, x + n0 * x_step, scratch, s);
                       memory dst = output_buffer(p.dst_out, p.dst_user, p.dst, y + n0 * y_step, scratch);
                       memory pad(p.scratchpad, onednn_engine(), scratch);
                       std::unordered_map<int, memory> args{{DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, wei},
                                                            {DNNL_ARG_DST, dst}, {DNNL_ARG_SCRATCHPAD, pad}};
                       if (b) args.emplace(DNNL_ARG_BIAS, memory(p.bias_user, onednn_engine(), const_cast<float*>(b)));
                       p.conv.execute(s, args);
                       if (p.dst_out) run_reorder(p.dst_out, s, dst, memory(p.dst_user, onednn_engine(), y + n0 * y_step));
                     });
}

bool onednn_conv_backward_data(KernelContext& ctx, const ConvGeometry& g, ConvElements elements, const void* dy_data,
                               const void* w, void* dx_data) {
  const int64_t bytes = static_cast<int64_t>(element_bytes(elements));
  const int64_t x_step = g.image_channels * g.in_size() * bytes, y_step = g.col_channels * g.out_size() * bytes;
  const char* dy = static_cast<const char*>(dy_data);
  char* dx = static_cast<char*>(dx_data);
  return run_chunked(ctx, g, Pass::BackwardData, elements, false, w,
                     [&](const Plan& p, int64_t n0, char* scratch, dnnl::stream& s, const memory& wei) {
                       memory diff_dst = bring_in(p.dst_reorder, p.dst_user, p.dst, dy + n0 * y_step, scratch, s);
                       memory diff_src = output_buffer(p.src_out, p.src_user, p.src, dx + n0 * x_step, scratch);
                       memory pad(p.scratchpad, onednn_engine(), scratch);
                       p.conv.execute(s, {{DNNL_ARG_DIFF_DST, diff_dst}, {DNNL_ARG_WEIGHTS, wei},
                                          {DNNL_ARG_DIFF_SRC, diff_src}, {DNNL_ARG_SCRATCHPAD, pad}});
                       if (p.src_out)
                         run_reorder(p.src_out, s, diff_src, memory(p.src_user, onednn_engine(), dx + n0 * x_step));
                     });
}

namespace {

// Output channels per part when ConvGradW splits them among threads: a multiple of every oneDNN
// weight block, so that each part's rows of dW are whole blocks.
constexpr int64_t kChannelPart = 16;

// ConvGradW with each thread computing the weight gradient of its own output channels over the
// whole batch. Split by images instead, every thread computes (and reorders, and adds) all of dW:
// for ResNet's 512x512 layers on 4x4 planes, two threads took as long as one.
bool backward_weights_by_channels(KernelContext& ctx, const ConvGeometry& g, ConvElements elements, const char* x,
                                  const char* dy, float* dw) {
  ThreadPool& pool = ctx.threads();
  const int64_t blocks = g.col_channels / kChannelPart, parts = std::min<int64_t>(pool.num_threads(), blocks);
  auto part_geometry = [&](int64_t i, int64_t& first) {
    first = blocks * i / parts * kChannelPart;
    ConvGeometry part = g;
    part.col_channels = (blocks * (i + 1) / parts) * kChannelPart - first;
    return part;
  };
  std::vector<std::shared_ptr<const Plan>> plans;
  size_t per_part = 0;
  for (int64_t i = 0; i < parts; ++i) {
    int64_t first;
    plans.push_back(
        plan_for(part_geometry(i, first), Pass::BackwardWeights, elements, g.batch, false, 1, g.col_channels));
    if (!plans.back()->usable) return false;
    per_part = std::max(per_part, chunk_bytes(*plans.back(), true));
  }
  char* base = static_cast<char*>(ctx.scratch(per_part * static_cast<size_t>(parts)));
  const int64_t weights_per_channel = g.image_channels / g.group * g.kernel_size();
  pool.parallel_for(parts, 1, [&](int64_t i0, int64_t i1) {
    SingleThreadedOpenMP part_thread;
    dnnl::stream& s = onednn_thread_stream();
    for (int64_t i = i0; i < i1; ++i) {
      const Plan& p = *plans[static_cast<size_t>(i)];
      int64_t first;
      part_geometry(i, first);
      char* scratch = base + per_part * static_cast<size_t>(i);
      float* out = dw + first * weights_per_channel;
      memory src = bring_in(p.src_reorder, p.src_user, p.src, x, scratch, s);
      const char* dy_part = dy + first * g.out_size() * static_cast<int64_t>(element_bytes(elements));
      memory diff_dst = bring_in(p.dst_reorder, p.dst_user, p.dst, dy_part, scratch, s);
      memory diff_wei = output_buffer(p.wei_out, p.wei_user, p.wei, out, scratch);
      memory pad(p.scratchpad, onednn_engine(), scratch);
      p.conv.execute(s, {{DNNL_ARG_SRC, src}, {DNNL_ARG_DIFF_DST, diff_dst}, {DNNL_ARG_DIFF_WEIGHTS, diff_wei},
                         {DNNL_ARG_SCRATCHPAD, pad}});
      if (p.wei_out) run_reorder(p.wei_out, s, diff_wei, memory(p.wei_user, onednn_engine(), out));
      s.wait();
    }
  });
  return true;
}

}  // namespace

bool onednn_conv_backward_weights(KernelContext& ctx, const ConvGeometry& g, ConvElements elements, const void* x_data,
                                  const void* dy_data, float* dw) {
  const char* x = static_cast<const char*>(x_data);
  const char* dy = static_cast<const char*>(dy_data);
  if (g.batch == 0) return false;  // oneDNN rejects empty batches; im2col handles them
  // oneDNN sizes its work split by the OpenMP thread count when a primitive is created: one.
  SingleThreadedOpenMP one_thread;
  ThreadPool& pool = ctx.threads();
  const int64_t weight_numel = g.col_channels * (g.image_channels / g.group) * g.kernel_size();
  if (pool.num_threads() > 1 && g.group == 1 && g.col_channels % kChannelPart == 0 &&
      g.col_channels >= 2 * kChannelPart && weight_numel > g.batch * g.image_channels * g.in_size() &&
      backward_weights_by_channels(ctx, g, elements, x, dy, dw)) {
    count_run(elements);
    return true;
  }
  const Chunks c = split_batch(pool, g.batch);
  const auto full_plan = plan_for(g, Pass::BackwardWeights, elements, c.size, false, pool.num_threads());
  const auto last_plan = plan_for(g, Pass::BackwardWeights, elements, c.last, false, pool.num_threads());
  const Plan &full = *full_plan, &last = *last_plan;
  if (!plans_usable(full, last)) return false;
  const size_t per_chunk = chunk_bytes(full, true);
  char* base = static_cast<char*>(ctx.scratch(per_chunk * static_cast<size_t>(c.count)));
  const int64_t bytes = static_cast<int64_t>(element_bytes(elements));
  const int64_t x_step = g.image_channels * g.in_size() * bytes, y_step = g.col_channels * g.out_size() * bytes;
  const int64_t wsize = static_cast<int64_t>(full.wei_user.get_size() / sizeof(float));
  std::vector<float*> partial(static_cast<size_t>(c.count), nullptr);
  pool.parallel_for(c.count, 1, [&](int64_t c0, int64_t c1) {
    SingleThreadedOpenMP chunk_thread;
    dnnl::stream& s = onednn_thread_stream();
    for (int64_t i = c0; i < c1; ++i) {
      const Plan& p = i + 1 == c.count ? last : full;
      char* scratch = base + per_chunk * static_cast<size_t>(i);
      const int64_t n0 = i * c.size;
      // Chunk 0 writes dW itself; the others write partial sums added below.
      float* out = dw;
      if (i > 0) {
        out = reinterpret_cast<float*>(scratch);
        scratch += align(p.wei_user.get_size());
      }
      partial[static_cast<size_t>(i)] = out;
      memory src = bring_in(p.src_reorder, p.src_user, p.src, x + n0 * x_step, scratch, s);
      memory diff_dst = bring_in(p.dst_reorder, p.dst_user, p.dst, dy + n0 * y_step, scratch, s);
      memory diff_wei = output_buffer(p.wei_out, p.wei_user, p.wei, out, scratch);
      memory pad(p.scratchpad, onednn_engine(), scratch);
      p.conv.execute(s, {{DNNL_ARG_SRC, src}, {DNNL_ARG_DIFF_DST, diff_dst}, {DNNL_ARG_DIFF_WEIGHTS, diff_wei},
                         {DNNL_ARG_SCRATCHPAD, pad}});
      if (p.wei_out) run_reorder(p.wei_out, s, diff_wei, memory(p.wei_user, onednn_engine(), out));
      s.wait();
    }
  });
  if (c.count > 1) {
    pool.parallel_for(wsize, 1 << 14, [&](int64_t k0, int64_t k1) {
      for (int64_t i = 1; i < c.count; ++i) {
        const float* part = partial[static_cast<size_t>(i)];
        for (int64_t k = k0; k < k1; ++k) dw[k] += part[k];
      }
    });
  }
  count_run(elements);
  return true;
}

}  // namespace onnxtrain
