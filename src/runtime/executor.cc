#include "runtime/executor.h"

#include <algorithm>
#include <cmath>

#include "core/buffer_cache.h"
#include "core/logging.h"
#include "runtime/half_compute.h"
#include "runtime/profiler.h"
#include "runtime/recording_arena.h"
#include "runtime/thread_pool.h"

namespace onnxtrain {

RunState::RunState(const Program& p, uint64_t s, ThreadPool& tp)
    : program(p), values(static_cast<size_t>(p.num_values())), seed(s), pool(tp) {
  for (const auto& kv : p.constants()) values[static_cast<size_t>(kv.first)] = kv.second;
}

// ---- KernelContext: the kernel's window onto the run ----

int KernelContext::num_inputs() const { return static_cast<int>(node_.inputs.size()); }

bool KernelContext::has_input(int i) const {
  return i >= 0 && i < num_inputs() && node_.inputs[static_cast<size_t>(i)] >= 0;
}

const Tensor& KernelContext::input(int i) const {
  OT_CHECK(has_input(i), "required input ", i, " is missing");
  const Tensor& t = state_.values[static_cast<size_t>(node_.inputs[static_cast<size_t>(i)])];
  OT_CHECK(t.defined(), "input ", i, " ('", state_.program.value_name(node_.inputs[static_cast<size_t>(i)]),
           "') has no value");
  return t;
}

int KernelContext::num_outputs() const { return static_cast<int>(node_.outputs.size()); }

bool KernelContext::output_needed(int i) const {
  return i >= 0 && i < num_outputs() && !node_.node->outputs[static_cast<size_t>(i)].empty();
}

Tensor& KernelContext::allocate_output(int i, DType dtype, const TensorShape& shape) {
  OT_CHECK(i >= 0 && i < num_outputs(), "kernel wrote output ", i, " of ", num_outputs());
  const int id = node_.outputs[static_cast<size_t>(i)];
  Tensor& slot = state_.values[static_cast<size_t>(id)];
  const int64_t bytes = static_cast<int64_t>(tensor_bytes(dtype, shape));
  if (state_.program.placement(id) == Placement::Arena) {
    if (state_.plan) {
      if (state_.plan->offset[id] >= 0 && state_.plan->bytes[id] == bytes) {
        slot = Tensor(dtype, shape, state_.arena + state_.plan->offset[id]);
        return slot;
      }
      // Shapes that depend on data, not on input shapes, can outgrow the plan.
      ++state_.unplanned_allocations;
    } else if (state_.record) {
      state_.record->bytes[id] = bytes;
    }
    // Arena values outside an arena: a recording run's come from the memory that becomes the
    // plan's arena; the rest go back to the system when freed, since later runs take this memory
    // from the plan's arena and cached blocks would only add to the RSS.
    std::shared_ptr<void> block;
    if (state_.recording_memory) block = state_.recording_memory->allocate(static_cast<size_t>(bytes));
    if (!block) block = allocate_uncached(static_cast<size_t>(bytes));
    void* data = block.get();
    slot = Tensor(dtype, shape, data, std::move(block));
    return slot;
  }
  slot = Tensor::empty(dtype, shape);
  return slot;
}

void KernelContext::set_list_output(int i, Tensor value) {
  OT_CHECK(i >= 0 && i < num_outputs(), "kernel wrote output ", i, " of ", num_outputs());
  OT_CHECK(value.is_list(), node_.node->describe(), ": output ", i, " must be a sequence or optional, got ", value.str());
  state_.values[static_cast<size_t>(node_.outputs[static_cast<size_t>(i)])] = std::move(value);
}

void KernelContext::adopt_output(int i, Tensor value) {
  OT_CHECK(i >= 0 && i < num_outputs(), "kernel wrote output ", i, " of ", num_outputs());
  OT_CHECK(value.holder() || value.is_list(), node_.node->describe(), ": output ", i,
           " must own its memory to be adopted");
  state_.values[static_cast<size_t>(node_.outputs[static_cast<size_t>(i)])] = std::move(value);
}

void KernelContext::alias_input(int out_index, int in_index, const TensorShape& shape) {
  const Tensor& src = input(in_index);
  if (src.is_list()) {  // Identity of a sequence: the list is immutable, so share it
    set_list_output(out_index, src);
    return;
  }
  const int id = node_.outputs[static_cast<size_t>(out_index)];
  if (state_.program.placement(id) == Placement::Standalone) {
    // Handed to the caller: it must own its memory, not borrow an arena's or an input's.
    allocate_output(out_index, src.dtype(), shape).copy_from(src);
    return;
  }
  state_.values[static_cast<size_t>(id)] = src.view(shape);
  if (state_.record) {
    int src_id = node_.inputs[static_cast<size_t>(in_index)];
    state_.record->alias_of[id] = state_.program.placement(src_id) == Placement::Arena ? src_id : -1;
  }
}

void* KernelContext::scratch(size_t bytes) {
  if (bytes == 0) return nullptr;
  check_allocation_size(bytes, "scratch memory of ", node_.node->describe());
  if (state_.plan && state_.plan->scratch_bytes[node_index_] >= static_cast<int64_t>(bytes))
    return state_.arena + state_.plan->scratch_offset[node_index_];
  if (state_.record)
    state_.record->scratch[node_index_] = std::max<int64_t>(state_.record->scratch[node_index_], bytes);
  std::shared_ptr<void> block;
  if (state_.recording_memory) block = state_.recording_memory->allocate(bytes);
  state_.node_scratch.push_back(block ? std::move(block) : allocate_aligned(bytes));
  return state_.node_scratch.back().get();
}

ThreadPool& KernelContext::threads() const { return state_.pool; }

namespace {
constexpr uint64_t kNodeSeedStride = 0x9E3779B97F4A7C15ULL;
}  // namespace

uint64_t single_node_run_seed(uint64_t run_seed, int node_index) {
  return run_seed + kNodeSeedStride * static_cast<uint64_t>(node_index);  // wraps, as the mix does
}

uint64_t KernelContext::random_seed() const {
  // splitmix64 of (run seed, node index): independent streams per node.
  uint64_t z = state_.seed + kNodeSeedStride * static_cast<uint64_t>(node_index_ + 1);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

// ---- execution ----

namespace {

void note_released(RunState& state, int id, const Tensor& value) {
  auto it = std::lower_bound(state.noted_ids.begin(), state.noted_ids.end(), id);
  if (it == state.noted_ids.end() || *it != id || !value.defined()) return;
  state.noted[static_cast<size_t>(it - state.noted_ids.begin())] = {value.dtype(), value.shape()};
}

std::string describe_inputs(const RunState& state, const CompiledNode& cn) {
  std::string out;
  for (size_t i = 0; i < cn.inputs.size(); ++i) {
    out += i ? ", " : "";
    if (cn.inputs[i] < 0) {
      out += "<omitted>";
      continue;
    }
    const Tensor& t = state.values[static_cast<size_t>(cn.inputs[i])];
    out += "'" + state.program.value_name(cn.inputs[i]) + "' " + (t.defined() ? t.str() : "<no value>");
  }
  return out;
}

template <typename T>
int64_t first_non_finite(const Tensor& t) {
  const T* p = t.data<T>();
  for (int64_t i = 0; i < t.numel(); ++i)
    if (!std::isfinite(p[i])) return i;
  return -1;
}

void check_outputs_finite(const RunState& state, const CompiledNode& cn) {
  for (int id : cn.outputs) {
    const Tensor& t = state.values[static_cast<size_t>(id)];
    if (!t.defined() || (t.dtype() != DType::Float32 && t.dtype() != DType::Float64)) continue;
    int64_t bad = t.dtype() == DType::Float32 ? first_non_finite<float>(t) : first_non_finite<double>(t);
    OT_CHECK(bad < 0, cn.node->describe(), " produced a non-finite value (", t.item_as_double(bad), ") at element ",
             bad, " of its output '", state.program.value_name(id), "' ", t.str(), "; inputs: ",
             describe_inputs(state, cn));
  }
}

std::string input_shapes(const RunState& state, const CompiledNode& cn) {
  std::string out;
  for (size_t i = 0; i < cn.inputs.size(); ++i) {
    out += i ? ", " : "";
    if (cn.inputs[i] >= 0 && state.values[static_cast<size_t>(cn.inputs[i])].defined())
      out += state.values[static_cast<size_t>(cn.inputs[i])].str();
  }
  return out;
}

}  // namespace

void execute(RunState& state, size_t begin, size_t end, const char* phase) {
  const auto& nodes = state.program.nodes();
  Profiler& profiler = Profiler::instance();
  for (size_t k = begin; k < end; ++k) {
    const CompiledNode& cn = nodes[k];
    KernelContext ctx(state, cn, static_cast<int>(k));
    const bool profiling = profiler.enabled();
    std::string shapes = profiling ? input_shapes(state, cn) : std::string();
    const int64_t start = profiling ? Profiler::now_us() : 0;
    try {
      if (cn.widen_float16 || cn.widen_bfloat16) compute_with_16bit_floats_widened(state, cn, ctx);
      else cn.kernel->compute(ctx);
    } catch (const UnsupportedError& e) {
      throw UnsupportedError(str_cat(cn.node->describe(), " (opset ", cn.opset, "): ", e.what()));
    } catch (const ExportMismatchError& e) {
      throw ExportMismatchError(str_cat(cn.node->describe(), ": ", e.what()));
    } catch (const std::exception& e) {
      OT_THROW(cn.node->describe(), " (opset ", cn.opset, ") failed: ", e.what(), "; inputs: ",
               describe_inputs(state, cn));
    }
    if (profiling)
      profiler.record(cn.node->name, cn.node->op_type, phase, std::move(shapes), start, Profiler::now_us() - start);
    state.node_scratch.clear();
    for (size_t o = 0; o < cn.outputs.size(); ++o) {
      OT_CHECK(state.values[static_cast<size_t>(cn.outputs[o])].defined() || cn.node->outputs[o].empty(),
               cn.node->describe(), " did not produce its output '", cn.node->outputs[o], "'");
    }
    if (state.options.check_finite) check_outputs_finite(state, cn);
    if (state.observer) state.observer->node_ran(state, k);
    for (int id : state.program.release_after(k)) {
      Tensor& value = state.values[static_cast<size_t>(id)];
      if (!state.noted_ids.empty()) note_released(state, id, value);
      value = Tensor();
    }
  }
}

}  // namespace onnxtrain
