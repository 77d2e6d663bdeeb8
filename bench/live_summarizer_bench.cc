// live_summarizer_bench: the live WindowSummarizer's cost per event on what a Python agent
// delivers, each call when it returns (post-order: children before their parents), so that a
// top-level call with more descendants than the reorder buffer holds arrives after its
// children were summarized (a "late parent": NoteTopLevel / TakeLateChildren). Prints events
// per second; run under `valgrind --tool=callgrind` for the instruction counts of each part
// (docs/performance.md, "Live summarizer").
//   live_summarizer_bench [--iterations N] [--fanout F] [--depth D] [--reorder-window W]
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "perftracker/core/event.h"
#include "perftracker/core/function_table.h"
#include "perftracker/summary/window_summarizer.h"

namespace {

using namespace perftracker;

struct Shape {
  int iterations = 200;
  int fanout = 8;
  int depth = 4;  // levels below the iteration's top-level call
};

// Emits one call and its subtree in post-order from `start`; returns its end.
int64_t EmitCall(WindowSummarizer& s, const std::vector<std::vector<uint32_t>>& ids, int level,
                 size_t index, int64_t start, const Shape& shape, uint64_t& events) {
  int64_t t = start + 100;
  if (level < shape.depth) {
    for (int c = 0; c < shape.fanout; ++c) {
      t = EmitCall(s, ids, level + 1, index * static_cast<size_t>(shape.fanout) + c, t, shape,
                   events) +
          50;
    }
  } else {
    t += 1000;
  }
  Event e;
  e.start_ns = start;
  e.end_ns = t + 100;
  e.function_id = ids[static_cast<size_t>(level)][index];
  e.track_id = 1;
  e.kind = EventKind::kPythonCall;
  s.OnEvent(e);
  ++events;
  return e.end_ns;
}

}  // namespace

int main(int argc, char** argv) {
  Shape shape;
  size_t reorder_window = SummarizerOptions{}.reorder_window;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    const long v = std::strtol(argv[i + 1], nullptr, 10);
    if (a == "--iterations") {
      shape.iterations = static_cast<int>(v);
    } else if (a == "--fanout") {
      shape.fanout = static_cast<int>(v);
    } else if (a == "--depth") {
      shape.depth = static_cast<int>(v);
    } else if (a == "--reorder-window") {
      reorder_window = static_cast<size_t>(v);
    } else {
      fmt::print(stderr, "live_summarizer_bench: unknown option {}\n", a);
      return 2;
    }
  }
  // Call paths: level l has fanout^l nodes, each under its parent.
  FunctionTable functions;
  std::vector<std::vector<uint32_t>> ids(static_cast<size_t>(shape.depth) + 1);
  ids[0].push_back(functions.Intern(EventKind::kPythonCall, "train_step"));
  for (int l = 1; l <= shape.depth; ++l) {
    for (size_t p = 0; p < ids[static_cast<size_t>(l) - 1].size(); ++p) {
      for (int c = 0; c < shape.fanout; ++c) {
        ids[static_cast<size_t>(l)].push_back(functions.Intern(EventKind::kPythonCall,
                                                               fmt::format("f{}_{}", l, c),
                                                               ids[static_cast<size_t>(l) - 1][p]));
      }
    }
  }
  SummarizerOptions options;
  options.reorder_window = reorder_window;
  WindowSummarizer summarizer(&functions, options);
  TrackInfo track;
  track.track_id = 1;
  track.name = "thread 1";
  summarizer.OnTrack(track);
  uint64_t events = 0;
  const auto t0 = std::chrono::steady_clock::now();
  int64_t t = 1000;
  for (int i = 0; i < shape.iterations; ++i)
    t = EmitCall(summarizer, ids, 0, 0, t, shape, events) + 500;
  const WorkerSummary summary = summarizer.Finish();
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  fmt::print("{} events ({} per top-level call), {} paths, out of order {}: {:.1f} M events/s\n",
             events, events / static_cast<uint64_t>(shape.iterations), summary.functions.size(),
             summary.stats.out_of_order_events, static_cast<double>(events) / s / 1e6);
  return 0;
}
