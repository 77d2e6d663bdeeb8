// Wire form of WorkerDigest (perftracker.v1.WorkerDigest, perftracker.proto): what a
// collector sends first for a window under progressive disclosure (docs/server.md).
//
// Decoding validates what the screen relies on (arrays of one length, counts and times not
// negative, at most the budgets of summary/worker_digest.h) and returns a DataLoss Status
// with one line; bytes over kMaxDigestBytes are refused before parsing. A newer collector's
// metric ids and event kinds are not corrupt: that worker metric, or that function, is left
// out and counted in *unknown when given (unknown_values.h).
#pragma once

#include <string>
#include <string_view>

#include "perftracker/core/status.h"
#include "perftracker/summary/worker_digest.h"
#include "perftracker/wire/unknown_values.h"

namespace perftracker {

std::string EncodeWorkerDigest(const WorkerDigest& digest);
StatusOr<WorkerDigest> DecodeWorkerDigest(std::string_view bytes, UnknownValues* unknown = nullptr);

}  // namespace perftracker
