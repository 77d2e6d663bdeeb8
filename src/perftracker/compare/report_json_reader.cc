#include "perftracker/compare/report_json_reader.h"

#include <fmt/core.h>
#include <cstdint>
#include <nlohmann/json.hpp>

namespace perftracker::compare {
namespace {

using nlohmann::json;

constexpr int kSchemaVersion = 1;
constexpr size_t kReportPrefix = 256;

double Number(const json& object, const char* field) {
  auto it = object.find(field);
  return it != object.end() && it->is_number() ? it->get<double>() : 0;
}

std::string String(const json& object, const char* field) {
  auto it = object.find(field);
  return it != object.end() && it->is_string() ? it->get<std::string>() : std::string();
}

// Element i of the number array `field`, or 0.
double At(const json& object, const char* field, size_t i) {
  auto it = object.find(field);
  if (it == object.end() || !it->is_array() || i >= it->size()) return 0;
  const json& v = (*it)[i];
  return v.is_number() ? v.get<double>() : 0;
}

}  // namespace

bool LooksLikeReportJson(std::string_view prefix) {
  prefix = prefix.substr(0, kReportPrefix);
  const size_t open = prefix.find_first_not_of(" \t\r\n");
  if (open == std::string_view::npos || prefix[open] != '{') return false;
  return prefix.find("\"schema_version\"") != std::string_view::npos &&
         prefix.find("\"generator\"") != std::string_view::npos;
}

Status ReadReportJson(std::string_view text, const std::string& path, RunProfile* profile) {
  json root = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (root.is_discarded()) {
    return Status::InvalidArgument(fmt::format("{}: not valid JSON", path));
  }
  if (!root.is_object() || String(root, "generator") != "perftracker") {
    return Status::InvalidArgument(fmt::format(
        "{}: not a perftracker report (no \"generator\": \"perftracker\"); give compare a "
        "report from `perftracker diagnose --format json` or a live window, or a trace set",
        path));
  }
  if (String(root, "kind") == "comparison") {
    return Status::InvalidArgument(fmt::format(
        "{}: is a comparison, not a report; compare two reports or two trace sets", path));
  }
  const double version = Number(root, "schema_version");
  if (version != kSchemaVersion) {
    return Status::InvalidArgument(fmt::format(
        "{}: report schema_version {} is not the {} this perftracker reads; compare it with "
        "the perftracker that wrote it",
        path, version, kSchemaVersion));
  }
  auto workers = root.find("workers");
  if (workers == root.end() || !workers->is_array() || workers->empty()) {
    return Status::InvalidArgument(fmt::format(
        "{}: the report lists no workers (written without the workers' summaries); nothing to "
        "compare",
        path));
  }
  auto functions = root.find("functions");
  const bool has_functions = functions != root.end() && functions->is_array();
  profile->set_has_functions(has_functions);
  std::vector<uint32_t> nodes;
  if (has_functions) {
    for (const json& f : *functions) {
      nodes.push_back(f.is_object() ? profile->tree()->InternKey(String(f, "key"))
                                    : static_cast<uint32_t>(CallPathTree::kRoot));
    }
  }
  for (size_t i = 0; i < workers->size(); ++i) {
    const json& w = (*workers)[i];
    if (!w.is_object()) {
      return Status::InvalidArgument(fmt::format("{}: workers[{}] is not an object", path, i));
    }
    ProfileWorker worker;
    worker.rank = static_cast<int32_t>(Number(w, "rank"));
    worker.host = String(w, "host");
    worker.iterations = static_cast<size_t>(Number(w, "iterations"));
    worker.median_iteration_ns = Number(w, "median_iteration_ms") * 1e6;
    worker.iteration_spread_ns = Number(w, "iteration_spread_ms") * 1e6;
    worker.cpu_stretch = Number(w, "cpu_stretch");  // absent (0) in older reports: unknown
    if (has_functions) {
      for (size_t j = 0; j < nodes.size(); ++j) {
        const json& f = (*functions)[j];
        if (nodes[j] == CallPathTree::kRoot) continue;
        FunctionTimes t;
        t.inclusive_ns = At(f, "ms_per_iteration", i) * 1e6;
        t.self_ns = At(f, "self_ms_per_iteration", i) * 1e6;
        t.calls = At(f, "calls_per_iteration", i);
        if (t.inclusive_ns > 0 || t.calls > 0) worker.functions[nodes[j]] = t;
      }
    }
    profile->AddWorker(std::move(worker));
  }
  return Status::Ok();
}

}  // namespace perftracker::compare
