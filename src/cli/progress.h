#pragma once
// `onnxtrain train`'s progress bar on stderr: the epoch, steps done, running loss and examples per
// second. On a terminal it redraws in place (at most ten times a second); into a file or pipe it
// writes only each epoch's final state, one line, so logs stay readable.
#include <chrono>
#include <cstdint>
#include <string>

namespace onnxtrain::cli {

class ProgressBar {
 public:
  ProgressBar(std::string label, int64_t total_steps);
  // After a step: the steps and examples done so far in this epoch and their mean loss.
  void update(int64_t steps_done, int64_t examples, double mean_loss);
  void finish();

 private:
  void draw(bool final_state);
  std::string label_;
  int64_t total_steps_;
  int64_t steps_done_ = 0, examples_ = 0;
  double mean_loss_ = 0;
  bool interactive_;
  std::chrono::steady_clock::time_point start_, last_draw_;
};

}  // namespace onnxtrain::cli
