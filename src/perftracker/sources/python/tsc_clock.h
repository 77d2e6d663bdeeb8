// TscClock: a cheaper CLOCK_REALTIME for the profile hook's two timestamps per call.
//
// On this project's VMs clock_gettime costs ~85 ns and the TSC read ~40 ns; the hook reads
// the clock twice per Python call, so this halves the clock's share of the hook's cost.
// Realtime ns = anchor.realtime + (rdtsc - anchor.tsc) x ns_per_tick, where ns_per_tick is
// measured once per process (Calibrate: two (TSC, CLOCK_REALTIME) pairs ~50 ms apart, each
// pair taken as the tightest of a few tries) and the anchor is re-taken at every window
// start, so drift only accumulates within one window (a few ppm: tens of microseconds over
// a 20 s window). Only used on x86-64 with an invariant TSC (constant rate across P-states
// and sleep); elsewhere, or before calibration, callers fall back to clock_gettime.
#pragma once

#include <cstdint>

#if defined(__x86_64__)
#include <x86intrin.h>
#endif

#include "perftracker/core/realtime_clock.h"

namespace perftracker {

class TscClock {
 public:
  struct Anchor {
    uint64_t tsc = 0;
    int64_t realtime_ns = 0;
    double ns_per_tick = 0;  // 0: not usable, use RealtimeNs()
  };

  // True on x86-64 CPUs that advertise an invariant TSC.
  static bool Supported();
  // Measures the TSC rate; blocks for about `interval_ns`. Call once, off the training thread.
  static void Calibrate(int64_t interval_ns);
  static double ns_per_tick();  // 0 until calibrated (or when unsupported)
  // The current (TSC, realtime) pair with the calibrated rate.
  static Anchor MakeAnchor();

  static uint64_t Ticks() {
#if defined(__x86_64__)
    return __rdtsc();
#else
    return 0;
#endif
  }
  static int64_t Now(const Anchor& a) {
    if (a.ns_per_tick == 0) return RealtimeNs();
    return a.realtime_ns + static_cast<int64_t>(static_cast<double>(static_cast<int64_t>(
                                                    Ticks() - a.tsc)) *
                                                a.ns_per_tick);
  }
};

}  // namespace perftracker
