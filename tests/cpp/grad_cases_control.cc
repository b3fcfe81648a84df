// Finite-difference cases for src/ops/control: If, whose gradient is an If over backward
// branches that recompute their forward. Each branch reads both values; the else branch's
// second output ignores b, so b's gradient there comes from the zeros path.
#include "tests/cpp/gradient_check.h"

namespace onnxtrain::testing {
namespace {

Node node(const std::string& op, std::vector<std::string> inputs, const std::string& output) {
  Node n;
  n.op_type = op;
  n.inputs = std::move(inputs);
  n.outputs = {output};
  n.name = output;
  return n;
}

std::shared_ptr<Graph> branch(bool then_side) {
  auto g = std::make_shared<Graph>();
  g->inputs = {"a", "b"};
  if (then_side) {
    g->add_node(node("Mul", {"a", "b"}, "ab"));
    g->add_node(node("Neg", {"b"}, "minus_b"));
    g->outputs = {"ab", "minus_b"};
  } else {
    g->add_node(node("Sin", {"a"}, "sin_a"));
    g->add_node(node("Mul", {"a", "a"}, "aa"));
    g->outputs = {"sin_a", "aa"};
  }
  return g;
}

std::vector<GradCase> cases() {
  AttributeMap attrs;
  Attribute then_branch, else_branch;
  then_branch.kind = else_branch.kind = Attribute::Kind::Graph;
  then_branch.g = branch(true);
  else_branch.g = branch(false);
  attrs["then_branch"] = then_branch;
  attrs["else_branch"] = else_branch;
  attrs["num_captured"] = Attribute::of_int(2);
  auto inputs = [](bool cond) {
    return std::vector<Tensor>{Tensor::scalar<bool>(cond), random_tensor(DType::Float64, {2, 3}, 1),
                               random_tensor(DType::Float64, {2, 3}, 2)};
  };
  GradCase taken{"If_then", "If", kOnnxTrainDomain, attrs, inputs(true)};
  taken.num_outputs = 2;
  GradCase other{"If_else", "If", kOnnxTrainDomain, attrs, inputs(false)};
  other.num_outputs = 2;
  return {taken, other};
}

OT_GRAD_CASES(cases());

}  // namespace
}  // namespace onnxtrain::testing
