#include "runtime/planned_runner.h"

#include <malloc.h>

#include <algorithm>
#include <cstdlib>

#include "core/buffer_cache.h"
#include "core/logging.h"
#include "runtime/recording_arena.h"

namespace onnxtrain {

ShapeSignature shape_signature(const std::vector<Tensor>& inputs) {
  ShapeSignature sig;
  sig.reserve(inputs.size() * 4);
  for (const Tensor& t : inputs) {
    sig.push_back(static_cast<int64_t>(t.dtype()));
    sig.push_back(t.rank());
    for (int64_t d : t.shape()) sig.push_back(d);
  }
  return sig;
}

PlannedRunner::PlannedRunner(Graph graph, const std::vector<std::string>& standalone_values, ThreadPool& pool)
    : program_(std::move(graph), standalone_values), pool_(pool) {}

size_t PlannedRunner::num_plans() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return plans_.size();
}

int64_t PlannedRunner::arena_bytes(const ShapeSignature& signature) const {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = plans_.find(signature);
  return it == plans_.end() ? -1 : it->second->plan.arena_bytes;
}

Run::Run(std::shared_ptr<PlannedRunner> owner, const ShapeSignature& signature, uint64_t seed)
    : runner_(std::move(owner)), signature_(signature), state_(runner_->program_, seed, runner_->pool_) {
  PlannedRunner& runner = *runner_;
  state_.options = runner.options;
  std::lock_guard<std::mutex> lock(runner.mutex_);
  auto it = runner.plans_.find(signature);
  if (it == runner.plans_.end()) {
    record_ = std::make_unique<AllocationRecord>();
    record_->reset(runner.program_.num_values(), static_cast<int>(runner.program_.nodes().size()));
    state_.record = record_.get();
    state_.recording_memory = RecordingArena::reserve_for_a_run();
    return;
  }
  it->second->last_used = ++runner.clock_;
  entry_ = it->second;
  arena_ = take_arena(static_cast<size_t>(std::max<int64_t>(entry_->plan.arena_bytes, 64)));
  state_.plan = &entry_->plan;
  state_.arena = arena_.data();
}

void Run::finish() {
  if (finished_) return;
  finished_ = true;
  if (state_.unplanned_allocations > 0)
    log(LogLevel::Verbose, state_.unplanned_allocations,
        " allocations fell outside the memory plan (data-dependent shapes)");
  if (!record_) return;
  MemoryPlan plan = plan_memory(runner_->program_, *record_);
  // The recording run's intermediates came from the heap and sit in the buffer cache now; with
  // the plan, later runs take them from the arena, so keeping them would only add to the RSS.
  state_.record = nullptr;
  record_.reset();
  state_.values.clear();
  state_.node_scratch.clear();
  if (state_.recording_memory) {
    // The memory the recording touched becomes this plan's arena, handed to the pool when the
    // run ends, so the plan's first run finds its pages already faulted in.
    arena_ = state_.recording_memory->into_arena(static_cast<size_t>(std::max<int64_t>(plan.arena_bytes, 64)));
    state_.recording_memory.reset();
  }
  release_cached_buffers();
  malloc_trim(0);  // glibc keeps freed heap pages mapped otherwise
  log(LogLevel::Verbose, "memory plan for graph '", runner_->program_.graph().name, "': arena ", plan.arena_bytes,
      " bytes for ", plan.total_buffer_bytes, " bytes of buffers, at most ", plan.peak_live_bytes, " live at once");
  std::lock_guard<std::mutex> lock(runner_->mutex_);
  auto& plans = runner_->plans_;
  auto& slot = plans[signature_];
  if (!slot) {
    slot = std::make_shared<PlanEntry>();
    slot->plan = std::move(plan);
  }
  slot->last_used = ++runner_->clock_;
  while (plans.size() > PlannedRunner::kMaxPlans) {
    auto oldest = plans.begin();
    for (auto it = plans.begin(); it != plans.end(); ++it)
      if (it->second->last_used < oldest->second->last_used) oldest = it;
    plans.erase(oldest);  // runs still using it hold their own reference
  }
}

Run::~Run() {
  // Values may point into the arena: drop them before the arena goes back to the pool.
  state_.values.clear();
  if (arena_) return_arena(std::move(arena_));
}

}  // namespace onnxtrain
