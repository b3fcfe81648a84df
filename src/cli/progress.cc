#include "cli/progress.h"

#include <unistd.h>

#include <cstdio>

namespace onnxtrain::cli {

ProgressBar::ProgressBar(std::string label, int64_t total_steps)
    : label_(std::move(label)),
      total_steps_(total_steps),
      interactive_(isatty(STDERR_FILENO) == 1),
      start_(std::chrono::steady_clock::now()),
      last_draw_(start_) {}

void ProgressBar::update(int64_t steps_done, int64_t examples, double mean_loss) {
  steps_done_ = steps_done;
  examples_ = examples;
  mean_loss_ = mean_loss;
  const auto now = std::chrono::steady_clock::now();
  if (interactive_ && now - last_draw_ > std::chrono::milliseconds(100)) {
    last_draw_ = now;
    draw(false);
  }
}

void ProgressBar::finish() { draw(true); }

void ProgressBar::draw(bool final_state) {
  if (!interactive_ && !final_state) return;
  constexpr int kWidth = 30;
  const int filled = total_steps_ > 0 ? static_cast<int>(kWidth * steps_done_ / total_steps_) : kWidth;
  std::string bar(static_cast<size_t>(filled), '#');
  bar.append(static_cast<size_t>(kWidth - filled), '.');
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  const double rate = seconds > 0 ? static_cast<double>(examples_) / seconds : 0;
  std::fprintf(stderr, "%s%s [%s] %lld/%lld loss %.6f | %.0f examples/s%s", interactive_ ? "\r" : "",
               label_.c_str(), bar.c_str(), static_cast<long long>(steps_done_),
               static_cast<long long>(total_steps_), mean_loss_, rate, interactive_ ? "\x1b[K" : "");
  if (final_state) std::fputc('\n', stderr);
  std::fflush(stderr);
}

}  // namespace onnxtrain::cli
