#include "perftracker/server/http/rate_limited_log.h"

namespace perftracker {

void RateLimitedLog::Log(const std::string& line, Clock::time_point now) {
  std::string out;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (now - period_start_ >= period_) {
      period_start_ = now;
      logged_in_period_ = 0;
      if (suppressed_in_period_ > 0) {
        out = line + " (" + std::to_string(suppressed_in_period_) +
              " similar lines suppressed before)";
        suppressed_in_period_ = 0;
      }
    }
    if (logged_in_period_ >= burst_) {
      ++suppressed_in_period_;
      ++suppressed_total_;
      return;
    }
    ++logged_in_period_;
    if (out.empty()) out = line;
  }
  sink_(out);
}

uint64_t RateLimitedLog::suppressed_total() const {
  std::lock_guard<std::mutex> lock(mu_);
  return suppressed_total_;
}

}  // namespace perftracker
