// The op records (opdef/op_record.h): every registered op's record is complete, the passes and the
// audit read their op properties from the records, and every FusedElementwise instruction computes
// exactly what its op's standalone kernel computes, in every float type the fused loop runs.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <set>

#include "core/half.h"
#include "opdef/op_registry.h"
#include "passes/passes.h"
#include "tests/cpp/pass_testing.h"

namespace onnxtrain::testing {
namespace {

TEST(OpRecords, EveryRegisteredRecordIsComplete) {
  std::string incomplete;
  size_t with_kernels = 0;
  for (const OpRecord* r : OpRegistry::instance().records()) {
    with_kernels += r->kernel != nullptr;
    const std::string missing = r->missing();
    if (!missing.empty()) incomplete += (r->domain.empty() ? "" : r->domain + "::") + r->op_type + " lacks " + missing + "\n";
  }
  EXPECT_GT(with_kernels, 200u);
  EXPECT_TRUE(incomplete.empty()) << incomplete;
}

TEST(OpRecords, AnIncompleteRecordSaysWhatItLacks) {
  OpRecord r;
  r.op_type = "Made";
  r.kernel = kernel_factory(+[](KernelContext&) {});
  EXPECT_NE(r.missing().find("Recompute"), std::string::npos) << r.missing();
  EXPECT_NE(r.missing().find("Rounding"), std::string::npos) << r.missing();
  r.recompute = Recompute::Costly;
  r.rounding = Rounding::PerValue;
  EXPECT_EQ(r.missing(), "");
  r.zero_gradient = true;  // declared, but its rule is not the zero rule
  EXPECT_NE(r.missing(), "");
  OpRecord kernel_less;
  kernel_less.op_type = "Other";
  kernel_less.float32_sums = true;
  EXPECT_NE(kernel_less.missing().find("kernel"), std::string::npos);
}

TEST(OpRecords, PropertiesThePassesAskAboutComeFromTheRecords) {
  const OpRegistry& registry = OpRegistry::instance();
  EXPECT_EQ(registry.find("", "Relu")->recompute, Recompute::Cheap);
  EXPECT_EQ(registry.find("", "MatMul")->recompute, Recompute::Costly);
  EXPECT_EQ(registry.find("", "MatMul")->rounding, Rounding::SumOfTerms);
  EXPECT_EQ(registry.find("", "Exp")->rounding, Rounding::PerValue);
  EXPECT_TRUE(is_random_op(Node{"d", "Dropout", "", {"x"}, {"y"}, {}}));
  EXPECT_TRUE(is_random_op(Node{"b", "Bernoulli", "", {"x"}, {"y"}, {}}));
  EXPECT_FALSE(is_random_op(Node{"r", "Relu", "", {"x"}, {"y"}, {}}));
  EXPECT_FALSE(is_random_op(Node{"p", "PythonOp", kOnnxTrainDomain, {"x"}, {"y"}, {}}));
  EXPECT_TRUE(is_unrepeatable_op(Node{"p", "PythonOp", kOnnxTrainDomain, {"x"}, {"y"}, {}}));
  const Node topk{"t", "TopK", "", {"x", "k"}, {"v", "i"}, {}};
  EXPECT_EQ(registry.find(topk)->audited(topk, 0), AuditedOutput::Value);
  EXPECT_EQ(registry.find(topk)->audited(topk, 1), AuditedOutput::SelectedIndex);
  EXPECT_NE(registry.find("", "Add")->elementwise, nullptr);
  EXPECT_EQ(registry.find("", "MatMul")->elementwise, nullptr);
}

Tensor random_values(DType dtype, const TensorShape& shape, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> dist(-3, 3);
  Tensor t = Tensor::empty(dtype, shape);
  for (int64_t i = 0; i < t.numel(); ++i) {
    const double v = dist(rng);
    switch (dtype) {
      case DType::Float64: t.data<double>()[i] = v; break;
      case DType::Float32: t.data<float>()[i] = static_cast<float>(v); break;
      case DType::BFloat16: t.data<BHalf>()[i] = float_to_bfloat16(static_cast<float>(v)); break;
      default: t.data<Half>()[i] = float_to_half(static_cast<float>(v)); break;
    }
  }
  return t;
}

// Runs the one node `n` on `feeds` with every pass off: the kernel of n's own op.
Tensor run_alone(const Node& n, const std::vector<Tensor>& feeds) {
  Graph g;
  for (size_t i = 0; i < feeds.size(); ++i) add_input(g, n.inputs[i], feeds[i].dtype(), {feeds[i].shape()[0], feeds[i].shape()[1]});
  g.add_node(n);
  g.outputs = {n.outputs[0]};
  g.opsets[kOnnxTrainDomain] = 1;
  return InferenceSession(g, false, 0).run(feeds, 1).at(0);
}

bool same_bits(const Tensor& a, const Tensor& b, int64_t i) {
  const size_t size = dtype_size(a.dtype());
  const auto* pa = static_cast<const unsigned char*>(a.raw_data()) + i * static_cast<int64_t>(size);
  const auto* pb = static_cast<const unsigned char*>(b.raw_data()) + i * static_cast<int64_t>(size);
  if (std::memcmp(pa, pb, size) == 0) return true;
  const double va = a.dtype() == DType::BFloat16   ? bfloat16_to_double(a.data<BHalf>()[i])
                    : a.dtype() == DType::Float16 ? half_to_double(a.data<Half>()[i])
                                                  : a.item_as_double(i);
  const double vb = b.dtype() == DType::BFloat16   ? bfloat16_to_double(b.data<BHalf>()[i])
                    : b.dtype() == DType::Float16 ? half_to_double(b.data<Half>()[i])
                                                  : b.item_as_double(i);
  return std::isnan(va) && std::isnan(vb);
}

// The attributes under which an op's lowering may pick another instruction or immediates.
std::vector<AttributeMap> attribute_variants(const OpRecord& r) {
  std::vector<AttributeMap> variants = {{}};
  if (r.op_type == "Gelu" || r.op_type == "GeluGrad") variants.push_back({{"approximate", Attribute::of_string("tanh")}});
  if (r.op_type == "LeakyRelu") variants.push_back({{"alpha", Attribute::of_float(0.2f)}});
  if (r.op_type == "HardTanh" || r.op_type == "HardTanhGrad")
    variants.push_back({{"min_val", Attribute::of_float(-0.5f)}, {"max_val", Attribute::of_float(2.0f)}});
  return variants;
}

// Every op whose record can lower to an instruction: the fused loop running that instruction alone
// gives its standalone kernel's bits, in float32, float64 and both 16-bit types (computed in float32
// registers by the one, widened and rounded once by the executor for the other), over a block and
// a tail.
TEST(OpRecords, EveryElementwiseInstructionIsItsStandaloneKernelBitForBit) {
  std::set<std::string> covered;
  for (const OpRecord* r : OpRegistry::instance().records()) {
    if (!r->elementwise) continue;
    for (const AttributeMap& attrs : attribute_variants(*r)) {
      for (size_t inputs : {1u, 2u}) {
        Node n{"alone", r->op_type, r->domain, {}, {"y"}, attrs};
        for (size_t i = 0; i < inputs; ++i) n.inputs.push_back("x" + std::to_string(i));
        LoweredInstruction lowered;
        if (!r->elementwise(n, lowered)) continue;
        ASSERT_NE(lowered.instruction, nullptr) << r->op_type;
        EXPECT_EQ(OpRegistry::instance().instruction(lowered.instruction->name), lowered.instruction) << r->op_type;
        EXPECT_EQ(static_cast<size_t>(lowered.instruction->arity), inputs) << r->op_type;
        covered.insert(lowered.instruction->name);
        Node fused{"fused", "FusedElementwise", kOnnxTrainDomain, n.inputs, {"y"}, {}};
        fused.attrs["ops"] = Attribute::of_strings({lowered.instruction->name});
        fused.attrs["args"] = Attribute::of_ints({0, inputs > 1 ? 1 : 0});
        fused.attrs["consts"] = Attribute::of_floats({lowered.immediate});
        fused.attrs["consts2"] = Attribute::of_floats({lowered.immediate2});
        fused.attrs["outputs"] = Attribute::of_ints({static_cast<int64_t>(inputs)});
        for (DType dtype : {DType::Float32, DType::Float64, DType::BFloat16, DType::Float16}) {
          std::vector<Tensor> feeds;
          for (size_t i = 0; i < inputs; ++i) feeds.push_back(random_values(dtype, {3, 531}, 10 + i));
          const Tensor standalone = run_alone(n, feeds), in_loop = run_alone(fused, feeds);
          ASSERT_EQ(standalone.dtype(), in_loop.dtype());
          ASSERT_EQ(standalone.shape(), in_loop.shape());
          int64_t differing = 0;
          for (int64_t i = 0; i < standalone.numel(); ++i) differing += !same_bits(standalone, in_loop, i);
          EXPECT_EQ(differing, 0) << r->op_type << " as " << lowered.instruction->name << " on " << dtype_name(dtype);
        }
      }
    }
  }
  // Every instruction an op declares is reached by some lowering, and so was checked here.
  const std::vector<std::string> all = OpRegistry::instance().instruction_names();
  EXPECT_EQ(std::vector<std::string>(covered.begin(), covered.end()), all);
  EXPECT_GE(all.size(), 28u);
}

}  // namespace
}  // namespace onnxtrain::testing
