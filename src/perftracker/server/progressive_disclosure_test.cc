// Progressive disclosure through the real control plane: a ControlService behind a
// ControlServer (gRPC on loopback) and several GrpcCoordinatorLinks, each the collector of a
// block of ranks, whose workers' summaries come from the cluster simulator. Each simulated
// scenario runs twice, once with full summaries (--digest-min-workers 0) and once with
// digests first (the server asks for the suspects' and a sample of their peers' full
// summaries, or for all of them when the digests cannot decide); the material findings
// must be equal (code, culprit workers, function), and the report's note must say which
// path the window took.
// PERFTRACKER_PROGRESSIVE_MAX_RANKS (default 64) skips larger scenarios; the screen samples 16
// peers, so that 64-rank scenarios can take the digest path.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "perftracker/collector/grpc_coordinator_link.h"
#include "perftracker/core/realtime_clock.h"
#include "perftracker/server/control_service.h"
#include "perftracker/sources/sim/cluster_simulator.h"
#include "perftracker/sources/sim/scenario.h"
#include "perftracker/summary/window_summarizer.h"
#include "perftracker/wire/control_client.h"
#include "perftracker/wire/control_server.h"
#include "perftracker/wire/summary_codec.h"

namespace perftracker {
namespace {

namespace fs = std::filesystem;
constexpr int64_t kMs = 1'000'000;
constexpr int32_t kRanksPerCollector = 16;

// 13 scenarios of scenarios/sim; a sanitized build runs them in ~3 min (~1 min of CPU).
constexpr int32_t kDefaultMaxRanks = 64;

template <typename P>
bool Eventually(P p, int ms) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
  while (std::chrono::steady_clock::now() < end) {
    if (p()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return false;
}

// A node collector stand-in: when a window opens, it hands its ranks' summaries to the link
// once the window is over (from a thread of its own: the link's commands must not block).
class SimulatedNode : public CollectorControl {
 public:
  SimulatedNode(GrpcCoordinatorLink* link, std::vector<WorkerSummary> summaries)
      : link_(link), summaries_(std::move(summaries)) {}
  ~SimulatedNode() override { Join(); }
  void Join() {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& t : threads_) t.join();
    threads_.clear();
  }
  void StartWindow(const WindowSpec& window) override {
    std::lock_guard<std::mutex> lock(mu_);
    threads_.emplace_back([this, window] {
      const int64_t wait = window.end_ns() - RealtimeNs();
      if (wait > 0) std::this_thread::sleep_for(std::chrono::nanoseconds(wait));
      for (const WorkerSummary& s : summaries_) {
        WorkerSummary copy = s;
        copy.window_start_ns = window.start_ns;
        copy.window_end_ns = window.end_ns();
        link_->OnSummary(window.id, std::move(copy));
      }
    });
  }
  void DumpStacks(uint64_t) override {}
  void EndWindowNow(uint64_t) override {}

 private:
  GrpcCoordinatorLink* link_;
  std::vector<WorkerSummary> summaries_;
  std::mutex mu_;
  std::vector<std::thread> threads_;
};

using FindingId = std::tuple<std::string, std::vector<int32_t>, std::string>;

std::vector<FindingId> Material(const Diagnosis& d) {
  std::vector<FindingId> out;
  for (const Finding& f : d.findings) {
    if (!f.material) continue;
    std::vector<int32_t> w = f.workers;
    std::sort(w.begin(), w.end());
    out.emplace_back(f.code, w, f.function_key);
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::string Describe(const std::vector<FindingId>& ids) {
  std::string out;
  for (const auto& [code, workers, key] : ids) {
    out += fmt::format("  {} ranks [{}] {}\n", code, fmt::join(workers, ","), key.substr(0, 100));
  }
  return out;
}

std::string PathNote(const Diagnosis& d) {
  for (const std::string& n : d.notes) {
    if (n.starts_with("progressive disclosure:")) return n;
  }
  return "";
}

struct Outcome {
  Diagnosis diagnosis;
  std::vector<int32_t> missing;
  GrpcLinkStats links;  // summed over the collectors
  double seconds = 0;   // from the trigger to the report
};

// An older collector: it knows nothing of digests and sends every rank's full summary at
// the window's end (as collectors did before progressive disclosure), over its own stream.
class OldCollector {
 public:
  OldCollector(int port, std::vector<WorkerSummary> summaries, int32_t world)
      : summaries_(std::move(summaries)) {
    ControlClientOptions o;
    o.address = "127.0.0.1:" + std::to_string(port);
    client_ = std::move(ControlClient::Create(o)).value();
    ControlRegistration reg;
    reg.job_id = "sim";
    reg.host = "old-node";
    for (const WorkerSummary& s : summaries_) {
      reg.ranks.push_back(
          {s.rank, world, static_cast<int32_t>(reg.ranks.size()), 1000 + s.rank, reg.host});
    }
    auto stream = client_->Connect(reg, 10000);
    EXPECT_TRUE(stream.ok()) << stream.status().message();
    if (!stream.ok()) return;
    stream_ = std::move(stream).value();
    reader_ = std::thread([this] {
      ServerMessage m;
      while (stream_->Read(&m)) {
        const auto* w = std::get_if<WindowSpec>(&m);
        if (w == nullptr) continue;  // requests for summaries: it keeps none
        const int64_t wait = w->start_ns + w->duration_ns - RealtimeNs();
        if (wait > 0) std::this_thread::sleep_for(std::chrono::nanoseconds(wait));
        for (const WorkerSummary& s : summaries_) {
          WorkerSummary copy = s;
          copy.window_start_ns = w->start_ns;
          copy.window_end_ns = w->start_ns + w->duration_ns;
          stream_->Write(ControlSummary{w->id, s.rank, EncodeWorkerSummary(copy)});
        }
      }
    });
  }
  ~OldCollector() {
    if (stream_) stream_->Cancel();
    if (reader_.joinable()) reader_.join();
  }

 private:
  std::vector<WorkerSummary> summaries_;
  std::unique_ptr<ControlClient> client_;
  std::unique_ptr<ControlStream> stream_;
  std::thread reader_;
};

struct RunOptions {
  size_t digest_min_workers = 0;       // as ControlServiceOptions
  int32_t old_collector_ranks = 0;     // the first ranks are served by an OldCollector
  size_t max_kept_bytes = 512u << 20;  // the links' --keep-summaries-mb
  int64_t wait_summaries_ns = 60'000 * kMs;
};

// One window of `summaries` through a server and its collectors.
Outcome RunWindow(const std::vector<WorkerSummary>& summaries, int32_t world,
                  size_t digest_min_workers, const fs::path& dir, RunOptions ro = {}) {
  ro.digest_min_workers = digest_min_workers;
  Outcome out;
  fs::remove_all(dir);
  fs::create_directories(dir);
  ControlServiceOptions o;
  o.coordinator.report_dir = (dir / "reports").string();
  o.coordinator.window_ns = 200 * kMs;
  o.coordinator.delay_ns = 50 * kMs;
  o.coordinator.wait_summaries_ns = ro.wait_summaries_ns;
  o.coordinator.cooldown_ns = 0;
  o.coordinator.screen.sample_workers = 16;
  o.coordinator.log = [](std::string_view) {};
  o.report_poll_ms = 20;
  o.digest_min_workers = ro.digest_min_workers;
  o.log = [](std::string_view) {};
  ControlService service(o);
  EXPECT_TRUE(service.Start().ok());
  ControlServerOptions so;
  so.log = [](std::string_view) {};
  auto server = ControlServer::Start(so, &service);
  EXPECT_TRUE(server.ok()) << server.status().message();
  if (!server.ok()) return out;

  std::vector<std::unique_ptr<GrpcCoordinatorLink>> links;
  std::vector<std::unique_ptr<SimulatedNode>> nodes;
  std::unique_ptr<OldCollector> old;
  if (ro.old_collector_ranks > 0) {
    old = std::make_unique<OldCollector>(
        (*server)->port(),
        std::vector<WorkerSummary>(summaries.begin(), summaries.begin() + ro.old_collector_ranks),
        world);
  }
  for (int32_t first = ro.old_collector_ranks; first < world; first += kRanksPerCollector) {
    GrpcLinkOptions lo;
    lo.max_kept_bytes = ro.max_kept_bytes;
    lo.client.address = "127.0.0.1:" + std::to_string((*server)->port());
    lo.job_id = "sim";
    lo.host = fmt::format("node-{}", first / kRanksPerCollector);
    lo.log = [](std::string_view) {};
    auto link = std::make_unique<GrpcCoordinatorLink>(lo);
    std::vector<WorkerSummary> mine;
    for (int32_t r = first; r < std::min(world, first + kRanksPerCollector); ++r) {
      mine.push_back(summaries[static_cast<size_t>(r)]);
    }
    auto node = std::make_unique<SimulatedNode>(link.get(), std::move(mine));
    link->SetControl(node.get());
    for (int32_t r = first; r < std::min(world, first + kRanksPerCollector); ++r) {
      link->OnWorkerJoined({r, world, r - first, 1000 + r, lo.host});
    }
    EXPECT_TRUE(link->Start().ok());
    EXPECT_TRUE(link->WaitFirstAttempt(10000).ok());
    links.push_back(std::move(link));
    nodes.push_back(std::move(node));
  }
  EXPECT_TRUE(Eventually(
      [&] {
        const auto jobs = service.Jobs();
        return !jobs.empty() && jobs[0].ranks == static_cast<size_t>(world);
      },
      30000));
  const auto triggered = std::chrono::steady_clock::now();
  EXPECT_TRUE(service.TriggerWindow("sim").ok());
  EXPECT_TRUE(Eventually([&] { return !service.Reports("sim").empty(); }, 120000))
      << "no report within 120 s";
  out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - triggered).count();
  const std::vector<WindowReport> reports = service.Reports("sim");
  if (!reports.empty()) {
    out.diagnosis = reports[0].diagnosis;
    out.missing = reports[0].missing_ranks;
  }
  for (auto& n : nodes) n->Join();
  for (auto& l : links) {
    const GrpcLinkStats s = l->stats();
    out.links.digests_sent += s.digests_sent;
    out.links.summaries_asked += s.summaries_asked;
    out.links.summaries_unkept += s.summaries_unkept;
    l->Stop(1000);
  }
  old.reset();
  (*server)->Shutdown();
  service.Stop();
  fs::remove_all(dir);
  return out;
}

std::vector<WorkerSummary> Simulate(const Scenario& scenario) {
  ClusterSimulator sim(scenario);
  sim.Run();
  std::vector<WorkerSummary> out;
  for (int32_t r = 0; r < sim.num_ranks(); ++r) {
    WindowSummarizer summarizer(&sim.functions());
    sim.Emit(r, summarizer);
    WorkerSummary w = summarizer.Finish();
    w.rank = r;
    w.host = sim.HostName(r);
    w.source = "sim";
    out.push_back(std::move(w));
  }
  return out;
}

// A temporary directory of this test process for one test's server.
fs::path TestDir(const std::string& name) {
  return fs::temp_directory_path() /
         ("perftracker-progressive-" + name + "-" + std::to_string(getpid()));
}

// The workers' summaries of scenarios/sim/sim-nvlink-degraded-64.json (64 ranks, one slow
// NVLink): the job of the tests that change one thing of the collectors.
void SimulateNvlinkDegraded64(std::vector<WorkerSummary>* out) {
  const char* src = std::getenv("PERFTRACKER_SOURCE_DIR");
  StatusOr<Scenario> s = LoadScenario(
      (fs::path(src ? src : ".") / "scenarios/sim/sim-nvlink-degraded-64.json").string());
  ASSERT_TRUE(s.ok()) << s.status().message();
  *out = Simulate(*s);
}

TEST(ProgressiveDisclosure, FindingsThroughTheServerEqualTheFullPathOnSimulatedScenarios) {
  const char* src = std::getenv("PERFTRACKER_SOURCE_DIR");
  const fs::path root = src ? src : ".";
  const char* max_env = std::getenv("PERFTRACKER_PROGRESSIVE_MAX_RANKS");
  const int32_t max_ranks = max_env ? std::atoi(max_env) : kDefaultMaxRanks;
  std::vector<std::string> files;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(root / "scenarios/sim", ec)) {
    if (e.path().extension() == ".json") files.push_back(e.path().string());
  }
  std::sort(files.begin(), files.end());
  ASSERT_FALSE(files.empty()) << "no scenarios: set PERFTRACKER_SOURCE_DIR";
  const fs::path dir = TestDir("scenarios");
  int digest_path = 0, full_path = 0, fallback = 0, run = 0;
  for (const std::string& path : files) {
    StatusOr<Scenario> s = LoadScenario(path);
    ASSERT_TRUE(s.ok()) << s.status().message();
    if (s->executor != ScenarioExecutor::kSim || s->job.ranks > max_ranks) continue;
    SCOPED_TRACE(path);
    ++run;
    const std::vector<WorkerSummary> summaries = Simulate(*s);
    const int32_t world = static_cast<int32_t>(summaries.size());
    const Outcome full = RunWindow(summaries, world, /*digest_min_workers=*/0, dir);
    const Outcome progressive = RunWindow(summaries, world, /*digest_min_workers=*/1, dir);
    EXPECT_TRUE(full.missing.empty());
    EXPECT_TRUE(progressive.missing.empty());
    EXPECT_EQ(full.links.digests_sent, 0u);
    EXPECT_EQ(progressive.links.digests_sent, static_cast<uint64_t>(world));
    EXPECT_EQ(progressive.links.summaries_unkept, 0u);
    EXPECT_EQ(progressive.diagnosis.num_workers, world);
    EXPECT_EQ(PathNote(full.diagnosis), "");
    const std::string note = PathNote(progressive.diagnosis);
    EXPECT_FALSE(note.empty()) << "the report does not say which path it took";
    if (note.starts_with("progressive disclosure: digest path")) {
      ++digest_path;
      EXPECT_LT(progressive.links.summaries_asked, static_cast<uint64_t>(world));
    } else if (note.starts_with("progressive disclosure: full path after")) {
      ++fallback;
    } else {
      ++full_path;
      EXPECT_EQ(progressive.links.summaries_asked, static_cast<uint64_t>(world));
    }
    const std::vector<FindingId> want = Material(full.diagnosis);
    const std::vector<FindingId> got = Material(progressive.diagnosis);
    EXPECT_EQ(got, want) << "full path:\n"
                         << Describe(want) << "progressive (" << note << ", "
                         << progressive.links.summaries_asked << " of " << world
                         << " full summaries):\n"
                         << Describe(got);
    fmt::print("{}: {} ({} of {} full summaries)\n", fs::path(path).filename().string(), note,
               progressive.links.summaries_asked, world);
  }
  fmt::print("{} scenarios: {} digest path, {} full path, {} fell back to the full path\n", run,
             digest_path, full_path, fallback);
  EXPECT_GT(run, 0);
  EXPECT_GT(digest_path, 0) << "no scenario took the digest path";
}

// A job whose first collector is older (full summaries, no digests) beside newer ones
// (digests first): the server screens the older one's summaries by their digests, and the
// window has every rank and the full path's material findings.
TEST(ProgressiveDisclosure, OldAndNewCollectorsInOneJob) {
  std::vector<WorkerSummary> summaries;
  ASSERT_NO_FATAL_FAILURE(SimulateNvlinkDegraded64(&summaries));
  const int32_t world = static_cast<int32_t>(summaries.size());
  const fs::path dir = TestDir("mixed");
  const Outcome full = RunWindow(summaries, world, /*digest_min_workers=*/0, dir);
  RunOptions ro;
  ro.old_collector_ranks = kRanksPerCollector;
  const Outcome mixed = RunWindow(summaries, world, /*digest_min_workers=*/1, dir, ro);
  EXPECT_TRUE(mixed.missing.empty());
  EXPECT_EQ(mixed.diagnosis.num_workers, world);
  EXPECT_EQ(mixed.links.digests_sent, static_cast<uint64_t>(world - kRanksPerCollector));
  const std::string note = PathNote(mixed.diagnosis);
  EXPECT_TRUE(note.starts_with("progressive disclosure:")) << note;
  EXPECT_EQ(Material(mixed.diagnosis), Material(full.diagnosis))
      << "full path:\n"
      << Describe(Material(full.diagnosis)) << "mixed (" << note << "):\n"
      << Describe(Material(mixed.diagnosis));
}

// Collectors that kept no full summary (--keep-summaries-mb too small for one): the server
// asks, each collector answers that it no longer keeps them, and the window is diagnosed at
// once (not after --wait-summaries-seconds), naming the ranks it asked for and why.
TEST(ProgressiveDisclosure, SummariesTheCollectorsDidNotKeepAreNamedMissingAtOnce) {
  std::vector<WorkerSummary> summaries;
  ASSERT_NO_FATAL_FAILURE(SimulateNvlinkDegraded64(&summaries));
  const int32_t world = static_cast<int32_t>(summaries.size());
  const fs::path dir = TestDir("unkept");
  RunOptions ro;
  ro.max_kept_bytes = 1;
  ro.wait_summaries_ns = 60'000 * kMs;
  const Outcome o = RunWindow(summaries, world, /*digest_min_workers=*/1, dir, ro);
  EXPECT_EQ(o.links.digests_sent, static_cast<uint64_t>(world));
  EXPECT_EQ(o.links.summaries_asked, 0u);
  ASSERT_GT(o.links.summaries_unkept, 0u);
  EXPECT_EQ(o.missing.size(), o.links.summaries_unkept - static_cast<uint64_t>(world))
      << "every rank's summary went unkept at the window's end, then each one asked for";
  // Well under the 60 s the server would wait for summaries that never come (a window takes
  // a few seconds here, under sanitizers at load 40).
  fmt::print("trigger -> report: {:.1f} s ({} ranks named missing)\n", o.seconds, o.missing.size());
  EXPECT_LT(o.seconds, 30.0) << "the server waited for summaries its collectors said were gone";
  size_t named = 0;
  for (const std::string& n : o.diagnosis.notes) {
    if (n.find("sent no summary (its collector no longer keeps it:") != std::string::npos &&
        n.find("--keep-summaries-mb") != std::string::npos) {
      ++named;
    }
  }
  EXPECT_EQ(named, o.missing.size()) << "the report names each rank without a summary, and why";
}

}  // namespace
}  // namespace perftracker
