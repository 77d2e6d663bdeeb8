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
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "perftracker/localize/diagnosis.h"

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
  // last_progress_ns: end of its last iteration, 0 when unknown.
  void AddRank(int32_t rank, std::optional<std::string> stacks, int64_t last_progress_ns);

  // The PT-HANG finding at now_ns (culprits in workers, the ranks waiting for them in
  // victims). mean_iteration_ns (0 = unknown) only scales the evidence.
  Finding Analyze(int64_t now_ns, int64_t mean_iteration_ns = 0) const;

 private:
  struct Rank {
    int32_t rank = -1;
    std::optional<std::string> stacks;
    int64_t last_progress_ns = 0;
  };
  std::vector<Rank> ranks_;
};

}  // namespace perftracker
