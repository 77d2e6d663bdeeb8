// The real executor of `perftracker bench accuracy` (scenario_executor.h): runs
//   perftracker run --report-dir DIR/reports <detector options> --
//       python live_job.py --world-size N --steps S --fault K --fault-rank R ...
// in a run directory of its own, follows the job (stderr: "live_job: rank R fault K starts at
// step S (TIME)"; --progress-file: rank 0's finished steps), and judges the first window
// report written after the fault had a window's worth of time to show. Time to diagnosis:
// that report's modification time minus the fault onset. The run is ended (SIGTERM to
// perftracker, which forwards it to the job) as soon as that report exists.
// A scenario with "judge": "final" instead runs the job to its end and judges what the user
// sees then: the diagnosis `perftracker run` prints ("perftracker: final diagnosis: PATH"),
// or none when no window was taken.
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "perftracker/cli/scenario_executor.h"
#include "perftracker/server/report_writer.h"

namespace perftracker {
namespace {

namespace fs = std::filesystem;

// Detector and window options (as the e2e live tests use them, tests/e2e/test_live.py):
// a 4 s window after a 20-iteration moving mean, 15 % slowdown bar on a shared machine.
constexpr double kWindowSeconds = 4;
// A healthy job gets one forced window this long after start.
constexpr double kHealthyTriggerSeconds = 25;

double Now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::string ReadFile(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// When a live window report's window opened (seconds since the epoch; -1 when its
// "live window N (reason) from YYYY-MM-DD HH:MM:SS.mmm UTC ..." note is missing or unreadable).
double WindowStart(const fs::path& report) {
  const auto j = nlohmann::json::parse(ReadFile(report), nullptr, false);
  if (j.is_discarded() || !j.contains("notes") || !j["notes"].is_array()) return -1;
  for (const auto& n : j["notes"]) {
    if (!n.is_string()) continue;
    const std::string note = n.get<std::string>();
    if (note.rfind("live window ", 0) != 0) continue;
    const size_t at = note.find(" from ");
    if (at == std::string::npos) return -1;
    tm t{};
    int millis = 0;
    if (std::sscanf(note.c_str() + at + 6, "%d-%d-%d %d:%d:%d.%d", &t.tm_year, &t.tm_mon,
                    &t.tm_mday, &t.tm_hour, &t.tm_min, &t.tm_sec, &millis) != 7) {
      return -1;
    }
    t.tm_year -= 1900;
    t.tm_mon -= 1;
    return static_cast<double>(timegm(&t)) + millis / 1000.0;
  }
  return -1;
}

// Starts argv in a new process group (with `new_session`, a new session: another scheduler
// autogroup) with stdout / stderr redirected; returns the pid.
pid_t Spawn(const std::vector<std::string>& argv, const fs::path& out, const fs::path& err,
            const fs::path& cwd, bool new_session = false) {
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  const pid_t pid = fork();
  if (pid != 0) return pid;
  if (new_session) {
    setsid();
  } else {
    setpgid(0, 0);
  }
  const int o = open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  const int e = open(err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  const int in = open("/dev/null", O_RDONLY);
  if (o >= 0) dup2(o, 1);
  if (e >= 0) dup2(e, 2);
  if (in >= 0) dup2(in, 0);
  if (chdir(cwd.c_str()) != 0) _exit(127);
  execvp(args[0], args.data());
  _exit(127);
}

// Ends a process group: SIGTERM, then SIGKILL after `grace` seconds; reaps `pid`.
void EndGroup(pid_t pid, double grace) {
  if (pid <= 0) return;
  kill(-pid, SIGTERM);
  const double deadline = Now() + grace;
  int status = 0;
  while (Now() < deadline) {
    if (waitpid(pid, &status, WNOHANG) == pid) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  kill(-pid, SIGKILL);
  waitpid(pid, &status, 0);
}

// Why the net_rate_limit fault cannot run here ("" when it can): network namespaces, veths
// and tc need root and iproute2.
std::string NetnsProblem() {
  if (geteuid() != 0) {
    return "net_rate_limit needs root (a network namespace per rank and tc tbf)";
  }
  for (const char* tool : {"ip", "tc"}) {
    bool found = false;
    std::string path = getenv("PATH") != nullptr ? getenv("PATH") : "";
    path += ":/usr/sbin:/sbin";
    size_t at = 0;
    while (!found && at <= path.size()) {
      const size_t end = std::min(path.find(':', at), path.size());
      found = access((path.substr(at, end - at) + "/" + tool).c_str(), X_OK) == 0;
      at = end + 1;
    }
    if (!found) {
      return fmt::format("net_rate_limit needs '{}' (install iproute2)", tool);
    }
  }
  return "";
}

}  // namespace

StatusOr<ScenarioRun> RunRealScenario(const Scenario& s, const RealOptions& o) {
  ScenarioRun run;
  const double t0 = Now();
  if (o.job.empty() || !fs::exists(o.job)) {
    run.skipped = true;
    run.note = "the training job tests/e2e/live_job.py was not found (pass --job)";
    return run;
  }
  if (access(o.python.c_str(), X_OK) != 0) {
    run.skipped = true;
    run.note = fmt::format("{} is not executable (install python3-torch)", o.python);
    return run;
  }
  const ScenarioFault* fault = s.faults.empty() ? nullptr : &s.faults[0];
  std::vector<std::string> job_args;
  int busy_loops = 0;
  if (fault != nullptr) {
    std::string kind;
    switch (fault->kind) {
      case FaultKind::kSlowCompute:
        kind = "slow_compute";
        job_args = {"--slow-repeats", fmt::format("{}", std::lround(fault->magnitude))};
        break;
      case FaultKind::kSlowData:
      case FaultKind::kSlowDataAll:
        kind = fault->kind == FaultKind::kSlowData ? "slow_data" : "slow_data_all";
        job_args = {"--data-delay-ms", fmt::format("{}", fault->magnitude)};
        break;
      case FaultKind::kGc:
        kind = "gc";
        job_args = {"--gc-objects", fmt::format("{}", std::lround(fault->magnitude))};
        break;
      case FaultKind::kHang:
        kind = "hang";
        break;
      case FaultKind::kPause:
        // One pause of `magnitude` seconds in a plain function every 100 steps.
        kind = "pause";
        job_args = {"--pause-seconds", fmt::format("{}", fault->magnitude), "--pause-every", "100"};
        break;
      case FaultKind::kCpuContention:
        kind = "cpu_contention";
        job_args = {"--pin", "isolate"};
        busy_loops = std::max(1, static_cast<int>(std::lround(fault->magnitude)));
        break;
      case FaultKind::kHostSync:
        // live_job --device cuda: every rank reads each block's output with .item().
        if (access("/dev/nvidiactl", F_OK) != 0) {
          run.skipped = true;
          run.note = "host_sync needs a CUDA GPU (on the CPU .item() waits for no device)";
          return run;
        }
        kind = "host_sync";
        job_args = {"--device", "cuda"};
        break;
      case FaultKind::kNetRateLimit: {
        // live_job --launcher netns: every rank in a network namespace of its own; the
        // fault rank's interface gets a tc tbf at the fault step.
        if (const std::string why = NetnsProblem(); !why.empty()) {
          run.skipped = true;
          run.note = why;
          return run;
        }
        kind = "net_rate_limit";
        job_args = {"--launcher", "netns", "--link-mbit", fmt::format("{}", fault->magnitude)};
        break;
      }
      case FaultKind::kExtraAnnotation:
      case FaultKind::kExtraFunction:
        // magnitude: rounds of live_job's compute_metrics() on the fault ranks per step.
        kind = std::string(FaultKindName(fault->kind));
        job_args = {"--extra-repeats", fmt::format("{}", std::lround(fault->magnitude))};
        break;
      default:
        run.skipped = true;
        run.note =
            fmt::format("the real executor cannot inject '{}' yet", FaultKindName(fault->kind));
        return run;
    }
    job_args.insert(
        job_args.begin(),
        {"--fault", kind, "--fault-rank",
         fault->ranks.empty() ? std::string("0") : fmt::format("{}", fmt::join(fault->ranks, ",")),
         "--fault-after-steps", fmt::format("{}", fault->start)});
  }
  if (s.job.loader_workers > 0) {
    job_args.insert(job_args.end(), {"--loader-workers", fmt::format("{}", s.job.loader_workers)});
  }
  if (s.job.teardown_seconds > 0) {
    job_args.insert(job_args.end(),
                    {"--teardown-seconds", fmt::format("{}", s.job.teardown_seconds)});
  }
  std::error_code ec;
  fs::path dir;
  if (!o.keep_dir.empty()) {
    dir = fs::path(o.keep_dir) / s.name;
    fs::remove_all(dir, ec);
    fs::create_directories(dir, ec);
  } else {
    char tmpl[] = "/tmp/perftracker-accuracy-XXXXXX";
    const char* d = mkdtemp(tmpl);
    if (d == nullptr) return Status::Internal("cannot create a temporary directory");
    dir = d;
  }
  const fs::path reports = dir / "reports";
  const fs::path progress = dir / "progress.txt";
  std::vector<std::string> argv = {o.perftracker,         "run",
                                   "--report-dir",        reports.string(),
                                   "--window-iterations", "20",
                                   "--slowdown-ratio",    "0.15",
                                   "--window-seconds",    fmt::format("{}", kWindowSeconds),
                                   "--max-windows",       "3",
                                   "--cooldown-seconds",  "0"};
  if (s.healthy) {
    argv.push_back("--trigger-at-seconds");
    argv.push_back(fmt::format("{}", kHealthyTriggerSeconds));
  }
  argv.insert(argv.end(),
              {"--", o.python, o.job, "--world-size", fmt::format("{}", s.job.ranks), "--steps",
               fmt::format("{}", s.job.steps), "--progress-file", progress.string()});
  argv.insert(argv.end(), job_args.begin(), job_args.end());
  if (!s.job.roles.empty()) argv.insert(argv.end(), {"--roles", s.job.roles});
  const pid_t pid = Spawn(argv, dir / "stdout.txt", dir / "stderr.txt", dir);
  if (pid < 0) return Status::Internal("fork failed");

  std::vector<pid_t> busy;
  double onset = -1;
  fs::path judged;
  double judged_time = -1;
  int status = 0;
  bool exited = false;
  const double deadline = t0 + o.timeout_seconds;
  while (Now() < deadline) {
    if (waitpid(pid, &status, WNOHANG) == pid) {
      exited = true;
      break;
    }
    if (fault != nullptr && onset < 0) {
      if (busy_loops > 0) {
        // CPU contention: busy processes on the fault rank's CPU (live_job --pin isolate puts
        // it alone on the last allowed CPU) once rank 0 has done `start` steps. In a session
        // of their own, as a noisy neighbour is (another user, container or cgroup): with
        // kernel.sched_autogroup_enabled the scheduler gives each session a share and, inside
        // it, each task a share wherever it runs, so busy processes in the job's session took
        // from the job's own share and, on a host loaded by other sessions, left the rank
        // beside them no more starved than its peers (see docs/accuracy.md).
        const std::string p = ReadFile(progress);
        int64_t steps = 0;
        for (char c : p) steps += c == '\n';
        if (steps >= fault->start) {
          cpu_set_t set;
          CPU_ZERO(&set);
          int last = -1;
          if (sched_getaffinity(0, sizeof(set), &set) == 0) {
            for (int c = 0; c < CPU_SETSIZE; ++c) {
              if (CPU_ISSET(c, &set)) last = c;
            }
          }
          for (int i = 0; i < busy_loops; ++i) {
            busy.push_back(Spawn({o.python, "-c",
                                  fmt::format("import os\nos.sched_setaffinity(0, {{{}}})\n"
                                              "while True:\n    pass\n",
                                              std::max(last, 0))},
                                 "/dev/null", "/dev/null", dir, /*new_session=*/true));
          }
          onset = Now();
        }
      } else {
        const std::string err = ReadFile(dir / "stderr.txt");
        const size_t at = err.find(" starts at step ");
        if (at != std::string::npos) {
          const size_t open = err.find('(', at), close = err.find(')', at);
          if (open != std::string::npos && close != std::string::npos) {
            onset = std::atof(err.substr(open + 1, close - open - 1).c_str());
          }
        }
      }
    }
    // The first report the fault had a whole window to show in (healthy: the first one).
    if (!s.judge_final && fs::exists(reports, ec) && (s.healthy || onset > 0)) {
      std::vector<fs::path> files;
      for (const auto& e : fs::directory_iterator(reports, ec)) {
        if (ParseWindowReportFileName(e.path().filename().string())) files.push_back(e.path());
      }
      for (const auto& f : files) {
        struct stat st {};
        if (stat(f.c_str(), &st) != 0) continue;
        const double mtime =
            static_cast<double>(st.st_mtim.tv_sec) + static_cast<double>(st.st_mtim.tv_nsec) / 1e9;
        // A hang is reported as soon as every rank's stacks are in (no full window), in a
        // window that opened once the rank stopped: a slowdown window a loaded machine opened
        // before the hang began, diagnosed while it began, cannot show it.
        const bool hang = fault != nullptr && fault->kind == FaultKind::kHang;
        if (!s.healthy && mtime < onset + (hang ? 0 : kWindowSeconds)) continue;
        if (Now() - mtime < 0.3) continue;  // let the writer finish
        if (hang && WindowStart(f) < onset) continue;
        if (judged.empty() || mtime < judged_time) {
          judged = f;
          judged_time = mtime;
        }
      }
      if (!judged.empty()) break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  for (pid_t b : busy) EndGroup(b, 1);
  if (!exited) EndGroup(pid, 10);
  run.run_seconds = Now() - t0;
  run.note = dir.string();
  if (s.judge_final) {
    if (!exited) {
      return Status::Internal(fmt::format("the job did not end within {:.0f} s (run directory {})",
                                          o.timeout_seconds, dir.string()));
    }
    // A job that failed ran nothing worth judging (a missing module, a crash).
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      return Status::Internal(fmt::format("the job failed ({}; see stderr.txt in {})",
                                          WIFEXITED(status)
                                              ? fmt::format("exit {}", WEXITSTATUS(status))
                                              : fmt::format("signal {}", WTERMSIG(status)),
                                          dir.string()));
    }
    // What `perftracker run` printed last: its final diagnosis, or that none was taken.
    const std::string out = ReadFile(dir / "stdout.txt");
    const std::string tag = "perftracker: final diagnosis: ";
    const size_t at = out.rfind(tag);
    if (at == std::string::npos) {
      if (o.keep_dir.empty()) fs::remove_all(dir, ec);
      return run;  // no window: nothing diagnosed
    }
    const size_t from = at + tag.size();
    judged = out.substr(from, out.find_first_of(" \n", from) - from);
  }
  if (judged.empty()) {
    if (s.healthy && exited) return run;  // no window at all: nothing material
    return Status::Internal(fmt::format(
        "no window report {} (run directory {}; {})",
        exited ? "before the job ended" : fmt::format("within {:.0f} s", o.timeout_seconds),
        dir.string(), onset < 0 && fault ? "the fault never started" : "see stderr.txt"));
  }
  if (fault != nullptr && !s.judge_final) run.diagnosis_seconds = judged_time - onset;
  const auto j = nlohmann::json::parse(ReadFile(judged), nullptr, false);
  if (j.is_discarded() || !j.contains("findings")) {
    return Status::DataLoss(fmt::format("{}: not a report", judged.string()));
  }
  for (const auto& f : j["findings"]) {
    DiagnosedFinding d;
    d.code = f.value("code", "");
    d.category = f.value("category", "");
    d.material = f.value("material", false);
    d.title = f.value("title", "");
    if (f.contains("workers") && f["workers"].is_array()) {
      for (const auto& w : f["workers"]) {
        if (w.is_number_integer()) d.workers.push_back(w.get<int32_t>());
      }
    }
    run.findings.push_back(std::move(d));
  }
  if (o.keep_dir.empty()) fs::remove_all(dir, ec);
  return run;
}

}  // namespace perftracker
