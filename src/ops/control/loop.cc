// Loop and Scan, in the closed form of onnx/subgraph_closure.h (the outer values the body reads
// follow the node's ONNX inputs). Forward only: differentiating through them would need every
// iteration's state, and they have no gradient rule, so training through one is refused by the
// gradient builder, naming the node.
#include <algorithm>
#include <cstring>

#include "core/checked_math.h"
#include "opdef/op_registry.h"
#include "ops/control/subgraph.h"

namespace onnxtrain {
namespace {

// Stacks equally shaped tensors along a new axis `axis` (0..rank), in order.
Tensor stack(const std::vector<Tensor>& parts, int axis, DType dtype_if_empty) {
  if (parts.empty()) return Tensor::empty(dtype_if_empty, {0});
  const Tensor& first = parts[0];
  TensorShape shape = first.shape();
  for (const Tensor& p : parts)
    OT_CHECK(p.dtype() == first.dtype() && p.shape() == first.shape(), "scan outputs change shape between iterations: ",
             first.str(), " then ", p.str());
  std::vector<int64_t> dims(shape.begin(), shape.end());
  dims.insert(dims.begin() + axis, static_cast<int64_t>(parts.size()));
  Tensor out = Tensor::empty(first.dtype(), TensorShape(dims));
  int64_t outer = 1, inner = 1;
  for (int d = 0; d < axis; ++d) outer *= shape[d];
  for (int d = axis; d < shape.rank(); ++d) inner *= shape[d];
  const size_t elem = dtype_size(first.dtype()), block = static_cast<size_t>(inner) * elem;
  auto* dst = static_cast<uint8_t*>(out.raw_data());
  for (size_t k = 0; k < parts.size(); ++k) {
    const auto* src = static_cast<const uint8_t*>(parts[k].raw_data());
    for (int64_t o = 0; o < outer; ++o)
      std::memcpy(dst + (static_cast<size_t>(o) * parts.size() + k) * block, src + static_cast<size_t>(o) * block, block);
  }
  return out;
}

// Slice `index` of `t` along `axis`, without that axis.
Tensor slice_along(const Tensor& t, int axis, int64_t index) {
  OT_CHECK(axis >= 0 && axis < t.rank() && index >= 0 && index < t.dim(axis), "slice ", index, " along axis ", axis,
           " of ", t.str(), " does not exist");
  std::vector<int64_t> dims(t.shape().begin(), t.shape().end());
  const int64_t n = dims[static_cast<size_t>(axis)];
  dims.erase(dims.begin() + axis);
  Tensor out = Tensor::empty(t.dtype(), TensorShape(dims));
  int64_t outer = 1, inner = 1;
  for (int d = 0; d < axis; ++d) outer *= t.dim(d);
  for (int d = axis + 1; d < t.rank(); ++d) inner *= t.dim(d);
  const size_t block = static_cast<size_t>(inner) * dtype_size(t.dtype());
  const auto* src = static_cast<const uint8_t*>(t.raw_data());
  auto* dst = static_cast<uint8_t*>(out.raw_data());
  for (int64_t o = 0; o < outer; ++o)
    std::memcpy(dst + static_cast<size_t>(o) * block, src + static_cast<size_t>(o * n + index) * block, block);
  return out;
}

class LoopKernel : public Kernel {
 public:
  explicit LoopKernel(const KernelInfo& info) : body_(info.node, "body"), describe_(info.node.describe()) {
    const int captured = static_cast<int>(info.node.attr_int("num_captured", 0));
    num_carried_ = static_cast<int>(info.node.inputs.size()) - 2 - captured;
    OT_CHECK(num_carried_ >= 0, describe_, " needs the inputs M and cond (each may be empty)");
    num_scan_ = static_cast<int>(info.node.outputs.size()) - num_carried_;
    OT_CHECK(num_scan_ >= 0 && body_.num_outputs() == 1 + num_carried_ + num_scan_, describe_, ": its body returns ",
             body_.num_outputs(), " values; a Loop with ", num_carried_, " carried values and ", num_scan_,
             " scan outputs needs ", 1 + num_carried_ + num_scan_);
    for (int k = 0; k < num_scan_; ++k) scan_dtypes_.push_back(info.output_dtype(static_cast<size_t>(num_carried_ + k)));
  }

  void compute(KernelContext& ctx) const override {
    const bool has_trip = ctx.has_input(0), has_cond = ctx.has_input(1);
    OT_CHECK(has_trip || has_cond, describe_, " has neither a trip count nor a condition: it would never end");
    const int64_t trips = has_trip ? ctx.input(0).item_as_int() : 0;
    bool go = has_cond ? ctx.input(1).item_as_double() != 0 : true;
    std::vector<Tensor> carried;
    for (int k = 0; k < num_carried_; ++k) carried.push_back(ctx.input(2 + k));
    std::vector<Tensor> captured = inputs_from(ctx, 2 + num_carried_);
    std::vector<std::vector<Tensor>> scans(static_cast<size_t>(num_scan_));
    const int64_t limit = loop_iteration_limit();
    for (int64_t iter = 0; go && (!has_trip || iter < trips); ++iter) {
      OT_CHECK(iter < limit, describe_, " ran ", limit, " iterations without ending; ONNXTRAIN_MAX_LOOP_ITERATIONS "
               "raises the limit");
      std::vector<Tensor> in = {Tensor::scalar<int64_t>(iter), Tensor::scalar<bool>(go)};
      in.insert(in.end(), carried.begin(), carried.end());
      in.insert(in.end(), captured.begin(), captured.end());
      std::vector<Tensor> out = body_.run(in, ctx);
      go = out[0].item_as_double() != 0;
      for (int k = 0; k < num_carried_; ++k) carried[static_cast<size_t>(k)] = out[static_cast<size_t>(1 + k)];
      for (int k = 0; k < num_scan_; ++k) scans[static_cast<size_t>(k)].push_back(out[static_cast<size_t>(1 + num_carried_ + k)]);
    }
    for (int k = 0; k < num_carried_; ++k) write_output(ctx, k, carried[static_cast<size_t>(k)]);
    for (int k = 0; k < num_scan_; ++k) {
      DType dtype = scan_dtypes_[static_cast<size_t>(k)];
      write_output(ctx, num_carried_ + k, stack(scans[static_cast<size_t>(k)], 0, dtype == DType::Undefined ? DType::Float32 : dtype));
    }
  }

 private:
  CompiledBody body_;
  std::string describe_;
  int num_carried_ = 0, num_scan_ = 0;
  std::vector<DType> scan_dtypes_;
};

// Scan-9 and later; Scan-8 (marked "batched" by the closure) has a leading batch axis on every
// state and scan input, an optional first input sequence_lens, and scans along axis 1.
class ScanKernel : public Kernel {
 public:
  explicit ScanKernel(const KernelInfo& info) : body_(info.node, "body"), describe_(info.node.describe()) {
    const Node& n = info.node;
    batched_ = n.attr_int("batched", 0) != 0;
    const int captured = static_cast<int>(n.attr_int("num_captured", 0));
    num_scan_inputs_ = static_cast<int>(n.attr_int("num_scan_inputs", -1));
    const int onnx_inputs = static_cast<int>(n.inputs.size()) - captured - (batched_ ? 1 : 0);
    num_state_ = onnx_inputs - num_scan_inputs_;
    OT_CHECK(num_scan_inputs_ >= 1 && num_state_ >= 0, describe_, ": num_scan_inputs must be between 1 and ",
             onnx_inputs);
    num_scan_outputs_ = static_cast<int>(n.outputs.size()) - num_state_;
    OT_CHECK(num_scan_outputs_ >= 0 && body_.num_outputs() == num_state_ + num_scan_outputs_, describe_,
             ": its body returns ", body_.num_outputs(), " values for ", n.outputs.size(), " outputs");
    const auto zeros = [](int k) { return std::vector<int64_t>(static_cast<size_t>(k), 0); };
    if (batched_) {
      input_axes_ = zeros(num_scan_inputs_);
      input_dirs_ = n.attr_ints("directions", zeros(num_scan_inputs_));
      output_axes_ = output_dirs_ = zeros(num_scan_outputs_);
    } else {
      input_axes_ = n.attr_ints("scan_input_axes", zeros(num_scan_inputs_));
      input_dirs_ = n.attr_ints("scan_input_directions", zeros(num_scan_inputs_));
      output_axes_ = n.attr_ints("scan_output_axes", zeros(num_scan_outputs_));
      output_dirs_ = n.attr_ints("scan_output_directions", zeros(num_scan_outputs_));
    }
    OT_CHECK(input_axes_.size() == static_cast<size_t>(num_scan_inputs_) &&
                 input_dirs_.size() == static_cast<size_t>(num_scan_inputs_) &&
                 output_axes_.size() == static_cast<size_t>(num_scan_outputs_) &&
                 output_dirs_.size() == static_cast<size_t>(num_scan_outputs_),
             describe_, ": scan axes and directions need one entry per scan input and output");
  }

  void compute(KernelContext& ctx) const override {
    const int first = batched_ ? 1 : 0;
    std::vector<Tensor> states, scans;
    for (int k = 0; k < num_state_; ++k) states.push_back(ctx.input(first + k));
    for (int k = 0; k < num_scan_inputs_; ++k) scans.push_back(ctx.input(first + num_state_ + k));
    const std::vector<Tensor> captured = inputs_from(ctx, first + num_state_ + num_scan_inputs_);
    std::vector<Tensor> results;
    if (!batched_) {
      results = scan(states, scans, captured, ctx);
    } else {
      const int64_t batch = scans[0].rank() >= 2 ? scans[0].dim(0) : -1;
      OT_CHECK(batch >= 0, describe_, ": Scan-8 scan inputs need [batch, sequence, ...], got ", scans[0].str());
      if (ctx.has_input(0))
        for (int64_t len : ctx.input(0).to_int64_vector())
          if (len != scans[0].dim(1))
            throw UnsupportedError(str_cat(describe_, ": sequence_lens shorter than the scan inputs are not supported"));
      // Scan-8 cuts every state and scan input along its leading batch dim (a fuzzer crash: a
      // scalar state).
      for (size_t k = 0; k < states.size(); ++k)
        OT_CHECK(states[k].rank() >= 1 && states[k].dim(0) == batch, describe_, ": Scan-8 state ", k,
                 " needs a leading batch dim of ", batch, ", got ", states[k].str());
      for (size_t k = 0; k < scans.size(); ++k)
        OT_CHECK(scans[k].rank() >= 2 && scans[k].dim(0) == batch, describe_, ": Scan-8 scan input ", k,
                 " needs [batch ", batch, ", sequence, ...], got ", scans[k].str());
      std::vector<std::vector<Tensor>> per_batch(static_cast<size_t>(num_state_ + num_scan_outputs_));
      for (int64_t b = 0; b < batch; ++b) {
        std::vector<Tensor> st, sc;
        for (const Tensor& t : states) st.push_back(slice_along(t, 0, b));
        for (const Tensor& t : scans) sc.push_back(slice_along(t, 0, b));
        std::vector<Tensor> r = scan(st, sc, captured, ctx);
        for (size_t k = 0; k < r.size(); ++k) per_batch[k].push_back(r[k]);
      }
      for (size_t k = 0; k < per_batch.size(); ++k) results.push_back(stack(per_batch[k], 0, DType::Float32));
    }
    for (size_t k = 0; k < results.size(); ++k) write_output(ctx, static_cast<int>(k), results[k]);
  }

 private:
  // One scan: final states, then the stacked scan outputs.
  std::vector<Tensor> scan(std::vector<Tensor> state, const std::vector<Tensor>& scan_inputs,
                           const std::vector<Tensor>& captured, const KernelContext& ctx) const {
    std::vector<int> axes;
    int64_t length = -1;
    for (int k = 0; k < num_scan_inputs_; ++k) {
      const Tensor& t = scan_inputs[static_cast<size_t>(k)];
      const int axis = normalize_axis(input_axes_[static_cast<size_t>(k)], t.rank());
      axes.push_back(axis);
      OT_CHECK(length < 0 || t.dim(axis) == length, describe_, ": scan inputs differ in length along their axes");
      length = t.dim(axis);
    }
    OT_CHECK(length <= loop_iteration_limit(), describe_, " would run ", length, " iterations, above the limit of ",
             loop_iteration_limit(), " (ONNXTRAIN_MAX_LOOP_ITERATIONS)");
    std::vector<std::vector<Tensor>> outs(static_cast<size_t>(num_scan_outputs_));
    for (int64_t it = 0; it < length; ++it) {
      std::vector<Tensor> in = state;
      for (int k = 0; k < num_scan_inputs_; ++k) {
        const int64_t idx = input_dirs_[static_cast<size_t>(k)] ? length - 1 - it : it;
        in.push_back(slice_along(scan_inputs[static_cast<size_t>(k)], axes[static_cast<size_t>(k)], idx));
      }
      in.insert(in.end(), captured.begin(), captured.end());
      std::vector<Tensor> out = body_.run(in, ctx);
      for (int k = 0; k < num_state_; ++k) state[static_cast<size_t>(k)] = out[static_cast<size_t>(k)];
      for (int k = 0; k < num_scan_outputs_; ++k) outs[static_cast<size_t>(k)].push_back(out[static_cast<size_t>(num_state_ + k)]);
    }
    std::vector<Tensor> results = state;
    for (int k = 0; k < num_scan_outputs_; ++k) {
      auto& parts = outs[static_cast<size_t>(k)];
      if (output_dirs_[static_cast<size_t>(k)]) std::reverse(parts.begin(), parts.end());
      const int rank = parts.empty() ? 0 : parts[0].rank();
      results.push_back(stack(parts, normalize_axis(output_axes_[static_cast<size_t>(k)], rank + 1), DType::Float32));
    }
    return results;
  }

  int normalize_axis(int64_t axis, int rank) const {
    OT_CHECK(axis >= -rank && axis < rank, describe_, ": scan axis ", axis, " is out of range for rank ", rank);
    return static_cast<int>(axis < 0 ? axis + rank : axis);
  }

  CompiledBody body_;
  std::string describe_;
  bool batched_ = false;
  int num_state_ = 0, num_scan_inputs_ = 0, num_scan_outputs_ = 0;
  std::vector<int64_t> input_axes_, input_dirs_, output_axes_, output_dirs_;
};

}  // namespace

ONNXTRAIN_KERNEL(kOnnxTrainDomain, "Loop", kernel_factory<LoopKernel>(), Recompute::Costly, Rounding::PerValue);
ONNXTRAIN_KERNEL(kOnnxTrainDomain, "Scan", kernel_factory<ScanKernel>(), Recompute::Costly, Rounding::PerValue);

}  // namespace onnxtrain
