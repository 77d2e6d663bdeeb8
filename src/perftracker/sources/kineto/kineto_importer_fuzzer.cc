// libFuzzer target for the Kineto importer (built only with clang; see CMakeLists.txt).
// Feeds the input whole and split in two at a point chosen by the first byte, and checks
// that both give the same events and the same result: the chunk-split invariance the
// importer promises, on arbitrary bytes. The events then go through the offline
// WindowSummarizer (what diagnose does), so that hostile times, durations and nesting reach
// its arithmetic under ASan + UBSan. Seed corpus: fuzz_corpus/ (scripts/test.sh runs it for a
// bounded time when clang is installed):
//   build-fuzz/src/perftracker/sources/kineto/kineto_importer_fuzzer WORKDIR \
//       src/perftracker/sources/kineto/fuzz_corpus -max_total_time=60
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "perftracker/sources/kineto/kineto_importer.h"
#include "perftracker/summary/window_summarizer.h"

namespace {

class CollectingSink : public perftracker::EventSink {
 public:
  void OnTrack(const perftracker::TrackInfo& t) override { out += "T" + t.name + ";"; }
  void OnEvent(const perftracker::Event& e) override {
    out += std::to_string(e.start_ns) + "," + std::to_string(e.end_ns) + "," +
           std::to_string(e.function_id) + "," + std::to_string(e.track_id) + ";";
  }
  void OnMetric(const perftracker::MetricSample&) override {}
  std::string out;
};

std::string Run(const uint8_t* data, size_t size, size_t split) {
  perftracker::FunctionTable functions;
  CollectingSink sink;
  perftracker::KinetoImportOptions options;
  options.rank = 0;
  perftracker::KinetoImporter importer("fuzz.json", &functions, &sink, options);
  const char* p = reinterpret_cast<const char*>(data);
  perftracker::Status st = importer.Parse(p, split);
  if (st.ok()) st = importer.Parse(p + split, size - split);
  if (!st.ok()) return sink.out + "|error";
  auto info = importer.Finish();
  if (!info.ok()) return sink.out + "|error";
  return sink.out + "|" + std::to_string(info->events_emitted) + "," +
         std::to_string(info->events_malformed);
}

// The whole input through the importer into the offline summarizer; every event it gets is
// counted exactly once.
void Summarize(const uint8_t* data, size_t size) {
  perftracker::FunctionTable functions;
  perftracker::SummarizerOptions summarizer_options;
  summarizer_options.offline = true;
  perftracker::WindowSummarizer summarizer(&functions, summarizer_options);
  perftracker::KinetoImportOptions options;
  options.rank = 0;
  perftracker::KinetoImporter importer("fuzz.json", &functions, &summarizer, options);
  if (!importer.Parse(reinterpret_cast<const char*>(data), size).ok()) return;
  auto info = importer.Finish();
  if (!info.ok()) return;
  const perftracker::WorkerSummary s = summarizer.Finish();
  if (s.stats.events != info->events_emitted) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const size_t split = data[0] % (size + 1);
  const std::string whole = Run(data, size, size);
  const std::string parts = Run(data, size, split);
  // Errors may be reported at different moments, but successful imports must agree.
  if (whole.ends_with("|error") != parts.ends_with("|error")) std::abort();
  if (!whole.ends_with("|error") && whole != parts) std::abort();
  Summarize(data, size);
  return 0;
}
