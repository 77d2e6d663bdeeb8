// fake_ranks_for_test: a stand-in for one host's training processes (tests and benchmarks
// only). Each rank is a FakeAgent (the real agent protocol: shared-memory rings + the
// collector's Unix socket at $PERFTRACKER_SOCKET). The ranks report an iteration every
// 40 ms; one of them sends a slowdown trigger every --trigger-every-ms; in every window the
// collector opens, each rank records iterations of step > (forward, backward) where the
// --straggler rank's forward takes 3x longer, as in synchronous training (the others wait
// in backward). Exits 0 after --windows windows, 1 after --timeout-s.
//
//   PERFTRACKER_SOCKET=... fake_ranks_for_test --first-rank 4 --ranks 4 --world-size 8
//       --straggler 6 --trigger-rank 4 --trigger-every-ms 1500 --windows 2
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "perftracker/collector/fake_agent_for_test.h"
#include "perftracker/core/realtime_clock.h"

namespace perftracker {
namespace {

constexpr int64_t kMs = 1'000'000;
constexpr int64_t kIterationNs = 40 * kMs;

struct Args {
  int first_rank = 0;
  int ranks = 4;
  int world_size = 4;
  int straggler = -1;
  int trigger_rank = -1;
  int trigger_every_ms = 2000;
  int windows = 1;
  int timeout_s = 120;
};

bool Parse(int argc, char** argv, Args* a) {
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i];
    const int v = std::atoi(argv[i + 1]);
    if (k == "--first-rank")
      a->first_rank = v;
    else if (k == "--ranks")
      a->ranks = v;
    else if (k == "--world-size")
      a->world_size = v;
    else if (k == "--straggler")
      a->straggler = v;
    else if (k == "--trigger-rank")
      a->trigger_rank = v;
    else if (k == "--trigger-every-ms")
      a->trigger_every_ms = v;
    else if (k == "--windows")
      a->windows = v;
    else if (k == "--timeout-s")
      a->timeout_s = v;
    else
      return false;
  }
  return argc % 2 == 1;
}

struct Rank {
  std::unique_ptr<FakeAgent> agent;
  uint32_t train = 0, step = 0, forward = 0, backward = 0, iteration = 0;
  int windows = 0;  // windows played
};

void Play(Rank& r, const nlohmann::json& window, int64_t forward_ms) {
  const int64_t start = window["start_ns"].get<int64_t>();
  const int64_t duration = window["duration_ns"].get<int64_t>();
  for (int64_t t = start + kMs; t + kIterationNs < start + duration; t += kIterationNs) {
    r.agent->Push(r.forward, t, t + forward_ms * kMs);
    r.agent->Push(r.backward, t + forward_ms * kMs, t + kIterationNs);
    r.agent->Push(r.step, t, t + kIterationNs);
    r.agent->Push(r.iteration, t, t + kIterationNs, EventKind::kIteration);
  }
  r.agent->WindowDone(window["window"].get<uint64_t>());
}

int Main(int argc, char** argv) {
  Args a;
  const char* socket = std::getenv("PERFTRACKER_SOCKET");
  if (!Parse(argc, argv, &a) || socket == nullptr) {
    std::fprintf(stderr,
                 "usage: PERFTRACKER_SOCKET=PATH fake_ranks_for_test [--first-rank N] "
                 "[--ranks N] [--world-size N] [--straggler R] [--trigger-rank R] "
                 "[--trigger-every-ms MS] [--windows N] [--timeout-s S]\n");
    return 2;
  }
  std::vector<Rank> ranks;
  const std::string tag = "fake-ranks-" + std::to_string(a.first_rank);
  for (int i = 0; i < a.ranks; ++i) {
    Rank r;
    r.agent = std::make_unique<FakeAgent>(a.first_rank + i, a.world_size, tag);
    if (!r.agent->Connect(socket)) {
      std::fprintf(stderr, "fake_ranks_for_test: cannot connect to %s: %s\n", socket,
                   std::strerror(errno));
      return 1;
    }
    r.agent->Hello();
    r.train = r.agent->Publish(EventKind::kPythonCall, "train.py:5 train");
    r.step = r.agent->Publish(EventKind::kPythonCall, "train.py:9 step", r.train);
    r.forward = r.agent->Publish(EventKind::kPythonCall, "model.py:20 forward", r.step);
    r.backward = r.agent->Publish(EventKind::kPythonCall, "model.py:40 backward", r.step);
    r.iteration = r.agent->Publish(EventKind::kIteration, "iteration", r.train);
    ranks.push_back(std::move(r));
  }
  const auto start = std::chrono::steady_clock::now();
  auto next_trigger = start + std::chrono::milliseconds(a.trigger_every_ms);
  auto next_iteration = start;
  int windows = 0;  // played by every rank
  while (windows < a.windows) {
    const auto now = std::chrono::steady_clock::now();
    if (now - start > std::chrono::seconds(a.timeout_s)) {
      std::fprintf(stderr, "fake_ranks_for_test: %d of %d windows after %d s\n", windows, a.windows,
                   a.timeout_s);
      return 1;
    }
    if (now >= next_iteration) {
      next_iteration = now + std::chrono::nanoseconds(kIterationNs);
      for (auto& r : ranks) {
        const int64_t d = r.agent->rank() == a.straggler ? kIterationNs * 3 / 2 : kIterationNs;
        r.agent->SendJson({{"type", "iteration"},
                           {"rank", r.agent->rank()},
                           {"end_ns", RealtimeNs()},
                           {"duration_ns", d}});
      }
    }
    if (a.trigger_rank >= 0 && now >= next_trigger) {
      next_trigger = now + std::chrono::milliseconds(a.trigger_every_ms);
      for (auto& r : ranks) {
        if (r.agent->rank() != a.trigger_rank) continue;
        r.agent->SendJson({{"type", "trigger"},
                           {"rank", a.trigger_rank},
                           {"reason", "slowdown"},
                           {"detail", "fake_ranks_for_test"}});
      }
    }
    windows = a.windows;
    for (auto& r : ranks) {
      if (auto w = r.agent->WaitFor("window", 2)) {
        Play(r, *w, r.agent->rank() == a.straggler ? 30 : 10);
        ++r.windows;
      }
      windows = std::min(windows, r.windows);
    }
  }
  // Let the collector drain the last window before the ranks go.
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  for (auto& r : ranks) r.agent->SendJson({{"type", "bye"}, {"rank", r.agent->rank()}});
  return 0;
}

}  // namespace
}  // namespace perftracker

int main(int argc, char** argv) { return perftracker::Main(argc, argv); }
