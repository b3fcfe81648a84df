#pragma once
// Runs ranges of a Program's nodes over a RunState. Memory comes from the state's arena when a
// plan exists, or from the heap while recording the sizes that make the plan.
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "runtime/memory_plan.h"
#include "runtime/program.h"

namespace onnxtrain {

class RecordingArena;
class ThreadPool;
struct RunState;

// Watches a run node by node (the numerics audit, audit/node_audit.h). Called after each node
// has run, while its inputs and outputs are still live (before the values it read last are
// released): arena memory is reused later, so an observer that keeps a value must copy it.
class NodeObserver {
 public:
  virtual ~NodeObserver() = default;
  virtual void node_ran(const RunState& state, size_t node_index) = 0;
};

struct RunOptions {
  bool check_finite = false;  // raise on the first node producing NaN or Inf
};

struct RunState {
  RunState(const Program& program, uint64_t seed, ThreadPool& pool);

  const Program& program;
  std::vector<Tensor> values;
  uint64_t seed;
  ThreadPool& pool;
  RunOptions options;
  // Exactly one of these is set: run into a plan's arena, or record what the run allocates.
  const MemoryPlan* plan = nullptr;
  uint8_t* arena = nullptr;
  AllocationRecord* record = nullptr;
  // Set only while a run records: its intermediates and scratch, which become the plan's arena.
  std::shared_ptr<RecordingArena> recording_memory;
  std::vector<std::shared_ptr<void>> node_scratch;  // heap scratch of the running node
  int64_t unplanned_allocations = 0;                 // planned runs that had to fall back to the heap
  // Values whose dtype and shape are noted as they are released (empty: none), for reports on
  // activations that backward recomputes instead of keeping. Parallel: sorted ids, and what was
  // noted (DType::Undefined until the value is released).
  std::vector<int> noted_ids;
  std::vector<std::pair<DType, TensorShape>> noted;
  // Shared: a forward call hands its state to the backward, which may run after the caller let go.
  std::shared_ptr<NodeObserver> observer;
};

// The seed a run of a one-node program needs so that its node draws what node `node_index` of a
// run seeded with `run_seed` drew (KernelContext::random_seed mixes the seed with the index).
uint64_t single_node_run_seed(uint64_t run_seed, int node_index);

// Runs nodes [begin, end). Values become dead after their last reader and are released.
// Kernel failures are rethrown naming the node, its op and its input tensors. `phase` labels the
// kernels in profiles ("forward", "backward", "inference").
void execute(RunState& state, size_t begin, size_t end, const char* phase);

}  // namespace onnxtrain
