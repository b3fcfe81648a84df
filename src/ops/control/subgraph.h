#pragma once
// A closed body (see onnx/subgraph_closure.h) compiled once with the node's kernel and run on
// demand: its own Program, run from the heap (its shapes may change from call to call).
#include <memory>
#include <vector>

#include "opdef/kernel.h"

namespace onnxtrain {

class Program;

class CompiledBody {
 public:
  CompiledBody(const Node& node, const std::string& attribute);
  ~CompiledBody();
  int num_inputs() const { return num_inputs_; }
  int num_outputs() const { return num_outputs_; }
  // Runs the body on `inputs` (one per body input); returns its outputs, each owning its memory.
  std::vector<Tensor> run(const std::vector<Tensor>& inputs, const KernelContext& ctx) const;

 private:
  std::string describe_;
  std::unique_ptr<Program> program_;
  std::vector<int> input_ids_, output_ids_;
  int num_inputs_ = 0, num_outputs_ = 0;
};

// Most iterations one Loop or Scan node may run: a hostile model (trip count 2^62, condition
// always true) ends in an error instead of a hang. ONNXTRAIN_MAX_LOOP_ITERATIONS, default 10^8;
// set_loop_iteration_limit overrides both (0 restores them).
int64_t loop_iteration_limit();
void set_loop_iteration_limit(int64_t limit);

// The inputs ctx gives the node from position `first` on (an omitted one stays undefined).
std::vector<Tensor> inputs_from(const KernelContext& ctx, int first);

// Output i becomes `value`: a sequence or optional is shared, a tensor copied into the output's
// planned memory. Skipped when the graph does not use the output.
void write_output(KernelContext& ctx, int i, const Tensor& value);

}  // namespace onnxtrain
