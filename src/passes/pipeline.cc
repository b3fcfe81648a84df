#include "passes/pipeline.h"

#include <cstdlib>

#include "passes/passes.h"

namespace onnxtrain {

int resolve_opt_level(int level) {
  if (level >= 0) return level;
  if (const char* env = std::getenv("ONNXTRAIN_OPT_LEVEL")) {
    char* end = nullptr;
    const long v = std::strtol(env, &end, 10);
    OT_CHECK(end != env && *end == '\0' && v >= 0, "ONNXTRAIN_OPT_LEVEL must be a level >= 0, got '", env, "'");
    return static_cast<int>(v);
  }
  return 1;
}

void optimize_before_autodiff(Graph& graph, int level) {
  if (resolve_opt_level(level) == 0) return;
  // Folding exposes duplicates and dead nodes, and merging duplicates can expose more folding.
  for (int round = 0; round < 4; ++round) {
    bool changed = fold_constants(graph);
    changed = inline_constant_ifs(graph) || changed;
    changed = eliminate_common_subexpressions(graph) || changed;
    changed = fold_transposes_into_matmul(graph) || changed;
    changed = fold_casts(graph) || changed;
    changed = fuse_log_softmax_loss(graph) || changed;
    changed = eliminate_dead_nodes(graph) || changed;
    if (!changed) break;
  }
}

void prepare_for_autodiff(Graph& graph, int level) {
  if (resolve_opt_level(level) == 0) return;
  stash_lstm_gates(graph);
}

void optimize_after_autodiff(Graph& graph, int level) {
  if (resolve_opt_level(level) == 0) return;
  eliminate_common_subexpressions(graph);
  fold_casts(graph);  // the gradient rules' Casts back to a type the value already has
  eliminate_dead_nodes(graph);
  write_float32_sums(graph);  // before elementwise fusion, which would take the widening Casts
  share_softmax_statistics(graph);
  fuse_matmul_bias(graph);  // before elementwise fusion, which would take the Add
  fuse_elementwise(graph);
}

}  // namespace onnxtrain
