// libFuzzer target for the Kineto importer (built only with clang; see CMakeLists.txt).
// Feeds the input whole and split in two at a point chosen by the first byte, and checks
// that both give the same events and the same result: the chunk-split invariance the
// importer promises, on arbitrary bytes. The events then go through the offline
// WindowSummarizer (what diagnose does), so that hostile times, durations and nesting reach
// its arithmetic under ASan + UBSan, and through the Perfetto export (PerfettoWriter, what
// diagnose --perfetto and a live window's timeline write), with a finding drawn on it and a
// cap that the input's last byte sometimes makes small: the export must be JSON that the
// importer reads back with no malformed event and exactly the events written, and that
// passes TraceEventFormatCheck (what a viewer needs). Seed corpus:
// fuzz_corpus/ (scripts/test.sh runs it for a bounded time when clang is installed):
//   build-fuzz/src/perftracker/sources/kineto/kineto_importer_fuzzer WORKDIR \
//       src/perftracker/sources/kineto/fuzz_corpus -max_total_time=60
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "perftracker/localize/diagnosis.h"
#include "perftracker/report/perfetto_writer.h"
#include "perftracker/report/rank_trace.h"
#include "perftracker/report/trace_event_format_check.h"
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

// The whole input through the importer into a RankTrace, exported for Perfetto with a
// finding on its first function, and the export read back.
void ExportPerfetto(const uint8_t* data, size_t size) {
  perftracker::RankTrace trace;
  perftracker::KinetoImportOptions options;
  options.rank = 0;
  perftracker::KinetoImporter importer("fuzz.json", trace.functions(), &trace, options);
  if (!importer.Parse(reinterpret_cast<const char*>(data), size).ok()) return;
  if (!importer.Finish().ok()) return;
  trace.rank = 0;

  perftracker::PerfettoOptions perfetto;
  if (data[size - 1] % 4 == 0) perfetto.max_events = data[size - 1] / 4;  // beyond the cap
  perftracker::PerfettoWriter writer(perfetto);
  writer.AddRank(&trace);
  perftracker::Diagnosis diagnosis;
  diagnosis.num_workers = 1;
  perftracker::Finding finding;
  finding.code = "PT-STRAGGLER-COMPUTE";
  finding.title = "fuzz";
  finding.workers = {0};
  if (!trace.events().empty()) {
    finding.function = std::string(trace.functions()->Get(trace.events().front().function_id).name);
  }
  diagnosis.findings.push_back(finding);
  std::ostringstream out;
  if (!writer.Write(diagnosis, &out).ok()) std::abort();
  const std::string text = out.str();
  const nlohmann::json doc = nlohmann::json::parse(text, nullptr, false);
  if (doc.is_discarded()) std::abort();
  // Strictly of the Trace Event Format, as a viewer needs it (nesting, flows, metadata).
  if (!perftracker::TraceEventFormatCheck({"perftracker_rank"}).Check(doc).ok()) std::abort();

  perftracker::RankTrace back;
  perftracker::KinetoImporter reader("export.json", back.functions(), &back, options);
  if (!reader.Parse(text.data(), text.size()).ok()) std::abort();
  const auto info = reader.Finish();
  if (!info.ok() || info->events_malformed != 0) std::abort();
  if (back.events().size() != writer.stats().events_written) std::abort();
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
  ExportPerfetto(data, size);
  return 0;
}
