#include "perftracker/sources/sim/scenario.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <fstream>
#include <initializer_list>
#include <nlohmann/json.hpp>
#include <sstream>
#include <utility>

#include "perftracker/core/input_file.h"

namespace perftracker {
namespace {

using Json = nlohmann::json;

constexpr std::array<std::pair<FaultKind, std::string_view>, 20> kFaultNames = {{
    {FaultKind::kGpuThrottle, "gpu_throttle"},
    {FaultKind::kGpuSlow, "gpu_slow"},
    {FaultKind::kNvlinkDegraded, "nvlink_degraded"},
    {FaultKind::kPcieDegraded, "pcie_degraded"},
    {FaultKind::kNicDegraded, "nic_degraded"},
    {FaultKind::kNicFlapping, "nic_flapping"},
    {FaultKind::kLaunchBound, "launch_bound"},
    {FaultKind::kHostSync, "host_sync"},
    {FaultKind::kUntracedPause, "untraced_pause"},
    {FaultKind::kSlowData, "slow_data"},
    {FaultKind::kSlowDataAll, "slow_data_all"},
    {FaultKind::kSlowCompute, "slow_compute"},
    {FaultKind::kCpuContention, "cpu_contention"},
    {FaultKind::kGc, "gc"},
    {FaultKind::kGcAll, "gc_all"},
    {FaultKind::kHang, "hang"},
    {FaultKind::kNetRateLimit, "net_rate_limit"},
    {FaultKind::kPause, "pause"},
    {FaultKind::kExtraAnnotation, "extra_annotation"},
    {FaultKind::kExtraFunction, "extra_function"},
}};

constexpr std::array<std::string_view, 11> kCategories = {
    "compute",       "data_loading", "communication",  "synchronization",
    "host_overhead", "gc",           "cpu_contention", "gpu_hardware",
    "memory",        "hang",         "data_quality"};

// Faults only the simulator can inject, and only real jobs.
bool SimOnly(FaultKind k) {
  return k == FaultKind::kGpuThrottle || k == FaultKind::kGpuSlow ||
         k == FaultKind::kNvlinkDegraded || k == FaultKind::kPcieDegraded ||
         k == FaultKind::kNicDegraded || k == FaultKind::kNicFlapping ||
         k == FaultKind::kLaunchBound || k == FaultKind::kUntracedPause;
}
bool RealOnly(FaultKind k) {
  return k == FaultKind::kHang || k == FaultKind::kNetRateLimit || k == FaultKind::kPause ||
         k == FaultKind::kExtraAnnotation || k == FaultKind::kExtraFunction;
}
// Real faults injected inside the job that may target several ranks (the others are tied to
// one rank: its CPU, its link, the one rank that stops).
bool RealMultiRank(FaultKind k) {
  return k == FaultKind::kExtraAnnotation || k == FaultKind::kExtraFunction ||
         k == FaultKind::kSlowCompute || k == FaultKind::kSlowData || k == FaultKind::kGc;
}
// Faults that hit every rank (no targets).
bool JobWide(FaultKind k) {
  return k == FaultKind::kLaunchBound || k == FaultKind::kHostSync ||
         k == FaultKind::kSlowDataAll || k == FaultKind::kGcAll;
}

class Parser {
 public:
  explicit Parser(const std::string& path) : path_(path) {}

  Status Error(const std::string& field, const std::string& what) const {
    return Status::InvalidArgument(
        fmt::format("{}: {}{}{}", path_, field, field.empty() ? "" : ": ", what));
  }

  Status CheckKeys(const Json& obj, const std::string& where,
                   std::initializer_list<std::string_view> allowed) const {
    if (!obj.is_object()) return Error(where, "must be an object");
    for (const auto& [key, value] : obj.items()) {
      if (std::find(allowed.begin(), allowed.end(), key) == allowed.end()) {
        std::string list;
        for (auto a : allowed) list += (list.empty() ? "" : ", ") + std::string(a);
        return Error(Join(where, key), fmt::format("unknown field (known: {})", list));
      }
    }
    return Status::Ok();
  }

  static std::string Join(const std::string& where, std::string_view key) {
    return where.empty() ? std::string(key) : fmt::format("{}.{}", where, key);
  }

  template <typename T>
  Status Int(const Json& obj, const std::string& where, std::string_view key, T* out, int64_t lo,
             int64_t hi) const {
    auto it = obj.find(std::string(key));
    if (it == obj.end()) return Status::Ok();
    if (!it->is_number_integer()) return Error(Join(where, key), "must be an integer");
    const int64_t v = it->get<int64_t>();
    if (v < lo || v > hi) {
      return Error(Join(where, key), fmt::format("{} is not in [{}, {}]", v, lo, hi));
    }
    *out = static_cast<T>(v);
    return Status::Ok();
  }

  Status Double(const Json& obj, const std::string& where, std::string_view key, double* out,
                double lo, double hi) const {
    auto it = obj.find(std::string(key));
    if (it == obj.end()) return Status::Ok();
    if (!it->is_number()) return Error(Join(where, key), "must be a number");
    const double v = it->get<double>();
    if (!(v >= lo && v <= hi)) {
      return Error(Join(where, key), fmt::format("{} is not in [{}, {}]", v, lo, hi));
    }
    *out = v;
    return Status::Ok();
  }

  Status String(const Json& obj, const std::string& where, std::string_view key,
                std::string* out) const {
    auto it = obj.find(std::string(key));
    if (it == obj.end()) return Status::Ok();
    if (!it->is_string()) return Error(Join(where, key), "must be a string");
    *out = it->get<std::string>();
    return Status::Ok();
  }

  Status IntList(const Json& obj, const std::string& where, std::string_view key,
                 std::vector<int32_t>* out, int32_t limit, std::string_view what) const {
    auto it = obj.find(std::string(key));
    if (it == obj.end()) return Status::Ok();
    if (!it->is_array()) return Error(Join(where, key), "must be a list of integers");
    for (size_t i = 0; i < it->size(); ++i) {
      const Json& v = (*it)[i];
      const std::string field = fmt::format("{}[{}]", Join(where, key), i);
      if (!v.is_number_integer()) return Error(field, "must be an integer");
      const int64_t x = v.get<int64_t>();
      if (x < 0 || x >= limit) {
        return Error(field, fmt::format("{} {} is not in [0, {})", what, x, limit));
      }
      out->push_back(static_cast<int32_t>(x));
    }
    std::sort(out->begin(), out->end());
    out->erase(std::unique(out->begin(), out->end()), out->end());
    return Status::Ok();
  }

  StatusOr<Scenario> Parse(std::string_view text) {
    Json root = Json::parse(text.begin(), text.end(), nullptr, false);
    if (root.is_discarded()) return Error("", "not valid JSON");
    PERFTRACKER_RETURN_IF_ERROR(
        CheckKeys(root, "", {"name", "description", "executor", "job", "faults", "expect"}));
    Scenario s;
    s.path = path_;
    PERFTRACKER_RETURN_IF_ERROR(String(root, "", "name", &s.name));
    if (s.name.empty()) return Error("name", "missing (a short unique name)");
    PERFTRACKER_RETURN_IF_ERROR(String(root, "", "description", &s.description));
    std::string executor = "sim";
    PERFTRACKER_RETURN_IF_ERROR(String(root, "", "executor", &executor));
    if (executor == "sim") {
      s.executor = ScenarioExecutor::kSim;
    } else if (executor == "real") {
      s.executor = ScenarioExecutor::kReal;
    } else {
      return Error("executor", fmt::format("'{}' is neither 'sim' nor 'real'", executor));
    }
    const bool sim = s.executor == ScenarioExecutor::kSim;

    // Job.
    if (!root.contains("job")) return Error("job", "missing");
    const Json& job = root["job"];
    PERFTRACKER_RETURN_IF_ERROR(
        CheckKeys(job, "job",
                  {"ranks", "dp", "tp", "pp", "gpus_per_host", "model_params_b", "iterations",
                   "steps", "microbatches", "layers_per_stage", "noise", "seed", "host_trace",
                   "process_groups", "loader_workers", "teardown_seconds", "roles"}));
    ScenarioJob& j = s.job;
    j.ranks = 0;
    constexpr int64_t kMaxRanks = 1 << 20;
    PERFTRACKER_RETURN_IF_ERROR(Int(job, "job", "ranks", &j.ranks, 1, kMaxRanks));
    PERFTRACKER_RETURN_IF_ERROR(Int(job, "job", "dp", &j.dp, 1, kMaxRanks));
    PERFTRACKER_RETURN_IF_ERROR(Int(job, "job", "tp", &j.tp, 1, 64));
    PERFTRACKER_RETURN_IF_ERROR(Int(job, "job", "pp", &j.pp, 1, 256));
    PERFTRACKER_RETURN_IF_ERROR(Int(job, "job", "gpus_per_host", &j.gpus_per_host, 1, 64));
    PERFTRACKER_RETURN_IF_ERROR(
        Double(job, "job", "model_params_b", &j.model_params_b, 0.01, 10000));
    PERFTRACKER_RETURN_IF_ERROR(Int(job, "job", "iterations", &j.iterations, 3, 1000));
    PERFTRACKER_RETURN_IF_ERROR(Int(job, "job", "steps", &j.steps, 20, 100000));
    PERFTRACKER_RETURN_IF_ERROR(Int(job, "job", "loader_workers", &j.loader_workers, 0, 16));
    PERFTRACKER_RETURN_IF_ERROR(
        Double(job, "job", "teardown_seconds", &j.teardown_seconds, 0, 600));
    if (sim && (j.loader_workers != 0 || j.teardown_seconds != 0)) {
      return Error("job", "loader_workers and teardown_seconds are for real jobs only");
    }
    PERFTRACKER_RETURN_IF_ERROR(Int(job, "job", "microbatches", &j.microbatches, 1, 64));
    PERFTRACKER_RETURN_IF_ERROR(Int(job, "job", "layers_per_stage", &j.layers_per_stage, 1, 256));
    PERFTRACKER_RETURN_IF_ERROR(Double(job, "job", "noise", &j.noise, 0, 0.5));
    PERFTRACKER_RETURN_IF_ERROR(Int(job, "job", "seed", &j.seed, 0, INT64_MAX));
    if (job.contains("host_trace")) {
      if (!job["host_trace"].is_boolean()) return Error("job.host_trace", "must be true or false");
      j.host_trace = job["host_trace"].get<bool>();
      if (!sim && !j.host_trace) return Error("job.host_trace", "only with executor sim");
    }
    if (job.contains("process_groups")) {
      if (!job["process_groups"].is_boolean())
        return Error("job.process_groups", "must be true or false");
      j.process_groups = job["process_groups"].get<bool>();
      if (!sim) return Error("job.process_groups", "only with executor sim");
    }
    PERFTRACKER_RETURN_IF_ERROR(String(job, "job", "roles", &j.roles));
    if (!j.roles.empty() && sim) return Error("job.roles", "only with executor real");
    if (!j.roles.empty() && j.roles != "two_models") {
      return Error("job.roles", fmt::format("unknown roles '{}' (known: two_models)", j.roles));
    }
    const int32_t mp = j.tp * j.pp;
    if (j.ranks == 0 && j.dp == 0) j.dp = 1;
    if (j.ranks == 0) j.ranks = j.dp * mp;
    if (j.dp == 0) {
      if (j.ranks % mp != 0) {
        return Error("job.ranks",
                     fmt::format("{} ranks are not a multiple of tp x pp = {}", j.ranks, mp));
      }
      j.dp = j.ranks / mp;
    }
    if (static_cast<int64_t>(j.dp) * mp != j.ranks) {
      return Error("job", fmt::format("dp x tp x pp = {} x {} x {} is not ranks = {}", j.dp, j.tp,
                                      j.pp, j.ranks));
    }
    if (sim && j.ranks % j.gpus_per_host != 0) {
      return Error("job.gpus_per_host",
                   fmt::format("{} ranks do not fill hosts of {} GPUs", j.ranks, j.gpus_per_host));
    }
    if (sim && j.gpus_per_host % j.tp != 0 && j.tp % j.gpus_per_host != 0) {
      return Error("job.tp", fmt::format("tensor-parallel groups of {} do not align with hosts "
                                         "of {} GPUs",
                                         j.tp, j.gpus_per_host));
    }
    if (!sim) {
      constexpr int32_t kMaxRealRanks = 8;
      if (j.ranks > kMaxRealRanks || j.tp != 1 || j.pp != 1) {
        return Error("job", fmt::format("a real job runs data-parallel on this machine: at most "
                                        "{} ranks, tp = pp = 1",
                                        kMaxRealRanks));
      }
      j.gpus_per_host = j.ranks;
    }

    // Faults.
    if (root.contains("faults")) {
      const Json& faults = root["faults"];
      if (!faults.is_array()) return Error("faults", "must be a list");
      for (size_t i = 0; i < faults.size(); ++i) {
        const std::string where = fmt::format("faults[{}]", i);
        const Json& f = faults[i];
        PERFTRACKER_RETURN_IF_ERROR(
            CheckKeys(f, where, {"kind", "ranks", "hosts", "start", "magnitude"}));
        ScenarioFault fault;
        std::string kind;
        PERFTRACKER_RETURN_IF_ERROR(String(f, where, "kind", &kind));
        bool known = false;
        for (const auto& [k, n] : kFaultNames) {
          if (n == kind) {
            fault.kind = k;
            known = true;
          }
        }
        if (!known) {
          std::string list;
          for (const auto& [k, n] : kFaultNames)
            list += (list.empty() ? "" : ", ") + std::string(n);
          return Error(Join(where, "kind"),
                       kind.empty() ? fmt::format("missing (one of: {})", list)
                                    : fmt::format("unknown fault '{}' (known: {})", kind, list));
        }
        if (sim && RealOnly(fault.kind)) {
          return Error(Join(where, "kind"), fmt::format("'{}' runs only with executor real", kind));
        }
        if (!sim && SimOnly(fault.kind)) {
          return Error(Join(where, "kind"),
                       fmt::format("'{}' needs a GPU cluster: only with executor sim", kind));
        }
        PERFTRACKER_RETURN_IF_ERROR(IntList(f, where, "ranks", &fault.ranks, j.ranks, "rank"));
        PERFTRACKER_RETURN_IF_ERROR(IntList(f, where, "hosts", &fault.hosts, j.hosts(), "host"));
        PERFTRACKER_RETURN_IF_ERROR(Int(f, where, "start", &fault.start, 0, 1000000));
        PERFTRACKER_RETURN_IF_ERROR(Double(f, where, "magnitude", &fault.magnitude, 0, 1e6));
        if (JobWide(fault.kind) && (!fault.ranks.empty() || !fault.hosts.empty())) {
          return Error(where, fmt::format("'{}' hits every rank: leave out ranks and hosts", kind));
        }
        if (!JobWide(fault.kind) && fault.ranks.empty() && fault.hosts.empty()) {
          return Error(where, fmt::format("'{}' needs target ranks or hosts", kind));
        }
        if (!sim && !fault.hosts.empty()) {
          return Error(Join(where, "hosts"), "a real job runs on one host: target ranks");
        }
        if (!sim && fault.ranks.size() > 1 && !RealMultiRank(fault.kind)) {
          return Error(Join(where, "ranks"),
                       fmt::format("a real job takes one fault rank for '{}'", kind));
        }
        if (sim && fault.start >= j.iterations) {
          return Error(Join(where, "start"),
                       fmt::format("iteration {} is past the job's {} iterations", fault.start,
                                   j.iterations));
        }
        s.faults.push_back(std::move(fault));
      }
    }
    if (!sim && s.faults.size() > 1) return Error("faults", "a real job takes at most one fault");

    // Expectation.
    if (!root.contains("expect")) {
      return Error("expect", "missing ({\"healthy\": true} or {\"findings\": [...]})");
    }
    const Json& ex = root["expect"];
    PERFTRACKER_RETURN_IF_ERROR(
        CheckKeys(ex, "expect", {"healthy", "findings", "absent", "judge"}));
    if (ex.contains("healthy")) {
      if (!ex["healthy"].is_boolean()) return Error("expect.healthy", "must be true or false");
      s.healthy = ex["healthy"].get<bool>();
    }
    if (ex.contains("judge")) {
      if (!ex["judge"].is_string() || (ex["judge"].get<std::string>() != "final" &&
                                       ex["judge"].get<std::string>() != "first")) {
        return Error("expect.judge",
                     "must be \"first\" (the first report after the onset) or \"final\" (the "
                     "diagnosis printed when the job has ended)");
      }
      s.judge_final = ex["judge"].get<std::string>() == "final";
      if (s.judge_final && sim) return Error("expect.judge", "\"final\" is for real jobs only");
    }
    PERFTRACKER_RETURN_IF_ERROR(Findings(ex, "findings", j, &s.expected));
    PERFTRACKER_RETURN_IF_ERROR(Findings(ex, "absent", j, &s.absent));
    if (s.healthy && !s.expected.empty()) {
      return Error("expect", "healthy: true and findings exclude each other");
    }
    if (!s.healthy && s.expected.empty() && s.absent.empty()) {
      return Error("expect",
                   "give {\"healthy\": true}, at least one finding, or findings that "
                   "must be absent");
    }
    if (s.healthy && !s.faults.empty()) {
      return Error("expect.healthy", "a scenario with faults is not healthy");
    }
    return s;
  }

 private:
  // expect.<key>: a list of findings (code and/or category, culprit workers or hosts).
  Status Findings(const Json& ex, const char* key, const ScenarioJob& j,
                  std::vector<ExpectedFinding>* out) const {
    if (ex.contains(key)) {
      const Json& list = ex[key];
      if (!list.is_array()) return Error(fmt::format("expect.{}", key), "must be a list");
      for (size_t i = 0; i < list.size(); ++i) {
        const std::string where = fmt::format("expect.{}[{}]", key, i);
        PERFTRACKER_RETURN_IF_ERROR(
            CheckKeys(list[i], where, {"code", "category", "workers", "hosts", "material"}));
        ExpectedFinding e;
        PERFTRACKER_RETURN_IF_ERROR(String(list[i], where, "code", &e.code));
        PERFTRACKER_RETURN_IF_ERROR(String(list[i], where, "category", &e.category));
        if (e.code.empty() && e.category.empty()) return Error(where, "needs a code or a category");
        if (list[i].contains("material")) {
          const Json& m = list[i]["material"];
          if (m.is_boolean()) {
            e.material =
                m.get<bool>() ? ExpectedMateriality::kMaterial : ExpectedMateriality::kMinor;
          } else if (m.is_string() && m.get<std::string>() == "either") {
            e.material = ExpectedMateriality::kEither;
          } else {
            return Error(Join(where, "material"), "must be true, false or \"either\"");
          }
        }
        if (!e.code.empty() && !e.code.starts_with("PT-")) {
          return Error(
              Join(where, "code"),
              fmt::format("'{}' is not a finding code (PT-..., docs/findings.md)", e.code));
        }
        if (!e.category.empty() &&
            std::find(kCategories.begin(), kCategories.end(), e.category) == kCategories.end()) {
          return Error(Join(where, "category"), fmt::format("unknown category '{}'", e.category));
        }
        PERFTRACKER_RETURN_IF_ERROR(
            IntList(list[i], where, "workers", &e.workers, j.ranks, "rank"));
        std::vector<int32_t> hosts;
        PERFTRACKER_RETURN_IF_ERROR(IntList(list[i], where, "hosts", &hosts, j.hosts(), "host"));
        for (int32_t h : hosts) {
          for (int32_t r = h * j.gpus_per_host; r < std::min(j.ranks, (h + 1) * j.gpus_per_host);
               ++r) {
            e.workers.push_back(r);
          }
        }
        std::sort(e.workers.begin(), e.workers.end());
        e.workers.erase(std::unique(e.workers.begin(), e.workers.end()), e.workers.end());
        out->push_back(std::move(e));
      }
    }
    return Status::Ok();
  }

  std::string path_;
};

}  // namespace

std::string_view FaultKindName(FaultKind kind) {
  for (const auto& [k, n] : kFaultNames) {
    if (k == kind) return n;
  }
  return "unknown";
}

std::vector<int32_t> Scenario::TargetRanks(const ScenarioFault& fault) const {
  std::vector<int32_t> out = fault.ranks;
  for (int32_t h : fault.hosts) {
    for (int32_t r = h * job.gpus_per_host; r < std::min(job.ranks, (h + 1) * job.gpus_per_host);
         ++r) {
      out.push_back(r);
    }
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

StatusOr<Scenario> ParseScenario(std::string_view json_text, const std::string& path) {
  return Parser(path).Parse(json_text);
}

// A scenario is a few KiB of JSON; a file far larger than that is the wrong file.
constexpr size_t kMaxScenarioFileBytes = 64 << 20;

StatusOr<Scenario> LoadScenario(const std::string& path) {
  // Refuses a FIFO, device or socket instead of blocking on it.
  StatusOr<std::string> text = ReadInputFile(path, kMaxScenarioFileBytes);
  if (!text.ok()) {
    const Status& st = text.status();
    std::string why = st.message().substr(std::min(st.message().size(), path.size() + 2));
    std::string msg = fmt::format("{}: cannot open the scenario file: {}", path, why);
    return st.code() == StatusCode::kNotFound ? Status::NotFound(std::move(msg))
                                              : Status::InvalidArgument(std::move(msg));
  }
  return ParseScenario(*text, path);
}

}  // namespace perftracker
