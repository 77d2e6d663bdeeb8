// `perftracker bench accuracy`: runs each fault scenario (scenarios/*.json, docs/scenarios.md)
// with the simulated executor (a generated cluster, summarized and localized in-process) and /
// or the real one (a torch job under `perftracker run`), and judges its diagnosis against
// the scenario's ground truth:
//  - a healthy scenario passes when no finding is material (a false alarm fails it);
//  - a fault scenario passes when each of its k expected findings matches (code or category,
//    materiality, workers) one of the top k findings, each finding matching at most one
//    expectation; a material finding nobody expected is reported, not failed;
//  - any finding listed as absent (e.g. a hang in a job that only pauses) fails it.
// It prints a line per scenario (text) or a JSON object with one row per scenario, and the
// totals: top-1 accuracy on fault scenarios, healthy scenarios with a material finding, and
// the median time from a real fault's onset to its diagnosis.
#include "perftracker/cli/bench_command.h"

#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>

#include <fmt/core.h>
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

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
  bool pass = false;
  std::string detail;                   // why it failed
  std::vector<std::string> unexpected;  // material findings nobody expected
};

bool Matches(const ExpectedFinding& e, const DiagnosedFinding& f) {
  if (e.material == ExpectedMateriality::kMaterial && !f.material) return false;
  if (e.material == ExpectedMateriality::kMinor && f.material) return false;
  if (!e.code.empty() && e.code != f.code) return false;
  if (!e.category.empty() && e.category != f.category) return false;
  if (!e.workers.empty()) {
    std::vector<int32_t> w = f.workers;
    std::sort(w.begin(), w.end());
    if (w != e.workers) return false;
  }
  return true;
}

std::string Describe(const DiagnosedFinding& f) {
  std::string ranks;
  for (size_t i = 0; i < f.workers.size() && i < 6; ++i) {
    ranks += fmt::format("{}{}", i ? "," : "", f.workers[i]);
  }
  if (f.workers.size() > 6) ranks += fmt::format(",..({})", f.workers.size());
  return fmt::format("{}{}{}", f.code, ranks.empty() ? "" : fmt::format("[{}]", ranks),
                     f.material ? "" : " (minor)");
}

std::string DescribeExpected(const ExpectedFinding& e) {
  std::string what = e.code.empty() ? e.category : e.code;
  if (e.material == ExpectedMateriality::kMinor) what += " (minor)";
  if (e.workers.empty()) return what;
  std::string ranks;
  for (size_t i = 0; i < e.workers.size() && i < 6; ++i) {
    ranks += fmt::format("{}{}", i ? "," : "", e.workers[i]);
  }
  if (e.workers.size() > 6) ranks += fmt::format(",..({})", e.workers.size());
  return fmt::format("{}[{}]", what, ranks);
}

// The findings that must not be there (material ones only), e.g. a hang in a job that
// only pauses. Any of them fails the scenario.
void JudgeAbsent(Outcome& o) {
  for (const auto& e : o.scenario->absent) {
    for (const auto& f : o.run.findings) {
      if (!Matches(e, f)) continue;
      o.pass = false;
      o.detail += fmt::format("{}{} must not be diagnosed, got {}", o.detail.empty() ? "" : "; ",
                              DescribeExpected(e), Describe(f));
      break;
    }
  }
}

void JudgeExpected(Outcome& o) {
  const Scenario& s = *o.scenario;
  const std::vector<DiagnosedFinding>& findings = o.run.findings;
  std::vector<bool> used(findings.size(), false);
  if (s.healthy) {
    for (const DiagnosedFinding& f : findings) {
      if (f.material) o.unexpected.push_back(Describe(f));
    }
    o.pass = o.unexpected.empty();
    if (!o.pass) o.detail = "material findings on a healthy job";
    return;
  }
  const size_t k = s.expected.size();
  o.pass = true;
  for (const auto& e : s.expected) {
    bool found = false;
    for (size_t i = 0; i < findings.size() && i < k && !found; ++i) {
      if (!used[i] && Matches(e, findings[i])) used[i] = found = true;
    }
    if (!found) {
      o.pass = false;
      o.detail += fmt::format("{}expected {} in the top {}, got {}", o.detail.empty() ? "" : "; ",
                              DescribeExpected(e), k,
                              findings.empty() ? std::string("no finding") : Describe(findings[0]));
    }
  }
  for (size_t i = 0; i < findings.size(); ++i) {
    if (!used[i] && findings[i].material) {
      bool expected = false;
      for (const auto& e : s.expected) expected |= Matches(e, findings[i]);
      if (!expected) o.unexpected.push_back(Describe(findings[i]));
    }
  }
}

void Judge(Outcome& o) {
  JudgeExpected(o);
  JudgeAbsent(o);
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
    fmt::print("{:<34} {:<5} {:<5} {:>11} {:>8}  {}\n", "scenario", "exec", "pass", "onset->diag",
               "run s", "unexpected findings / why it failed");
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
      o.pass = false;
      o.detail = run.status().message();
    } else {
      o.run = std::move(*run);
      if (o.run.skipped) {
        o.pass = true;
      } else {
        Judge(o);
      }
    }
    if (text) {
      std::string why;
      for (const auto& u : o.unexpected) why += (why.empty() ? "" : " ") + u;
      if (!o.detail.empty()) why = o.detail + (why.empty() ? "" : " | unexpected: " + why);
      if (o.run.skipped) why = "skipped: " + o.run.note;
      fmt::print(
          "{:<34} {:<5} {:<5} {:>11} {:>8.1f}  {}\n", s.name, is_real ? "real" : "sim",
          o.run.skipped ? "skip" : (o.pass ? "PASS" : "FAIL"),
          o.run.diagnosis_seconds >= 0 ? fmt::format("{:.1f} s", o.run.diagnosis_seconds) : "-",
          o.run.run_seconds, why.empty() ? "-" : why);
      std::fflush(stdout);
    }
    outcomes.push_back(std::move(o));
  }
  size_t faults = 0, fault_pass = 0, healthy = 0, healthy_false = 0, skipped = 0, failed = 0;
  std::vector<double> diag;
  for (const auto& o : outcomes) {
    if (o.run.skipped) {
      ++skipped;
      continue;
    }
    if (!o.pass) ++failed;
    if (o.scenario->healthy) {
      ++healthy;
      healthy_false += o.pass ? 0 : 1;
    } else {
      ++faults;
      fault_pass += o.pass ? 1 : 0;
      if (o.run.diagnosis_seconds >= 0) diag.push_back(o.run.diagnosis_seconds);
    }
  }
  const double accuracy =
      faults ? static_cast<double>(fault_pass) / static_cast<double>(faults) : 1;
  const double median_diag = Median(diag);
  if (text) {
    fmt::print(
        "\n{} scenarios ({} skipped): top-1 accuracy {}/{} = {:.1f}% on fault scenarios; "
        "{} of {} healthy scenarios with a material finding; median onset->diagnosis {} "
        "({} real fault scenarios timed)\n",
        outcomes.size(), skipped, fault_pass, faults, 100 * accuracy, healthy_false, healthy,
        median_diag >= 0 ? fmt::format("{:.1f} s", median_diag) : "-", diag.size());
  } else {
    nlohmann::json j;
    j["scenarios"] = nlohmann::json::array();
    for (const auto& o : outcomes) {
      nlohmann::json row;
      row["name"] = o.scenario->name;
      row["path"] = o.scenario->path;
      row["executor"] = o.scenario->executor == ScenarioExecutor::kReal ? "real" : "sim";
      row["healthy"] = o.scenario->healthy;
      row["result"] = o.run.skipped ? "skip" : (o.pass ? "pass" : "fail");
      row["detail"] = o.run.skipped ? o.run.note : o.detail;
      row["unexpected"] = o.unexpected;
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
                   {"healthy_scenarios", healthy},
                   {"healthy_with_material_finding", healthy_false},
                   {"median_diagnosis_seconds",
                    median_diag >= 0 ? nlohmann::json(median_diag) : nlohmann::json()}};
    fmt::print("{}\n", j.dump(2));
  }
  return failed > 0 ? 1 : 0;
}

}  // namespace perftracker
