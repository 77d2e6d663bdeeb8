#include "perftracker/agent/fork_gate.h"

#include <pthread.h>
#include <time.h>

#include <atomic>

namespace perftracker {
namespace {

// Plain atomics with static storage: nothing to construct or destroy, so the handlers work
// at any time of the process's life (also during static destruction). Nothing here
// allocates or takes a lock: the handlers run inside fork().
std::atomic<int> g_busy{0};
std::atomic<bool> g_pending{false};
std::atomic<uint64_t> g_forks{0};
std::atomic<uint64_t> g_timed_out{0};

int64_t MonotonicNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

void Nap(long ns) {
  const timespec ts{0, ns};
  nanosleep(&ts, nullptr);
}

void Prepare() {
  g_pending.store(true);
  g_forks.fetch_add(1, std::memory_order_relaxed);
  if (g_busy.load() == 0) return;
  const int64_t deadline = MonotonicNs() + ForkGate::kMaxWaitNs;
  while (g_busy.load() > 0) {
    if (MonotonicNs() > deadline) {
      g_timed_out.fetch_add(1, std::memory_order_relaxed);
      return;
    }
    Nap(20'000);
  }
}

void Parent() { g_pending.store(false); }

void Child() {
  g_busy.store(0);  // the agent's threads are the parent's: none exists here
  g_pending.store(false);
}

}  // namespace

void ForkGate::Install() {
  static const bool installed = pthread_atfork(&Prepare, &Parent, &Child) == 0;
  (void)installed;
}

void ForkGate::Enter() {
  for (;;) {
    g_busy.fetch_add(1);
    if (!g_pending.load()) return;
    g_busy.fetch_sub(1);  // a fork is under way: let it see no busy thread first
    while (g_pending.load()) Nap(50'000);
  }
}

void ForkGate::Leave() { g_busy.fetch_sub(1); }

void ForkGate::Yield() {
  if (!g_pending.load()) return;
  Leave();
  Enter();
}

uint64_t ForkGate::forks() { return g_forks.load(std::memory_order_relaxed); }
uint64_t ForkGate::timed_out() { return g_timed_out.load(std::memory_order_relaxed); }

}  // namespace perftracker
