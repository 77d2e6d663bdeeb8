// Importer for the trace files torch.profiler writes (Kineto / Chrome trace JSON).
// (Format notes and algorithm: see kineto_importer.cc's header comment.)
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "perftracker/core/event_sink.h"
#include "perftracker/core/function_table.h"
#include "perftracker/core/status.h"

namespace perftracker {

enum class TraceTimeUnit : uint8_t { kAuto, kMicroseconds, kNanoseconds };

struct KinetoImportOptions {
  std::optional<int32_t> rank;  // overrides distributedInfo and the file name
  // The rank when neither distributedInfo nor the file name says it (`diagnose` of a single
  // file: 0); without it such a trace is an error. KinetoTraceInfo::rank_assumed says so.
  std::optional<int32_t> default_rank;
  // When no rank is found (and no default_rank): on, Finish() succeeds with rank -1 and
  // KinetoTraceInfo::rank_missing (the caller numbers such files: several
  // tensorboard_trace_handler files of one job, pipeline/diagnosis_pipeline.h); off, it fails.
  bool allow_missing_rank = false;
  // kAuto: microseconds (the Chrome trace format), unless the document says
  // "displayTimeUnit": "ns" before its first event and its timestamps are integers.
  TraceTimeUnit time_unit = TraceTimeUnit::kAuto;
};

struct KinetoTraceInfo {
  int32_t rank = -1;
  bool rank_assumed = false;  // from KinetoImportOptions::default_rank
  bool rank_missing = false;  // no rank anywhere (rank -1): KinetoImportOptions::allow_missing_rank
  int32_t world_size = -1;
  std::string backend;      // "nccl", "gloo", ...
  uint64_t bytes_read = 0;  // uncompressed JSON bytes
  uint64_t events_emitted = 0;
  uint64_t events_skipped = 0;    // well-formed but irrelevant (metadata, flows, instants)
  uint64_t events_malformed = 0;  // missing / bad ts, dur, name ...
  std::string first_malformed;    // description of the first malformed event
  uint64_t names_truncated = 0;   // event names longer than the cap, kept truncated
  uint64_t tracks = 0;            // host threads + device streams seen
  TraceTimeUnit time_unit = TraceTimeUnit::kMicroseconds;  // the unit actually applied
  bool bare_list = false;  // the document was a bare list of events (torch 1.13 CPU-only)
  // How busy the machine was while the trace was recorded: the trace's metadata event
  // {"ph": "M", "name": "perftracker_host_load", "args": {"cpu_ns", "run_delay_ns",
  // "wall_ns", "steal_fraction"}} (python/perftracker/host_load.py): the process's threads'
  // CPU time and run-queue wait over the recorded steps. All 0 when the trace has none.
  double load_cpu_ns = 0;
  double load_run_delay_ns = 0;
  double load_wall_ns = 0;
  // The host's steal time over all its CPU time then (0..1); -1 when the event does not say.
  double load_steal_fraction = -1;
};

// The name of the metadata event that carries KinetoTraceInfo's load.
inline constexpr std::string_view kHostLoadEventName = "perftracker_host_load";

// Streaming importer: feed chunks split at any byte, then call Finish().
// Memory stays bounded whatever the input: only one event object that spans two chunks is
// ever copied, and strings are capped while copying.
class KinetoImporter {
 public:
  // Names longer than this are truncated (at a UTF-8 boundary) and counted.
  static constexpr size_t kMaxNameBytes = 4096;

  // `source_name` is used in error messages (normally the file path) and, when the trace
  // has no distributedInfo.rank, to find the rank in its base name ("rank3", "rank-3", ...).
  KinetoImporter(std::string source_name, FunctionTable* functions, EventSink* sink,
                 KinetoImportOptions options = {});
  ~KinetoImporter();
  KinetoImporter(const KinetoImporter&) = delete;
  KinetoImporter& operator=(const KinetoImporter&) = delete;

  // Returns the first fatal error (and keeps returning it); bad events are only counted.
  Status Parse(const char* data, size_t size);
  // End of input: validates the document is complete and resolves the rank.
  StatusOr<KinetoTraceInfo> Finish();

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

// Reads a .json or .json.gz file in fixed-size chunks (memory does not grow with the file).
// Compression is recognised by its magic bytes, not by the file name; concatenated gzip
// members are read one after the other.
StatusOr<KinetoTraceInfo> ImportKinetoFile(const std::string& path, FunctionTable* functions,
                                           EventSink* sink, KinetoImportOptions options = {});

// The rank number in a trace file's base name ("rank3", "Rank-3", "rank_3"), if any.
std::optional<int32_t> RankFromFileName(const std::string& path);

}  // namespace perftracker
