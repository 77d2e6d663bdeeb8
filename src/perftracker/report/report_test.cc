#include "perftracker/report/report.h"

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "perftracker/localize/pipeline_slack.h"
#include "perftracker/report/format.h"

namespace perftracker {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

constexpr int64_t kMs = 1'000'000;
constexpr int kIterations = 10;
const std::string kBlock2Key = "python:train.py(88): train > python:model.py(40): forward > "
                               "python:model.py(61): block2";
const std::string kKernel = "void at::native::(anonymous namespace)::vectorized_elementwise"
                            "_kernel<4, at::native::CUDAFunctor_add<float>, at::detail::Array"
                            "<char*, 3> >(int, float, char*)";

std::vector<std::string> Lines(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string l; std::getline(in, l);) lines.push_back(l);
  return lines;
}

void AddFunction(WorkerSummary* w, std::string key, std::string name, EventKind kind,
                 double ms_per_iteration) {
  FunctionSummary f;
  f.key = std::move(key);
  f.name = std::move(name);
  f.kind = kind;
  f.count = kIterations;
  f.total_ns = static_cast<int64_t>(ms_per_iteration * kMs * kIterations);
  f.self_ns = f.total_ns;
  f.durations.Add(ms_per_iteration * kMs, kIterations);
  w->functions.push_back(std::move(f));
}

// A data-parallel job: every worker runs block1..block3 and an all-reduce; the straggler's
// block2 takes twice as long and everyone else waits for it in the all-reduce.
WorkerSummary MakeWorker(int32_t rank, int32_t straggler, int extra_functions = 6) {
  const bool slow = rank == straggler;
  const double jitter = 0.02 * ((rank * 7) % 5) - 0.04;  // +-4%, deterministic
  const double block2 = slow ? 25.6 : 12.8 * (1 + jitter);
  // Synchronous training: everyone leaves the all-reduce together, after the slowest
  // worker's block2 and a 2 ms transfer, so all iterations take the same time.
  const double slowest_block2 = straggler >= 0 ? 25.6 : 12.8 * 1.04;
  const double allreduce = 2.0 + (slowest_block2 - block2);
  const double iteration = 7.9 + block2 + 9.6 + allreduce + 1.1;
  WorkerSummary w;
  w.rank = rank;
  w.host = "node" + std::to_string(rank / 8);
  w.source = "traces/rank-" + std::to_string(rank) + ".json.gz";
  w.has_device = true;
  w.window_start_ns = 0;
  w.window_end_ns = static_cast<int64_t>(iteration * kMs * kIterations);
  for (int i = 0; i < kIterations; ++i) {
    IterationSummary it;
    it.start_ns = static_cast<int64_t>(i * iteration * kMs);
    it.duration_ns = static_cast<int64_t>(iteration * kMs);
    it.compute_ns = static_cast<int64_t>((7.9 + block2 + 9.6) * kMs);
    it.communication_ns = static_cast<int64_t>(allreduce * kMs);
    it.wait_ns = static_cast<int64_t>((allreduce - 2.0) * kMs);
    it.data_ns = static_cast<int64_t>(1.1 * kMs);
    w.iterations.push_back(it);
  }
  const std::string fwd = "python:train.py(88): train > python:model.py(40): forward > ";
  AddFunction(&w, fwd + "python:model.py(55): block1", "block1", EventKind::kPythonCall, 7.9);
  AddFunction(&w, kBlock2Key, "block2", EventKind::kPythonCall, block2);
  AddFunction(&w, fwd + "python:model.py(67): block3", "block3", EventKind::kPythonCall, 9.6);
  AddFunction(&w, "collective:gloo:all_reduce", "gloo:all_reduce", EventKind::kCollective,
              allreduce);
  AddFunction(&w, "kernel:" + kKernel, kKernel, EventKind::kGpuKernel, 3.3 * (1 + jitter));
  AddFunction(&w, "iteration:ProfilerStep", "ProfilerStep", EventKind::kIteration, iteration);
  for (int i = 0; i < extra_functions; ++i) {
    AddFunction(&w, "op:aten::op" + std::to_string(i), "aten::op" + std::to_string(i),
                EventKind::kTorchOp, 0.05 * (i % 10 + 1) * (1 + jitter));
  }
  return w;
}

std::vector<WorkerSummary> MakeWorkers(int32_t n, int32_t straggler, int extra_functions = 6) {
  std::vector<WorkerSummary> workers;
  for (int32_t r = 0; r < n; ++r) workers.push_back(MakeWorker(r, straggler, extra_functions));
  return workers;
}

Finding StragglerFinding(int32_t straggler, int32_t num_workers) {
  Finding f;
  f.code = "PT-STRAGGLER-FUNCTION";
  f.category = FindingCategory::kCompute;
  f.title = "block2 takes 2.0x its peers on rank " + std::to_string(straggler);
  f.workers = {straggler};
  for (int32_t r = 0; r < num_workers; ++r) {
    if (r != straggler) f.victims.push_back(r);
  }
  f.function = "block2";
  f.function_key = kBlock2Key;
  f.resource = "CPU";
  f.lost_ns_per_iteration = 12.8 * kMs;
  f.lost_share = 0.277;
  f.material = true;
  f.evidence = {{"p50 duration on rank " + std::to_string(straggler), "25.6 ms"},
                {"median p50 of peers", "12.8 ms"},
                {"robust z-score", "41.0"},
                {"CPU run-queue delay during block2", "2%"},
                {"GPU SM activity during block2", "12%"}};
  return f;
}

Diagnosis StragglerDiagnosis(int32_t num_workers = 4, int32_t straggler = 2) {
  Diagnosis d;
  d.num_workers = num_workers;
  d.median_iteration_ns = 46.2 * kMs;
  d.findings.push_back(StragglerFinding(straggler, num_workers));
  Finding gc;
  gc.code = "PT-GC-PAUSE";
  gc.category = FindingCategory::kGc;
  gc.title = "garbage-collector pauses on the critical path";
  gc.function = "gc:collect";
  gc.resource = "CPU";
  gc.lost_ns_per_iteration = 0.4 * kMs;
  gc.lost_share = 0.0097;
  gc.evidence = {{"pauses per iteration", "1.2"}};
  d.findings.push_back(gc);
  d.notes = {"skipped traces/rank-9.json.gz: not a Kineto trace (no traceEvents)"};
  return d;
}

Diagnosis HealthyDiagnosis(int32_t num_workers = 4) {
  Diagnosis d;
  d.num_workers = num_workers;
  d.median_iteration_ns = 41.2 * kMs;
  return d;
}

// ---------------------------------------------------------------------------------------
// JSON

TEST(JsonReportTest, HasTheDocumentedSchemaAndValues) {
  const Diagnosis d = StragglerDiagnosis();
  const auto workers = MakeWorkers(4, 2);
  const auto j = nlohmann::json::parse(RenderJson({&d, &workers, "traces/"}));
  EXPECT_EQ(j["schema_version"], 1);
  EXPECT_EQ(j["title"], "traces/");
  EXPECT_EQ(j["num_workers"], 4);
  EXPECT_DOUBLE_EQ(j["median_iteration_ms"].get<double>(), 46.2);
  EXPECT_EQ(j["has_material_finding"], true);
  EXPECT_THAT(j["verdict"].get<std::string>(), HasSubstr("rank 2 is the straggler"));
  ASSERT_EQ(j["findings"].size(), 2u);
  const auto& f = j["findings"][0];
  EXPECT_EQ(f["code"], "PT-STRAGGLER-FUNCTION");
  EXPECT_EQ(f["category"], "compute");
  EXPECT_EQ(f["workers"], nlohmann::json::array({2}));
  EXPECT_EQ(f["victims"], nlohmann::json::array({0, 1, 3}));
  EXPECT_EQ(f["victims_wait_in"], "gloo:all_reduce");
  EXPECT_EQ(f["function"], "block2");
  EXPECT_EQ(f["function_key"], kBlock2Key);
  EXPECT_EQ(f["resource"], "CPU");
  EXPECT_DOUBLE_EQ(f["lost_ms_per_iteration"].get<double>(), 12.8);
  EXPECT_DOUBLE_EQ(f["lost_share"].get<double>(), 0.277);
  EXPECT_EQ(f["material"], true);
  ASSERT_EQ(f["evidence"].size(), 5u);
  EXPECT_EQ(f["evidence"][0]["label"], "p50 duration on rank 2");
  EXPECT_EQ(f["evidence"][0]["value"], "25.6 ms");
  EXPECT_EQ(j["findings"][1]["material"], false);
  EXPECT_EQ(j["findings"][1]["workers"], nlohmann::json::array());
  ASSERT_EQ(j["notes"].size(), 1u);
  EXPECT_EQ(j["data_quality"], nlohmann::json::array());  // clean data

  ASSERT_EQ(j["workers"].size(), 4u);
  const auto& w2 = j["workers"][2];
  EXPECT_EQ(w2["rank"], 2);
  EXPECT_EQ(w2["source"], "traces/rank-2.json.gz");
  EXPECT_EQ(w2["role"], "culprit");
  EXPECT_EQ(j["workers"][0]["role"], "victim");
  EXPECT_EQ(w2["iterations"], kIterations);
  EXPECT_NEAR(w2["median_iteration_ms"].get<double>(), 46.2, 1e-3);
  const auto& b = w2["breakdown"];
  for (const char* part : {"compute", "communication", "wait", "data", "host_only"}) {
    ASSERT_TRUE(b.contains(part)) << part;
    EXPECT_GE(b[part].get<double>(), 0);
    EXPECT_LE(b[part].get<double>(), 1);
  }
  EXPECT_NEAR(b["compute"].get<double>(), (7.9 + 25.6 + 9.6) / 46.2, 1e-3);
  EXPECT_NEAR(j["workers"][0]["breakdown"]["wait"].get<double>(), (25.6 - 12.8 * 0.96) / 46.2,
              1e-3);
}

// Every data-quality counter reaches the JSON: in each worker's stats by name, and at the
// root with its severity, total and the ranks that counted it.
TEST(JsonReportTest, DataQualityCountersWithTheirSeverity) {
  const Diagnosis d = StragglerDiagnosis();
  auto workers = MakeWorkers(4, 2);
  workers[1].stats.dropped_events = 10;
  workers[3].stats.dropped_events = 5;
  workers[3].stats.names_truncated = 2;
  const auto j = nlohmann::json::parse(RenderJson({&d, &workers, "traces/"}));
  EXPECT_EQ(j["workers"][3]["stats"]["names_truncated"], 2);
  EXPECT_EQ(j["workers"][3]["stats"]["dropped_events"], 5);
  const auto& dq = j["data_quality"];
  ASSERT_EQ(dq.size(), 2u) << dq.dump();
  EXPECT_EQ(dq[0]["counter"], "dropped_events");
  EXPECT_EQ(dq[0]["severity"], "data_loss");
  EXPECT_EQ(dq[0]["total"], 15);
  EXPECT_EQ(dq[0]["workers"], nlohmann::json::array({1, 3}));
  EXPECT_EQ(dq[1]["counter"], "names_truncated");
  EXPECT_EQ(dq[1]["severity"], "info");
  EXPECT_EQ(dq[1]["workers"], nlohmann::json::array({3}));
}

TEST(JsonReportTest, NeverEmitsNanOrInfAndKeepsSharesInRange) {
  Diagnosis d = StragglerDiagnosis();
  d.median_iteration_ns = std::numeric_limits<double>::quiet_NaN();
  d.findings[0].lost_ns_per_iteration = std::numeric_limits<double>::infinity();
  d.findings[0].lost_share = std::numeric_limits<double>::quiet_NaN();
  d.findings[1].lost_share = 3.5;  // a hang can cost more than an iteration; schema: 0..1
  const std::string out = RenderJson({&d, nullptr, ""});
  EXPECT_THAT(out, Not(HasSubstr("NaN")));
  EXPECT_THAT(out, Not(HasSubstr("Infinity")));
  EXPECT_THAT(out, Not(HasSubstr("null")));
  const auto j = nlohmann::json::parse(out);
  EXPECT_EQ(j["median_iteration_ms"], 0);
  EXPECT_EQ(j["findings"][0]["lost_ms_per_iteration"], 0);
  EXPECT_EQ(j["findings"][0]["lost_share"], 0);
  EXPECT_EQ(j["findings"][1]["lost_share"], 1);
  EXPECT_TRUE(j["findings"][0]["lost_share"].is_number());
  EXPECT_EQ(j["workers"], nlohmann::json::array());  // no summaries: present and empty
}

TEST(JsonReportTest, InvalidUtf8AndControlCharactersDoNotBreakIt) {
  Diagnosis d = StragglerDiagnosis();
  d.findings[0].function = "bad\xff\xfe name\x1b[2J";
  d.notes.push_back("\xc3");
  std::string out;
  ASSERT_NO_THROW(out = RenderJson({&d, nullptr, "\xe2\x82"}));
  const auto j = nlohmann::json::parse(out);
  EXPECT_EQ(j["findings"][0]["function"], "bad\uFFFD\uFFFD name[2J");
}

TEST(JsonReportTest, HealthyAndEmptyInputs) {
  const Diagnosis d = HealthyDiagnosis();
  auto j = nlohmann::json::parse(RenderJson({&d, nullptr, ""}));
  EXPECT_EQ(j["has_material_finding"], false);
  EXPECT_EQ(j["findings"], nlohmann::json::array());
  EXPECT_THAT(j["verdict"].get<std::string>(), HasSubstr("no material finding"));
  j = nlohmann::json::parse(RenderJson({nullptr, nullptr, ""}));  // no diagnosis at all
  EXPECT_EQ(j["num_workers"], 0);
}

// ---------------------------------------------------------------------------------------
// Text

void ExpectFits(const std::string& text, size_t width, size_t max_lines) {
  const auto lines = Lines(text);
  EXPECT_LE(lines.size(), max_lines) << text;
  for (const auto& l : lines) EXPECT_LE(report::DisplayWidth(l), width) << "'" << l << "'";
}

TEST(TextReportTest, HeadlineNamesTheTopFindingsRankAndFunction) {
  const Diagnosis d = StragglerDiagnosis();
  const auto workers = MakeWorkers(4, 2);
  const std::string text = RenderText({&d, &workers, "traces/"});
  const auto lines = Lines(text);
  ASSERT_GE(lines.size(), 3u);
  EXPECT_EQ(lines[0].rfind("perftracker: rank 2 is the straggler: block2 takes 2.0x", 0), 0u)
      << text;
  EXPECT_THAT(lines[0] + lines[1], HasSubstr("costing 28% of each"));
  EXPECT_THAT(text, HasSubstr("PT-STRAGGLER-FUNCTION"));
  EXPECT_THAT(text, HasSubstr("12.8 ms per iteration, 28% of iteration time"));
  EXPECT_THAT(text, HasSubstr("ranks 0,1,3 wait for it in gloo:all_reduce"));
  EXPECT_THAT(text, HasSubstr("p50 duration on rank 2"));
  EXPECT_THAT(text, HasSubstr("1 minor finding"));
  EXPECT_THAT(text, HasSubstr("PT-GC-PAUSE"));
  EXPECT_THAT(text, HasSubstr("skipped traces/rank-9.json.gz"));
  EXPECT_THAT(text, HasSubstr("--html FILE"));
  EXPECT_THAT(text, HasSubstr("call path  … > python:model.py(40): forward > python:model.py(61): block2"));
  EXPECT_THAT(text, Not(HasSubstr("\x1b")));  // colour is off by default
  ExpectFits(text, 100, 40);
}

TEST(TextReportTest, VerdictDoesNotRepeatWhatTheTitleSays) {
  Diagnosis d = StragglerDiagnosis();
  d.findings[0].title = "rank 2 spends 63.2 ms/iter in block2, 7.2x its peers (+54.4 ms, 28% of "
                        "the iteration)";
  const auto lines = Lines(RenderText({&d, nullptr, ""}, {.color = false, .width = 200}));
  ASSERT_FALSE(lines.empty());
  EXPECT_EQ(lines[0], "perftracker: rank 2 is the straggler: it spends 63.2 ms/iter in block2, "
                      "7.2x its peers (+54.4 ms, 28% of the iteration)");
}

// A title that already says what the culprit does is the verdict: "rank 1 hangs in ...",
// not "rank 1 hangs: it hangs in ..." (the busy-hang title, 2026-11-27).
TEST(TextReportTest, VerdictDoesNotSayTheCulpritPhraseTwice) {
  Diagnosis d = StragglerDiagnosis();
  d.findings[0].category = FindingCategory::kHang;
  d.findings[0].title =
      "rank 2 hangs busy: no iteration progress for 5.00 min while its main thread runs Python "
      "code in job.py:90 spin_forever";
  const auto lines = Lines(RenderText({&d, nullptr, ""}, {.color = false, .width = 200}));
  ASSERT_FALSE(lines.empty());
  EXPECT_EQ(lines[0].rfind("perftracker: rank 2 hangs busy: no iteration progress for 5.00 min "
                           "while its main thread runs Python code in job.py:90 spin_forever",
                           0),
            0u)
      << lines[0];
}

TEST(TextReportTest, StaysWithinNarrowWidths) {
  const Diagnosis d = StragglerDiagnosis();
  const auto workers = MakeWorkers(4, 2);
  for (int width : {40, 60, 80}) {
    ExpectFits(RenderText({&d, &workers, "a/very/long/path/to/the/traces/of/job-1234/"},
                          {.color = false, .width = width}),
               static_cast<size_t>(width), 45);
  }
}

TEST(TextReportTest, HealthyJobSaysNoMaterialFinding) {
  const Diagnosis d = HealthyDiagnosis(8);
  const auto lines = Lines(RenderText({&d, nullptr, ""}));
  ASSERT_FALSE(lines.empty());
  EXPECT_EQ(lines[0],
            "perftracker: no material finding: the 8 workers behave alike (median iteration "
            "41.2 ms)");
}

// A straggler whose extra time the pipeline bubble absorbs (pipeline_slack.h) is minor and
// costs the job nothing, but the workers do not behave alike: the headline says which one
// is slower and what it costs the job, not the culprit's own excess (issue 11 §3).
Diagnosis AbsorbedStragglerDiagnosis() {
  Diagnosis d = HealthyDiagnosis(8);
  Finding f = StragglerFinding(5, 8);
  f.code = "PT-STRAGGLER-COMPUTE";
  f.title =
      "rank 5 spends 12.0 ms/iter more in block2; absorbed by the pipeline: rank 5 waits "
      "12.0 ms/iter less for another stage, so the job loses 0 ns/iter";
  f.victims.clear();
  f.material = false;
  f.evidence.push_back(
      {std::string(kAbsorbedByPipelineEvidence), "rank 5 waits 12.0 ms/iter less than its peers"});
  f.evidence.push_back({"cost to the job per iteration", "0 ns (0.0% of the iteration)"});
  d.findings.push_back(f);
  return d;
}

TEST(TextReportTest, AnAbsorbedStragglerIsNamedInTheHeadline) {
  const Diagnosis d = AbsorbedStragglerDiagnosis();
  const std::string text = RenderText({&d, nullptr, ""}, {.color = false, .width = 200});
  const std::string headline = Lines(text).at(0);
  EXPECT_THAT(headline, HasSubstr("perftracker: no material finding: rank 5 "));
  EXPECT_THAT(headline, HasSubstr("so the job loses 0 ns/iter"));
  EXPECT_THAT(headline, Not(HasSubstr("behave alike")));
  EXPECT_THAT(headline, Not(HasSubstr("costing")));  // 28% is rank 5's, not the job's
  const std::string html = RenderHtml({&d, nullptr, ""});
  EXPECT_THAT(html, HasSubstr("No material finding"));
  EXPECT_THAT(html, Not(HasSubstr("behave alike")));
}

TEST(TextReportTest, AMinorStragglerIsNamedWithItsCost) {
  Diagnosis d = HealthyDiagnosis(8);
  Finding f = StragglerFinding(3, 8);
  f.title = "block2 takes 1.1x its peers on rank 3";
  f.lost_ns_per_iteration = 1.2 * kMs;
  f.lost_share = 0.029;
  f.material = false;
  d.findings.push_back(f);
  const std::string headline =
      Lines(RenderText({&d, nullptr, ""}, {.color = false, .width = 200})).at(0);
  EXPECT_THAT(headline, HasSubstr("no material finding: rank 3 "));
  EXPECT_THAT(headline, HasSubstr("costing 2.9% of each iteration"));
  EXPECT_THAT(headline, Not(HasSubstr("behave alike")));
}

TEST(TextReportTest, AMinorJobWideFindingStillBehavesAlike) {
  Diagnosis d = StragglerDiagnosis(8);
  d.findings.erase(d.findings.begin());  // only the job-wide GC pauses, minor
  const auto lines = Lines(RenderText({&d, nullptr, ""}, {.color = false, .width = 200}));
  EXPECT_THAT(lines.at(0), HasSubstr("no material finding: the 8 workers behave alike"));
}

TEST(TextReportTest, ColourIsOptionalAndDoesNotCountTowardsWidth) {
  const Diagnosis d = StragglerDiagnosis();
  const std::string text = RenderText({&d, nullptr, ""}, {.color = true, .width = 80});
  EXPECT_THAT(text, HasSubstr("\x1b[1;31m"));
  ExpectFits(text, 80, 40);
}

TEST(TextReportTest, ManyFindingsStillFitOneScreen) {
  Diagnosis d = StragglerDiagnosis(1024, 517);
  for (int i = 0; i < 12; ++i) {
    Finding f = StragglerFinding(100 + i, 1024);
    f.function = kKernel;
    f.function_key = "kernel:" + kKernel;
    f.lost_share = 0.25 - 0.01 * i;
    d.findings.push_back(f);
    Finding minor = d.findings[1];
    d.findings.push_back(minor);
  }
  for (int i = 0; i < 10; ++i) d.notes.push_back("note " + std::to_string(i) + std::string(150, 'x'));
  const std::string text = RenderText({&d, nullptr, ""});
  ExpectFits(text, 100, 40);
  EXPECT_THAT(text, HasSubstr("other material findings"));
  EXPECT_THAT(text, HasSubstr("more notes"));
  EXPECT_THAT(text, HasSubstr("ranks 0-516,518-1023 wait for it"));
}

TEST(TextReportTest, ControlCharactersFromTheDataCannotReachTheTerminal) {
  Diagnosis d = StragglerDiagnosis();
  d.findings[0].function = "evil\x1b]0;pwned\x07\x1b[2J";
  d.findings[0].evidence[0].value = "\x1b[31mred";
  const std::string text = RenderText({&d, nullptr, ""});
  EXPECT_THAT(text, Not(HasSubstr("\x1b")));
  EXPECT_THAT(text, Not(HasSubstr("\x07")));
}

// ---------------------------------------------------------------------------------------
// HTML

// Like HasSubstr, without printing a whole HTML page on failure.
::testing::AssertionResult Has(const std::string& html, const std::string& what) {
  if (html.find(what) != std::string::npos) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "'" << what << "' not in the " << html.size()
                                       << "-byte page";
}
::testing::AssertionResult Lacks(const std::string& html, const std::string& what) {
  const size_t at = html.find(what);
  if (at == std::string::npos) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "'" << what << "' found at " << at << ": "
                                       << html.substr(at > 80 ? at - 80 : 0, 200);
}

size_t Count(const std::string& s, const std::string& what) {
  size_t n = 0;
  for (size_t p = s.find(what); p != std::string::npos; p = s.find(what, p + what.size())) ++n;
  return n;
}

void ExpectNoNetworkReferences(const std::string& html) {
  const std::regex attr(R"re((src|href|action|xlink:href)\s*=\s*["']?\s*(https?:)?//)re",
                        std::regex::icase);
  EXPECT_FALSE(std::regex_search(html, attr));
  EXPECT_TRUE(Lacks(html, "@import"));
  EXPECT_THAT(html, Not(HasSubstr("url(")));
}

TEST(HtmlReportTest, ShowsTheVerdictFindingsChartAndHeatMap) {
  const Diagnosis d = StragglerDiagnosis();
  const auto workers = MakeWorkers(4, 2);
  const std::string html = RenderHtml({&d, &workers, "traces/"});
  EXPECT_EQ(html.rfind("<!DOCTYPE html>", 0), 0u);
  EXPECT_TRUE(Has(html, "block2 takes 2.0x its peers on rank 2"));
  EXPECT_TRUE(Has(html, "rank 2 is the straggler"));
  EXPECT_TRUE(Has(html, "PT-STRAGGLER-FUNCTION"));
  EXPECT_TRUE(Has(html, "gloo:all_reduce"));
  EXPECT_TRUE(Has(html, "<svg class=\"chart\""));
  EXPECT_TRUE(Has(html, "id=\"hm\""));
  EXPECT_TRUE(Has(html, "skipped traces/rank-9.json.gz"));
  // The heat map: one row per worker (4 fit), culprit first; no ProfilerStep column.
  EXPECT_EQ(Count(html, "data-o=\""), 4u);
  EXPECT_LT(html.find("<tr class=\"culprit\" data-o=\"0\"><th title=\"traces/rank-2.json.gz\">"
                      "rank 2"),
            html.find("<tr class=\"victim\""));
  EXPECT_TRUE(Lacks(html, "<span>ProfilerStep</span>"));
  // The straggler's block2 cell is about 2x the median.
  EXPECT_TRUE(Has(html, "rank 2 · block2: 25.6 ms per iteration = 2.0"));
  // Balanced structure.
  EXPECT_EQ(Count(html, "<section"), Count(html, "</section>"));
  EXPECT_EQ(Count(html, "<table"), Count(html, "</table>"));
  EXPECT_EQ(Count(html, "<svg"), Count(html, "</svg>"));
  EXPECT_EQ(Count(html, "<script>"), 1u);
  ExpectNoNetworkReferences(html);
  EXPECT_TRUE(Lacks(html, "http"));  // not even the SVG namespace
}

TEST(HtmlReportTest, EscapesEveryStringFromTheData) {
  Diagnosis d = StragglerDiagnosis();
  const std::string evil = "<script>alert(1)</script>";
  d.findings[0].function = evil;
  d.findings[0].function_key = "python:x > " + evil;
  d.findings[0].title = "slow \"" + evil + "\" & more";
  d.findings[0].evidence[0] = {evil, "<img src=x onerror=alert(2)>"};
  d.notes.push_back(evil);
  auto workers = MakeWorkers(4, 2);
  workers[1].source = "\"><script>alert(3)</script>";
  AddFunction(&workers[1], "python:" + evil, evil, EventKind::kPythonCall, 30);
  const std::string html = RenderHtml({&d, &workers, evil});
  EXPECT_TRUE(Lacks(html, evil));
  EXPECT_TRUE(Lacks(html, "<img"));
  EXPECT_TRUE(Lacks(html, "\"><script>"));
  EXPECT_TRUE(Has(html, "&lt;script&gt;alert(1)&lt;/script&gt;"));
  EXPECT_EQ(Count(html, "<script>"), 1u);  // ours only
  ExpectNoNetworkReferences(html);
}

TEST(HtmlReportTest, TemplateKernelNamesAreEscapedNotDropped) {
  Diagnosis d = StragglerDiagnosis();
  d.findings[0].function = kKernel;
  const auto workers = MakeWorkers(4, 2);
  const std::string html = RenderHtml({&d, &workers, ""});
  EXPECT_TRUE(Has(html, "vectorized_elementwise_kernel&lt;4, "
                              "at::native::CUDAFunctor_add&lt;float&gt;"));
}

TEST(HtmlReportTest, LargeJobIsCappedAndSmall) {
  constexpr int32_t kWorkers = 1000;
  constexpr int32_t kStraggler = 517;
  const Diagnosis d = StragglerDiagnosis(kWorkers, kStraggler);
  const auto workers = MakeWorkers(kWorkers, kStraggler, 300);
  const std::string html = RenderHtml({&d, &workers, "1000-worker job"});
  EXPECT_LT(html.size(), 2'000'000u);
  const HtmlOptions defaults;
  EXPECT_EQ(Count(html, "data-o=\""), defaults.max_heatmap_rows);
  EXPECT_TRUE(Has(html, "Showing 48 of 1000 workers: culprits first"));
  EXPECT_TRUE(Has(html, "<tr class=\"culprit\" data-o=\"0\"><th title=\"traces/rank-517"));
  EXPECT_TRUE(Has(html, "ranks 0-516,518-999"));
  // Columns capped too: 30 function headers.
  EXPECT_EQ(Count(html, "<th class=\"fn"), defaults.max_heatmap_columns);
  // The straggler's bar is marked in the chart.
  EXPECT_TRUE(Has(html, "rank 517: median iteration"));
  ExpectNoNetworkReferences(html);

  // Beyond max_chart_bars the chart samples too, and says so.
  const std::string capped = RenderHtml({&d, &workers, ""}, {.max_heatmap_rows = 10,
                                                             .max_heatmap_columns = 8,
                                                             .max_chart_bars = 200});
  EXPECT_TRUE(Has(capped, "Showing 200 of 1000 workers"));
  EXPECT_TRUE(Has(capped, "rank 517: median iteration"));
  EXPECT_EQ(Count(capped, "<g class=\"b\">"), 200u);
  EXPECT_EQ(Count(capped, "data-o=\""), 10u);
}

TEST(HtmlReportTest, TenThousandWorkersStayUnderTwoMegabytes) {
  constexpr int32_t kWorkers = 10'000;
  const Diagnosis d = StragglerDiagnosis(kWorkers, 4321);
  const auto workers = MakeWorkers(kWorkers, 4321, 10);
  const std::string html = RenderHtml({&d, &workers, ""});
  EXPECT_LT(html.size(), 2'000'000u);
  EXPECT_TRUE(Has(html, "Showing 1024 of 10000 workers"));
  EXPECT_TRUE(Has(html, "rank 4321: median iteration"));
  const std::string text = RenderText({&d, &workers, ""});
  ExpectFits(text, 100, 40);
  EXPECT_THAT(text, HasSubstr("ranks 0-4320,4322-9999 wait for it in gloo:all_reduce"));
}

TEST(HtmlReportTest, HealthyJobAndNoSummaries) {
  const Diagnosis d = HealthyDiagnosis();
  const std::string html = RenderHtml({&d, nullptr, ""});
  EXPECT_TRUE(Has(html, "No material finding"));
  EXPECT_TRUE(Has(html, "the 4 workers behave alike"));
  EXPECT_TRUE(Lacks(html, "culprit of a material finding"));
  EXPECT_TRUE(Lacks(html, "<svg"));  // no summaries: no chart, no heat map
  EXPECT_TRUE(Lacks(html, "id=\"hm\""));
  EXPECT_FALSE(RenderHtml({nullptr, nullptr, ""}).empty());
}

// Writes example reports for a person to look at when PERFTRACKER_REPORT_EXAMPLES names a
// folder (e.g. to screenshot the HTML with a headless browser).
TEST(ReportExamples, WriteWhenAsked) {
  const char* dir = std::getenv("PERFTRACKER_REPORT_EXAMPLES");
  if (!dir) GTEST_SKIP() << "set PERFTRACKER_REPORT_EXAMPLES=/some/dir to write examples";
  Diagnosis d = StragglerDiagnosis(16, 5);
  Finding idle;
  idle.code = "PT-GPU-IDLE-HOST";
  idle.category = FindingCategory::kHostOverhead;
  idle.title = "the GPU idles while Python launches small kernels";
  idle.function = kKernel;
  idle.function_key = "kernel:" + kKernel;
  idle.resource = "CPU (kernel launch)";
  idle.lost_ns_per_iteration = 3.1 * kMs;
  idle.lost_share = 0.067;
  idle.material = true;
  idle.evidence = {{"GPU idle while the host runs", "6.7% of the iteration"},
                   {"median kernel duration", "4.1 µs"},
                   {"kernel launches per iteration", "812"}};
  d.findings.insert(d.findings.begin() + 1, idle);
  d.notes.push_back("rank 12: 1,024 events dropped (ring full); its summary may undercount");
  auto workers = MakeWorkers(16, 5);
  workers[12].stats.dropped_events = 1024;
  workers[12].stats.events = 412'331;
  workers[12].stats.first_problem = "ring full at 12.3 s";
  std::ofstream(std::string(dir) + "/example.html") << RenderHtml({&d, &workers, "traces/job-17/"});
  std::ofstream(std::string(dir) + "/example.txt") << RenderText({&d, &workers, "traces/job-17/"});
  std::ofstream(std::string(dir) + "/example.json") << RenderJson({&d, &workers, "traces/job-17/"});
  const Diagnosis big = StragglerDiagnosis(1000, 517);
  const auto big_workers = MakeWorkers(1000, 517, 40);
  std::ofstream(std::string(dir) + "/example_1000.html")
      << RenderHtml({&big, &big_workers, "1000-worker job"});
  Diagnosis healthy = HealthyDiagnosis(16);
  const auto healthy_workers = MakeWorkers(16, -1);
  healthy.median_iteration_ns = static_cast<double>(healthy_workers[0].median_iteration_ns());
  std::ofstream(std::string(dir) + "/example_healthy.html")
      << RenderHtml({&healthy, &healthy_workers, "traces/job-18/"});
  std::ofstream(std::string(dir) + "/example_healthy.txt")
      << RenderText({&healthy, &healthy_workers, "traces/job-18/"});
}

}  // namespace
}  // namespace perftracker
