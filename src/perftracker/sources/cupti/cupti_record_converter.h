// CuptiRecordConverter: CUPTI Activity API records (the structs of the toolkit's
// cupti_activity.h) -> Events. The testable half of the CUPTI source: it needs the header's
// types only, never libcupti or a GPU, so tests fill real record structs in by hand
// (Kineto's fabricated-buffer tests).
//
// Mapping (record kind -> Event):
//   CONCURRENT_KERNEL / KERNEL  (CUpti_ActivityKernel10)  -> kGpuKernel, device-stream track,
//                                 name = demangled kernel name, correlation = correlationId
//   MEMCPY   (CUpti_ActivityMemcpy6)  -> kMemcpy, payload = bytes, name "Memcpy HtoD
//                                 (Pageable -> Device)", kEventFlagPageable when either side
//                                 is pageable host memory
//   MEMCPY2  (CUpti_ActivityMemcpyPtoP4) -> kMemcpy, "Memcpy PtoP (GPU 0 -> GPU 1)": copies
//                                 between GPUs (NVLink / PCIe peer-to-peer)
//   MEMSET   (CUpti_ActivityMemset4)  -> kMemset, payload = bytes
//   RUNTIME / DRIVER (CUpti_ActivityAPI) -> host-thread track (threadId):
//                                 launches (cudaLaunchKernel*, cuLaunchKernel*, graph launches)
//                                 -> kKernelLaunch with correlation = correlationId, the id the
//                                 kernel record carries: that pair is the launch->kernel link;
//                                 synchronize calls are skipped (the SYNCHRONIZATION record
//                                 below covers them, with the stream); others -> kRuntimeCall
//   SYNCHRONIZATION (CUpti_ActivitySynchronization2) -> kSync on the host thread whose API
//                                 record has the same correlation id (looked up in the same
//                                 buffer first, then in a bounded map of recent API records),
//                                 else on a per-context "cuda sync" track; stream-wait-event
//                                 records (a device-side wait, the host does not block) ->
//                                 kRuntimeCall
// Anything else is counted in stats().unknown_kinds (first one kept) and skipped.
//
// Time: every timestamp is a CUPTI timestamp plus clock_offset_ns. On Linux CUPTI's
// timestamps are CLOCK_REALTIME ns already (cupti_activity.h, cuptiActivityRegisterTimestamp-
// Callback), the time base of every perftracker process; the tracer registers RealtimeNs as
// the timestamp callback to make that explicit and otherwise measures the offset
// (CuptiActivityTracer). GPU-side times are CUPTI's interpolation of the GPU clock onto
// that base. A record with end < start (a kernel whose end CUPTI could not collect: end = 0)
// is counted as malformed and skipped.
//
// Bounds: a record whose struct does not fit in what is left of the buffer is a truncated
// buffer: counted, and the rest of the buffer is skipped. Not thread-safe: the tracer
// serializes buffer completion.
#pragma once

#include <cupti_activity.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "perftracker/core/event_sink.h"
#include "perftracker/core/function_table.h"

namespace perftracker {

struct CuptiConverterStats {
  uint64_t records = 0;  // records looked at
  uint64_t events = 0;   // Events emitted
  uint64_t kernels = 0;
  uint64_t memcpys = 0;
  uint64_t memsets = 0;
  uint64_t launches = 0;
  uint64_t runtime_calls = 0;
  uint64_t syncs = 0;
  uint64_t api_syncs_skipped = 0;  // synchronize API records (covered by SYNCHRONIZATION)
  uint64_t unknown_kinds = 0;
  uint32_t first_unknown_kind = 0;
  uint64_t malformed = 0;          // end < start, null kernel name ...
  uint64_t truncated_buffers = 0;  // a record ran past the buffer's valid bytes
  uint64_t dropped_by_cupti = 0;   // reported by cuptiActivityGetNumDroppedRecords
};

// Resolves an API record's callback id to its name ("cudaLaunchKernel_v7000").
// `runtime` false = driver API. Returns nullptr when unknown.
using CuptiCallbackNameFn = std::function<const char*(bool runtime, uint32_t cbid)>;

class CuptiRecordConverter {
 public:
  // Walks a completed buffer: returns the record after `current` (nullptr: the first), or
  // nullptr at the end. The tracer passes cuptiActivityGetNextRecord; tests their own walker.
  using NextRecordFn =
      std::function<CUpti_Activity*(uint8_t* buffer, size_t valid_bytes, CUpti_Activity* current)>;

  // `functions` and `sink` are not owned and must outlive the converter.
  CuptiRecordConverter(FunctionTable* functions, EventSink* sink, CuptiCallbackNameFn names);

  void set_clock_offset_ns(int64_t offset) { clock_offset_ns_ = offset; }
  int64_t clock_offset_ns() const { return clock_offset_ns_; }

  // Converts every record of one completed buffer.
  void ConvertBuffer(uint8_t* buffer, size_t valid_bytes, const NextRecordFn& next);
  // Converts one record that has `available` valid bytes from `record` on.
  // Returns false when the record is truncated (its struct needs more than `available`).
  bool ConvertRecord(const CUpti_Activity* record, size_t available);

  void AddDroppedByCupti(uint64_t n) { stats_.dropped_by_cupti += n; }
  const CuptiConverterStats& stats() const { return stats_; }

  // The size of the record struct this converter reads for `kind` (0: a kind it ignores).
  static size_t RecordSize(CUpti_ActivityKind kind);
  // Synthetic track ids: device streams and host threads live in distinct ranges so that the
  // ids never collide with each other (or with the agent's ring indexes below 2^24).
  static uint32_t StreamTrackId(uint32_t device, uint32_t stream);

 private:
  void ConvertKernel(const CUpti_ActivityKernel10& k);
  void ConvertMemcpy(const CUpti_ActivityMemcpy6& m);
  void ConvertPeerCopy(const CUpti_ActivityMemcpyPtoP4& m);
  void ConvertMemset(const CUpti_ActivityMemset4& m);
  void ConvertApi(const CUpti_ActivityAPI& a, bool runtime);
  void ConvertSync(const CUpti_ActivitySynchronization2& s);
  void RememberApiThread(const CUpti_Activity* record, size_t available);

  uint32_t Function(EventKind kind, std::string_view name);
  uint32_t StreamTrack(uint32_t device, uint32_t stream);
  uint32_t ThreadTrack(uint32_t thread_id);
  uint32_t SyncTrack(uint32_t context);
  bool Emit(Event ev, uint64_t start, uint64_t end);
  // A memcpy, peer copy or memset record (the same fields, other names and flags).
  template <typename Record>
  bool EmitTransfer(EventKind kind, const std::string& name, uint8_t flags, const Record& r);

  FunctionTable* functions_;
  EventSink* sink_;
  CuptiCallbackNameFn names_;
  int64_t clock_offset_ns_ = 0;
  CuptiConverterStats stats_;
  std::unordered_map<std::string, uint32_t> function_ids_;  // by kind + name
  std::unordered_map<uint64_t, uint32_t> tracks_;           // announced tracks
  // correlation id -> host thread of the API record, bounded (kMaxCorrelations, FIFO).
  std::unordered_map<uint32_t, uint32_t> api_thread_;
  std::vector<uint32_t> api_thread_order_;
  size_t api_thread_next_ = 0;
  // Mangled kernel name -> function id (heterogeneous lookup: no copy per record).
  struct NameHash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  std::unordered_map<std::string, uint32_t, NameHash, std::equal_to<>> kernel_ids_;
};

}  // namespace perftracker
