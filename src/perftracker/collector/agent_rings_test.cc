#include "perftracker/collector/agent_rings.h"

#include <unistd.h>

#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "perftracker/collector/agent_message.h"
#include "perftracker/summary/data_quality_counters.h"

namespace perftracker {
namespace {

constexpr int64_t kMs = 1'000'000;
constexpr int64_t kT0 = 1'700'000'000'000'000'000;

class AgentRingsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = "/dev/shm/perftracker-rings-test-" + std::to_string(getpid());
    AgentShmOptions o;
    o.num_rings = 2;
    o.ring_capacity = 64;
    o.function_capacity = 16;
    auto agent = AgentShm::Create(path_, 1, o);
    ASSERT_TRUE(agent.ok()) << agent.status().message();
    agent_ = std::move(agent.value());
    auto mine = AgentShm::Open(path_);
    ASSERT_TRUE(mine.ok()) << mine.status().message();
    unlink(path_.c_str());  // both mappings stay valid; nothing leaks if a test aborts
    WorkerInfo w;
    w.rank = 1;
    w.pid = 77;
    w.host = "node1";
    rings_ = std::make_unique<AgentRings>(std::move(mine.value()), w);
    ring_ = agent_->ClaimRing(4242);
  }

  void Push(uint32_t fn, int64_t start_ms, int64_t end_ms,
            EventKind kind = EventKind::kPythonCall) {
    Event e;
    e.start_ns = kT0 + start_ms * kMs;
    e.end_ns = kT0 + end_ms * kMs;
    e.function_id = fn;
    e.kind = kind;
    e.track_id = 4242;
    ASSERT_TRUE(agent_->Push(ring_, e));
  }

  static const FunctionSummary* Find(const WorkerSummary& s, const std::string& key) {
    for (size_t i = 0; i < s.functions.size(); ++i) {
      if (s.KeyIs(i, key)) return &s.functions[i];
    }
    return nullptr;
  }

  std::string path_;
  std::unique_ptr<AgentShm> agent_;
  std::unique_ptr<AgentRings> rings_;
  int ring_ = -1;
};

TEST_F(AgentRingsTest, SummarizesWindowEventsUnderTheirPublishedCallPaths) {
  // train() > step() > forward(): ids 0, 1, 2 with the parent chain of the agent's table.
  ASSERT_TRUE(agent_->PublishFunction(0, EventKind::kPythonCall, "train.py:10 train", UINT32_MAX));
  ASSERT_TRUE(agent_->PublishFunction(1, EventKind::kPythonCall, "train.py:20 step", 0));
  ASSERT_TRUE(agent_->PublishFunction(2, EventKind::kPythonCall, "model.py:5 forward", 1));
  WindowSpec w{
      .id = 1, .start_ns = kT0, .duration_ns = 1000 * kMs, .reason = WindowReason::kManual};
  rings_->BeginWindow(w);
  for (int i = 0; i < 4; ++i) {
    const int64_t base = 100 + i * 100;
    Push(2, base + 10, base + 40);
    Push(1, base, base + 90);
  }
  Push(0, 0, 900);
  Push(2, 1500, 1510);  // after the window: drained, not summarized
  EXPECT_EQ(rings_->Drain(1000), 10u);
  const WorkerSummary s = rings_->FinishWindow();
  EXPECT_FALSE(rings_->in_window());
  EXPECT_EQ(s.rank, 1);
  EXPECT_EQ(s.host, "node1");
  EXPECT_EQ(s.source, "pid 77");
  const FunctionSummary* fwd =
      Find(s, "python:train.py:10 train > python:train.py:20 step > python:model.py:5 forward");
  ASSERT_NE(fwd, nullptr);
  EXPECT_EQ(fwd->count, 4u);
  EXPECT_EQ(fwd->total_ns, 4 * 30 * kMs);
  const FunctionSummary* step = Find(s, "python:train.py:10 train > python:train.py:20 step");
  ASSERT_NE(step, nullptr);
  EXPECT_EQ(step->self_ns, 4 * 60 * kMs);
  EXPECT_EQ(rings_->stats().events_in_window, 9u);
  EXPECT_EQ(rings_->stats().events_outside, 1u);
  EXPECT_EQ(s.stats.dropped_events, 0u);
}

TEST_F(AgentRingsTest, FunctionsPublishedAfterAPopAreResolvedOnTheNextOne) {
  WindowSpec w{
      .id = 1, .start_ns = kT0, .duration_ns = 1000 * kMs, .reason = WindowReason::kManual};
  rings_->BeginWindow(w);
  ASSERT_TRUE(agent_->PublishFunction(0, EventKind::kPythonCall, "a", UINT32_MAX));
  Push(0, 1, 2);
  rings_->Drain(100);
  ASSERT_TRUE(agent_->PublishFunction(1, EventKind::kGc, "gc", UINT32_MAX));
  Push(1, 3, 4, EventKind::kGc);
  const WorkerSummary s = rings_->FinishWindow();
  EXPECT_NE(Find(s, "python:a"), nullptr);
  EXPECT_NE(Find(s, "gc:gc"), nullptr);
  EXPECT_EQ(s.stats.malformed_events, 0u);
}

TEST_F(AgentRingsTest, CountsDropsOfFullRingsDuringTheWindow) {
  ASSERT_TRUE(agent_->PublishFunction(0, EventKind::kPythonCall, "f", UINT32_MAX));
  WindowSpec w{
      .id = 2, .start_ns = kT0, .duration_ns = 1000 * kMs, .reason = WindowReason::kSlowdown};
  rings_->BeginWindow(w);
  int pushed = 0;
  for (int i = 0; i < 100; ++i) {
    Event e;
    e.start_ns = kT0 + i * kMs;
    e.end_ns = e.start_ns + 1000;
    e.function_id = 0;
    e.kind = EventKind::kPythonCall;
    e.track_id = 4242;
    if (agent_->Push(ring_, e)) ++pushed;
  }
  EXPECT_EQ(pushed, 64);  // ring capacity
  const WorkerSummary s = rings_->FinishWindow();
  EXPECT_EQ(s.stats.dropped_events, 36u);
  EXPECT_NE(s.stats.first_problem.find("--ring-events"), std::string::npos);
  const FunctionSummary* f = Find(s, "python:f");
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->count, 64u);
}

TEST_F(AgentRingsTest, InvalidSlotsAndUnknownIdsAreCountedNotTrusted) {
  ASSERT_TRUE(agent_->PublishFunction(0, EventKind::kPythonCall, "ok", UINT32_MAX));
  // A slot whose parent points forward (corrupt table): becomes a counted invalid root.
  ASSERT_TRUE(agent_->PublishFunction(1, EventKind::kPythonCall, "bad", 5));
  WindowSpec w{
      .id = 1, .start_ns = kT0, .duration_ns = 1000 * kMs, .reason = WindowReason::kManual};
  rings_->BeginWindow(w);
  Push(1, 1, 2);
  Push(9, 3, 4);  // never published
  const WorkerSummary s = rings_->FinishWindow();
  EXPECT_EQ(rings_->stats().invalid_functions, 1u);
  EXPECT_EQ(s.stats.malformed_events, 1u);
  EXPECT_NE(Find(s, "python:<invalid function 1>"), nullptr);
}

TEST_F(AgentRingsTest, IterationMessagesFillIterationsWhenTheRingsCarryNone) {
  ASSERT_TRUE(agent_->PublishFunction(0, EventKind::kPythonCall, "f", UINT32_MAX));
  WindowSpec w{
      .id = 1, .start_ns = kT0, .duration_ns = 1000 * kMs, .reason = WindowReason::kManual};
  rings_->BeginWindow(w);
  Push(0, 10, 20);
  rings_->AddIteration(kT0 + 200 * kMs, 100 * kMs);
  rings_->AddIteration(kT0 + 300 * kMs, 100 * kMs);
  rings_->AddIteration(kT0 + 2000 * kMs, 100 * kMs);  // outside: ignored
  const WorkerSummary s = rings_->FinishWindow();
  ASSERT_EQ(s.iterations.size(), 2u);
  EXPECT_EQ(s.iterations[0].start_ns, kT0 + 100 * kMs);
  EXPECT_EQ(s.iterations[1].duration_ns, 100 * kMs);
}

TEST_F(AgentRingsTest, CallsUnderADataLoaderIteratorNextAreDataLoading) {
  // torch's iterator __next__ and what it calls (the Dataset's __getitem__) are the
  // iteration's data loading: the summary counts them as such, not as compute.
  ASSERT_TRUE(agent_->PublishFunction(0, EventKind::kPythonCall, "train (job.py:5)", UINT32_MAX));
  ASSERT_TRUE(agent_->PublishFunction(1, EventKind::kPythonCall,
                                      "_BaseDataLoaderIter.__next__ (dataloader.py:628)", 0));
  ASSERT_TRUE(agent_->PublishFunction(2, EventKind::kPythonCall,
                                      "RandomDataset.__getitem__ (job.py:60)", 1));
  ASSERT_TRUE(agent_->PublishFunction(3, EventKind::kPythonCall, "Model.forward (job.py:90)", 0));
  WindowSpec w{
      .id = 1, .start_ns = kT0, .duration_ns = 1000 * kMs, .reason = WindowReason::kManual};
  rings_->BeginWindow(w);
  Push(2, 11, 19);
  Push(1, 10, 20);
  Push(3, 20, 60);
  Push(0, 0, 100);
  const WorkerSummary s = rings_->FinishWindow();
  const FunctionSummary* next = Find(
      s, "python:train (job.py:5) > data_load:_BaseDataLoaderIter.__next__ (dataloader.py:628)");
  ASSERT_NE(next, nullptr);
  EXPECT_EQ(next->kind, EventKind::kDataLoad);
  const FunctionSummary* item =
      Find(s,
           "python:train (job.py:5) > data_load:_BaseDataLoaderIter.__next__ (dataloader.py:628)"
           " > python:RandomDataset.__getitem__ (job.py:60)");
  ASSERT_NE(item, nullptr);
  EXPECT_EQ(item->kind, EventKind::kPythonCall);
  const FunctionSummary* fwd =
      Find(s, "python:train (job.py:5) > python:Model.forward (job.py:90)");
  ASSERT_NE(fwd, nullptr);
  EXPECT_EQ(fwd->kind, EventKind::kPythonCall);
}

TEST_F(AgentRingsTest, ADataLoaderNextIsOneDataLoadNotTwo) {
  // The agent's DataLoader wrapper records a "DataLoader.__next__" marker around the call of
  // the iterator's own __next__, which its Python profile records as well, under the same
  // caller: one call, recorded twice. Counted as two sibling data loads, the data loading of
  // every iteration was doubled (real-healthy-roles-6, load 23-48: 11.1 ms of each, "22.8 ms
  // on the critical path, 5.6 % of the iteration", a material PT-DATA-CRITICAL on a healthy
  // job whose iterations spent 2.8 % in data loading).
  ASSERT_TRUE(agent_->PublishFunction(0, EventKind::kPythonCall, "train (job.py:5)", UINT32_MAX));
  ASSERT_TRUE(agent_->PublishFunction(1, EventKind::kPythonCall,
                                      "_BaseDataLoaderIter.__next__ (dataloader.py:628)", 0));
  ASSERT_TRUE(agent_->PublishFunction(2, EventKind::kDataLoad, "DataLoader.__next__", 0));
  WindowSpec w{
      .id = 1, .start_ns = kT0, .duration_ns = 1000 * kMs, .reason = WindowReason::kManual};
  rings_->BeginWindow(w);
  for (int64_t t = 0; t < 100; t += 50) {
    Push(1, t + 11, t + 19);
    Push(2, t + 10, t + 20, EventKind::kDataLoad);
  }
  Push(0, 0, 100);
  const WorkerSummary s = rings_->FinishWindow();
  const FunctionSummary* next = Find(
      s, "python:train (job.py:5) > data_load:_BaseDataLoaderIter.__next__ (dataloader.py:628)");
  ASSERT_NE(next, nullptr);
  EXPECT_EQ(next->count, 2u);
  int64_t data_load_ns = 0;
  for (const FunctionSummary& f : s.functions) {
    if (f.kind == EventKind::kDataLoad) data_load_ns += f.total_ns;
  }
  EXPECT_EQ(data_load_ns, 2 * 8 * kMs);
}

// The agent gave CUPTI up to the job's torch.profiler 300 ms into a 1 s window (window_done's
// gpu_stopped_ns): the summary counts the 700 ms without GPU data (a note in the report); the
// next window, without it, counts none.
TEST_F(AgentRingsTest, GpuTracingThatEndedEarlyIsCountedInTheSummary) {
  ASSERT_TRUE(agent_->PublishFunction(0, EventKind::kPythonCall, "f", UINT32_MAX));
  WindowSpec w{
      .id = 1, .start_ns = kT0, .duration_ns = 1000 * kMs, .reason = WindowReason::kManual};
  rings_->BeginWindow(w);
  Push(0, 10, 20);
  rings_->SetAgentCounts(1, 0, kT0 + 300 * kMs);
  const WorkerSummary s = rings_->FinishWindow();
  EXPECT_EQ(s.stats.gpu_untraced_ms, 700u);
  EXPECT_TRUE(HasDataQualityProblem(s.stats));
  EXPECT_EQ(LostEvents(s.stats), 0u);  // information, not lost events
  rings_->BeginWindow({.id = 2,
                       .start_ns = kT0 + 2000 * kMs,
                       .duration_ns = 1000 * kMs,
                       .reason = WindowReason::kManual});
  rings_->SetAgentCounts(0, 0);
  EXPECT_EQ(rings_->FinishWindow().stats.gpu_untraced_ms, 0u);
  // At the window's very end (or a clock past it): still noted, as 1 ms.
  rings_->BeginWindow({.id = 3,
                       .start_ns = kT0 + 4000 * kMs,
                       .duration_ns = 1000 * kMs,
                       .reason = WindowReason::kManual});
  rings_->SetAgentCounts(0, 0, kT0 + 9000 * kMs);
  EXPECT_EQ(rings_->FinishWindow().stats.gpu_untraced_ms, 1u);
}

TEST_F(AgentRingsTest, AnEmptyWindowStillSpansTheWindow) {
  WindowSpec w{.id = 1, .start_ns = kT0, .duration_ns = 500 * kMs, .reason = WindowReason::kHang};
  rings_->BeginWindow(w);
  const WorkerSummary s = rings_->FinishWindow();
  EXPECT_EQ(s.window_start_ns, kT0);
  EXPECT_EQ(s.window_end_ns, kT0 + 500 * kMs);
  EXPECT_TRUE(s.functions.empty());
}

// The agent's process groups reach the window's summary as the Kineto importer's do offline
// (issue 11): each group once with its ranks and backend, the calls per (function, group). A
// collective of a group the agent never declared is summarized without one and counted.
TEST_F(AgentRingsTest, DeclaredProcessGroupsReachTheWindowSummary) {
  ASSERT_TRUE(agent_->PublishFunction(0, EventKind::kCollective,
                                      "torch.distributed.all_reduce (group of 2)", UINT32_MAX));
  AgentMessage tp, dp;
  ASSERT_EQ(ParseAgentMessage(R"({"type":"process_group","rank":1,"group":1,"name":"1",)"
                              R"("backend":"gloo","ranks":[0,1],"size":2})",
                              &tp),
            ParseOutcome::kOk);
  ASSERT_EQ(ParseAgentMessage(R"({"type":"process_group","rank":1,"group":2,"name":"2",)"
                              R"("backend":"nccl","ranks":[1,3],"size":2})",
                              &dp),
            ParseOutcome::kOk);
  rings_->DeclareProcessGroup(tp.group);  // before the window
  WindowSpec w{
      .id = 1, .start_ns = kT0, .duration_ns = 1000 * kMs, .reason = WindowReason::kManual};
  rings_->BeginWindow(w);
  rings_->DeclareProcessGroup(dp.group);  // during it
  auto push = [&](int64_t start_ms, int64_t end_ms, uint16_t group, uint64_t bytes) {
    Event e;
    e.start_ns = kT0 + start_ms * kMs;
    e.end_ns = kT0 + end_ms * kMs;
    e.function_id = 0;
    e.kind = EventKind::kCollective;
    e.track_id = 4242;
    e.payload = bytes;
    e.group = group;
    ASSERT_TRUE(agent_->Push(ring_, e));
  };
  for (int i = 0; i < 3; ++i) {
    push(100 + i * 100, 110 + i * 100, 1, 1000);  // 10 ms in tp
    push(150 + i * 100, 170 + i * 100, 2, 500);   // 20 ms in dp
  }
  push(600, 605, 9, 7);  // group 9 was never declared
  rings_->Drain(1000);
  const WorkerSummary s = rings_->FinishWindow();
  const FunctionSummary* f = Find(s, "collective:torch.distributed.all_reduce (group of 2)");
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->count, 7u);
  const CollectiveGroups& g = s.collective_groups;
  ASSERT_EQ(g.groups.size(), 2u);
  ASSERT_EQ(g.calls.size(), 2u);
  std::map<std::string, CollectiveGroupCalls> calls;
  for (const CollectiveGroupCalls& c : g.calls) {
    EXPECT_EQ(&s.functions[c.function], f);
    calls[g.groups[c.group].name] = c;
  }
  // The backend is the group's field, and in its name for servers older than the field.
  ASSERT_EQ(calls.count("1 (gloo)"), 1u);
  ASSERT_EQ(calls.count("2 (nccl)"), 1u);
  EXPECT_EQ(g.groups[calls["1 (gloo)"].group].backend, "gloo");
  EXPECT_EQ(g.groups[calls["2 (nccl)"].group].backend, "nccl");
  EXPECT_EQ(calls["1 (gloo)"].count, 3u);
  EXPECT_EQ(calls["1 (gloo)"].total_ns, 30 * kMs);
  EXPECT_EQ(calls["1 (gloo)"].bytes, 3000u);
  EXPECT_EQ(calls["2 (nccl)"].total_ns, 60 * kMs);
  EXPECT_EQ(g.groups[calls["2 (nccl)"].group].ranks, (std::vector<int32_t>{1, 3}));
  EXPECT_TRUE(g.groups[calls["2 (nccl)"].group].complete());
  EXPECT_EQ(rings_->stats().collectives_of_unknown_groups, 1u);
  EXPECT_EQ(rings_->process_group_count(), 2u);

  // The next window knows the groups without being told again.
  rings_->BeginWindow({.id = 2,
                       .start_ns = kT0 + 2000 * kMs,
                       .duration_ns = 1000 * kMs,
                       .reason = WindowReason::kManual});
  push(2100, 2110, 2, 100);
  rings_->Drain(1000);
  const WorkerSummary next = rings_->FinishWindow();
  ASSERT_EQ(next.collective_groups.groups.size(), 1u);
  EXPECT_EQ(next.collective_groups.groups[0].name, "2 (nccl)");
  EXPECT_EQ(next.collective_groups.groups[0].backend, "nccl");
}

}  // namespace
}  // namespace perftracker
