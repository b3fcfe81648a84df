#pragma once
// A graph compiled for execution: values numbered, kernels built once, and for each value
// where its memory comes from and after which node it is dead.
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "opdef/kernel.h"

namespace onnxtrain {

enum class Placement : uint8_t {
  External,    // fed by the caller (graph inputs)
  Constant,    // initializers, owned by the program
  Standalone,  // handed back to the caller: its own buffer, never arena memory
  Arena,       // intermediate: planned into the run's arena
};

struct CompiledNode {
  const Node* node = nullptr;
  std::unique_ptr<Kernel> kernel;
  std::vector<int> inputs;   // value ids, -1 for omitted optional inputs
  std::vector<int> outputs;  // value ids; unrequested optional outputs get anonymous ids
  int opset = 0;
  // float16/bfloat16 inputs that the op's kernel does not handle itself (its registry record) are
  // computed in float32 (runtime/half_compute.h); outputs the graph declares float32 stay float32.
  bool widen_float16 = false;
  bool widen_bfloat16 = false;
  std::vector<bool> float32_outputs;
  // Per output: the input (its position in `inputs`) that shares its type constraint in the op's
  // schema, -1 if none. A widened op's output keeps float32 when that input was not 16-bit
  // (BatchNormalization's running mean follows the float32 mean, not the bfloat16 X).
  std::vector<int> output_type_sources;
};

class Program {
 public:
  // Compiles `graph`'s nodes in their order. Graph outputs and `standalone_values` get their own
  // buffers so that they can be handed out. Throws UnsupportedError naming the first node with no
  // kernel, and Error for kernels that reject their attributes.
  Program(Graph graph, const std::vector<std::string>& standalone_values = {});
  Program(const Program&) = delete;
  Program& operator=(const Program&) = delete;

  const Graph& graph() const { return graph_; }
  int num_values() const { return static_cast<int>(value_names_.size()); }
  int value_id(const std::string& name) const;  // throws for unknown names
  const std::string& value_name(int id) const { return value_names_[id]; }
  const std::vector<CompiledNode>& nodes() const { return nodes_; }
  Placement placement(int id) const { return placement_[id]; }
  // Index of the last node reading value `id`; -1 when no node reads it.
  int last_use(int id) const { return last_use_[id]; }
  // Node producing `id`, -1 for inputs and constants.
  int producer(int id) const { return producer_[id]; }
  const std::vector<std::pair<int, Tensor>>& constants() const { return constants_; }
  // Arena values that are dead once node k has run.
  const std::vector<int>& release_after(size_t k) const { return release_after_[k]; }

 private:
  int intern(const std::string& name);

  Graph graph_;
  std::vector<CompiledNode> nodes_;
  std::vector<std::string> value_names_;
  std::unordered_map<std::string, int> value_ids_;
  std::vector<Placement> placement_;
  std::vector<int> last_use_;
  std::vector<int> producer_;
  std::vector<std::pair<int, Tensor>> constants_;
  std::vector<std::vector<int>> release_after_;
};

// Throws UnsupportedError listing every op of `graph` that has no kernel (all at once, so a user
// sees the whole gap), naming the nodes and the opset.
void check_kernels_exist(const Graph& graph);

}  // namespace onnxtrain
