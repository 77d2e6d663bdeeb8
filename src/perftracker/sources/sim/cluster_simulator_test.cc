#include "perftracker/sources/sim/cluster_simulator.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "perftracker/summary/window_summarizer.h"

namespace perftracker {
namespace {

struct Capture : EventSink {
  std::vector<Event> events;
  std::vector<MetricSample> samples;
  void OnTrack(const TrackInfo&) override {}
  void OnEvent(const Event& e) override { events.push_back(e); }
  void OnMetric(const MetricSample& s) override { samples.push_back(s); }
  void OnProcessGroup(const ProcessGroupInfo& g) override { groups.push_back(g); }
  std::vector<ProcessGroupInfo> groups;
};

Scenario Make(const std::string& faults) {
  auto s = ParseScenario(
      R"({"name": "t", "job": {"ranks": 16, "tp": 2, "pp": 2, "gpus_per_host": 4,
      "iterations": 5, "seed": 9}, "faults": [)" +
          faults + R"(], "expect": {)" +
          (faults.empty() ? R"("healthy": true)" : R"("findings": [{"category": "compute"}])") +
          "}}",
      "t.json");
  EXPECT_TRUE(s.ok()) << s.status().message();
  return *s;
}

int64_t KernelNs(const ClusterSimulator& sim, int32_t rank) {
  Capture c;
  sim.Emit(rank, c);
  int64_t ns = 0;
  for (const Event& e : c.events) {
    if (e.kind == EventKind::kGpuKernel) ns += e.duration_ns();
  }
  return ns;
}

TEST(ClusterSimulatorTest, DeterministicForASeed) {
  Scenario s = Make("");
  ClusterSimulator a(s), b(s);
  a.Run();
  b.Run();
  Capture ca, cb;
  a.Emit(5, ca);
  b.Emit(5, cb);
  ASSERT_EQ(ca.events.size(), cb.events.size());
  for (size_t i = 0; i < ca.events.size(); ++i) {
    EXPECT_EQ(ca.events[i].start_ns, cb.events[i].start_ns);
    EXPECT_EQ(ca.events[i].end_ns, cb.events[i].end_ns);
  }
  EXPECT_EQ(ca.samples.size(), cb.samples.size());
  EXPECT_EQ(a.fault_onset_ns(), -1);
}

TEST(ClusterSimulatorTest, CollectivesEndWhenTheSlowestMemberArrives) {
  // Rank 3 (host 0) is throttled: its tensor-parallel partner (rank 2) waits in the
  // all-reduce, and every collective of one tp group ends at the same time.
  Scenario s = Make(R"({"kind": "gpu_throttle", "ranks": [3], "magnitude": 2})");
  ClusterSimulator sim(s);
  sim.Run();
  EXPECT_GT(KernelNs(sim, 3), 1.7 * static_cast<double>(KernelNs(sim, 2)));
  Capture c2, c3;
  sim.Emit(2, c2);
  sim.Emit(3, c3);
  std::vector<int64_t> ends2, ends3;
  int64_t wait2 = 0, wait3 = 0;
  for (const Event& e : c2.events) {
    if (e.kind == EventKind::kCollective &&
        sim.functions().Get(e.function_id).name.find("tp group") != std::string::npos) {
      ends2.push_back(e.end_ns);
      wait2 += e.duration_ns();
    }
  }
  for (const Event& e : c3.events) {
    if (e.kind == EventKind::kCollective &&
        sim.functions().Get(e.function_id).name.find("tp group") != std::string::npos) {
      ends3.push_back(e.end_ns);
      wait3 += e.duration_ns();
    }
  }
  ASSERT_FALSE(ends2.empty());
  EXPECT_EQ(ends2, ends3);
  EXPECT_GT(wait2, 3 * wait3) << "the partner waits for the throttled rank";
  // NVML-like evidence on the throttled GPU only.
  double clock3 = 0, reasons3 = 0, clock2 = 0;
  for (const auto& m : c3.samples) {
    if (m.metric == Metric::kGpuSmClockMhz) clock3 = m.value;
    if (m.metric == Metric::kGpuThrottleReasons) reasons3 = m.value;
  }
  for (const auto& m : c2.samples) {
    if (m.metric == Metric::kGpuSmClockMhz) clock2 = m.value;
  }
  EXPECT_LT(clock3, 1100);
  EXPECT_GT(clock2, 1900);
  EXPECT_EQ(reasons3, 0x20);
  EXPECT_GE(sim.fault_onset_ns(), 0);
}

TEST(ClusterSimulatorTest, FlappingNicShowsLinkDownSamplesOnItsHostOnly) {
  Scenario s = Make(R"({"kind": "nic_flapping", "hosts": [1], "magnitude": 3})");
  ClusterSimulator sim(s);
  sim.Run();
  auto down = [&](int32_t rank) {
    Capture c;
    sim.Emit(rank, c);
    int n = 0;
    for (const auto& m : c.samples) n += m.metric == Metric::kNicLinkUp && m.value == 0;
    return n;
  };
  EXPECT_GT(down(4), 0);
  EXPECT_EQ(down(0), 0);
}

TEST(ClusterSimulatorTest, StreamsSummarizeIntoIterations) {
  Scenario s = Make("");
  ClusterSimulator sim(s);
  sim.Run();
  WindowSummarizer summarizer(&sim.functions());
  sim.Emit(0, summarizer);
  WorkerSummary w = summarizer.Finish();
  EXPECT_TRUE(w.has_device);
  EXPECT_EQ(w.iterations.size(), 5u);
  EXPECT_EQ(w.stats.malformed_events, 0u);
  EXPECT_EQ(w.stats.out_of_order_events, 0u);
  bool nested = false;
  for (size_t i = 0; i < w.functions.size(); ++i) {
    nested |=
        w.KeyIs(i, "annotation:forward > annotation:layer0 > kernel:sm90_xmma_gemm_bf16_fprop");
  }
  EXPECT_TRUE(nested) << "kernels take the annotation of their launch";
}

TEST(ClusterSimulatorTest, UntracedPauseLeavesAGapNoEventCovers) {
  // Rank 1 stalls 5 ms per step between data loading and forward: its iterations are
  // longer, yet no host event of it is longer than its partner's, and its run-queue delay
  // stays at the healthy level.
  Scenario s = Make(R"({"kind": "untraced_pause", "ranks": [1], "magnitude": 5})");
  ClusterSimulator sim(s);
  sim.Run();
  auto gap_before_forward = [&](int32_t rank) {
    Capture c;
    sim.Emit(rank, c);
    int64_t data_end = -1, gap = 0;
    for (const Event& e : c.events) {
      if (e.kind == EventKind::kDataLoad) data_end = e.end_ns;
      if (e.kind == EventKind::kUserAnnotation && data_end >= 0 &&
          sim.functions().Get(e.function_id).name == "forward") {
        gap += e.start_ns - data_end;
        data_end = -1;
      }
    }
    double run_queue = 0;
    for (const auto& m : c.samples) {
      if (m.metric == Metric::kRunQueueDelayFraction) run_queue = std::max(run_queue, m.value);
    }
    EXPECT_LT(run_queue, 0.1);
    return gap;
  };
  EXPECT_GT(gap_before_forward(1), 5 * 4'000'000);  // 5 iterations, jitter included
  EXPECT_LT(gap_before_forward(0), 5 * 1'000'000);
}

TEST(ClusterSimulatorTest, DeviceOnlyTraceHasNoHostEventsAndStillIterations) {
  auto s = ParseScenario(
      R"({"name": "t", "job": {"ranks": 16, "tp": 2, "pp": 2, "gpus_per_host": 4,
      "iterations": 5, "seed": 9, "host_trace": false}, "expect": {"healthy": true}})",
      "t.json");
  ASSERT_TRUE(s.ok()) << s.status().message();
  ClusterSimulator sim(*s);
  sim.Run();
  Capture c;
  sim.Emit(3, c);
  for (const Event& e : c.events) {
    EXPECT_TRUE(e.flags & kEventFlagOnDevice) << sim.functions().Get(e.function_id).name;
  }
  WindowSummarizer summarizer(&sim.functions());
  sim.Emit(3, summarizer);
  EXPECT_EQ(summarizer.Finish().iterations.size(), 5u);
}

// With process_groups, each collective names its group as a torch 2.x trace does: rank 11 of
// 16 with tp 2 and pp 2 (8 ranks a stage) is in stage 1, replica 1, tp index 1.
TEST(ClusterSimulatorTest, ProcessGroupsAreTheRanksTensorDataAndPipelineGroups) {
  auto s = ParseScenario(
      R"({"name": "t", "job": {"ranks": 16, "tp": 2, "pp": 2, "gpus_per_host": 4,
      "iterations": 3, "seed": 9, "process_groups": true}, "expect": {"healthy": true}})",
      "t.json");
  ASSERT_TRUE(s.ok()) << s.status().message();
  ClusterSimulator sim(*s);
  sim.Run();
  Capture c;
  sim.Emit(11, c);
  ASSERT_EQ(c.groups.size(), 3u);
  std::map<std::string, std::vector<int32_t>> ranks;
  std::map<uint16_t, std::string> name_of;
  for (const ProcessGroupInfo& g : c.groups) {
    ranks[g.name] = g.ranks;
    name_of[g.id] = g.name;
    EXPECT_EQ(g.size, g.ranks.size());
  }
  EXPECT_EQ(ranks["tp"], (std::vector<int32_t>{10, 11}));
  EXPECT_EQ(ranks["dp"], (std::vector<int32_t>{9, 11, 13, 15}));
  EXPECT_EQ(ranks["pp"], (std::vector<int32_t>{3, 11}));
  std::set<std::string> seen;
  for (const Event& e : c.events) {
    if (e.kind != EventKind::kCollective) continue;
    ASSERT_TRUE(name_of.count(e.group)) << sim.functions().Get(e.function_id).name;
    const std::string name(sim.functions().Get(e.function_id).name);
    const std::string& group = name_of[e.group];
    seen.insert(group);
    EXPECT_NE(name.find("(" + group), std::string::npos) << name << " in group " << group;
  }
  EXPECT_EQ(seen, (std::set<std::string>{"tp", "dp", "pp"}));
  // Without the option, no groups: an older trace.
  s->job.process_groups = false;
  ClusterSimulator plain(*s);
  plain.Run();
  Capture p;
  plain.Emit(11, p);
  EXPECT_TRUE(p.groups.empty());
}

// Calls on one device stream run one after another, as CUDA runs them, so a consumer nests
// none in another. A pipeline's sends are asynchronous: on the collectives' stream a send
// still in flight overlapped the collective launched next (host 5's slow NVLink held its
// ranks' last backward send past the data-parallel all-reduce, which the summary then nested
// in the send, under `backward`: a function "only on some" of the stage).
TEST(ClusterSimulatorTest, CallsOnOneStreamDoNotOverlap) {
  auto s = ParseScenario(
      R"({"name": "t", "job": {"ranks": 64, "tp": 8, "pp": 2, "gpus_per_host": 8,
      "model_params_b": 13, "iterations": 4, "seed": 3},
      "faults": [{"kind": "nvlink_degraded", "hosts": [5], "magnitude": 8}],
      "expect": {"findings": [{"code": "PT-LINK-DEGRADED", "hosts": [5]}]}})",
      "t.json");
  ASSERT_TRUE(s.ok()) << s.status().message();
  ClusterSimulator sim(*s);
  sim.Run();
  for (int32_t rank = 0; rank < sim.num_ranks(); ++rank) {
    Capture c;
    sim.Emit(rank, c);
    std::map<uint32_t, const Event*> last;  // per device track, the call that ends last
    for (const Event& e : c.events) {
      if (!(e.flags & kEventFlagOnDevice) || e.kind == EventKind::kIteration) continue;
      const Event*& prev = last[e.track_id];
      if (prev != nullptr) {
        EXPECT_GE(e.start_ns, prev->end_ns)
            << "rank " << rank << ", track " << e.track_id << ": "
            << sim.functions().Get(e.function_id).name << " starts inside "
            << sim.functions().Get(prev->function_id).name;
        if (e.end_ns <= prev->end_ns) continue;
      }
      prev = &e;
    }
  }
}

}  // namespace
}  // namespace perftracker
