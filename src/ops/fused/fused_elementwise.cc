// ai.onnxtrain::FusedElementwise: a chain of elementwise ops as one loop, each op one instruction
// (opdef/elementwise_instruction.h) that the op defines beside its own kernel. The output shape
// is the broadcast of the inputs; the loop walks it in blocks of up to kBlock elements, evaluates
// every instruction over the block in registers that stay in L1, and writes only the node's
// outputs: the intermediates of the chain never reach memory.
//
// Each instruction computes exactly what the standalone kernel of its op computes (the same
// formulas, the same vectorized float32 transcendentals), so fusion changes no result. 16-bit
// floats are computed on in float32 registers and rounded once per output, not per instruction.
#include <array>
#include <cstring>
#include <optional>
#include <vector>

#include "opdef/op_registry.h"
#include "ops/common/broadcast.h"
#include "ops/common/elementwise.h"
#include "runtime/half_convert.h"
#include "runtime/thread_pool.h"

namespace onnxtrain {
namespace {

constexpr int64_t kBlock = 512;

// One instruction over n elements, in the registers' type.
template <typename T>
void run(const ElementwiseInstruction& op, float imm, float imm2, const T* a, const T* b, T* o, int64_t n) {
  if constexpr (std::is_same_v<T, float>) op.float32(a, b, o, n, imm, imm2);
  else op.float64(a, b, o, n, imm, imm2);
}

// The output shape coalesced to [rows, inner]-style loops: dims where every operand (output
// first) is contiguous with the next merge into one, so that inner runs are as long as possible.
struct Walk {
  int rank = 0;
  std::array<int64_t, TensorShape::kMaxRank> dims{};
  std::vector<std::array<int64_t, TensorShape::kMaxRank>> strides;  // per operand, 0 where broadcast
};

Walk coalesce(const TensorShape& out, const std::vector<TensorShape>& inputs) {
  const int rank = out.rank();
  std::vector<std::array<int64_t, TensorShape::kMaxRank>> full;
  std::array<int64_t, TensorShape::kMaxRank> own{};
  int64_t s = 1;
  for (int d = rank - 1; d >= 0; --d) {
    own[d] = s;
    s *= out[d];
  }
  full.push_back(own);
  for (const auto& in : inputs) full.push_back(broadcast_strides(in, out));
  Walk w;
  w.strides.assign(full.size(), {});
  for (int d = 0; d < rank; ++d) {
    if (out[d] == 1) continue;
    bool merge = w.rank > 0;
    for (size_t k = 0; merge && k < full.size(); ++k)
      merge = w.strides[k][w.rank - 1] == full[k][d] * out[d];
    if (merge) {
      w.dims[w.rank - 1] *= out[d];
      for (size_t k = 0; k < full.size(); ++k) w.strides[k][w.rank - 1] = full[k][d];
    } else {
      w.dims[w.rank] = out[d];
      for (size_t k = 0; k < full.size(); ++k) w.strides[k][w.rank] = full[k][d];
      ++w.rank;
    }
  }
  return w;
}

class FusedElementwiseKernel final : public Kernel {
 public:
  explicit FusedElementwiseKernel(const KernelInfo& info)
      : ops_(resolved(info.node.attr_strings("ops"))),
        args_(info.node.attr_ints("args")),
        consts_(info.node.attr_floats("consts")),
        consts2_(info.node.has_attr("consts2") ? info.node.attr_floats("consts2") : std::vector<float>(ops_.size(), 0.0f)),
        outputs_(info.node.attr_ints("outputs")),
        num_inputs_(static_cast<int64_t>(info.node.inputs.size())) {
    OT_CHECK(args_.size() == 2 * ops_.size() && consts_.size() == ops_.size() && consts2_.size() == ops_.size(),
             "malformed program: ", ops_.size(), " ops, ", args_.size(), " args, ", consts_.size(), " consts, ",
             consts2_.size(), " consts2");
    OT_CHECK(outputs_.size() == info.node.outputs.size(), "program has ", outputs_.size(), " outputs for ",
             info.node.outputs.size(), " node outputs");
    for (size_t i = 0; i < ops_.size(); ++i) {
      const int64_t limit = num_inputs_ + static_cast<int64_t>(i);
      for (int a = 0; a < ops_[i]->arity; ++a)
        OT_CHECK(args_[2 * i + a] >= 0 && args_[2 * i + a] < limit, "instruction ", i, " reads register ",
                 args_[2 * i + a], ", which is not defined before it");
    }
    for (int64_t r : outputs_)
      OT_CHECK(r >= 0 && r < num_inputs_ + static_cast<int64_t>(ops_.size()), "output register ", r, " is not defined");
  }

  void compute(KernelContext& ctx) const override {
    const DType dtype = ctx.input(0).dtype();
    std::vector<TensorShape> shapes;
    for (int64_t i = 0; i < num_inputs_; ++i) {
      const Tensor& t = ctx.input(static_cast<int>(i));
      OT_CHECK(t.dtype() == dtype, "input ", i, " ", t.str(), " differs in element type from input 0 ",
               ctx.input(0).str());
      shapes.push_back(t.shape());
    }
    // The inputs need not broadcast together: a group may hold independent chains that share an
    // operand (a scale multiplying both q and k^T, of other shapes), which run op by op.
    const std::optional<TensorShape> joint = try_broadcast_shapes(shapes);
    // Each register's own shape: an output narrower than the broadcast (two broadcast operands
    // combined before meeting a full one) cannot come out of the blocked loop.
    std::vector<TensorShape> reg_shapes = shapes;
    for (size_t k = 0; k < ops_.size(); ++k) {
      const TensorShape& a = reg_shapes[static_cast<size_t>(args_[2 * k])];
      reg_shapes.push_back(ops_[k]->arity == 2
                               ? broadcast_shapes({a, reg_shapes[static_cast<size_t>(args_[2 * k + 1])]}, "FusedElementwise")
                               : a);
    }
    bool blocked = joint.has_value();
    for (int64_t r : outputs_) blocked = blocked && reg_shapes[static_cast<size_t>(r)] == *joint;
    // 16-bit floats are read into float32 registers block by block and rounded once when written:
    // half the memory traffic of float32, and no widened copies.
    if (is_16bit_float(dtype)) {
      if (!blocked) run_op_by_op_widened(ctx, reg_shapes);
      else if (dtype == DType::BFloat16) run_blocked<BHalf, float>(ctx, *joint, shapes);
      else run_blocked<Half, float>(ctx, *joint, shapes);
      return;
    }
    dispatch_float(dtype, "FusedElementwise", [&](auto tag) {
      using T = typename decltype(tag)::type;
      if (blocked) run_blocked<T, T>(ctx, *joint, shapes);
      else run_op_by_op<T>(ctx, reg_shapes, ctx_inputs(ctx), dtype, [&](size_t o, const Tensor& r) {
        ctx.allocate_output(static_cast<int>(o), dtype, r.shape()).copy_from(r);
      });
    });
  }

 private:
  static std::vector<const ElementwiseInstruction*> resolved(const std::vector<std::string>& names) {
    std::vector<const ElementwiseInstruction*> ops;
    for (const auto& name : names) {
      const ElementwiseInstruction* op = OpRegistry::instance().instruction(name);
      OT_CHECK(op, "unknown instruction '", name, "'");
      ops.push_back(op);
    }
    return ops;
  }

  static std::vector<Tensor> ctx_inputs(KernelContext& ctx) {
    std::vector<Tensor> inputs;
    for (int i = 0; i < ctx.num_inputs(); ++i) inputs.push_back(ctx.input(i));
    return inputs;
  }

  // The general case on 16-bit floats: float32 copies of the inputs, each output rounded once.
  void run_op_by_op_widened(KernelContext& ctx, const std::vector<TensorShape>& reg_shapes) const {
    std::vector<Tensor> inputs;
    for (int i = 0; i < ctx.num_inputs(); ++i) inputs.push_back(widened_to_float32(ctx.threads(), ctx.input(i)));
    const DType dtype = ctx.input(0).dtype();
    run_op_by_op<float>(ctx, reg_shapes, inputs, DType::Float32, [&](size_t o, const Tensor& r) {
      round_into(ctx.threads(), r.data<float>(), ctx.allocate_output(static_cast<int>(o), dtype, r.shape()));
    });
  }

  // Every register materialized at its own shape, operands expanded to it: the general case.
  // `write(o, value)` makes output o from its register.
  template <typename T, typename Write>
  void run_op_by_op(KernelContext& ctx, const std::vector<TensorShape>& reg_shapes, std::vector<Tensor> regs,
                    DType dtype, Write write) const {
    for (size_t k = 0; k < ops_.size(); ++k) {
      const ElementwiseInstruction& op = *ops_[k];
      const TensorShape& shape = reg_shapes[static_cast<size_t>(num_inputs_) + k];
      auto expanded = [&](int64_t r) {
        const Tensor& src = regs[static_cast<size_t>(r)];
        if (src.shape() == shape) return src;
        Tensor full = Tensor::empty(dtype, shape);
        binary_broadcast(ctx.threads(), src.data<T>(), src.shape(), src.data<T>(), src.shape(), full.data<T>(), shape,
                         [](T a, T) { return a; });
        return full;
      };
      const Tensor a = expanded(args_[2 * k]);
      const Tensor b = op.arity == 2 ? expanded(args_[2 * k + 1]) : Tensor();
      Tensor out = Tensor::empty(dtype, shape);
      run<T>(op, consts_[k], consts2_[k], a.data<T>(), b.defined() ? b.data<T>() : nullptr, out.data<T>(), shape.numel());
      regs.push_back(out);
    }
    for (size_t o = 0; o < outputs_.size(); ++o) write(o, regs[static_cast<size_t>(outputs_[o])]);
  }

  // Values of type `Storage` in memory, computed on in registers of type T.
  template <typename Storage, typename T>
  void run_blocked(KernelContext& ctx, const TensorShape& shape, const std::vector<TensorShape>& shapes) const {
    constexpr bool same = std::is_same_v<Storage, T>;
    std::vector<Storage*> out_ptrs;
    for (size_t o = 0; o < outputs_.size(); ++o)
      out_ptrs.push_back(ctx.allocate_output(static_cast<int>(o), ctx.input(0).dtype(), shape).template data<Storage>());
    const int64_t n = shape.numel();
    if (n == 0) return;
    std::vector<const Storage*> in_ptrs;
    for (int64_t i = 0; i < num_inputs_; ++i)
      in_ptrs.push_back(ctx.input(static_cast<int>(i)).template data<Storage>());
    const Walk w = coalesce(shape, shapes);
    const int last = w.rank - 1;
    const int64_t inner = w.rank == 0 ? 1 : w.dims[last];
    const int64_t blocks_per_row = (inner + kBlock - 1) / kBlock, rows = n / inner;
    const size_t regs = static_cast<size_t>(num_inputs_) + ops_.size();
    ctx.threads().parallel_for(rows * blocks_per_row, std::max<int64_t>(1, (int64_t(1) << 15) / std::min(inner, kBlock)),
                               [&](int64_t t0, int64_t t1) {
      std::vector<T> storage(regs * static_cast<size_t>(kBlock));
      std::vector<const T*> reg(regs);
      std::vector<int64_t> off(static_cast<size_t>(num_inputs_) + 1, 0);
      for (int64_t t = t0; t < t1; ++t) {
        const int64_t row = t / blocks_per_row, b0 = (t % blocks_per_row) * kBlock;
        const int64_t len = std::min(kBlock, inner - b0);
        // Element offsets of this row in every operand (output first).
        std::fill(off.begin(), off.end(), 0);
        int64_t rem = row;
        for (int d = last - 1; d >= 0; --d) {
          const int64_t idx = rem % w.dims[d];
          rem /= w.dims[d];
          for (size_t k = 0; k < off.size(); ++k) off[k] += idx * w.strides[k][d];
        }
        for (int64_t i = 0; i < num_inputs_; ++i) {
          const int64_t stride = w.rank == 0 ? 0 : w.strides[static_cast<size_t>(i) + 1][last];
          const Storage* src = in_ptrs[static_cast<size_t>(i)] + off[static_cast<size_t>(i) + 1];
          T* dst = storage.data() + static_cast<size_t>(i) * kBlock;
          if (stride == 1) {
            if constexpr (same) {
              reg[static_cast<size_t>(i)] = src + b0;
              continue;
            } else {
              for (int64_t e = 0; e < len; ++e) dst[e] = widened_to_float(src[b0 + e]);
            }
          } else {  // broadcast along the run: one value, spread over the block
            if constexpr (same) std::fill(dst, dst + len, src[0]);
            else std::fill(dst, dst + len, widened_to_float(src[0]));
          }
          reg[static_cast<size_t>(i)] = dst;
        }
        for (size_t k = 0; k < ops_.size(); ++k) {
          const size_t r = static_cast<size_t>(num_inputs_) + k;
          T* dst = storage.data() + r * kBlock;
          const ElementwiseInstruction& op = *ops_[k];
          run<T>(op, consts_[k], consts2_[k], reg[static_cast<size_t>(args_[2 * k])],
                 op.arity == 2 ? reg[static_cast<size_t>(args_[2 * k + 1])] : nullptr, dst, len);
          reg[r] = dst;
        }
        for (size_t o = 0; o < outputs_.size(); ++o) {
          const T* value = reg[static_cast<size_t>(outputs_[o])];
          Storage* out = out_ptrs[o] + off[0] + b0;
          if constexpr (same) {
            std::memcpy(out, value, static_cast<size_t>(len) * sizeof(T));
          } else {
            for (int64_t e = 0; e < len; ++e) out[e] = rounded_from_float<Storage>(value[e]);
          }
        }
      }
    });
  }

  std::vector<const ElementwiseInstruction*> ops_;
  std::vector<int64_t> args_;
  std::vector<float> consts_, consts2_;
  std::vector<int64_t> outputs_;
  int64_t num_inputs_;
};

}  // namespace

ONNXTRAIN_KERNEL(kOnnxTrainDomain, "FusedElementwise", kernel_factory<FusedElementwiseKernel>(),
                 Recompute::Costly, Rounding::PerValue);
// 16-bit floats in float32 registers (compute above).
ONNXTRAIN_NATIVE_16BIT_FLOATS(kOnnxTrainDomain, "FusedElementwise", kBothHalfFloats);

}  // namespace onnxtrain
