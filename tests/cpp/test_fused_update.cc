// apply_fused_updates: the optimizer update of the whole-step path (onnxtrain.TrainStep), whose
// gradients are a training step's outputs.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/error.h"
#include "optim/fused_update.h"
#include "runtime/thread_pool.h"

namespace onnxtrain {
namespace {

Tensor floats(std::vector<float> values) {
  const auto n = static_cast<int64_t>(values.size());
  return Tensor::from_vector<float>(std::move(values), TensorShape({n}));
}

FusedUpdate sgd(std::vector<float*> params, std::vector<int> grad_index, std::vector<int64_t> numel,
                std::vector<float*> buffers = {}, double momentum = 0) {
  FusedUpdate u;
  u.params = std::move(params);
  u.grad_index = std::move(grad_index);
  u.numel = std::move(numel);
  u.momentum_buffers = std::move(buffers);
  u.first_step.assign(u.params.size(), 1);
  u.sgd.lr = 0.5;
  u.sgd.momentum = momentum;
  return u;
}

TEST(FusedUpdate, MatchesTheFusedStepOnTheSameGradients) {
  ThreadPool pool(2);
  std::vector<float> a = {1, 2, 3}, b = {4, 5}, a_ref = a, b_ref = b, buf_a(3), buf_b(2), ref_buf_a(3), ref_buf_b(2);
  std::vector<Tensor> grads = {floats({0.5f, -1, 2}), floats({3, 4}), Tensor()};
  // Gradients out of order: b's is wrt gradient 1, a's is 0; gradient 2 reaches no parameter.
  apply_fused_updates(pool, {sgd({b.data(), a.data()}, {1, 0}, {2, 3}, {buf_b.data(), buf_a.data()}, 0.9)}, grads,
                      {"a", "b", "c"});
  TensorList ref{{a_ref.data(), b_ref.data()}, {grads[0].data<float>(), grads[1].data<float>()}, {3, 2}};
  SgdOptions o;
  o.lr = 0.5;
  o.momentum = 0.9;
  sgd_step(pool, ref, {ref_buf_a.data(), ref_buf_b.data()}, {1, 1}, o);
  EXPECT_EQ(a, a_ref);
  EXPECT_EQ(b, b_ref);
  EXPECT_EQ(buf_a, ref_buf_a);
  EXPECT_EQ(buf_b, ref_buf_b);
}

TEST(FusedUpdate, AGradientThatIsAnotherParameterIsReadBeforeItChanges) {
  // The graph passes parameter w2 through as w1's gradient: w1 must move by w2's old value.
  ThreadPool pool(1);
  Tensor w2 = floats({2, 4});
  std::vector<float> w1 = {10, 10};
  std::vector<Tensor> grads = {w2, floats({1, 1})};  // wrt gradients of w1 and w2
  apply_fused_updates(pool, {sgd({w2.data<float>(), w1.data()}, {1, 0}, {2, 2})}, grads, {"w1", "w2"});
  EXPECT_EQ(w1, (std::vector<float>{9, 8}));
  EXPECT_EQ(w2.data<float>()[0], 1.5f);
  EXPECT_EQ(w2.data<float>()[1], 3.5f);
  EXPECT_NE(grads[0].raw_data(), w2.raw_data()) << "the aliasing gradient was replaced by a copy";
  EXPECT_EQ(grads[0].data<float>()[0], 2.0f);
}

TEST(FusedUpdate, AMismatchRefusesBeforeAnyParameterChanges) {
  ThreadPool pool(1);
  std::vector<float> a = {1, 2}, b = {3, 4};
  const std::vector<float> a_before = a, b_before = b;
  const std::vector<std::string> wrt = {"fc.weight", "fc.bias"};
  auto refused = [&](std::vector<Tensor> grads, std::vector<int64_t> numel_b, const std::string& needle) {
    try {
      apply_fused_updates(pool, {sgd({a.data()}, {0}, {2}), sgd({b.data()}, {1}, numel_b)}, grads, wrt);
      ADD_FAILURE() << "no error for " << needle;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
    EXPECT_EQ(a, a_before);
    EXPECT_EQ(b, b_before);
  };
  refused({floats({1, 1}), Tensor()}, {2}, "no gradient reached parameter 'fc.bias'");
  refused({floats({1, 1}), Tensor::from_vector<double>({1, 1}, TensorShape({2}))}, {2},
          "the gradient of 'fc.bias' is float64");
  refused({floats({1, 1}), floats({1, 1, 1})}, {2}, "the gradient of 'fc.bias' has 3 elements, its parameter 2");
  refused({floats({1, 1})}, {2}, "gradient index 1 is outside the step's 1 gradients");
}

}  // namespace
}  // namespace onnxtrain
