#include "perftracker/sources/python/tsc_clock.h"

#include <time.h>

#include <atomic>

#if defined(__x86_64__)
#include <cpuid.h>
#endif

namespace perftracker {
namespace {

std::atomic<double> g_ns_per_tick{0};

// A (TSC, realtime) pair read as close together as possible: the tightest of a few tries.
void ReadPair(uint64_t* tsc, int64_t* realtime) {
  uint64_t best_width = UINT64_MAX;
  for (int i = 0; i < 8; ++i) {
    const uint64_t a = TscClock::Ticks();
    const int64_t rt = RealtimeNs();
    const uint64_t b = TscClock::Ticks();
    if (b - a < best_width) {
      best_width = b - a;
      *tsc = a + (b - a) / 2;
      *realtime = rt;
    }
  }
}

}  // namespace

bool TscClock::Supported() {
#if defined(__x86_64__)
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (__get_cpuid(0x80000000, &eax, &ebx, &ecx, &edx) == 0 || eax < 0x80000007) return false;
  __get_cpuid(0x80000007, &eax, &ebx, &ecx, &edx);
  return (edx & (1u << 8)) != 0;  // invariant TSC
#else
  return false;
#endif
}

void TscClock::Calibrate(int64_t interval_ns) {
  if (!Supported()) return;
  uint64_t t0 = 0, t1 = 0;
  int64_t r0 = 0, r1 = 0;
  ReadPair(&t0, &r0);
  const timespec pause{static_cast<time_t>(interval_ns / 1'000'000'000),
                       static_cast<long>(interval_ns % 1'000'000'000)};
  nanosleep(&pause, nullptr);
  ReadPair(&t1, &r1);
  if (t1 <= t0 || r1 <= r0) return;
  g_ns_per_tick.store(static_cast<double>(r1 - r0) / static_cast<double>(t1 - t0));
}

double TscClock::ns_per_tick() { return g_ns_per_tick.load(std::memory_order_relaxed); }

TscClock::Anchor TscClock::MakeAnchor() {
  Anchor a;
  a.ns_per_tick = ns_per_tick();
  if (a.ns_per_tick > 0) ReadPair(&a.tsc, &a.realtime_ns);
  return a;
}

}  // namespace perftracker
