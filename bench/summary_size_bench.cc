// summary_size_bench: encoded WorkerSummary size per worker per window (target <= 64 KB).
//
//   summary_size_bench [trace.json[.gz] | directory]...
//
// (a) a synthetic worker: ~300 functions with realistic call paths (python frames, record
//     function annotations, aten ops, long templated CUDA kernel names), spread log-normal
//     durations and sampled hardware metrics, pushed through the WindowSummarizer;
// (b) every Kineto trace given on the command line (a directory means its *.json[.gz]
//     files); with no argument, $PERFTRACKER_SOURCE_DIR/../shared/data/kineto if present.
// Prints one line per worker: functions, encoded bytes, bytes per function, and what the
// function keys alone would cost if sent in full (the codec sends parent + leaf name).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include <fmt/core.h>

#include "perftracker/sources/kineto/kineto_importer.h"
#include "perftracker/summary/window_summarizer.h"
#include "perftracker/wire/summary_codec.h"
#include "synthetic_worker.h"

namespace perftracker {
namespace {

constexpr size_t kTargetBytes = 64 * 1024;

struct Row {
  std::string name;
  size_t functions = 0;
  size_t iterations = 0;
  size_t encoded = 0;
  size_t key_bytes = 0;
  size_t metrics = 0;
  size_t buckets = 0;
};

Row Measure(const std::string& name, const WorkerSummary& s) {
  Row r;
  r.name = name;
  r.functions = s.functions.size();
  r.iterations = s.iterations.size();
  const std::string bytes = EncodeWorkerSummary(s);
  r.encoded = bytes.size();
  for (size_t i = 0; i < s.functions.size(); ++i) {
    const FunctionSummary& f = s.functions[i];
    r.key_bytes += s.KeySize(i);
    r.metrics += f.metrics.size();
    r.buckets += f.durations.buckets().size();
  }
  auto back = DecodeWorkerSummary(bytes);
  if (!back.ok() || back->functions.size() != s.functions.size()) {
    fmt::print(stderr, "{}: round trip failed: {}\n", name, back.status().message());
    std::exit(1);
  }
  return r;
}

void Print(const Row& r) {
  fmt::print("{:<28} {:>9} {:>6} {:>8} {:>9} {:>11} {:>10} {:>8.1f} {}\n", r.name, r.functions,
             r.iterations, r.metrics, r.buckets, r.key_bytes, r.encoded,
             r.functions ? static_cast<double>(r.encoded) / static_cast<double>(r.functions) : 0.0,
             r.encoded <= kTargetBytes ? "ok" : "OVER 64 KB");
}

}  // namespace
}  // namespace perftracker

int main(int argc, char** argv) {
  using namespace perftracker;
  namespace fs = std::filesystem;
  fmt::print("{:<28} {:>9} {:>6} {:>8} {:>9} {:>11} {:>10} {:>8} {}\n", "worker", "functions",
             "iters", "metrics", "buckets", "key bytes", "encoded", "B/func", "(target 64 KB)");
  bool over = false;
  {
    SyntheticWorker w;
    const WorkerSummary s = w.Run(10);
    const Row r = Measure("synthetic (10 iterations)", s);
    Print(r);
    over |= r.encoded > kTargetBytes;
  }

  std::vector<std::string> inputs(argv + 1, argv + argc);
  if (inputs.empty()) {
    if (const char* src = std::getenv("PERFTRACKER_SOURCE_DIR")) {
      const fs::path dir = fs::path(src) / ".." / "shared" / "data" / "kineto";
      if (fs::is_directory(dir)) inputs.push_back(dir.string());
    }
  }
  std::vector<std::string> files;
  for (const std::string& in : inputs) {
    if (fs::is_directory(in)) {
      std::vector<std::string> found;
      for (const auto& e : fs::directory_iterator(in)) {
        const std::string p = e.path().string();
        if (p.ends_with(".json") || p.ends_with(".json.gz")) found.push_back(p);
      }
      std::sort(found.begin(), found.end());
      files.insert(files.end(), found.begin(), found.end());
    } else {
      files.push_back(in);
    }
  }
  if (inputs.empty()) {
    fmt::print("(no Kineto traces: pass files or a directory, or set PERFTRACKER_SOURCE_DIR)\n");
  }
  for (const std::string& file : files) {
    FunctionTable functions;
    WindowSummarizer summarizer(&functions);
    auto info = ImportKinetoFile(file, &functions, &summarizer);
    if (!info.ok()) {
      fmt::print("{:<28} import failed: {}\n", fs::path(file).filename().string(),
                 info.status().message());
      continue;
    }
    WorkerSummary s = summarizer.Finish();
    s.rank = info->rank;
    s.source = file;
    const Row r = Measure(fs::path(file).filename().string(), s);
    Print(r);
    over |= r.encoded > kTargetBytes;
  }
  return over ? 1 : 0;
}
