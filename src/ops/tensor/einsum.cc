// Einsum, and EinsumGrad which its gradient uses.
//
// Every operand becomes a strided view over its distinct labels: a repeated label (a diagonal)
// is one dim whose stride is the sum of the repeated dims' strides, and size-1 dims are dropped
// (they broadcast). Operands are then contracted left to right, each pair as one batched matmul
// (ops/math/matmul.h) over [batch, free, contracted] groups of labels; labels no later step
// needs are summed while an operand is copied into that layout, and the copy is skipped when the
// view already has it. A last strided pass writes the output.
//
// EinsumGrad(dY, other operands..., input_shape) evaluates "out,others->in_i": its output term
// may repeat a label (the gradient lands on a diagonal, zeros elsewhere) and hold labels no
// operand has (the gradient broadcasts along them, sized by input_shape) or that are 1 in
// input_shape but wider in the operands (the gradient sums over them).
#include <cstring>

#include "opdef/op_registry.h"
#include "ops/common/elementwise.h"
#include "ops/math/matmul.h"
#include "ops/tensor/einsum_equation.h"
#include "ops/tensor/indexing.h"
#include "runtime/thread_pool.h"

namespace onnxtrain {
namespace {

template <typename T>
struct Operand {
  const T* data = nullptr;
  std::vector<int> labels;  // distinct, each of size > 1
  std::vector<int64_t> sizes, strides;
  int find(int l) const {
    auto it = std::find(labels.begin(), labels.end(), l);
    return it == labels.end() ? -1 : static_cast<int>(it - labels.begin());
  }
};

// One scratch block handed out in order. A planning pass (no base) only counts, so the kernel
// asks ctx.scratch once with the total.
template <typename T>
class Bump {
 public:
  explicit Bump(T* base) : base_(base) {}
  T* take(int64_t n) {
    T* p = base_ ? base_ + used_ : nullptr;
    used_ += n;
    return p;
  }
  int64_t used() const { return used_; }

 private:
  T* base_;
  int64_t used_ = 0;
};

int64_t product(const std::vector<int64_t>& v) {
  int64_t n = 1;
  for (int64_t d : v) n *= d;
  return n;
}

// dst[k] = sum over r of src[k, r]: kept dims (size, src_stride, dst_stride) and summed dims
// (rsize, rstride), any number of each.
template <typename T>
void strided_sum(ThreadPool& pool, const T* src, T* dst, const std::vector<int64_t>& size,
                 const std::vector<int64_t>& sst, const std::vector<int64_t>& dst_st, const std::vector<int64_t>& rsize,
                 const std::vector<int64_t>& rst) {
  const int64_t n = product(size), reduced = product(rsize);
  if (n == 0) return;
  const int kr = static_cast<int>(size.size()), rr = static_cast<int>(rsize.size());
  const int64_t inner = kr ? size.back() : 1, is = kr ? sst.back() : 0, id = kr ? dst_st.back() : 0;
  const int64_t rinner = rr ? rsize.back() : 1, ris = rr ? rst.back() : 0;
  // Sum of p over the summed dims; ctr is the caller's counter buffer (one per task).
  auto element = [&](const T* p, int64_t* ctr) {
    T acc = 0;
    if (reduced == 0) return acc;
    std::fill(ctr, ctr + rr, 0);
    int64_t off = 0;
    for (int64_t r = 0; r < reduced; r += rinner) {
      for (int64_t j = 0; j < rinner; ++j) acc += p[off + j * ris];
      for (int d = rr - 2; d >= 0; --d) {
        if (++ctr[d] < rsize[static_cast<size_t>(d)]) {
          off += rst[static_cast<size_t>(d)];
          break;
        }
        off -= rst[static_cast<size_t>(d)] * (rsize[static_cast<size_t>(d)] - 1);
        ctr[d] = 0;
      }
    }
    return acc;
  };
  const int64_t work = std::max<int64_t>(1, inner * std::max<int64_t>(reduced, 1));
  pool.parallel_for(n / inner, std::max<int64_t>(1, kParallelGrain / work), [&](int64_t r0, int64_t r1) {
    std::vector<int64_t> ctr(static_cast<size_t>(rr) + 1);
    for (int64_t row = r0; row < r1; ++row) {
      int64_t rem = row, so = 0, dof = 0;
      for (int d = kr - 2; d >= 0; --d) {
        const int64_t i = rem % size[static_cast<size_t>(d)];
        rem /= size[static_cast<size_t>(d)];
        so += i * sst[static_cast<size_t>(d)];
        dof += i * dst_st[static_cast<size_t>(d)];
      }
      if (rr == 0) {
        for (int64_t i = 0; i < inner; ++i) dst[dof + i * id] = src[so + i * is];
      } else {
        for (int64_t i = 0; i < inner; ++i) dst[dof + i * id] = element(src + so + i * is, ctr.data());
      }
    }
  });
}

template <typename T>
bool contiguous_as(const Operand<T>& v, const std::vector<int>& order) {
  if (order.size() != v.labels.size()) return false;
  int64_t expect = 1;
  for (size_t k = order.size(); k-- > 0;) {
    const int p = v.find(order[k]);
    if (p < 0 || v.strides[static_cast<size_t>(p)] != expect) return false;
    expect *= v.sizes[static_cast<size_t>(p)];
  }
  return true;
}

// v's labels in `keep` order, contiguous; labels not in `keep` are summed. No copy when v
// already is that layout.
template <typename T>
Operand<T> materialize(ThreadPool& pool, const Operand<T>& v, const std::vector<int>& keep, Bump<T>& bump, bool run) {
  Operand<T> r;
  r.labels = keep;
  std::vector<int64_t> kst, rsz, rst;
  for (int l : keep) {
    const int p = v.find(l);
    r.sizes.push_back(v.sizes[static_cast<size_t>(p)]);
    kst.push_back(v.strides[static_cast<size_t>(p)]);
  }
  r.strides.assign(keep.size(), 1);
  for (size_t k = keep.size(); k-- > 1;) r.strides[k - 1] = r.strides[k] * r.sizes[k];
  if (contiguous_as(v, keep)) {
    r.data = v.data;
    return r;
  }
  for (size_t p = 0; p < v.labels.size(); ++p)
    if (std::find(keep.begin(), keep.end(), v.labels[p]) == keep.end()) {
      rsz.push_back(v.sizes[p]);
      rst.push_back(v.strides[p]);
    }
  T* dst = bump.take(product(r.sizes));
  if (run) strided_sum(pool, v.data, dst, r.sizes, kst, r.strides, rsz, rst);
  r.data = dst;
  return r;
}

std::vector<int> concat(std::vector<int> a, const std::vector<int>& b, const std::vector<int>& c) {
  a.insert(a.end(), b.begin(), b.end());
  a.insert(a.end(), c.begin(), c.end());
  return a;
}

// a (x) b over their shared labels; `needed[l]`: label l is still used after this step.
template <typename T>
Operand<T> contract(ThreadPool& pool, const Operand<T>& a, const Operand<T>& b, const std::vector<bool>& needed,
                    Bump<T>& bump, bool run) {
  std::vector<int> batch, contracted, a_free, b_free;
  for (int l : a.labels) {
    if (b.find(l) >= 0) (needed[static_cast<size_t>(l)] ? batch : contracted).push_back(l);
    else if (needed[static_cast<size_t>(l)]) a_free.push_back(l);
  }
  for (int l : b.labels)
    if (a.find(l) < 0 && needed[static_cast<size_t>(l)]) b_free.push_back(l);
  // Either operand may already be laid out transposed, which the matmul takes as is.
  const std::vector<int> a_plain = concat(batch, a_free, contracted), a_trans = concat(batch, contracted, a_free);
  const std::vector<int> b_plain = concat(batch, contracted, b_free), b_trans = concat(batch, b_free, contracted);
  const bool ta = !contiguous_as(a, a_plain) && contiguous_as(a, a_trans);
  const bool tb = !contiguous_as(b, b_plain) && contiguous_as(b, b_trans);
  Operand<T> A = materialize(pool, a, ta ? a_trans : a_plain, bump, run);
  Operand<T> B = materialize(pool, b, tb ? b_trans : b_plain, bump, run);
  auto size_of = [&](const std::vector<int>& labels, const Operand<T>& v) {
    int64_t n = 1;
    for (int l : labels) n *= v.sizes[static_cast<size_t>(v.find(l))];
    return n;
  };
  const int64_t nb = size_of(batch, A), m = size_of(a_free, A), k = size_of(contracted, A), n = size_of(b_free, B);
  Operand<T> r;
  r.labels = concat(batch, a_free, b_free);
  for (int l : r.labels) {
    const Operand<T>& owner = A.find(l) >= 0 ? A : B;
    r.sizes.push_back(owner.sizes[static_cast<size_t>(owner.find(l))]);
  }
  r.strides.assign(r.labels.size(), 1);
  for (size_t q = r.labels.size(); q-- > 1;) r.strides[q - 1] = r.strides[q] * r.sizes[q];
  T* out = bump.take(nb * m * n);
  r.data = out;
  if (!run || nb * m * n == 0) return r;
  if (k == 0) {
    std::fill(out, out + nb * m * n, T(0));
    return r;
  }
  // Shapes where a GEMM per batch entry would do almost no work: products and dot products.
  if (k == 1 || (m == 1 && n == 1)) {
    const T* pa = A.data;
    const T* pb = B.data;
    const int64_t per = m * n * k;
    pool.parallel_for(nb, std::max<int64_t>(1, kParallelGrain / per), [&](int64_t b0, int64_t b1) {
      for (int64_t b = b0; b < b1; ++b) {
        const T* x = pa + b * m * k;
        const T* y = pb + b * k * n;
        T* o = out + b * m * n;
        if (k == 1) {  // outer product (a transposed [1, m] operand has the same layout)
          for (int64_t i = 0; i < m; ++i)
            for (int64_t j = 0; j < n; ++j) o[i * n + j] = x[i] * y[j];
        } else {
          T acc = 0;
          for (int64_t q = 0; q < k; ++q) acc += x[q] * y[q];
          *o = acc;
        }
      }
    });
    return r;
  }
  const DType dt = DTypeOf<T>::value;
  Tensor ta_t(dt, ta ? TensorShape{nb, k, m} : TensorShape{nb, m, k}, const_cast<T*>(A.data));
  Tensor tb_t(dt, tb ? TensorShape{nb, n, k} : TensorShape{nb, k, n}, const_cast<T*>(B.data));
  Tensor out_t(dt, {nb, m, n}, out);
  matmul(pool, ta_t, tb_t, ta, tb, 1.0, out_t);
  return r;
}

// Runs (or, with run false, only sizes the scratch of) the whole evaluation into `out`.
template <typename T>
void evaluate(ThreadPool& pool, const EinsumSpec& s, const std::vector<const Tensor*>& inputs, T* out, Bump<T>& bump,
              bool run) {
  std::vector<Operand<T>> ops;
  for (size_t i = 0; i < inputs.size(); ++i) {
    Operand<T> v;
    v.data = run ? inputs[i]->data<T>() : nullptr;
    const Strides st = contiguous_strides(inputs[i]->shape());
    for (size_t p = 0; p < s.inputs[i].size(); ++p) {
      const int64_t d = inputs[i]->dim(static_cast<int>(p));
      if (d == 1) continue;
      const int l = s.inputs[i][p];
      const int q = v.find(l);
      if (q >= 0) {
        v.strides[static_cast<size_t>(q)] += st[p];
        continue;
      }
      v.labels.push_back(l);
      v.sizes.push_back(d);
      v.strides.push_back(st[p]);
    }
    ops.push_back(std::move(v));
  }
  Operand<T> cur = ops[0];
  for (size_t i = 1; i < ops.size(); ++i) {
    std::vector<bool> needed = s.kept;
    for (size_t j = i + 1; j < ops.size(); ++j)
      for (int l : ops[j].labels) needed[static_cast<size_t>(l)] = true;
    cur = contract(pool, cur, ops[i], needed, bump, run);
  }
  if (!run) return;
  // Output pass over the distinct output labels: repeated ones write a diagonal (zeros around
  // it), ones the result lacks broadcast (stride 0), result labels not kept are summed.
  std::vector<int> distinct;
  std::vector<int64_t> size, sst, dst_st, rsz, rst;
  const Strides ost = contiguous_strides(s.out_shape);
  for (size_t p = 0; p < s.output.size(); ++p) {
    const int l = s.output[p];
    auto it = std::find(distinct.begin(), distinct.end(), l);
    if (it != distinct.end()) {
      dst_st[static_cast<size_t>(it - distinct.begin())] += ost[p];
      continue;
    }
    distinct.push_back(l);
    size.push_back(s.out_shape[static_cast<int>(p)]);
    const int q = s.kept[static_cast<size_t>(l)] ? cur.find(l) : -1;
    sst.push_back(q >= 0 ? cur.strides[static_cast<size_t>(q)] : 0);
    dst_st.push_back(ost[p]);
  }
  for (size_t q = 0; q < cur.labels.size(); ++q)
    if (!s.kept[static_cast<size_t>(cur.labels[q])]) {
      rsz.push_back(cur.sizes[q]);
      rst.push_back(cur.strides[q]);
    }
  if (distinct.size() != s.output.size()) std::fill(out, out + s.out_shape.numel(), T(0));
  strided_sum(pool, cur.data, out, size, sst, dst_st, rsz, rst);
}

void run_einsum(KernelContext& ctx, const EinsumEquation& eq, int num_operands, const TensorShape* ref) {
  OT_CHECK(num_operands >= 1, "einsum needs at least one operand");
  std::vector<const Tensor*> inputs;
  std::vector<TensorShape> shapes;
  for (int i = 0; i < num_operands; ++i) {
    inputs.push_back(&ctx.input(i));
    shapes.push_back(inputs.back()->shape());
    OT_CHECK(inputs.back()->dtype() == inputs[0]->dtype(), "einsum operand ", i, " ", inputs.back()->str(),
             " differs in element type from operand 0 ", inputs[0]->str());
  }
  const DType dtype = inputs[0]->dtype();
  if (dtype != DType::Float32 && dtype != DType::Float64)
    throw UnsupportedError(
        str_cat("Einsum on ", dtype_name(dtype), " operands is not supported (float32/float64 only)"));
  const EinsumSpec s = make_einsum_spec(eq, shapes, ref);
  Tensor& y = ctx.allocate_output(0, inputs[0]->dtype(), s.out_shape);
  dispatch_float(y.dtype(), "Einsum", [&](auto tag) {
    using T = typename decltype(tag)::type;
    Bump<T> plan(nullptr);
    evaluate<T>(ctx.threads(), s, inputs, nullptr, plan, false);
    Bump<T> bump(static_cast<T*>(ctx.scratch(static_cast<size_t>(plan.used()) * sizeof(T))));
    evaluate<T>(ctx.threads(), s, inputs, y.data<T>(), bump, true);
  });
}

class EinsumKernel final : public Kernel {
 public:
  explicit EinsumKernel(const KernelInfo& info) : eq_(parse_einsum_equation(info.node.attr_string("equation", ""))) {}
  void compute(KernelContext& ctx) const override { run_einsum(ctx, eq_, ctx.num_inputs(), nullptr); }

 private:
  EinsumEquation eq_;
};

// EinsumGrad(operands..., output_shape), equation attribute with an explicit output term.
class EinsumGradKernel final : public Kernel {
 public:
  explicit EinsumGradKernel(const KernelInfo& info)
      : eq_(parse_einsum_equation(info.node.attr_string("equation", ""))) {}
  void compute(KernelContext& ctx) const override {
    const TensorShape ref(int_values(ctx.input(ctx.num_inputs() - 1), "EinsumGrad output shape"));
    run_einsum(ctx, eq_, ctx.num_inputs() - 1, &ref);
  }

 private:
  EinsumEquation eq_;
};

// dX_i = einsum("out,others->term_i")(dY, other operands): the sum over every label that term_i
// does not fix of dY times the other operands. An operand used twice gets both contributions.
void einsum_gradient(GradBuilder& g) {
  const EinsumEquation eq = parse_einsum_equation(g.node().attr_string("equation", ""));
  const int n = g.num_inputs();
  OT_CHECK(static_cast<int>(eq.terms.size()) == n, "equation '", g.node().attr_string("equation", ""), "' has ",
           eq.terms.size(), " operand terms for ", n, " inputs");
  for (int i = 0; i < n; ++i) {
    if (!g.needs_input_grad(i)) continue;
    std::string equation = eq.output;
    std::vector<std::string> inputs{g.output_grad(0)};
    for (int j = 0; j < n; ++j) {
      if (j == i) continue;
      equation += "," + eq.terms[static_cast<size_t>(j)];
      inputs.push_back(g.input(j));
    }
    equation += "->" + eq.terms[static_cast<size_t>(i)];
    inputs.push_back(g.shape_of(g.input(i)));
    std::string dx = g.op("EinsumGrad", inputs, {{"equation", Attribute::of_string(equation)}}, kOnnxTrainDomain);
    same_dtype(g, dx, g.input(i));
    g.set_input_grad(i, dx);
  }
}

}  // namespace

ONNXTRAIN_KERNEL("", "Einsum", kernel_factory<EinsumKernel>(), Recompute::Costly, Rounding::SumOfTerms);
ONNXTRAIN_KERNEL(kOnnxTrainDomain, "EinsumGrad", kernel_factory<EinsumGradKernel>(),
                 Recompute::Costly, Rounding::PerValue);
ONNXTRAIN_GRADIENT("", "Einsum", einsum_gradient);

}  // namespace onnxtrain
