#include "runtime/memory_plan.h"

#include <algorithm>

#include "runtime/program.h"

namespace onnxtrain {

void AllocationRecord::reset(int num_values, int num_nodes) {
  bytes.assign(static_cast<size_t>(num_values), -1);
  alias_of.assign(static_cast<size_t>(num_values), -1);
  scratch.assign(static_cast<size_t>(num_nodes), 0);
}

namespace {
constexpr int64_t kAlign = 64;
int64_t align_up(int64_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

struct Block {
  int64_t size;
  int first, last;  // node indices, inclusive
  int64_t* offset;  // where to write the result
};
}  // namespace

MemoryPlan plan_memory(const Program& program, const AllocationRecord& record) {
  const int num_values = program.num_values();
  const int num_nodes = static_cast<int>(program.nodes().size());
  MemoryPlan plan;
  plan.offset.assign(static_cast<size_t>(num_values), -1);
  plan.bytes.assign(static_cast<size_t>(num_values), -1);
  plan.scratch_offset.assign(static_cast<size_t>(num_nodes), -1);
  plan.scratch_bytes.assign(static_cast<size_t>(num_nodes), 0);

  // A buffer lives from its producer to the last read of it or of any value aliasing it.
  auto root_of = [&](int v) {
    while (record.alias_of[v] >= 0) v = record.alias_of[v];
    return v;
  };
  std::vector<int> last(static_cast<size_t>(num_values), -1);
  for (int v = 0; v < num_values; ++v) {
    int r = root_of(v);
    int end = std::max(program.last_use(v), program.producer(v));
    last[r] = std::max(last[r], end);
  }

  std::vector<Block> blocks;
  for (int v = 0; v < num_values; ++v) {
    if (record.bytes[v] < 0 || program.placement(v) != Placement::Arena) continue;
    plan.bytes[v] = record.bytes[v];
    blocks.push_back({align_up(std::max<int64_t>(record.bytes[v], 1)), program.producer(v),
                      std::max(last[v], program.producer(v)), &plan.offset[v]});
  }
  for (int k = 0; k < num_nodes; ++k) {
    if (record.scratch[k] <= 0) continue;
    plan.scratch_bytes[k] = record.scratch[k];
    blocks.push_back({align_up(record.scratch[k]), k, k, &plan.scratch_offset[k]});
  }

  std::vector<int64_t> live(static_cast<size_t>(num_nodes) + 1, 0);
  for (const Block& b : blocks) {
    live[static_cast<size_t>(std::max(b.first, 0))] += b.size;
    live[static_cast<size_t>(b.last) + 1] -= b.size;
  }
  int64_t running = 0;
  for (int64_t v : live) plan.peak_live_bytes = std::max(plan.peak_live_bytes, running += v);

  // Largest first, each at the lowest offset free throughout its lifetime.
  std::stable_sort(blocks.begin(), blocks.end(), [](const Block& a, const Block& b) { return a.size > b.size; });
  std::vector<const Block*> placed;
  std::vector<std::pair<int64_t, int64_t>> busy;  // [offset, end) of overlapping placed blocks
  for (Block& b : blocks) {
    busy.clear();
    for (const Block* p : placed)
      if (p->first <= b.last && b.first <= p->last) busy.emplace_back(*p->offset, *p->offset + p->size);
    std::sort(busy.begin(), busy.end());
    int64_t candidate = 0;
    for (const auto& range : busy) {
      if (range.first >= candidate + b.size) break;
      candidate = std::max(candidate, range.second);
    }
    *b.offset = candidate;
    placed.push_back(&b);
    plan.arena_bytes = std::max(plan.arena_bytes, candidate + b.size);
    plan.total_buffer_bytes += b.size;
  }
  return plan;
}

}  // namespace onnxtrain
