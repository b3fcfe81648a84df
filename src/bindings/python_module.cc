// onnxtrain._C: the engine as seen from Python. Tensors cross as DLPack capsules, without copies;
// compute runs with the GIL released.
#include <chrono>

#include <pybind11/functional.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "audit/node_audit.h"
#include "bindings/dlpack_convert.h"
#include "bindings/python_op_bridge.h"
#include "core/buffer_cache.h"
#include "core/logging.h"
#include "onnx/model_io.h"
#include "opdef/op_registry.h"
#include "optim/fused_step.h"
#include "optim/fused_update.h"
#include "runtime/arena_pool.h"
#include "runtime/blas.h"
#include "runtime/profiler.h"
#include "runtime/thread_pool.h"
#include "session/training_session.h"

namespace py = pybind11;
using namespace onnxtrain;

namespace {

std::vector<DType> declared_dtypes(const Graph& g, const std::vector<std::string>& names) {
  std::vector<DType> out;
  for (const auto& n : names) {
    const ValueInfo* vi = g.info(n);
    out.push_back(vi ? vi->dtype : DType::Undefined);
  }
  return out;
}

std::vector<Tensor> tensors_from(const py::list& capsules, const std::vector<DType>& expected) {
  std::vector<Tensor> out;
  out.reserve(capsules.size());
  for (size_t i = 0; i < capsules.size(); ++i)
    out.push_back(tensor_from_capsule(capsules[i].cast<py::capsule>(), i < expected.size() ? expected[i] : DType::Undefined));
  return out;
}

// Capsules for the defined tensors (None for the others), and the positions holding bool data
// that torch receives as uint8 and must view back as bool.
py::tuple capsules_from(const std::vector<Tensor>& tensors) {
  py::list caps;
  py::list bools;
  for (size_t i = 0; i < tensors.size(); ++i) {
    if (!tensors[i].defined()) {
      caps.append(py::none());
      continue;
    }
    caps.append(capsule_from_tensor(tensors[i]));
    if (tensors[i].dtype() == DType::Bool) bools.append(i);
  }
  return py::make_tuple(caps, bools);
}

py::dict audit_row_dict(const audit::NodeAudit& row) {
  py::dict d;
  d["node"] = row.node;
  d["op_type"] = row.op_type;
  d["domain"] = row.domain;
  d["graph"] = row.phase;
  d["rel_error"] = row.rel_error ? py::cast(*row.rel_error) : py::none();
  d["reason"] = row.reason;
  d["worst_output"] = row.worst_output;
  d["normalization"] = row.normalization;
  d["rounding_steps"] = row.rounding_steps ? py::cast(*row.rounding_steps) : py::none();
  d["computed_in"] = row.computed_in;
  py::list shapes;
  for (const auto& s : row.output_shapes) shapes.append(py::tuple(py::cast(s.to_vector())));
  d["output_shapes"] = shapes;
  return d;
}

py::dict stash_entry_dict(const StashReportEntry& e) {
  py::dict d;
  d["name"] = e.name;
  d["kind"] = e.kind;
  d["dtype"] = std::string(dtype_name(e.dtype));
  d["shape"] = e.shape.to_vector();
  d["bytes"] = e.bytes;
  return d;
}

class PyTrainingSession {
 public:
  PyTrainingSession(const py::bytes& model, std::vector<std::string> wrt, std::vector<std::string> outputs_with_grad,
                    bool check_finite, int opt_level, std::string memory_optimization) {
    std::string bytes(model);
    TrainingSessionOptions opts{std::move(wrt), std::move(outputs_with_grad), check_finite, opt_level};
    opts.memory_optimization = std::move(memory_optimization);
    // Without the GIL from the parse on: the eager warm-up builds sessions on a thread of its own
    // while the user's eager calls go on.
    py::gil_scoped_release nogil;
    session_ = std::make_unique<TrainingSession>(load_model(bytes), std::move(opts));
    const TrainingGraph& tg = session_->training_graph();
    input_dtypes_ = declared_dtypes(tg.graph, tg.forward_inputs);
    grad_dtypes_ = declared_dtypes(tg.graph, tg.output_grad_inputs);
  }

  // `audit`: an AuditObserver that judges every node of this call, forward and backward.
  py::tuple forward(const py::list& inputs, uint64_t seed, std::shared_ptr<audit::AuditObserver> audit) {
    std::vector<Tensor> in = tensors_from(inputs, input_dtypes_);
    std::vector<Tensor> out;
    std::shared_ptr<ForwardCall> call;
    {
      py::gil_scoped_release nogil;
      call = session_->forward(in, seed, out, std::move(audit));
    }
    py::tuple caps = capsules_from(out);
    return py::make_tuple(caps[0], caps[1], call);
  }

  py::tuple backward(ForwardCall& call, const py::list& grads) {
    std::vector<Tensor> in = output_grads_from(grads);
    std::vector<Tensor> out;
    {
      py::gil_scoped_release nogil;
      out = session_->backward(call, in);
    }
    return capsules_from(out);
  }

  // The whole step (onnxtrain.TrainStep): forward, backward from `grads`, then the optimizer's
  // `updates` on the wrt gradients, in one call without the GIL. Returns the forward's outputs,
  // their bool positions, and the wrt gradients (what param.grad shows afterwards).
  py::tuple train_step(const py::list& inputs, uint64_t seed, const py::list& grads,
                       const std::vector<FusedUpdate>& updates) {
    std::vector<Tensor> in = tensors_from(inputs, input_dtypes_);
    std::vector<Tensor> output_grads = output_grads_from(grads);
    std::vector<Tensor> out, wrt_grads;
    {
      py::gil_scoped_release nogil;
      std::shared_ptr<ForwardCall> call = session_->forward(in, seed, out);
      wrt_grads = session_->backward(*call, output_grads);
      apply_fused_updates(ThreadPool::global(), updates, wrt_grads, session_->training_graph().wrt);
    }
    py::tuple caps = capsules_from(out);
    py::tuple grad_caps = capsules_from(wrt_grads);
    return py::make_tuple(caps[0], caps[1], grad_caps[0]);
  }

  const TrainingGraph& graph() const { return session_->training_graph(); }
  void save_graphs(const std::string& prefix) const { session_->save_graphs(prefix); }

 private:
  std::vector<Tensor> output_grads_from(const py::list& grads) const {
    std::vector<Tensor> out;
    for (size_t i = 0; i < grads.size(); ++i)
      out.push_back(grads[i].is_none() ? Tensor()
                                       : tensor_from_capsule(grads[i].cast<py::capsule>(),
                                                             i < grad_dtypes_.size() ? grad_dtypes_[i] : DType::Undefined));
    return out;
  }

  std::unique_ptr<TrainingSession> session_;
  std::vector<DType> input_dtypes_, grad_dtypes_;
};

class PyInferenceSession {
 public:
  PyInferenceSession(const py::bytes& model, bool check_finite, int opt_level) {
    std::string bytes(model);
    py::gil_scoped_release nogil;
    Graph g = load_model(bytes);
    input_dtypes_ = declared_dtypes(g, g.inputs);
    session_ = std::make_unique<InferenceSession>(std::move(g), check_finite, opt_level);
  }
  py::tuple run(const py::list& inputs, uint64_t seed) {
    std::vector<Tensor> in = tensors_from(inputs, input_dtypes_);
    std::vector<Tensor> out;
    {
      py::gil_scoped_release nogil;
      out = session_->run(in, seed);
    }
    return capsules_from(out);
  }
  std::vector<std::string> inputs() const { return session_->program().graph().inputs; }
  std::vector<std::string> outputs() const { return session_->program().graph().outputs; }

 private:
  std::unique_ptr<InferenceSession> session_;
  std::vector<DType> input_dtypes_;
};

}  // namespace

// Optimizer steps take raw float32 data pointers (tensor.data_ptr()) from the Python wrappers,
// which check dtype, device and layout: DLPack per tensor would cost more than the step itself.
template <typename T>
std::vector<T*> as_pointers(const std::vector<uintptr_t>& addresses) {
  std::vector<T*> out;
  out.reserve(addresses.size());
  for (uintptr_t a : addresses) out.push_back(reinterpret_cast<T*>(a));
  return out;
}

TensorList tensor_list(const std::vector<uintptr_t>& params, const std::vector<uintptr_t>& grads,
                       std::vector<int64_t> numel) {
  return TensorList{as_pointers<float>(params), as_pointers<const float>(grads), std::move(numel)};
}

FusedUpdate fused_update(FusedUpdate::Kind kind, const std::vector<uintptr_t>& params, std::vector<int> grad_index,
                         std::vector<int64_t> numel) {
  FusedUpdate u;
  u.kind = kind;
  u.params = as_pointers<float>(params);
  u.grad_index = std::move(grad_index);
  u.numel = std::move(numel);
  return u;
}

PYBIND11_MODULE(_C, m) {
  m.doc() = "onnxtrain C++ engine";
  static py::exception<Error> engine_error(m, "EngineError", PyExc_RuntimeError);
  static py::exception<UnsupportedError> unsupported_error(m, "UnsupportedError", engine_error.ptr());
  static py::exception<ExportMismatchError> export_mismatch_error(m, "ExportMismatchError", engine_error.ptr());
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const UnsupportedError& e) {
      unsupported_error(e.what());
    } catch (const ExportMismatchError& e) {
      export_mismatch_error(e.what());
    } catch (const Error& e) {
      engine_error(e.what());
    }
  });

  install_python_function_bridge();

  m.def("set_log_level", [](int level) { set_log_level(static_cast<LogLevel>(level)); });
  m.def("set_log_sink", [](std::function<void(int, std::string)> fn) {
    if (!fn) {
      set_log_sink(nullptr);
      return;
    }
    set_log_sink([fn](LogLevel level, const std::string& msg) {
      py::gil_scoped_acquire gil;
      fn(static_cast<int>(level), msg);
    });
  });
  m.def("profiler_start", [](const std::string& path) { Profiler::instance().start(path); });
  m.def("profiler_stop", [] { return Profiler::instance().stop(); });
  m.def("profiler_enabled", [] { return Profiler::instance().enabled(); });
  m.def("sgd_step", [](const std::vector<uintptr_t>& params, const std::vector<uintptr_t>& grads,
                       const std::vector<int64_t>& numel, const std::vector<uintptr_t>& bufs,
                       const std::vector<uint8_t>& first_step, double lr, double momentum, double dampening,
                       double weight_decay, bool nesterov, bool maximize) {
    TensorList t = tensor_list(params, grads, numel);
    std::vector<float*> b = as_pointers<float>(bufs);
    py::gil_scoped_release nogil;
    sgd_step(ThreadPool::global(), t, b, first_step, {lr, momentum, dampening, weight_decay, nesterov, maximize});
  });
  m.def("adam_step", [](const std::vector<uintptr_t>& params, const std::vector<uintptr_t>& grads,
                        const std::vector<int64_t>& numel, const std::vector<uintptr_t>& exp_avg,
                        const std::vector<uintptr_t>& exp_avg_sq, const std::vector<uintptr_t>& max_exp_avg_sq,
                        const std::vector<double>& steps, double lr, double beta1, double beta2, double eps,
                        double weight_decay, bool amsgrad, bool maximize, bool decoupled) {
    TensorList t = tensor_list(params, grads, numel);
    std::vector<float*> m1 = as_pointers<float>(exp_avg), m2 = as_pointers<float>(exp_avg_sq),
                        mx = as_pointers<float>(max_exp_avg_sq);
    py::gil_scoped_release nogil;
    adam_step(ThreadPool::global(), t, m1, m2, mx, steps,
              {lr, beta1, beta2, eps, weight_decay, amsgrad, maximize, decoupled});
  });
  // The optimizer updates of onnxtrain.TrainStep: like sgd_step and adam_step, with each
  // gradient named by its position among the training step's wrt gradients.
  py::class_<FusedUpdate>(m, "FusedUpdate");
  m.def("sgd_update", [](const std::vector<uintptr_t>& params, std::vector<int> grad_index, std::vector<int64_t> numel,
                         const std::vector<uintptr_t>& bufs, std::vector<uint8_t> first_step, double lr,
                         double momentum, double dampening, double weight_decay, bool nesterov, bool maximize) {
    FusedUpdate u = fused_update(FusedUpdate::Kind::Sgd, params, std::move(grad_index), std::move(numel));
    u.momentum_buffers = as_pointers<float>(bufs);
    u.first_step = std::move(first_step);
    u.sgd = {lr, momentum, dampening, weight_decay, nesterov, maximize};
    return u;
  });
  m.def("adam_update", [](const std::vector<uintptr_t>& params, std::vector<int> grad_index, std::vector<int64_t> numel,
                          const std::vector<uintptr_t>& exp_avg, const std::vector<uintptr_t>& exp_avg_sq,
                          const std::vector<uintptr_t>& max_exp_avg_sq, std::vector<double> steps, double lr,
                          double beta1, double beta2, double eps, double weight_decay, bool amsgrad, bool maximize,
                          bool decoupled) {
    FusedUpdate u = fused_update(FusedUpdate::Kind::Adam, params, std::move(grad_index), std::move(numel));
    u.exp_avg = as_pointers<float>(exp_avg);
    u.exp_avg_sq = as_pointers<float>(exp_avg_sq);
    u.max_exp_avg_sq = as_pointers<float>(max_exp_avg_sq);
    u.steps = std::move(steps);
    u.adam = {lr, beta1, beta2, eps, weight_decay, amsgrad, maximize, decoupled};
    return u;
  });
  m.def("sgemm_gflops", [](int64_t n, int repeats) {
    // The engine's own float32 GEMM at n x n x n on the current pool: best of `repeats`.
    std::vector<float> a(static_cast<size_t>(n * n), 0.5f), b(a.size(), 0.25f), c(a.size());
    py::gil_scoped_release nogil;
    double best = 1e30;
    for (int r = 0; r < repeats; ++r) {
      auto start = std::chrono::steady_clock::now();
      gemm<float>(false, false, n, n, n, 1.0f, a.data(), n, b.data(), n, 0.0f, c.data(), n, ThreadPool::global());
      best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    }
    return 2.0 * double(n) * double(n) * double(n) / best / 1e9;
  }, py::arg("n") = 2048, py::arg("repeats") = 5);
  m.def("cached_buffer_bytes", &cached_buffer_bytes, "Bytes of freed buffers kept for reuse.");
  m.def("buffer_cache_limit", &buffer_cache_limit);
  m.def("set_buffer_cache_limit", &set_buffer_cache_limit, "Bytes of freed buffers kept at most (LRU).");
  m.def("idle_arena_bytes", &idle_arena_bytes, "Bytes of memory-plan arenas kept for the next run.");
  m.def("arena_budget", &arena_budget);
  m.def("set_arena_budget", &set_arena_budget, "Bytes of idle memory-plan arenas kept at most (LRU).");
  m.def("set_num_threads", &ThreadPool::set_num_threads);
  m.def("get_num_threads", [] { return ThreadPool::global().num_threads(); });
  m.def("ops_with_kernels", [] { return OpRegistry::instance().ops_with_kernels(); });
  m.def("ops_with_gradients", [] { return OpRegistry::instance().ops_with_gradients(); });
  // The ops whose records call their results random draws: the front end marks a capture that has
  // one, so that each run gets its own seed.
  m.def("random_draw_ops", [] {
    std::vector<std::string> ops;
    for (const OpRecord* r : OpRegistry::instance().records())
      if (r->repeatability == Repeatability::RandomDraw) ops.push_back(r->op_type);
    return ops;
  });
  m.def("_echo", [](py::capsule c) { return capsule_from_tensor(tensor_from_capsule(c)); },
        "Imports a DLPack capsule and exports it again: proves the exchange copies nothing.");
  m.def("check_model", [](const py::bytes& model) { save_model(load_model(std::string(model)), {}, true); },
        "Round-trips a model through the IR and runs onnx::checker on the result.");

  py::class_<ForwardCall, std::shared_ptr<ForwardCall>>(m, "ForwardCall")
      .def("stash_report", [](const ForwardCall& c) {
        py::list out;
        for (const auto& e : c.stash_report()) out.append(stash_entry_dict(e));
        return out;
      })
      .def("stashed_bytes", &ForwardCall::stashed_bytes, py::arg("include_inputs") = false)
      .def("recomputed_bytes", &ForwardCall::recomputed_bytes)
      .def_property_readonly("backward_done", &ForwardCall::backward_done);

  py::class_<audit::AuditObserver, std::shared_ptr<audit::AuditObserver>>(
      m, "AuditObserver", "Collects the numerics audit of one training step (onnxtrain.audit)")
      .def(py::init<>())
      .def("rows", [](const audit::AuditObserver& a) {
        py::list out;
        for (const auto& row : a.rows()) out.append(audit_row_dict(row));
        return out;
      });

  py::class_<PyTrainingSession>(m, "TrainingSession")
      .def(py::init<const py::bytes&, std::vector<std::string>, std::vector<std::string>, bool, int, std::string>(),
           py::arg("model"), py::arg("wrt"), py::arg("outputs_with_grad") = std::vector<std::string>{},
           py::arg("check_finite") = false, py::arg("opt_level") = -1, py::arg("memory_optimization") = "")
      .def("forward", &PyTrainingSession::forward, py::arg("inputs"), py::arg("seed") = 0,
           py::arg("audit") = nullptr)
      .def("backward", &PyTrainingSession::backward, py::arg("call"), py::arg("grads"))
      .def("train_step", &PyTrainingSession::train_step, py::arg("inputs"), py::arg("seed"), py::arg("grads"),
           py::arg("updates"))
      .def("save_graphs", &PyTrainingSession::save_graphs)
      .def_property_readonly("forward_inputs", [](const PyTrainingSession& s) { return s.graph().forward_inputs; })
      .def_property_readonly("forward_outputs", [](const PyTrainingSession& s) { return s.graph().forward_outputs; })
      .def_property_readonly("differentiable_outputs",
                             [](const PyTrainingSession& s) { return s.graph().differentiable_outputs; })
      .def_property_readonly("differentiable_output_positions",
                             [](const PyTrainingSession& s) { return s.graph().differentiable_output_positions; })
      .def_property_readonly("num_backward_nodes", [](const PyTrainingSession& s) {
        return s.graph().graph.nodes.size() - s.graph().yield_index;
      })
      .def_property_readonly("wrt", [](const PyTrainingSession& s) { return s.graph().wrt; })
      .def_property_readonly("wrt_has_grad",
                             [](const PyTrainingSession& s) {
                               std::vector<bool> out;
                               for (const auto& g : s.graph().wrt_grads) out.push_back(!g.empty());
                               return out;
                             })
      .def_property_readonly("wrt_output_dependencies",
                             [](const PyTrainingSession& s) { return s.graph().wrt_output_dependencies; })
      .def_property_readonly("stashed", [](const PyTrainingSession& s) {
        py::list out;
        for (const auto& v : s.graph().stashed) out.append(py::make_tuple(v.value, stash_kind_name(v.kind)));
        return out;
      })
      .def_property_readonly("recomputed", [](const PyTrainingSession& s) {
        py::list out;
        for (const auto& v : s.graph().recomputed) out.append(v.value);
        return out;
      });

  py::class_<PyInferenceSession>(m, "InferenceSession")
      .def(py::init<const py::bytes&, bool, int>(), py::arg("model"), py::arg("check_finite") = false,
           py::arg("opt_level") = -1)
      .def("run", &PyInferenceSession::run, py::arg("inputs"), py::arg("seed") = 0)
      .def_property_readonly("inputs", &PyInferenceSession::inputs)
      .def_property_readonly("outputs", &PyInferenceSession::outputs);
}
