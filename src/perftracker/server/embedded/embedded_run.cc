#include "perftracker/server/embedded/embedded_run.h"

#include <dirent.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <string_view>

#include <fmt/core.h>

#include "perftracker/server/embedded/no_window_explanation.h"
#include "perftracker/server/open_store.h"

namespace perftracker {
namespace {

namespace fs = std::filesystem;

// After the job ends, wait at most this long for the summaries of a window it cut short.
constexpr int64_t kFlushNs = 5'000'000'000;
// At the end, how long the shared memory of ranks that are still dying is waited for.
constexpr int kShmCleanupWaitMs = 2000;
// With a remote server: how long the job's start waits for the first connection attempt,
// and how long the end waits for the agents' last summaries.
constexpr int kRemoteFirstConnectMs = 5000;
constexpr int kRemoteDrainPolls = 100;
constexpr useconds_t kRemoteDrainPollUs = 20000;

bool IsWritableDir(const std::string& dir) {
  struct stat st {};
  return !dir.empty() && stat(dir.c_str(), &st) == 0 && S_ISDIR(st.st_mode) &&
         access(dir.c_str(), W_OK | X_OK) == 0;
}

// A private directory (0700) for the collector's socket: $XDG_RUNTIME_DIR, else $TMPDIR,
// else /tmp. Empty on failure.
std::string MakeSocketDir() {
  std::vector<std::string> bases;
  for (const char* var : {"XDG_RUNTIME_DIR", "TMPDIR"}) {
    const char* v = std::getenv(var);
    if (v != nullptr && *v != '\0') bases.emplace_back(v);
  }
  bases.emplace_back("/tmp");
  for (const auto& base : bases) {
    // sun_path holds 108 bytes: leave room for "/perftracker-XXXXXX/collector.sock".
    if (!IsWritableDir(base) || base.size() > 60) continue;
    std::string templ = base + "/perftracker-XXXXXX";
    if (mkdtemp(templ.data()) != nullptr) return templ;
  }
  return "";
}

// A process that exited, or a zombie nobody has reaped yet (its agent is gone either way).
bool ProcessGone(pid_t pid) {
  if (kill(pid, 0) != 0) return errno == ESRCH;
  std::ifstream stat(fmt::format("/proc/{}/stat", pid));
  std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
  const size_t paren = text.rfind(')');
  return paren != std::string::npos && paren + 2 < text.size() && text[paren + 2] == 'Z';
}

// Removes the agents' shared-memory files of this run whose process is gone (an agent that
// was killed could not remove its own). Files of live processes are left alone; as ranks
// killed with the job may still be dying when its main process has exited (SIGTERM to a
// hung job), their files are looked at again for up to `wait_ms`.
void RemoveStaleShm(const std::string& run_id, int wait_ms) {
  const std::string prefix = "perftracker-" + run_id + "-";
  for (int waited = 0;; waited += 50) {
    DIR* d = opendir("/dev/shm");
    if (d == nullptr) return;
    bool live_left = false;
    while (dirent* e = readdir(d)) {
      const std::string_view name(e->d_name);
      if (!name.starts_with(prefix)) continue;
      // <pid>, or <pid>-nccl / <pid>-cupti: the NCCL plugin's and the CUPTI tracer's files.
      std::string pid_text(name.substr(prefix.size()));
      for (const char* suffix : {"-nccl", "-cupti"}) {
        if (pid_text.ends_with(suffix)) pid_text.resize(pid_text.size() - std::strlen(suffix));
      }
      char* end = nullptr;
      const long pid = std::strtol(pid_text.c_str(), &end, 10);
      if (end == pid_text.c_str() || *end != '\0' || pid <= 0) continue;
      if (ProcessGone(static_cast<pid_t>(pid))) {
        unlink(("/dev/shm/" + std::string(name)).c_str());
      } else {
        live_left = true;
      }
    }
    closedir(d);
    if (!live_left || waited >= wait_ms) return;
    usleep(50'000);
  }
}

}  // namespace

std::string NewRunId() {
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  return fmt::format("{:x}-{}", ts.tv_sec, getpid());
}

EmbeddedRun::EmbeddedRun(EmbeddedRunOptions options) : options_(std::move(options)) {}

EmbeddedRun::~EmbeddedRun() = default;

StatusOr<std::unique_ptr<EmbeddedRun>> EmbeddedRun::Start(EmbeddedRunOptions options) {
  std::unique_ptr<EmbeddedRun> run(new EmbeddedRun(std::move(options)));
  const EmbeddedRunOptions& o = run->options_;
  const bool remote = o.remote.has_value();
  CoordinatorLink* link = nullptr;
  if (remote) {
    run->remote_link_ = std::make_unique<GrpcCoordinatorLink>(*o.remote);
    link = run->remote_link_.get();
  } else {
    run->coordinator_ = std::make_unique<WindowCoordinator>(o.coordinator);
    link = run->coordinator_.get();
    if (o.store != "off") {
      run->store_path_ = o.store.empty()
                             ? (fs::path(o.coordinator.report_dir) / "perftracker.db").string()
                             : o.store;
      StatusOr<std::unique_ptr<Store>> opened = OpenStore(run->store_path_);
      Status st = opened.status();
      if (st.ok()) {
        run->store_ = std::move(opened.value());
        run->recorder_ = std::make_unique<StoreRecorder>(run->store_.get(), o.run_id, o.title,
                                                         run->coordinator_.get());
        st = run->recorder_->Begin();
      }
      if (!st.ok()) {
        return Status::InvalidArgument(fmt::format("--store {}: {} (--store off runs without it)",
                                                   StoreDisplayName(run->store_path_),
                                                   st.message()));
      }
      run->coordinator_->AddCollector(run->recorder_.get());
      link = run->recorder_.get();
    }
  }

  run->socket_dir_ = MakeSocketDir();
  CollectorOptions collector_options;
  collector_options.socket_path =
      run->socket_dir_.empty() ? "" : run->socket_dir_ + "/collector.sock";
  collector_options.sampler = MakeHostSampler();
  if ((remote || o.coordinator.perfetto) && !o.recordings_dir.empty()) {
    collector_options.record_dir = o.recordings_dir;
    collector_options.record_events = o.perfetto_events_per_rank;
  }
  run->collector_ = std::make_unique<NodeCollector>(collector_options, link);
  if (remote) {
    run->remote_link_->SetControl(run->collector_.get());
  } else {
    run->coordinator_->AddCollector(run->collector_.get());
  }

  if (run->socket_dir_.empty()) {
    run->warnings_.push_back(
        "warning: cannot create a private directory for the collector's socket in "
        "$XDG_RUNTIME_DIR, $TMPDIR or /tmp; running the job without perftracker");
    return run;
  }
  const Status st = remote ? run->remote_link_->Start() : run->coordinator_->Start();
  if (!st.ok()) {
    rmdir(run->socket_dir_.c_str());
    return Status::InvalidArgument(
        fmt::format("{}: {}", remote ? "--server" : "--report-dir", st.message()));
  }
  const Status cst = run->collector_->Start();
  if (!cst.ok()) {
    run->warnings_.push_back(
        fmt::format("warning: {}; running the job without perftracker", cst.message()));
    return run;
  }
  run->live_ = true;
  if (remote) {
    // One clear line when the server cannot be reached; the job runs all the same and the
    // collector keeps trying (windows are taken once it is connected).
    const Status first = run->remote_link_->WaitFirstAttempt(kRemoteFirstConnectMs);
    if (!first.ok()) {
      run->warnings_.push_back(fmt::format(
          "{}; the job runs, and the collector keeps trying to reach it", first.message()));
    }
  }
  return run;
}

std::vector<std::pair<std::string, std::string>> EmbeddedRun::JobEnvironment() const {
  if (!live_) return {};
  return {{"PERFTRACKER_SOCKET", collector_->socket_path()},
          {"PERFTRACKER_RUN_ID", options_.run_id}};
}

void EmbeddedRun::Finish(int exit_code) {
  if (!live_) return;
  if (remote_link_) {
    // The agents' last summaries (sent when they say bye) reach the server before we go.
    for (int i = 0; i < kRemoteDrainPolls && !collector_->AgentPids().empty(); ++i) {
      usleep(kRemoteDrainPollUs);
    }
    collector_->Stop();
    // The server learns how the job ended (a slow end that looked like a hang is retracted
    // when it exited 0), after everything the collector queued before.
    remote_link_->JobExited(exit_code);
    remote_link_->Stop(static_cast<int>(kFlushNs / 1'000'000));
  } else {
    coordinator_->Flush(std::min(kFlushNs, options_.coordinator.wait_summaries_ns));
    coordinator_->JobExited(exit_code);
    collector_->Stop();
    coordinator_->Stop();
    if (recorder_) recorder_->StoreReports(coordinator_->reports());
  }
  rmdir(socket_dir_.c_str());
  RemoveStaleShm(options_.run_id, kShmCleanupWaitMs);
}

std::string EmbeddedRun::FinalSummary() const {
  if (!live_) return "";
  if (remote_link_) {
    return fmt::format("perftracker: windows and reports of job {} are on the server at {}\n",
                       options_.remote_job, options_.remote_server);
  }
  std::string out;
  const std::vector<WindowReport> reports = coordinator_->reports();
  const std::vector<std::string> retracted = coordinator_->retracted_hangs();
  for (const std::string& line : retracted) out += fmt::format("perftracker: note: {}\n", line);
  if (reports.empty()) {
    out += fmt::format(
        "perftracker: no window was taken: the job ran without a {}\n",
        retracted.empty() ? "slowdown or hang trigger" : "slowdown trigger or a confirmed hang");
    std::map<int32_t, std::vector<int64_t>> durations;
    for (int32_t rank : coordinator_->Ranks()) {
      std::vector<int64_t>& d = durations[rank];
      for (const auto& [end_ns, duration_ns] : coordinator_->IterationHistory(rank)) {
        d.push_back(duration_ns);
      }
    }
    out += ExplainNoWindow(durations, options_.window_iterations, options_.slowdown_ratio);
  } else {
    // The most important window's diagnosis (a hang, else the costliest finding), not
    // merely the last one's: a job that ends well after a fault is still diagnosed by it.
    const int final_report = MostImportantReport(reports);
    const WindowReport& shown = reports[static_cast<size_t>(final_report)];
    out += fmt::format("\n{}", shown.text);
    out +=
        fmt::format("perftracker: final diagnosis: {} (window {}{})\n",
                    shown.json_path.empty() ? "(not written)" : shown.json_path, shown.id,
                    reports.size() > 1 ? fmt::format(", the most important of {}", reports.size())
                                       : std::string());
    out += fmt::format("perftracker: {} window{} diagnosed; reports in {}:\n", reports.size(),
                       reports.size() == 1 ? "" : "s", options_.coordinator.report_dir);
    for (const auto& r : reports) {
      if (r.json_path.empty()) continue;
      out += fmt::format("  {}  {}{}{}\n", r.json_path, r.html_path,
                         r.stacks_path.empty() ? "" : "  ", r.stacks_path);
    }
  }
  if (recorder_ && !reports.empty()) {
    out += fmt::format(
        "perftracker: run {} is in the store {} (web UI: perftracker server --store {})\n",
        options_.run_id, StoreDisplayName(store_path_), StoreDisplayName(store_path_));
  }
  return out;
}

}  // namespace perftracker
