// ai.onnxtrain::FusedElementwise: a chain of elementwise ops (elementwise_program.h) as one loop.
// The output shape is the broadcast of the inputs; the loop walks it in blocks of up to kBlock
// elements, evaluates every instruction over the block in registers that stay in L1, and writes
// only the node's outputs: the intermediates of the chain never reach memory.
//
// Each instruction computes exactly what the standalone kernel of its op computes (the same
// formulas, the same vectorized float32 transcendentals), so fusion changes no result. 16-bit
// floats are computed on in float32 registers and rounded once per output, not per instruction.
#include <cmath>
#include <cstring>
#include <vector>

#include "ops/activation/gelu_math.h"
#include "ops/activation/hard_tanh_math.h"
#include "ops/activation/leaky_relu_math.h"
#include "ops/activation/silu_math.h"
#include "ops/common/broadcast.h"
#include "ops/common/elementwise.h"
#include "ops/fused/elementwise_program.h"
#include "ops/math/fast_math.h"
#include "ops/registry.h"
#include "runtime/half_convert.h"
#include "runtime/thread_pool.h"

namespace onnxtrain {
namespace fused {

int arity(Opcode op) {
  switch (op) {
    case Opcode::Add: case Opcode::Sub: case Opcode::Mul: case Opcode::Div:
    case Opcode::ReluGrad: case Opcode::SigmoidGrad: case Opcode::TanhGrad:
    case Opcode::GeluExactGrad: case Opcode::GeluTanhGrad: case Opcode::SiluGrad:
    case Opcode::HardTanhGrad:
      return 2;
    default:
      return 1;
  }
}

bool lower(const Node& n, Lowered& out) {
  const std::string& op = n.op_type;
  const int inputs = static_cast<int>(n.inputs.size());
  if (n.outputs.size() != 1) return false;
  for (const auto& in : n.inputs)
    if (in.empty()) return false;
  if (n.domain.empty()) {
    static const std::pair<const char*, Opcode> binary[] = {
        {"Add", Opcode::Add}, {"Sub", Opcode::Sub}, {"Mul", Opcode::Mul}, {"Div", Opcode::Div}};
    static const std::pair<const char*, Opcode> unary[] = {
        {"Neg", Opcode::Neg}, {"Abs", Opcode::Abs}, {"Exp", Opcode::Exp}, {"Log", Opcode::Log},
        {"Sqrt", Opcode::Sqrt}, {"Reciprocal", Opcode::Reciprocal}, {"Relu", Opcode::Relu},
        {"Sigmoid", Opcode::Sigmoid}, {"Tanh", Opcode::Tanh}, {"Erf", Opcode::Erf}};
    for (const auto& [name, code] : binary)
      if (op == name && inputs == 2) return out = {code}, true;
    if (op == "Sum" && inputs == 2) return out = {Opcode::Add}, true;  // how gradients accumulate
    for (const auto& [name, code] : unary)
      if (op == name && inputs == 1) return out = {code}, true;
    if (op == "LeakyRelu" && inputs == 1) return out = {Opcode::LeakyRelu, n.attr_float("alpha", 0.01f)}, true;
    return false;
  }
  if (n.domain != kOnnxTrainDomain) return false;
  const std::string approximate = n.attr_string("approximate", "none");
  if (approximate != "none" && approximate != "tanh") return false;
  const bool tanh = approximate == "tanh";
  if (op == "Gelu" && inputs == 1) return out = {tanh ? Opcode::GeluTanh : Opcode::GeluExact}, true;
  if (op == "GeluGrad" && inputs == 2) return out = {tanh ? Opcode::GeluTanhGrad : Opcode::GeluExactGrad}, true;
  if (op == "Silu" && inputs == 1) return out = {Opcode::Silu}, true;
  if (op == "SiluGrad" && inputs == 2) return out = {Opcode::SiluGrad}, true;
  if ((op == "HardTanh" && inputs == 1) || (op == "HardTanhGrad" && inputs == 2)) {
    const float lo = n.attr_float("min_val", -1.0f), hi = n.attr_float("max_val", 1.0f);
    if (!(lo <= hi)) return false;  // the standalone kernel names the node in its error
    return out = {op == "HardTanh" ? Opcode::HardTanh : Opcode::HardTanhGrad, lo, hi}, true;
  }
  if (op == "ReluGrad" && inputs == 2) return out = {Opcode::ReluGrad}, true;
  if (op == "SigmoidGrad" && inputs == 2) return out = {Opcode::SigmoidGrad}, true;
  if (op == "TanhGrad" && inputs == 2) return out = {Opcode::TanhGrad}, true;
  return false;
}

}  // namespace fused

namespace {

using fused::Opcode;
constexpr int64_t kBlock = 512;

// out[i] = f(a[i]) over 8-lane vectors, the tail padded into one more vector (as fast::map).
template <typename F>
void vec_map(const float* a, float* out, int64_t n, F f) {
  int64_t i = 0;
  for (; i + fast::kLanes <= n; i += fast::kLanes) {
    fast::VF v;
    std::memcpy(&v, a + i, sizeof v);
    v = f(v);
    std::memcpy(out + i, &v, sizeof v);
  }
  if (i < n) {
    const size_t bytes = static_cast<size_t>(n - i) * sizeof(float);
    fast::VF v = fast::splat(0.0f);
    std::memcpy(&v, a + i, bytes);
    v = f(v);
    std::memcpy(out + i, &v, bytes);
  }
}

template <typename F>
void vec_zip(const float* a, const float* b, float* out, int64_t n, F f) {
  int64_t i = 0;
  for (; i + fast::kLanes <= n; i += fast::kLanes) {
    fast::VF va, vb;
    std::memcpy(&va, a + i, sizeof va);
    std::memcpy(&vb, b + i, sizeof vb);
    const fast::VF v = f(va, vb);
    std::memcpy(out + i, &v, sizeof v);
  }
  if (i < n) {
    const size_t bytes = static_cast<size_t>(n - i) * sizeof(float);
    fast::VF va = fast::splat(0.0f), vb = fast::splat(0.0f);
    std::memcpy(&va, a + i, bytes);
    std::memcpy(&vb, b + i, bytes);
    const fast::VF v = f(va, vb);
    std::memcpy(out + i, &v, bytes);
  }
}

// One instruction over n elements. float32 takes the vector forms the standalone kernels use.
template <typename T>
void run(Opcode op, float imm, float imm2, const T* a, const T* b, T* o, int64_t n) {
  constexpr bool f32 = std::is_same_v<T, float>;
  switch (op) {
    case Opcode::Add: for (int64_t i = 0; i < n; ++i) o[i] = a[i] + b[i]; return;
    case Opcode::Sub: for (int64_t i = 0; i < n; ++i) o[i] = a[i] - b[i]; return;
    case Opcode::Mul: for (int64_t i = 0; i < n; ++i) o[i] = a[i] * b[i]; return;
    case Opcode::Div: for (int64_t i = 0; i < n; ++i) o[i] = a[i] / b[i]; return;
    case Opcode::Neg: for (int64_t i = 0; i < n; ++i) o[i] = -a[i]; return;
    case Opcode::Abs: for (int64_t i = 0; i < n; ++i) o[i] = std::abs(a[i]); return;
    case Opcode::Log:  // the Log kernel's own forms, so that fusing does not change a bit
      if constexpr (f32) return vec_map(a, o, n, [](fast::VF v) { return fast::log(v); });
      else for (int64_t i = 0; i < n; ++i) o[i] = std::log(a[i]);
      return;
    case Opcode::Sqrt: for (int64_t i = 0; i < n; ++i) o[i] = std::sqrt(a[i]); return;
    case Opcode::Reciprocal: for (int64_t i = 0; i < n; ++i) o[i] = T(1) / a[i]; return;
    case Opcode::Relu: for (int64_t i = 0; i < n; ++i) o[i] = a[i] <= T(0) ? T(0) : a[i]; return;
    case Opcode::ReluGrad: for (int64_t i = 0; i < n; ++i) o[i] = b[i] <= T(0) ? T(0) : a[i]; return;
    case Opcode::SigmoidGrad: for (int64_t i = 0; i < n; ++i) o[i] = a[i] * b[i] * (T(1) - b[i]); return;
    case Opcode::TanhGrad: for (int64_t i = 0; i < n; ++i) o[i] = a[i] * (T(1) - b[i] * b[i]); return;
    case Opcode::LeakyRelu: {
      const T alpha = static_cast<T>(imm);
      if constexpr (f32) return vec_map(a, o, n, [alpha](fast::VF v) { return leaky_relu_math::forward(v, alpha); });
      else for (int64_t i = 0; i < n; ++i) o[i] = leaky_relu_math::forward(a[i], alpha);
      return;
    }
    case Opcode::Exp:
      if constexpr (f32) return vec_map(a, o, n, [](fast::VF v) { return fast::exp(v); });
      else for (int64_t i = 0; i < n; ++i) o[i] = std::exp(a[i]);
      return;
    case Opcode::Erf:
      if constexpr (f32) return vec_map(a, o, n, [](fast::VF v) { return fast::erf(v); });
      else for (int64_t i = 0; i < n; ++i) o[i] = std::erf(a[i]);
      return;
    case Opcode::Tanh:
      if constexpr (f32) return vec_map(a, o, n, [](fast::VF v) { return fast::tanh(v); });
      else for (int64_t i = 0; i < n; ++i) o[i] = std::tanh(a[i]);
      return;
    case Opcode::Sigmoid:
      if constexpr (f32) return vec_map(a, o, n, [](fast::VF v) { return fast::sigmoid(v); });
      else for (int64_t i = 0; i < n; ++i) o[i] = silu_math::sigmoid(a[i]);
      return;
    case Opcode::GeluExact:
      if constexpr (f32) return vec_map(a, o, n, [](fast::VF v) { return gelu_math::exact(v); });
      else for (int64_t i = 0; i < n; ++i) o[i] = gelu_math::exact(a[i]);
      return;
    case Opcode::GeluTanh:
      if constexpr (f32) return vec_map(a, o, n, [](fast::VF v) { return gelu_math::tanh_form(v); });
      else for (int64_t i = 0; i < n; ++i) o[i] = gelu_math::tanh_form(a[i]);
      return;
    case Opcode::GeluExactGrad:
      if constexpr (f32) return vec_zip(a, b, o, n, [](fast::VF g, fast::VF v) { return gelu_math::exact_grad(g, v); });
      else for (int64_t i = 0; i < n; ++i) o[i] = gelu_math::exact_grad(a[i], b[i]);
      return;
    case Opcode::GeluTanhGrad:
      if constexpr (f32) return vec_zip(a, b, o, n, [](fast::VF g, fast::VF v) { return gelu_math::tanh_grad(g, v); });
      else for (int64_t i = 0; i < n; ++i) o[i] = gelu_math::tanh_grad(a[i], b[i]);
      return;
    case Opcode::Silu:
      if constexpr (f32) return vec_map(a, o, n, [](fast::VF v) { return silu_math::forward(v); });
      else for (int64_t i = 0; i < n; ++i) o[i] = silu_math::forward(a[i]);
      return;
    case Opcode::SiluGrad:
      if constexpr (f32) return vec_zip(a, b, o, n, [](fast::VF g, fast::VF v) { return silu_math::grad(g, v); });
      else for (int64_t i = 0; i < n; ++i) o[i] = silu_math::grad(a[i], b[i]);
      return;
    case Opcode::HardTanh:
      if constexpr (f32) return vec_map(a, o, n, [imm, imm2](fast::VF v) { return hard_tanh_math::forward(v, imm, imm2); });
      else for (int64_t i = 0; i < n; ++i) o[i] = hard_tanh_math::forward(a[i], T(imm), T(imm2));
      return;
    case Opcode::HardTanhGrad:
      if constexpr (f32) {
        return vec_zip(a, b, o, n, [imm, imm2](fast::VF g, fast::VF v) { return hard_tanh_math::grad(g, v, imm, imm2); });
      } else {
        for (int64_t i = 0; i < n; ++i) o[i] = hard_tanh_math::grad(a[i], b[i], T(imm), T(imm2));
      }
      return;
    case Opcode::kCount: break;
  }
  OT_THROW("FusedElementwise: unknown opcode ", static_cast<int64_t>(op));
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
      : ops_(info.node.attr_ints("ops")),
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
      OT_CHECK(ops_[i] >= 0 && ops_[i] < static_cast<int64_t>(Opcode::kCount), "unknown opcode ", ops_[i]);
      const int64_t limit = num_inputs_ + static_cast<int64_t>(i);
      for (int a = 0; a < fused::arity(static_cast<Opcode>(ops_[i])); ++a)
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
      const Opcode op = static_cast<Opcode>(ops_[k]);
      const TensorShape& a = reg_shapes[static_cast<size_t>(args_[2 * k])];
      reg_shapes.push_back(fused::arity(op) == 2
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
      const Opcode op = static_cast<Opcode>(ops_[k]);
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
      const Tensor b = fused::arity(op) == 2 ? expanded(args_[2 * k + 1]) : Tensor();
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
          const Opcode op = static_cast<Opcode>(ops_[k]);
          run<T>(op, consts_[k], consts2_[k], reg[static_cast<size_t>(args_[2 * k])],
                 fused::arity(op) == 2 ? reg[static_cast<size_t>(args_[2 * k + 1])] : nullptr, dst, len);
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

  std::vector<int64_t> ops_, args_;
  std::vector<float> consts_, consts2_;
  std::vector<int64_t> outputs_;
  int64_t num_inputs_;
};

}  // namespace

ONNXTRAIN_KERNEL(kOnnxTrainDomain, "FusedElementwise", kernel_factory<FusedElementwiseKernel>());
// 16-bit floats in float32 registers (compute above).
ONNXTRAIN_NATIVE_16BIT_FLOATS(kOnnxTrainDomain, "FusedElementwise", kBothHalfFloats);

}  // namespace onnxtrain
