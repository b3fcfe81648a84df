// Runs ONNX's backend node tests (Debian's libonnx-testdata) through the executor and reports
// pass / fail / unsupported per test and in total.
//
//   unsupported: the model needs an op onnxtrain has no kernel for: we do not claim that op.
//   fail:        every op has a kernel, but the run errs or the outputs differ. Each such test must
//                be listed in the expected-failure file with its reason; the list may only shrink,
//                so a listed test that passes is reported too.
#include <dirent.h>
#include <sys/stat.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <iostream>
#include <map>
#include <regex>
#include <set>
#include <sstream>

#include "core/logging.h"
#include "onnx/function_expansion.h"
#include "onnx/model_io.h"
#include "opdef/op_registry.h"
#include "runtime/program.h"
#include "session/training_session.h"

using namespace onnxtrain;

namespace {

std::vector<std::string> list_dir(const std::string& dir) {
  std::vector<std::string> out;
  if (DIR* d = opendir(dir.c_str())) {
    while (dirent* e = readdir(d))
      if (e->d_name[0] != '.') out.push_back(e->d_name);
    closedir(d);
  }
  std::sort(out.begin(), out.end());
  return out;
}

bool exists(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream os;
  os << in.rdbuf();
  return os.str();
}

// Same rule as onnx.backend.test: |actual - expected| <= atol + rtol * |expected|, NaN == NaN.
std::string compare(const Tensor& expected, const Tensor& actual, double rtol, double atol) {
  if (expected.is_list() && actual.is_list() && expected.dtype() == actual.dtype()) {
    if (expected.items().size() != actual.items().size())
      return str_cat(actual.items().size(), " elements, expected ", expected.items().size());
    for (size_t k = 0; k < expected.items().size(); ++k) {
      std::string diff = compare(expected.items()[k], actual.items()[k], rtol, atol);
      if (!diff.empty()) return str_cat("element ", k, ": ", diff);
    }
    return "";
  }
  if (expected.dtype() != actual.dtype())
    return str_cat("element type ", dtype_name(actual.dtype()), ", expected ", dtype_name(expected.dtype()));
  if (expected.shape() != actual.shape())
    return str_cat("shape ", actual.shape().str(), ", expected ", expected.shape().str());
  const bool exact = !is_floating(expected.dtype());
  for (int64_t i = 0; i < expected.numel(); ++i) {
    double e = expected.item_as_double(i), a = actual.item_as_double(i);
    if (std::isnan(e) && std::isnan(a)) continue;
    if (std::isinf(e) && e == a) continue;
    bool ok = exact ? e == a : std::abs(a - e) <= atol + rtol * std::abs(e);
    if (!ok) return str_cat("element ", i, " is ", a, ", expected ", e);
  }
  return "";
}

struct Result {
  enum Kind { Pass, Fail, Unsupported } kind;
  std::string detail;
};

// Sequence and optional values are stored as their own protos.
Tensor load_declared(const std::string& bytes, const Graph& g, const std::string& value) {
  const ValueInfo* vi = g.info(value);
  return load_value_proto(bytes, vi ? vi->dtype : DType::Undefined);
}

// The test data stores bfloat16 tensors as uint16 arrays (numpy has no bfloat16).
Tensor as_declared(Tensor t, const Graph& g, const std::string& value) {
  if (t.dtype() != DType::UInt16) return t;
  const ValueInfo* vi = g.info(value);
  if (vi && vi->dtype == DType::BFloat16) return Tensor(DType::BFloat16, t.shape(), t.raw_data(), t.holder());
  return t;
}

void collect_missing_kernels(const Graph& g, std::set<std::string>& missing) {
  for (const Node& n : g.nodes) {
    if (!OpRegistry::instance().kernel(n.domain, n.op_type))
      missing.insert((n.domain.empty() ? "" : n.domain + "::") + n.op_type);
    for (const auto& kv : n.attrs)
      if (kv.second.kind == Attribute::Kind::Graph && kv.second.g) collect_missing_kernels(*kv.second.g, missing);
  }
}

Result unsupported(const std::set<std::string>& missing) {
  std::string ops;
  for (const auto& m : missing) ops += (ops.empty() ? "" : ", ") + m;
  return {Result::Unsupported, "no kernel for " + ops};
}

Result run_test(const std::string& dir) {
  const std::string model = read_file(dir + "/model.onnx");
  std::set<std::string> missing;
  // Function ops the loader may expand into ops that have kernels: judged after loading.
  for (const auto& [domain, op] : list_model_ops(model))
    if (!OpRegistry::instance().kernel(domain, op) && !is_expandable_function(domain, op, 1 << 20))
      missing.insert((domain.empty() ? "" : domain + "::") + op);
  if (!missing.empty()) return unsupported(missing);
  Graph g;
  try {
    g = load_model(model);
  } catch (const std::exception& e) {
    return {Result::Fail, std::string("load: ") + e.what()};
  }
  collect_missing_kernels(g, missing);
  if (!missing.empty()) return unsupported(missing);
  try {
    InferenceSession session(g);
    std::vector<std::string> sets;
    for (const auto& s : list_dir(dir))
      if (s.rfind("test_data_set_", 0) == 0) sets.push_back(s);
    for (const auto& set : sets) {
      std::vector<Tensor> inputs, expected;
      for (size_t i = 0; exists(str_cat(dir, "/", set, "/input_", i, ".pb")); ++i)
        inputs.push_back(as_declared(load_declared(read_file(str_cat(dir, "/", set, "/input_", i, ".pb")), g,
                                                   i < g.inputs.size() ? g.inputs[i] : ""),
                                     g, i < g.inputs.size() ? g.inputs[i] : ""));
      for (size_t i = 0; exists(str_cat(dir, "/", set, "/output_", i, ".pb")); ++i)
        expected.push_back(as_declared(load_declared(read_file(str_cat(dir, "/", set, "/output_", i, ".pb")), g,
                                                     i < g.outputs.size() ? g.outputs[i] : ""),
                                       g, i < g.outputs.size() ? g.outputs[i] : ""));
      std::vector<Tensor> outputs = session.run(inputs, 0);
      if (outputs.size() != expected.size())
        return {Result::Fail, str_cat(set, ": ", outputs.size(), " outputs, expected ", expected.size())};
      for (size_t i = 0; i < outputs.size(); ++i) {
        std::string diff = compare(expected[i], outputs[i], 1e-3, 1e-7);
        if (!diff.empty()) return {Result::Fail, str_cat(set, " output ", i, ": ", diff)};
      }
    }
    return {Result::Pass, ""};
  } catch (const std::exception& e) {
    return {Result::Fail, e.what()};
  }
}

// Lines "test_name  # reason"; blank lines and comments are skipped.
std::map<std::string, std::string> read_expected(const std::string& path) {
  std::map<std::string, std::string> out;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    std::string name = line.substr(0, line.find('#'));
    name.erase(std::remove_if(name.begin(), name.end(), ::isspace), name.end());
    if (name.empty()) continue;
    size_t hash = line.find('#');
    out[name] = hash == std::string::npos ? "" : line.substr(hash + 1);
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  std::string data = "/usr/share/libonnx-testdata/data/node", expected_path, filter = ".*";
  bool verbose = false;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--data" && i + 1 < argc) data = argv[++i];
    else if (a == "--expected" && i + 1 < argc) expected_path = argv[++i];
    else if (a == "--filter" && i + 1 < argc) filter = argv[++i];
    else if (a == "-v" || a == "--verbose") verbose = true;
    else {
      std::cerr << "usage: " << argv[0] << " [--data DIR] [--expected FILE] [--filter REGEX] [-v]\n";
      return 2;
    }
  }
  set_log_level(LogLevel::Error);
  auto expected = expected_path.empty() ? std::map<std::string, std::string>{} : read_expected(expected_path);
  std::regex pattern(filter);
  int pass = 0, fail = 0, unsupported = 0;
  std::vector<std::string> unexpected_failures, unexpected_passes;
  for (const auto& test : list_dir(data)) {
    if (!std::regex_search(test, pattern)) continue;
    Result r = run_test(data + "/" + test);
    const bool listed = expected.count(test) != 0;
    const char* label = r.kind == Result::Pass ? "pass" : r.kind == Result::Fail ? "FAIL" : "unsupported";
    if (r.kind == Result::Pass) ++pass;
    if (r.kind == Result::Fail) ++fail;
    if (r.kind == Result::Unsupported) ++unsupported;
    if (r.kind == Result::Fail && !listed) unexpected_failures.push_back(test + ": " + r.detail);
    if (r.kind != Result::Fail && listed) unexpected_passes.push_back(test);
    if (verbose || (r.kind == Result::Fail && !listed))
      std::cout << label << "  " << test << (r.detail.empty() ? "" : "  (" + r.detail.substr(0, 300) + ")") << "\n";
  }
  std::cout << "ONNX node tests: " << pass << " pass, " << fail << " fail (" << fail - int(unexpected_failures.size())
            << " expected), " << unsupported << " unsupported (op without a kernel), of " << pass + fail + unsupported
            << "\n";
  for (const auto& t : unexpected_failures) std::cout << "unexpected failure: " << t << "\n";
  for (const auto& t : unexpected_passes)
    std::cout << "listed as failing but did not fail (remove it from the expected-failure list): " << t << "\n";
  return unexpected_failures.empty() && unexpected_passes.empty() ? 0 : 1;
}
