#include "perftracker/sources/cupti/cupti_activity_tracer.h"

#include <atomic>
#include <cstdio>

#include "perftracker/core/realtime_clock.h"

namespace perftracker {
namespace {

// CUPTI's activity callbacks carry no user pointer: the tracer that registered them.
std::atomic<CuptiActivityTracer*> g_tracer{nullptr};

}  // namespace

std::string_view CuptiTracerStateName(CuptiTracerState state) {
  switch (state) {
    case CuptiTracerState::kIdle:
      return "idle";
    case CuptiTracerState::kActive:
      return "active";
    case CuptiTracerState::kBackedOff:
      return "backed off";
    case CuptiTracerState::kUnavailable:
      return "unavailable";
  }
  return "?";
}

CuptiActivityTracer::CuptiActivityTracer(CuptiApi api, FunctionTable* functions, EventSink* sink,
                                         CuptiTracerOptions options)
    : api_(api),
      options_(std::move(options)),
      converter_(functions, sink, [this](bool runtime, uint32_t cbid) -> const char* {
        const char* name = nullptr;
        if (api_.get_callback_name == nullptr ||
            api_.get_callback_name(
                runtime ? CUPTI_CB_DOMAIN_RUNTIME_API : CUPTI_CB_DOMAIN_DRIVER_API, cbid, &name) !=
                CUPTI_SUCCESS) {
          return nullptr;
        }
        return name;
      }) {
  if (!options_.log) {
    options_.log = [](std::string_view line) {
      std::fprintf(stderr, "perftracker agent: %.*s\n", static_cast<int>(line.size()), line.data());
    };
  }
}

CuptiActivityTracer::CuptiActivityTracer(Status load_error, FunctionTable* functions,
                                         EventSink* sink, CuptiTracerOptions options)
    : CuptiActivityTracer(CuptiApi{}, functions, sink, std::move(options)) {
  load_error_ = std::move(load_error);
  if (load_error_.ok()) load_error_ = Status::Internal("CUPTI: no library loaded");
}

CuptiActivityTracer::~CuptiActivityTracer() {
  Disable();
  CuptiActivityTracer* self = this;
  g_tracer.compare_exchange_strong(self, nullptr);
}

void CuptiActivityTracer::LogOnce(bool* said, const std::string& line) {
  if (*said) return;
  *said = true;
  options_.log(line);
}

std::vector<CUpti_ActivityKind> CuptiActivityTracer::Kinds() const {
  std::vector<CUpti_ActivityKind> kinds = {
      CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, CUPTI_ACTIVITY_KIND_MEMCPY,
      CUPTI_ACTIVITY_KIND_MEMCPY2,           CUPTI_ACTIVITY_KIND_MEMSET,
      CUPTI_ACTIVITY_KIND_SYNCHRONIZATION,   CUPTI_ACTIVITY_KIND_RUNTIME};
  if (options_.driver_api) kinds.push_back(CUPTI_ACTIVITY_KIND_DRIVER);
  return kinds;
}

Status CuptiActivityTracer::BackOff(const std::string& why) {
  state_ = CuptiTracerState::kBackedOff;
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++stats_.back_offs;
  }
  const std::string line =
      "CUPTI: " + why +
      " (another CUPTI client is active: torch.profiler / Kineto, Nsight or a debugger); "
      "perftracker's GPU kernel tracing stays off while it is, and is retried at each window";
  LogOnce(&said_back_off_, line);
  return Status::Internal(line);
}

Status CuptiActivityTracer::Unavailable(const std::string& why) {
  state_ = CuptiTracerState::kUnavailable;
  LogOnce(&said_unavailable_, why);
  return Status::Internal(why);
}

Status CuptiActivityTracer::Enable() {
  switch (state_) {
    case CuptiTracerState::kActive:
      return Status::Ok();
    case CuptiTracerState::kUnavailable:
      return Status::Internal("CUPTI tracing is unavailable in this process");
    case CuptiTracerState::kIdle:
    case CuptiTracerState::kBackedOff:
      break;
  }
  if (!load_error_.ok()) return Unavailable(load_error_.message());
  CuptiActivityTracer* expected = nullptr;
  if (!g_tracer.compare_exchange_strong(expected, this) && expected != this) {
    return Unavailable("CUPTI: another perftracker CUPTI tracer is already registered");
  }

  CUptiResult r = api_.subscribe(&subscriber_, &CuptiActivityTracer::OnCallback, this);
  if (r == CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED) {
    subscriber_ = nullptr;
    return BackOff("cuptiSubscribe: " + CuptiResultText(api_, r));
  }
  if (r != CUPTI_SUCCESS) {
    subscriber_ = nullptr;
    return Unavailable("CUPTI: cannot initialize (cuptiSubscribe: " + CuptiResultText(api_, r) +
                       "; no GPU or driver?): GPU kernel tracing is off");
  }
  r = api_.register_callbacks(&CuptiActivityTracer::OnBufferRequested,
                              &CuptiActivityTracer::OnBufferCompleted);
  if (r != CUPTI_SUCCESS) {
    api_.unsubscribe(subscriber_);
    subscriber_ = nullptr;
    return Unavailable("CUPTI: cuptiActivityRegisterCallbacks: " + CuptiResultText(api_, r) +
                       ": GPU kernel tracing is off");
  }
  int64_t offset = 0;
  if (api_.register_timestamp_callback == nullptr ||
      api_.register_timestamp_callback(&CuptiActivityTracer::Timestamp) != CUPTI_SUCCESS) {
    uint64_t cupti_now = 0;
    const int64_t before = RealtimeNs();
    if (api_.get_timestamp(&cupti_now) == CUPTI_SUCCESS) {
      const int64_t after = RealtimeNs();
      offset = before + (after - before) / 2 - static_cast<int64_t>(cupti_now);
    }
  }
  for (CUpti_ActivityKind kind : Kinds()) {
    r = api_.enable(kind);
    if (r != CUPTI_SUCCESS) {
      for (CUpti_ActivityKind done : enabled_) api_.disable(done);
      enabled_.clear();
      api_.flush_all(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
      api_.unsubscribe(subscriber_);
      subscriber_ = nullptr;
      return BackOff("cuptiActivityEnable(kind " + std::to_string(static_cast<int>(kind)) +
                     "): " + CuptiResultText(api_, r));
    }
    enabled_.push_back(kind);
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    converter_.set_clock_offset_ns(offset);
    ++stats_.windows;
  }
  state_ = CuptiTracerState::kActive;
  said_back_off_ = false;  // a later back-off is news again
  return Status::Ok();
}

void CuptiActivityTracer::Disable() {
  if (state_ != CuptiTracerState::kActive) return;
  for (CUpti_ActivityKind kind : enabled_) api_.disable(kind);
  enabled_.clear();
  // Forced: also the buffers that are not full; OnBufferCompleted runs before this returns.
  api_.flush_all(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
  api_.unsubscribe(subscriber_);
  subscriber_ = nullptr;
  state_ = CuptiTracerState::kIdle;
}

CuptiTracerStats CuptiActivityTracer::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

CuptiConverterStats CuptiActivityTracer::converter_stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return converter_.stats();
}

void CuptiActivityTracer::RequestBuffer(uint8_t** buffer, size_t* size) {
  std::lock_guard<std::mutex> lock(mu_);
  ++stats_.buffers_requested;
  if (buffers_out_ >= options_.max_buffers) {
    ++stats_.buffers_denied;
    *buffer = nullptr;
    *size = 0;
    return;
  }
  std::unique_ptr<uint8_t[]> b;
  if (!free_buffers_.empty()) {
    b = std::move(free_buffers_.back());
    free_buffers_.pop_back();
  } else {
    b.reset(new (std::nothrow) uint8_t[options_.buffer_bytes]);  // 16-byte aligned
    if (!b) {
      ++stats_.buffers_denied;
      *buffer = nullptr;
      *size = 0;
      return;
    }
  }
  ++buffers_out_;
  *buffer = b.release();
  *size = options_.buffer_bytes;
}

void CuptiActivityTracer::CompleteBuffer(CUcontext context, uint32_t stream_id, uint8_t* buffer,
                                         size_t valid_size) {
  std::unique_ptr<uint8_t[]> owned(buffer);
  std::lock_guard<std::mutex> lock(mu_);
  ++stats_.buffers_completed;
  if (buffers_out_ > 0) --buffers_out_;
  if (buffer != nullptr && valid_size > 0) {
    converter_.ConvertBuffer(
        buffer, valid_size, [this](uint8_t* b, size_t valid, CUpti_Activity* current) {
          CUpti_Activity* record = current;
          return api_.get_next_record(b, valid, &record) == CUPTI_SUCCESS ? record : nullptr;
        });
  }
  size_t dropped = 0;
  if (api_.get_num_dropped_records != nullptr &&
      api_.get_num_dropped_records(context, stream_id, &dropped) == CUPTI_SUCCESS) {
    converter_.AddDroppedByCupti(dropped);
  }
  if (owned && free_buffers_.size() < options_.max_buffers) {
    free_buffers_.push_back(std::move(owned));
  }
}

void CUPTIAPI CuptiActivityTracer::OnBufferRequested(uint8_t** buffer, size_t* size,
                                                     size_t* max_records) {
  *max_records = 0;  // as many as fit
  CuptiActivityTracer* t = g_tracer.load();
  if (t == nullptr) {
    *buffer = nullptr;
    *size = 0;
    return;
  }
  t->RequestBuffer(buffer, size);
}

void CUPTIAPI CuptiActivityTracer::OnBufferCompleted(CUcontext context, uint32_t stream_id,
                                                     uint8_t* buffer, size_t /*size*/,
                                                     size_t valid_size) {
  CuptiActivityTracer* t = g_tracer.load();
  if (t == nullptr) {
    delete[] buffer;  // every buffer CUPTI holds came from RequestBuffer's new[]
    return;
  }
  t->CompleteBuffer(context, stream_id, buffer, valid_size);
}

void CUPTIAPI CuptiActivityTracer::OnCallback(void* /*userdata*/, CUpti_CallbackDomain /*domain*/,
                                              CUpti_CallbackId /*cbid*/, const void* /*data*/) {
  // The subscription only claims CUPTI (and detects another client); no callback domain is
  // enabled, so nothing arrives here.
}

uint64_t CUPTIAPI CuptiActivityTracer::Timestamp() { return static_cast<uint64_t>(RealtimeNs()); }

}  // namespace perftracker
