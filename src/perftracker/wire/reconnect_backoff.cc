#include "perftracker/wire/reconnect_backoff.h"

#include <algorithm>

namespace perftracker {
namespace {

uint64_t SeedOrRandom(uint64_t seed) {
  if (seed != 0) return seed;
  std::random_device device;
  return (uint64_t{device()} << 32) ^ device();
}

}  // namespace

ReconnectBackoff::ReconnectBackoff(int initial_ms, int max_ms, uint64_t seed)
    : initial_ms_(std::max(1, initial_ms)),
      max_ms_(std::max(initial_ms_, max_ms)),
      cap_ms_(initial_ms_),
      rng_(SeedOrRandom(seed)) {}

int ReconnectBackoff::NextDelayMs() {
  const int delay = std::uniform_int_distribution<int>(0, cap_ms_)(rng_);
  cap_ms_ = cap_ms_ > max_ms_ / 2 ? max_ms_ : cap_ms_ * 2;
  return delay;
}

}  // namespace perftracker
