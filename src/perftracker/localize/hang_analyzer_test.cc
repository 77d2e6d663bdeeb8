#include "perftracker/localize/hang_analyzer.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "perftracker/localize/finding_catalogue.h"

namespace perftracker {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Not;

constexpr int64_t kSec = 1'000'000'000;
constexpr int64_t kNow = 1'700'000'000 * kSec;

// The agent's `stacks` text (docs/agent-protocol.md): a pin-memory / agent thread first, the
// main thread in an all_reduce as torch 1.13 / gloo shows it.
const char* const kWaitingInAllReduce =
    R"(Thread 140371029874432 (perftracker-agent) (most recent call last):
  File "/usr/lib/python3.11/threading.py", line 995, in _bootstrap
    self._bootstrap_inner()
  File "/usr/lib/python3.11/threading.py", line 1038, in _bootstrap_inner
    self.run()
  File "/usr/lib/python3/dist-packages/perftracker/agent.py", line 120, in _control_loop
    line = self._sock.recv(65536)
Thread 140371211413312 (MainThread) (most recent call last):
  File "/work/job/train.py", line 140, in <module>
    main()
  File "/work/job/train.py", line 121, in main
    train_step(model, batch, opt)
  File "/work/job/train.py", line 97, in train_step
    dist.all_reduce(metric)
  File "/usr/lib/python3/dist-packages/torch/distributed/distributed_c10d.py", line 1536, in all_reduce
    work.wait()
)";

// torch 2.x: the public API is wrapped by c10d_logger's wrapper.
const char* const kWaitingInBarrierWrapped = R"(Thread 139 (MainThread) (most recent call last):
  File "/work/job/train.py", line 140, in <module>
    main()
  File "/work/job/train.py", line 124, in main
    dist.barrier()
  File "/usr/local/lib/python3.11/site-packages/torch/distributed/c10d_logger.py", line 75, in wrapper
    return func(*args, **kwargs)
  File "/usr/local/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py", line 3696, in barrier
    work.wait()
)";

// DDP: the gradient all-reduce is waited for inside backward (C++), no distributed frame.
const char* const kWaitingInDdpBackward = R"(Thread 140 (MainThread) (most recent call last):
  File "/work/job/train.py", line 140, in <module>
    main()
  File "/work/job/train.py", line 118, in main
    loss.backward()
  File "/usr/lib/python3/dist-packages/torch/_tensor.py", line 488, in backward
    torch.autograd.backward(
  File "/usr/lib/python3/dist-packages/torch/autograd/__init__.py", line 197, in backward
    Variable._execution_engine.run_backward(  # Calls into the C++ engine to run the backward pass
)";

// The culprit: sleeps inside its model's forward.
const char* const kStuckInForward = R"(Thread 141 (MainThread) (most recent call last):
  File "/work/job/train.py", line 140, in <module>
    main()
  File "/work/job/train.py", line 115, in main
    loss = model(batch).sum()
  File "/usr/lib/python3/dist-packages/torch/nn/modules/module.py", line 1194, in _call_impl
    return forward_call(*input, **kwargs)
  File "/usr/lib/python3/dist-packages/torch/nn/parallel/distributed.py", line 1040, in forward
    output = self._run_ddp_forward(*inputs, **kwargs)
  File "/usr/lib/python3/dist-packages/torch/nn/parallel/distributed.py", line 1000, in _run_ddp_forward
    return module_to_run(*inputs[0], **kwargs[0])
  File "/usr/lib/python3/dist-packages/torch/nn/modules/module.py", line 1194, in _call_impl
    return forward_call(*input, **kwargs)
  File "/work/job/model.py", line 42, in forward
    x = self.block2(x)
  File "/usr/lib/python3/dist-packages/torch/nn/modules/module.py", line 1194, in _call_impl
    return forward_call(*input, **kwargs)
  File "/work/job/model.py", line 27, in forward
    time.sleep(3600)  # injected hang
)";

// Stuck waiting for a batch: the data loader's queue (standard-library frames innermost).
const char* const kStuckInDataLoader = R"(Thread 142 (MainThread) (most recent call last):
  File "/work/job/train.py", line 140, in <module>
    main()
  File "/work/job/train.py", line 110, in main
    for batch in loader:
  File "/usr/lib/python3/dist-packages/torch/utils/data/dataloader.py", line 628, in __next__
    data = self._next_data()
  File "/usr/lib/python3/dist-packages/torch/utils/data/dataloader.py", line 1316, in _next_data
    idx, data = self._get_data()
  File "/usr/lib/python3/dist-packages/torch/utils/data/dataloader.py", line 1133, in _try_get_data
    data = self._data_queue.get(timeout=timeout)
  File "/usr/lib/python3.11/multiprocessing/queues.py", line 113, in get
    if not self._poll(timeout):
  File "/usr/lib/python3.11/multiprocessing/connection.py", line 257, in poll
    return self._poll(timeout)
)";

TEST(ParsePythonStacksTest, TracebackFormat) {
  const auto threads = ParsePythonStacks(kWaitingInAllReduce);
  ASSERT_EQ(threads.size(), 2u);
  EXPECT_EQ(threads[0].id, "140371029874432");
  EXPECT_EQ(threads[0].name, "perftracker-agent");
  EXPECT_EQ(threads[1].name, "MainThread");
  EXPECT_FALSE(threads[0].is_main);
  EXPECT_TRUE(threads[1].is_main);
  ASSERT_EQ(threads[1].frames.size(), 4u);
  EXPECT_EQ(threads[1].frames[0].file, "/work/job/train.py");
  EXPECT_EQ(threads[1].frames[0].line, 140);
  EXPECT_EQ(threads[1].frames[0].function, "<module>");
  EXPECT_EQ(threads[1].frames[0].code, "main()");
  EXPECT_EQ(threads[1].frames[3].function, "all_reduce");
  EXPECT_EQ(threads[1].frames[3].code, "work.wait()");
}

TEST(ParsePythonStacksTest, FaulthandlerFormatIsInnermostFirst) {
  const auto threads = ParsePythonStacks(
      "Thread 0x00007f3b2c1ff640 (most recent call first):\n"
      "  File \"/usr/lib/python3.11/threading.py\", line 324 in wait\n"
      "  File \"/usr/lib/python3.11/threading.py\", line 1002 in _bootstrap\n"
      "\n"
      "Current thread 0x00007f3b3a6e7740 (most recent call first):\n"
      "  File \"/work/job/model.py\", line 27 in forward\n"
      "  File \"/work/job/train.py\", line 140 in <module>\n");
  ASSERT_EQ(threads.size(), 2u);
  EXPECT_EQ(threads[0].id, "0x00007f3b2c1ff640");
  EXPECT_EQ(threads[0].name, "");
  EXPECT_FALSE(threads[0].is_main);
  EXPECT_TRUE(threads[1].is_main);  // "Current thread"
  ASSERT_EQ(threads[1].frames.size(), 2u);
  EXPECT_EQ(threads[1].frames[0].function, "<module>");  // outermost first after parsing
  EXPECT_EQ(threads[1].frames[1].function, "forward");
  EXPECT_EQ(threads[1].frames[1].line, 27);
}

TEST(ParsePythonStacksTest, NameFirstHeaderWithMainMarker) {
  // python/perftracker/agent.py's header shape.
  const auto threads = ParsePythonStacks(
      "Thread MainThread (140371211413312) [main], most recent call last:\n"
      "  File \"/work/job/train.py\", line 140, in <module>\n"
      "    main()\n"
      "  File \"/work/job/model.py\", line 27, in forward\n"
      "    time.sleep(3600)\n"
      "Thread Thread-1 (_pin_memory_loop) (140371029874432), most recent call last:\n"
      "  File \"/usr/lib/python3.11/threading.py\", line 995, in _bootstrap\n"
      "    self._bootstrap_inner()\n");
  ASSERT_EQ(threads.size(), 2u);
  EXPECT_EQ(threads[0].id, "140371211413312");
  EXPECT_EQ(threads[0].name, "MainThread");
  EXPECT_TRUE(threads[0].is_main);
  ASSERT_EQ(threads[0].frames.size(), 2u);
  EXPECT_EQ(threads[0].frames[1].code, "time.sleep(3600)");
  EXPECT_EQ(threads[1].id, "140371029874432");
  EXPECT_EQ(threads[1].name, "Thread-1 (_pin_memory_loop)");
  EXPECT_FALSE(threads[1].is_main);
}

TEST(ParsePythonStacksTest, GarbageIsSkipped) {
  EXPECT_THAT(ParsePythonStacks(""), IsEmpty());
  EXPECT_THAT(ParsePythonStacks("hello\n  File \"x.py\", line abc, in f\n"), IsEmpty());
  const auto t = ParsePythonStacks("  File \"x.py\", line 3, in f\n    g()\n");
  ASSERT_EQ(t.size(), 1u);  // frames without a header form one thread
  EXPECT_EQ(t[0].frames[0].code, "g()");
}

TEST(HangAnalyzerTest, CulpritStuckInOwnCodeOthersInAllReduce) {
  HangAnalyzer h;
  h.AddRank(0, kWaitingInAllReduce, kNow - 3 * kSec);
  h.AddRank(1, kWaitingInAllReduce, kNow - 3 * kSec);
  h.AddRank(2, kStuckInForward, kNow - 4 * kSec);
  h.AddRank(3, kWaitingInAllReduce, kNow - 3 * kSec);
  const Finding f = h.Analyze(kNow, 500'000'000);
  EXPECT_EQ(f.code, "PT-HANG");
  EXPECT_EQ(f.category, FindingCategory::kHang);
  EXPECT_THAT(f.workers, ElementsAre(2));
  EXPECT_THAT(f.victims, ElementsAre(0, 1, 3));
  EXPECT_TRUE(f.material);
  EXPECT_EQ(f.function, "forward");
  EXPECT_EQ(f.function_key, "/work/job/model.py:27 forward");
  EXPECT_EQ(f.title,
            "rank 2 hangs in model.py:27 forward while ranks 0, 1, 3 wait in all_reduce, no "
            "progress for 4.00 s");
  std::string all;
  for (const auto& e : f.evidence) all += e.label + ": " + e.value + "\n";
  EXPECT_THAT(all, HasSubstr("innermost user frames on rank 2: /work/job/model.py:27 forward <- "
                             "/work/job/model.py:42 forward <- /work/job/train.py:115 main"));
  EXPECT_THAT(all, HasSubstr("source line: /work/job/model.py:27 forward: time.sleep(3600)"));
  EXPECT_THAT(all, HasSubstr("waiting in a collective: ranks 0, 1, 3 wait in all_reduce"));
  EXPECT_THAT(all, HasSubstr("last progress (iteration end): rank 2: 4.00 s ago; the others: "
                             "3.00 s ago (median)"));
  EXPECT_THAT(all, HasSubstr("silence: 8.0x the mean iteration"));
  EXPECT_THAT(all, HasSubstr("main-thread stack on rank 2 (innermost first): "
                             "/work/job/model.py:27 forward\n"));
  EXPECT_NE(FindCatalogueEntry(f.code), nullptr);
}

// Captured from a real job (torch 1.13.1, gloo, 2 ranks, torch.multiprocessing.spawn, DDP):
// rank 1 sleeps in its module's forward at step 3; 4 s later each rank's main-thread stack
// was written with the documented format.
const char* const kRealRank0 = R"(Thread 140176758857792 (MainThread) (most recent call last):
  File "<string>", line 1, in <module>
  File "/usr/lib/python3.11/multiprocessing/spawn.py", line 120, in spawn_main
    exitcode = _main(fd, parent_sentinel)
  File "/usr/lib/python3.11/multiprocessing/spawn.py", line 133, in _main
    return self._bootstrap(parent_sentinel)
  File "/usr/lib/python3.11/multiprocessing/process.py", line 314, in _bootstrap
    self.run()
  File "/usr/lib/python3.11/multiprocessing/process.py", line 108, in run
    self._target(*self._args, **self._kwargs)
  File "/usr/lib/python3/dist-packages/torch/multiprocessing/spawn.py", line 69, in _wrap
    fn(i, *args)
  File "/tmp/hangcheck/h.py", line 30, in run
    opt.zero_grad(); loss.backward(); opt.step()
  File "/usr/lib/python3/dist-packages/torch/_tensor.py", line 488, in backward
    torch.autograd.backward(
  File "/usr/lib/python3/dist-packages/torch/autograd/__init__.py", line 197, in backward
    Variable._execution_engine.run_backward(  # Calls into the C++ engine to run the backward pass
)";
const char* const kRealRank1 = R"(Thread 139820369043520 (MainThread) (most recent call last):
  File "<string>", line 1, in <module>
  File "/usr/lib/python3.11/multiprocessing/spawn.py", line 120, in spawn_main
    exitcode = _main(fd, parent_sentinel)
  File "/usr/lib/python3.11/multiprocessing/spawn.py", line 133, in _main
    return self._bootstrap(parent_sentinel)
  File "/usr/lib/python3.11/multiprocessing/process.py", line 314, in _bootstrap
    self.run()
  File "/usr/lib/python3.11/multiprocessing/process.py", line 108, in run
    self._target(*self._args, **self._kwargs)
  File "/usr/lib/python3/dist-packages/torch/multiprocessing/spawn.py", line 69, in _wrap
    fn(i, *args)
  File "/tmp/hangcheck/h.py", line 29, in run
    loss = m(torch.randn(8, 64), rank, step).sum()
  File "/usr/lib/python3/dist-packages/torch/nn/modules/module.py", line 1194, in _call_impl
    return forward_call(*input, **kwargs)
  File "/usr/lib/python3/dist-packages/torch/nn/parallel/distributed.py", line 1040, in forward
    output = self._run_ddp_forward(*inputs, **kwargs)
  File "/usr/lib/python3/dist-packages/torch/nn/parallel/distributed.py", line 1003, in _run_ddp_forward
    return module_to_run(*inputs, **kwargs)
  File "/usr/lib/python3/dist-packages/torch/nn/modules/module.py", line 1194, in _call_impl
    return forward_call(*input, **kwargs)
  File "/tmp/hangcheck/h.py", line 20, in forward
    time.sleep(3600)
)";

TEST(HangAnalyzerTest, RealTorch113DdpHang) {
  HangAnalyzer h;
  h.AddRank(0, kRealRank0, kNow - 4 * kSec);
  h.AddRank(1, kRealRank1, kNow - 4 * kSec - 30'000'000);
  const Finding f = h.Analyze(kNow, 30'000'000);
  EXPECT_THAT(f.workers, ElementsAre(1));
  EXPECT_THAT(f.victims, ElementsAre(0));
  EXPECT_EQ(f.function_key, "/tmp/hangcheck/h.py:20 forward");
  EXPECT_THAT(f.title, HasSubstr("rank 1 hangs in h.py:20 forward while rank 0 waits in "
                                 "backward (DDP gradient all-reduce)"));
}

TEST(HangAnalyzerTest, DdpBackwardAndWrappedBarrierCountAsWaiting) {
  HangAnalyzer h;
  h.AddRank(0, kWaitingInDdpBackward, kNow - 2 * kSec);
  h.AddRank(1, kStuckInDataLoader, kNow - 2 * kSec);
  h.AddRank(2, kWaitingInBarrierWrapped, kNow - 2 * kSec);
  const Finding f = h.Analyze(kNow);
  EXPECT_THAT(f.workers, ElementsAre(1));
  EXPECT_THAT(f.victims, ElementsAre(0, 2));
  EXPECT_EQ(f.resource, "data loader");
  EXPECT_EQ(f.function, "main");  // the innermost user frame: `for batch in loader`
  EXPECT_THAT(f.title, HasSubstr("rank 1 hangs in train.py:110 main while"));
  EXPECT_THAT(f.title, HasSubstr("rank 0 waits in backward (DDP gradient all-reduce)"));
  EXPECT_THAT(f.title, HasSubstr("rank 2 waits in barrier"));
  std::string all;
  for (const auto& e : f.evidence) all += e.label + ": " + e.value + "\n";
  EXPECT_THAT(all, HasSubstr("innermost frame: /usr/lib/python3.11/multiprocessing/"
                             "connection.py:257 poll"));
  EXPECT_THAT(all, HasSubstr("collective mismatch"));  // two ranks wait in different ones
}

TEST(HangAnalyzerTest, MissingStacksWhileOthersWaitNameTheSilentRank) {
  HangAnalyzer h;
  h.AddRank(0, kWaitingInAllReduce, kNow - 6 * kSec);
  h.AddRank(1, std::nullopt, kNow - 7 * kSec);
  h.AddRank(2, kWaitingInAllReduce, kNow - 6 * kSec);
  h.AddRank(3, std::string("not a stack\n"), kNow - 6 * kSec);
  const Finding f = h.Analyze(kNow);
  EXPECT_THAT(f.workers, ElementsAre(1, 3));
  EXPECT_THAT(f.victims, ElementsAre(0, 2));
  EXPECT_THAT(f.title, HasSubstr("ranks 1, 3 sent no Python stacks while ranks 0, 2 wait in "
                                 "all_reduce"));
  std::string all;
  for (const auto& e : f.evidence) all += e.label + ": " + e.value + "\n";
  EXPECT_THAT(all, HasSubstr("rank 1: no stacks received"));
  EXPECT_THAT(all, HasSubstr("rank 3: stacks unreadable"));
}

TEST(HangAnalyzerTest, AllWaitingFallsBackToEarliestLastProgress) {
  HangAnalyzer h;
  h.AddRank(0, kWaitingInAllReduce, kNow - 5 * kSec);
  h.AddRank(1, kWaitingInAllReduce, kNow - 5 * kSec);
  h.AddRank(2, kWaitingInAllReduce, kNow - 9 * kSec);
  h.AddRank(3, kWaitingInAllReduce, kNow - 5 * kSec);
  const Finding f = h.Analyze(kNow);
  EXPECT_THAT(f.workers, ElementsAre(2));
  EXPECT_THAT(f.victims, ElementsAre(0, 1, 3));
  EXPECT_EQ(f.function, "all_reduce");
  EXPECT_THAT(f.title, HasSubstr("every rank waits in a collective; rank 2 stopped first "
                                 "(earliest last progress)"));
  EXPECT_EQ(f.lost_ns_per_iteration, 9.0 * kSec);
}

TEST(HangAnalyzerTest, NobodyWaitingMeansEveryRankIsStuck) {
  HangAnalyzer h;
  h.AddRank(0, kStuckInDataLoader, kNow - 5 * kSec);
  h.AddRank(1, kStuckInDataLoader, kNow - 5 * kSec);
  const Finding f = h.Analyze(kNow);
  EXPECT_THAT(f.workers, ElementsAre(0, 1));
  EXPECT_THAT(f.victims, IsEmpty());
  EXPECT_THAT(f.title, HasSubstr("the job hangs: ranks 0, 1 are stuck in their own code"));
  HangAnalyzer one;
  one.AddRank(0, kStuckInDataLoader, kNow - 5 * kSec);
  EXPECT_THAT(one.Analyze(kNow).title, HasSubstr("the job hangs: rank 0 is stuck in its own code"));
}

TEST(HangAnalyzerTest, NoInputIsNotACrash) {
  HangAnalyzer h;
  const Finding f = h.Analyze(kNow);
  EXPECT_EQ(f.code, "PT-HANG");
  EXPECT_THAT(f.workers, IsEmpty());
  HangAnalyzer none;
  none.AddRank(0, std::nullopt, 0);
  none.AddRank(1, std::nullopt, 0);
  const Finding g = none.Analyze(kNow);
  EXPECT_THAT(g.workers, IsEmpty());
  EXPECT_THAT(g.title, HasSubstr("no rank sent usable Python stacks and no rank's last "
                                 "progress is known"));
  HangAnalyzer silent;
  silent.AddRank(0, std::nullopt, kNow - 3 * kSec);
  silent.AddRank(1, std::nullopt, kNow - 2 * kSec);
  const Finding s = silent.Analyze(kNow);
  EXPECT_THAT(s.workers, ElementsAre(0));
  EXPECT_THAT(s.title, HasSubstr("no rank sent usable Python stacks; rank 0 stopped first"));
}

// Regression (the first H200 run, torch 2.11, DDP / NCCL, world size 1): after its
// torch.profiler session the job called prof.events(), and torch's post-processing of the
// profile ran for 30+ s in Python, creating FunctionEvent / Interval objects in
// torch/autograd/profiler_util.py. The hang window recorded 71,407 events of rank 0 in
// 1.2 s; perftracker reported "every rank waits in a collective", in "backward (DDP gradient
// all-reduce)". The main thread's stack, as the agent sent it:
const char* const kBusyInProfilerPostProcessing =
    R"(Thread 139710989308672 (MainThread) (most recent call last):
  File "<string>", line 1, in <module>
  File "/usr/lib/python3.12/multiprocessing/spawn.py", line 122, in spawn_main
    exitcode = _main(fd, parent_sentinel)
  File "/usr/lib/python3.12/multiprocessing/spawn.py", line 135, in _main
    return self._bootstrap(parent_sentinel)
  File "/usr/lib/python3.12/multiprocessing/process.py", line 314, in _bootstrap
    self.run()
  File "/usr/lib/python3.12/multiprocessing/process.py", line 108, in run
    self._target(*self._args, **self._kwargs)
  File "/opt/torch/.venv/lib/python3.12/site-packages/torch/multiprocessing/spawn.py", line 87, in _wrap
    fn(i, *args)
  File "/work/main/tests/e2e/live_job.py", line 303, in run_rank
    f"{len(prof.events())} events", file=sys.stderr, flush=True)
  File "/opt/torch/.venv/lib/python3.12/site-packages/torch/profiler/profiler.py", line 375, in events
    return self.profiler.function_events
  File "/opt/torch/.venv/lib/python3.12/site-packages/torch/autograd/profiler.py", line 487, in function_events
    self._ensure_function_events()
  File "/opt/torch/.venv/lib/python3.12/site-packages/torch/autograd/profiler.py", line 458, in _ensure_function_events
    parsed_results = self._parse_kineto_results(
  File "/opt/torch/.venv/lib/python3.12/site-packages/torch/autograd/profiler.py", line 665, in _parse_kineto_results
    fe = FunctionEvent(
  File "/opt/torch/.venv/lib/python3.12/site-packages/torch/autograd/profiler_util.py", line 649, in __init__
    self.time_range: Interval = Interval(start_us, end_us)
  File "/opt/torch/.venv/lib/python3.12/site-packages/torch/autograd/profiler_util.py", line 538, in __init__
    def __init__(self, start, end):
)";

// A window summary of `window_ns` whose Python call paths are `paths` (each: its frames'
// names from the root down, the leaf's call count; the frames above the leaf once each,
// as the hook closes the frames that stayed open at the window's end).
WorkerSummary WindowOf(int64_t window_ns,
                       const std::vector<std::pair<std::vector<std::string>, uint64_t>>& paths) {
  WorkerSummary s;
  s.window_start_ns = kNow - window_ns;
  s.window_end_ns = kNow;
  for (const auto& [frames, count] : paths) {
    uint32_t parent = FunctionSummary::kNoParent;
    for (size_t i = 0; i < frames.size(); ++i) {
      uint32_t found = FunctionSummary::kNoParent;
      for (uint32_t j = 0; j < s.functions.size(); ++j) {
        if (s.functions[j].parent == parent && s.functions[j].name.view() == frames[i]) found = j;
      }
      if (found == FunctionSummary::kNoParent) {
        FunctionSummary f;
        f.kind = EventKind::kPythonCall;
        f.name = frames[i];
        f.parent = parent;
        f.count = 1;
        s.functions.push_back(f);
        found = static_cast<uint32_t>(s.functions.size() - 1);
      }
      if (i + 1 == frames.size()) s.functions[found].count = count;
      parent = found;
    }
  }
  return s;
}

const std::vector<std::string> kProfilerPath = {"<module> (<string>:1)",
                                                "spawn_main (spawn.py:98)",
                                                "_main (spawn.py:126)",
                                                "BaseProcess._bootstrap (process.py:290)",
                                                "BaseProcess.run (process.py:103)",
                                                "_wrap (spawn.py:79)",
                                                "run_rank (live_job.py:251)",
                                                "_KinetoProfile.events (profiler.py:368)",
                                                "profile.function_events (profiler.py:484)",
                                                "profile._ensure_function_events (profiler.py:449)",
                                                "profile._parse_kineto_results (profiler.py:578)",
                                                "FunctionEvent.__init__ (profiler_util.py:612)",
                                                "Interval.__init__ (profiler_util.py:538)"};

TEST(HangAnalyzerTest, ProfilerPostProcessingUnderTorchAutogradIsNoBackwardWait) {
  // Without a window summary the stack alone decides: the profiler's Python code under
  // torch/autograd is the rank's own work, not autograd's engine waiting for DDP.
  HangAnalyzer h;
  h.AddRank(0, kBusyInProfilerPostProcessing, kNow - 31 * kSec);
  const Finding f = h.Analyze(kNow, 32'000'000);
  EXPECT_THAT(f.workers, ElementsAre(0));
  EXPECT_NE(f.function, "backward (DDP gradient all-reduce)");
  EXPECT_EQ(f.resource, "the rank's own code");
  EXPECT_THAT(f.title, Not(HasSubstr("waits in a collective")));
  EXPECT_THAT(f.title, HasSubstr("live_job.py:303 run_rank"));
  // autograd's engine entry points still wait (DDP's all-reduce runs below them).
  HangAnalyzer ddp;
  ddp.AddRank(0, kBusyInProfilerPostProcessing, kNow - 31 * kSec);
  ddp.AddRank(1, kWaitingInDdpBackward, kNow - 31 * kSec);
  const Finding g = ddp.Analyze(kNow);
  EXPECT_THAT(g.workers, ElementsAre(0));
  EXPECT_THAT(g.victims, ElementsAre(1));
  EXPECT_THAT(g.title, HasSubstr("rank 1 waits in backward (DDP gradient all-reduce)"));
}

TEST(HangAnalyzerTest, MainThreadBusyInPythonIsNotAHang) {
  // The H200 case: 71,407 calls of the profiler's post-processing in the 1.2 s window.
  const WorkerSummary window = WindowOf(1'200'000'000, {{kProfilerPath, 71'407}});
  HangAnalyzer h;
  h.AddRank(0, kBusyInProfilerPostProcessing, kNow - 31'300'000'000, &window);
  const std::string busy = h.BusyVerdict(kNow);
  EXPECT_THAT(busy, HasSubstr("rank 0 made no iteration progress for 31.3 s while its main "
                              "thread was busy running Python code, not waiting in a "
                              "collective (71419 calls in the 1.20 s window)"));
  EXPECT_THAT(busy, HasSubstr("profiler.py:665 _parse_kineto_results > profiler_util.py:649 "
                              "__init__ > profiler_util.py:538 __init__ (called from "
                              "live_job.py:303 run_rank)"));
}

TEST(HangAnalyzerTest, BusyRankWhileOthersWaitInACollectiveIsAPauseNotAHang) {
  const WorkerSummary busy_window = WindowOf(2 * kSec, {{kProfilerPath, 9'000}});
  const WorkerSummary waiting_window = WindowOf(2 * kSec, {{{"<module> (train.py:1)"}, 1}});
  HangAnalyzer h;
  h.AddRank(0, kWaitingInAllReduce, kNow - 6 * kSec, &waiting_window);
  h.AddRank(1, kBusyInProfilerPostProcessing, kNow - 6 * kSec, &busy_window);
  const std::string busy = h.BusyVerdict(kNow);
  EXPECT_THAT(busy, HasSubstr("rank 1 made no iteration progress for 6.00 s while its main "
                              "thread was busy"));
  EXPECT_THAT(busy, HasSubstr("; rank 0 waits in all_reduce"));
}

// The window of kStuckInForward's rank: it sleeps in Block2.forward, its open frames are all
// it recorded.
WorkerSummary StuckInForwardWindow() {
  return WindowOf(
      2 * kSec,
      {{{"<module> (train.py:1)", "main (train.py:100)", "Block2.forward (train.py:30)"}, 1}});
}

TEST(HangAnalyzerTest, AStuckRankIsAHangEvenBesideABusyOne) {
  // Rank 3 sleeps in its own code (its open frames are all it recorded): a hang, whatever
  // rank 1 does.
  const WorkerSummary busy_window = WindowOf(2 * kSec, {{kProfilerPath, 9'000}});
  const WorkerSummary stuck_window = StuckInForwardWindow();
  HangAnalyzer h;
  h.AddRank(1, kBusyInProfilerPostProcessing, kNow - 6 * kSec, &busy_window);
  h.AddRank(3, kStuckInForward, kNow - 6 * kSec, &stuck_window);
  EXPECT_EQ(h.BusyVerdict(kNow), "");
}

TEST(HangAnalyzerTest, GenuineDdpHangWithItsWindowIsStillAHang) {
  // The recorded calls of a hung job: the open frames once each, and a pin-memory thread
  // that polls (its calls start at threading's _bootstrap, not in the main thread's stack).
  const WorkerSummary quiet = WindowOf(
      2 * kSec,
      {{{"<module> (h.py:1)", "main (h.py:30)"}, 1},
       {{"Thread._bootstrap (threading.py:990)", "_pin_memory_loop (pin_memory.py:49)"}, 50'000}});
  HangAnalyzer h;
  h.AddRank(0, kRealRank0, kNow - 4 * kSec, &quiet);
  h.AddRank(1, kRealRank1, kNow - 4 * kSec - 30'000'000, &quiet);
  EXPECT_EQ(h.BusyVerdict(kNow), "");
  const Finding f = h.Analyze(kNow, 30'000'000);
  EXPECT_THAT(f.workers, ElementsAre(1));
  EXPECT_THAT(f.victims, ElementsAre(0));
}

TEST(HangAnalyzerTest, BusyPastTheBoundIsAHangNamingTheRankAndWhereItLoops) {
  // An endless Python loop is busy at every look: busy stands in for progress only up to the
  // bound, 10 x the silence that made the hang trigger (3 s here: 30 s).
  EXPECT_EQ(HangAnalyzer::BusyLimitNs(3 * kSec), 30 * kSec);
  EXPECT_EQ(HangAnalyzer::BusyLimitNs(0), 0);
  const WorkerSummary busy_window = WindowOf(2 * kSec, {{kProfilerPath, 9'000}});
  const WorkerSummary waiting_window = WindowOf(2 * kSec, {{{"<module> (train.py:1)"}, 1}});
  auto analyzer = [&](int64_t silence_ns) {
    HangAnalyzer h;
    h.set_busy_limit_ns(HangAnalyzer::BusyLimitNs(3 * kSec));
    h.AddRank(0, kWaitingInAllReduce, kNow - silence_ns, &waiting_window);
    h.AddRank(1, kBusyInProfilerPostProcessing, kNow - silence_ns, &busy_window);
    return h;
  };
  // Within the bound: a pause for work outside the training loop.
  EXPECT_THAT(analyzer(29 * kSec).BusyVerdict(kNow),
              HasSubstr("rank 1 made no iteration progress for 29.0 s while its main thread "
                        "was busy"));
  // Past it: a hang, of its own kind.
  const HangAnalyzer past = analyzer(31 * kSec);
  EXPECT_EQ(past.BusyVerdict(kNow), "");
  const Finding f = past.Analyze(kNow);
  EXPECT_EQ(f.code, "PT-HANG");
  EXPECT_THAT(f.workers, ElementsAre(1));
  EXPECT_THAT(f.victims, ElementsAre(0));
  EXPECT_EQ(f.resource, "the rank's own code (busy: no iteration progress)");
  EXPECT_THAT(f.title, HasSubstr("rank 1 hangs busy: no iteration progress for 31.0 s while its "
                                 "main thread runs Python code in profiler_util.py:649 __init__ "
                                 "> profiler_util.py:538 __init__ (called from live_job.py:303 "
                                 "run_rank), 9012 calls in the 2.00 s window; rank 0 waits in "
                                 "all_reduce"));
  EXPECT_EQ(f.function, "run_rank");
  bool bound = false, loops = false;
  for (const Evidence& e : f.evidence) {
    if (e.label == "busy: no iteration progress") {
      bound = true;
      EXPECT_THAT(e.value, HasSubstr("at most 30.0 s (10x the silence that made the hang "
                                     "trigger)"));
    }
    if (e.label == "where rank 1 loops") {
      loops = true;
      EXPECT_THAT(e.value, HasSubstr("profiler_util.py:538 __init__ (called from live_job.py:303 "
                                     "run_rank)"));
    }
  }
  EXPECT_TRUE(bound && loops);
  // No bound set (a caller that does not know the trigger's silence): busy as before.
  HangAnalyzer unbounded;
  unbounded.AddRank(1, kBusyInProfilerPostProcessing, kNow - 3600 * kSec, &busy_window);
  EXPECT_NE(unbounded.BusyVerdict(kNow), "");
}

TEST(HangAnalyzerTest, AStuckRankLeadsABusyOnePastTheBound) {
  // Rank 3 sleeps (it runs nothing): it is what the others wait for, whatever rank 1 does.
  const WorkerSummary busy_window = WindowOf(2 * kSec, {{kProfilerPath, 9'000}});
  const WorkerSummary stuck_window = StuckInForwardWindow();
  HangAnalyzer h;
  h.set_busy_limit_ns(30 * kSec);
  h.AddRank(1, kBusyInProfilerPostProcessing, kNow - 40 * kSec, &busy_window);
  h.AddRank(3, kStuckInForward, kNow - 40 * kSec, &stuck_window);
  const Finding f = h.Analyze(kNow);
  EXPECT_EQ(f.resource, "the rank's own code");
  EXPECT_THAT(f.title, Not(HasSubstr("busy")));
}

TEST(HangAnalyzerTest, APollingWaitIsNotBusy) {
  // A few hundred calls a second (a loop around a short sleep) wait; they do not run.
  const WorkerSummary polling = WindowOf(2 * kSec, {{kProfilerPath, 400}});
  HangAnalyzer h;
  h.AddRank(0, kBusyInProfilerPostProcessing, kNow - 31 * kSec, &polling);
  EXPECT_EQ(h.BusyVerdict(kNow), "");
}

}  // namespace
}  // namespace perftracker
