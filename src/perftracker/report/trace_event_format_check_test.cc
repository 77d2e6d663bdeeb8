#include "perftracker/report/trace_event_format_check.h"

#include <functional>
#include <set>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

namespace perftracker {
namespace {

using nlohmann::json;

// A small valid trace: one rank, a thread with two nested slices, a finding track with a
// slice, and a flow from a slice that starts inside it to one inside the first thread's outer
// slice.
json Valid() {
  return json::parse(R"json({"displayTimeUnit": "ms", "otherData": {}, "traceEvents": [
    {"ph": "M", "pid": 0, "tid": 0, "name": "process_name", "args": {"name": "rank 0 (a)"
}
},
    {"ph": "M", "pid": 0, "tid": 0, "name": "process_sort_index", "args": {"sort_index": 0}},
    {"ph": "M", "pid": 0, "tid": 0, "name": "process_labels", "args": {"labels": "x"}},
    {"ph": "M", "pid": 0, "tid": 1, "name": "thread_name", "args": {"name": "thread 7"}},
    {"ph": "M", "pid": 0, "tid": 1, "name": "thread_sort_index", "args": {"sort_index": 1}},
    {"ph": "X", "cat": "cpu_op", "name": "outer", "pid": 0, "tid": 1, "ts": 10.0, "dur": 10.5},
    {"ph": "X", "cat": "cpu_op", "name": "inner", "pid": 0, "tid": 1, "ts": 12.25, "dur": 2},
    {"ph": "X", "cat": "cpu_op", "name": "touching", "pid": 0, "tid": 1, "ts": 20.5, "dur": 1},
    {"ph": "X", "cat": "perftracker", "name": "f", "pid": 0, "tid": 9, "ts": 0, "dur": 5},
    {"ph": "i", "s": "t", "cat": "perftracker", "name": "note", "pid": 0, "tid": 9, "ts": 1},
    {"ph": "s", "id": 1, "cat": "perftracker", "name": "F", "pid": 0, "tid": 9, "ts": 2.5},
    {"ph": "f", "bp": "e", "id": 1, "cat": "perftracker", "name": "F", "pid": 0, "tid": 1,
     "ts": 15},
    {"ph": "X", "cat": "perftracker", "name": "end", "pid": 0, "tid": 9, "ts": 2.5, "dur": 2.5},
    {"ph": "X", "cat": "perftracker", "name": "end", "pid": 0, "tid": 1, "ts": 15, "dur": 1}
  ]
})json");
}

TraceEventFormatReport Check(const json& doc) { return TraceEventFormatCheck().Check(doc); }

TEST(TraceEventFormatCheck, AValidTraceHasNoProblem) {
  const TraceEventFormatReport r = Check(Valid());
  EXPECT_TRUE(r.ok()) << r.problems[0];
  EXPECT_EQ(r.events, 14u);
  EXPECT_EQ(r.slices, 6u);
  EXPECT_EQ(r.flows, 1u);
  EXPECT_EQ(r.process_names, std::set<std::string>{"rank 0 (a)"});
}

// Each broken rule is found, and named.
TEST(TraceEventFormatCheck, EachRuleIsChecked) {
  struct Case {
    const char* what;
    std::function<void(json&)> edit;
    const char* needle;
  };
  const std::vector<Case> cases = {
      {"array format", [](json& d) { d = d["traceEvents"]; }, "not a JSON object"},
      {"unit", [](json& d) { d["displayTimeUnit"] = "s"; }, "displayTimeUnit"},
      {"phase", [](json& d) { d["traceEvents"][5]["ph"] = "B"; }, "phase 'B'"},
      {"long phase", [](json& d) { d["traceEvents"][5]["ph"] = "XX"; }, "one-letter"},
      {"name", [](json& d) { d["traceEvents"][5].erase("name"); }, "\"name\""},
      {"pid", [](json& d) { d["traceEvents"][5]["pid"] = "0"; }, "integers"},
      {"negative ts", [](json& d) { d["traceEvents"][6]["ts"] = -1; }, "\"ts\" >= 0"},
      {"dur", [](json& d) { d["traceEvents"][6].erase("dur"); }, "\"dur\""},
      {"args", [](json& d) { d["traceEvents"][6]["args"] = json::array(); }, "\"args\""},
      {"scope", [](json& d) { d["traceEvents"][9]["s"] = "x"; }, "scope"},
      {"process name", [](json& d) { d["traceEvents"][0]["args"] = json::object(); }, "args.name"},
      {"sort index", [](json& d) { d["traceEvents"][4]["args"]["sort_index"] = 1.5; },
       "sort_index"},
      {"metadata", [](json& d) { d["traceEvents"][2]["name"] = "perftracker_rank"; },
       "not one viewers know"},
      {"partial overlap", [](json& d) { d["traceEvents"][6]["dur"] = 9; }, "partial overlap"},
      {"flow without end", [](json& d) { d["traceEvents"].erase(11); }, "1 start(s) and 0"},
      {"flow ids differ", [](json& d) { d["traceEvents"][11]["id"] = 2; }, "not one of each"},
      {"flow names differ", [](json& d) { d["traceEvents"][11]["name"] = "G"; }, "not one of each"},
      {"flow backwards",
       [](json& d) {
         d["traceEvents"][10]["ts"] = 4.5;
         d["traceEvents"][11]["ts"] = 4;
       },
       "ends before"},
      {"flow outside a slice", [](json& d) { d["traceEvents"][10]["ts"] = 6; },
       "no slice of its thread"},
      {"flow inside a slice, not at a start", [](json& d) { d["traceEvents"][11]["ts"] = 15.5; },
       "Chrome DevTools binds"},
      {"flow at a slice of another cat",
       [](json& d) { d["traceEvents"][10]["cat"] = d["traceEvents"][11]["cat"] = "other"; },
       "no slice of cat \"other\""},
      {"binding point", [](json& d) { d["traceEvents"][11]["bp"] = "x"; }, "binding point"},
      {"flow id", [](json& d) { d["traceEvents"][10].erase("id"); }, "\"id2\""},
      {"flow cat", [](json& d) { d["traceEvents"][10].erase("cat"); }, "\"cat\""},
  };
  for (const Case& c : cases) {
    json doc = Valid();
    c.edit(doc);
    const TraceEventFormatReport r = Check(doc);
    ASSERT_FALSE(r.ok()) << c.what;
    EXPECT_NE(r.problems[0].find(c.needle), std::string::npos) << c.what << ": " << r.problems[0];
  }
  // Metadata of the caller's own is allowed when named; an id2 and a next-slice binding too.
  json doc = Valid();
  doc["traceEvents"][2]["name"] = "perftracker_rank";
  EXPECT_TRUE(TraceEventFormatCheck({"perftracker_rank"}).Check(doc).ok());
  doc = Valid();
  doc["traceEvents"][10].erase("id");
  doc["traceEvents"][11].erase("id");
  doc["traceEvents"][10]["id2"] = {{"local", "0x1"}};
  doc["traceEvents"][11]["id2"] = {{"local", "0x1"}};
  doc["traceEvents"][11].erase("bp");  // binds to the slice that starts there
  const TraceEventFormatReport r = Check(doc);
  EXPECT_TRUE(r.ok()) << r.problems[0];
}

}  // namespace
}  // namespace perftracker
