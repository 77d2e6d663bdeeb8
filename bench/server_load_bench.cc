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
// Each simulated collector is one ControlPlane stream (registration with one rank, then the
// summary when the window opens) on one of --channels connections, served by a thread of
// its own that blocks on its stream. Summaries come from SyntheticWorker (bench/), the same
// ~300-function training step summary_size_bench measures, with a different seed per group
// of ranks; one rank in 100 runs its step 40 % slower.
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <fmt/core.h>
#include <httplib.h>
#include <nlohmann/json.hpp>

#include "perftracker/wire/control_client.h"
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
  int channels = 16;
  int iterations = 10;
  int base_summaries = 16;
  int server_pid = 0;
  int timeout_s = 600;
};

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

std::string VmHwm(int pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.starts_with("VmHWM:")) return line.substr(6);
  }
  return "(unknown)";
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
    else if (k == "--channels")
      a.channels = std::atoi(v.c_str());
    else if (k == "--iterations")
      a.iterations = std::atoi(v.c_str());
    else if (k == "--server-pid")
      a.server_pid = std::atoi(v.c_str());
    else if (k == "--timeout-s")
      a.timeout_s = std::atoi(v.c_str());
    else {
      fmt::print(stderr, "server_load_bench: unknown option {}\n", k);
      return 2;
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
  const auto t_build = Clock::now();
  std::vector<WorkerSummary> bases;
  for (int b = 0; b < a.base_summaries; ++b) {
    SyntheticWorker w(static_cast<uint64_t>(b) + 1);
    bases.push_back(w.Run(a.iterations));
  }
  std::vector<std::string> encoded(static_cast<size_t>(a.collectors));
  size_t total_bytes = 0;
  for (int r = 0; r < a.collectors; ++r) {
    WorkerSummary s = bases[static_cast<size_t>(r % a.base_summaries)];
    s.rank = r;
    s.host = fmt::format("sim-node-{}", r / 8);
    if (r % 100 == 37) {
      for (auto& f : s.functions) f.total_ns = f.total_ns * 14 / 10;
      for (auto& it : s.iterations) it.duration_ns = it.duration_ns * 14 / 10;
    }
    encoded[static_cast<size_t>(r)] = EncodeWorkerSummary(s);
    total_bytes += encoded[static_cast<size_t>(r)].size();
  }
  fmt::print("summaries: {} ranks, {} functions each, mean {:.1f} KB encoded (built in {:.1f} s)\n",
             a.collectors, bases[0].functions.size(),
             static_cast<double>(total_bytes) / a.collectors / 1024.0,
             Seconds(Clock::now() - t_build));

  std::vector<std::unique_ptr<ControlClient>> clients;
  for (int c = 0; c < a.channels; ++c) {
    ControlClientOptions o;
    o.address = a.server;
    o.token = token;
    o.private_connection = true;
    clients.push_back(std::move(ControlClient::Create(o)).value());
  }

  std::mutex mu;
  std::condition_variable cv;
  int registered = 0;
  int failed = 0;
  int uploaded = 0;
  Clock::time_point last_upload;
  int64_t window_end_ns = 0;
  std::vector<std::unique_ptr<ControlStream>> streams(static_cast<size_t>(a.collectors));
  std::atomic<bool> done{false};

  const auto t0 = Clock::now();
  std::vector<std::thread> threads;
  threads.reserve(static_cast<size_t>(a.collectors));
  for (int r = 0; r < a.collectors; ++r) {
    threads.emplace_back([&, r] {
      ControlRegistration reg;
      reg.job_id = a.job;
      reg.host = fmt::format("sim-node-{}", r / 8);
      reg.title = "server_load_bench";
      reg.ranks.push_back({r, a.collectors, r % 8, 100000 + r, reg.host});
      auto stream = clients[static_cast<size_t>(r % a.channels)]->Connect(reg, 60000);
      {
        std::lock_guard<std::mutex> lock(mu);
        if (!stream.ok()) {
          if (failed++ < 5) fmt::print(stderr, "rank {}: {}\n", r, stream.status().message());
          cv.notify_all();
          return;
        }
        ++registered;
        cv.notify_all();
      }
      ControlStream* s = stream->get();
      streams[static_cast<size_t>(r)] = std::move(stream).value();
      ServerMessage m;
      while (s->Read(&m)) {
        if (const auto* w = std::get_if<ControlWindow>(&m)) {
          {
            std::lock_guard<std::mutex> lock(mu);
            window_end_ns = w->start_ns + w->duration_ns;
          }
          // A collector uploads once the window is over.
          const int64_t now = std::chrono::duration_cast<std::chrono::nanoseconds>(
                                  std::chrono::system_clock::now().time_since_epoch())
                                  .count();
          if (w->start_ns + w->duration_ns > now) {
            std::this_thread::sleep_for(
                std::chrono::nanoseconds(w->start_ns + w->duration_ns - now));
          }
          const bool ok = s->Write(ControlSummary{w->id, r, encoded[static_cast<size_t>(r)]});
          std::lock_guard<std::mutex> lock(mu);
          if (ok) {
            ++uploaded;
            last_upload = Clock::now();
          }
          cv.notify_all();
        } else if (const auto* rej = std::get_if<ControlRejected>(&m)) {
          fmt::print(stderr, "rank {}: rejected: {}\n", r, rej->error);
        }
        if (done) break;
      }
    });
  }
  {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait_for(lock, std::chrono::seconds(a.timeout_s),
                [&] { return registered + failed == a.collectors; });
  }
  const auto t_registered = Clock::now();
  fmt::print("registered: {} of {} collectors over {} connections in {:.2f} s ({} failed)\n",
             registered, a.collectors, a.channels, Seconds(t_registered - t0), failed);
  if (registered == 0) return 1;

  streams[0]->Write(ControlTrigger{0, "manual", "server_load_bench"});
  const auto t_trigger = Clock::now();
  {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait_for(lock, std::chrono::seconds(a.timeout_s), [&] { return uploaded == registered; });
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
  fmt::print("uploaded: {} summaries ({:.1f} MB), the last {:.2f} s after the window's end\n",
             uploaded, static_cast<double>(total_bytes) / 1e6, Seconds(t_uploaded - t_window_end));

  std::string host = a.http.substr(0, a.http.rfind(':'));
  const int port = std::atoi(a.http.substr(a.http.rfind(':') + 1).c_str());
  httplib::Client http(host, port);
  http.set_read_timeout(60, 0);
  const httplib::Headers headers{{"Authorization", "Bearer " + token}};
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
  done = true;
  for (auto& s : streams) {
    if (s) s->Cancel();
  }
  for (auto& t : threads) t.join();
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
  fmt::print("diagnosed: {} workers, {} missing; top finding {}\n", workers, missing, top);
  fmt::print(
      "time to diagnosis: {:.2f} s after the window's end ({:.2f} s after the last upload; "
      "{:.2f} s after the trigger)\n",
      Seconds(t_diagnosed - t_window_end), Seconds(t_diagnosed - t_uploaded),
      Seconds(t_diagnosed - t_trigger));
  if (a.server_pid > 0) fmt::print("server peak RSS (VmHWM):{}\n", VmHwm(a.server_pid));
  const bool lossless =
      workers == registered && missing == 0 && uploaded == registered && registered == a.collectors;
  fmt::print("{}\n", lossless ? "no upload lost" : "UPLOADS LOST");
  return lossless ? 0 : 1;
}

}  // namespace
}  // namespace perftracker

int main(int argc, char** argv) { return perftracker::Main(argc, argv); }
