#include "ops/tensor/einsum_equation.h"

#include <algorithm>

#include "core/error.h"

namespace onnxtrain {
namespace {

constexpr int kLetters = kEinsumLetters;
constexpr int kEllipsis = -1;

int label_id(char c) {
  if (c >= 'A' && c <= 'Z') return c - 'A';
  if (c >= 'a' && c <= 'z') return 26 + (c - 'a');
  return -2;
}

std::string label_name(int l) {
  if (l >= kLetters) return str_cat("ellipsis dim ", l - kLetters);
  return str_cat("label '", static_cast<char>(l < 26 ? 'A' + l : 'a' + (l - 26)), "'");
}

std::vector<int> parse_term(const std::string& term) {
  std::vector<int> out;
  bool ellipsis = false;
  for (size_t i = 0; i < term.size(); ++i) {
    if (term[i] == '.') {
      OT_CHECK(term.compare(i, 3, "...") == 0 && !ellipsis, "malformed ellipsis in einsum term '", term, "'");
      out.push_back(kEllipsis);
      ellipsis = true;
      i += 2;
      continue;
    }
    OT_CHECK(label_id(term[i]) >= 0, "invalid character '", term[i], "' in einsum term '", term, "'");
    out.push_back(label_id(term[i]));
  }
  return out;
}

}  // namespace

EinsumEquation parse_einsum_equation(std::string eq) {
  eq.erase(std::remove(eq.begin(), eq.end(), ' '), eq.end());
  EinsumEquation e;
  const size_t arrow = eq.find("->");
  const std::string lhs = eq.substr(0, arrow);
  for (size_t start = 0;;) {
    const size_t comma = lhs.find(',', start);
    e.terms.push_back(lhs.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  std::vector<int> count(kLetters, 0);
  bool ellipsis = false;
  for (const auto& t : e.terms)
    for (int l : parse_term(t)) {
      if (l == kEllipsis) ellipsis = true;
      else ++count[static_cast<size_t>(l)];
    }
  if (arrow != std::string::npos) {
    e.output = eq.substr(arrow + 2);
    parse_term(e.output);
    OT_CHECK(e.output.find("->") == std::string::npos, "einsum equation '", eq, "' has more than one '->'");
  } else {
    // Implicit output: the ellipsis dims, then the labels used exactly once, sorted.
    if (ellipsis) e.output = "...";
    for (int l = 0; l < kLetters; ++l)
      if (count[static_cast<size_t>(l)] == 1) e.output += static_cast<char>(l < 26 ? 'A' + l : 'a' + (l - 26));
  }
  return e;
}

namespace {

// Labels per dim of a term once its ellipsis covers `ell` of the `total` ellipsis dims (right-aligned).
std::vector<int> expand(const std::vector<int>& term, int ell, int total) {
  std::vector<int> out;
  for (int l : term) {
    if (l != kEllipsis) {
      out.push_back(l);
      continue;
    }
    for (int e = 0; e < ell; ++e) out.push_back(kLetters + total - ell + e);
  }
  return out;
}

// Ellipsis dims of a term for a tensor of `rank`; throws when the rank cannot match.
int ellipsis_dims(const std::vector<int>& term, int rank, const std::string& text, const char* what) {
  const int named = static_cast<int>(std::count_if(term.begin(), term.end(), [](int l) { return l != kEllipsis; }));
  const bool has = named != static_cast<int>(term.size());
  OT_CHECK(has ? rank >= named : rank == named, "einsum term '", text, "' does not fit ", what, " of rank ", rank);
  return rank - named;
}

}  // namespace

EinsumSpec make_einsum_spec(const EinsumEquation& eq, const std::vector<TensorShape>& shapes,
                            const TensorShape* ref) {
  OT_CHECK(eq.terms.size() == shapes.size(), "einsum equation has ", eq.terms.size(), " input terms for ",
           shapes.size(), " inputs");
  std::vector<std::vector<int>> terms;
  std::vector<int> ells;
  int total = 0;
  for (size_t i = 0; i < shapes.size(); ++i) {
    terms.push_back(parse_term(eq.terms[i]));
    ells.push_back(ellipsis_dims(terms.back(), shapes[i].rank(), eq.terms[i], "an input"));
    total = std::max(total, ells.back());
  }
  const std::vector<int> out_term = parse_term(eq.output);
  int out_ell = total;
  if (ref) {
    out_ell = ellipsis_dims(out_term, ref->rank(), eq.output, "the output");
    total = std::max(total, out_ell);
  } else if (std::find(out_term.begin(), out_term.end(), kEllipsis) == out_term.end()) {
    out_ell = 0;
  }
  EinsumSpec s;
  s.size.assign(static_cast<size_t>(kLetters + total), 1);
  std::vector<bool> present(s.size.size(), false);
  for (size_t i = 0; i < shapes.size(); ++i) {
    s.inputs.push_back(expand(terms[i], ells[i], total));
    const auto& labels = s.inputs.back();
    for (size_t p = 0; p < labels.size(); ++p) {
      const int l = labels[p];
      const int64_t d = shapes[i][static_cast<int>(p)];
      for (size_t q = 0; q < p; ++q)
        OT_CHECK(labels[q] != l || shapes[i][static_cast<int>(q)] == d, "einsum input ", i, " ", shapes[i].str(),
                 " repeats ", label_name(l), " over dims of different sizes");
      present[static_cast<size_t>(l)] = true;
      int64_t& sz = s.size[static_cast<size_t>(l)];
      if (d == 1) continue;
      OT_CHECK(sz == 1 || sz == d, "einsum ", label_name(l), " has size ", d, " in input ", i, " ", shapes[i].str(),
               " and ", sz, " in an earlier input");
      sz = d;
    }
  }
  s.output = expand(out_term, out_ell, total);
  s.kept.assign(s.size.size(), false);
  for (size_t p = 0; p < s.output.size(); ++p) {
    const int l = s.output[p];
    const int64_t sz = s.size[static_cast<size_t>(l)];
    int64_t d = sz;
    if (ref) {
      d = (*ref)[static_cast<int>(p)];
      OT_CHECK(d == sz || d == 1 || sz == 1, "einsum output dim ", p, " of ", ref->str(), " does not match size ", sz,
               " of its ", label_name(l), " in the inputs");
      for (size_t q = 0; q < p; ++q)
        OT_CHECK(s.output[q] != l || s.out_shape[static_cast<int>(q)] == d, "einsum output ", ref->str(),
                 " repeats a label over dims of different sizes");
    } else {
      OT_CHECK(present[static_cast<size_t>(l)], "einsum output term '", eq.output, "' has ", label_name(l),
               ", which no input has");
      OT_CHECK(std::count(s.output.begin(), s.output.end(), l) == 1, "einsum output term '", eq.output, "' repeats ",
               label_name(l));
    }
    s.out_shape.push_back(d);
    if (sz > 1 && d == sz) s.kept[static_cast<size_t>(l)] = true;
  }
  return s;
}

}  // namespace onnxtrain
