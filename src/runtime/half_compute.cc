#include "runtime/half_compute.h"

#include <set>
#include <string>
#include <utility>

#include "core/half.h"
#include "runtime/thread_pool.h"

namespace onnxtrain {

namespace {

bool is_16bit_float(DType t) { return t == DType::Float16 || t == DType::BFloat16; }

constexpr int64_t kConvertGrain = 1 << 16;

Tensor widened(ThreadPool& pool, const Tensor& t) {
  Tensor out = Tensor::empty(DType::Float32, t.shape());
  float* o = out.data<float>();
  if (t.dtype() == DType::Float16) {
    const Half* in = t.data<Half>();
    pool.parallel_for(t.numel(), kConvertGrain, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) o[i] = half_to_float(in[i]);
    });
  } else {
    const BHalf* in = t.data<BHalf>();
    pool.parallel_for(t.numel(), kConvertGrain, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) o[i] = bfloat16_to_float(in[i]);
    });
  }
  return out;
}

// Rounds a float32 tensor to `to` in its own buffer: element i's 2 bytes land below element
// i's 4, so no element is overwritten before it is read (the loop runs in order, unsplit).
Tensor narrowed_in_place(Tensor t, DType to) {
  const float* in = t.data<float>();
  uint16_t* out = static_cast<uint16_t*>(t.raw_data());
  const int64_t n = t.numel();
  if (to == DType::Float16) {
    for (int64_t i = 0; i < n; ++i) out[i] = float_to_half(in[i]).bits;
  } else {
    for (int64_t i = 0; i < n; ++i) out[i] = float_to_bfloat16(in[i]).bits;
  }
  return Tensor(to, t.shape(), t.raw_data(), t.holder());
}

bool shares_memory(const Tensor& a, const Tensor& b) {
  if (!a.defined() || !b.defined() || a.nbytes() == 0 || b.nbytes() == 0) return false;
  const auto* pa = static_cast<const uint8_t*>(a.raw_data());
  const auto* pb = static_cast<const uint8_t*>(b.raw_data());
  return pa < pb + b.nbytes() && pb < pa + a.nbytes();
}

}  // namespace

bool computes_16bit_floats_in_float32(const std::string& domain, const std::string& op_type) {
  // Kernels that move bytes whatever the element type, or that read or write 16-bit floats
  // themselves; the data movers would be exact through float32 too, only slower.
  static const std::set<std::string> kNative = {
      "Cast", "CastLike", "Constant", "ConstantOfShape", "Identity", "Reshape", "Flatten", "Squeeze",
      "Unsqueeze", "Shape", "Size", "Concat", "Split", "Slice", "Expand", "Gather", "GatherElements", "Tile",
      "Transpose", "NonZero", "IsNaN", "IsInf", "Pad", "RandomUniform", "RandomNormal", "RandomUniformLike",
      "RandomNormalLike", "Multinomial"};
  // A Python Function receives its inputs as they are, as in eager; SplitGuard passes its input on.
  if (domain == kOnnxTrainDomain && (op_type == "PythonOp" || op_type == "PythonOpGrad" || op_type == "SplitGuard"))
    return false;
  return !(domain.empty() && kNative.count(op_type));
}

void compute_with_16bit_floats_widened(RunState& state, const CompiledNode& cn, KernelContext& ctx) {
  DType narrow = DType::Undefined;
  for (int id : cn.inputs) {
    if (id < 0) continue;
    const DType t = state.values[static_cast<size_t>(id)].dtype();
    if (!is_16bit_float(t)) continue;
    OT_CHECK(narrow == DType::Undefined || narrow == t, "inputs mix float16 and bfloat16");
    narrow = t;
  }
  if (narrow == DType::Undefined) {
    cn.kernel->compute(ctx);
    return;
  }
  // Swap the 16-bit inputs for float32 copies for the kernel's run, then put them back.
  std::vector<std::pair<int, Tensor>> originals;
  for (int id : cn.inputs) {
    if (id < 0) continue;
    Tensor& slot = state.values[static_cast<size_t>(id)];
    if (!is_16bit_float(slot.dtype())) continue;  // also skips an input listed twice, already swapped
    originals.emplace_back(id, slot);
    slot = widened(state.pool, slot);
  }
  auto restore = [&] {
    for (auto& [id, t] : originals) state.values[static_cast<size_t>(id)] = std::move(t);
  };
  try {
    cn.kernel->compute(ctx);
  } catch (...) {
    restore();
    throw;
  }
  std::vector<Tensor> float_inputs;  // kept alive: an output may alias one of them
  for (auto& [id, t] : originals) float_inputs.push_back(state.values[static_cast<size_t>(id)]);
  restore();
  for (size_t o = 0; o < cn.outputs.size(); ++o) {
    Tensor& out = state.values[static_cast<size_t>(cn.outputs[o])];
    if (!out.defined() || out.dtype() != DType::Float32) continue;
    if (o < cn.float32_outputs.size() && cn.float32_outputs[o]) continue;  // declared float32 (a stash type)
    bool aliases_float32_input = false;
    for (int id : cn.inputs)
      if (id >= 0 && shares_memory(out, state.values[static_cast<size_t>(id)])) aliases_float32_input = true;
    out = narrowed_in_place(aliases_float32_input ? out.clone() : out, narrow);
  }
}

}  // namespace onnxtrain
