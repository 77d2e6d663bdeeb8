// server_load_bench: one `perftracker server`, thousands of simulated collectors (this
// process) uploading a realistic summary each for the same window. Measures how long the
// server takes from the window's end to the stored diagnosis, checks that no upload was
// lost (the diagnosis has every rank, none missing), and reads the server's peak RSS.
//
//   perftracker server --listen 127.0.0.1:7070 --http-listen 127.0.0.1:7071
//       --report-dir /tmp/load --window-seconds 1 --window-delay-ms 2000
//       --wait-summaries-seconds 120 &
//   server_load_bench --server 127.0.0.1:7070 --http 127.0.0.1:7071
//       --token-file /tmp/load/server.token --collectors 2000 --channels 16 --server-pid $!
// (see docs/performance.md for the exact commands)
//
// Each simulated collector is one ControlPlane stream (registration with --ranks-per-collector
// ranks, then a summary per rank when the window opens) on one of --channels connections,
// served by a thread of its own that blocks on its stream. Summaries come from
// SyntheticWorker (bench/), the same ~300-function training step summary_size_bench
// measures, with every rank's own 3 % jitter per function and iteration (JitteredWorker, as
// digest_screen_bench); one rank in 1,000 runs its step 40 % slower. When the server asks for
// digests (progressive disclosure: a job of at least
// --digest-min-workers workers), each collector sends a digest per rank at the window's end
// and the full summaries the server then asks for (encoded when asked, as a collector
// keeps them). The window is opened through the server's API (POST .../trigger).
//
// Restart (--server-cmd CMD --restart 1): the bench starts the server itself (CMD through
// /bin/sh), lets every collector register, SIGKILLs the server and starts it again with the
// same command; each collector reconnects as GrpcCoordinatorLink does (full-jitter backoff
// under a cap doubling from 200 ms to 5 s, 3 s per attempt; --jitter 0: the lockstep backoff
// before it, each wait its cap and none before the first attempt) and registers again. Printed: how
// long until half, 90 % and all of them are registered again, the server's open files, threads and
// memory before and after, then the window as above on the new server. With --channels equal to
// --collectors every collector has its own connection, as real ones do (the bench raises its
// open-files limit to fit, or says why it cannot). The collectors run in --processes child
// processes (gRPC's blocking client, a thread per stream, stalls at ~10,000 streams in one process:
// 126 of 10,000 registered in a minute, the server idle), which report to this one over a
// pipe.
#include <pthread.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <fmt/core.h>
#include <httplib.h>
#include <nlohmann/json.hpp>

#include "perftracker/core/status.h"
#include "perftracker/summary/worker_digest.h"
#include "perftracker/wire/control_client.h"
#include "perftracker/wire/digest_codec.h"
#include "perftracker/wire/reconnect_backoff.h"
#include "perftracker/wire/summary_codec.h"
#include "synthetic_worker.h"

namespace perftracker {
namespace {

using Clock = std::chrono::steady_clock;

struct Args {
  std::string server = "127.0.0.1:7070";
  std::string http = "127.0.0.1:7071";
  std::string token_file;
  std::string job = "load";
  int collectors = 2000;
  int ranks_per_collector = 1;
  int channels = 16;
  int iterations = 10;
  int server_pid = 0;
  int timeout_s = 600;
  std::string server_cmd;  // the bench starts (and stops) the server itself
  bool restart = false;    // SIGKILL the server once all registered, start it again
  int processes = 1;       // collector processes (each runs its share of the collectors)
  bool jitter = true;      // the link's jittered backoff; 0: the lockstep one before it
};

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

// A field of /proc/<pid>/status ("VmHWM:", "VmRSS:", "Threads:"), its value trimmed.
std::string ProcStatusField(int pid, std::string_view field) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.starts_with(field)) {
      const size_t b = line.find_first_not_of(" \t", field.size());
      return b == std::string::npos ? std::string() : line.substr(b);
    }
  }
  return "(unknown)";
}

size_t OpenFiles(int pid) {
  std::error_code ec;
  size_t n = 0;
  for (std::filesystem::directory_iterator it("/proc/" + std::to_string(pid) + "/fd", ec), end;
       !ec && it != end; it.increment(ec)) {
    ++n;
  }
  return n;
}

// What a server process holds now: open files, threads, resident and peak memory.
std::string ProcessLine(int pid) {
  return fmt::format("{} open files, {} threads, RSS {}, peak RSS {}", OpenFiles(pid),
                     ProcStatusField(pid, "Threads:"), ProcStatusField(pid, "VmRSS:"),
                     ProcStatusField(pid, "VmHWM:"));
}

// Every connection is a file descriptor: the soft limit goes up to the hard one, and a hard
// limit below `needed` is an error that says so.
Status RaiseOpenFilesLimit(size_t needed) {
  rlimit lim{};
  if (getrlimit(RLIMIT_NOFILE, &lim) != 0)
    return Status::Internal("getrlimit(RLIMIT_NOFILE) failed");
  if (lim.rlim_max != RLIM_INFINITY && lim.rlim_max < needed) {
    return Status::InvalidArgument(fmt::format(
        "needs {} open files, the hard limit is {} (raise it: ulimit -Hn, or fewer --channels)",
        needed, lim.rlim_max));
  }
  if (lim.rlim_cur != RLIM_INFINITY && lim.rlim_cur < needed) {
    lim.rlim_cur = lim.rlim_max;
    if (setrlimit(RLIMIT_NOFILE, &lim) != 0) {
      return Status::InvalidArgument(
          fmt::format("needs {} open files and could not raise the limit", needed));
    }
  }
  return Status::Ok();
}

// A thread with a 256 KB stack: 10,000 collectors are 10,000 threads blocked in Read, and
// the default 8 MB stacks would reserve 80 GB of address space for nothing.
class SmallStackThread {
 public:
  explicit SmallStackThread(std::function<void()> body)
      : body_(std::make_unique<std::function<void()>>(std::move(body))) {
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, 256 * 1024);
    started_ = pthread_create(&thread_, &attr, &SmallStackThread::Run, body_.get()) == 0;
    pthread_attr_destroy(&attr);
    if (!started_) {
      fmt::print(stderr, "server_load_bench: cannot start a thread (too many threads?)\n");
      std::exit(1);
    }
  }
  void Join() {
    if (started_) pthread_join(thread_, nullptr);
    started_ = false;
  }
  ~SmallStackThread() { Join(); }

 private:
  static void* Run(void* body) {
    (*static_cast<std::function<void()>*>(body))();
    return nullptr;
  }
  std::unique_ptr<std::function<void()>> body_;
  pthread_t thread_{};
  bool started_ = false;
};

// Starts `cmd` through /bin/sh (its redirections apply); the server's pid.
int StartServer(const std::string& cmd) {
  const pid_t pid = fork();
  if (pid == 0) {
    const std::string line = "exec " + cmd;
    execl("/bin/sh", "sh", "-c", line.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  return static_cast<int>(pid);
}

// GrpcCoordinatorLinkOptions' defaults: what a real collector does when its stream breaks.
constexpr int kBackoffInitialMs = 200;
constexpr int kBackoffMaxMs = 5000;
constexpr int kConnectTimeoutMs = 3000;

// One line to the parent (collector events); whole, as it is shorter than PIPE_BUF.
void Report(int fd, const std::string& line) {
  const std::string l = line + "\n";
  ssize_t n = write(fd, l.data(), l.size());
  (void)n;
}

int64_t WallNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// A collector process: collectors [c0, c1), each a thread blocked on its stream, until the
// parent kills it. Events go to `fd` as lines: R <collector> <digests> (registered), X
// (stream ended), F <line> (first registration failed), W <window end ns>, U <n> (uploaded at
// the window's end), A <n> (full summaries sent when asked).
void RunCollectors(const Args& a, const std::string& token, int ranks, int c0, int c1,
                   const std::vector<std::string>& digests,
                   const std::function<std::string(int)>& encoded_summary, int fd) {
  const int n = c1 - c0;
  const int channels = std::max<int>(
      1, static_cast<int>((int64_t{a.channels} * n + a.collectors - 1) / a.collectors));
  std::vector<std::unique_ptr<ControlClient>> clients;
  for (int c = 0; c < channels; ++c) {
    ControlClientOptions o;
    o.address = a.server;
    o.token = token;
    o.private_connection = true;
    clients.push_back(std::move(ControlClient::Create(o)).value());
  }
  std::vector<std::unique_ptr<SmallStackThread>> threads;
  threads.reserve(static_cast<size_t>(n));
  for (int c = c0; c < c1; ++c) {
    threads.push_back(std::make_unique<SmallStackThread>([&, c] {
      const int first = c * a.ranks_per_collector;
      ControlRegistration reg;
      reg.job_id = a.job;
      reg.host = fmt::format("sim-node-{}", c);
      reg.title = "server_load_bench";
      for (int i = 0; i < a.ranks_per_collector; ++i) {
        reg.ranks.push_back({first + i, ranks, i, 100000 + first + i, reg.host});
      }
      ControlClient* client = clients[static_cast<size_t>((c - c0) % channels)].get();
      // As GrpcCoordinatorLink: reconnect with a jittered backoff (wire/reconnect_backoff.h,
      // its cap doubling from 200 ms to 5 s), each attempt waiting at most 3 s for the
      // connection; --jitter 0: each wait is the cap, as before the jitter (lockstep).
      ReconnectBackoff backoff(kBackoffInitialMs, kBackoffMaxMs, 1 + static_cast<uint64_t>(c));
      const auto next_wait = [&] {
        const int cap = backoff.CapMs();
        const int jittered = backoff.NextDelayMs();
        return std::chrono::milliseconds(a.jitter ? jittered : cap);
      };
      bool ever_registered = false;
      for (;;) {
        auto stream =
            client->Connect(reg, ever_registered || a.restart ? kConnectTimeoutMs : 60000);
        if (!stream.ok()) {
          if (!ever_registered && !a.restart) {
            Report(fd, fmt::format("F collector {}: {}", c, stream.status().message()));
            return;
          }
          std::this_thread::sleep_for(next_wait());
          continue;
        }
        backoff.Reset();
        ever_registered = true;
        ControlStream* s = stream->get();
        const bool send_digests = s->registered().send_digests;
        Report(fd, fmt::format("R {} {}", c, send_digests ? 1 : 0));
        ServerMessage m;
        while (s->Read(&m)) {
          if (const auto* w = std::get_if<WindowSpec>(&m)) {
            Report(fd, fmt::format("W {}", w->start_ns + w->duration_ns));
            // A collector uploads once the window is over.
            const int64_t now = WallNs();
            if (w->start_ns + w->duration_ns > now) {
              std::this_thread::sleep_for(
                  std::chrono::nanoseconds(w->start_ns + w->duration_ns - now));
            }
            int sent = 0;
            for (int r = first; r < first + a.ranks_per_collector; ++r) {
              const bool ok =
                  send_digests ? s->Write(ControlDigest{w->id, r, digests[static_cast<size_t>(r)]})
                               : s->Write(ControlSummary{w->id, r, encoded_summary(r)});
              if (ok) ++sent;
            }
            Report(fd, fmt::format("U {}", sent));
          } else if (const auto* q = std::get_if<ControlRequestSummaries>(&m)) {
            int sent = 0;
            for (int32_t r : q->ranks) {
              if (r >= first && r < first + a.ranks_per_collector &&
                  s->Write(ControlSummary{q->window, r, encoded_summary(r)})) {
                ++sent;
              }
            }
            Report(fd, fmt::format("A {}", sent));
          } else if (const auto* rej = std::get_if<ControlRejected>(&m)) {
            Report(fd, fmt::format("collector {}: rejected: {}", c, rej->error.substr(0, 300)));
          }
        }
        (void)s->Finish();
        Report(fd, fmt::format("X {}", c));
        // The link waits before its first attempt after a break too (none before the jitter).
        if (a.jitter) std::this_thread::sleep_for(next_wait());
      }
    }));
  }
  for (auto& t : threads) t->Join();
}

int Main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);  // progress lines as they happen
  Args a;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i];
    const std::string v = argv[i + 1];
    if (k == "--server")
      a.server = v;
    else if (k == "--http")
      a.http = v;
    else if (k == "--token-file")
      a.token_file = v;
    else if (k == "--job")
      a.job = v;
    else if (k == "--collectors")
      a.collectors = std::atoi(v.c_str());
    else if (k == "--ranks-per-collector")
      a.ranks_per_collector = std::max(1, std::atoi(v.c_str()));
    else if (k == "--channels")
      a.channels = std::atoi(v.c_str());
    else if (k == "--iterations")
      a.iterations = std::atoi(v.c_str());
    else if (k == "--server-pid")
      a.server_pid = std::atoi(v.c_str());
    else if (k == "--timeout-s")
      a.timeout_s = std::atoi(v.c_str());
    else if (k == "--server-cmd")
      a.server_cmd = v;
    else if (k == "--restart")
      a.restart = v == "1" || v == "true";
    else if (k == "--processes")
      a.processes = std::atoi(v.c_str());
    else if (k == "--jitter")
      a.jitter = v == "1" || v == "true";
    else {
      fmt::print(stderr, "server_load_bench: unknown option {}\n", k);
      return 2;
    }
  }
  if (a.restart && a.server_cmd.empty()) {
    fmt::print(stderr, "server_load_bench: --restart needs --server-cmd (the bench restarts it)\n");
    return 2;
  }
  // A server the bench started is stopped (SIGTERM) when the bench returns.
  struct ServerGuard {
    const Args* a;
    ~ServerGuard() {
      if (a->server_cmd.empty() || a->server_pid <= 0) return;
      kill(a->server_pid, SIGTERM);
      waitpid(a->server_pid, nullptr, 0);
    }
  } server_guard{&a};
  if (!a.server_cmd.empty()) {
    a.server_pid = StartServer(a.server_cmd);
    // Its token file appears once it runs (created at its first start).
    for (int i = 0; i < 600 && !std::filesystem::exists(a.token_file); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  }
  std::string token;
  {
    std::ifstream in(a.token_file);
    std::getline(in, token);
  }
  if (token.empty()) {
    fmt::print(stderr, "server_load_bench: --token-file: no token in '{}'\n", a.token_file);
    return 2;
  }

  // Summaries: a few distinct synthetic workers, re-labelled per rank and encoded.
  const int ranks = a.collectors * a.ranks_per_collector;
  const auto t_build = Clock::now();
  const WorkerSummary base = SyntheticWorker(1).Run(a.iterations);
  const auto summary_of = [&](int r) {
    WorkerSummary s = JitteredWorker(base, r, r % 1000 == 37 ? 1.4 : 1.0);
    s.host = fmt::format("sim-node-{}", r / a.ranks_per_collector);
    return s;
  };
  // Every rank's digest (small); the full summaries only up to kPrebuiltSummaries ranks
  // (30-40 KB each), else encoded when the server asks for them.
  constexpr int kPrebuiltSummaries = 10000;
  std::vector<std::string> encoded(static_cast<size_t>(std::min(ranks, kPrebuiltSummaries)));
  std::vector<std::string> digests(static_cast<size_t>(ranks));
  size_t summary_bytes = 0, digest_bytes = 0;
  for (int r = 0; r < ranks; ++r) {
    const WorkerSummary s = summary_of(r);
    digests[static_cast<size_t>(r)] = EncodeWorkerDigest(MakeWorkerDigest(s));
    digest_bytes += digests[static_cast<size_t>(r)].size();
    if (r < kPrebuiltSummaries) {
      encoded[static_cast<size_t>(r)] = EncodeWorkerSummary(s);
      summary_bytes += encoded[static_cast<size_t>(r)].size();
    }
  }
  const auto encoded_summary = [&](int r) {
    return r < kPrebuiltSummaries ? encoded[static_cast<size_t>(r)]
                                  : EncodeWorkerSummary(summary_of(r));
  };
  const double mean_summary =
      static_cast<double>(summary_bytes) / std::min(ranks, kPrebuiltSummaries);
  fmt::print(
      "summaries: {} ranks ({} collectors x {}), {} functions each, mean {:.1f} KB encoded, "
      "digests {:.2f} KB (built in {:.1f} s)\n",
      ranks, a.collectors, a.ranks_per_collector, base.functions.size(), mean_summary / 1024.0,
      static_cast<double>(digest_bytes) / ranks / 1024.0, Seconds(Clock::now() - t_build));

  // One connection per --channels client; each collector's stream is on client c % channels.
  // Every connection is an open file here and on the server.
  {
    const Status st = RaiseOpenFilesLimit(static_cast<size_t>(a.channels) + 256);
    if (!st.ok()) {
      fmt::print(stderr, "server_load_bench: --channels {}: {}\n", a.channels, st.message());
      return 2;
    }
  }

  // What the collector processes report, one line per event on a pipe (each line is written
  // whole: shorter than PIPE_BUF).
  std::mutex mu;
  std::condition_variable cv;
  int registered = 0;  // collectors holding a registered stream now
  int failed = 0;      // collectors whose first registration failed (without --restart)
  int generation = 0;  // 1 once the server was killed (--restart)
  std::vector<Clock::duration> reregistered;  // after the kill, per collector
  int uploaded = 0;  // ranks whose digest or summary went out at the window's end
  int asked = 0;     // full summaries the server asked for after the digests
  bool digest_mode = false;
  Clock::time_point t_kill;
  int64_t window_end_ns = 0;

  int events[2];
  if (pipe(events) != 0) {
    fmt::print(stderr, "server_load_bench: pipe failed\n");
    return 1;
  }
  const auto t0 = Clock::now();
  // The collectors, --processes of them each running its share (gRPC's blocking client
  // does not scale to 10,000 streams in one process: a thread per stream, one poller).
  std::vector<pid_t> children;
  const int procs = std::max(1, std::min(a.processes, a.collectors));
  for (int p = 0; p < procs; ++p) {
    const int c0 = static_cast<int>(int64_t{a.collectors} * p / procs);
    const int c1 = static_cast<int>(int64_t{a.collectors} * (p + 1) / procs);
    const pid_t pid = fork();
    if (pid == 0) {
      close(events[0]);
      RunCollectors(a, token, ranks, c0, c1, digests, encoded_summary, events[1]);
      _exit(0);
    }
    children.push_back(pid);
  }
  close(events[1]);
  std::thread reader([&] {
    FILE* in = fdopen(events[0], "r");
    char line[512];
    while (in != nullptr && std::fgets(line, sizeof(line), in) != nullptr) {
      std::lock_guard<std::mutex> lock(mu);
      long long x = 0;
      int y = 0;
      if (std::sscanf(line, "R %lld %d", &x, &y) == 2) {
        ++registered;
        if (y != 0) digest_mode = true;
        if (generation > 0) reregistered.push_back(Clock::now() - t_kill);
      } else if (std::sscanf(line, "X %lld", &x) == 1) {
        --registered;
      } else if (std::sscanf(line, "F %lld", &x) == 1) {
        if (failed++ < 5) fmt::print(stderr, "{}", line + 2);
      } else if (std::sscanf(line, "W %lld", &x) == 1) {
        window_end_ns = x;
      } else if (std::sscanf(line, "U %lld", &x) == 1) {
        uploaded += static_cast<int>(x);
      } else if (std::sscanf(line, "A %lld", &x) == 1) {
        asked += static_cast<int>(x);
      } else {
        fmt::print(stderr, "{}", line);
      }
      cv.notify_all();
    }
    if (in != nullptr) std::fclose(in);
  });
  {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait_for(lock, std::chrono::seconds(a.timeout_s),
                [&] { return registered + failed == a.collectors; });
  }
  const auto t_registered = Clock::now();
  int first_registered = 0;
  {
    std::lock_guard<std::mutex> lock(mu);
    first_registered = registered;
  }
  fmt::print(
      "registered: {} of {} collectors ({} ranks) over {} connections from {} process(es) in "
      "{:.2f} s ({} failed); the server asks for {}\n",
      first_registered, a.collectors, ranks, a.channels, procs, Seconds(t_registered - t0), failed,
      digest_mode ? "digests first" : "full summaries");
  if (a.server_pid > 0) fmt::print("server: {}\n", ProcessLine(a.server_pid));
  const auto stop_all = [&] {
    for (pid_t pid : children) kill(pid, SIGKILL);
    for (pid_t pid : children) waitpid(pid, nullptr, 0);
    reader.join();
  };
  if (first_registered == 0) {
    stop_all();
    return 1;
  }

  int reregistered_all = 0;
  if (a.restart) {
    // SIGKILL: the server gets no chance to say goodbye; every collector sees its stream
    // break and reconnects with its backoff until the new server answers.
    {
      std::lock_guard<std::mutex> lock(mu);
      generation = 1;
      t_kill = Clock::now();
    }
    kill(a.server_pid, SIGKILL);
    waitpid(a.server_pid, nullptr, 0);
    a.server_pid = StartServer(a.server_cmd);
    const auto t_started = Clock::now();
    {
      std::unique_lock<std::mutex> lock(mu);
      cv.wait_for(lock, std::chrono::seconds(a.timeout_s),
                  [&] { return reregistered.size() == static_cast<size_t>(a.collectors); });
      std::vector<Clock::duration> times = reregistered;
      std::sort(times.begin(), times.end());
      reregistered_all = static_cast<int>(times.size());
      const auto at = [&](double q) {
        return times.empty()
                   ? 0.0
                   : Seconds(
                         times[std::min(times.size() - 1, static_cast<size_t>(q * times.size()))]);
      };
      fmt::print(
          "restart: server SIGKILLed and started again ({:.2f} s after the kill); {} of {} "
          "collectors registered again: half {:.2f} s, 90 % {:.2f} s, all {:.2f} s after the "
          "kill\n",
          Seconds(t_started - t_kill), reregistered_all, a.collectors, at(0.5), at(0.9),
          times.empty() ? 0.0 : Seconds(times.back()));
    }
    fmt::print("server after the restart: {}\n", ProcessLine(a.server_pid));
  }

  std::string host = a.http.substr(0, a.http.rfind(':'));
  const int port = std::atoi(a.http.substr(a.http.rfind(':') + 1).c_str());
  httplib::Client http(host, port);
  http.set_read_timeout(60, 0);
  const httplib::Headers headers{{"Authorization", "Bearer " + token}};
  // The window: opened through the server's API (what an operator's manual trigger does).
  const auto t_trigger = Clock::now();
  for (;;) {
    auto res = http.Post(fmt::format("/api/v1/jobs/{}/trigger", a.job), headers, "", "text/plain");
    if (res && res->status / 100 == 2) break;  // 202: the window is requested
    if (Clock::now() - t_trigger > std::chrono::seconds(30)) {
      fmt::print("the server did not open a window: {}\n",
                 res ? fmt::format("{} {}", res->status, res->body) : std::string("no answer"));
      stop_all();
      return 1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait_for(lock, std::chrono::seconds(a.timeout_s),
                [&] { return uploaded == registered * a.ranks_per_collector; });
  }
  const auto t_uploaded = Clock::now();
  int64_t end_ns = 0;
  {
    std::lock_guard<std::mutex> lock(mu);
    end_ns = window_end_ns;
  }
  const int64_t now_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                             std::chrono::system_clock::now().time_since_epoch())
                             .count();
  // The window's end on the steady clock (the server gave it in wall-clock time).
  const auto t_window_end = t_uploaded - std::chrono::nanoseconds(now_ns - end_ns);
  fmt::print("uploaded: {} {} ({:.1f} MB), the last {:.2f} s after the window's end\n", uploaded,
             digest_mode ? "digests" : "summaries",
             (digest_mode ? static_cast<double>(digest_bytes)
                          : mean_summary * static_cast<double>(ranks)) /
                 1e6,
             Seconds(t_uploaded - t_window_end));

  nlohmann::json diagnosis;
  Clock::time_point t_diagnosed;
  while (Clock::now() - t_trigger < std::chrono::seconds(a.timeout_s)) {
    auto res = http.Get(fmt::format("/api/v1/jobs/{}/windows/1/diagnosis", a.job), headers);
    if (res && res->status == 200) {
      t_diagnosed = Clock::now();
      diagnosis = nlohmann::json::parse(res->body);
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  int connected_at_end = 0;
  {
    std::lock_guard<std::mutex> lock(mu);
    connected_at_end = registered;
  }
  stop_all();
  if (diagnosis.is_null()) {
    fmt::print("no diagnosis within {} s\n", a.timeout_s);
    return 1;
  }
  const int workers = diagnosis["diagnosis"]["num_workers"].get<int>();
  const size_t missing = diagnosis["missing_ranks"].size();
  std::string top = "none";
  if (!diagnosis["diagnosis"]["findings"].empty()) {
    const auto& f = diagnosis["diagnosis"]["findings"][0];
    top = fmt::format("{} ranks {}", f["code"].get<std::string>(), f["workers"].dump());
  }
  std::string path = "(no note)";
  for (const auto& n : diagnosis["diagnosis"]["notes"]) {
    const std::string note = n.get<std::string>();
    if (note.starts_with("progressive disclosure:")) path = note.substr(0, 120);
  }
  int full_summaries = 0;
  {
    std::lock_guard<std::mutex> lock(mu);
    full_summaries = digest_mode ? asked : uploaded;
  }
  fmt::print("diagnosed: {} workers, {} missing, from {} full summaries; top finding {}\n", workers,
             missing, full_summaries, top);
  fmt::print("path: {}\n", path);
  fmt::print(
      "time to diagnosis: {:.2f} s after the window's end ({:.2f} s after the last upload; "
      "{:.2f} s after the trigger)\n",
      Seconds(t_diagnosed - t_window_end), Seconds(t_diagnosed - t_uploaded),
      Seconds(t_diagnosed - t_trigger));
  if (a.server_pid > 0) {
    fmt::print("server peak RSS (VmHWM):{}\n", ProcStatusField(a.server_pid, "VmHWM:"));
  }
  const bool lossless =
      workers == ranks && missing == 0 && uploaded == connected_at_end * a.ranks_per_collector &&
      connected_at_end == a.collectors && (!a.restart || reregistered_all == a.collectors);
  fmt::print("{}\n", lossless ? "no upload lost" : "UPLOADS LOST");
  return lossless ? 0 : 1;
}

}  // namespace
}  // namespace perftracker

int main(int argc, char** argv) { return perftracker::Main(argc, argv); }
