#pragma once
// Owns a Program and its memory plans, one per input-shape signature. The first run of a
// signature records its allocations, in memory of its own (runtime/recording_arena.h); when it
// completes, the plan is built, that memory becomes the plan's first arena, and every later run
// with that signature takes an arena from the arena pool (runtime/arena_pool.h): no allocation
// per step. Several runs may be alive at once (two forward calls before their
// backwards); each holds its own arena. At most kMaxPlans plans are kept, the least recently used
// going first, so that variable shapes (sequence lengths, last batches) cannot grow memory.
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>

#include "runtime/arena_pool.h"
#include "runtime/executor.h"

namespace onnxtrain {

using ShapeSignature = std::vector<int64_t>;

class PlannedRunner;

struct PlanEntry {
  MemoryPlan plan;
  uint64_t last_used = 0;
};

// One run in flight: its values and its arena lease. It shares ownership of its runner, so that a
// run kept alive by its caller (a forward call whose backward never came) can always hand its
// arena back, even after the session that made it is gone.
class Run {
 public:
  Run(std::shared_ptr<PlannedRunner> runner, const ShapeSignature& signature, uint64_t seed);
  ~Run();
  Run(const Run&) = delete;
  Run& operator=(const Run&) = delete;

  RunState& state() { return state_; }
  const RunState& state() const { return state_; }
  bool planned() const { return state_.plan != nullptr; }
  // Ends the run: a recording run turns its record into the signature's plan.
  void finish();

 private:
  std::shared_ptr<PlannedRunner> runner_;
  ShapeSignature signature_;
  RunState state_;
  std::shared_ptr<const PlanEntry> entry_;  // kept by a run even when the runner evicts it
  Arena arena_;
  std::unique_ptr<AllocationRecord> record_;
  bool finished_ = false;
  friend class PlannedRunner;
};

class PlannedRunner {
 public:
  PlannedRunner(Graph graph, const std::vector<std::string>& standalone_values, ThreadPool& pool);
  const Program& program() const { return program_; }
  ThreadPool& pool() { return pool_; }
  RunOptions options;

  static constexpr size_t kMaxPlans = 64;

  // Arena statistics for reports and tests: plans held, and the arena size of a signature's plan
  // (-1 when it has none).
  size_t num_plans() const;
  int64_t arena_bytes(const ShapeSignature& signature) const;

 private:
  friend class Run;
  Program program_;
  ThreadPool& pool_;
  mutable std::mutex mutex_;
  std::map<ShapeSignature, std::shared_ptr<PlanEntry>> plans_;
  uint64_t clock_ = 0;  // ticks once per run, for least-recently-used eviction
};

// The signature of a list of input tensors: dtype, rank and dims of each.
ShapeSignature shape_signature(const std::vector<Tensor>& inputs);

}  // namespace onnxtrain
