// The regression corpus: every profiler trace under ../shared/data (real files written by
// other projects; skipped when absent) imports with no event lost, and the offline
// summarizer puts every event in its place whatever order the file lists them in.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "perftracker/sources/kineto/kineto_importer.h"
#include "perftracker/summary/window_summarizer.h"

namespace perftracker {
namespace {

namespace fs = std::filesystem;

std::string SharedDataDir() {
  const char* src = std::getenv("PERFTRACKER_SOURCE_DIR");
  return std::string(src != nullptr ? src : ".") + "/../shared/data";
}

bool IsTraceName(const std::string& name) {
  auto ends_with = [&](std::string_view s) {
    return name.size() >= s.size() && name.compare(name.size() - s.size(), s.size(), s) == 0;
  };
  return ends_with(".json") || ends_with(".json.gz");
}

// Forwards to the summarizer and counts the iteration markers the importer emitted.
class MarkerCounter : public EventSink {
 public:
  explicit MarkerCounter(EventSink* next) : next_(next) {}
  void OnTrack(const TrackInfo& t) override { next_->OnTrack(t); }
  void OnEvent(const Event& e) override {
    if (e.kind == EventKind::kIteration) ++markers;
    next_->OnEvent(e);
  }
  void OnMetric(const MetricSample& m) override { next_->OnMetric(m); }
  uint64_t markers = 0;

 private:
  EventSink* next_;
};

std::vector<std::string> CorpusFiles() {
  std::vector<std::string> files;
  const std::string dir = SharedDataDir();
  if (!fs::exists(dir)) return files;
  for (const auto& entry : fs::recursive_directory_iterator(dir)) {
    if (entry.is_regular_file() && IsTraceName(entry.path().filename().string())) {
      files.push_back(entry.path().string());
    }
  }
  std::sort(files.begin(), files.end());
  return files;
}

TEST(TraceCorpusTest, EveryTraceImportsWithEveryEventInItsPlace) {
  const std::vector<std::string> files = CorpusFiles();
  if (files.empty()) GTEST_SKIP() << "no traces under " << SharedDataDir();
  size_t imported = 0;
  uint64_t events = 0;
  for (const std::string& path : files) {
    SCOPED_TRACE(path);
    FunctionTable functions;
    SummarizerOptions options;
    options.offline = true;
    WindowSummarizer summarizer(&functions, options);
    KinetoImportOptions import_options;
    import_options.rank = 0;  // a few test files have no rank on purpose; import them anyway
    MarkerCounter counter(&summarizer);
    StatusOr<KinetoTraceInfo> info = ImportKinetoFile(path, &functions, &counter, import_options);
    ASSERT_TRUE(info.ok()) << info.status().message();
    const WorkerSummary s = summarizer.Finish();
    EXPECT_EQ(info->events_malformed, 0u) << info->first_malformed;
    EXPECT_EQ(s.stats.events, info->events_emitted);
    EXPECT_EQ(s.stats.out_of_order_events, 0u) << s.stats.first_problem;
    EXPECT_EQ(s.stats.dropped_events, 0u) << s.stats.first_problem;
    EXPECT_EQ(s.stats.malformed_events, 0u) << s.stats.first_problem;
    EXPECT_EQ(s.stats.deep_events, 0u) << s.stats.first_problem;  // real traces nest < 256
    // Iterations wherever the file marks them (ProfilerStep#N, or only its GPU twin); a file
    // without markers is one iteration, its window.
    ASSERT_FALSE(s.iterations.empty());
    if (counter.markers == 0) {
      ASSERT_EQ(s.iterations.size(), 1u);
      EXPECT_EQ(s.iterations[0].duration_ns, s.window_ns());
    }
    ++imported;
    events += s.stats.events;
  }
  EXPECT_EQ(imported, files.size());
  RecordProperty("files", static_cast<int>(imported));
  RecordProperty("events", std::to_string(events));
}

}  // namespace
}  // namespace perftracker
