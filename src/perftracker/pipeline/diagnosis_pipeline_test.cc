#include "perftracker/pipeline/diagnosis_pipeline.h"

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include <fmt/core.h>
#include <gtest/gtest.h>

#include "perftracker/report/report.h"
#include "perftracker/sources/sim/scenario.h"

namespace perftracker {
namespace {

namespace fs = std::filesystem;

std::string StragglerExample() {
  const char* src = std::getenv("PERFTRACKER_SOURCE_DIR");
  return std::string(src != nullptr ? src : ".") + "/examples/straggler";
}

std::vector<std::string> StragglerFiles() {
  std::vector<std::string> files;
  for (int r = 0; r < 4; ++r)
    files.push_back(fmt::format("{}/rank{}.json.gz", StragglerExample(), r));
  return files;
}

TEST(DiagnosisPipeline, TraceFilesNameTheStragglerRank) {
  PipelineOptions options;
  options.threads = 2;
  DiagnosisPipeline pipeline(options);
  pipeline.AddTraceFiles(StragglerFiles());
  ASSERT_EQ(pipeline.workers().size(), 4u);
  EXPECT_TRUE(pipeline.skipped().empty());
  for (size_t i = 0; i < 4; ++i) EXPECT_EQ(pipeline.workers()[i].rank, static_cast<int32_t>(i));
  const Diagnosis d = pipeline.Diagnose();
  ASSERT_FALSE(d.findings.empty());
  EXPECT_TRUE(d.findings[0].material);
  EXPECT_EQ(d.findings[0].workers, std::vector<int32_t>{2});
}

TEST(DiagnosisPipeline, AFileThatCannotBeReadOrRepeatsARankIsSkippedWithANote) {
  const fs::path empty =
      fs::temp_directory_path() / fmt::format("perftracker_{}_empty.json", ::getpid());
  std::ofstream(empty) << "{\"traceEvents\": []}";
  std::vector<std::string> files = StragglerFiles();
  files.push_back(files[1]);  // rank 1 again
  files.push_back(empty.string());
  DiagnosisPipeline pipeline;
  pipeline.AddTraceFiles(files);
  fs::remove(empty);
  EXPECT_EQ(pipeline.workers().size(), 4u);
  ASSERT_EQ(pipeline.skipped().size(), 2u);
  EXPECT_EQ(pipeline.skipped()[0].path, files[1]);
  EXPECT_NE(pipeline.skipped()[0].error.find("rank 1 was already read from"), std::string::npos);
  EXPECT_EQ(pipeline.skipped()[1].path, empty.string());
  EXPECT_NE(pipeline.skipped()[1].error.find(empty.string()), std::string::npos)
      << pipeline.skipped()[1].error;
  const Diagnosis d = pipeline.Diagnose();
  int skipped_notes = 0;
  for (const std::string& note : d.notes) skipped_notes += note.rfind("skipped ", 0) == 0;
  EXPECT_EQ(skipped_notes, 2);
}

// The straggler example's files under the names torch.profiler.tensorboard_trace_handler
// gives them ("<host>_<pid>.<ms>.pt.trace.json"): torch 1.13's bare lists, no rank anywhere.
// Rank r of the job is process 990 + 5 * r: pid order is rank order, and 990 < 1000 sorts
// before 1000 only as numbers.
class TensorboardFiles : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / fmt::format("perftracker_{}_tensorboard", ::getpid());
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string Add(int rank, const std::string& name) {
    const fs::path to = dir_ / name;
    fs::copy_file(StragglerFiles()[static_cast<size_t>(rank)], to);
    return to.string();
  }
  std::string AddRank(int rank) {
    return Add(rank,
               fmt::format("node7_{}.1795788448{}.pt.trace.json.gz", 990 + 5 * rank, 100 + rank));
  }
  fs::path dir_;
};

TEST_F(TensorboardFiles, FilesWithoutARankAreNumberedByHostThenPidAndMappedBackToTheirFiles) {
  std::vector<std::string> files;
  for (int r : {3, 1, 0, 2}) files.push_back(AddRank(r));  // any order in
  PipelineOptions options;
  options.keep_events = true;
  DiagnosisPipeline pipeline(options);
  pipeline.AddTraceFiles(files);
  ASSERT_TRUE(pipeline.skipped().empty()) << pipeline.skipped()[0].error;
  ASSERT_EQ(pipeline.workers().size(), 4u);
  const std::vector<std::unique_ptr<RankTrace>> traces = pipeline.TakeTraces();
  for (size_t i = 0; i < 4; ++i) {
    const int32_t rank = pipeline.workers()[i].rank;
    EXPECT_EQ(pipeline.workers()[i].source, files[i]);
    EXPECT_NE(files[i].find(fmt::format("node7_{}.", 990 + 5 * rank)), std::string::npos)
        << files[i] << " read as rank " << rank;
    EXPECT_EQ(traces[i]->rank, rank);
  }
  const Diagnosis d = pipeline.Diagnose();
  ASSERT_FALSE(d.notes.empty());
  EXPECT_EQ(d.notes[0].rfind("ranks numbered by file (no trace names its rank): rank 0 = "
                             "node7_990, rank 1 = node7_995, rank 2 = node7_1000, rank 3 = "
                             "node7_1005; in the natural order of the file names",
                             0),
            0u)
      << d.notes[0];
  ASSERT_FALSE(d.findings.empty());
  EXPECT_TRUE(d.findings[0].material);
  EXPECT_EQ(d.findings[0].workers, std::vector<int32_t>{2});  // node7_1000
}

TEST_F(TensorboardFiles, ASecondCycleOfOneWorkerIsRefusedNotReadAsAnotherWorker) {
  std::vector<std::string> files;
  for (int r = 0; r < 4; ++r) files.push_back(AddRank(r));
  files.push_back(Add(1, "node7_995.1795788449999.pt.trace.json.gz"));
  DiagnosisPipeline pipeline;
  pipeline.AddTraceFiles(files);
  EXPECT_EQ(pipeline.workers().size(), 4u);
  ASSERT_EQ(pipeline.skipped().size(), 1u);
  EXPECT_EQ(pipeline.skipped()[0].error,
            files[4] + ": another trace of worker node7_995, already read from " + files[1] +
                ": tensorboard_trace_handler writes one file per profiling cycle; diagnose one "
                "cycle's files at a time");
}

TEST_F(TensorboardFiles, FilesWithoutARankBesideRankedOnesAreRefusedEachWithOneLine) {
  const std::string unranked = AddRank(0);
  const std::string ranked = Add(1, "trace_rank1.json.gz");
  DiagnosisPipeline pipeline;
  pipeline.AddTraceFiles({unranked, ranked});
  ASSERT_EQ(pipeline.workers().size(), 1u);
  EXPECT_EQ(pipeline.workers()[0].rank, 1);
  ASSERT_EQ(pipeline.skipped().size(), 1u);
  EXPECT_EQ(pipeline.skipped()[0].error,
            unranked +
                ": cannot tell which rank wrote this trace (no distributedInfo.rank, no "
                "rank number in its name) while 1 other trace file does (e.g. " +
                ranked +
                "): rename it to include its rank (e.g. trace_rank3.json), or diagnose the "
                "files without a rank apart");
}

TEST_F(TensorboardFiles, OneFileWithoutARankIsRankZero) {
  DiagnosisPipeline pipeline;
  pipeline.AddTraceFiles({AddRank(2)});
  ASSERT_EQ(pipeline.workers().size(), 1u);
  EXPECT_EQ(pipeline.workers()[0].rank, 0);
  const Diagnosis d = pipeline.Diagnose();
  ASSERT_FALSE(d.notes.empty());
  EXPECT_NE(d.notes[0].find("names no rank"), std::string::npos) << d.notes[0];
}

TEST(DiagnosisPipeline, AFileOfOnlyBadDataSaysWhatWasWrongWithIt) {
  // Every event's time is out of range (issue 13): the file is skipped, and its one line says
  // how many events were malformed and why, not that the profiler recorded nothing.
  const fs::path bad =
      fs::temp_directory_path() / fmt::format("perftracker_{}_bad_rank0.json", ::getpid());
  std::ofstream(bad) << R"({"displayTimeUnit": "ns", "traceEvents": [
    {"ph": "X", "name": "a", "pid": 1, "tid": 1, "ts": 9223372036854775000, "dur": 5000},
    {"ph": "X", "name": "b", "pid": 1, "tid": 1, "ts": -9200000000000000000, "dur": 1}]})";
  std::vector<std::string> files = StragglerFiles();
  files.push_back(bad.string());
  DiagnosisPipeline pipeline;
  pipeline.AddTraceFiles(files);
  fs::remove(bad);
  EXPECT_EQ(pipeline.workers().size(), 4u);
  ASSERT_EQ(pipeline.skipped().size(), 1u);
  const std::string& error = pipeline.skipped()[0].error;
  EXPECT_NE(error.find(bad.string()), std::string::npos) << error;
  EXPECT_NE(error.find("2 malformed"), std::string::npos) << error;
  EXPECT_NE(error.find("out of range"), std::string::npos) << error;
}

TEST(DiagnosisPipeline, KeptEventsFollowTheWorkers) {
  PipelineOptions options;
  options.keep_events = true;
  DiagnosisPipeline pipeline(options);
  pipeline.AddTraceFiles({StragglerFiles()[3], StragglerFiles()[0]});
  const std::vector<std::unique_ptr<RankTrace>> traces = pipeline.TakeTraces();
  ASSERT_EQ(traces.size(), 2u);
  EXPECT_EQ(traces[0]->rank, 3);
  EXPECT_EQ(traces[1]->rank, 0);
  EXPECT_FALSE(traces[0]->events().empty());
}

// A trace's process groups reach the summary whether or not its events are also kept for a
// Perfetto export (the recorder forwards them to the summarizer).
TEST(DiagnosisPipeline, ProcessGroupsOfATraceReachItsSummary) {
  const fs::path file =
      fs::temp_directory_path() / fmt::format("perftracker_{}_pg_rank1.json", ::getpid());
  std::ofstream(file) << R"JSON({"traceEvents": [
    {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": 1, "tid": 1,
     "ts": 0, "dur": 1000},
    {"ph": "X", "cat": "kernel", "name": "ncclDevKernel_AllReduce_Sum_f32_RING_LL(x)", "pid": 0,
     "tid": 7, "ts": 100, "dur": 200, "args": {"device": 0, "stream": 7, "In msg nelems": 256,
     "dtype": "Float", "Process Group Name": "2", "Process Group Ranks": "[0, 1]",
     "Group size": 2}}]})JSON";
  for (bool keep_events : {false, true}) {
    SCOPED_TRACE(keep_events);
    PipelineOptions options;
    options.keep_events = keep_events;
    DiagnosisPipeline pipeline(options);
    pipeline.AddTraceFiles({file.string()});
    ASSERT_EQ(pipeline.workers().size(), 1u);
    const CollectiveGroups& g = pipeline.workers()[0].collective_groups;
    ASSERT_EQ(g.groups.size(), 1u);
    EXPECT_EQ(g.groups[0].ranks, (std::vector<int32_t>{0, 1}));
    ASSERT_EQ(g.calls.size(), 1u);
    EXPECT_EQ(g.calls[0].bytes, 1024u);
    EXPECT_EQ(g.calls[0].total_ns, 200'000);
  }
  fs::remove(file);
}

TEST(DiagnosisPipeline, SimulatedRanksComeInRankOrderWhateverTheThreads) {
  StatusOr<Scenario> scenario = ParseScenario(R"({"name": "t", "job": {"ranks": 16, "tp": 4,
      "pp": 1, "gpus_per_host": 8, "model_params_b": 13, "iterations": 5, "seed": 3},
      "faults": [{"kind": "untraced_pause", "ranks": [5], "magnitude": 8}],
      "expect": {"findings": [{"code": "PT-STRAGGLER-UNTRACED"}]}})",
                                              "t.json");
  ASSERT_TRUE(scenario.ok()) << scenario.status().message();
  ClusterSimulator sim(*scenario);
  sim.Run();
  PipelineOptions options;
  options.threads = 3;
  DiagnosisPipeline pipeline(options);
  pipeline.AddSimulation(sim);
  ASSERT_EQ(pipeline.workers().size(), 16u);
  for (size_t i = 0; i < 16; ++i) {
    EXPECT_EQ(pipeline.workers()[i].rank, static_cast<int32_t>(i));
    EXPECT_EQ(pipeline.workers()[i].host, sim.HostName(static_cast<int32_t>(i)));
  }
  const Diagnosis d = pipeline.Diagnose();
  ASSERT_FALSE(d.findings.empty());
  EXPECT_EQ(d.findings[0].workers, std::vector<int32_t>{5});
}

TEST(DiagnosisPipeline, WithoutKeptSummariesEachIsLocalizedAsItComes) {
  DiagnosisPipeline files;
  files.AddTraceFiles(StragglerFiles());
  PipelineOptions options;
  options.keep_summaries = false;
  DiagnosisPipeline streamed(options);
  for (const WorkerSummary& w : files.workers()) streamed.AddSummary(w);
  EXPECT_TRUE(streamed.workers().empty());
  const Diagnosis a = files.Diagnose();
  const Diagnosis b = streamed.Diagnose();
  ASSERT_EQ(a.findings.size(), b.findings.size());
  for (size_t i = 0; i < a.findings.size(); ++i)
    EXPECT_EQ(a.findings[i].title, b.findings[i].title);
}

// `perftracker diagnose` reduces each duration sketch to its median before the localizer
// reads it (its memory peak on traces with Python stacks): every sketch keeps its median
// exactly, and the diagnosis and all three reports must be the ones made with the sketches
// kept.
TEST(DiagnosisPipeline, WithoutKeptDurationsTheReportsAreTheSame) {
  PipelineOptions kept_options;
  DiagnosisPipeline kept(kept_options);
  PipelineOptions dropped_options;
  dropped_options.keep_durations = false;
  DiagnosisPipeline dropped(dropped_options);
  kept.AddTraceFiles(StragglerFiles());
  dropped.AddTraceFiles(StragglerFiles());
  const Diagnosis a = kept.Diagnose();
  const Diagnosis b = dropped.Diagnose();

  size_t sketches_reduced = 0, sketches_full_left = 0;
  ASSERT_EQ(kept.workers().size(), dropped.workers().size());
  for (size_t w = 0; w < kept.workers().size(); ++w) {
    const std::vector<FunctionSummary>& full = kept.workers()[w].functions;
    const std::vector<FunctionSummary>& reduced = dropped.workers()[w].functions;
    ASSERT_EQ(full.size(), reduced.size());
    for (size_t i = 0; i < full.size(); ++i) {
      sketches_reduced += full[i].durations.count() > 1;
      sketches_full_left += reduced[i].durations.count() > 1;
      EXPECT_EQ(reduced[i].durations.count() > 0, full[i].durations.count() > 0);
      EXPECT_EQ(reduced[i].durations.Quantile(0.5), full[i].durations.Quantile(0.5))
          << kept.workers()[w].Key(i);
    }
  }
  EXPECT_GT(sketches_reduced, 0u);
  EXPECT_EQ(sketches_full_left, 0u);

  ASSERT_FALSE(b.findings.empty());
  EXPECT_EQ(b.findings[0].workers, std::vector<int32_t>{2});
  ReportInput with;
  with.diagnosis = &a;
  with.workers = &kept.workers();
  ReportInput without;
  without.diagnosis = &b;
  without.workers = &dropped.workers();
  EXPECT_EQ(RenderJson(with), RenderJson(without));
  EXPECT_EQ(RenderText(with), RenderText(without));
  EXPECT_EQ(RenderHtml(with), RenderHtml(without));
}

// Summaries added as they are (a collector's, a synthetic worker's) are reduced by Diagnose()
// before the localizer reads them, to the same medians, with the same diagnosis.
TEST(DiagnosisPipeline, WithoutKeptDurationsAddedSummariesKeepTheirMedians) {
  DiagnosisPipeline files;
  files.AddTraceFiles(StragglerFiles());
  PipelineOptions dropped_options;
  dropped_options.keep_durations = false;
  DiagnosisPipeline added(dropped_options);
  for (const WorkerSummary& w : files.workers()) added.AddSummary(w);
  const Diagnosis a = files.Diagnose();
  const Diagnosis b = added.Diagnose();
  size_t reduced = 0;
  for (size_t w = 0; w < files.workers().size(); ++w) {
    const std::vector<FunctionSummary>& full = files.workers()[w].functions;
    const std::vector<FunctionSummary>& mine = added.workers()[w].functions;
    ASSERT_EQ(full.size(), mine.size());
    for (size_t i = 0; i < full.size(); ++i) {
      reduced += full[i].durations.count() > 1;
      EXPECT_LE(mine[i].durations.count(), 1u);
      EXPECT_EQ(mine[i].durations.Quantile(0.5), full[i].durations.Quantile(0.5));
    }
  }
  EXPECT_GT(reduced, 0u);
  ASSERT_FALSE(b.findings.empty());
  ASSERT_EQ(a.findings.size(), b.findings.size());
  for (size_t i = 0; i < a.findings.size(); ++i) {
    EXPECT_EQ(a.findings[i].title, b.findings[i].title);
    EXPECT_EQ(a.findings[i].workers, b.findings[i].workers);
  }
}

}  // namespace
}  // namespace perftracker
