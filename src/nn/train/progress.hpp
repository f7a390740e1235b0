// Training progress: a redrawn bar on a terminal (epoch, step, loss, accuracy, samples/s, ETA),
// plain lines every tenth of an epoch otherwise.
#pragma once
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>

namespace flexkit::nn {

class Progress {
 public:
  Progress(std::FILE* out, bool enabled);
  void start_epoch(std::int64_t epoch, std::int64_t epochs, std::int64_t steps,
                   std::int64_t first_step = 0);
  // Whether step(done, ...) would draw or print now: the caller reads its running means (a
  // wait for the device) only then.
  bool due(std::int64_t done) const;
  // After a step: running means over the epoch so far; drawn only when due().
  void step(std::int64_t done, double loss, double accuracy, std::int64_t samples);
  void line(const std::string& text);  // a whole line (clears the bar first)
  void finish_bar();

 private:
  std::FILE* out_;
  bool enabled_, tty_;
  bool bar_shown_ = false;
  std::int64_t epoch_ = 0, epochs_ = 0, steps_ = 0, first_ = 0, next_report_ = 0;
  std::chrono::steady_clock::time_point start_, last_draw_;
};

std::string format_duration(double seconds);

}  // namespace flexkit::nn
