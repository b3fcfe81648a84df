#include "runtime/half_compute.h"

#include <string>
#include <utility>

#include "core/half.h"
#include "opdef/op_registry.h"
#include "runtime/half_convert.h"
#include "runtime/thread_pool.h"

namespace onnxtrain {

namespace {

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

bool computes_in_float32(const std::string& domain, const std::string& op_type, DType half_type) {
  return !OpRegistry::instance().computes_natively(domain, op_type, half_type);
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
  if (narrow == DType::Undefined || (narrow == DType::Float16 ? !cn.widen_float16 : !cn.widen_bfloat16)) {
    cn.kernel->compute(ctx);
    return;
  }
  std::vector<bool> input_was_16bit;
  for (int id : cn.inputs)
    input_was_16bit.push_back(id >= 0 && is_16bit_float(state.values[static_cast<size_t>(id)].dtype()));
  // Swap the 16-bit inputs for float32 copies for the kernel's run, then put them back.
  std::vector<std::pair<int, Tensor>> originals;
  for (int id : cn.inputs) {
    if (id < 0) continue;
    Tensor& slot = state.values[static_cast<size_t>(id)];
    if (!is_16bit_float(slot.dtype())) continue;  // also skips an input listed twice, already swapped
    originals.emplace_back(id, slot);
    slot = widened_to_float32(state.pool, slot);
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
    if (o < cn.output_type_sources.size() && cn.output_type_sources[o] >= 0 &&
        !input_was_16bit[static_cast<size_t>(cn.output_type_sources[o])])
      continue;  // its type follows a float32 input's
    bool aliases_float32_input = false;
    for (int id : cn.inputs)
      if (id >= 0 && shares_memory(out, state.values[static_cast<size_t>(id)])) aliases_float32_input = true;
    out = narrowed_in_place(aliases_float32_input ? out.clone() : out, narrow);
  }
}

}  // namespace onnxtrain
