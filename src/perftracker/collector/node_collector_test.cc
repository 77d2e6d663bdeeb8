#include "perftracker/collector/node_collector.h"

#include <dlfcn.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "perftracker/collector/fake_agent_for_test.h"
#include "perftracker/collector/fake_sampler_for_test.h"
#include "perftracker/sources/nccl/nccl_profiler_api.h"

namespace perftracker {
namespace {

constexpr int64_t kMs = 1'000'000;

int64_t NowNs() {
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

// Records what the collector tells the server.
class FakeCoordinator : public CoordinatorLink {
 public:
  void OnWorkerJoined(const WorkerInfo& worker) override {
    std::lock_guard<std::mutex> lock(mu_);
    joined.push_back(worker);
    cv_.notify_all();
  }
  void OnWorkerLeft(int32_t rank, bool clean) override {
    std::lock_guard<std::mutex> lock(mu_);
    left[rank] = clean;
    cv_.notify_all();
  }
  void OnTrainingEnded(int32_t rank, const std::string& detail) override {
    std::lock_guard<std::mutex> lock(mu_);
    ended[rank] = detail;
    cv_.notify_all();
  }
  void OnIteration(int32_t rank, int64_t, int64_t duration_ns) override {
    std::lock_guard<std::mutex> lock(mu_);
    iterations[rank].push_back(duration_ns);
    cv_.notify_all();
  }
  void OnTrigger(int32_t rank, WindowReason reason, const std::string& detail) override {
    std::lock_guard<std::mutex> lock(mu_);
    triggers.push_back({rank, reason, detail});
    cv_.notify_all();
  }
  void OnStacks(uint64_t, int32_t rank, bool, const std::string& text) override {
    std::lock_guard<std::mutex> lock(mu_);
    stacks[rank] = text;
    cv_.notify_all();
  }
  void OnSummary(uint64_t window, WorkerSummary summary) override {
    std::lock_guard<std::mutex> lock(mu_);
    summaries.emplace_back(window, std::move(summary));
    cv_.notify_all();
  }

  // Waits until `pred` holds (state mutex held while it is evaluated).
  template <typename Pred>
  bool WaitUntil(Pred pred, int timeout_ms = 20000) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, std::chrono::milliseconds(timeout_ms), pred);
  }
  std::mutex& mu() { return mu_; }

  struct TriggerCall {
    int32_t rank;
    WindowReason reason;
    std::string detail;
  };
  std::vector<WorkerInfo> joined;
  std::map<int32_t, bool> left;
  std::map<int32_t, std::string> ended;
  std::map<int32_t, std::vector<int64_t>> iterations;
  std::vector<TriggerCall> triggers;
  std::map<int32_t, std::string> stacks;
  std::vector<std::pair<uint64_t, WorkerSummary>> summaries;

 private:
  std::mutex mu_;
  std::condition_variable cv_;
};

class NodeCollectorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    socket_path_ = "/tmp/perftracker-collector-test-" + std::to_string(getpid()) + "-" +
                   ::testing::UnitTest::GetInstance()->current_test_info()->name() + ".sock";
    if (socket_path_.size() > 100) socket_path_.resize(100);
    unlink(socket_path_.c_str());
  }
  void TearDown() override {
    if (collector_) collector_->Stop();
  }

  void StartCollector(std::shared_ptr<MetricSampler> sampler = nullptr) {
    CollectorOptions o;
    o.socket_path = socket_path_;
    o.drain_interval_ms = 10;
    o.drain_threads = 2;  // agents 1, 3, ... and 2, 4, ... are drained by different threads
    o.sample_interval_ms = 20;
    o.finish_grace_ms = 300;
    o.sampler = std::move(sampler);
    o.log = [this](std::string_view line) {
      std::lock_guard<std::mutex> lock(log_mu_);
      logs_.emplace_back(line);
    };
    collector_ = std::make_unique<NodeCollector>(o, &coordinator_);
    const Status st = collector_->Start();
    ASSERT_TRUE(st.ok()) << st.message();
  }

  std::vector<std::string> Logs() {
    std::lock_guard<std::mutex> lock(log_mu_);
    return logs_;
  }
  bool LogContains(const std::string& part) {
    for (const auto& l : Logs()) {
      if (l.find(part) != std::string::npos) return true;
    }
    return false;
  }
  bool WaitForLog(const std::string& part, int timeout_ms = 20000) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
    while (std::chrono::steady_clock::now() < deadline) {
      if (LogContains(part)) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return false;
  }

  // Connects `agent`, says hello and waits until the collector registered it.
  void Join(FakeAgent& agent) {
    ASSERT_TRUE(agent.Connect(socket_path_));
    agent.Hello();
    const int32_t rank = agent.rank();
    ASSERT_TRUE(coordinator_.WaitUntil([&] {
      for (const auto& w : coordinator_.joined) {
        if (w.rank == rank) return true;
      }
      return false;
    }));
  }

  WindowSpec OpenWindow(int64_t duration_ms, uint64_t id = 1) {
    WindowSpec w;
    w.id = id;
    w.start_ns = NowNs() + 50 * kMs;
    w.duration_ns = duration_ms * kMs;
    w.reason = WindowReason::kSlowdown;
    collector_->StartWindow(w);
    return w;
  }

  // The agent's side of a window: a train > step > (forward, backward) call tree per
  // iteration, forward taking `forward_ms`, then window_done.
  static void PlayWindow(FakeAgent& agent, const nlohmann::json& window, int64_t forward_ms) {
    const int64_t start = window["start_ns"].get<int64_t>();
    const int64_t duration = window["duration_ns"].get<int64_t>();
    const uint32_t train = agent.Publish(EventKind::kPythonCall, "train.py:5 train");
    const uint32_t step = agent.Publish(EventKind::kPythonCall, "train.py:9 step", train);
    const uint32_t forward = agent.Publish(EventKind::kPythonCall, "model.py:20 forward", step);
    const uint32_t backward = agent.Publish(EventKind::kPythonCall, "model.py:40 backward", step);
    int64_t t = start + kMs;
    while (t + (forward_ms + 12) * kMs < start + duration) {
      agent.Push(forward, t + kMs, t + (1 + forward_ms) * kMs);
      agent.Push(backward, t + (1 + forward_ms) * kMs, t + (11 + forward_ms) * kMs);
      agent.Push(step, t, t + (12 + forward_ms) * kMs);
      t += (12 + forward_ms) * kMs;
    }
    agent.Push(train, start, t);
    agent.WindowDone(window["window"].get<uint64_t>());
  }

  static const FunctionSummary* Find(const WorkerSummary& s, const std::string& key) {
    for (size_t i = 0; i < s.functions.size(); ++i) {
      if (s.KeyIs(i, key)) return &s.functions[i];
    }
    return nullptr;
  }

  std::string socket_path_;
  FakeCoordinator coordinator_;
  std::unique_ptr<NodeCollector> collector_;
  std::mutex log_mu_;
  std::vector<std::string> logs_;
};

TEST_F(NodeCollectorTest, RelaysHelloIterationsAndTriggers) {
  StartCollector();
  FakeAgent agent(2, 4, "relay");
  Join(agent);
  {
    std::lock_guard<std::mutex> lock(coordinator_.mu());
    ASSERT_EQ(coordinator_.joined.size(), 1u);
    EXPECT_EQ(coordinator_.joined[0].rank, 2);
    EXPECT_EQ(coordinator_.joined[0].world_size, 4);
    EXPECT_EQ(coordinator_.joined[0].pid, getpid());
    EXPECT_EQ(coordinator_.joined[0].host, "testhost");
  }
  agent.SendJson({{"type", "iteration"}, {"rank", 2}, {"end_ns", NowNs()}, {"duration_ns", 123}});
  // A message cannot speak for another rank: the hello's rank is used.
  agent.SendJson(
      {{"type", "trigger"}, {"rank", 0}, {"reason", "slowdown"}, {"detail", "12% slower"}});
  ASSERT_TRUE(coordinator_.WaitUntil([&] { return !coordinator_.triggers.empty(); }));
  std::lock_guard<std::mutex> lock(coordinator_.mu());
  EXPECT_EQ(coordinator_.iterations[2], std::vector<int64_t>{123});
  EXPECT_EQ(coordinator_.triggers[0].rank, 2);
  EXPECT_EQ(coordinator_.triggers[0].reason, WindowReason::kSlowdown);
  EXPECT_EQ(coordinator_.triggers[0].detail, "12% slower");
}

TEST_F(NodeCollectorTest, RelaysThatARanksTrainingEnded) {
  StartCollector();
  FakeAgent agent(1, 2, "ended");
  Join(agent);
  agent.SendJson({{"type", "ended"}, {"rank", 1}, {"detail", "destroy_process_group"}});
  ASSERT_TRUE(coordinator_.WaitUntil([&] { return coordinator_.ended.count(1) != 0; }));
  std::lock_guard<std::mutex> lock(coordinator_.mu());
  EXPECT_EQ(coordinator_.ended[1], "destroy_process_group");
}

TEST_F(NodeCollectorTest, SummarizesAWindowOfEveryAgentUnderItsCallPaths) {
  size_t most_pids_sampled = 0;
  std::mutex sampled_mu;
  StartCollector(std::make_shared<FakeSampler>(
      [&](int64_t now_ns, const std::vector<int32_t>& pids, std::vector<PidSample>* out) {
        {
          std::lock_guard<std::mutex> lock(sampled_mu);
          most_pids_sampled = std::max(most_pids_sampled, pids.size());
        }
        PidSample s;
        s.pid = getpid();
        s.sample.time_ns = now_ns;
        s.sample.metric = Metric::kRunQueueDelayFraction;
        s.sample.value = 0.25;
        out->push_back(s);
      }));
  FakeAgent a0(0, 2, "window");
  FakeAgent a1(1, 2, "window");
  Join(a0);
  Join(a1);
  const WindowSpec w = OpenWindow(300);
  auto m0 = a0.WaitFor("window", 2000);
  auto m1 = a1.WaitFor("window", 2000);
  ASSERT_TRUE(m0 && m1);
  // Same wall-clock start and length on every rank.
  EXPECT_EQ((*m0)["start_ns"].get<int64_t>(), w.start_ns);
  EXPECT_EQ((*m1)["start_ns"].get<int64_t>(), w.start_ns);
  EXPECT_EQ((*m0)["duration_ns"].get<int64_t>(), w.duration_ns);
  EXPECT_EQ((*m0)["reason"], "slowdown");
  PlayWindow(a0, *m0, 5);
  PlayWindow(a1, *m1, 15);
  ASSERT_TRUE(coordinator_.WaitUntil([&] { return coordinator_.summaries.size() == 2; }));
  std::lock_guard<std::mutex> lock(coordinator_.mu());
  for (const auto& [window, s] : coordinator_.summaries) {
    EXPECT_EQ(window, 1u);
    EXPECT_EQ(s.source, "pid " + std::to_string(getpid()));
    EXPECT_EQ(s.host, "testhost");
    const FunctionSummary* fwd =
        Find(s, "python:train.py:5 train > python:train.py:9 step > python:model.py:20 forward");
    ASSERT_NE(fwd, nullptr) << "rank " << s.rank;
    const int64_t forward_ms = s.rank == 0 ? 5 : 15;
    EXPECT_EQ(fwd->total_ns, static_cast<int64_t>(fwd->count) * forward_ms * kMs);
    EXPECT_GT(fwd->count, 5u);
    EXPECT_EQ(s.stats.dropped_events, 0u);
  }
  std::lock_guard<std::mutex> sampled_lock(sampled_mu);
  // Both agents at once (one test process: the same pid twice), while both windows ran.
  EXPECT_EQ(most_pids_sampled, 2u);
}

// `comm_thread` (issue 11 §3): the threads an agent saw complete its collectives reach the
// host sampler with the agent's pid, each once, while the worker is in a window.
TEST_F(NodeCollectorTest, AnAgentsCommunicationThreadsReachTheSampler) {
  auto sampler = std::make_shared<FakeSampler>(
      [](int64_t, const std::vector<int32_t>&, std::vector<PidSample>*) {});
  StartCollector(sampler);
  FakeAgent agent(0, 1, "commthread");
  Join(agent);
  for (int tid : {4321, 4322, 4321}) {
    agent.SendJson({{"type", "comm_thread"}, {"rank", 0}, {"tid", tid}});
  }
  agent.SendJson({{"type", "comm_thread"}, {"rank", 0}, {"tid", -1}});  // malformed: ignored
  OpenWindow(300);
  ASSERT_TRUE(agent.WaitFor("window", 2000));
  // The window's samples begin at its start (50 ms ahead), every 20 ms.
  const std::vector<int32_t> want = {4321, 4322};
  std::map<int32_t, std::vector<int32_t>> seen;
  for (int i = 0; i < 2000; ++i) {
    seen = sampler->comm_threads();
    if (seen.size() == 1 && seen.begin()->second == want) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(seen.begin()->first, static_cast<int32_t>(getpid()));
  EXPECT_EQ(seen.begin()->second, want);
}

// The real node sampler (MakeHostSampler) on a fixture /sys: an InfiniBand port whose
// counters advance during the window shows up in every agent's window summary as
// kIbTxBytesPerSec (4 bytes per counter unit) with its link up. NVML is absent here: said once.
TEST_F(NodeCollectorTest, RdmaPortMetricsFromTheNodeSamplerReachTheWindowSummary) {
  char tmpl[] = "/tmp/perftracker-collector-sys-XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  const std::string sys = tmpl;
  const std::string port = sys + "/class/infiniband/mlx5_0/ports/1";
  ASSERT_EQ(system(("mkdir -p " + port + "/counters").c_str()), 0);
  auto write = [](const std::string& path, const std::string& text) {  // atomic, like sysfs
    const std::string tmp = path + ".tmp";
    FILE* f = fopen(tmp.c_str(), "w");
    ASSERT_NE(f, nullptr);
    fputs(text.c_str(), f);
    fclose(f);
    ASSERT_EQ(rename(tmp.c_str(), path.c_str()), 0);
  };
  write(port + "/state", "4: ACTIVE\n");
  write(port + "/counters/port_rcv_data", "0\n");
  write(port + "/counters/port_xmit_data", "0\n");
  std::atomic<bool> done{false};
  std::thread traffic([&] {  // 25 M units (100 MB) every 10 ms: ~10 GB/s
    for (uint64_t units = 0; !done; units += 25'000'000) {
      write(port + "/counters/port_xmit_data", std::to_string(units) + "\n");
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  });
  StartCollector(MakeHostSampler("/proc", sys));
  FakeAgent a0(0, 1, "rdma");
  Join(a0);
  OpenWindow(400);
  auto m0 = a0.WaitFor("window", 2000);
  ASSERT_TRUE(m0);
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  PlayWindow(a0, *m0, 5);
  const bool got = coordinator_.WaitUntil([&] { return coordinator_.summaries.size() == 1; });
  done = true;
  traffic.join();
  ASSERT_EQ(system(("rm -rf " + sys).c_str()), 0);
  ASSERT_TRUE(got);
  std::lock_guard<std::mutex> lock(coordinator_.mu());
  const WorkerSummary& s = coordinator_.summaries[0].second;
  std::map<Metric, double> mean;
  for (const FunctionMetric& m : s.worker_metrics) mean[m.metric] = m.mean;
  ASSERT_EQ(mean.count(Metric::kIbTxBytesPerSec), 1u);
  // The writer sleeps 10 ms between steps, so at most ~10 GB/s; a loaded CI machine may run
  // it far less often: only "traffic seen, not more than written" is certain.
  EXPECT_GT(mean[Metric::kIbTxBytesPerSec], 1e8);
  EXPECT_LT(mean[Metric::kIbTxBytesPerSec], 12e9);
  EXPECT_EQ(mean[Metric::kIbRxBytesPerSec], 0.0);
  EXPECT_EQ(mean[Metric::kNicLinkUp], 1.0);
}

// The NCCL profiler plugin, loaded as NCCL loads it, writing its file at `path` (communicator
// 0xabc, 1 rank).
void StartNcclPlugin(const std::string& path, ncclProfiler_v5_t** v5, void** ctx) {
  setenv("PERFTRACKER_NCCL_SHM", path.c_str(), 1);
  setenv("PERFTRACKER_NCCL_TAIL_US", "0", 1);
  void* lib = dlopen(PERFTRACKER_NCCL_PLUGIN, RTLD_NOW | RTLD_LOCAL);
  ASSERT_NE(lib, nullptr) << dlerror();
  *v5 = static_cast<ncclProfiler_v5_t*>(dlsym(lib, "ncclProfiler_v5"));
  ASSERT_NE(*v5, nullptr);
  int mask = 0;
  ASSERT_EQ((*v5)->init(ctx, 0xabc, &mask, "dp", 1, 1, 0, nullptr), 0);
}

void StopNcclPlugin(const std::string& path, ncclProfiler_v5_t* v5, void* ctx) {
  v5->finalize(ctx);
  unlink(path.c_str());
  unsetenv("PERFTRACKER_NCCL_SHM");
}

// Four 4 KiB all-reduces through the NCCL profiler plugin, each with a 2 ms kernel channel.
void RecordAllReduces(ncclProfiler_v5_t* v5, void* ctx, uint64_t n) {
  for (uint64_t seq = 0; seq < n; ++seq) {
    ncclProfilerEventDescr_v5_t d{};
    d.type = kNcclProfileColl;
    d.coll.seqNumber = seq;
    d.coll.func = "AllReduce";
    d.coll.count = 1024;
    d.coll.datatype = "ncclFloat32";
    d.coll.algo = "Ring";
    d.coll.proto = "Simple";
    void* coll = nullptr;
    v5->startEvent(ctx, &coll, &d);
    v5->stopEvent(coll);
    ncclProfilerEventDescr_v5_t ch{};
    ch.type = kNcclProfileKernelCh;
    ch.parentObj = coll;
    void* k = nullptr;
    v5->startEvent(ctx, &k, &ch);
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    v5->stopEvent(k);
  }
}

const FunctionSummary* FindAllReduce(const WorkerSummary& s) {
  for (const FunctionSummary& f : s.functions) {
    if (f.name == "nccl:AllReduce Ring/Simple (comm 00000abc, 1 ranks)") return &f;
  }
  return nullptr;
}

// The NCCL profiler plugin of the agent's process writes "<agent file>-nccl"; the collector
// attaches it and the window summary holds the plugin's collectives next to the agent's calls.
TEST_F(NodeCollectorTest, TheNcclPluginsFileJoinsTheAgentsWindowSummary) {
  StartCollector();
  FakeAgent a0(0, 1, "nccl");
  const std::string nccl_path = a0.shm_path() + "-nccl";
  ncclProfiler_v5_t* v5 = nullptr;
  void* ctx = nullptr;
  ASSERT_NO_FATAL_FAILURE(StartNcclPlugin(nccl_path, &v5, &ctx));
  Join(a0);  // the plugin's file exists already: attached at the collector's first look
  const WindowSpec w = OpenWindow(1500);
  auto m0 = a0.WaitFor("window", 2000);
  ASSERT_TRUE(m0);
  while (NowNs() < w.start_ns + 20 * kMs) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  RecordAllReduces(v5, ctx, 4);
  PlayWindow(a0, *m0, 5);
  ASSERT_TRUE(coordinator_.WaitUntil([&] { return coordinator_.summaries.size() == 1; }, 5000));
  StopNcclPlugin(nccl_path, v5, ctx);
  std::lock_guard<std::mutex> lock(coordinator_.mu());
  const WorkerSummary& s = coordinator_.summaries[0].second;
  const FunctionSummary* all_reduce = FindAllReduce(s);
  ASSERT_NE(all_reduce, nullptr);
  EXPECT_EQ(all_reduce->count, 4u);
  EXPECT_EQ(all_reduce->bytes, 4u * 4096);
  EXPECT_NE(Find(s, "python:train.py:5 train"), nullptr);  // the agent's events too
  EXPECT_EQ(s.stats.dropped_events, 0u);
}

// CUPTI's file appears when the agent begins GPU tracing, and CUPTI delivers its records when
// the agent flushes it, just before window_done: on a loaded machine, where the agent's
// window start runs late, the file can be created and written within the last moments of the
// window. Its records are in the summary all the same (seen in CI: a window with no CUPTI
// kernel, "has_device False", when the file appeared between two of the collector's looks).
TEST_F(NodeCollectorTest, ASourceFileCreatedJustBeforeWindowDoneJoinsTheSummary) {
  StartCollector();
  FakeAgent a0(0, 1, "late");
  Join(a0);  // no source file yet: the collector's first look finds none
  const WindowSpec w = OpenWindow(1500);
  auto m0 = a0.WaitFor("window", 2000);
  ASSERT_TRUE(m0);
  while (NowNs() < w.start_ns + w.duration_ns - 80 * kMs) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  const std::string nccl_path = a0.shm_path() + "-nccl";
  ncclProfiler_v5_t* v5 = nullptr;
  void* ctx = nullptr;
  ASSERT_NO_FATAL_FAILURE(StartNcclPlugin(nccl_path, &v5, &ctx));
  RecordAllReduces(v5, ctx, 4);
  PlayWindow(a0, *m0, 5);
  ASSERT_TRUE(coordinator_.WaitUntil([&] { return coordinator_.summaries.size() == 1; }, 5000));
  StopNcclPlugin(nccl_path, v5, ctx);
  std::lock_guard<std::mutex> lock(coordinator_.mu());
  const FunctionSummary* all_reduce = FindAllReduce(coordinator_.summaries[0].second);
  ASSERT_NE(all_reduce, nullptr) << "the late source file was not attached";
  EXPECT_EQ(all_reduce->count, 4u);
}

// A window the server ends early (EndWindowNow: every rank completed its iterations, the job
// ended, a confirmed hang) still ends for each agent at its window_done: the agent writes
// records of the window at its end, before window_done (CUPTI delivers its buffered kernels
// at the agent's flush). Seen in CI: e2e_gpu_check_script's window had no CUPTI kernel, under
// load, when the collector summarized at its next drain round, while the agent's flush was
// still writing. An agent that never says window_done is summarized after the grace.
TEST_F(NodeCollectorTest, AWindowEndedEarlyWaitsForWhatTheAgentWritesAtItsEnd) {
  StartCollector();
  FakeAgent flushing(0, 2, "end-flush");
  FakeAgent silent(1, 2, "end-silent");
  Join(flushing);
  Join(silent);
  const WindowSpec w = OpenWindow(60'000);
  auto m0 = flushing.WaitFor("window", 2000);
  ASSERT_TRUE(m0 && silent.WaitFor("window", 2000));
  while (NowNs() < w.start_ns + 100 * kMs)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  const uint32_t step = flushing.Publish(EventKind::kPythonCall, "train.py:9 step");
  flushing.Push(step, w.start_ns + 60 * kMs, w.start_ns + 90 * kMs);
  collector_->EndWindowNow(w.id);
  ASSERT_TRUE(flushing.WaitFor("end_window", 5000));
  // The agent's window end takes a while (the flush of a loaded machine): many drain rounds.
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  const uint32_t kernel = flushing.Publish(EventKind::kGpuKernel, "fake_gemm_kernel");
  for (int i = 0; i < 10; ++i) {
    const int64_t at = w.start_ns + (2 + 5 * i) * kMs;
    flushing.Push(kernel, at, at + 2 * kMs, EventKind::kGpuKernel);
  }
  flushing.WindowDone(w.id);
  ASSERT_TRUE(coordinator_.WaitUntil([&] { return coordinator_.summaries.size() == 2; }, 10000))
      << "a window ended early was not summarized long before its planned end";
  std::lock_guard<std::mutex> lock(coordinator_.mu());
  for (const auto& [window, s] : coordinator_.summaries) {
    if (s.rank != 0) continue;
    const FunctionSummary* k = Find(s, "kernel:fake_gemm_kernel");
    ASSERT_NE(k, nullptr) << "the records written at the agent's window end are missing";
    EXPECT_EQ(k->count, 10u);
    EXPECT_NE(Find(s, "python:train.py:9 step"), nullptr);
  }
}

TEST_F(NodeCollectorTest, MalformedMessagesAreLoggedOnceAndNeverFatal) {
  StartCollector();
  FakeAgent bad(0, 2, "bad");
  ASSERT_TRUE(bad.Connect(socket_path_));
  bad.SendRaw("{this is not json\n");
  bad.SendRaw("{this is not json either\n");
  bad.SendRaw(std::string(70 * 1024, 'x') + "\n");
  bad.SendRaw("{\"type\":\"from_the_future\",\"rank\":0}\n");
  bad.SendRaw("{\"type\":\"trigger\",\"rank\":0,\"reason\":\"slowdown\"}\n");  // before hello
  // A hello pointing at a file that is not an agent's shared memory.
  const std::string not_shm = "/tmp/perftracker-not-shm-" + std::to_string(getpid());
  {
    std::ofstream f(not_shm);
    f << std::string(8192, 'z');
  }
  bad.Hello(not_shm);
  bad.Hello("/nonexistent/perftracker-shm");
  EXPECT_TRUE(WaitForLog("malformed message from agent connection 1: not valid JSON"));
  EXPECT_TRUE(WaitForLog("longer than 65536 bytes"));
  EXPECT_TRUE(WaitForLog("unknown message type 'from_the_future'"));
  EXPECT_TRUE(WaitForLog("before a valid hello"));
  EXPECT_TRUE(WaitForLog("not a perftracker agent file of this version"));
  unlink(not_shm.c_str());

  // Logged once per agent, counted every time.
  size_t malformed_logs = 0;
  for (const auto& l : Logs()) malformed_logs += l.find("malformed message") != std::string::npos;
  EXPECT_EQ(malformed_logs, 1u);
  // The collector still serves a good agent, and the bad connection's rank is free.
  FakeAgent good(0, 2, "good");
  Join(good);
  const CollectorStats st = collector_->stats();
  EXPECT_EQ(st.malformed_lines, 2u);
  EXPECT_EQ(st.oversized_lines, 1u);
  EXPECT_EQ(st.unknown_messages, 1u);
  EXPECT_EQ(st.rejected_hellos, 2u);
  EXPECT_EQ(st.agents, 1u);
}

TEST_F(NodeCollectorTest, AnAgentGoneMidWindowSendsNoSummaryAndBlocksNobody) {
  StartCollector();
  FakeAgent a0(0, 2, "gone");
  FakeAgent a1(1, 2, "gone");
  Join(a0);
  Join(a1);
  OpenWindow(300);
  auto m0 = a0.WaitFor("window", 2000);
  ASSERT_TRUE(a1.WaitFor("window", 2000));
  ASSERT_TRUE(m0);
  a1.Disconnect();  // killed: no bye
  PlayWindow(a0, *m0, 5);
  ASSERT_TRUE(coordinator_.WaitUntil(
      [&] { return coordinator_.summaries.size() == 1 && coordinator_.left.count(1) != 0; }));
  std::lock_guard<std::mutex> lock(coordinator_.mu());
  EXPECT_EQ(coordinator_.summaries[0].second.rank, 0);
  EXPECT_FALSE(coordinator_.left[1]);  // not clean
  EXPECT_TRUE(LogContains("rank 1 (pid " + std::to_string(getpid()) +
                          ") disconnected during window 1 without saying bye"));
  EXPECT_EQ(collector_->stats().summaries_lost, 1u);
}

TEST_F(NodeCollectorTest, ASilentAgentIsFinishedAfterTheGrace) {
  StartCollector();
  FakeAgent a0(0, 1, "silent");
  Join(a0);
  const WindowSpec w = OpenWindow(100);
  ASSERT_TRUE(a0.WaitFor("window", 2000));
  // No events, no window_done: the summary still comes, after end + grace.
  ASSERT_TRUE(coordinator_.WaitUntil([&] { return coordinator_.summaries.size() == 1; }));
  EXPECT_GE(NowNs(), w.end_ns() + 300 * kMs);
  std::lock_guard<std::mutex> lock(coordinator_.mu());
  EXPECT_EQ(coordinator_.summaries[0].second.window_start_ns, w.start_ns);
}

TEST_F(NodeCollectorTest, ByeDuringAWindowSendsWhatWasRecorded) {
  StartCollector();
  FakeAgent a0(0, 1, "bye");
  Join(a0);
  OpenWindow(5000);
  auto m = a0.WaitFor("window", 2000);
  ASSERT_TRUE(m);
  const int64_t start = (*m)["start_ns"].get<int64_t>();
  const uint32_t f = a0.Publish(EventKind::kPythonCall, "f");
  a0.Push(f, start + kMs, start + 2 * kMs);
  a0.SendJson({{"type", "bye"}, {"rank", 0}});
  a0.Disconnect();
  ASSERT_TRUE(coordinator_.WaitUntil(
      [&] { return coordinator_.summaries.size() == 1 && coordinator_.left.count(0) != 0; }, 2000));
  std::lock_guard<std::mutex> lock(coordinator_.mu());
  EXPECT_NE(Find(coordinator_.summaries[0].second, "python:f"), nullptr);
  EXPECT_TRUE(coordinator_.left[0]);  // clean
}

TEST_F(NodeCollectorTest, DumpStacksReachesEveryAgentAndStacksComeBack) {
  StartCollector();
  FakeAgent a0(0, 2, "stacks");
  FakeAgent a1(1, 2, "stacks");
  Join(a0);
  Join(a1);
  collector_->DumpStacks(4);
  for (FakeAgent* a : {&a0, &a1}) {
    auto m = a->WaitFor("dump_stacks", 2000);
    ASSERT_TRUE(m);
    EXPECT_EQ((*m)["window"], 4);
    a->SendJson({{"type", "stacks"},
                 {"rank", a->rank()},
                 {"window", 4},
                 {"text", "Thread 1 (MainThread) (most recent call last):\n"}});
  }
  ASSERT_TRUE(coordinator_.WaitUntil([&] { return coordinator_.stacks.size() == 2; }));
}

TEST_F(NodeCollectorTest, ADuplicateRankTakesPartInNoWindow) {
  StartCollector();
  FakeAgent a0(0, 2, "dup-a");
  FakeAgent again(0, 2, "dup-b");
  Join(a0);
  ASSERT_TRUE(again.Connect(socket_path_));
  again.Hello();
  EXPECT_TRUE(WaitForLog("says it is rank 0, which another live agent already is"));
  OpenWindow(100);
  EXPECT_TRUE(a0.WaitFor("window", 2000));
  EXPECT_FALSE(again.WaitFor("window", 300));
}

TEST_F(NodeCollectorTest, SocketPathTooLongIsAClearError) {
  CollectorOptions o;
  o.socket_path = "/tmp/" + std::string(200, 'a');
  NodeCollector c(o, &coordinator_);
  const Status st = c.Start();
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("Unix socket path must be"), std::string::npos);
}

}  // namespace
}  // namespace perftracker
