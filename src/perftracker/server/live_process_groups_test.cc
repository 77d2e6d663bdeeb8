// Process groups in live mode (issue 11): the same job's collectives, summarized once from the
// agent's rings and `process_group` messages (the collector's path) and once offline (the
// Kineto importer's path: the summarizer told the groups directly), give the localizer the
// same inter-node NIC estimate. Before the agent reported groups, the live summaries named
// none and a degraded NIC behind tensor-parallel traffic went unseen.
#include <unistd.h>

#include <cstdint>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include <fmt/core.h>
#include <fmt/format.h>
#include <gtest/gtest.h>

#include "perftracker/collector/agent_message.h"
#include "perftracker/collector/agent_rings.h"
#include "perftracker/core/agent_shm.h"
#include "perftracker/core/function_table.h"
#include "perftracker/localize/finding_catalogue.h"
#include "perftracker/localize/localizer.h"
#include "perftracker/summary/window_summarizer.h"

namespace perftracker {
namespace {

constexpr int64_t kMs = 1'000'000;
constexpr int64_t kT0 = 1'700'000'000'000'000'000;
constexpr int kHosts = 4;
constexpr int kRanksPerHost = 4;
constexpr int kIterations = 10;
constexpr int64_t kIterationMs = 100;
constexpr uint16_t kTensorParallel = 1;
constexpr uint16_t kDataParallel = 2;

// The functions of every rank, in id order (the agent's table and the offline one alike).
struct FunctionDef {
  EventKind kind;
  const char* name;
};
constexpr FunctionDef kFunctions[] = {
    {EventKind::kIteration, "iteration"},
    {EventKind::kPythonCall, "forward (model.py:10)"},
    {EventKind::kCollective, "torch.distributed.all_reduce (group of 4)"},
};

std::string Host(int rank) { return fmt::format("node{}", rank / kRanksPerHost); }

// One rank of a 4 hosts x 4 ranks job, tensor parallel inside each host and data parallel
// across hosts, one all-reduce function for both: per 100 ms iteration 60 ms of forward, a
// TP all-reduce of 300 MB (15 ms, over NVLink: the NIC sends nothing) and a DP all-reduce of
// 60 MB (10 ms; 120 MB on the wire). The NIC's transmit rate is sampled every ms: healthy NICs
// send the DP bytes in 3 ms at 40 GB/s, host node2's in 9 ms at 13.3 GB/s.
struct RankRun {
  std::vector<Event> events;
  std::vector<MetricSample> samples;
  std::vector<std::string> group_messages;  // what the agent says of its groups
};

RankRun RunRank(int rank) {
  RankRun run;
  const int host = rank / kRanksPerHost, place = rank % kRanksPerHost;
  std::vector<int> tp, dp;
  for (int i = 0; i < kRanksPerHost; ++i) tp.push_back(host * kRanksPerHost + i);
  for (int h = 0; h < kHosts; ++h) dp.push_back(h * kRanksPerHost + place);
  run.group_messages = {
      fmt::format(R"({{"type":"process_group","rank":{},"group":{},"name":"{}","backend":)"
                  R"("nccl","ranks":[{}],"size":4}})",
                  rank, kTensorParallel, 1 + host, fmt::join(tp, ",")),
      fmt::format(R"({{"type":"process_group","rank":{},"group":{},"name":"{}","backend":)"
                  R"("nccl","ranks":[{}],"size":4}})",
                  rank, kDataParallel, 1 + kHosts + place, fmt::join(dp, ","))};
  auto event = [&](uint32_t fn, int64_t start_ms, int64_t end_ms, uint64_t bytes, uint16_t group) {
    Event e;
    e.start_ns = kT0 + start_ms * kMs;
    e.end_ns = kT0 + end_ms * kMs;
    e.function_id = fn;
    e.kind = kFunctions[fn].kind;
    e.payload = bytes;
    e.group = group;
    run.events.push_back(e);
  };
  const bool degraded = host == 2;
  for (int i = 0; i < kIterations; ++i) {
    const int64_t t = i * kIterationMs;
    event(1, t, t + 60, 0, 0);
    event(2, t + 60, t + 75, 300'000'000, kTensorParallel);
    event(2, t + 75, t + 85, 60'000'000, kDataParallel);
    event(0, t, t + kIterationMs, 0, 0);  // written when it ends, as the agent does
    for (int64_t ms = 0; ms < kIterationMs; ++ms) {
      const int64_t into_dp = ms - 75;
      double rate = 0;
      if (degraded && into_dp >= 0 && into_dp < 9) rate = 40e9 / 3;
      if (!degraded && into_dp >= 0 && into_dp < 3) rate = 40e9;
      MetricSample s;
      s.time_ns = kT0 + (t + ms) * kMs + kMs / 2;
      s.metric = Metric::kIbTxBytesPerSec;
      s.value = rate;
      run.samples.push_back(s);
    }
  }
  return run;
}

// The collector's path: the agent's file, its `process_group` lines (none from an agent that
// does not report groups: its events carry no group either), AgentRings.
WorkerSummary Live(int rank, const RankRun& run, bool agent_reports_groups) {
  const std::string path = fmt::format("/dev/shm/perftracker-pg-test-{}-{}", getpid(), rank);
  AgentShmOptions o;
  o.num_rings = 1;
  o.ring_capacity = 256;
  o.function_capacity = 16;
  auto agent = AgentShm::Create(path, rank, o);
  EXPECT_TRUE(agent.ok()) << agent.status().message();
  auto mine = AgentShm::Open(path);
  unlink(path.c_str());
  EXPECT_TRUE(mine.ok()) << mine.status().message();
  if (!agent.ok() || !mine.ok()) return {};
  for (uint32_t id = 0; id < std::size(kFunctions); ++id) {
    EXPECT_TRUE(
        (*agent)->PublishFunction(id, kFunctions[id].kind, kFunctions[id].name, UINT32_MAX));
  }
  WorkerInfo worker;
  worker.rank = rank;
  worker.pid = 1000 + rank;
  worker.host = Host(rank);
  AgentRings rings(std::move(mine.value()), worker);
  if (agent_reports_groups) {
    for (const std::string& line : run.group_messages) {
      AgentMessage m;
      std::string error;
      EXPECT_EQ(ParseAgentMessage(line, &m, &error), ParseOutcome::kOk) << error;
      rings.DeclareProcessGroup(m.group);
    }
  }
  rings.BeginWindow({.id = 1,
                     .start_ns = kT0,
                     .duration_ns = kIterations * kIterationMs * kMs,
                     .reason = WindowReason::kManual});
  const int ring = (*agent)->ClaimRing(static_cast<uint64_t>(worker.pid));
  for (Event e : run.events) {
    if (!agent_reports_groups) e.group = 0;
    EXPECT_TRUE((*agent)->Push(ring, e));
  }
  rings.Drain(1u << 16);
  for (const MetricSample& s : run.samples) rings.AddMetric(s);
  return rings.FinishWindow();
}

// The offline path: the summarizer of a trace file, told the groups as the Kineto importer
// tells it (EventSink::OnProcessGroup).
WorkerSummary Offline(int rank, const RankRun& run) {
  FunctionTable functions;
  for (const FunctionDef& f : kFunctions) functions.Intern(f.kind, f.name);
  SummarizerOptions options;
  options.offline = true;
  WindowSummarizer summarizer(&functions, options);
  summarizer.OnTrack({0, TrackKind::kHostThread, -1, "thread 1"});
  for (const std::string& line : run.group_messages) {
    AgentMessage m;
    EXPECT_EQ(ParseAgentMessage(line, &m), ParseOutcome::kOk);
    summarizer.OnProcessGroup(m.group);
  }
  for (const Event& e : run.events) summarizer.OnEvent(e);
  for (const MetricSample& s : run.samples) summarizer.OnMetric(s);
  WorkerSummary w = summarizer.Finish();
  w.rank = rank;
  w.host = Host(rank);
  return w;
}

const Finding* NicDegraded(const Diagnosis& d) {
  for (const Finding& f : d.findings) {
    if (f.code == finding_codes::kNicDegraded) return &f;
  }
  return nullptr;
}

TEST(LiveProcessGroupsTest, ALiveJobsNicEstimateMatchesTheOfflineOne) {
  Localizer live, offline, live_without_groups;
  for (int rank = 0; rank < kHosts * kRanksPerHost; ++rank) {
    SCOPED_TRACE(rank);
    const RankRun run = RunRank(rank);
    const WorkerSummary l = Live(rank, run, true);
    ASSERT_EQ(l.collective_groups.groups.size(), 2u);
    live.Add(l);
    offline.Add(Offline(rank, run));
    live_without_groups.Add(Live(rank, run, false));
  }
  const Diagnosis from_live = live.Finish();
  const Diagnosis from_traces = offline.Finish();
  const Finding* l = NicDegraded(from_live);
  const Finding* o = NicDegraded(from_traces);
  ASSERT_NE(o, nullptr) << "offline: no PT-NIC-DEGRADED";
  ASSERT_NE(l, nullptr) << "live: no PT-NIC-DEGRADED";
  EXPECT_EQ(l->workers, (std::vector<int32_t>{8, 9, 10, 11}));
  EXPECT_EQ(l->workers, o->workers);
  // The DP transfers' 120 MB at 13.3 GB/s instead of 40: 6 ms longer per iteration.
  EXPECT_NEAR(l->lost_ns_per_iteration, 6e6, 0.3e6);
  EXPECT_DOUBLE_EQ(l->lost_ns_per_iteration, o->lost_ns_per_iteration);
  EXPECT_EQ(l->title, o->title);
  // An agent that reports no groups: the TP all-reduces count on the NIC (720 MB in 25 ms,
  // more than a 13.3 GB/s NIC moves), and the degraded NIC goes unseen, as before.
  EXPECT_EQ(NicDegraded(live_without_groups.Finish()), nullptr);
}

}  // namespace
}  // namespace perftracker
