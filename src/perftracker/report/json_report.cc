// The JSON report, schema_version 1, documented in docs/report-json.md. Stable: fields are
// only ever added; a renamed or retyped field bumps schema_version. Numbers are plain JSON
// numbers, never NaN or inf (those become 0); durations are milliseconds ("_ms"), shares
// fractions in 0..1 ("_share"). Strings are valid UTF-8 with control characters removed.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <numeric>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include <nlohmann/json.hpp>

#include "perftracker/compare/run_profile.h"
#include "perftracker/report/format.h"
#include "perftracker/report/report.h"
#include "perftracker/report/report_model.h"
#include "perftracker/summary/data_quality_counters.h"

namespace perftracker {
namespace {

using nlohmann::ordered_json;
using report::Finite;
using report::SanitizeText;

constexpr int kSchemaVersion = 1;

// Milliseconds rounded to the nanosecond: readable, and exact enough for any check.
double Ms(double ns) { return std::round(Finite(ns)) / 1e6; }

// A share rounded to 1e-6 and clamped to 0..1.
double Share(double share) { return std::round(std::clamp(Finite(share), 0.0, 1.0) * 1e6) / 1e6; }

ordered_json FindingJson(const report::ReportModel& model, const Finding& f) {
  ordered_json j;
  j["code"] = SanitizeText(f.code);
  j["category"] = std::string(FindingCategoryName(f.category));
  j["title"] = SanitizeText(f.title);
  j["workers"] = f.workers;
  j["victims"] = f.victims;
  j["victims_wait_in"] = model.VictimWait(f);
  j["function"] = SanitizeText(f.function);
  j["function_key"] = SanitizeText(f.function_key);
  j["resource"] = SanitizeText(f.resource);
  j["lost_ms_per_iteration"] = Ms(f.lost_ns_per_iteration);
  j["lost_share"] = Share(f.lost_share);
  j["material"] = f.material;
  ordered_json evidence = ordered_json::array();
  for (const Evidence& e : f.evidence) {
    evidence.push_back({{"label", SanitizeText(e.label)}, {"value", SanitizeText(e.value)}});
  }
  j["evidence"] = std::move(evidence);
  return j;
}

// The `functions` table: every function that takes at least kMinFunctionShare of some
// worker's median iteration, with its time per iteration on every worker (what `perftracker
// compare` reads). At most kMaxFunctionCells numbers per column over all workers, but always
// kMinFunctions functions; the largest shares first. An ancestor's inclusive time is at least
// its descendants', so the table keeps every kept function's callers.
constexpr double kMinFunctionShare = 0.005;
constexpr size_t kMaxFunctionCells = 200'000;
constexpr size_t kMinFunctions = 20;

// The call paths (compare::CallPathHashes) that take at least kMinFunctionShare of some
// worker's median iteration: a path's time in a worker is the sum over its functions there,
// summed as RunProfile::AddSummary sums it. Paths that share a hash are summed together, so
// the set holds every such path (and, rarely, one more).
std::unordered_set<uint64_t> PathsOverMinShare(const report::ReportModel& model) {
  std::unordered_set<uint64_t> paths;
  std::vector<uint32_t> order;
  for (const report::WorkerRow& row : model.workers()) {
    const WorkerSummary& w = *row.summary;
    const auto median = static_cast<double>(w.median_iteration_ns());
    if (median <= 0) continue;
    const std::vector<uint64_t> hashes = compare::CallPathHashes(w);
    order.resize(hashes.size());
    std::iota(order.begin(), order.end(), 0u);
    std::sort(order.begin(), order.end(), [&](uint32_t a, uint32_t b) {
      return hashes[a] != hashes[b] ? hashes[a] < hashes[b] : a < b;
    });
    const auto iterations = static_cast<double>(w.iteration_count());
    for (size_t k = 0; k < order.size();) {
      const uint64_t hash = hashes[order[k]];
      double inclusive_ns = 0;
      for (; k < order.size() && hashes[order[k]] == hash; ++k) {
        inclusive_ns += static_cast<double>(w.functions[order[k]].total_ns) / iterations;
      }
      if (!(inclusive_ns / median < kMinFunctionShare)) paths.insert(hash);
    }
  }
  return paths;
}

// Where the report's text goes, piece by piece.
using JsonSink = std::function<void(std::string_view)>;

// The table goes to `out` entry by entry, as `functions`' value inside the report's root
// object (dump indent 2: its entries at 4 spaces): a table of long call-path keys (926 KB of
// JSON on b200 eager_trace) never exists as a whole DOM beside its dump (+2.2 MiB there),
// nor its keys all at once (sorted by keys built two at a time).
void WriteFunctionsJson(const report::ReportModel& model, const JsonSink& out) {
  compare::CallPathTree tree;
  compare::RunProfile profile(&tree, "");
  // Only the paths that can make the table are interned and counted (a trace with Python
  // stacks has one distinct path per 2-3 events, the table a few hundred).
  const std::unordered_set<uint64_t> paths = PathsOverMinShare(model);
  for (const report::WorkerRow& row : model.workers()) profile.AddSummary(*row.summary, &paths);
  std::unordered_map<uint32_t, double> max_share;
  for (const compare::ProfileWorker& w : profile.workers()) {
    if (w.median_iteration_ns <= 0) continue;
    for (const auto& [node, t] : w.functions) {
      const double share = t.inclusive_ns / w.median_iteration_ns;
      if (share < kMinFunctionShare) continue;
      double& m = max_share[node];
      m = std::max(m, share);
    }
  }
  std::vector<std::pair<double, uint32_t>> kept;
  for (const auto& [node, share] : max_share) kept.emplace_back(share, node);
  std::sort(kept.begin(), kept.end(), [](const auto& a, const auto& b) {
    return a.first != b.first ? a.first > b.first : a.second < b.second;
  });
  const size_t workers = std::max<size_t>(1, profile.workers().size());
  const size_t cap = std::max(kMinFunctions, kMaxFunctionCells / workers);
  if (kept.size() > cap) kept.resize(cap);
  // Callers first, then by key: stable across reports of one job. (The order of (key, node)
  // pairs; with Python stacks a key is ~2 KB, so each is built when compared.)
  std::vector<uint32_t> keyed;
  for (const auto& [share, node] : kept) keyed.push_back(node);
  std::sort(keyed.begin(), keyed.end(), [&](uint32_t a, uint32_t b) {
    const int c = tree.Key(a).compare(tree.Key(b));
    return c != 0 ? c < 0 : a < b;
  });
  if (keyed.empty()) {
    out("[]");
    return;
  }
  out("[\n");
  bool first = true;
  std::string entry;
  for (const uint32_t node : keyed) {
    const std::string key = tree.Key(node);
    ordered_json inclusive = ordered_json::array();
    ordered_json self = ordered_json::array();
    ordered_json calls = ordered_json::array();
    for (const compare::ProfileWorker& w : profile.workers()) {
      auto it = w.functions.find(node);
      const compare::FunctionTimes t =
          it == w.functions.end() ? compare::FunctionTimes{} : it->second;
      inclusive.push_back(Ms(t.inclusive_ns));
      self.push_back(Ms(t.self_ns));
      calls.push_back(std::round(Finite(t.calls) * 1000) / 1000);
    }
    ordered_json f;
    f["key"] = SanitizeText(key);
    f["name"] = SanitizeText(tree.name(node));
    f["kind"] = SanitizeText(tree.kind(node));
    f["ms_per_iteration"] = std::move(inclusive);
    f["self_ms_per_iteration"] = std::move(self);
    f["calls_per_iteration"] = std::move(calls);
    // What dump() writes for an array element at depth 2: each line 4 spaces further in
    // (a JSON string holds no raw newline, so every newline starts a line).
    const std::string text = f.dump(2, ' ', false, ordered_json::error_handler_t::replace);
    entry = first ? "    " : ",\n    ";
    first = false;
    for (char c : text) {
      entry += c;
      if (c == '\n') entry += "    ";
    }
    out(entry);
  }
  out("\n  ]");
}

ordered_json WorkerJson(const report::WorkerRow& row) {
  const WorkerSummary& w = *row.summary;
  ordered_json j;
  j["rank"] = row.rank;
  j["host"] = SanitizeText(w.host);
  j["source"] = SanitizeText(w.source);
  j["role"] = std::string(report::WorkerRoleName(row.role));
  j["has_device"] = w.has_device;
  j["iterations"] = row.iterations;
  j["median_iteration_ms"] = Ms(row.median_iteration_ns);
  j["mean_iteration_ms"] = Ms(row.mean_iteration_ns);
  std::vector<double> durations;
  for (const IterationSummary& it : w.iterations)
    durations.push_back(static_cast<double>(it.duration_ns));
  j["iteration_spread_ms"] = Ms(compare::RobustSpread(std::move(durations)));
  // How long each CPU second of its work took (run-queue wait, steal): `perftracker compare`
  // measures each rank's functions beyond its own load. 0 when the window does not say.
  j["cpu_stretch"] = std::round(Finite(compare::CpuStretch(w)) * 1e4) / 1e4;
  j["breakdown"] = {{"compute", Share(row.compute_share)},
                    {"communication", Share(row.communication_share)},
                    {"wait", Share(row.wait_share)},
                    {"data", Share(row.data_share)},
                    {"host_only", Share(row.host_only_share)}};
  ordered_json stats;
  stats["events"] = w.stats.events;
  for (const DataQualityCounter& c : kDataQualityCounters) stats[c.name] = w.stats.*c.count;
  stats["first_problem"] = SanitizeText(w.stats.first_problem);
  j["stats"] = std::move(stats);
  return j;
}

// Each data-quality counter with a count, over all workers: its severity, the total and the
// ranks that counted it.
ordered_json DataQualityJson(const report::ReportModel& model) {
  ordered_json out = ordered_json::array();
  for (const DataQualityCounter& c : kDataQualityCounters) {
    uint64_t total = 0;
    ordered_json ranks = ordered_json::array();
    for (const report::WorkerRow& row : model.workers()) {
      const uint64_t n = row.summary->stats.*c.count;
      if (n == 0) continue;
      total += n;
      ranks.push_back(row.rank);
    }
    if (total == 0) continue;
    out.push_back({{"counter", c.name},
                   {"severity", DataQualitySeverityName(c.severity)},
                   {"total", total},
                   {"workers", std::move(ranks)}});
  }
  return out;
}

// The report, piece by piece.
void WriteJsonTo(const ReportInput& input, const JsonSink& out) {
  const report::ReportModel model(input);
  const Diagnosis& d = model.diagnosis();
  ordered_json root;
  root["schema_version"] = kSchemaVersion;
  root["generator"] = "perftracker";
  root["title"] = model.title();
  root["verdict"] = model.Verdict();
  root["num_workers"] = model.num_workers();
  root["median_iteration_ms"] = Ms(model.median_iteration_ns());
  root["has_material_finding"] = model.top() != nullptr;
  ordered_json findings = ordered_json::array();
  for (const Finding& f : d.findings) findings.push_back(FindingJson(model, f));
  root["findings"] = std::move(findings);
  ordered_json notes = ordered_json::array();
  for (const std::string& n : d.notes) notes.push_back(SanitizeText(n));
  root["notes"] = std::move(notes);
  root["data_quality"] = DataQualityJson(model);
  ordered_json workers = ordered_json::array();
  for (const report::WorkerRow& row : model.workers()) workers.push_back(WorkerJson(row));
  root["workers"] = std::move(workers);
  root["functions"] = nullptr;  // written in place below (AppendFunctionsJson)
  if (input.skipped_inputs != nullptr) {
    // Paths as given (they need not be UTF-8: dump() replaces bad bytes).
    ordered_json skipped = ordered_json::array();
    for (const SkippedInput& s : *input.skipped_inputs) {
      skipped.push_back({{"path", s.path}, {"error", s.error}});
    }
    root["skipped_inputs"] = std::move(skipped);
  }
  // Strings are sanitized above (skipped_inputs aside); `replace` is a second guard so that
  // dump() never throws.
  const std::string rest = root.dump(2, ' ', false, ordered_json::error_handler_t::replace);
  // The root's own keys are the only lines indented by exactly 2 spaces.
  constexpr std::string_view kSlot = "\n  \"functions\": null";
  const size_t at = rest.find(kSlot);
  const std::string_view text = rest;
  out(text.substr(0, at + kSlot.size() - 4));  // up to `"functions": `
  WriteFunctionsJson(model, out);
  out(text.substr(at + kSlot.size()));
  out("\n");
}

}  // namespace

std::string RenderJson(const ReportInput& input) {
  std::string out;
  WriteJsonTo(input, [&](std::string_view piece) { out += piece; });
  return out;
}

bool WriteJson(const ReportInput& input, std::FILE* out) {
  bool ok = true;
  WriteJsonTo(input, [&](std::string_view piece) {
    ok = ok && std::fwrite(piece.data(), 1, piece.size(), out) == piece.size();
  });
  return ok && std::fflush(out) == 0;
}

}  // namespace perftracker
