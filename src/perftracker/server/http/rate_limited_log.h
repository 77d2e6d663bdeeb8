// RateLimitedLog: writes at most `burst` lines per `period` and counts the rest, which the
// first line of the next period reports ("... (17 similar lines suppressed)"). Refused
// requests are logged through it, so a client hammering the server with a bad token cannot
// flood the server's log. Thread-safe.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>

namespace perftracker {

class RateLimitedLog {
 public:
  using Sink = std::function<void(const std::string& line)>;
  using Clock = std::chrono::steady_clock;

  RateLimitedLog(Sink sink, int burst, Clock::duration period)
      : sink_(std::move(sink)), burst_(burst), period_(period) {}

  // Logs `line` unless this period's budget is spent. `now` is for tests.
  void Log(const std::string& line, Clock::time_point now = Clock::now());
  uint64_t suppressed_total() const;

 private:
  Sink sink_;
  const int burst_;
  const Clock::duration period_;
  mutable std::mutex mu_;
  Clock::time_point period_start_{};
  int logged_in_period_ = 0;
  uint64_t suppressed_in_period_ = 0;
  uint64_t suppressed_total_ = 0;
};

}  // namespace perftracker
