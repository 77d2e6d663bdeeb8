#include "perftracker/report/trace_event_format_check.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <utility>

#include <fmt/core.h>

namespace perftracker {
namespace {

using nlohmann::json;

// Times are µs with (at most) three decimals: compared as integer ns.
int64_t Ns(double micros) { return std::llround(micros * 1000.0); }

// What a reader that holds µs in a double (JavaScript, Perfetto's JSON parser, nlohmann)
// can tell apart at `ns` since the epoch: two units in the last place (at 1.7e15 µs, 0.25 µs
// each), so ends that the file writes ns apart may read as that much apart either way.
int64_t Resolution(int64_t ns) {
  const double micros = static_cast<double>(ns) / 1000.0;
  return static_cast<int64_t>(std::ceil(2 * 1000.0 * (std::nextafter(micros, INFINITY) - micros)));
}

struct Slice {
  int64_t start = 0;
  int64_t end = 0;
  size_t index = 0;
  std::string cat;
};

struct FlowEnds {
  size_t starts = 0;
  size_t finishes = 0;
  int64_t start_ts = 0;
  int64_t finish_ts = 0;
  size_t first_index = 0;
};

class Checker {
 public:
  explicit Checker(const std::set<std::string>& extra_metadata) : extra_(extra_metadata) {}

  TraceEventFormatReport Run(const json& doc) {
    if (!doc.is_object()) {
      Problem("the trace is not a JSON object (the JSON Object Format)");
      return std::move(report_);
    }
    if (doc.contains("displayTimeUnit")) {
      const json& unit = doc["displayTimeUnit"];
      if (!unit.is_string() || (unit != "ms" && unit != "ns")) {
        Problem("displayTimeUnit is not \"ms\" or \"ns\"");
      }
    }
    if (doc.contains("otherData") && !doc["otherData"].is_object()) {
      Problem("otherData is not an object");
    }
    if (!doc.contains("traceEvents") || !doc["traceEvents"].is_array()) {
      Problem("no traceEvents array");
      return std::move(report_);
    }
    const json& events = doc["traceEvents"];
    report_.events = events.size();
    for (size_t i = 0; i < events.size(); ++i) Event(i, events[i]);
    Nesting();
    Flows();
    return std::move(report_);
  }

 private:
  template <typename... Args>
  void Problem(fmt::format_string<Args...> format, Args&&... args) {
    ++report_.problem_count;
    if (report_.problems.size() < TraceEventFormatCheck::kMaxProblems) {
      report_.problems.push_back(fmt::format(format, std::forward<Args>(args)...));
    }
  }

  static bool IsInteger(const json& v) { return v.is_number_integer(); }
  static bool IsFinite(const json& v) { return v.is_number() && std::isfinite(v.get<double>()); }

  void Event(size_t i, const json& e) {
    if (!e.is_object()) {
      Problem("event {}: not an object", i);
      return;
    }
    const auto ph_it = e.find("ph");
    if (ph_it == e.end() || !ph_it->is_string() || ph_it->get<std::string>().size() != 1) {
      Problem("event {}: no one-letter \"ph\"", i);
      return;
    }
    const char ph = ph_it->get<std::string>()[0];
    if (!e.contains("name") || !e["name"].is_string()) {
      Problem("event {} (ph {}): no string \"name\"", i, ph);
      return;
    }
    if (!e.contains("pid") || !IsInteger(e["pid"]) || !e.contains("tid") || !IsInteger(e["tid"])) {
      Problem("event {} (ph {}): \"pid\" and \"tid\" must be integers", i, ph);
      return;
    }
    if (e.contains("args") && !e["args"].is_object()) {
      Problem("event {}: \"args\" is not an object", i);
    }
    if (e.contains("cat") && !e["cat"].is_string()) {
      Problem("event {}: \"cat\" is not a string", i);
    }
    const std::pair<int64_t, int64_t> thread{e["pid"].get<int64_t>(), e["tid"].get<int64_t>()};
    switch (ph) {
      case 'M':
        Metadata(i, e);
        return;
      case 'X': {
        if (!Timestamp(i, e)) return;
        if (!e.contains("dur") || !IsFinite(e["dur"]) || e["dur"].get<double>() < 0) {
          Problem("event {} (X): no finite \"dur\" >= 0", i);
          return;
        }
        const int64_t start = Ns(e["ts"].get<double>());
        slices_[thread].push_back(
            {start, start + Ns(e["dur"].get<double>()), i, e.value("cat", std::string())});
        ++report_.slices;
        return;
      }
      case 'i':
        if (!Timestamp(i, e)) return;
        if (e.contains("s") &&
            (!e["s"].is_string() || (e["s"] != "g" && e["s"] != "p" && e["s"] != "t"))) {
          Problem("event {} (i): scope \"s\" is not g, p or t", i);
        }
        return;
      case 's':
      case 'f':
        Flow(i, e, ph, thread);
        return;
      default:
        Problem("event {}: phase '{}' is not one the export writes (X, i, M, s, f)", i, ph);
        return;
    }
  }

  bool Timestamp(size_t i, const json& e) {
    if (!e.contains("ts") || !IsFinite(e["ts"]) || e["ts"].get<double>() < 0) {
      Problem("event {}: no finite \"ts\" >= 0 (µs)", i);
      return false;
    }
    return true;
  }

  void Metadata(size_t i, const json& e) {
    const std::string name = e["name"].get<std::string>();
    const json* args = e.contains("args") && e["args"].is_object() ? &e["args"] : nullptr;
    auto string_arg = [&](const char* key) {
      if (args == nullptr || !args->contains(key) || !(*args)[key].is_string()) {
        Problem("event {} (M {}): args.{} is not a string", i, name, key);
        return false;
      }
      return true;
    };
    if (name == "process_name") {
      if (string_arg("name")) report_.process_names.insert((*args)["name"].get<std::string>());
    } else if (name == "thread_name") {
      string_arg("name");
    } else if (name == "process_labels") {
      string_arg("labels");
    } else if (name == "process_sort_index" || name == "thread_sort_index") {
      if (args == nullptr || !args->contains("sort_index") || !IsInteger((*args)["sort_index"])) {
        Problem("event {} (M {}): args.sort_index is not an integer", i, name);
      }
    } else if (extra_.count(name) == 0) {
      Problem("event {}: metadata \"{}\" is not one viewers know", i, name);
    }
  }

  void Flow(size_t i, const json& e, char ph, std::pair<int64_t, int64_t> thread) {
    if (!Timestamp(i, e)) return;
    std::string id;
    if (e.contains("id") && (e["id"].is_string() || IsInteger(e["id"]))) {
      id = e["id"].dump();
    } else if (e.contains("id2") && e["id2"].is_object() && e["id2"].size() == 1 &&
               (e["id2"].contains("local") || e["id2"].contains("global"))) {
      id = e["id2"].dump();
    } else {
      Problem("event {} ({}): no \"id\" (string or integer) nor \"id2\" (local or global)", i, ph);
      return;
    }
    if (!e.contains("cat") || !e["cat"].is_string()) {
      Problem("event {} ({}): a flow needs a \"cat\"", i, ph);
      return;
    }
    bool enclosing = ph == 's';
    if (e.contains("bp")) {
      if (ph != 'f' || e["bp"] != "e") {
        Problem("event {} ({}): binding point \"bp\" other than \"e\" on an \"f\"", i, ph);
      }
      enclosing = true;
    }
    const int64_t ts = Ns(e["ts"].get<double>());
    FlowEnds& f =
        flows_[e["cat"].get<std::string>() + '\x1f' + e["name"].get<std::string>() + '\x1f' + id];
    if (f.starts + f.finishes == 0) f.first_index = i;
    if (ph == 's') {
      ++f.starts;
      f.start_ts = ts;
    } else {
      ++f.finishes;
      f.finish_ts = ts;
    }
    bindings_.push_back({thread, ts, enclosing, i, e["cat"].get<std::string>()});
  }

  void Nesting() {
    for (auto& [thread, slices] : slices_) {
      std::sort(slices.begin(), slices.end(), [](const Slice& a, const Slice& b) {
        return a.start != b.start ? a.start < b.start : a.end > b.end;
      });
      std::vector<const Slice*> open;
      for (const Slice& s : slices) {
        while (!open.empty() && open.back()->end <= s.start) open.pop_back();
        if (!open.empty() && s.end > open.back()->end + Resolution(s.end)) {
          Problem(
              "events {} and {} (X on pid {} tid {}): partial overlap, slices of a thread must "
              "nest ({} ns past the enclosing one's end)",
              open.back()->index, s.index, thread.first, thread.second, s.end - open.back()->end);
          continue;
        }
        open.push_back(&s);
      }
    }
  }

  void Flows() {
    for (const auto& [key, f] : flows_) {
      if (f.starts != 1 || f.finishes != 1) {
        Problem("flow of event {}: {} start(s) and {} end(s), not one of each", f.first_index,
                f.starts, f.finishes);
        continue;
      }
      if (f.finish_ts < f.start_ts) {
        Problem("flow of event {}: ends before it starts", f.first_index);
        continue;
      }
      ++report_.flows;
    }
    // Viewers differ in how a flow event finds its slice: Perfetto and chrome://tracing take
    // the slice that encloses it ("s", "f" with bp "e") or the next one ("f"), Chrome
    // DevTools only a slice of the same cat that starts at the flow event's ts. A slice
    // that starts there satisfies all three.
    for (const Binding& b : bindings_) {
      auto it = slices_.find(b.thread);
      bool bound = false;
      bool at_start = false;
      if (it != slices_.end()) {
        for (const Slice& s : it->second) {
          if (b.enclosing ? s.start <= b.ts && b.ts <= s.end : s.start >= b.ts) bound = true;
          if (s.start == b.ts && s.cat == b.cat) at_start = true;
        }
      }
      if (!bound) {
        Problem("event {} (flow): no slice of its thread (pid {} tid {}) to bind to", b.index,
                b.thread.first, b.thread.second);
      } else if (!at_start) {
        Problem(
            "event {} (flow): no slice of cat \"{}\" starts at its ts on its thread (pid {} tid "
            "{}): Chrome DevTools binds a flow only there",
            b.index, b.cat, b.thread.first, b.thread.second);
      }
    }
  }

  struct Binding {
    std::pair<int64_t, int64_t> thread;
    int64_t ts = 0;
    bool enclosing = false;
    size_t index = 0;
    std::string cat;
  };

  const std::set<std::string>& extra_;
  TraceEventFormatReport report_;
  std::map<std::pair<int64_t, int64_t>, std::vector<Slice>> slices_;
  std::map<std::string, FlowEnds> flows_;
  std::vector<Binding> bindings_;
};

}  // namespace

TraceEventFormatReport TraceEventFormatCheck::Check(const nlohmann::json& doc) const {
  return Checker(extra_metadata_).Run(doc);
}

}  // namespace perftracker
