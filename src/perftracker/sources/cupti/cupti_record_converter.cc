#include "perftracker/sources/cupti/cupti_record_converter.h"

#include <cxxabi.h>

#include <cstdlib>
#include <cstring>

namespace perftracker {
namespace {

constexpr size_t kMaxCorrelations = 1u << 16;  // remembered API record threads
constexpr uint32_t kStreamTrackBase = 0x40000000u;
constexpr uint32_t kThreadTrackBase = 0x20000000u;
constexpr uint32_t kSyncTrackBase = 0x10000000u;
constexpr uint32_t kTrackLowMask = 0x0fffffffu;

const char* MemoryKindName(uint8_t kind) {
  switch (kind) {
    case CUPTI_ACTIVITY_MEMORY_KIND_PAGEABLE:
      return "Pageable";
    case CUPTI_ACTIVITY_MEMORY_KIND_PINNED:
      return "Pinned";
    case CUPTI_ACTIVITY_MEMORY_KIND_DEVICE:
      return "Device";
    case CUPTI_ACTIVITY_MEMORY_KIND_ARRAY:
      return "Array";
    case CUPTI_ACTIVITY_MEMORY_KIND_MANAGED:
      return "Managed";
    case CUPTI_ACTIVITY_MEMORY_KIND_DEVICE_STATIC:
      return "DeviceStatic";
    case CUPTI_ACTIVITY_MEMORY_KIND_MANAGED_STATIC:
      return "ManagedStatic";
    default:
      return "Unknown";
  }
}

const char* CopyKindName(uint8_t kind) {
  switch (kind) {
    case CUPTI_ACTIVITY_MEMCPY_KIND_HTOD:
      return "HtoD";
    case CUPTI_ACTIVITY_MEMCPY_KIND_DTOH:
      return "DtoH";
    case CUPTI_ACTIVITY_MEMCPY_KIND_HTOA:
      return "HtoA";
    case CUPTI_ACTIVITY_MEMCPY_KIND_ATOH:
      return "AtoH";
    case CUPTI_ACTIVITY_MEMCPY_KIND_ATOA:
      return "AtoA";
    case CUPTI_ACTIVITY_MEMCPY_KIND_ATOD:
      return "AtoD";
    case CUPTI_ACTIVITY_MEMCPY_KIND_DTOA:
      return "DtoA";
    case CUPTI_ACTIVITY_MEMCPY_KIND_DTOD:
      return "DtoD";
    case CUPTI_ACTIVITY_MEMCPY_KIND_HTOH:
      return "HtoH";
    case CUPTI_ACTIVITY_MEMCPY_KIND_PTOP:
      return "PtoP";
    default:
      return "Unknown";
  }
}

const char* SyncTypeName(CUpti_ActivitySynchronizationType type) {
  switch (type) {
    case CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_EVENT_SYNCHRONIZE:
      return "cudaEventSynchronize";
    case CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_STREAM_WAIT_EVENT:
      return "cudaStreamWaitEvent";
    case CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_STREAM_SYNCHRONIZE:
      return "cudaStreamSynchronize";
    case CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_CONTEXT_SYNCHRONIZE:
      return "cudaDeviceSynchronize";
    default:
      return "cuda synchronization";
  }
}

// "cudaLaunchKernel_v7000" -> "cudaLaunchKernel": the suffix is the API version, not identity.
std::string_view StripVersion(std::string_view name) {
  const size_t pos = name.rfind("_v");
  if (pos == std::string_view::npos || pos + 2 >= name.size()) return name;
  for (size_t i = pos + 2; i < name.size(); ++i) {
    if (name[i] < '0' || name[i] > '9') return name;
  }
  return name.substr(0, pos);
}

bool StartsWith(std::string_view s, std::string_view prefix) {
  return s.substr(0, prefix.size()) == prefix;
}

bool IsLaunch(std::string_view name) {
  return StartsWith(name, "cudaLaunch") || StartsWith(name, "cuLaunch") ||
         StartsWith(name, "cudaGraphLaunch") || StartsWith(name, "cuGraphLaunch");
}

bool IsSynchronize(std::string_view name) {
  return name.find("Synchronize") != std::string_view::npos;
}

}  // namespace

CuptiRecordConverter::CuptiRecordConverter(FunctionTable* functions, EventSink* sink,
                                           CuptiCallbackNameFn names)
    : functions_(functions), sink_(sink), names_(std::move(names)) {}

size_t CuptiRecordConverter::RecordSize(CUpti_ActivityKind kind) {
  switch (kind) {
    case CUPTI_ACTIVITY_KIND_KERNEL:
    case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL:
      return sizeof(CUpti_ActivityKernel10);
    case CUPTI_ACTIVITY_KIND_MEMCPY:
      return sizeof(CUpti_ActivityMemcpy6);
    case CUPTI_ACTIVITY_KIND_MEMCPY2:
      return sizeof(CUpti_ActivityMemcpyPtoP4);
    case CUPTI_ACTIVITY_KIND_MEMSET:
      return sizeof(CUpti_ActivityMemset4);
    case CUPTI_ACTIVITY_KIND_RUNTIME:
    case CUPTI_ACTIVITY_KIND_DRIVER:
      return sizeof(CUpti_ActivityAPI);
    case CUPTI_ACTIVITY_KIND_SYNCHRONIZATION:
      return sizeof(CUpti_ActivitySynchronization2);
    default:
      return 0;
  }
}

uint32_t CuptiRecordConverter::StreamTrackId(uint32_t device, uint32_t stream) {
  return kStreamTrackBase | (((device & 0xffu) << 20) | (stream & 0xfffffu));
}

void CuptiRecordConverter::ConvertBuffer(uint8_t* buffer, size_t valid_bytes,
                                         const NextRecordFn& next) {
  if (buffer == nullptr || valid_bytes == 0) return;
  const uint8_t* end = buffer + valid_bytes;
  // Pass 1: the host thread of every API record, so that a synchronization record finds its
  // thread whatever the order of the two records in the buffer.
  for (CUpti_Activity* r = next(buffer, valid_bytes, nullptr); r != nullptr;
       r = next(buffer, valid_bytes, r)) {
    const auto* p = reinterpret_cast<const uint8_t*>(r);
    if (p < buffer || p >= end) break;
    RememberApiThread(r, static_cast<size_t>(end - p));
  }
  for (CUpti_Activity* r = next(buffer, valid_bytes, nullptr); r != nullptr;
       r = next(buffer, valid_bytes, r)) {
    const auto* p = reinterpret_cast<const uint8_t*>(r);
    if (p < buffer || p >= end || !ConvertRecord(r, static_cast<size_t>(end - p))) {
      ++stats_.truncated_buffers;
      return;
    }
  }
}

void CuptiRecordConverter::RememberApiThread(const CUpti_Activity* record, size_t available) {
  if (available < sizeof(CUpti_Activity)) return;
  if (record->kind != CUPTI_ACTIVITY_KIND_RUNTIME && record->kind != CUPTI_ACTIVITY_KIND_DRIVER) {
    return;
  }
  if (available < sizeof(CUpti_ActivityAPI)) return;
  CUpti_ActivityAPI a;
  std::memcpy(&a, record, sizeof(a));
  if (api_thread_.size() >= kMaxCorrelations) {
    api_thread_.erase(api_thread_order_[api_thread_next_]);
    api_thread_order_[api_thread_next_] = a.correlationId;
    api_thread_next_ = (api_thread_next_ + 1) % kMaxCorrelations;
  } else if (api_thread_.find(a.correlationId) == api_thread_.end()) {
    api_thread_order_.push_back(a.correlationId);
  }
  api_thread_[a.correlationId] = a.threadId;
}

bool CuptiRecordConverter::ConvertRecord(const CUpti_Activity* record, size_t available) {
  if (available < sizeof(CUpti_Activity)) return false;
  ++stats_.records;
  const CUpti_ActivityKind kind = record->kind;
  const size_t need = RecordSize(kind);
  if (need == 0) {
    if (stats_.unknown_kinds++ == 0) stats_.first_unknown_kind = static_cast<uint32_t>(kind);
    return true;
  }
  if (available < need) return false;
  // Records in a CUPTI buffer are 8-byte aligned, but copying keeps this independent of the
  // caller's alignment (tests pack records by hand).
  switch (kind) {
    case CUPTI_ACTIVITY_KIND_KERNEL:
    case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: {
      CUpti_ActivityKernel10 k;
      std::memcpy(&k, record, sizeof(k));
      ConvertKernel(k);
      break;
    }
    case CUPTI_ACTIVITY_KIND_MEMCPY: {
      CUpti_ActivityMemcpy6 m;
      std::memcpy(&m, record, sizeof(m));
      ConvertMemcpy(m);
      break;
    }
    case CUPTI_ACTIVITY_KIND_MEMCPY2: {
      CUpti_ActivityMemcpyPtoP4 m;
      std::memcpy(&m, record, sizeof(m));
      ConvertPeerCopy(m);
      break;
    }
    case CUPTI_ACTIVITY_KIND_MEMSET: {
      CUpti_ActivityMemset4 m;
      std::memcpy(&m, record, sizeof(m));
      ConvertMemset(m);
      break;
    }
    case CUPTI_ACTIVITY_KIND_RUNTIME:
    case CUPTI_ACTIVITY_KIND_DRIVER: {
      CUpti_ActivityAPI a;
      std::memcpy(&a, record, sizeof(a));
      ConvertApi(a, kind == CUPTI_ACTIVITY_KIND_RUNTIME);
      break;
    }
    case CUPTI_ACTIVITY_KIND_SYNCHRONIZATION: {
      CUpti_ActivitySynchronization2 s;
      std::memcpy(&s, record, sizeof(s));
      ConvertSync(s);
      break;
    }
    default:
      break;
  }
  return true;
}

uint32_t CuptiRecordConverter::Function(EventKind kind, std::string_view name) {
  std::string key(1, static_cast<char>('A' + static_cast<int>(kind)));
  key.append(name);
  auto it = function_ids_.find(key);
  if (it != function_ids_.end()) return it->second;
  const uint32_t id = functions_->Intern(kind, name);
  function_ids_.emplace(std::move(key), id);
  return id;
}

uint32_t CuptiRecordConverter::StreamTrack(uint32_t device, uint32_t stream) {
  const uint32_t id = StreamTrackId(device, stream);
  if (tracks_.emplace(id, id).second) {
    TrackInfo t;
    t.track_id = id;
    t.kind = TrackKind::kDeviceStream;
    t.device = static_cast<int32_t>(device);
    t.name = "GPU " + std::to_string(device) + " stream " + std::to_string(stream);
    sink_->OnTrack(t);
  }
  return id;
}

uint32_t CuptiRecordConverter::ThreadTrack(uint32_t thread_id) {
  const uint32_t id = kThreadTrackBase | (thread_id & kTrackLowMask);
  if (tracks_.emplace(id, id).second) {
    TrackInfo t;
    t.track_id = id;
    t.kind = TrackKind::kHostThread;
    t.name = "thread " + std::to_string(thread_id);
    sink_->OnTrack(t);
  }
  return id;
}

uint32_t CuptiRecordConverter::SyncTrack(uint32_t context) {
  const uint32_t id = kSyncTrackBase | (context & kTrackLowMask);
  if (tracks_.emplace(id, id).second) {
    TrackInfo t;
    t.track_id = id;
    t.kind = TrackKind::kHostThread;
    t.name = "cuda sync (context " + std::to_string(context) + ")";
    sink_->OnTrack(t);
  }
  return id;
}

bool CuptiRecordConverter::Emit(Event ev, uint64_t start, uint64_t end) {
  if (end < start || start == 0) {
    ++stats_.malformed;
    return false;
  }
  ev.start_ns = static_cast<int64_t>(start) + clock_offset_ns_;
  ev.end_ns = static_cast<int64_t>(end) + clock_offset_ns_;
  sink_->OnEvent(ev);
  ++stats_.events;
  return true;
}

void CuptiRecordConverter::ConvertKernel(const CUpti_ActivityKernel10& k) {
  if (k.name == nullptr) {
    ++stats_.malformed;
    return;
  }
  // Demangling costs microseconds; a job runs few distinct kernels many times.
  auto known = kernel_ids_.find(std::string_view(k.name));
  if (known == kernel_ids_.end()) {
    int status = 0;
    char* demangled = abi::__cxa_demangle(k.name, nullptr, nullptr, &status);
    const uint32_t id =
        Function(EventKind::kGpuKernel, status == 0 && demangled != nullptr ? demangled : k.name);
    std::free(demangled);
    known = kernel_ids_.emplace(k.name, id).first;
  }
  Event ev;
  ev.kind = EventKind::kGpuKernel;
  ev.flags = kEventFlagOnDevice;
  ev.correlation = k.correlationId;
  ev.function_id = known->second;
  ev.track_id = StreamTrack(k.deviceId, k.streamId);
  if (Emit(ev, k.start, k.end)) ++stats_.kernels;
}

template <typename Record>
bool CuptiRecordConverter::EmitTransfer(EventKind kind, const std::string& name, uint8_t flags,
                                        const Record& r) {
  Event ev;
  ev.kind = kind;
  ev.flags = static_cast<uint8_t>(kEventFlagOnDevice | flags);
  ev.payload = r.bytes;
  ev.correlation = r.correlationId;
  ev.function_id = Function(kind, name);
  ev.track_id = StreamTrack(r.deviceId, r.streamId);
  return Emit(ev, r.start, r.end);
}

void CuptiRecordConverter::ConvertMemcpy(const CUpti_ActivityMemcpy6& m) {
  const std::string name = std::string("Memcpy ") + CopyKindName(m.copyKind) + " (" +
                           MemoryKindName(m.srcKind) + " -> " + MemoryKindName(m.dstKind) + ")";
  const bool pageable = m.srcKind == CUPTI_ACTIVITY_MEMORY_KIND_PAGEABLE ||
                        m.dstKind == CUPTI_ACTIVITY_MEMORY_KIND_PAGEABLE;
  const bool device_to_device = m.copyKind == CUPTI_ACTIVITY_MEMCPY_KIND_DTOD ||
                                m.copyKind == CUPTI_ACTIVITY_MEMCPY_KIND_PTOP;
  const uint8_t flags = static_cast<uint8_t>((pageable ? kEventFlagPageable : 0) |
                                             (device_to_device ? kEventFlagDeviceToDevice : 0));
  if (EmitTransfer(EventKind::kMemcpy, name, flags, m)) {
    ++stats_.memcpys;
  }
}

void CuptiRecordConverter::ConvertPeerCopy(const CUpti_ActivityMemcpyPtoP4& m) {
  const std::string name = "Memcpy PtoP (GPU " + std::to_string(m.srcDeviceId) + " -> GPU " +
                           std::to_string(m.dstDeviceId) + ")";
  if (EmitTransfer(EventKind::kMemcpy, name, kEventFlagDeviceToDevice, m)) ++stats_.memcpys;
}

void CuptiRecordConverter::ConvertMemset(const CUpti_ActivityMemset4& m) {
  const std::string name =
      std::string("Memset (") + MemoryKindName(static_cast<uint8_t>(m.memoryKind)) + ")";
  if (EmitTransfer(EventKind::kMemset, name, 0, m)) ++stats_.memsets;
}

void CuptiRecordConverter::ConvertApi(const CUpti_ActivityAPI& a, bool runtime) {
  const char* raw = names_ ? names_(runtime, static_cast<uint32_t>(a.cbid)) : nullptr;
  std::string fallback;
  if (raw == nullptr) {
    fallback = std::string(runtime ? "cuda runtime API " : "cuda driver API ") +
               std::to_string(static_cast<uint32_t>(a.cbid));
  }
  const std::string_view name = raw != nullptr ? StripVersion(raw) : std::string_view(fallback);
  if (IsSynchronize(name)) {
    ++stats_.api_syncs_skipped;
    return;
  }
  Event ev;
  const bool launch = IsLaunch(name);
  ev.kind = launch ? EventKind::kKernelLaunch : EventKind::kRuntimeCall;
  ev.correlation = a.correlationId;
  ev.function_id = Function(ev.kind, name);
  ev.track_id = ThreadTrack(a.threadId);
  if (Emit(ev, a.start, a.end)) ++(launch ? stats_.launches : stats_.runtime_calls);
}

void CuptiRecordConverter::ConvertSync(const CUpti_ActivitySynchronization2& s) {
  Event ev;
  const bool host_waits = s.type != CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_STREAM_WAIT_EVENT;
  ev.kind = host_waits ? EventKind::kSync : EventKind::kRuntimeCall;
  ev.correlation = s.correlationId;
  ev.function_id = Function(ev.kind, SyncTypeName(s.type));
  auto it = api_thread_.find(s.correlationId);
  ev.track_id = it != api_thread_.end() ? ThreadTrack(it->second) : SyncTrack(s.contextId);
  if (Emit(ev, s.start, s.end)) ++(host_waits ? stats_.syncs : stats_.runtime_calls);
}

}  // namespace perftracker
