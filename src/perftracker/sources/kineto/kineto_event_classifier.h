// KinetoEventClassifier: which perftracker EventKind a Kineto trace event becomes, from its
// category and name alone (the mapping table is in kineto_importer.cc's header comment).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "perftracker/core/event.h"

namespace perftracker {

struct KinetoEventClass {
  bool keep = false;            // false: skipped (profiler span, flows, unknown category)
  bool on_device = false;       // lives on a device stream track
  bool payload_bytes = false;   // payload = args.bytes (memcpy / memset)
  bool payload_nelems = false;  // payload = args["In msg nelems"] × sizeof(dtype) (collectives)
  uint8_t flags = 0;
  EventKind kind = EventKind::kTorchOp;
  std::string_view name;        // the identity name: "ProfilerStep#12" becomes "ProfilerStep"
};

// `has_cat` false: a torch 1.13 CPU-only trace, which writes no "cat" at all.
KinetoEventClass ClassifyKinetoEvent(bool has_cat, std::string_view cat, std::string_view name);

// Bytes per element of a torch / NCCL dtype name ("Float", "BFloat16", "ncclInt64", ...);
// 0 when unknown.
size_t KinetoDtypeSize(std::string_view dtype);

}  // namespace perftracker
