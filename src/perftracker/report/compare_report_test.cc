// The comparison reports, and the round trip a report JSON makes into `perftracker compare`:
// the `functions` table and the iteration spread RenderJson writes are what
// compare::ReadReportJson reads, so comparing two reports equals comparing their summaries.
#include "perftracker/report/compare_report.h"

#include <cstdint>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "perftracker/compare/report_json_reader.h"
#include "perftracker/compare/run_comparer.h"
#include "perftracker/report/report.h"

namespace perftracker {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

constexpr int64_t kMs = 1'000'000;
constexpr int kIterations = 10;

// A worker: step > {block1, block2 (> addmm)}, iterations of 40 ms +- `jitter_ms`.
WorkerSummary MakeWorker(int32_t rank, double block2_ms, std::string block2_name = "block2") {
  WorkerSummary w;
  w.rank = rank;
  w.host = "node0";
  int64_t t = 0;
  for (int i = 0; i < kIterations; ++i) {
    IterationSummary it;
    it.start_ns = t;
    it.duration_ns = (40 + block2_ms - 12 + (i % 3) * 0.2) * kMs;
    t += it.duration_ns;
    w.iterations.push_back(it);
  }
  w.window_end_ns = t;
  auto add = [&](std::string name, EventKind kind, uint32_t parent, double ms, double self_ms) {
    FunctionSummary f;
    f.name = std::move(name);
    f.kind = kind;
    f.parent = parent;
    f.count = kIterations;
    f.total_ns = static_cast<int64_t>(ms * kMs * kIterations);
    f.self_ns = static_cast<int64_t>(self_ms * kMs * kIterations);
    w.functions.push_back(std::move(f));
    return static_cast<uint32_t>(w.functions.size() - 1);
  };
  const uint32_t step = add("train.py(9): step", EventKind::kPythonCall, FunctionSummary::kNoParent,
                            28 + block2_ms, 4);
  const uint32_t b1 = add("block1", EventKind::kUserAnnotation, step, 12, 1);
  add("aten::addmm", EventKind::kTorchOp, b1, 11, 11);
  const uint32_t b2 = add(block2_name, EventKind::kUserAnnotation, step, block2_ms, 1);
  add("aten::addmm", EventKind::kTorchOp, b2, block2_ms - 1, block2_ms - 1);
  add("gloo:all_reduce", EventKind::kCollective, step, 12, 12);
  add("aten::tiny", EventKind::kTorchOp, step, 0.01, 0.01);  // under 0.5 %: not in the table
  return w;
}

std::string ReportJson(const std::vector<WorkerSummary>& workers) {
  Diagnosis d;
  d.num_workers = static_cast<int32_t>(workers.size());
  ReportInput input;
  input.diagnosis = &d;
  input.workers = &workers;
  input.title = "run";
  return RenderJson(input);
}

compare::Comparison CompareSummaries(const std::vector<WorkerSummary>& base,
                                     const std::vector<WorkerSummary>& cur) {
  compare::CallPathTree tree;
  compare::RunProfile b(&tree, "base");
  compare::RunProfile c(&tree, "cur");
  for (const auto& w : base) b.AddSummary(w);
  for (const auto& w : cur) c.AddSummary(w);
  StatusOr<compare::Comparison> result = compare::RunComparer().Compare(b, c);
  EXPECT_TRUE(result.ok()) << result.status().message();
  return result.ok() ? *result : compare::Comparison{};
}

TEST(CompareReport, TheReportJsonCarriesWhatCompareReads) {
  std::vector<WorkerSummary> workers{MakeWorker(0, 12), MakeWorker(1, 12)};
  const nlohmann::json j = nlohmann::json::parse(ReportJson(workers));
  ASSERT_EQ(j["workers"].size(), 2u);
  EXPECT_GT(j["workers"][0]["iteration_spread_ms"].get<double>(), 0);
  std::vector<std::string> keys;
  for (const auto& f : j["functions"]) keys.push_back(f["key"]);
  EXPECT_THAT(keys, ::testing::Contains("python:train.py(9): step > annotation:block2 > "
                                        "torch_op:aten::addmm"));
  EXPECT_THAT(keys, Not(::testing::Contains(HasSubstr("aten::tiny"))));
  for (const auto& f : j["functions"]) {
    if (f["key"] == "python:train.py(9): step > annotation:block2") {
      EXPECT_EQ(f["name"], "block2");
      EXPECT_EQ(f["kind"], "annotation");
      EXPECT_EQ(f["ms_per_iteration"], nlohmann::json({12.0, 12.0}));
      EXPECT_EQ(f["self_ms_per_iteration"], nlohmann::json({1.0, 1.0}));
      EXPECT_EQ(f["calls_per_iteration"], nlohmann::json({1.0, 1.0}));
    }
  }
}

TEST(CompareReport, TwoReportsCompareLikeTheirSummaries) {
  std::vector<WorkerSummary> base{MakeWorker(0, 12), MakeWorker(1, 12)};
  std::vector<WorkerSummary> slow{MakeWorker(0, 30), MakeWorker(1, 30)};
  const compare::Comparison direct = CompareSummaries(base, slow);

  compare::CallPathTree tree;
  compare::RunProfile b(&tree, "base.json");
  compare::RunProfile c(&tree, "slow.json");
  ASSERT_TRUE(compare::ReadReportJson(ReportJson(base), "base.json", &b).ok());
  ASSERT_TRUE(compare::ReadReportJson(ReportJson(slow), "slow.json", &c).ok());
  StatusOr<compare::Comparison> via_json = compare::RunComparer().Compare(b, c);
  ASSERT_TRUE(via_json.ok()) << via_json.status().message();

  const compare::Comparison& from_json = *via_json;
  for (const compare::Comparison* cmp : {&direct, &from_json}) {
    ASSERT_EQ(cmp->changes.size(), 1u);
    EXPECT_EQ(cmp->changes[0].function, "block2");
    EXPECT_EQ(cmp->changes[0].time_goes_into, "aten::addmm");
    EXPECT_NEAR(cmp->changes[0].delta_ns, 18 * kMs, 1000);
  }
  EXPECT_NEAR(direct.median_bar_ns, via_json->median_bar_ns, 1000);
  EXPECT_NEAR(direct.shared_scale, via_json->shared_scale, 1e-6);
}

TEST(CompareReport, TextJsonAndHtmlSayTheSameAndEscapeNames) {
  std::vector<WorkerSummary> base{MakeWorker(0, 12, "<script>x</script>")};
  std::vector<WorkerSummary> slow{MakeWorker(0, 30, "<script>x</script>")};
  const compare::Comparison c = CompareSummaries(base, slow);
  const std::string verdict = ComparisonVerdict(c);
  EXPECT_EQ(verdict,
            "<script>x</script> is slower on rank 0: +18.0 ms per iteration (12.0 ms -> 30.0 ms)");
  EXPECT_THAT(RenderComparisonText(c), HasSubstr(verdict));
  const nlohmann::json j = nlohmann::json::parse(RenderComparisonJson(c));
  EXPECT_EQ(j["kind"], "comparison");
  EXPECT_EQ(j["verdict"], verdict);
  EXPECT_TRUE(j["has_material_change"].get<bool>());
  EXPECT_EQ(j["changes"][0]["direction"], "slower");
  EXPECT_EQ(j["changes"][0]["workers"], nlohmann::json({0}));
  EXPECT_DOUBLE_EQ(j["changes"][0]["delta_ms_per_iteration"].get<double>(), 18.0);
  const std::string html = RenderComparisonHtml(c);
  EXPECT_THAT(html, Not(HasSubstr("<script>x")));
  EXPECT_THAT(html, HasSubstr("&lt;script&gt;x&lt;/script&gt; is slower"));
  EXPECT_THAT(html, Not(HasSubstr("http")));  // self-contained
}

TEST(CompareReport, NoChangeSaysSoWithTheBar) {
  std::vector<WorkerSummary> base{MakeWorker(0, 12), MakeWorker(1, 12)};
  const compare::Comparison c = CompareSummaries(base, base);
  EXPECT_FALSE(c.has_material_change());
  EXPECT_THAT(ComparisonVerdict(c), HasSubstr("no material change: iteration 40."));
  const nlohmann::json j = nlohmann::json::parse(RenderComparisonJson(c));
  EXPECT_FALSE(j["has_material_change"].get<bool>());
  EXPECT_EQ(j["changes"].size(), 0u);
  EXPECT_THAT(RenderComparisonHtml(c), HasSubstr("id=\"no-change\""));
}

}  // namespace
}  // namespace perftracker
