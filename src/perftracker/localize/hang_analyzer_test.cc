#include "perftracker/localize/hang_analyzer.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "perftracker/localize/finding_catalogue.h"

namespace perftracker {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

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

}  // namespace
}  // namespace perftracker
