#include "nn/train/progress.hpp"

#include <unistd.h>

#include <cmath>

#include "core/text.hpp"

namespace flexkit::nn {

using flexkit::detail::cat;

std::string format_duration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "?";
  const auto s = static_cast<long long>(seconds + 0.5);
  char buffer[32];
  if (s >= 3600)
    std::snprintf(buffer, sizeof buffer, "%lld:%02lld:%02lld", s / 3600, s / 60 % 60, s % 60);
  else
    std::snprintf(buffer, sizeof buffer, "%lld:%02lld", s / 60, s % 60);
  return buffer;
}

Progress::Progress(std::FILE* out, bool enabled)
    : out_(out), enabled_(enabled), tty_(enabled && isatty(fileno(out)) != 0) {}

void Progress::start_epoch(std::int64_t epoch, std::int64_t epochs, std::int64_t steps,
                           std::int64_t first_step) {
  epoch_ = epoch;
  epochs_ = epochs;
  steps_ = steps;
  first_ = first_step;
  next_report_ = first_step + std::max<std::int64_t>(1, steps / 10);
  start_ = last_draw_ = std::chrono::steady_clock::now();
}

bool Progress::due(std::int64_t done) const {
  if (!enabled_) return false;
  if (tty_)
    return done >= steps_ ||
           std::chrono::duration<double>(std::chrono::steady_clock::now() - last_draw_).count() >=
               0.1;
  return done >= next_report_ && done < steps_;
}

void Progress::step(std::int64_t done, double loss, double accuracy, std::int64_t samples) {
  if (!due(done)) return;
  const auto now = std::chrono::steady_clock::now();
  const double elapsed = std::chrono::duration<double>(now - start_).count();
  const double rate = elapsed > 0 ? static_cast<double>(samples) / elapsed : 0;
  const double per_step = done > first_ ? elapsed / static_cast<double>(done - first_) : 0;
  const double eta = per_step * static_cast<double>(steps_ - done);
  if (tty_) {
    last_draw_ = now;
    constexpr int kWidth = 24;
    const int filled = steps_ > 0 ? static_cast<int>(kWidth * done / steps_) : kWidth;
    std::string bar(static_cast<std::size_t>(filled), '#');
    bar.resize(kWidth, '.');
    std::fprintf(
        out_, "\r\033[Kepoch %lld/%lld [%s] %lld/%lld loss %.4f acc %.2f%% %.0f samples/s ETA %s",
        static_cast<long long>(epoch_), static_cast<long long>(epochs_), bar.c_str(),
        static_cast<long long>(done), static_cast<long long>(steps_), loss, 100 * accuracy, rate,
        format_duration(eta).c_str());
    std::fflush(out_);
    bar_shown_ = true;
  } else {
    next_report_ += std::max<std::int64_t>(1, steps_ / 10);
    std::fprintf(out_,
                 "epoch %lld/%lld step %lld/%lld loss %.4f acc %.2f%% %.0f samples/s ETA %s\n",
                 static_cast<long long>(epoch_), static_cast<long long>(epochs_),
                 static_cast<long long>(done), static_cast<long long>(steps_), loss, 100 * accuracy,
                 rate, format_duration(eta).c_str());
    std::fflush(out_);
  }
}

void Progress::finish_bar() {
  if (bar_shown_) std::fprintf(out_, "\r\033[K");
  bar_shown_ = false;
}

void Progress::line(const std::string& text) {
  if (!enabled_) return;
  finish_bar();
  std::fprintf(out_, "%s\n", text.c_str());
  std::fflush(out_);
}

}  // namespace flexkit::nn
