// The JSON report, schema_version 1, documented in docs/report-json.md. Stable: fields are
// only ever added; a renamed or retyped field bumps schema_version. Numbers are plain JSON
// numbers, never NaN or inf (those become 0); durations are milliseconds ("_ms"), shares
// fractions in 0..1 ("_share"). Strings are valid UTF-8 with control characters removed.
#include <algorithm>
#include <cmath>
#include <string>

#include <nlohmann/json.hpp>

#include "perftracker/report/format.h"
#include "perftracker/report/report.h"
#include "perftracker/report/report_model.h"

namespace perftracker {
namespace {

using nlohmann::ordered_json;
using report::Finite;
using report::SanitizeText;

constexpr int kSchemaVersion = 1;

// Milliseconds rounded to the nanosecond: readable, and exact enough for any check.
double Ms(double ns) { return std::round(Finite(ns)) / 1e6; }

// A share rounded to 1e-6 and clamped to 0..1.
double Share(double share) {
  return std::round(std::clamp(Finite(share), 0.0, 1.0) * 1e6) / 1e6;
}

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
  j["breakdown"] = {{"compute", Share(row.compute_share)},
                    {"communication", Share(row.communication_share)},
                    {"wait", Share(row.wait_share)},
                    {"data", Share(row.data_share)},
                    {"host_only", Share(row.host_only_share)}};
  j["stats"] = {{"events", w.stats.events},
                {"dropped_events", w.stats.dropped_events},
                {"out_of_order_events", w.stats.out_of_order_events},
                {"malformed_events", w.stats.malformed_events},
                {"deep_events", w.stats.deep_events},
                {"first_problem", SanitizeText(w.stats.first_problem)}};
  return j;
}

}  // namespace

std::string RenderJson(const ReportInput& input) {
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
  ordered_json workers = ordered_json::array();
  for (const report::WorkerRow& row : model.workers()) workers.push_back(WorkerJson(row));
  root["workers"] = std::move(workers);
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
  return root.dump(2, ' ', false, ordered_json::error_handler_t::replace) + "\n";
}

}  // namespace perftracker
