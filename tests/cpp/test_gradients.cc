// Every gradient rule against finite differences. Cases live beside their op family in
// tests/cpp/grad_cases_<family>.cc; this file runs them all and checks that none is missing.
#include <gtest/gtest.h>

#include <set>

#include "opdef/op_registry.h"
#include "tests/cpp/gradient_check.h"

namespace onnxtrain::testing {
namespace {

class GradientCheck : public ::testing::TestWithParam<GradCase> {};

TEST_P(GradientCheck, MatchesFiniteDifferences) {
  std::string problems = check_gradient(GetParam());
  EXPECT_EQ(problems, "") << GetParam().op_type;
}

INSTANTIATE_TEST_SUITE_P(Rules, GradientCheck, ::testing::ValuesIn(grad_cases()),
                         [](const ::testing::TestParamInfo<GradCase>& info) { return info.param.name; });

// The same cases (and the real-model-sized production cases) in float32, through the kernels a
// float32 model runs, against float64 on the same values: with one thread and with two.
class Float32Check : public ::testing::TestWithParam<GradCase> {};

TEST_P(Float32Check, MatchesFloat64OnOneAndTwoThreads) {
  for (int threads : {1, 2}) EXPECT_EQ(check_float32_against_float64(GetParam(), threads), "") << GetParam().op_type;
}

std::vector<GradCase> float32_cases() {
  std::vector<GradCase> all = grad_cases();
  all.insert(all.end(), production_cases().begin(), production_cases().end());
  return all;
}

INSTANTIATE_TEST_SUITE_P(Rules, Float32Check, ::testing::ValuesIn(float32_cases()),
                         [](const ::testing::TestParamInfo<GradCase>& info) { return info.param.name; });

TEST(GradientCoverage, EveryRegisteredRuleHasAFiniteDifferenceCase) {
  std::set<std::string> covered;
  for (const auto& c : grad_cases()) covered.insert(c.domain + "::" + c.op_type);
  for (const auto& [domain, op] : OpRegistry::instance().ops_with_gradients())
    EXPECT_TRUE(covered.count(domain + "::" + op)) << "no finite-difference case for the gradient of " << op;
}

TEST(GradientCoverage, CaseNamesAreUnique) {
  std::set<std::string> names;
  for (const auto& c : float32_cases()) EXPECT_TRUE(names.insert(c.name).second) << c.name;
}

}  // namespace
}  // namespace onnxtrain::testing
