// `onnxtrain audit DIR --data D.npz`: the numerics audit of one training step on the first batch.
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <map>
#include <numeric>

#include "cli/commands.h"
#include "cli/data.h"

namespace onnxtrain::cli {
namespace {

std::string shapes_text(const NodeAuditResult& r) {
  std::string out;
  for (const auto& shape : r.output_shapes) {
    out += out.empty() ? "[" : " [";
    for (size_t i = 0; i < shape.size(); ++i) out += (i ? "x" : "") + std::to_string(shape[i]);
    out += "]";
  }
  return out;
}

void print_table(const std::vector<NodeAuditResult>& rows, int64_t top) {
  std::vector<const NodeAuditResult*> compared;
  for (const auto& r : rows)
    if (r.compared) compared.push_back(&r);
  std::stable_sort(compared.begin(), compared.end(),
                   [](const NodeAuditResult* a, const NodeAuditResult* b) { return a->rel_error > b->rel_error; });
  std::printf("%zu nodes, %zu compared with their float64 twin; max rel_error %.2e\n", rows.size(), compared.size(),
              compared.empty() ? 0.0 : compared.front()->rel_error);
  std::printf("%-10s  %-28s  %-40s  %-14s  %s\n", "rel_error", "op_type", "node", "normalization", "outputs");
  const size_t shown = std::min<size_t>(compared.size(), static_cast<size_t>(std::max<int64_t>(top, 0)));
  for (size_t i = 0; i < shown; ++i) {
    const NodeAuditResult& r = *compared[i];
    std::printf("%-10.2e  %-28s  %-40s  %-14s  %s\n", r.rel_error, r.op_type.c_str(), r.node.c_str(),
                r.normalization.c_str(), shapes_text(r).c_str());
  }
  // Nodes without a twin, one line per op type and reason: a model has many of the same kind.
  std::map<std::pair<std::string, std::string>, int> missing;
  for (const auto& r : rows)
    if (!r.compared) ++missing[{r.op_type, r.reason}];
  for (const auto& [key, count] : missing)
    std::printf("not compared: %d %s node%s: %s\n", count, key.first.c_str(), count > 1 ? "s" : "", key.second.c_str());
}

void write_json(const std::vector<NodeAuditResult>& rows, const std::string& path) {
  nlohmann::json out = nlohmann::json::array();
  for (const auto& r : rows) {
    out.push_back({{"node", r.node}, {"op_type", r.op_type},
                   {"rel_error", r.compared ? nlohmann::json(r.rel_error) : nlohmann::json(nullptr)},
                   {"normalization", r.normalization}, {"reason", r.reason}, {"worst_output", r.worst_output},
                   {"output_shapes", r.output_shapes}});
  }
  std::ofstream file(path);
  if (!file) throw Error("cannot write the audit to " + path);
  file << out.dump(1) << "\n";
  if (!file) throw Error("cannot write the audit to " + path);
}

}  // namespace

void run_audit(const AuditCommand& command) {
  require_artifacts(command.artifacts_dir);
  if (command.batch_size < 1) throw Error("--batch-size must be at least 1, not " + std::to_string(command.batch_size));
  const Dataset data = load_dataset(command.data_path);
  if (data.size() == 0) throw Error(command.data_path + " holds no examples to audit a step on");
  SessionOptions session_options;
  session_options.threads = command.threads;
  TrainingSession session(command.artifacts_dir, checkpoint_to_read(command.artifacts_dir, command.checkpoint_path),
                          session_options);
  std::vector<int64_t> first(static_cast<size_t>(std::min(command.batch_size, data.size())));
  std::iota(first.begin(), first.end(), int64_t{0});
  const std::vector<NodeAuditResult> rows = session.audit_step(gather_rows(data.x, first), gather_rows(data.y, first));
  print_table(rows, command.top);
  if (!command.json_path.empty()) write_json(rows, command.json_path);
}

}  // namespace onnxtrain::cli
