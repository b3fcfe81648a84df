// Finite-difference cases for the recurrent family (src/ops/rnn: LSTM, GRU, RNN): every
// direction, both layouts, unequal sequence lengths, initial states, biases, peepholes, clip, and
// GRU's two reset placements. Sizes stay small: the check is element-by-element in float64.
#include <gtest/gtest.h>

#include "session/training_session.h"
#include "tests/cpp/gradient_check.h"

namespace onnxtrain::testing {
namespace {

constexpr DType F64 = DType::Float64;

Tensor r(const TensorShape& s, uint64_t seed, double scale = 0.6) { return random_tensor(F64, s, seed, -scale, scale); }
Tensor lens(std::vector<int32_t> v) { return Tensor::from_vector(v, {static_cast<int64_t>(v.size())}); }
Tensor none() { return Tensor(); }

Attribute i(int64_t v) { return Attribute::of_int(v); }
Attribute f(float v) { return Attribute::of_float(v); }
Attribute s(const char* v) { return Attribute::of_string(v); }
Attribute names(std::vector<std::string> v) {
  Attribute a;
  a.kind = Attribute::Kind::Strings;
  a.strings = std::move(v);
  return a;
}

struct Sizes {
  int64_t T = 3, B = 2, I = 3, H = 4;
  int D = 1;
  int layout = 0;
};

// X, W, R, B, sequence_lens, initial_h[, initial_c, P] for `gates` gates; the flags pick the
// optional inputs.
std::vector<Tensor> rnn_inputs(const Sizes& z, int gates, uint64_t seed, bool bias, std::vector<int32_t> seq,
                               bool initial_h, bool lstm_extras = false, bool initial_c = false, bool peepholes = false) {
  const TensorShape x = z.layout == 0 ? TensorShape{z.T, z.B, z.I} : TensorShape{z.B, z.T, z.I};
  const TensorShape state = z.layout == 0 ? TensorShape{z.D, z.B, z.H} : TensorShape{z.B, z.D, z.H};
  std::vector<Tensor> in{r(x, seed, 1.0), r({z.D, gates * z.H, z.I}, seed + 1), r({z.D, gates * z.H, z.H}, seed + 2),
                         bias ? r({z.D, 2 * gates * z.H}, seed + 3) : none(), seq.empty() ? none() : lens(seq),
                         initial_h ? r(state, seed + 4, 1.0) : none()};
  if (lstm_extras) {
    in.push_back(initial_c ? r(state, seed + 5, 1.0) : none());
    in.push_back(peepholes ? r({z.D, 3 * z.H}, seed + 6) : none());
  }
  return in;
}

GradCase rnn_case(const char* name, const char* op, AttributeMap attrs, std::vector<Tensor> inputs, int outputs) {
  GradCase c{name, op, "", std::move(attrs), std::move(inputs)};
  c.num_outputs = outputs;
  return c;
}

std::vector<GradCase> lstm_cases() {
  std::vector<GradCase> c;
  Sizes z;
  c.push_back(rnn_case("LSTM_forward_defaults", "LSTM", {{"hidden_size", i(4)}}, rnn_inputs(z, 4, 10, false, {}, false, true), 3));
  c.push_back(rnn_case("LSTM_bias_initial_states", "LSTM", {{"hidden_size", i(4)}},
                       rnn_inputs(z, 4, 20, true, {}, true, true, true), 3));
  c.push_back(rnn_case("LSTM_reverse_unequal_lengths", "LSTM", {{"hidden_size", i(4)}, {"direction", s("reverse")}},
                       rnn_inputs(z, 4, 30, true, {3, 1}, true, true, true), 3));
  Sizes bi = z;
  bi.D = 2;
  bi.B = 3;
  c.push_back(rnn_case("LSTM_bidirectional_peepholes_lengths", "LSTM",
                       {{"hidden_size", i(4)}, {"direction", s("bidirectional")}},
                       rnn_inputs(bi, 4, 40, true, {2, 3, 1}, true, true, true, true), 3));
  Sizes bl = bi;
  bl.layout = 1;
  c.push_back(rnn_case("LSTM_layout1_bidirectional", "LSTM",
                       {{"hidden_size", i(4)}, {"direction", s("bidirectional")}, {"layout", i(1)}},
                       rnn_inputs(bl, 4, 50, true, {3, 2, 3}, true, true, true, true), 3));
  c.push_back(rnn_case("LSTM_clip_and_activations", "LSTM",
                       {{"hidden_size", i(4)}, {"clip", f(0.7f)}, {"activations", names({"Sigmoid", "Tanh", "Relu"})}},
                       rnn_inputs(z, 4, 60, true, {}, true, true, true, true), 3));
  // Y_c unused downstream: its gradient is absent, not zeros fed by the caller.
  c.push_back(rnn_case("LSTM_without_Y_c", "LSTM", {{"hidden_size", i(4)}}, rnn_inputs(z, 4, 70, true, {2, 3}, true, true), 2));
  return c;
}

std::vector<GradCase> gru_cases() {
  std::vector<GradCase> c;
  Sizes z;
  c.push_back(rnn_case("GRU_linear_before_reset", "GRU", {{"hidden_size", i(4)}, {"linear_before_reset", i(1)}},
                       rnn_inputs(z, 3, 110, true, {}, true), 2));
  c.push_back(rnn_case("GRU_reset_before_product", "GRU", {{"hidden_size", i(4)}}, rnn_inputs(z, 3, 120, true, {}, true), 2));
  c.push_back(rnn_case("GRU_defaults_no_bias", "GRU", {{"hidden_size", i(4)}}, rnn_inputs(z, 3, 130, false, {}, false), 2));
  Sizes bi = z;
  bi.D = 2;
  bi.B = 3;
  c.push_back(rnn_case("GRU_bidirectional_lengths_lbr0", "GRU", {{"hidden_size", i(4)}, {"direction", s("bidirectional")}},
                       rnn_inputs(bi, 3, 140, true, {1, 3, 2}, true), 2));
  c.push_back(rnn_case("GRU_bidirectional_lengths_lbr1", "GRU",
                       {{"hidden_size", i(4)}, {"direction", s("bidirectional")}, {"linear_before_reset", i(1)}},
                       rnn_inputs(bi, 3, 150, true, {1, 3, 2}, true), 2));
  Sizes l1 = z;
  l1.layout = 1;
  c.push_back(rnn_case("GRU_reverse_layout1_lengths", "GRU",
                       {{"hidden_size", i(4)}, {"direction", s("reverse")}, {"layout", i(1)}, {"linear_before_reset", i(1)}},
                       rnn_inputs(l1, 3, 160, true, {2, 3}, true), 2));
  c.push_back(rnn_case("GRU_clip_lbr0", "GRU", {{"hidden_size", i(4)}, {"clip", f(0.6f)}},
                       rnn_inputs(z, 3, 170, true, {}, true), 2));
  c.push_back(rnn_case("GRU_clip_lbr1", "GRU", {{"hidden_size", i(4)}, {"clip", f(0.6f)}, {"linear_before_reset", i(1)}},
                       rnn_inputs(z, 3, 180, true, {}, true), 2));
  return c;
}

std::vector<GradCase> simple_rnn_cases() {
  std::vector<GradCase> c;
  Sizes z;
  c.push_back(rnn_case("RNN_tanh_bias_initial_h", "RNN", {{"hidden_size", i(4)}}, rnn_inputs(z, 1, 210, true, {}, true), 2));
  c.push_back(rnn_case("RNN_defaults", "RNN", {{"hidden_size", i(4)}}, rnn_inputs(z, 1, 220, false, {}, false), 2));
  Sizes bi = z;
  bi.D = 2;
  bi.B = 3;
  c.push_back(rnn_case("RNN_relu_bidirectional_lengths", "RNN",
                       {{"hidden_size", i(4)}, {"direction", s("bidirectional")}, {"activations", names({"Relu", "Relu"})}},
                       rnn_inputs(bi, 1, 230, true, {3, 1, 2}, true), 2));
  Sizes l1 = z;
  l1.layout = 1;
  c.push_back(rnn_case("RNN_reverse_layout1_clip", "RNN",
                       {{"hidden_size", i(4)}, {"direction", s("reverse")}, {"layout", i(1)}, {"clip", f(0.8f)}},
                       rnn_inputs(l1, 1, 240, true, {3, 2}, true), 2));
  return c;
}

OT_GRAD_CASES(lstm_cases());
OT_GRAD_CASES(gru_cases());
OT_GRAD_CASES(simple_rnn_cases());

// Near the LSTM language model's shapes (hidden 64 here to stay quick), through the float32
// production kernels.
std::vector<GradCase> production() {
  std::vector<GradCase> c;
  Sizes big{16, 8, 24, 64, 1, 0};
  GradCase lstm = rnn_case("LSTM_production", "LSTM", {{"hidden_size", i(64)}}, rnn_inputs(big, 4, 300, true, {}, true, true, true), 3);
  lstm.float32_tolerance = 5e-5;
  c.push_back(lstm);
  GradCase gru = rnn_case("GRU_production", "GRU", {{"hidden_size", i(64)}, {"linear_before_reset", i(1)}},
                          rnn_inputs(big, 3, 310, true, {}, true), 2);
  gru.float32_tolerance = 5e-5;
  c.push_back(gru);
  return c;
}
OT_PRODUCTION_CASES(production());

// Errors a user can hit: they name the node and the problem.
std::string run_error(const char* op, AttributeMap attrs, std::vector<Tensor> inputs, int outputs) {
  GradCase c = rnn_case("error_case", op, std::move(attrs), std::move(inputs), outputs);
  try {
    check_gradient(c);
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

TEST(RnnOps, RefusesUnsupportedActivationsAndInputForget) {
  Sizes z;
  std::string e = run_error("LSTM", {{"hidden_size", i(4)}, {"activations", names({"Sigmoid", "Softsign", "Tanh"})}},
                            rnn_inputs(z, 4, 1, true, {}, false, true), 3);
  EXPECT_NE(e.find("activation 'Softsign' is not supported"), std::string::npos) << e;
  e = run_error("LSTM", {{"hidden_size", i(4)}, {"input_forget", i(1)}}, rnn_inputs(z, 4, 1, true, {}, false, true), 3);
  EXPECT_NE(e.find("input_forget"), std::string::npos) << e;
}

TEST(RnnOps, ChecksShapesAndLengths) {
  Sizes z;
  std::vector<Tensor> in = rnn_inputs(z, 3, 1, true, {}, false);
  in[2] = r({1, 12, 5}, 9);
  std::string e = run_error("GRU", {{"hidden_size", i(4)}}, in, 2);
  EXPECT_NE(e.find("R must have shape [1x12x4]"), std::string::npos) << e;
  e = run_error("RNN", {{"hidden_size", i(4)}}, rnn_inputs(z, 1, 1, true, {4, 1}, false), 2);
  EXPECT_NE(e.find("sequence_lens[0] = 4 is outside [0, 3]"), std::string::npos) << e;
}

// A forward node whose Y nobody uses: the Grad op reruns the forward for the states it needs,
// and must give the gradients of Y_h that the graph with Y gives.
TEST(RnnOps, GradientWithoutYRerunsTheForward) {
  for (const std::string op : {"LSTM", "GRU", "RNN"}) {
    const bool lstm = op == "LSTM";
    const int gates = lstm ? 4 : op == "GRU" ? 3 : 1;
    Sizes z;
    z.D = 2;
    const std::vector<Tensor> inputs = rnn_inputs(z, gates, 400, true, {3, 2}, true, lstm, lstm, lstm);
    auto gradients = [&](bool with_y) {
      Graph g;
      g.opsets = {{"", 17}};
      Node n{"rnn", op, "", {}, {}, {{"hidden_size", i(4)}, {"direction", s("bidirectional")}}};
      std::vector<std::string> wrt;
      std::vector<Tensor> feeds;
      for (size_t k = 0; k < inputs.size(); ++k) {
        if (!inputs[k].defined()) {
          n.inputs.push_back("");
          continue;
        }
        const std::string name = "in" + std::to_string(k);
        n.inputs.push_back(name);
        g.inputs.push_back(name);
        std::vector<Dim> dims;
        for (int64_t d : inputs[k].shape()) dims.push_back({d, ""});
        g.value_info[name] = {inputs[k].dtype(), dims};
        feeds.push_back(inputs[k]);
        if (is_floating(inputs[k].dtype())) wrt.push_back(name);
      }
      n.outputs = {with_y ? "y" : "", "yh"};
      if (lstm) n.outputs.push_back("");
      for (const std::string& o : n.outputs)
        if (!o.empty()) g.outputs.push_back(o);
      g.add_node(n);
      TrainingSession session(g, {wrt, {}, false});
      std::vector<Tensor> outs;
      auto call = session.forward(feeds, 7, outs);
      std::vector<Tensor> weights;
      for (const std::string& o : session.training_graph().differentiable_outputs)
        weights.push_back(o == "yh" ? random_tensor(F64, {2, z.B, z.H}, 401) : Tensor());
      return session.backward(*call, weights);
    };
    const std::vector<Tensor> with_y = gradients(true), without_y = gradients(false);
    ASSERT_EQ(with_y.size(), without_y.size()) << op;
    for (size_t k = 0; k < with_y.size(); ++k) {
      ASSERT_TRUE(with_y[k].defined() && without_y[k].defined()) << op << " gradient " << k;
      for (int64_t e = 0; e < with_y[k].numel(); ++e)
        ASSERT_NEAR(with_y[k].item_as_double(e), without_y[k].item_as_double(e), 1e-12) << op << " gradient " << k;
    }
  }
}

}  // namespace
}  // namespace onnxtrain::testing

namespace onnxtrain::testing {
namespace {

std::vector<GradCase> lstm_training_cases() {
  // Without its stash outputs the training form is plain LSTM: the stash path is checked against
  // this one below, on the same graph at optimizer levels 1 and 0.
  Sizes z;
  return {rnn_case("LSTMTraining_without_stash", "LSTM", {{"hidden_size", i(4)}},
                   rnn_inputs(z, 4, 500, true, {3, 2}, true, true, true, true), 3)};
}

std::vector<GradCase> with_domain(std::vector<GradCase> cases) {
  for (auto& c : cases) {
    c.op_type = "LSTMTraining";
    c.domain = kOnnxTrainDomain;
  }
  return cases;
}

OT_GRAD_CASES(with_domain(lstm_training_cases()));

// passes/lstm_training.cc: stashed gates and cell states give the gradients the recompute gives,
// in float32, bidirectional, with peepholes, initial states and unequal lengths.
TEST(LstmTraining, StashedGatesGiveTheRecomputedGradients) {
  Sizes z;
  z.D = 2;
  z.T = 4;
  std::vector<Tensor> inputs = rnn_inputs(z, 4, 600, true, {4, 2}, true, true, true, true);
  for (Tensor& t : inputs)
    if (t.defined() && t.dtype() == F64) {
      Tensor f = Tensor::empty(DType::Float32, t.shape());
      for (int64_t e = 0; e < t.numel(); ++e) f.data<float>()[e] = static_cast<float>(t.data<double>()[e]);
      t = f;
    }
  auto run = [&](int level, bool& stashed) {
    Graph g;
    g.opsets = {{"", 17}};
    Node n{"lstm", "LSTM", "", {}, {"y", "yh", "yc"}, {{"hidden_size", i(4)}, {"direction", s("bidirectional")}}};
    std::vector<std::string> wrt;
    std::vector<Tensor> feeds;
    for (size_t k = 0; k < inputs.size(); ++k) {
      const std::string name = "in" + std::to_string(k);
      n.inputs.push_back(name);
      g.inputs.push_back(name);
      g.value_info[name].dtype = inputs[k].dtype();
      feeds.push_back(inputs[k]);
      if (is_floating(inputs[k].dtype())) wrt.push_back(name);
    }
    g.value_info["y"].dtype = g.value_info["yh"].dtype = g.value_info["yc"].dtype = DType::Float32;
    g.add_node(n);
    g.outputs = {"y", "yh", "yc"};
    TrainingSession session(g, {wrt, {}, false, level});
    stashed = false;
    for (const Node& node : session.program().graph().nodes) stashed = stashed || node.op_type == "LSTMTraining";
    std::vector<Tensor> outs;
    auto call = session.forward(feeds, 7, outs);
    return session.backward(*call, {random_tensor(DType::Float32, {z.T, 2, z.B, z.H}, 601),
                                    random_tensor(DType::Float32, {2, z.B, z.H}, 602),
                                    random_tensor(DType::Float32, {2, z.B, z.H}, 603)});
  };
  bool stashed = false, recomputed_stashed = true;
  const std::vector<Tensor> with_stash = run(1, stashed), recomputed = run(0, recomputed_stashed);
  EXPECT_TRUE(stashed);
  EXPECT_FALSE(recomputed_stashed);
  ASSERT_EQ(with_stash.size(), recomputed.size());
  for (size_t k = 0; k < with_stash.size(); ++k) {
    ASSERT_TRUE(with_stash[k].defined() && recomputed[k].defined()) << "gradient " << k;
    for (int64_t e = 0; e < with_stash[k].numel(); ++e)
      ASSERT_NEAR(with_stash[k].item_as_double(e), recomputed[k].item_as_double(e),
                  1e-5 * (1 + std::abs(recomputed[k].item_as_double(e))))
          << "gradient " << k << " element " << e;
  }
}

}  // namespace
}  // namespace onnxtrain::testing
