// Wire form of WorkerSummary (protobuf schema perftracker.v1, see
// perftracker.proto). The generated types never leave wire/: callers only see perftracker
// structs and bytes.
//
// Decoding validates everything a later layer relies on (string-table and parent indices in
// range, sketches consistent, sizes bounded) and returns a DataLoss Status with one line
// saying what is wrong; corrupt, truncated or random bytes never crash and never allocate
// without bound. What a newer collector may add is not corrupt: a metric id this perftracker
// does not know is left out (that metric's level only), a function of an unknown event kind
// is left out with every function below it (its time stays in its parent's total and in the
// iterations' breakdown; a guessed kind would give it a meaning the rules read), and each is
// counted in *unknown when given (unknown_values.h, docs/server.md "Versions").
//
// Exactness: every field round-trips exactly, except FunctionMetric mean / stddev, which
// travel as float32 (the WindowSummarizer already rounds them to float precision, so its
// summaries round-trip exactly too).
#pragma once

#include <string>
#include <string_view>

#include "perftracker/core/status.h"
#include "perftracker/summary/worker_summary.h"
#include "perftracker/wire/unknown_values.h"

namespace perftracker {

// Encoded messages above this size are rejected by the decoders (a WorkerSummary is
// normally a few tens of KB; see docs/performance.md "Summary size").
inline constexpr size_t kMaxWireMessageBytes = 64u << 20;

std::string EncodeWorkerSummary(const WorkerSummary& summary);
StatusOr<WorkerSummary> DecodeWorkerSummary(std::string_view bytes,
                                            UnknownValues* unknown = nullptr);

}  // namespace perftracker
