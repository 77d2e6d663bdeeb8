// TraceEventFormatCheck: a strict reading of a JSON trace against the Trace Event Format (the
// format Perfetto UI and chrome://tracing open; its spec is the "Trace Event Format" document
// of the Chromium project), for the tests and the fuzzer of PerfettoWriter. Neither viewer
// runs here (Chromium 156 has no chrome://tracing any more and the Perfetto UI is not
// packaged for offline use; Chrome DevTools' trace engine reads the exports in
// tests/viewer), so what a viewer needs is checked rule by rule (docs/perfetto-export.md).
//
// Rules (each broken one is a problem, at most kMaxProblems kept, the rest counted):
//   - the JSON Object Format: an object with a "traceEvents" array; "displayTimeUnit", when
//     present, "ms" or "ns"; "otherData", when present, an object;
//   - every event an object with a one-letter "ph" of the phases the writer may use
//     (X complete, i instant, M metadata, s / f flow start / end), a string "name", integer
//     "pid" and "tid", "args" an object and "cat" a string when present;
//   - X and i: a finite "ts" (µs) >= 0; X a finite "dur" >= 0; i a scope "s" of g, p or t;
//   - M: a known metadata name with its argument: process_name / thread_name args.name a
//     string, process_labels args.labels a string, process_sort_index / thread_sort_index
//     args.sort_index an integer; other names only those the caller allows (viewers skip
//     metadata they do not know);
//   - X slices of one thread (pid, tid) nest: a slice that starts inside another ends inside
//     it (viewers cannot draw a partial overlap on one track), up to what a reader holding
//     µs in a double can resolve at that time (2 ulp: 0.5 µs at today's epoch times);
//   - flows: each id (with its "cat" and "name") has exactly one "s" and one "f"; "f" not
//     before "s"; "bp", when present, is "e"; an "s" lies inside an X slice of its thread
//     (the slice it leaves from), an "f" with bp "e" inside one (the slice it enters), an "f"
//     without it before a slice of its thread that it can bind to; and, for Chrome DevTools'
//     Performance panel, which binds a flow event only to a slice of the same "cat" that
//     starts at the same "ts", such a slice exists on its thread.
#pragma once

#include <cstddef>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace perftracker {

struct TraceEventFormatReport {
  std::vector<std::string> problems;  // the first kMaxProblems, each naming the event index
  size_t problem_count = 0;
  size_t events = 0;
  size_t slices = 0;  // X
  size_t flows = 0;   // s/f pairs
  std::set<std::string> process_names;

  bool ok() const { return problem_count == 0; }
};

class TraceEventFormatCheck {
 public:
  static constexpr size_t kMaxProblems = 20;

  // `extra_metadata`: metadata names besides the viewers' own that the trace may carry.
  explicit TraceEventFormatCheck(std::set<std::string> extra_metadata = {})
      : extra_metadata_(std::move(extra_metadata)) {}

  TraceEventFormatReport Check(const nlohmann::json& doc) const;

 private:
  std::set<std::string> extra_metadata_;
};

}  // namespace perftracker
