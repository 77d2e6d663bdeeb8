// Trace schemas other than current Kineto's, through the importer and the offline
// summarizer: the 2021 category names, Chrome-trace "B"/"E" pairs, and iteration markers
// on the GPU side only.
#include <gtest/gtest.h>

#include <string>
#include <string_view>

#include "perftracker/sources/kineto/kineto_importer.h"
#include "perftracker/summary/window_summarizer.h"

namespace perftracker {
namespace {

WorkerSummary Summarize(std::string_view text) {
  FunctionTable functions;
  SummarizerOptions options;
  options.offline = true;
  WindowSummarizer summarizer(&functions, options);
  KinetoImportOptions import_options;
  import_options.rank = 0;
  KinetoImporter importer("trace.json", &functions, &summarizer, import_options);
  EXPECT_TRUE(importer.Parse(text.data(), text.size()).ok());
  StatusOr<KinetoTraceInfo> info = importer.Finish();
  EXPECT_TRUE(info.ok()) << info.status().message();
  if (info.ok()) {
    EXPECT_EQ(info->events_malformed, 0u) << info->first_malformed;
  }
  return summarizer.Finish();
}

const FunctionSummary* Find(const WorkerSummary& s, std::string_view key) {
  for (size_t i = 0; i < s.functions.size(); ++i)
    if (s.KeyIs(i, key)) return &s.functions[i];
  return nullptr;
}

std::string Keys(const WorkerSummary& s) {
  std::string all;
  for (size_t i = 0; i < s.functions.size(); ++i) all += "  " + s.Key(i) + "\n";
  return all;
}

// What torch <= 1.9 wrote (the tb_plugin ResNet-50 samples): "Operator", "Runtime",
// "Kernel", "Memcpy", "Memset"; ProfilerStep#N is an "Operator". Written in Kineto's file
// order: host ops, then runtime calls, then the GPU's activity.
constexpr std::string_view k2021Trace = R"JSON({
  "schemaVersion": 1,
  "traceEvents": [
  {"ph": "X", "cat": "Operator", "name": "ProfilerStep#3", "pid": 10, "tid": 10, "ts": 1000, "dur": 1000},
  {"ph": "X", "cat": "Operator", "name": "aten::conv2d", "pid": 10, "tid": 10, "ts": 1100, "dur": 300},
  {"ph": "X", "cat": "Operator", "name": "ProfilerStep#4", "pid": 10, "tid": 10, "ts": 2000, "dur": 1000},
  {"ph": "X", "cat": "Operator", "name": "aten::conv2d", "pid": 10, "tid": 10, "ts": 2100, "dur": 300},
  {"ph": "X", "cat": "Runtime", "name": "cudaLaunchKernel", "pid": 10, "tid": 10, "ts": 1150, "dur": 10, "args": {"correlation": 1}},
  {"ph": "X", "cat": "Runtime", "name": "cudaMemcpyAsync", "pid": 10, "tid": 10, "ts": 1500, "dur": 10, "args": {"correlation": 2}},
  {"ph": "X", "cat": "Runtime", "name": "cudaLaunchKernel", "pid": 10, "tid": 10, "ts": 2150, "dur": 10, "args": {"correlation": 3}},
  {"ph": "X", "cat": "Kernel", "name": "implicit_convolve_sgemm", "pid": 0, "tid": "stream 7", "ts": 1200, "dur": 400, "args": {"device": 0, "stream": 7, "correlation": 1}},
  {"ph": "X", "cat": "Memcpy", "name": "Memcpy HtoD (Pinned -> Device)", "pid": 0, "tid": "stream 7", "ts": 1700, "dur": 50, "args": {"device": 0, "stream": 7, "correlation": 2, "bytes": 1048576}},
  {"ph": "X", "cat": "Memset", "name": "Memset (Device)", "pid": 0, "tid": "stream 7", "ts": 1800, "dur": 5, "args": {"device": 0, "stream": 7, "bytes": 256}},
  {"ph": "X", "cat": "Kernel", "name": "implicit_convolve_sgemm", "pid": 0, "tid": "stream 7", "ts": 2200, "dur": 400, "args": {"device": 0, "stream": 7, "correlation": 3}}
  ]
})JSON";

TEST(KinetoSchemaTest, The2021SchemaImportsItsGpuWorkAndIterations) {
  const WorkerSummary s = Summarize(k2021Trace);
  EXPECT_TRUE(s.has_device);
  ASSERT_EQ(s.iterations.size(), 2u);
  EXPECT_EQ(s.iterations[0].duration_ns, 1'000'000);
  // Kernels ran 400 µs of each 1000 µs step (the time grid's bins are ~0.5 µs wide here).
  EXPECT_NEAR(s.iterations[0].compute_ns, 400'000, 1'000);
  const FunctionSummary* k = Find(s, "kernel:implicit_convolve_sgemm");
  ASSERT_NE(k, nullptr) << Keys(s);
  EXPECT_EQ(k->count, 2u);
  const FunctionSummary* copy = Find(s, "memcpy:Memcpy HtoD (Pinned -> Device)");
  ASSERT_NE(copy, nullptr) << Keys(s);
  EXPECT_EQ(copy->bytes, 1048576u);
  const FunctionSummary* memset = Find(s, "memset:Memset (Device)");
  ASSERT_NE(memset, nullptr) << Keys(s);
  EXPECT_EQ(memset->bytes, 256u);
  const FunctionSummary* launch = Find(s, "launch:cudaLaunchKernel");
  ASSERT_NE(launch, nullptr) << Keys(s);
  EXPECT_EQ(launch->count, 2u);
  EXPECT_EQ(s.stats.out_of_order_events, 0u);
}

// The same nesting written twice: as complete events, and as "B"/"E" pairs (which other
// tools write; the importer emits each slice at its "E", i.e. children before parents).
constexpr std::string_view kCompleteTrace = R"JSON({"traceEvents": [
  {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": 1, "tid": 1, "ts": 0, "dur": 100},
  {"ph": "X", "cat": "user_annotation", "name": "forward", "pid": 1, "tid": 1, "ts": 0, "dur": 60},
  {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 10, "dur": 20},
  {"ph": "X", "cat": "cpu_op", "name": "aten::add", "pid": 1, "tid": 1, "ts": 35, "dur": 5},
  {"ph": "X", "cat": "user_annotation", "name": "backward", "pid": 1, "tid": 1, "ts": 60, "dur": 40},
  {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 70, "dur": 25}
]})JSON";
constexpr std::string_view kBeginEndTrace = R"JSON({"traceEvents": [
  {"ph": "B", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": 1, "tid": 1, "ts": 0},
  {"ph": "B", "cat": "user_annotation", "name": "forward", "pid": 1, "tid": 1, "ts": 0},
  {"ph": "B", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 10},
  {"ph": "E", "pid": 1, "tid": 1, "ts": 30},
  {"ph": "B", "cat": "cpu_op", "name": "aten::add", "pid": 1, "tid": 1, "ts": 35},
  {"ph": "E", "pid": 1, "tid": 1, "ts": 40},
  {"ph": "E", "pid": 1, "tid": 1, "ts": 60},
  {"ph": "B", "cat": "user_annotation", "name": "backward", "pid": 1, "tid": 1, "ts": 60},
  {"ph": "B", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 70},
  {"ph": "E", "pid": 1, "tid": 1, "ts": 95},
  {"ph": "E", "pid": 1, "tid": 1, "ts": 100},
  {"ph": "E", "pid": 1, "tid": 1, "ts": 100}
]})JSON";

std::string Describe(const WorkerSummary& s) {
  std::string out;
  for (size_t i = 0; i < s.functions.size(); ++i) {
    const FunctionSummary& f = s.functions[i];
    out += s.Key(i) + " n=" + std::to_string(f.count) + " total=" + std::to_string(f.total_ns) +
           " self=" + std::to_string(f.self_ns) + "\n";
  }
  for (const auto& it : s.iterations) {
    out += "iteration " + std::to_string(it.start_ns) + "+" + std::to_string(it.duration_ns) + "\n";
  }
  return out;
}

TEST(KinetoSchemaTest, BeginEndPairsImportLikeCompleteEvents) {
  const WorkerSummary complete = Summarize(kCompleteTrace);
  const WorkerSummary pairs = Summarize(kBeginEndTrace);
  EXPECT_EQ(pairs.stats.out_of_order_events, 0u);
  EXPECT_EQ(Describe(pairs), Describe(complete));
  const FunctionSummary* mm = Find(pairs, "annotation:forward > torch_op:aten::mm");
  ASSERT_NE(mm, nullptr) << Keys(pairs);
  EXPECT_EQ(mm->total_ns, 20'000);
  const FunctionSummary* fwd = Find(pairs, "annotation:forward");
  ASSERT_NE(fwd, nullptr) << Keys(pairs);
  EXPECT_EQ(fwd->self_ns, 60'000 - 20'000 - 5'000);
  ASSERT_EQ(pairs.iterations.size(), 1u);
  EXPECT_EQ(pairs.iterations[0].duration_ns, 100'000);
}

// Iterations marked only on the GPU (gpu_user_annotation "ProfilerStep#N", the twin Kineto
// writes on the stream): found there, and not part of any kernel's identity.
constexpr std::string_view kGpuMarkedTrace = R"JSON({"traceEvents": [
  {"ph": "X", "cat": "gpu_user_annotation", "name": "ProfilerStep#5", "pid": 0, "tid": 7, "ts": 0, "dur": 500, "args": {"device": 0, "stream": 7}},
  {"ph": "X", "cat": "gpu_user_annotation", "name": "ProfilerStep#6", "pid": 0, "tid": 7, "ts": 500, "dur": 700, "args": {"device": 0, "stream": 7}},
  {"ph": "X", "cat": "kernel", "name": "gemm", "pid": 0, "tid": 7, "ts": 100, "dur": 300, "args": {"device": 0, "stream": 7}},
  {"ph": "X", "cat": "kernel", "name": "gemm", "pid": 0, "tid": 7, "ts": 600, "dur": 500, "args": {"device": 0, "stream": 7}}
]})JSON";

TEST(KinetoSchemaTest, IterationsMarkedOnlyOnTheGpuAreFound) {
  const WorkerSummary s = Summarize(kGpuMarkedTrace);
  ASSERT_EQ(s.iterations.size(), 2u);
  EXPECT_EQ(s.iterations[0].duration_ns, 500'000);
  EXPECT_EQ(s.iterations[1].duration_ns, 700'000);
  EXPECT_NEAR(s.iterations[1].compute_ns, 500'000, 1'000);
  const FunctionSummary* k = Find(s, "kernel:gemm");
  ASSERT_NE(k, nullptr) << Keys(s);
  EXPECT_EQ(k->count, 2u);
}

TEST(KinetoSchemaTest, HostMarkersWinOverTheirGpuTwins) {
  // Both sides mark the same two steps: two iterations (the host's spans), not four.
  std::string text(kGpuMarkedTrace);
  text.insert(text.find('[') + 1, R"JSON(
  {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#5", "pid": 1, "tid": 1, "ts": 0, "dur": 450},
  {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#6", "pid": 1, "tid": 1, "ts": 450, "dur": 600},)JSON");
  const WorkerSummary s = Summarize(text);
  ASSERT_EQ(s.iterations.size(), 2u);
  EXPECT_EQ(s.iterations[0].duration_ns, 450'000);
  EXPECT_EQ(s.iterations[1].duration_ns, 600'000);
}

}  // namespace
}  // namespace perftracker
