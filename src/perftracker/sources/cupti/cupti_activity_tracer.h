// CuptiActivityTracer: CUPTI Activity API tracing switched on for a profiling window only.
//
// State machine (one tracer per process; CUPTI's activity callbacks are process-global):
//
//   kIdle --Enable()--> kActive --Disable()--> kIdle
//     |                    (subscribe, register buffer callbacks, enable kinds;
//     |                     Disable: disable kinds, forced flush, unsubscribe)
//     +--Enable(): another CUPTI client holds the subscription
//     |  (cuptiSubscribe = CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED: torch.profiler /
//     |  Kineto, Nsight) or an activity kind cannot be enabled  --> kBackedOff
//     |  (everything undone; said once; the next Enable() tries again, the other client
//     |   may be gone by then)
//     +--Enable(): libcupti missing, or CUPTI cannot initialize (no driver / no GPU)
//        --> kUnavailable (said once; permanent for the process)
//
// Buffers are bounded: at most max_buffers of buffer_bytes each are handed to CUPTI at a time;
// a request beyond that gets no buffer (CUPTI then drops records and counts them; both counts
// are kept). Completed buffers are converted (CuptiRecordConverter) into the sink under a
// mutex, on CUPTI's worker thread or inside Disable()'s flush, and given back to the pool.
//
// Time: the timestamp callback (cuptiActivityRegisterTimestampCallback) is set to
// CLOCK_REALTIME ns, perftracker's time base, so CUPTI's records need no conversion; where
// that call is missing the offset RealtimeNs() - cuptiGetTimestamp() is measured at Enable()
// (bracketed by two realtime reads) and added to every timestamp.
//
// Threading: Enable()/Disable() from one control thread; the sink is called from CUPTI's
// thread and from the thread calling Disable(), never concurrently.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "perftracker/core/event_sink.h"
#include "perftracker/core/function_table.h"
#include "perftracker/core/status.h"
#include "perftracker/sources/cupti/cupti_api.h"
#include "perftracker/sources/cupti/cupti_record_converter.h"

namespace perftracker {

enum class CuptiTracerState : uint8_t { kIdle, kActive, kBackedOff, kUnavailable };
std::string_view CuptiTracerStateName(CuptiTracerState state);

struct CuptiTracerOptions {
  size_t buffer_bytes = 4u << 20;
  size_t max_buffers = 8;
  bool driver_api = false;  // also trace driver API calls (runtime calls are always traced)
  std::function<void(std::string_view)> log;  // default: stderr, "perftracker agent: ..."
};

struct CuptiTracerStats {
  uint64_t windows = 0;    // successful Enable()s
  uint64_t back_offs = 0;  // Enable()s refused because another client is active
  uint64_t buffers_requested = 0;
  uint64_t buffers_denied = 0;  // requests refused: all max_buffers were in use
  uint64_t buffers_completed = 0;
};

class CuptiActivityTracer {
 public:
  // `functions` and `sink` are not owned and must outlive the tracer.
  CuptiActivityTracer(CuptiApi api, FunctionTable* functions, EventSink* sink,
                      CuptiTracerOptions options = {});
  // A tracer for a process where libcupti could not be loaded: Enable() says why, once.
  CuptiActivityTracer(Status load_error, FunctionTable* functions, EventSink* sink,
                      CuptiTracerOptions options = {});
  ~CuptiActivityTracer();
  CuptiActivityTracer(const CuptiActivityTracer&) = delete;
  CuptiActivityTracer& operator=(const CuptiActivityTracer&) = delete;

  // Starts tracing (window start). Ok when active; otherwise the reason (also logged once).
  Status Enable();
  // Stops tracing and delivers every buffered record to the sink (window end). No-op unless
  // active.
  void Disable();

  CuptiTracerState state() const { return state_; }
  CuptiTracerStats stats() const;
  CuptiConverterStats converter_stats() const;

 private:
  static void CUPTIAPI OnBufferRequested(uint8_t** buffer, size_t* size, size_t* max_records);
  static void CUPTIAPI OnBufferCompleted(CUcontext context, uint32_t stream_id, uint8_t* buffer,
                                         size_t size, size_t valid_size);
  static void CUPTIAPI OnCallback(void* userdata, CUpti_CallbackDomain domain,
                                  CUpti_CallbackId cbid, const void* data);
  static uint64_t CUPTIAPI Timestamp();

  void RequestBuffer(uint8_t** buffer, size_t* size);
  void CompleteBuffer(CUcontext context, uint32_t stream_id, uint8_t* buffer, size_t valid_size);
  Status BackOff(const std::string& why);
  Status Unavailable(const std::string& why);
  void LogOnce(bool* said, const std::string& line);
  std::vector<CUpti_ActivityKind> Kinds() const;

  CuptiApi api_;
  Status load_error_;
  CuptiTracerOptions options_;
  CuptiTracerState state_ = CuptiTracerState::kIdle;
  CUpti_SubscriberHandle subscriber_ = nullptr;
  std::vector<CUpti_ActivityKind> enabled_;
  bool said_back_off_ = false;
  bool said_unavailable_ = false;

  mutable std::mutex mu_;  // guards everything below (callbacks run on CUPTI's thread)
  CuptiRecordConverter converter_;
  std::vector<std::unique_ptr<uint8_t[]>> free_buffers_;
  size_t buffers_out_ = 0;
  CuptiTracerStats stats_;
};

}  // namespace perftracker
