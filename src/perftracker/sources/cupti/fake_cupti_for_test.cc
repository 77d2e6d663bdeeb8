// A fake libcupti for tests on machines without a GPU: the C entry points perftracker's
// LoadCuptiApi() resolves, with the signatures of the toolkit's cupti.h, producing records of
// the real CUDA 13 structs (CUpti_ActivityAPI, CUpti_ActivityKernel10, CUpti_ActivityMemcpy6)
// the way CUPTI delivers them: into buffers the client hands out through its request
// callback, returned through its completion callback, walked with
// cuptiActivityGetNextRecord.
//
// What it "traces": at cuptiActivityFlushAll, for the time since the kernel kind was enabled,
// FAKE_CUPTI_KERNELS (default 200) launches of "fake_gemm_kernel" spread evenly over it, each
// a cudaLaunchKernel runtime record on the calling thread and its kernel (same correlation
// id, 0.5 x the spacing long, device 0, stream 7), and one pageable host-to-device memcpy.
// Timestamps come from the client's timestamp callback when it registered one (as CUPTI's
// do), else CLOCK_REALTIME.
//
// Scripting: FAKE_CUPTI_SUBSCRIBE_RESULT=<CUptiResult> makes cuptiSubscribe fail with it (39:
// another subscriber); FAKE_CUPTI_LOG=<file> appends one line per entry point called.
#include <cupti.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace {

CUpti_BuffersCallbackRequestFunc g_request = nullptr;
CUpti_BuffersCallbackCompleteFunc g_complete = nullptr;
CUpti_TimestampCallbackFunc g_timestamp = nullptr;
bool g_subscribed = false;
bool g_kernels_on = false;  // between enable and disable of the kernel kind
uint64_t g_enabled_at = 0;
uint32_t g_correlation = 0;

void Log(const char* what) {
  const char* path = std::getenv("FAKE_CUPTI_LOG");
  if (path == nullptr) return;
  if (FILE* f = std::fopen(path, "a")) {
    std::fprintf(f, "%s\n", what);
    std::fclose(f);
  }
}

uint64_t Now() {
  if (g_timestamp != nullptr) return g_timestamp();
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000u + static_cast<uint64_t>(ts.tv_nsec);
}

size_t SizeOf(CUpti_ActivityKind kind) {
  switch (kind) {
    case CUPTI_ACTIVITY_KIND_RUNTIME:
      return sizeof(CUpti_ActivityAPI);
    case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL:
      return sizeof(CUpti_ActivityKernel10);
    case CUPTI_ACTIVITY_KIND_MEMCPY:
      return sizeof(CUpti_ActivityMemcpy6);
    default:
      return 0;
  }
}

size_t Aligned(size_t n) { return (n + 7) & ~size_t{7}; }

template <typename Record>
bool Append(uint8_t* buffer, size_t size, size_t* used, const Record& r) {
  if (*used + Aligned(sizeof(Record)) > size) return false;
  std::memcpy(buffer + *used, &r, sizeof(Record));
  *used += Aligned(sizeof(Record));
  return true;
}

// One buffer's worth of launches (the rest in further buffers).
void Deliver(uint64_t from, uint64_t to, int kernels) {
  const uint64_t spacing = kernels > 0 ? (to - from) / static_cast<uint64_t>(kernels + 1) : 0;
  const auto tid = static_cast<uint32_t>(syscall(SYS_gettid));
  int next = 0;
  bool memcpy_done = false;
  while (next < kernels || !memcpy_done) {
    uint8_t* buffer = nullptr;
    size_t size = 0;
    size_t max_records = 0;
    g_request(&buffer, &size, &max_records);
    if (buffer == nullptr) return;  // the client has no buffer to give: CUPTI would drop
    size_t used = 0;
    if (!memcpy_done) {
      CUpti_ActivityMemcpy6 m{};
      m.kind = CUPTI_ACTIVITY_KIND_MEMCPY;
      m.copyKind = CUPTI_ACTIVITY_MEMCPY_KIND_HTOD;
      m.srcKind = CUPTI_ACTIVITY_MEMORY_KIND_PAGEABLE;
      m.dstKind = CUPTI_ACTIVITY_MEMORY_KIND_DEVICE;
      m.bytes = 1 << 20;
      m.start = from + spacing / 4;
      m.end = m.start + spacing / 8 + 1;
      m.streamId = 7;
      m.correlationId = ++g_correlation;
      memcpy_done = Append(buffer, size, &used, m);
    }
    for (; next < kernels; ++next) {
      const uint64_t launch = from + spacing * static_cast<uint64_t>(next + 1);
      const uint32_t correlation = ++g_correlation;
      CUpti_ActivityAPI api{};
      api.kind = CUPTI_ACTIVITY_KIND_RUNTIME;
      api.cbid = CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000;
      api.start = launch;
      api.end = launch + 5'000;
      api.processId = static_cast<uint32_t>(getpid());
      api.threadId = tid;
      api.correlationId = correlation;
      CUpti_ActivityKernel10 k{};
      k.kind = CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL;
      k.name = "fake_gemm_kernel";
      k.start = launch + 10'000;
      k.end = k.start + spacing / 2 + 1;
      k.deviceId = 0;
      k.streamId = 7;
      k.correlationId = correlation;
      k.gridX = 128;
      k.blockX = 256;
      if (used + Aligned(sizeof(api)) + Aligned(sizeof(k)) > size) break;
      Append(buffer, size, &used, api);
      Append(buffer, size, &used, k);
    }
    g_complete(nullptr, 0, buffer, size, used);
    if (used == 0) return;  // a buffer too small for one launch
  }
}

}  // namespace

extern "C" {

CUptiResult CUPTIAPI cuptiSubscribe(CUpti_SubscriberHandle* subscriber, CUpti_CallbackFunc, void*) {
  Log("cuptiSubscribe");
  if (const char* r = std::getenv("FAKE_CUPTI_SUBSCRIBE_RESULT")) {
    return static_cast<CUptiResult>(std::atoi(r));
  }
  if (g_subscribed) return CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED;
  g_subscribed = true;
  *subscriber = reinterpret_cast<CUpti_SubscriberHandle>(0x1);
  return CUPTI_SUCCESS;
}

CUptiResult CUPTIAPI cuptiUnsubscribe(CUpti_SubscriberHandle) {
  Log("cuptiUnsubscribe");
  g_subscribed = false;
  return CUPTI_SUCCESS;
}

CUptiResult CUPTIAPI cuptiActivityRegisterCallbacks(CUpti_BuffersCallbackRequestFunc request,
                                                    CUpti_BuffersCallbackCompleteFunc complete) {
  g_request = request;
  g_complete = complete;
  return CUPTI_SUCCESS;
}

CUptiResult CUPTIAPI cuptiActivityRegisterTimestampCallback(CUpti_TimestampCallbackFunc f) {
  g_timestamp = f;
  return CUPTI_SUCCESS;
}

CUptiResult CUPTIAPI cuptiActivityEnable(CUpti_ActivityKind kind) {
  if (kind == CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) {
    Log("cuptiActivityEnable CONCURRENT_KERNEL");
    g_kernels_on = true;
    g_enabled_at = Now();
  }
  return CUPTI_SUCCESS;
}

CUptiResult CUPTIAPI cuptiActivityDisable(CUpti_ActivityKind kind) {
  if (kind == CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) {
    Log("cuptiActivityDisable CONCURRENT_KERNEL");
    g_kernels_on = false;  // what was recorded stays buffered until the flush
  }
  return CUPTI_SUCCESS;
}

CUptiResult CUPTIAPI cuptiActivityFlushAll(uint32_t) {
  Log("cuptiActivityFlushAll");
  if (g_enabled_at == 0 || g_request == nullptr || g_complete == nullptr) return CUPTI_SUCCESS;
  const char* n = std::getenv("FAKE_CUPTI_KERNELS");
  const int kernels = n != nullptr ? std::atoi(n) : 200;
  const uint64_t from = g_enabled_at;
  g_enabled_at = 0;
  Deliver(from, Now(), kernels);
  return CUPTI_SUCCESS;
}

CUptiResult CUPTIAPI cuptiActivityGetNextRecord(uint8_t* buffer, size_t valid,
                                                CUpti_Activity** record) {
  uint8_t* next = buffer;
  if (*record != nullptr) {
    const auto* current = reinterpret_cast<uint8_t*>(*record);
    next = const_cast<uint8_t*>(current) + Aligned(SizeOf((*record)->kind));
  }
  if (next + sizeof(CUpti_Activity) > buffer + valid) return CUPTI_ERROR_MAX_LIMIT_REACHED;
  CUpti_Activity head{};
  std::memcpy(&head, next, sizeof(head));
  if (SizeOf(head.kind) == 0 || next + SizeOf(head.kind) > buffer + valid) {
    return CUPTI_ERROR_MAX_LIMIT_REACHED;
  }
  *record = reinterpret_cast<CUpti_Activity*>(next);
  return CUPTI_SUCCESS;
}

CUptiResult CUPTIAPI cuptiActivityGetNumDroppedRecords(CUcontext, uint32_t, size_t* dropped) {
  *dropped = 0;
  return CUPTI_SUCCESS;
}

CUptiResult CUPTIAPI cuptiGetResultString(CUptiResult result, const char** str) {
  switch (result) {
    case CUPTI_SUCCESS:
      *str = "CUPTI_SUCCESS";
      break;
    case CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED:
      *str = "CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED";
      break;
    case CUPTI_ERROR_NOT_INITIALIZED:
      *str = "CUPTI_ERROR_NOT_INITIALIZED";
      break;
    default:
      *str = "CUPTI_ERROR_UNKNOWN";
      break;
  }
  return CUPTI_SUCCESS;
}

CUptiResult CUPTIAPI cuptiGetCallbackName(CUpti_CallbackDomain domain, uint32_t cbid,
                                          const char** name) {
  if (domain == CUPTI_CB_DOMAIN_RUNTIME_API &&
      cbid == CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000) {
    *name = "cudaLaunchKernel_v7000";
    return CUPTI_SUCCESS;
  }
  return CUPTI_ERROR_INVALID_PARAMETER;
}

CUptiResult CUPTIAPI cuptiGetTimestamp(uint64_t* timestamp) {
  *timestamp = Now();
  return CUPTI_SUCCESS;
}

}  // extern "C"
