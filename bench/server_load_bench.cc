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
// keeps them).
#include <unistd.h>

#include <algorithm>
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

#include "perftracker/summary/worker_digest.h"
#include "perftracker/wire/control_client.h"
#include "perftracker/wire/digest_codec.h"
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
  int uploaded = 0;  // ranks whose digest or summary went out at the window's end
  int asked = 0;     // full summaries the server asked for after the digests
  bool digest_mode = false;
  Clock::time_point last_upload;
  int64_t window_end_ns = 0;
  std::vector<std::unique_ptr<ControlStream>> streams(static_cast<size_t>(a.collectors));
  std::atomic<bool> done{false};

  const auto t0 = Clock::now();
  std::vector<std::thread> threads;
  threads.reserve(static_cast<size_t>(a.collectors));
  for (int c = 0; c < a.collectors; ++c) {
    threads.emplace_back([&, c] {
      const int first = c * a.ranks_per_collector;
      ControlRegistration reg;
      reg.job_id = a.job;
      reg.host = fmt::format("sim-node-{}", c);
      reg.title = "server_load_bench";
      for (int i = 0; i < a.ranks_per_collector; ++i) {
        reg.ranks.push_back({first + i, ranks, i, 100000 + first + i, reg.host});
      }
      auto stream = clients[static_cast<size_t>(c % a.channels)]->Connect(reg, 60000);
      {
        std::lock_guard<std::mutex> lock(mu);
        if (!stream.ok()) {
          if (failed++ < 5) fmt::print(stderr, "collector {}: {}\n", c, stream.status().message());
          cv.notify_all();
          return;
        }
        if ((*stream)->registered().send_digests) digest_mode = true;
        // Stored before it counts: the main thread writes the trigger on streams[0].
        streams[static_cast<size_t>(c)] = std::move(stream).value();
        ++registered;
        cv.notify_all();
      }
      ControlStream* s = streams[static_cast<size_t>(c)].get();
      const bool send_digests = s->registered().send_digests;
      ServerMessage m;
      while (s->Read(&m)) {
        if (const auto* w = std::get_if<WindowSpec>(&m)) {
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
          int sent = 0;
          for (int r = first; r < first + a.ranks_per_collector; ++r) {
            const bool ok = send_digests
                                ? s->Write(ControlDigest{w->id, r, digests[static_cast<size_t>(r)]})
                                : s->Write(ControlSummary{w->id, r, encoded_summary(r)});
            if (ok) ++sent;
          }
          std::lock_guard<std::mutex> lock(mu);
          uploaded += sent;
          last_upload = Clock::now();
          cv.notify_all();
        } else if (const auto* q = std::get_if<ControlRequestSummaries>(&m)) {
          int sent = 0;
          for (int32_t r : q->ranks) {
            if (r >= first && r < first + a.ranks_per_collector &&
                s->Write(ControlSummary{q->window, r, encoded_summary(r)})) {
              ++sent;
            }
          }
          std::lock_guard<std::mutex> lock(mu);
          asked += sent;
        } else if (const auto* rej = std::get_if<ControlRejected>(&m)) {
          fmt::print(stderr, "collector {}: rejected: {}\n", c, rej->error);
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
  fmt::print(
      "registered: {} of {} collectors ({} ranks) over {} connections in {:.2f} s ({} failed); "
      "the server asks for {}\n",
      registered, a.collectors, ranks, a.channels, Seconds(t_registered - t0), failed,
      digest_mode ? "digests first" : "full summaries");
  if (registered == 0) return 1;

  streams[0]->Write(ControlTrigger{0, WindowReason::kManual, "server_load_bench"});
  const auto t_trigger = Clock::now();
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
  if (a.server_pid > 0) fmt::print("server peak RSS (VmHWM):{}\n", VmHwm(a.server_pid));
  const bool lossless = workers == ranks && missing == 0 &&
                        uploaded == registered * a.ranks_per_collector &&
                        registered == a.collectors;
  fmt::print("{}\n", lossless ? "no upload lost" : "UPLOADS LOST");
  return lossless ? 0 : 1;
}

}  // namespace
}  // namespace perftracker

int main(int argc, char** argv) { return perftracker::Main(argc, argv); }
