#include "session/graph_preparation.h"

#include "onnx/model_io.h"
#include "onnx/sequence_lowering.h"
#include "onnx/shape_inference.h"
#include "ops/training/gradient_op.h"
#include "passes/passes.h"
#include "runtime/program.h"

namespace onnxtrain {

void prepare_graph(Graph& graph, GraphUse use) {
  normalize_graph(graph);
  mark_checkpoint_segments(graph);
  expand_gradient_ops(graph);
  if (use == GraphUse::Training) check_kernels_exist(graph);
  infer_shapes(graph);
  if (lower_sequences(graph) > 0) infer_shapes(graph);
}

}  // namespace onnxtrain
