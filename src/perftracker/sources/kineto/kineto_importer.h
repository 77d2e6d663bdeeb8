// Importer for the trace files torch.profiler writes (Kineto / Chrome trace JSON).
// (Format notes and algorithm: see kineto_importer.cc's header comment.)
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "perftracker/core/event_sink.h"
#include "perftracker/core/function_table.h"
#include "perftracker/core/status.h"

namespace perftracker {

enum class TraceTimeUnit : uint8_t { kAuto, kMicroseconds, kNanoseconds };

struct KinetoImportOptions {
  std::optional<int32_t> rank;  // overrides distributedInfo and the file name
  TraceTimeUnit time_unit = TraceTimeUnit::kAuto;
};

struct KinetoTraceInfo {
  int32_t rank = -1;
  int32_t world_size = -1;
  std::string backend;  // "nccl", "gloo", ...
  uint64_t bytes_read = 0;  // uncompressed JSON bytes
  uint64_t events_emitted = 0;
  uint64_t events_skipped = 0;    // well-formed but irrelevant (metadata, flows, instants)
  uint64_t events_malformed = 0;  // missing / bad ts, dur, name ...
  std::string first_malformed;    // description of the first malformed event
};

// Streaming importer: feed chunks split at any byte, then call Finish().
class KinetoImporter {
 public:
  // `source_name` is used in error messages (normally the file path).
  KinetoImporter(std::string source_name, FunctionTable* functions, EventSink* sink,
                 KinetoImportOptions options = {});
  ~KinetoImporter();

  Status Parse(const char* data, size_t size);
  // End of input: validates the document is complete and resolves the rank.
  StatusOr<KinetoTraceInfo> Finish();

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

// Reads a .json or .json.gz file in fixed-size chunks (memory does not grow with the file).
StatusOr<KinetoTraceInfo> ImportKinetoFile(const std::string& path, FunctionTable* functions,
                                           EventSink* sink, KinetoImportOptions options = {});

}  // namespace perftracker
