// HangAnalyzer: names the rank a hung job waits for, from the Python stacks every rank's
// agent dumped after a hang trigger and the time of each rank's last progress.
// (Algorithm: see hang_analyzer.cc's header comment.)
//
// Input format (docs/agent-protocol.md, the `stacks` message): one block per thread,
//
//   Thread 140371 (MainThread) (most recent call last):
//     File "/work/train.py", line 88, in <module>
//       main()
//     File "/work/train.py", line 61, in main
//       loss.backward()
//
// i.e. a header line "Thread <id> (<name>) (most recent call last):" followed by
// traceback.format_stack() of that thread's frame (outermost first). Blocks in
// faulthandler's order ("(most recent call first):", innermost first, no source lines),
// headers without a name and "Thread <name> (<id>) [main], most recent call last:" are
// accepted too; the main thread is the one named MainThread or marked [main], else the
// first block.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "perftracker/localize/diagnosis.h"
#include "perftracker/summary/worker_summary.h"

namespace perftracker {

struct StackFrame {
  std::string file;
  int32_t line = 0;
  std::string function;
  std::string code;  // the source line, "" when not given
};

struct ThreadStack {
  std::string id;        // as printed ("140371", "0x00007f...")
  std::string name;      // "MainThread", "" when not given
  bool is_main = false;  // named MainThread, marked [main], or faulthandler's current thread
  std::vector<StackFrame> frames;  // outermost first
};

// Parses a stacks text; lines it does not understand are skipped.
std::vector<ThreadStack> ParsePythonStacks(std::string_view text);

class HangAnalyzer {
 public:
  // One rank's state when the hang was diagnosed. stacks: nullopt when the rank sent none
  // (a process stuck in native code holding the GIL, dead, or unreachable).
  // last_progress_ns: end of its last iteration, 0 when unknown. window: the rank's summary
  // of the hang window (nullptr when none came): the Python calls its main thread recorded
  // there tell a busy thread from a stuck one (hang_analyzer.cc, "Busy, not hung").
  void AddRank(int32_t rank, std::optional<std::string> stacks, int64_t last_progress_ns,
               const WorkerSummary* window = nullptr);

  // Non-empty when the job is not hung but busy: at least one rank's main thread ran Python
  // code all through the window and every other rank waits in a collective (or runs too).
  // It says which rank, for how long, and in which frames ("rank 1 made no iteration
  // progress for 31.3 s while its main thread was busy ..."); the caller reports it instead
  // of Analyze's PT-HANG.
  std::string BusyVerdict(int64_t now_ns) const;

  // The PT-HANG finding at now_ns (culprits in workers, the ranks waiting for them in
  // victims). mean_iteration_ns (0 = unknown) only scales the evidence. A culprit that is
  // busy past the busy limit is a hang of its own kind: "busy: no iteration progress".
  Finding Analyze(int64_t now_ns, int64_t mean_iteration_ns = 0) const;

  // How long a busy main thread may stand in for progress: a rank whose last progress is
  // at least this long ago is hung even while busy (an endless loop: it runs, and no
  // iteration ever completes); BusyVerdict then says nothing, and Analyze reports it. 0 (the
  // default): no bound. See hang_analyzer.cc, "How long busy stands in for progress".
  void set_busy_limit_ns(int64_t limit_ns) { busy_limit_ns_ = limit_ns; }
  // The bound for a job whose hang trigger came after trigger_silence_ns without progress
  // (the detector's own limit: max(hang_factor x its mean iteration, 1.5 x the longest,
  // the minimum silence)): kBusyLimitFactor times it; 0 when the silence is unknown (<= 0).
  static int64_t BusyLimitNs(int64_t trigger_silence_ns);
  static constexpr int64_t kBusyLimitFactor = 10;

  // A main thread that recorded at least this many Python calls per second of the window
  // (and kBusyMinCalls) beyond its own open frames runs code; it does not wait. A thread
  // that waits by polling (DataLoader's queue.get with a 5 s timeout, a loop around
  // time.sleep(0.01)) makes at most a few hundred calls a second; Python at work makes tens
  // of thousands (torch.profiler's post-processing on an H200 host: 71,407 in 1.2 s).
  static constexpr double kBusyCallsPerSecond = 1000;
  static constexpr uint64_t kBusyMinCalls = 500;

 private:
  struct Rank {
    int32_t rank = -1;
    std::optional<std::string> stacks;
    int64_t last_progress_ns = 0;
    // From its window summary: Python calls by the root frame of their call path
    // ("<module> (train.py:1)", one root per thread), and the window's length (0: none).
    std::map<std::string, uint64_t> calls_by_root;
    int64_t window_ns = 0;
  };
  std::vector<Rank> ranks_;
  int64_t busy_limit_ns_ = 0;
};

}  // namespace perftracker
