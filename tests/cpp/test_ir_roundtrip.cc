// Loading ONNX into the IR and saving it back keeps the model intact and valid.
#include <gtest/gtest.h>

#include "onnx/model_io.h"
#include "onnx/shape_inference.h"

namespace onnxtrain {
namespace {

Graph small_mlp() {
  Graph g;
  g.name = "mlp";
  g.opsets = {{"", 17}};
  g.inputs = {"x", "w", "b"};
  g.value_info["x"] = {DType::Float32, std::vector<Dim>{{-1, "batch"}, {4, ""}}};
  g.value_info["w"] = {DType::Float32, std::vector<Dim>{{3, ""}, {4, ""}}};
  g.value_info["b"] = {DType::Float32, std::vector<Dim>{{3, ""}}};
  g.add_initializer("scale", Tensor::from_vector<float>({0.5f, 2.0f, -1.0f}, {3}));
  g.add_node({"gemm", "Gemm", "", {"x", "w", "b"}, {"h"}, {{"transB", Attribute::of_int(1)}, {"alpha", Attribute::of_float(0.5f)}}});
  g.add_node({"relu", "Relu", "", {"h"}, {"r"}, {}});
  g.add_node({"mul", "Mul", "", {"r", "scale"}, {"y"}, {}});
  g.outputs = {"y"};
  g.value_info["y"] = {DType::Float32, std::vector<Dim>{{-1, "batch"}, {3, ""}}};
  return g;
}

TEST(IrRoundTrip, SaveLoadSavePreservesEverything) {
  Graph g = small_mlp();
  std::string bytes = save_model(g, {}, /*check=*/true);
  Graph loaded = load_model(bytes);
  EXPECT_EQ(loaded.inputs, g.inputs);
  EXPECT_EQ(loaded.outputs, g.outputs);
  ASSERT_EQ(loaded.nodes.size(), 3u);
  EXPECT_EQ(loaded.nodes[0].op_type, "Gemm");
  EXPECT_EQ(loaded.nodes[0].attr_int("transB", 0), 1);
  EXPECT_FLOAT_EQ(loaded.nodes[0].attr_float("alpha", 1), 0.5f);
  ASSERT_TRUE(loaded.is_initializer("scale"));
  EXPECT_EQ(loaded.initializers["scale"].str(), "float32[3]");
  EXPECT_FLOAT_EQ(loaded.initializers["scale"].data<float>()[2], -1.0f);
  const ValueInfo* x = loaded.info("x");
  ASSERT_TRUE(x && x->shape);
  EXPECT_EQ((*x->shape)[0].symbol, "batch");
  EXPECT_EQ((*x->shape)[1].value, 4);
  EXPECT_EQ(loaded.opset(), 17);
  // A second round trip is byte-identical: nothing is lost or reordered.
  EXPECT_EQ(save_model(loaded, {}, true), bytes);
}

TEST(IrRoundTrip, MalformedBytesGiveAClearError) {
  try {
    load_model("this is not a protobuf");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("not a valid ONNX ModelProto"), std::string::npos) << e.what();
  }
}

TEST(IrRoundTrip, AnOpsetNewerThanTheBuildKnowsIsRefused) {
  // Opset 18 moved ReduceMean's axes to an input: read with opset 13's definition, the model would
  // reduce over other axes.
  Graph g = small_mlp();
  g.opsets = {{"", 18}};
  const std::string bytes = save_model(g, {}, /*check=*/false);
  try {
    load_model(bytes);
    FAIL() << "an opset-18 model loaded";
  } catch (const UnsupportedError& e) {
    EXPECT_NE(std::string(e.what()).find("imports opset 18 of domain ''"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("up to version 17"), std::string::npos) << e.what();
  }
  g.opsets = {{"", 17}};
  EXPECT_NO_THROW(load_model(save_model(g, {}, /*check=*/false)));
}

TEST(IrRoundTrip, DanglingInputIsReported) {
  Graph g = small_mlp();
  g.nodes[1].inputs[0] = "nowhere";
  try {
    g.sort_topologically();
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'nowhere'"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("Relu node 'relu'"), std::string::npos) << e.what();
  }
}

TEST(IrRoundTrip, TopologicalSortRepairsOrder) {
  Graph g = small_mlp();
  std::swap(g.nodes[0], g.nodes[2]);
  g.sort_topologically();
  EXPECT_EQ(g.nodes[0].name, "gemm");
  EXPECT_EQ(g.nodes[1].name, "relu");
  EXPECT_EQ(g.nodes[2].name, "mul");
}

}  // namespace
}  // namespace onnxtrain

namespace onnxtrain {
namespace {

// onnx 1.12's shape inference crashes with data propagation on this pattern (Shape -> ReduceProd
// -> Range), which torch emits for torch.linspace(..., x.numel()); ours must not.
TEST(IrRoundTrip, ShapeInferenceSurvivesShapeArithmetic) {
  Graph g;
  g.inputs = {"x"};
  g.value_info["x"] = {DType::Float32, std::vector<Dim>{{-1, "n"}, {4, ""}}};
  g.add_initializer("zero", Tensor::scalar<int64_t>(0));
  g.add_initializer("one", Tensor::scalar<int64_t>(1));
  g.add_node({"shape", "Shape", "", {"x"}, {"s"}, {}});
  g.add_node({"prod", "ReduceProd", "", {"s"}, {"p"}, {{"keepdims", Attribute::of_int(0)}}});
  g.add_node({"range", "Range", "", {"zero", "p", "one"}, {"r"}, {}});
  g.outputs = {"r"};
  infer_shapes(g);
  ASSERT_NE(g.info("r"), nullptr);
  EXPECT_EQ(g.info("r")->dtype, DType::Int64);
}

}  // namespace
}  // namespace onnxtrain
