// ReconnectBackoff: how long a collector waits before its next attempt to reach the server
// (GrpcCoordinatorLink, and server_load_bench's simulated collectors, which must retry as
// real ones do).
//
// Exponential backoff with full jitter: the n-th wait after a failure (n = 0, 1, ...) is
// drawn uniformly from [0, min(max_ms, initial_ms * 2^n)]. Without jitter every collector of
// a fleet whose streams broke at the same moment (a server restart) retries at the same
// instants (0.2, 0.6, 1.4, 3.0, 8.0 s ...), and the new server meets them all at once, one
// wave per step; with it their attempts spread over each step's whole span, while a single
// collector still backs off as fast (the mean wait is half the cap). Each link draws from
// its own generator: seeded from std::random_device, or from `seed` for a test that wants
// the same waits every run. Not thread-safe: one per link thread.
#pragma once

#include <cstdint>
#include <random>

namespace perftracker {

class ReconnectBackoff {
 public:
  // seed 0: a random seed (std::random_device).
  ReconnectBackoff(int initial_ms, int max_ms, uint64_t seed = 0);

  // The wait before the next attempt, in ms; each call is one more failed attempt.
  int NextDelayMs();
  // The cap NextDelayMs draws under now (before drawing): min(max_ms, initial_ms * 2^n).
  int CapMs() const { return cap_ms_; }
  // Connected: the next failure starts again from initial_ms.
  void Reset() { cap_ms_ = initial_ms_; }

 private:
  int initial_ms_;
  int max_ms_;
  int cap_ms_;
  std::mt19937_64 rng_;
};

}  // namespace perftracker
