#include "perftracker/sources/cupti/cupti_record_converter.h"

#include <cupti.h>
#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <vector>

namespace perftracker {
namespace {

struct CollectingSink : EventSink {
  void OnTrack(const TrackInfo& track) override { tracks[track.track_id] = track; }
  void OnEvent(const Event& event) override { events.push_back(event); }
  void OnMetric(const MetricSample&) override {}
  std::map<uint32_t, TrackInfo> tracks;
  std::vector<Event> events;
};

// A buffer of real CUPTI record structs, packed 8-byte aligned as CUPTI packs them, with a
// walker that plays cuptiActivityGetNextRecord.
class RecordBuffer {
 public:
  template <typename T>
  T& Add(CUpti_ActivityKind kind) {
    T record;
    std::memset(&record, 0, sizeof(record));
    record.kind = kind;
    return *reinterpret_cast<T*>(AddBytes(&record, sizeof(record)));
  }
  void* AddBytes(const void* data, size_t n) {
    const size_t offset = (bytes_.size() + 7) / 8 * 8;
    bytes_.resize(offset + n);
    std::memcpy(bytes_.data() + offset, data, n);
    offsets_.push_back(offset);
    return bytes_.data() + offset;
  }
  uint8_t* data() { return bytes_.data(); }
  size_t size() const { return bytes_.size(); }
  CuptiRecordConverter::NextRecordFn Walker() {
    return [this](uint8_t* buffer, size_t valid, CUpti_Activity* current) -> CUpti_Activity* {
      size_t i = 0;
      if (current != nullptr) {
        const size_t at = static_cast<size_t>(reinterpret_cast<uint8_t*>(current) - buffer);
        while (i < offsets_.size() && offsets_[i] != at) ++i;
        ++i;
      }
      if (i >= offsets_.size() || offsets_[i] >= valid) return nullptr;
      return reinterpret_cast<CUpti_Activity*>(buffer + offsets_[i]);
    };
  }

 private:
  std::vector<uint8_t> bytes_;
  std::vector<size_t> offsets_;
};

const char* Names(bool runtime, uint32_t cbid) {
  if (runtime && cbid == CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000) {
    return "cudaLaunchKernel_v7000";
  }
  if (runtime && cbid == CUPTI_RUNTIME_TRACE_CBID_cudaMemcpyAsync_v3020) {
    return "cudaMemcpyAsync_v3020";
  }
  if (runtime && cbid == CUPTI_RUNTIME_TRACE_CBID_cudaStreamSynchronize_v3020) {
    return "cudaStreamSynchronize_v3020";
  }
  if (!runtime && cbid == CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel) return "cuLaunchKernel";
  return nullptr;
}

class CuptiRecordConverterTest : public ::testing::Test {
 protected:
  std::string Name(const Event& e) { return std::string(functions.Get(e.function_id).name); }

  FunctionTable functions;
  CollectingSink sink;
  CuptiRecordConverter converter{&functions, &sink, Names};
};

TEST_F(CuptiRecordConverterTest, KernelAndLaunchAreLinkedByCorrelation) {
  RecordBuffer buf;
  auto& api = buf.Add<CUpti_ActivityAPI>(CUPTI_ACTIVITY_KIND_RUNTIME);
  api.cbid = CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000;
  api.start = 1'000;
  api.end = 1'400;
  api.threadId = 4242;
  api.processId = 7;
  api.correlationId = 77;
  auto& k = buf.Add<CUpti_ActivityKernel10>(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
  k.name = "_Z6matmulPfS_S_i";
  k.start = 2'000;
  k.end = 9'000;
  k.deviceId = 3;
  k.streamId = 13;
  k.correlationId = 77;
  converter.set_clock_offset_ns(1'000'000);
  converter.ConvertBuffer(buf.data(), buf.size(), buf.Walker());

  ASSERT_EQ(sink.events.size(), 2u);
  const Event& launch = sink.events[0];
  const Event& kernel = sink.events[1];
  EXPECT_EQ(launch.kind, EventKind::kKernelLaunch);
  EXPECT_EQ(Name(launch), "cudaLaunchKernel");  // the API version suffix is not identity
  EXPECT_EQ(launch.start_ns, 1'001'000);
  EXPECT_EQ(launch.end_ns, 1'001'400);
  EXPECT_EQ(kernel.kind, EventKind::kGpuKernel);
  EXPECT_EQ(Name(kernel), "matmul(float*, float*, float*, int)");  // demangled
  EXPECT_EQ(kernel.start_ns, 1'002'000);
  EXPECT_EQ(kernel.end_ns, 1'009'000);
  EXPECT_EQ(kernel.flags & kEventFlagOnDevice, kEventFlagOnDevice);
  EXPECT_EQ(launch.correlation, 77u);
  EXPECT_EQ(kernel.correlation, launch.correlation);

  const TrackInfo& stream = sink.tracks.at(kernel.track_id);
  EXPECT_EQ(stream.kind, TrackKind::kDeviceStream);
  EXPECT_EQ(stream.device, 3);
  EXPECT_EQ(stream.name, "GPU 3 stream 13");
  const TrackInfo& thread = sink.tracks.at(launch.track_id);
  EXPECT_EQ(thread.kind, TrackKind::kHostThread);
  EXPECT_EQ(thread.name, "thread 4242");
  EXPECT_EQ(converter.stats().kernels, 1u);
  EXPECT_EQ(converter.stats().launches, 1u);
}

TEST_F(CuptiRecordConverterTest, MemcpyMemsetBytesAndPageableFlag) {
  RecordBuffer buf;
  auto& pageable = buf.Add<CUpti_ActivityMemcpy6>(CUPTI_ACTIVITY_KIND_MEMCPY);
  pageable.copyKind = CUPTI_ACTIVITY_MEMCPY_KIND_HTOD;
  pageable.srcKind = CUPTI_ACTIVITY_MEMORY_KIND_PAGEABLE;
  pageable.dstKind = CUPTI_ACTIVITY_MEMORY_KIND_DEVICE;
  pageable.bytes = 1 << 20;
  pageable.start = 100;
  pageable.end = 600;
  pageable.deviceId = 0;
  pageable.streamId = 7;
  pageable.correlationId = 5;
  auto& pinned = buf.Add<CUpti_ActivityMemcpy6>(CUPTI_ACTIVITY_KIND_MEMCPY);
  pinned.copyKind = CUPTI_ACTIVITY_MEMCPY_KIND_DTOH;
  pinned.srcKind = CUPTI_ACTIVITY_MEMORY_KIND_DEVICE;
  pinned.dstKind = CUPTI_ACTIVITY_MEMORY_KIND_PINNED;
  pinned.bytes = 4096;
  pinned.start = 700;
  pinned.end = 800;
  pinned.streamId = 7;
  auto& memset = buf.Add<CUpti_ActivityMemset4>(CUPTI_ACTIVITY_KIND_MEMSET);
  memset.bytes = 2048;
  memset.memoryKind = CUPTI_ACTIVITY_MEMORY_KIND_DEVICE;
  memset.start = 900;
  memset.end = 950;
  memset.streamId = 7;
  memset.correlationId = 6;
  auto& peer = buf.Add<CUpti_ActivityMemcpyPtoP4>(CUPTI_ACTIVITY_KIND_MEMCPY2);
  peer.copyKind = CUPTI_ACTIVITY_MEMCPY_KIND_PTOP;
  peer.bytes = 64 << 20;
  peer.start = 1000;
  peer.end = 2000;
  peer.deviceId = 0;
  peer.srcDeviceId = 0;
  peer.dstDeviceId = 1;
  peer.streamId = 9;
  peer.correlationId = 8;
  converter.ConvertBuffer(buf.data(), buf.size(), buf.Walker());

  ASSERT_EQ(sink.events.size(), 4u);
  EXPECT_EQ(Name(sink.events[3]), "Memcpy PtoP (GPU 0 -> GPU 1)");
  EXPECT_EQ(sink.events[3].kind, EventKind::kMemcpy);
  EXPECT_EQ(sink.events[3].payload, 64u << 20);
  EXPECT_EQ(sink.events[3].duration_ns(), 1000);
  EXPECT_TRUE(sink.events[3].flags & kEventFlagDeviceToDevice);  // GPU to GPU: no host side
  EXPECT_EQ(sink.events[0].kind, EventKind::kMemcpy);
  EXPECT_EQ(Name(sink.events[0]), "Memcpy HtoD (Pageable -> Device)");
  EXPECT_EQ(sink.events[0].payload, 1u << 20);
  EXPECT_TRUE(sink.events[0].flags & kEventFlagPageable);
  EXPECT_EQ(sink.events[0].correlation, 5u);
  EXPECT_EQ(Name(sink.events[1]), "Memcpy DtoH (Device -> Pinned)");
  EXPECT_FALSE(sink.events[1].flags & kEventFlagPageable);
  EXPECT_FALSE(sink.events[1].flags & kEventFlagDeviceToDevice);
  EXPECT_EQ(sink.events[2].kind, EventKind::kMemset);
  EXPECT_EQ(Name(sink.events[2]), "Memset (Device)");
  EXPECT_EQ(sink.events[2].payload, 2048u);
  EXPECT_EQ(sink.events[0].track_id, sink.events[2].track_id);  // same stream, same track
}

TEST_F(CuptiRecordConverterTest, SynchronizationLandsOnTheCallingThread) {
  RecordBuffer buf;
  // The sync record comes before its API record: still placed on the API's thread.
  auto& sync = buf.Add<CUpti_ActivitySynchronization2>(CUPTI_ACTIVITY_KIND_SYNCHRONIZATION);
  sync.type = CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_STREAM_SYNCHRONIZE;
  sync.start = 5'000;
  sync.end = 8'000;
  sync.correlationId = 91;
  sync.contextId = 1;
  sync.streamId = 7;
  auto& api = buf.Add<CUpti_ActivityAPI>(CUPTI_ACTIVITY_KIND_RUNTIME);
  api.cbid = CUPTI_RUNTIME_TRACE_CBID_cudaStreamSynchronize_v3020;
  api.start = 4'990;
  api.end = 8'010;
  api.threadId = 555;
  api.correlationId = 91;
  auto& orphan = buf.Add<CUpti_ActivitySynchronization2>(CUPTI_ACTIVITY_KIND_SYNCHRONIZATION);
  orphan.type = CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_CONTEXT_SYNCHRONIZE;
  orphan.start = 9'000;
  orphan.end = 9'500;
  orphan.correlationId = 1234;  // no API record seen
  orphan.contextId = 2;
  auto& wait = buf.Add<CUpti_ActivitySynchronization2>(CUPTI_ACTIVITY_KIND_SYNCHRONIZATION);
  wait.type = CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_STREAM_WAIT_EVENT;
  wait.start = 10'000;
  wait.end = 10'010;
  wait.correlationId = 92;
  converter.ConvertBuffer(buf.data(), buf.size(), buf.Walker());

  ASSERT_EQ(sink.events.size(), 3u);  // the synchronize API record itself is not doubled
  EXPECT_EQ(sink.events[0].kind, EventKind::kSync);
  EXPECT_EQ(Name(sink.events[0]), "cudaStreamSynchronize");
  EXPECT_EQ(sink.tracks.at(sink.events[0].track_id).name, "thread 555");
  EXPECT_EQ(sink.events[0].duration_ns(), 3'000);
  EXPECT_EQ(sink.events[1].kind, EventKind::kSync);
  EXPECT_EQ(Name(sink.events[1]), "cudaDeviceSynchronize");
  EXPECT_EQ(sink.tracks.at(sink.events[1].track_id).name, "cuda sync (context 2)");
  EXPECT_EQ(sink.events[2].kind, EventKind::kRuntimeCall);  // the host does not wait
  EXPECT_EQ(Name(sink.events[2]), "cudaStreamWaitEvent");
  EXPECT_EQ(converter.stats().api_syncs_skipped, 1u);
  EXPECT_EQ(converter.stats().syncs, 2u);
}

TEST_F(CuptiRecordConverterTest, RuntimeDriverAndUnnamedApiCalls) {
  RecordBuffer buf;
  auto& memcpy_api = buf.Add<CUpti_ActivityAPI>(CUPTI_ACTIVITY_KIND_RUNTIME);
  memcpy_api.cbid = CUPTI_RUNTIME_TRACE_CBID_cudaMemcpyAsync_v3020;
  memcpy_api.start = 10;
  memcpy_api.end = 20;
  memcpy_api.threadId = 1;
  auto& driver = buf.Add<CUpti_ActivityAPI>(CUPTI_ACTIVITY_KIND_DRIVER);
  driver.cbid = CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel;
  driver.start = 30;
  driver.end = 40;
  driver.threadId = 1;
  driver.correlationId = 3;
  auto& unknown = buf.Add<CUpti_ActivityAPI>(CUPTI_ACTIVITY_KIND_RUNTIME);
  unknown.cbid = static_cast<CUpti_CallbackId>(99999);
  unknown.start = 50;
  unknown.end = 60;
  converter.ConvertBuffer(buf.data(), buf.size(), buf.Walker());
  ASSERT_EQ(sink.events.size(), 3u);
  EXPECT_EQ(sink.events[0].kind, EventKind::kRuntimeCall);
  EXPECT_EQ(Name(sink.events[0]), "cudaMemcpyAsync");
  EXPECT_EQ(sink.events[1].kind, EventKind::kKernelLaunch);
  EXPECT_EQ(Name(sink.events[1]), "cuLaunchKernel");
  EXPECT_EQ(sink.events[1].correlation, 3u);
  EXPECT_EQ(Name(sink.events[2]), "cuda runtime API 99999");
}

TEST_F(CuptiRecordConverterTest, UnknownKindsAreCountedAndSkipped) {
  RecordBuffer buf;
  CUpti_ActivityAPI marker_like;
  std::memset(&marker_like, 0, sizeof(marker_like));
  marker_like.kind = CUPTI_ACTIVITY_KIND_MARKER;
  buf.AddBytes(&marker_like, sizeof(marker_like));
  auto& k = buf.Add<CUpti_ActivityKernel10>(CUPTI_ACTIVITY_KIND_KERNEL);
  k.name = "plain_c_kernel";
  k.start = 1;
  k.end = 2;
  converter.ConvertBuffer(buf.data(), buf.size(), buf.Walker());
  ASSERT_EQ(sink.events.size(), 1u);
  EXPECT_EQ(Name(sink.events[0]), "plain_c_kernel");  // not mangled: kept as is
  EXPECT_EQ(converter.stats().unknown_kinds, 1u);
  EXPECT_EQ(converter.stats().first_unknown_kind,
            static_cast<uint32_t>(CUPTI_ACTIVITY_KIND_MARKER));
  EXPECT_EQ(converter.stats().records, 2u);
}

TEST_F(CuptiRecordConverterTest, TruncatedBufferStopsAtTheCutRecord) {
  RecordBuffer buf;
  auto& a = buf.Add<CUpti_ActivityKernel10>(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
  a.name = "first";
  a.start = 1;
  a.end = 2;
  auto& b = buf.Add<CUpti_ActivityKernel10>(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
  b.name = "second";
  b.start = 3;
  b.end = 4;
  // The valid size ends in the middle of the second record.
  const size_t cut = buf.size() - sizeof(CUpti_ActivityKernel10) / 2;
  converter.ConvertBuffer(buf.data(), cut, buf.Walker());
  ASSERT_EQ(sink.events.size(), 1u);
  EXPECT_EQ(Name(sink.events[0]), "first");
  EXPECT_EQ(converter.stats().truncated_buffers, 1u);
}

TEST_F(CuptiRecordConverterTest, MalformedRecordsAreCounted) {
  RecordBuffer buf;
  auto& no_end = buf.Add<CUpti_ActivityKernel10>(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
  no_end.name = "k";
  no_end.start = 100;
  no_end.end = 0;  // CUPTI could not collect the end
  auto& no_name = buf.Add<CUpti_ActivityKernel10>(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
  no_name.name = nullptr;
  no_name.start = 1;
  no_name.end = 2;
  converter.ConvertBuffer(buf.data(), buf.size(), buf.Walker());
  EXPECT_TRUE(sink.events.empty());
  EXPECT_EQ(converter.stats().malformed, 2u);
  // Empty and null buffers are nothing at all.
  converter.ConvertBuffer(nullptr, 100, buf.Walker());
  converter.ConvertBuffer(buf.data(), 0, buf.Walker());
  EXPECT_EQ(converter.stats().records, 2u);
}

TEST(CuptiRecordConverterTrackIds, StreamTracksAreDistinctPerDeviceAndStream) {
  EXPECT_NE(CuptiRecordConverter::StreamTrackId(0, 7), CuptiRecordConverter::StreamTrackId(1, 7));
  EXPECT_NE(CuptiRecordConverter::StreamTrackId(0, 7), CuptiRecordConverter::StreamTrackId(0, 8));
  EXPECT_GE(CuptiRecordConverter::StreamTrackId(0, 0), 1u << 24);  // above agent ring indexes
}

}  // namespace
}  // namespace perftracker
