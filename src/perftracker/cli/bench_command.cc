// `perftracker bench accuracy`: runs each fault scenario (scenarios/*.json, docs/scenarios.md)
// with the simulated executor (a generated cluster, summarized and localized in-process) and /
// or the real one (a torch job under `perftracker run`), and judges its diagnosis against
// the scenario's ground truth (accuracy_judge.h), two ways:
//  - as the scenario states it (the raw score; the exit status follows it);
//  - by what each expected fault costs the job, measured on the simulated scenarios by
//    simulating them again without it: a fault under the report's materiality bar is not
//    expected at the top (the cost-judged score).
// It prints a line per scenario (text: each fault's cost at the end) or a JSON object with
// one row per scenario, and the totals: top-1 accuracy on fault scenarios, raw and judged by
// cost, healthy scenarios with a material finding, and the median time from a real fault's
// onset to its diagnosis.
#include "perftracker/cli/bench_command.h"

#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>

#include <fmt/core.h>
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "perftracker/cli/accuracy_judge.h"
#include "perftracker/cli/scenario_executor.h"

#ifndef PERFTRACKER_SOURCE_DIR_DEFAULT
#define PERFTRACKER_SOURCE_DIR_DEFAULT ""
#endif

namespace perftracker {
namespace {

namespace fs = std::filesystem;

struct Outcome {
  const Scenario* scenario = nullptr;
  ScenarioRun run;
  Judgement raw;     // as the scenario states it (the exit status follows it)
  Judgement judged;  // by what each expected fault costs (accuracy_judge.h)
};

// "nvlink_degraded +0.00 ms (0.0%) < 4.86 ms": each fault's measured cost against the bar.
std::string DescribeCosts(const Scenario& s, const std::vector<FaultCost>& costs) {
  std::string out;
  for (size_t i = 0; i < costs.size() && i < s.faults.size(); ++i) {
    const FaultCost& c = costs[i];
    out += i ? ", " : "";
    out += FaultKindName(s.faults[i].kind);
    if (!c.measured) {
      out += " not measured";
      continue;
    }
    out += fmt::format(" {:+.2f} ms ({:.1f}%) {} {:.2f} ms", c.cost_ns / 1e6,
                       c.iteration_ns > 0 ? 100 * c.cost_ns / c.iteration_ns : 0.0,
                       c.material() ? ">=" : "<", c.bar_ns / 1e6);
  }
  return out;
}

StatusOr<std::vector<std::string>> ExpandScenarioPaths(const std::vector<std::string>& paths) {
  std::vector<std::string> out;
  for (const auto& p : paths) {
    std::error_code ec;
    if (fs::is_directory(p, ec)) {
      std::vector<std::string> found;
      for (const auto& e : fs::recursive_directory_iterator(p, ec)) {
        if (e.is_regular_file() && e.path().extension() == ".json") {
          found.push_back(e.path().string());
        }
      }
      if (found.empty()) {
        return Status::NotFound(fmt::format("{}: no scenario files (*.json) in this directory", p));
      }
      std::sort(found.begin(), found.end());
      out.insert(out.end(), found.begin(), found.end());
    } else if (fs::exists(p, ec)) {
      out.push_back(p);
    } else {
      return Status::NotFound(fmt::format("{}: no such file or directory", p));
    }
  }
  return out;
}

std::string FindLiveJob(const BenchOptions& o) {
  if (!o.job.empty()) return o.job;
  std::vector<std::string> roots;
  if (const char* env = std::getenv("PERFTRACKER_SOURCE_DIR")) roots.emplace_back(env);
  roots.emplace_back(".");
  roots.emplace_back(PERFTRACKER_SOURCE_DIR_DEFAULT);
  for (const auto& r : roots) {
    if (r.empty()) continue;
    for (const char* rel : {"tests/e2e/live_job.py", "examples/live/train.py"}) {
      const fs::path p = fs::path(r) / rel;
      std::error_code ec;
      if (fs::exists(p, ec)) return fs::absolute(p).string();
    }
  }
  return "";
}

double Median(std::vector<double> v) {
  if (v.empty()) return -1;
  std::sort(v.begin(), v.end());
  const size_t m = v.size() / 2;
  return v.size() % 2 ? v[m] : (v[m - 1] + v[m]) / 2;
}

}  // namespace

CLI::App* AddBenchCommand(CLI::App& app, BenchOptions* options) {
  CLI::App* bench = app.add_subcommand("bench", "Benchmarks of perftracker itself");
  bench->require_subcommand(1);
  CLI::App* acc = bench->add_subcommand(
      "accuracy",
      "Run fault scenarios (docs/scenarios.md), compare each diagnosis with its expectation, "
      "print a table and the totals; exit 1 if any scenario fails");
  acc->add_option("paths", options->paths, "Scenario files (*.json) or directories")->required();
  acc->add_option("--format", options->format, "text or json")
      ->check(CLI::IsMember({"text", "json"}))
      ->default_val("text");
  acc->add_option("--executor", options->executor,
                  "Which scenarios to run: sim, real or all (by the scenario's executor)")
      ->check(CLI::IsMember({"sim", "real", "all"}))
      ->default_val("all");
  acc->add_option("-j,--jobs", options->jobs, "Summarizer threads for simulated scenarios")
      ->check(CLI::Range(1, 256))
      ->default_val(2);
  acc->add_option("--job", options->job,
                  "The real executor's training job (default: tests/e2e/live_job.py of the "
                  "source tree)");
  acc->add_option("--python", options->python, "Python with torch for real scenarios")
      ->default_val("/usr/bin/python3");
  acc->add_option("--keep-dir", options->keep_dir,
                  "Keep each real run's reports and logs, and each simulated one's text report "
                  "(<name>.txt, and <name>.json with every number), under this directory");
  acc->add_option("--timeout", options->timeout_seconds,
                  "Seconds a real scenario may run before it fails")
      ->check(CLI::Range(10.0, 3600.0))
      ->default_val(180);
  return acc;
}

int RunBenchAccuracy(const BenchOptions& options) {
  auto files = ExpandScenarioPaths(options.paths);
  if (!files.ok()) {
    fmt::print(stderr, "perftracker: {}\n", files.status().message());
    return 2;
  }
  std::vector<Scenario> scenarios;
  for (const auto& f : *files) {
    auto s = LoadScenario(f);
    if (!s.ok()) {
      fmt::print(stderr, "perftracker: {}\n", s.status().message());
      return 2;
    }
    const bool real = s->executor == ScenarioExecutor::kReal;
    if (options.executor == "sim" && real) continue;
    if (options.executor == "real" && !real) continue;
    scenarios.push_back(std::move(*s));
  }
  RealOptions real;
  {
    char buf[4096];
    const ssize_t len = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
    real.perftracker = len > 0 ? std::string(buf, static_cast<size_t>(len)) : "perftracker";
  }
  real.job = FindLiveJob(options);
  real.python = options.python;
  real.keep_dir = options.keep_dir;
  real.timeout_seconds = options.timeout_seconds;

  const bool text = options.format == "text";
  if (text) {
    fmt::print("{:<34} {:<5} {:<5} {:<6} {:>11} {:>8}  {}\n", "scenario", "exec", "pass", "judged",
               "onset->diag", "run s",
               "unexpected findings / why it failed | each fault's cost per iteration vs the bar");
    std::fflush(stdout);
  }
  std::vector<Outcome> outcomes;
  for (const Scenario& s : scenarios) {
    Outcome o;
    o.scenario = &s;
    const bool is_real = s.executor == ScenarioExecutor::kReal;
    StatusOr<ScenarioRun> run =
        is_real ? RunRealScenario(s, real) : RunSimScenario(s, options.jobs, options.keep_dir);
    if (!run.ok()) {
      o.run.note = run.status().message();
      o.raw.detail = o.judged.detail = run.status().message();
    } else {
      o.run = std::move(*run);
      if (o.run.skipped) {
        o.raw.pass = o.judged.pass = true;
      } else {
        o.raw = JudgeRaw(s, o.run.findings);
        o.judged = JudgeByCost(s, o.run.findings, o.run.fault_costs);
      }
    }
    if (text) {
      std::string why;
      for (const auto& u : o.raw.unexpected) why += (why.empty() ? "" : " ") + u;
      if (!o.raw.detail.empty()) why = o.raw.detail + (why.empty() ? "" : " | unexpected: " + why);
      if (o.judged.pass != o.raw.pass && !o.judged.detail.empty()) {
        why += (why.empty() ? "" : " | ") + ("judged: " + o.judged.detail);
      }
      if (o.run.skipped) why = "skipped: " + o.run.note;
      if (!o.run.fault_costs.empty()) {
        why += (why.empty() ? "" : " | ") + DescribeCosts(s, o.run.fault_costs);
      }
      const auto verdict = [&](const Judgement& j) {
        if (o.run.skipped) return "skip";
        if (j.healthy_like) return j.pass ? (j.material_sub_bar ? "PASS-m" : "PASS-h") : "FAIL-h";
        return j.pass ? "PASS" : "FAIL";
      };
      fmt::print(
          "{:<34} {:<5} {:<5} {:<6} {:>11} {:>8.1f}  {}\n", s.name, is_real ? "real" : "sim",
          verdict(o.raw), verdict(o.judged),
          o.run.diagnosis_seconds >= 0 ? fmt::format("{:.1f} s", o.run.diagnosis_seconds) : "-",
          o.run.run_seconds, why.empty() ? "-" : why);
      std::fflush(stdout);
    }
    outcomes.push_back(std::move(o));
  }
  size_t faults = 0, fault_pass = 0, healthy = 0, healthy_false = 0, skipped = 0, failed = 0;
  // Judged by cost: fault scenarios that pass, and those whose every fault costs under the bar
  // (judged as healthy) and of them the ones with a material finding.
  size_t judged_pass = 0, healthy_like = 0, healthy_like_false = 0, material_sub_bar = 0;
  std::vector<double> diag;
  for (const auto& o : outcomes) {
    if (o.run.skipped) {
      ++skipped;
      continue;
    }
    if (!o.raw.pass) ++failed;
    if (o.scenario->healthy) {
      ++healthy;
      healthy_false += o.raw.pass ? 0 : 1;
    } else {
      ++faults;
      fault_pass += o.raw.pass ? 1 : 0;
      judged_pass += o.judged.pass ? 1 : 0;
      healthy_like += o.judged.healthy_like ? 1 : 0;
      healthy_like_false += o.judged.healthy_like && !o.judged.pass ? 1 : 0;
      material_sub_bar += o.judged.material_sub_bar ? 1 : 0;
      if (o.run.diagnosis_seconds >= 0) diag.push_back(o.run.diagnosis_seconds);
    }
  }
  const double judged_accuracy =
      faults ? static_cast<double>(judged_pass) / static_cast<double>(faults) : 1;
  const double accuracy =
      faults ? static_cast<double>(fault_pass) / static_cast<double>(faults) : 1;
  const double median_diag = Median(diag);
  if (text) {
    fmt::print(
        "\n{} scenarios ({} skipped): top-1 accuracy {}/{} = {:.1f}% on fault scenarios; "
        "{} of {} healthy scenarios with a material finding; median onset->diagnosis {} "
        "({} real fault scenarios timed)\n"
        "judged by each fault's cost: {}/{} = {:.1f}% on fault scenarios; {} whose every "
        "fault costs under the materiality bar judged as healthy: {} with a material finding "
        "nobody expected, {} naming an injected fault as material\n",
        outcomes.size(), skipped, fault_pass, faults, 100 * accuracy, healthy_false, healthy,
        median_diag >= 0 ? fmt::format("{:.1f} s", median_diag) : "-", diag.size(), judged_pass,
        faults, 100 * judged_accuracy, healthy_like, healthy_like_false, material_sub_bar);
  } else {
    nlohmann::json j;
    j["scenarios"] = nlohmann::json::array();
    for (const auto& o : outcomes) {
      nlohmann::json row;
      row["name"] = o.scenario->name;
      row["path"] = o.scenario->path;
      row["executor"] = o.scenario->executor == ScenarioExecutor::kReal ? "real" : "sim";
      row["healthy"] = o.scenario->healthy;
      row["result"] = o.run.skipped ? "skip" : (o.raw.pass ? "pass" : "fail");
      row["detail"] = o.run.skipped ? o.run.note : o.raw.detail;
      row["unexpected"] = o.raw.unexpected;
      row["judged_result"] = o.run.skipped ? "skip" : (o.judged.pass ? "pass" : "fail");
      row["judged_detail"] = o.judged.detail;
      row["judged_as_healthy"] = o.judged.healthy_like;
      row["judged_material_on_a_fault_under_the_bar"] = o.judged.material_sub_bar;
      nlohmann::json costs = nlohmann::json::array();
      for (size_t i = 0; i < o.run.fault_costs.size(); ++i) {
        const FaultCost& c = o.run.fault_costs[i];
        costs.push_back({{"kind", FaultKindName(o.scenario->faults[i].kind)},
                         {"measured", c.measured},
                         {"cost_ms", c.cost_ns / 1e6},
                         {"p50_cost_ms", c.p50_cost_ns / 1e6},
                         {"bar_ms", c.bar_ns / 1e6},
                         {"material", c.material()}});
      }
      row["fault_costs"] = costs;
      row["run_seconds"] = o.run.run_seconds;
      row["diagnosis_seconds"] =
          o.run.diagnosis_seconds >= 0 ? nlohmann::json(o.run.diagnosis_seconds) : nlohmann::json();
      row["events"] = o.run.events;
      row["median_iteration_ns"] = o.run.median_iteration_ns;
      nlohmann::json top = nlohmann::json::array();
      for (size_t i = 0; i < o.run.findings.size() && i < 3; ++i) {
        top.push_back({{"code", o.run.findings[i].code},
                       {"workers", o.run.findings[i].workers},
                       {"material", o.run.findings[i].material},
                       {"lost_share", o.run.findings[i].lost_share},
                       {"title", o.run.findings[i].title}});
      }
      row["top_findings"] = top;
      j["scenarios"].push_back(row);
    }
    j["totals"] = {{"scenarios", outcomes.size()},
                   {"skipped", skipped},
                   {"fault_scenarios", faults},
                   {"fault_passed", fault_pass},
                   {"top1_accuracy", accuracy},
                   {"judged_fault_passed", judged_pass},
                   {"judged_top1_accuracy", judged_accuracy},
                   {"judged_as_healthy", healthy_like},
                   {"judged_as_healthy_with_material_finding", healthy_like_false},
                   {"judged_as_healthy_naming_a_fault_as_material", material_sub_bar},
                   {"healthy_scenarios", healthy},
                   {"healthy_with_material_finding", healthy_false},
                   {"median_diagnosis_seconds",
                    median_diag >= 0 ? nlohmann::json(median_diag) : nlohmann::json()}};
    fmt::print("{}\n", j.dump(2));
  }
  return failed > 0 ? 1 : 0;
}

}  // namespace perftracker
