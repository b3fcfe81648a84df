// ONNX's sequence and optional ops over Tensor::list values. Forward only: the sequence patterns
// torch exports for training are rewritten into tensor ops at load (onnx/sequence_lowering.h),
// so gradients never meet a sequence. A list owns copies of its tensors: an input's memory may
// be an arena block that is reused once the list's producer has run.
#include <cstring>

#include "opdef/op_registry.h"
#include "ops/control/subgraph.h"

namespace onnxtrain {
namespace {

const std::vector<Tensor>& sequence_input(const KernelContext& ctx, int i, const char* op) {
  const Tensor& t = ctx.input(i);
  OT_CHECK(t.dtype() == DType::Sequence, op, ": input ", i, " must be a sequence, got ", t.str());
  return t.items();
}

// A position input (0-d or 1-element int32/int64) checked against [-n, n) or [-n, n].
int64_t position(const KernelContext& ctx, int i, int64_t n, bool allow_end, const char* op) {
  const Tensor& p = ctx.input(i);
  OT_CHECK((p.dtype() == DType::Int64 || p.dtype() == DType::Int32) && p.numel() == 1, op,
           ": the position must be one int32 or int64, got ", p.str());
  const int64_t pos = p.item_as_int();
  const int64_t hi = allow_end ? n : n - 1;
  OT_CHECK(pos >= -n && pos <= hi, op, ": position ", pos, " is out of range for a sequence of ", n, " elements");
  return pos < 0 ? pos + n : pos;
}

void sequence_empty(KernelContext& ctx) { ctx.set_list_output(0, Tensor::list(DType::Sequence, {})); }

void sequence_construct(KernelContext& ctx) {
  std::vector<Tensor> items;
  for (int i = 0; i < ctx.num_inputs(); ++i) {
    const Tensor& t = ctx.input(i);
    OT_CHECK(!t.is_list(), "SequenceConstruct: input ", i, " is a ", dtype_name(t.dtype()), ", not a tensor");
    OT_CHECK(items.empty() || items[0].dtype() == t.dtype(), "SequenceConstruct: input ", i, " is ",
             dtype_name(t.dtype()), " but input 0 is ", dtype_name(items[0].dtype()));
    items.push_back(t.clone());
  }
  ctx.set_list_output(0, Tensor::list(DType::Sequence, std::move(items)));
}

void sequence_insert(KernelContext& ctx) {
  std::vector<Tensor> items = sequence_input(ctx, 0, "SequenceInsert");
  const Tensor& t = ctx.input(1);
  OT_CHECK(items.empty() || items[0].dtype() == t.dtype(), "SequenceInsert: the tensor is ", dtype_name(t.dtype()),
           " but the sequence holds ", dtype_name(items[0].dtype()));
  const int64_t n = static_cast<int64_t>(items.size());
  const int64_t pos = ctx.has_input(2) ? position(ctx, 2, n, true, "SequenceInsert") : n;
  items.insert(items.begin() + pos, t.clone());
  ctx.set_list_output(0, Tensor::list(DType::Sequence, std::move(items)));
}

void sequence_erase(KernelContext& ctx) {
  std::vector<Tensor> items = sequence_input(ctx, 0, "SequenceErase");
  const int64_t n = static_cast<int64_t>(items.size());
  OT_CHECK(n > 0, "SequenceErase: the sequence is empty");
  const int64_t pos = ctx.has_input(1) ? position(ctx, 1, n, false, "SequenceErase") : n - 1;
  items.erase(items.begin() + pos);
  ctx.set_list_output(0, Tensor::list(DType::Sequence, std::move(items)));
}

void sequence_at(KernelContext& ctx) {
  const auto& items = sequence_input(ctx, 0, "SequenceAt");
  const int64_t pos = position(ctx, 1, static_cast<int64_t>(items.size()), false, "SequenceAt");
  write_output(ctx, 0, items[static_cast<size_t>(pos)]);
}

void sequence_length(KernelContext& ctx) {
  const auto& items = sequence_input(ctx, 0, "SequenceLength");
  Tensor& out = ctx.allocate_output(0, DType::Int64, {});
  *out.data<int64_t>() = static_cast<int64_t>(items.size());
}

int normalize_axis(int64_t axis, int rank, const char* op) {
  OT_CHECK(axis >= -rank && axis < rank, op, ": axis ", axis, " is out of range for rank ", rank);
  return static_cast<int>(axis < 0 ? axis + rank : axis);
}

// Elements [begin, begin + count) of `t` along `axis`.
Tensor slice_range(const Tensor& t, int axis, int64_t begin, int64_t count) {
  std::vector<int64_t> dims(t.shape().begin(), t.shape().end());
  const int64_t n = dims[static_cast<size_t>(axis)];
  dims[static_cast<size_t>(axis)] = count;
  Tensor out = Tensor::empty(t.dtype(), TensorShape(dims));
  int64_t outer = 1, inner = 1;
  for (int d = 0; d < axis; ++d) outer *= t.dim(d);
  for (int d = axis + 1; d < t.rank(); ++d) inner *= t.dim(d);
  const size_t elem = dtype_size(t.dtype()), row = static_cast<size_t>(inner) * elem;
  const auto* src = static_cast<const uint8_t*>(t.raw_data());
  auto* dst = static_cast<uint8_t*>(out.raw_data());
  for (int64_t o = 0; o < outer; ++o)
    if (count > 0)
      std::memcpy(dst + static_cast<size_t>(o * count) * row, src + static_cast<size_t>(o * n + begin) * row,
                  static_cast<size_t>(count) * row);
  return out;
}

class SplitToSequenceKernel : public Kernel {
 public:
  explicit SplitToSequenceKernel(const KernelInfo& info)
      : axis_(info.node.attr_int("axis", 0)), keepdims_(info.node.attr_int("keepdims", 1) != 0) {}

  void compute(KernelContext& ctx) const override {
    const Tensor& x = ctx.input(0);
    OT_CHECK(x.rank() >= 1, "SplitToSequence: the input must have rank >= 1, got ", x.str());
    const int axis = normalize_axis(axis_, x.rank(), "SplitToSequence");
    const int64_t n = x.dim(axis);
    std::vector<int64_t> sizes;
    bool squeeze = false;
    if (!ctx.has_input(1)) {
      sizes.assign(static_cast<size_t>(n), 1);
      squeeze = !keepdims_;
    } else {
      const Tensor& split = ctx.input(1);
      OT_CHECK(split.dtype() == DType::Int64 || split.dtype() == DType::Int32, "SplitToSequence: split must be int32 or "
               "int64, got ", split.str());
      std::vector<int64_t> given = split.to_int64_vector();
      if (split.rank() == 0) {
        OT_CHECK(given[0] > 0, "SplitToSequence: the split size must be positive, got ", given[0]);
        for (int64_t at = 0; at < n; at += given[0]) sizes.push_back(std::min(given[0], n - at));
      } else {
        int64_t total = 0;
        for (int64_t s : given) {
          OT_CHECK(s >= 0, "SplitToSequence: split sizes must not be negative, got ", s);
          total += s;
        }
        OT_CHECK(total == n, "SplitToSequence: split sizes add up to ", total, " but axis ", axis, " has ", n);
        sizes = given;
      }
    }
    std::vector<Tensor> items;
    int64_t begin = 0;
    for (int64_t s : sizes) {
      Tensor part = slice_range(x, axis, begin, s);
      if (squeeze) {
        TensorShape shape = part.shape();
        shape.erase(axis);
        part = part.view(shape);
      }
      items.push_back(part);
      begin += s;
    }
    ctx.set_list_output(0, Tensor::list(DType::Sequence, std::move(items)));
  }

 private:
  int64_t axis_;
  bool keepdims_;
};

class ConcatFromSequenceKernel : public Kernel {
 public:
  explicit ConcatFromSequenceKernel(const KernelInfo& info)
      : axis_(info.node.attr_int("axis", 0)), new_axis_(info.node.attr_int("new_axis", 0) != 0) {
    OT_CHECK(info.node.has_attr("axis"), info.node.describe(), " needs the attribute 'axis'");
  }

  void compute(KernelContext& ctx) const override {
    const auto& items = sequence_input(ctx, 0, "ConcatFromSequence");
    OT_CHECK(!items.empty(), "ConcatFromSequence: the sequence is empty");
    const Tensor& first = items[0];
    const int rank = first.rank() + (new_axis_ ? 1 : 0);
    const int axis = normalize_axis(axis_, rank, "ConcatFromSequence");
    std::vector<int64_t> dims(first.shape().begin(), first.shape().end());
    if (new_axis_) dims.insert(dims.begin() + axis, 1);
    int64_t total = 0;
    for (const Tensor& t : items) {
      std::vector<int64_t> d(t.shape().begin(), t.shape().end());
      if (new_axis_) d.insert(d.begin() + axis, 1);
      OT_CHECK(t.dtype() == first.dtype() && d.size() == dims.size(), "ConcatFromSequence: element ", t.str(),
               " does not match ", first.str());
      for (size_t k = 0; k < d.size(); ++k)
        OT_CHECK(static_cast<int>(k) == axis || d[k] == dims[k], "ConcatFromSequence: element ", t.str(),
                 " does not match ", first.str(), " outside axis ", axis);
      total += d[static_cast<size_t>(axis)];
    }
    dims[static_cast<size_t>(axis)] = total;
    Tensor& out = ctx.allocate_output(0, first.dtype(), TensorShape(dims));
    int64_t outer = 1, inner = 1;
    for (int d = 0; d < axis; ++d) outer *= dims[static_cast<size_t>(d)];
    for (size_t d = static_cast<size_t>(axis) + 1; d < dims.size(); ++d) inner *= dims[d];
    const size_t row = static_cast<size_t>(inner) * dtype_size(first.dtype());
    auto* dst = static_cast<uint8_t*>(out.raw_data());
    int64_t at = 0;
    for (const Tensor& t : items) {
      const int64_t len = t.numel() / std::max<int64_t>(outer * inner, 1);
      const auto* src = static_cast<const uint8_t*>(t.raw_data());
      for (int64_t o = 0; o < outer; ++o)
        if (len > 0)
          std::memcpy(dst + static_cast<size_t>(o * total + at) * row, src + static_cast<size_t>(o * len) * row,
                      static_cast<size_t>(len) * row);
      at += len;
    }
  }

 private:
  int64_t axis_;
  bool new_axis_;
};

void optional_construct(KernelContext& ctx) {
  std::vector<Tensor> items;
  if (ctx.has_input(0)) items.push_back(ctx.input(0).is_list() ? ctx.input(0) : ctx.input(0).clone());
  ctx.set_list_output(0, Tensor::list(DType::Optional, std::move(items)));
}

void optional_has_element(KernelContext& ctx) {
  bool has = false;
  if (ctx.has_input(0)) has = ctx.input(0).dtype() != DType::Optional || !ctx.input(0).items().empty();
  Tensor& out = ctx.allocate_output(0, DType::Bool, {});
  *out.data<bool>() = has;
}

void optional_get_element(KernelContext& ctx) {
  const Tensor& in = ctx.input(0);
  if (in.dtype() != DType::Optional) {  // opset 18: a plain tensor or sequence passes through
    write_output(ctx, 0, in);
    return;
  }
  OT_CHECK(!in.items().empty(), "OptionalGetElement: the optional input is empty");
  write_output(ctx, 0, in.items()[0]);
}

// Closed form (onnx/subgraph_closure.h): the body's outer values follow the ONNX inputs.
class SequenceMapKernel : public Kernel {
 public:
  explicit SequenceMapKernel(const KernelInfo& info) : body_(info.node, "body"), describe_(info.node.describe()) {
    num_mapped_ = static_cast<int>(info.node.inputs.size() - static_cast<size_t>(info.node.attr_int("num_captured", 0)));
    OT_CHECK(num_mapped_ >= 1, describe_, " needs an input sequence");
  }

  void compute(KernelContext& ctx) const override {
    const auto& lead = sequence_input(ctx, 0, "SequenceMap");
    const size_t n = lead.size();
    for (int k = 1; k < num_mapped_; ++k)
      if (ctx.input(k).dtype() == DType::Sequence)
        OT_CHECK(ctx.input(k).items().size() == n, describe_, ": input sequence ", k, " has ",
                 ctx.input(k).items().size(), " elements, the first has ", n);
    std::vector<Tensor> captured = inputs_from(ctx, num_mapped_);
    std::vector<std::vector<Tensor>> results(static_cast<size_t>(ctx.num_outputs()));
    for (size_t i = 0; i < n; ++i) {
      std::vector<Tensor> in;
      for (int k = 0; k < num_mapped_; ++k) {
        const Tensor& t = ctx.input(k);
        in.push_back(t.dtype() == DType::Sequence ? t.items()[i] : t);
      }
      in.insert(in.end(), captured.begin(), captured.end());
      std::vector<Tensor> out = body_.run(in, ctx);
      for (size_t o = 0; o < results.size(); ++o) results[o].push_back(out[o]);
    }
    for (size_t o = 0; o < results.size(); ++o)
      if (ctx.output_needed(static_cast<int>(o)))
        ctx.set_list_output(static_cast<int>(o), Tensor::list(DType::Sequence, std::move(results[o])));
  }

 private:
  CompiledBody body_;
  std::string describe_;
  int num_mapped_ = 1;
};

}  // namespace

ONNXTRAIN_KERNEL("", "SequenceEmpty", kernel_factory(&sequence_empty), Recompute::Costly, Rounding::PerValue);
ONNXTRAIN_KERNEL("", "SequenceConstruct", kernel_factory(&sequence_construct), Recompute::Costly, Rounding::PerValue);
ONNXTRAIN_KERNEL("", "SequenceInsert", kernel_factory(&sequence_insert), Recompute::Costly, Rounding::PerValue);
ONNXTRAIN_KERNEL("", "SequenceErase", kernel_factory(&sequence_erase), Recompute::Costly, Rounding::PerValue);
ONNXTRAIN_KERNEL("", "SequenceAt", kernel_factory(&sequence_at), Recompute::Costly, Rounding::PerValue);
ONNXTRAIN_KERNEL("", "SequenceLength", kernel_factory(&sequence_length), Recompute::Costly, Rounding::PerValue);
ONNXTRAIN_KERNEL("", "SplitToSequence", kernel_factory<SplitToSequenceKernel>(), Recompute::Costly, Rounding::PerValue);
ONNXTRAIN_KERNEL("", "ConcatFromSequence", kernel_factory<ConcatFromSequenceKernel>(),
                 Recompute::Costly, Rounding::PerValue);
ONNXTRAIN_KERNEL("", "Optional", kernel_factory(&optional_construct), Recompute::Costly, Rounding::PerValue);
ONNXTRAIN_KERNEL("", "OptionalHasElement", kernel_factory(&optional_has_element),
                 Recompute::Costly, Rounding::PerValue);
ONNXTRAIN_KERNEL("", "OptionalGetElement", kernel_factory(&optional_get_element),
                 Recompute::Costly, Rounding::PerValue);
ONNXTRAIN_KERNEL(kOnnxTrainDomain, "SequenceMap", kernel_factory<SequenceMapKernel>(),
                 Recompute::Costly, Rounding::PerValue);

}  // namespace onnxtrain
