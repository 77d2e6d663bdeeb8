// Wire form of WorkerDigest (perftracker.v1.WorkerDigest, perftracker.proto): what a
// collector sends first for a window under progressive disclosure (docs/server.md).
//
// Decoding validates what the screen relies on (kinds and metrics known, arrays of one
// length, counts and times not negative, at most the budgets of summary/worker_digest.h) and
// returns a DataLoss Status with one line; bytes over kMaxDigestBytes are refused before
// parsing.
#pragma once

#include <string>
#include <string_view>

#include "perftracker/core/status.h"
#include "perftracker/summary/worker_digest.h"

namespace perftracker {

std::string EncodeWorkerDigest(const WorkerDigest& digest);
StatusOr<WorkerDigest> DecodeWorkerDigest(std::string_view bytes);

}  // namespace perftracker
