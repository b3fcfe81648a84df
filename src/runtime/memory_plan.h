#pragma once
// Static memory planning: from the sizes one run actually allocated, assign every intermediate
// an offset in a single arena, reusing space between values whose lifetimes (over the fixed node
// order) do not overlap. Later runs with the same input shapes allocate nothing.
#include <cstdint>
#include <vector>

namespace onnxtrain {

class Program;

// What an unplanned run allocated, per value and per node.
struct AllocationRecord {
  std::vector<int64_t> bytes;    // per value: size of its own arena-eligible buffer, -1 if none
  std::vector<int> alias_of;     // per value: the value whose memory it shares, -1 if none
  std::vector<int64_t> scratch;  // per node: largest scratch request, 0 if none
  void reset(int num_values, int num_nodes);
};

struct MemoryPlan {
  int64_t arena_bytes = 0;
  std::vector<int64_t> offset;  // per value, -1: not in the arena
  std::vector<int64_t> bytes;   // per value, planned size
  std::vector<int64_t> scratch_offset;  // per node
  std::vector<int64_t> scratch_bytes;   // per node
  int64_t total_buffer_bytes = 0;       // sum of planned buffers before reuse
  int64_t peak_live_bytes = 0;          // the most bytes live at once: no plan can use less
};

MemoryPlan plan_memory(const Program& program, const AllocationRecord& record);

}  // namespace onnxtrain
