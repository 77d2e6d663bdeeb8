#include "perftracker/sources/kineto/kineto_importer.h"

#include <gtest/gtest.h>
#include <unistd.h>
#include <zlib.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "perftracker/core/point_to_point.h"
#include "perftracker/sources/kineto/kineto_event_classifier.h"

namespace perftracker {
namespace {

namespace fs = std::filesystem;

// Records everything, with names resolved, so runs can be compared.
class RecordingSink : public EventSink {
 public:
  void OnTrack(const TrackInfo& track) override { tracks.push_back(track); }
  void OnEvent(const Event& event) override { events.push_back(event); }
  void OnMetric(const MetricSample&) override {}
  void OnProcessGroup(const ProcessGroupInfo& group) override { groups.push_back(group); }

  std::vector<TrackInfo> tracks;
  std::vector<ProcessGroupInfo> groups;
  std::vector<Event> events;
};

struct ImportResult {
  Status status;
  KinetoTraceInfo info;
  RecordingSink sink;
  FunctionTable functions;

  int Count(EventKind kind) const {
    int n = 0;
    for (const Event& e : sink.events) n += e.kind == kind;
    return n;
  }
  std::string Name(const Event& e) const { return std::string(functions.Get(e.function_id).name); }
  // The events named `name`, in file order.
  std::vector<Event> Named(const std::string& name) const {
    std::vector<Event> out;
    for (const Event& e : sink.events) {
      if (Name(e) == name) out.push_back(e);
    }
    return out;
  }
  // A canonical text form of the whole output, for invariance checks.
  std::string Dump() const {
    std::string s;
    for (const TrackInfo& t : sink.tracks) {
      s += "T" + std::to_string(t.track_id) + "," + std::to_string(static_cast<int>(t.kind)) + "," +
           std::to_string(t.device) + "," + t.name + "\n";
    }
    for (const Event& e : sink.events) {
      s += std::to_string(e.start_ns) + "," + std::to_string(e.end_ns) + "," +
           std::to_string(e.payload) + "," + functions.Key(e.function_id) + "," +
           std::to_string(e.track_id) + "," + std::to_string(e.correlation) + "," +
           std::to_string(static_cast<int>(e.flags)) + "\n";
    }
    s += "emitted=" + std::to_string(info.events_emitted) +
         " skipped=" + std::to_string(info.events_skipped) +
         " malformed=" + std::to_string(info.events_malformed) + " first=" + info.first_malformed +
         " truncated=" + std::to_string(info.names_truncated) +
         " rank=" + std::to_string(info.rank) + " world=" + std::to_string(info.world_size) +
         " backend=" + info.backend + " bytes=" + std::to_string(info.bytes_read);
    return s;
  }
};

std::unique_ptr<ImportResult> ImportText(std::string_view text, size_t chunk,
                                         const std::string& source = "rank0_trace.json",
                                         KinetoImportOptions options = {}) {
  auto r = std::make_unique<ImportResult>();
  KinetoImporter importer(source, &r->functions, &r->sink, options);
  for (size_t i = 0; i < text.size(); i += chunk) {
    r->status = importer.Parse(text.data() + i, std::min(chunk, text.size() - i));
    if (!r->status.ok()) return r;
  }
  auto info = importer.Finish();
  r->status = info.status();
  if (info.ok()) r->info = *info;
  return r;
}

std::unique_ptr<ImportResult> ImportPath(const std::string& path,
                                         KinetoImportOptions options = {}) {
  auto r = std::make_unique<ImportResult>();
  auto info = ImportKinetoFile(path, &r->functions, &r->sink, options);
  r->status = info.status();
  if (info.ok()) r->info = *info;
  return r;
}

class TempDir {
 public:
  TempDir() {
    char tmpl[] = "/tmp/kineto_test_XXXXXX";
    path_ = mkdtemp(tmpl);
  }
  ~TempDir() { fs::remove_all(path_); }
  std::string Write(const std::string& name, std::string_view bytes) const {
    const std::string p = path_ + "/" + name;
    std::ofstream(p, std::ios::binary)
        .write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    return p;
  }

 private:
  std::string path_;
};

std::string Gzip(std::string_view text) {
  z_stream zs{};
  EXPECT_EQ(deflateInit2(&zs, 6, Z_DEFLATED, 16 + MAX_WBITS, 8, Z_DEFAULT_STRATEGY), Z_OK);
  std::string out(deflateBound(&zs, text.size()) + 64, '\0');
  zs.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(text.data()));
  zs.avail_in = static_cast<uInt>(text.size());
  zs.next_out = reinterpret_cast<Bytef*>(out.data());
  zs.avail_out = static_cast<uInt>(out.size());
  EXPECT_EQ(deflate(&zs, Z_FINISH), Z_STREAM_END);
  out.resize(zs.total_out);
  deflateEnd(&zs);
  return out;
}

std::string SharedDataDir() {
  const char* src = std::getenv("PERFTRACKER_SOURCE_DIR");
  const std::string root = src != nullptr ? src : ".";
  return root + "/../shared/data/kineto";
}

std::string TestDataDir() {
  const char* src = std::getenv("PERFTRACKER_SOURCE_DIR");
  const std::string root = src != nullptr ? src : ".";
  return root + "/src/perftracker/sources/kineto/testdata";
}

// A small trace touching every feature: escapes, unicode, nested args, fractional µs,
// string pids, device events, flows, metadata, B/E, keys in unusual order.
constexpr std::string_view kMixedTrace = R"JSON({
  "schemaVersion": 1,
  "deviceProperties": [{"id": 0, "name": "NVIDIA \"A100\"", "numSms": 108}],
  "traceEvents": [
  {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#7", "pid": 11, "tid": 12,
   "ts": 1000.5, "dur": 900.25, "args": {"External id": 1, "Ev Idx": 0}},
  {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 11, "tid": 12, "ts": 1001.125, "dur": 10,
   "args": {"Input Dims": [[2, 3], [3, 4]], "Input type": ["float", "float"], "Concrete Inputs": ["", "{\"x\": [1]}"]}},
  {"args": {"correlation": 77, "cbid": 211}, "dur": 3.5, "ts": 1002, "tid": 12, "pid": 11,
   "name": "cudaLaunchKernel", "cat": "cuda_runtime", "ph": "X"},
  {"ph": "X", "cat": "kernel", "name": "void gemm_kernel<float, \u00e9\\t>()", "pid": 0, "tid": 7,
   "ts": 1010.001, "dur": 5.999, "args": {"device": 0, "stream": 7, "correlation": 77, "grid": [1, 2, 3]}},
  {"ph": "X", "cat": "kernel", "name": "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*)", "pid": 0, "tid": 40,
   "ts": 1100, "dur": 50, "args": {"device": 0, "stream": 40, "correlation": 80,
   "Collective name": "allreduce", "In msg nelems": 1000, "dtype": "Float"}},
  {"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy HtoD (Pageable -> Device)", "pid": 0, "tid": 7,
   "ts": 1200, "dur": 2, "args": {"device": 0, "stream": 7, "bytes": 4096}},
  {"ph": "X", "cat": "gpu_memset", "name": "Memset (Device)", "pid": 0, "tid": 7, "ts": 1300, "dur": 1,
   "args": {"device": 0, "stream": 7, "bytes": 64}},
  {"ph": "X", "cat": "cuda_runtime", "name": "cudaStreamSynchronize", "pid": 11, "tid": 12, "ts": 1400, "dur": 20},
  {"ph": "X", "cat": "user_annotation", "name": "nccl:all_reduce", "pid": 11, "tid": 12, "ts": 1500, "dur": 30,
   "args": {"In msg nelems": 10, "dtype": "BFloat16"}},
  {"ph": "X", "cat": "user_annotation", "name": "Optimizer.step#SGD.step", "pid": 11, "tid": 12, "ts": 1600, "dur": 40},
  {"ph": "X", "cat": "user_annotation", "name": "enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__next__", "pid": 11, "tid": 12, "ts": 1650, "dur": 5},
  {"ph": "X", "cat": "python_function", "name": "train.py(10): step", "pid": 11, "tid": "13", "ts": 1700, "dur": 5},
  {"ph": "B", "name": "phase", "pid": 11, "tid": 12, "ts": 1800},
  {"ph": "E", "pid": 11, "tid": 12, "ts": 1850.5},
  {"ph": "s", "id": 77, "pid": 11, "tid": 12, "ts": 1002, "cat": "ac2g", "name": "ac2g"},
  {"ph": "f", "id": 77, "pid": 0, "tid": 7, "ts": 1010, "cat": "ac2g", "name": "ac2g", "bp": "e"},
  {"name": "thread_name", "ph": "M", "ts": 1, "pid": 11, "tid": 12, "args": {"name": "thread 12 (python)"}},
  {"ph": "X", "cat": "Trace", "name": "PyTorch Profiler (0)", "pid": "Spans", "tid": "PyTorch Profiler", "ts": 900, "dur": 2000},
  {"ph": "X", "cat": "cpu_op", "name": "aten::bad", "pid": 11, "tid": 12, "dur": 1},
  {"ph": "X", "cat": "cpu_op", "name": "aten::neg", "pid": 11, "tid": 12, "ts": 1900, "dur": -1}
  ],
  "distributedInfo": {"backend": "nccl", "rank": 5, "world_size": 8, "pg_config": [{"ranks": [0, 1, 2]}], "nccl_version": "2.18"},
  "traceName": "t.json",
  "displayTimeUnit": "ms"
})JSON";

TEST(KinetoImporterTest, MixedTraceImportsEveryCategory) {
  auto r = ImportText(kMixedTrace, kMixedTrace.size());
  ASSERT_TRUE(r->status.ok()) << r->status.message();
  EXPECT_EQ(r->info.rank, 5);
  EXPECT_EQ(r->info.world_size, 8);
  EXPECT_EQ(r->info.backend, "nccl");
  EXPECT_EQ(r->info.events_emitted, 13u);
  EXPECT_EQ(r->info.events_skipped, 4u);  // s, f, M, Trace
  EXPECT_EQ(r->info.events_malformed, 2u);
  EXPECT_NE(r->info.first_malformed.find("no \"ts\""), std::string::npos)
      << r->info.first_malformed;
  EXPECT_NE(r->info.first_malformed.find("aten::bad"), std::string::npos);
  EXPECT_EQ(r->info.bytes_read, kMixedTrace.size());

  // Exact fractional µs -> ns, and ProfilerStep loses its step number.
  auto steps = r->Named("ProfilerStep");
  ASSERT_EQ(steps.size(), 1u);
  EXPECT_EQ(steps[0].kind, EventKind::kIteration);
  EXPECT_EQ(steps[0].start_ns, 1000500);
  EXPECT_EQ(steps[0].end_ns, 1000500 + 900250);

  auto kernel = r->Named("void gemm_kernel<float, \xc3\xa9\\t>()");
  ASSERT_EQ(kernel.size(), 1u);
  EXPECT_EQ(kernel[0].kind, EventKind::kGpuKernel);
  EXPECT_EQ(kernel[0].start_ns, 1010001);
  EXPECT_EQ(kernel[0].end_ns, 1016000);
  EXPECT_EQ(kernel[0].correlation, 77u);
  EXPECT_EQ(kernel[0].flags, kEventFlagOnDevice);

  auto launch = r->Named("cudaLaunchKernel");
  ASSERT_EQ(launch.size(), 1u);
  EXPECT_EQ(launch[0].kind, EventKind::kKernelLaunch);
  EXPECT_EQ(launch[0].correlation, 77u);
  EXPECT_EQ(launch[0].end_ns - launch[0].start_ns, 3500);

  auto nccl = r->Named("ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*)");
  ASSERT_EQ(nccl.size(), 1u);
  EXPECT_EQ(nccl[0].kind, EventKind::kCollective);
  EXPECT_EQ(nccl[0].payload, 4000u);  // 1000 Float elements
  EXPECT_EQ(nccl[0].flags, kEventFlagOnDevice);

  auto host_coll = r->Named("nccl:all_reduce");
  ASSERT_EQ(host_coll.size(), 1u);
  EXPECT_EQ(host_coll[0].kind, EventKind::kCollective);
  EXPECT_EQ(host_coll[0].payload, 20u);  // 10 BFloat16 elements
  EXPECT_EQ(host_coll[0].flags, 0);

  auto memcpy = r->Named("Memcpy HtoD (Pageable -> Device)");
  ASSERT_EQ(memcpy.size(), 1u);
  EXPECT_EQ(memcpy[0].kind, EventKind::kMemcpy);
  EXPECT_EQ(memcpy[0].payload, 4096u);
  EXPECT_EQ(memcpy[0].flags, kEventFlagOnDevice | kEventFlagPageable);
  EXPECT_EQ(r->Named("Memset (Device)").at(0).payload, 64u);

  EXPECT_EQ(r->Named("cudaStreamSynchronize").at(0).kind, EventKind::kSync);
  EXPECT_EQ(r->Named("Optimizer.step#SGD.step").at(0).kind, EventKind::kOptimizerStep);
  EXPECT_EQ(r->Named("enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__next__").at(0).kind,
            EventKind::kDataLoad);
  EXPECT_EQ(r->Named("train.py(10): step").at(0).kind, EventKind::kPythonCall);
  auto phase = r->Named("phase");
  ASSERT_EQ(phase.size(), 1u);
  EXPECT_EQ(phase[0].start_ns, 1800000);
  EXPECT_EQ(phase[0].end_ns, 1850500);

  // Tracks: host (11,12), device 0 streams 7 and 40, host (11,"13").
  ASSERT_EQ(r->sink.tracks.size(), 4u);
  EXPECT_EQ(r->sink.tracks[0].kind, TrackKind::kHostThread);
  EXPECT_EQ(r->sink.tracks[0].name, "thread 12");
  EXPECT_EQ(r->sink.tracks[1].kind, TrackKind::kDeviceStream);
  EXPECT_EQ(r->sink.tracks[1].device, 0);
  EXPECT_EQ(r->sink.tracks[1].name, "stream 7");
  EXPECT_EQ(r->sink.tracks[2].name, "stream 40");
  EXPECT_EQ(kernel[0].track_id, r->sink.tracks[1].track_id);
  // Every event's track was announced before the event.
  for (const Event& e : r->sink.events) EXPECT_LT(e.track_id, r->sink.tracks.size());
}

TEST(KinetoImporterTest, ChunkSplitInvarianceEverySize) {
  const auto whole = ImportText(kMixedTrace, kMixedTrace.size());
  ASSERT_TRUE(whole->status.ok()) << whole->status.message();
  const std::string expected = whole->Dump();
  for (size_t chunk = 1; chunk <= kMixedTrace.size(); ++chunk) {
    const auto r = ImportText(kMixedTrace, chunk);
    ASSERT_TRUE(r->status.ok()) << "chunk " << chunk << ": " << r->status.message();
    ASSERT_EQ(r->Dump(), expected) << "chunk size " << chunk;
  }
}

TEST(KinetoImporterTest, TheHostLoadEventSaysHowBusyTheMachineWas) {
  // What python/perftracker/host_load.py appends: in a bare list (torch 1.13 CPU-only) and in
  // the object form, split at every byte (the event may be carried across chunks).
  const std::string event =
      R"({"ph": "M", "name": "perftracker_host_load", "pid": 7, "tid": 0, "args": )"
      R"({"cpu_ns": 600000000, "run_delay_ns": 900000000.0, "wall_ns": 1200000000}})";
  const std::string op =
      R"({"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 7, "tid": 7, "ts": 10, "dur": 5})";
  for (const std::string& text :
       {"[" + op + ", " + event + "]",
        R"({"distributedInfo": {"rank": 0}, "traceEvents": [)" + event + ", " + op + "]}"}) {
    for (size_t chunk : {text.size(), size_t{1}, size_t{7}}) {
      const auto r = ImportText(text, chunk);
      ASSERT_TRUE(r->status.ok()) << r->status.message();
      EXPECT_EQ(r->info.load_cpu_ns, 6e8) << text;
      EXPECT_EQ(r->info.load_run_delay_ns, 9e8);
      EXPECT_EQ(r->info.load_wall_ns, 1.2e9);
      EXPECT_EQ(r->info.events_emitted, 1u);
      EXPECT_EQ(r->info.events_malformed, 0u);
    }
  }
  // Without it, or with args that are not what the module writes: unknown (0), no error.
  for (const std::string& args :
       {std::string(R"({})"), std::string(R"({"cpu_ns": "x", "run_delay_ns": 1, "wall_ns": 2})"),
        std::string(R"({"cpu_ns": 1, "run_delay_ns": -1, "wall_ns": 2})"),
        std::string(R"({"cpu_ns": 1, "run_delay_ns": 1, "wall_ns": 0})"), std::string("[1, 2]")}) {
    const std::string text =
        "[" + op + R"(, {"ph": "M", "name": "perftracker_host_load", "args": )" + args + "}]";
    const auto r = ImportText(text, text.size());
    ASSERT_TRUE(r->status.ok()) << r->status.message();
    EXPECT_EQ(r->info.load_wall_ns, 0) << args;
    EXPECT_EQ(r->info.events_emitted, 1u);
  }
  // The host's steal fraction (a VM's), when the module could read it; one that is not a
  // fraction is unknown, the rest of the event still read.
  for (const auto& [steal, want] : std::vector<std::pair<std::string, double>>{
           {"0.125", 0.125}, {"0", 0.0}, {"1.5", -1.0}, {"-0.1", -1.0}, {"\"a\"", -1.0}}) {
    const std::string text =
        "[" + op + R"(, {"ph": "M", "name": "perftracker_host_load", "args": {"cpu_ns": 6, )" +
        R"("run_delay_ns": 9, "wall_ns": 12, "steal_fraction": )" + steal + "}}]";
    const auto r = ImportText(text, text.size());
    ASSERT_TRUE(r->status.ok()) << r->status.message();
    EXPECT_EQ(r->info.load_steal_fraction, want) << steal;
    EXPECT_EQ(r->info.load_wall_ns, 12) << steal;
  }
  EXPECT_EQ(ImportText("[" + op + ", " + event + "]", 1)->info.load_steal_fraction, -1)
      << "an event without it";
}

TEST(KinetoImporterTest, GoldenTorch113BareListTrace) {
  // A real torch 1.13.1 CPU-only trace: 2-rank gloo job (torch.multiprocessing.spawn),
  // ProfilerActivity.CPU, export_chrome_trace; rank 0. Expected numbers below were computed
  // from the file with /usr/bin/python3 + json.
  const std::string path = TestDataDir() + "/torch113_gloo_rank0.json";
  auto r = ImportPath(path);
  ASSERT_TRUE(r->status.ok()) << r->status.message();
  EXPECT_TRUE(r->info.bare_list);
  EXPECT_EQ(r->info.rank, 0);  // from the file name: a bare list has no distributedInfo
  EXPECT_EQ(r->info.events_emitted, 372u);
  EXPECT_EQ(r->info.events_malformed, 0u);
  EXPECT_EQ(r->Count(EventKind::kTorchOp), 354);
  EXPECT_EQ(r->Count(EventKind::kCollective), 8);
  EXPECT_EQ(r->Count(EventKind::kUserAnnotation), 4);  // forward_pass, Optimizer.zero_grad
  EXPECT_EQ(r->Count(EventKind::kIteration), 2);
  EXPECT_EQ(r->Count(EventKind::kDataLoad), 2);
  EXPECT_EQ(r->Count(EventKind::kOptimizerStep), 2);
  EXPECT_EQ(r->sink.tracks.size(), 3u);  // tid 1 (main) and the two gloo work threads

  auto steps = r->Named("ProfilerStep");
  ASSERT_EQ(steps.size(), 2u);
  EXPECT_EQ(steps[0].start_ns, 127000);
  EXPECT_EQ(steps[0].end_ns, 127000 + 8826000);
  EXPECT_EQ(steps[1].start_ns, 8978000);
  auto gloo = r->Named("gloo:all_reduce");
  ASSERT_EQ(gloo.size(), 8u);
  EXPECT_EQ(gloo[0].start_ns, 1084000);
  EXPECT_EQ(gloo[0].end_ns, 1084000 + 1685000);
  EXPECT_EQ(r->Named("Optimizer.step#SGD.step").at(1).start_ns, 23268000);

  // The same bytes through the chunked API, in odd-sized chunks, give the same result.
  std::ifstream in(path, std::ios::binary);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  auto chunked = ImportText(text, 4093, path);
  ASSERT_TRUE(chunked->status.ok());
  EXPECT_EQ(chunked->Dump(), r->Dump());
}

// Pipeline parallelism over NCCL: sends and receives are one kernel, ncclDevKernel_SendRecv
// (names as on a B200 with NCCL 2.2x); only the metadata PyTorch attaches to the kernel and
// to record_param_comms says which is which. Each direction is flagged and named apart; a
// SendRecv kernel of an all_to_all (no direction) keeps its name and no flag.
TEST(KinetoImporterTest, PointToPointDirectionComesFromTheCollectiveMetadata) {
  constexpr std::string_view kTrace = R"JSON({"traceEvents": [
  {"ph": "X", "cat": "cpu_op", "name": "record_param_comms", "pid": 1, "tid": 1, "ts": 10, "dur": 5,
   "args": {"Collective name": "recv", "In msg nelems": 1024, "dtype": "BFloat16"}},
  {"ph": "X", "cat": "kernel", "name": "ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)",
   "pid": 0, "tid": 7, "ts": 20, "dur": 300, "args": {"device": 0, "stream": 7, "correlation": 5,
   "Collective name": "recv", "In msg nelems": 1024, "dtype": "BFloat16", "Group size": 2}},
  {"ph": "X", "cat": "kernel", "name": "ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)",
   "pid": 0, "tid": 7, "ts": 400, "dur": 30, "args": {"device": 0, "stream": 7, "correlation": 6,
   "Collective name": "send", "In msg nelems": 1024, "dtype": "BFloat16", "Group size": 2}},
  {"ph": "X", "cat": "kernel", "name": "ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)",
   "pid": 0, "tid": 7, "ts": 500, "dur": 30, "args": {"device": 0, "stream": 7, "correlation": 7,
   "Collective name": "all_to_all", "In msg nelems": 1024, "dtype": "BFloat16", "Group size": 8}},
  {"ph": "X", "cat": "kernel", "name": "ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t(ncclDevComm*, unsigned long, ncclWork*)",
   "pid": 0, "tid": 7, "ts": 600, "dur": 30, "args": {"device": 0, "stream": 7, "correlation": 8}}
  ]})JSON";
  auto r = ImportText(kTrace, kTrace.size());
  ASSERT_TRUE(r->status.ok()) << r->status.message();
  auto recv = r->Named("ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>) [recv]");
  ASSERT_EQ(recv.size(), 1u);
  EXPECT_EQ(recv[0].kind, EventKind::kCollective);
  EXPECT_EQ(recv[0].flags, kEventFlagOnDevice | kEventFlagReceive);
  auto send = r->Named("ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>) [send]");
  ASSERT_EQ(send.size(), 1u);
  EXPECT_EQ(send[0].flags, kEventFlagOnDevice | kEventFlagSend);
  auto all_to_all = r->Named("ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)");
  ASSERT_EQ(all_to_all.size(), 1u);
  EXPECT_EQ(all_to_all[0].flags, kEventFlagOnDevice);
  auto host = r->Named("record_param_comms");
  ASSERT_EQ(host.size(), 1u);
  EXPECT_EQ(host[0].flags, kEventFlagReceive);
  auto old = r->Named(
      "ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t(ncclDevComm*, unsigned long, ncclWork*)");
  ASSERT_EQ(old.size(), 1u);
  EXPECT_EQ(old[0].flags, kEventFlagOnDevice);
  EXPECT_EQ(PointToPointOf("ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>) [recv]",
                           recv[0].flags),
            PointToPoint::kReceive);
}

// The process group of each collective (issue 11: the localizer tells a tensor-parallel
// all-reduce inside a host from a data-parallel one across hosts by the group's ranks).
TEST(KinetoImporterTest, ProcessGroupsComeFromTheCollectiveMetadata) {
  constexpr std::string_view kTrace = R"JSON({"traceEvents": [
  {"ph": "X", "cat": "cpu_op", "name": "record_param_comms", "pid": 1, "tid": 1, "ts": 10, "dur": 5,
   "args": {"Collective name": "allreduce", "Process Group Name": "1", "Process Group Ranks": "[8, 9]",
   "Group size": 2}},
  {"ph": "X", "cat": "kernel", "name": "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(x)", "pid": 0,
   "tid": 7, "ts": 20, "dur": 30, "args": {"device": 0, "stream": 7, "correlation": 5,
   "Collective name": "allreduce", "In msg nelems": 10, "dtype": "BFloat16", "Group size": 2,
   "Process Group Name": "1", "Process Group Description": "tp", "Process Group Ranks": "[8, 9]"}},
  {"ph": "X", "cat": "kernel", "name": "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(x)", "pid": 0,
   "tid": 7, "ts": 60, "dur": 30, "args": {"device": 0, "stream": 7, "correlation": 6,
   "Collective name": "allreduce", "In msg nelems": 10, "dtype": "BFloat16", "Group size": 2,
   "Process Group Name": "2", "Process Group Ranks": "[0, 8]"}},
  {"ph": "X", "cat": "kernel", "name": "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(x)", "pid": 0,
   "tid": 7, "ts": 100, "dur": 30, "args": {"device": 0, "stream": 7, "correlation": 7,
   "Collective name": "allreduce", "In msg nelems": 10, "dtype": "BFloat16", "Group size": 2,
   "Process Group Name": "1", "Process Group Ranks": "[8, 9]"}},
  {"ph": "X", "cat": "kernel", "name": "ncclDevKernel_AllGather_RING_LL(x)", "pid": 0,
   "tid": 7, "ts": 140, "dur": 30, "args": {"device": 0, "stream": 7, "correlation": 8,
   "Collective name": "allgather", "In msg nelems": 10, "dtype": "BFloat16", "Group size": 40,
   "Process Group Name": "3", "Global rank start": 0, "Global rank stride": 2,
   "Process Group Ranks": "[0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30, 32, 34, 36, 38, 40, 42, 44, 46, 48, 50, 52, 54, 56, 58, ...]"}},
  {"ph": "X", "cat": "kernel", "name": "ncclDevKernel_AllGather_RING_LL(x)", "pid": 0,
   "tid": 7, "ts": 180, "dur": 30, "args": {"device": 0, "stream": 7, "correlation": 9,
   "Collective name": "allgather", "In msg nelems": 10, "dtype": "BFloat16", "Group size": 40,
   "Process Group Name": "4",
   "Process Group Ranks": "[0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, ...]"}},
  {"ph": "X", "cat": "kernel", "name": "ncclKernel_AllReduce_RING_LL_Sum_float(x)", "pid": 0,
   "tid": 7, "ts": 220, "dur": 30, "args": {"device": 0, "stream": 7, "correlation": 10}},
  {"ph": "X", "cat": "kernel", "name": "ncclKernel_AllReduce_RING_LL_Sum_float(x)", "pid": 0,
   "tid": 7, "ts": 260, "dur": 30, "args": {"device": 0, "stream": 7, "correlation": 11,
   "Process Group Ranks": "[]", "Group size": 1}},
  {"ph": "X", "cat": "kernel", "name": "ncclKernel_AllReduce_RING_LL_Sum_float(x)", "pid": 0,
   "tid": 7, "ts": 300, "dur": 30, "args": {"device": 0, "stream": 7, "correlation": 12,
   "Process Group ID": 0, "Process Group Ranks": "[0]", "Group size": 1}}
  ]})JSON";
  for (size_t chunk : {kTrace.size(), size_t{7}}) {
    SCOPED_TRACE(chunk);
    auto r = ImportText(kTrace, chunk);
    ASSERT_TRUE(r->status.ok()) << r->status.message();
    // Each group is declared once, before its first collective; host ops carry none.
    ASSERT_EQ(r->sink.groups.size(), 5u);
    const auto& g = r->sink.groups;
    EXPECT_EQ(g[0].id, 1);
    EXPECT_EQ(g[0].name, "1");
    EXPECT_EQ(g[0].ranks, (std::vector<int32_t>{8, 9}));
    EXPECT_EQ(g[0].size, 2u);
    EXPECT_EQ(g[1].ranks, (std::vector<int32_t>{0, 8}));
    // Cut after 30 ranks: rebuilt from start and stride, where the trace gives them...
    EXPECT_EQ(g[2].size, 40u);
    ASSERT_EQ(g[2].ranks.size(), 40u);
    EXPECT_EQ(g[2].ranks.back(), 78);
    // ... else only the listed ones are known.
    EXPECT_EQ(g[3].size, 40u);
    EXPECT_EQ(g[3].ranks.size(), 30u);
    EXPECT_EQ(g[4].name, "0");  // older traces: "Process Group ID"
    EXPECT_EQ(g[4].ranks, (std::vector<int32_t>{0}));
    std::vector<uint16_t> groups;
    for (const Event& e : r->sink.events) groups.push_back(e.group);
    EXPECT_EQ(groups, (std::vector<uint16_t>{0, 1, 2, 1, 3, 4, 0, 0, 5}));
  }
}

// A group's backend comes from distributedInfo.pg_config (its backend_config by pg_name),
// whether distributedInfo comes before the events (declared with it) or after them (declared
// again with it); a group pg_config does not list has none. Every chunk split gives the same.
TEST(KinetoImporterTest, ProcessGroupsTakeTheirBackendFromPgConfig) {
  constexpr std::string_view kInfo = R"JSON("distributedInfo": {"backend": "nccl", "rank": 0,
   "world_size": 2, "pg_count": 2, "pg_config": [
    {"pg_name": "0", "pg_desc": "default_pg", "backend_config": "cuda:nccl", "pg_size": 2,
     "ranks": [0, 1]},
    {"pg_name": "1", "pg_desc": "undefined", "backend_config": "cpu:gloo,cuda:gloo",
     "pg_size": 2, "ranks": [0, 1], "nested": {"x": ["backend_config", "pg_name"]}}],
   "nccl_version": "2.17.1"})JSON";
  constexpr std::string_view kEvents = R"JSON("traceEvents": [
  {"ph": "X", "cat": "kernel", "name": "ncclDevKernel_AllReduce_Sum_f32_RING_LL(x)", "pid": 0,
   "tid": 7, "ts": 20, "dur": 30, "args": {"device": 0, "stream": 7, "correlation": 5,
   "Process Group Name": "1", "Process Group Ranks": "[0, 1]", "Group size": 2}},
  {"ph": "X", "cat": "kernel", "name": "ncclDevKernel_AllReduce_Sum_f32_RING_LL(x)", "pid": 0,
   "tid": 7, "ts": 60, "dur": 30, "args": {"device": 0, "stream": 7, "correlation": 6,
   "Process Group Name": "0", "Process Group Ranks": "[0, 1]", "Group size": 2}},
  {"ph": "X", "cat": "kernel", "name": "ncclDevKernel_AllReduce_Sum_f32_RING_LL(x)", "pid": 0,
   "tid": 7, "ts": 100, "dur": 30, "args": {"device": 0, "stream": 7, "correlation": 7,
   "Process Group Name": "7", "Process Group Ranks": "[0, 1]", "Group size": 2}}])JSON";
  const std::string before = "{" + std::string(kInfo) + ", " + std::string(kEvents) + "}";
  const std::string after = "{" + std::string(kEvents) + ", " + std::string(kInfo) + "}";
  for (const std::string* trace : {&before, &after}) {
    for (size_t chunk : {trace->size(), size_t{1}, size_t{2}, size_t{7}, size_t{64}}) {
      SCOPED_TRACE(std::string(trace == &before ? "before" : "after") + ", chunk " +
                   std::to_string(chunk));
      auto r = ImportText(*trace, chunk);
      ASSERT_TRUE(r->status.ok()) << r->status.message();
      EXPECT_EQ(r->info.backend, "nccl");
      std::map<uint16_t, ProcessGroupInfo> last;  // a later declaration replaces an earlier
      for (const ProcessGroupInfo& g : r->sink.groups) last[g.id] = g;
      ASSERT_EQ(last.size(), 3u);
      EXPECT_EQ(last[1].name, "1");
      EXPECT_EQ(last[1].backend, "cpu:gloo,cuda:gloo");
      EXPECT_EQ(last[2].name, "0");
      EXPECT_EQ(last[2].backend, "cuda:nccl");
      EXPECT_EQ(last[3].name, "7");
      EXPECT_EQ(last[3].backend, "");
      EXPECT_EQ(last[1].ranks, (std::vector<int32_t>{0, 1}));
      // Declared before the events only once each.
      EXPECT_EQ(r->sink.groups.size(), trace == &before ? 3u : 5u);
    }
  }
}

TEST(KinetoImporterTest, GzipAndConcatenatedMembers) {
  TempDir dir;
  const auto plain = ImportText(kMixedTrace, kMixedTrace.size(), "x.json");
  const std::string gz = dir.Write("x.json.gz", Gzip(kMixedTrace));
  auto r = ImportPath(gz);
  ASSERT_TRUE(r->status.ok()) << r->status.message();
  EXPECT_EQ(r->info.bytes_read, kMixedTrace.size());
  EXPECT_EQ(r->info.events_emitted, plain->info.events_emitted);

  // Two gzip members (as `cat a.gz b.gz` makes), split in the middle of an event.
  const size_t half = kMixedTrace.size() / 2;
  const std::string two =
      dir.Write("two.json.gz", Gzip(kMixedTrace.substr(0, half)) + Gzip(kMixedTrace.substr(half)));
  auto r2 = ImportPath(two);
  ASSERT_TRUE(r2->status.ok()) << r2->status.message();
  EXPECT_EQ(r2->info.events_emitted, plain->info.events_emitted);

  // Compression is recognised by magic bytes, not by the name.
  auto r3 = ImportPath(dir.Write("misnamed.json", Gzip(kMixedTrace)));
  ASSERT_TRUE(r3->status.ok()) << r3->status.message();
}

TEST(KinetoImporterTest, TimeUnits) {
  const std::string us_int =
      R"({"traceEvents": [{"ph": "X", "name": "a", "pid": 1, "tid": 1, "ts": 1234567890123, "dur": 5}]})";
  auto r = ImportText(us_int, 7);
  ASSERT_TRUE(r->status.ok());
  EXPECT_EQ(r->sink.events.at(0).start_ns, 1234567890123000);
  EXPECT_EQ(r->sink.events.at(0).end_ns, 1234567890128000);

  // Fractional µs with more digits than a double keeps: exact, rounded to the nearest ns.
  const std::string us_frac =
      R"({"traceEvents": [{"ph": "X", "name": "a", "pid": 1, "tid": 1, "ts": 4458676983543.183, "dur": 41.4075}]})";
  r = ImportText(us_frac, 5);
  ASSERT_TRUE(r->status.ok());
  EXPECT_EQ(r->sink.events.at(0).start_ns, 4458676983543183);
  EXPECT_EQ(r->sink.events.at(0).end_ns - r->sink.events.at(0).start_ns, 41408);

  // "displayTimeUnit": "ns" before the events, integer timestamps: ns (as Perfetto reads it).
  const std::string ns =
      R"({"displayTimeUnit": "ns", "traceEvents": [{"ph": "X", "name": "a", "pid": 1, "tid": 1, "ts": 1500, "dur": 20}]})";
  r = ImportText(ns, 3);
  ASSERT_TRUE(r->status.ok());
  EXPECT_EQ(r->sink.events.at(0).start_ns, 1500);
  EXPECT_EQ(r->sink.events.at(0).end_ns, 1520);
  EXPECT_EQ(r->info.time_unit, TraceTimeUnit::kNanoseconds);

  // Kineto built with DISPLAY_TRACE_IN_NS says "ns" but writes µs with 3 decimals.
  const std::string kineto_ns =
      R"({"displayTimeUnit": "ns", "traceEvents": [{"ph": "X", "name": "a", "pid": 1, "tid": 1, "ts": 1500.250, "dur": 20.000}]})";
  r = ImportText(kineto_ns, 3);
  ASSERT_TRUE(r->status.ok());
  EXPECT_EQ(r->sink.events.at(0).start_ns, 1500250);
  EXPECT_EQ(r->info.time_unit, TraceTimeUnit::kMicroseconds);

  // "ns" after integer events already read as µs: a clear error asking for --time-unit.
  const std::string late_ns =
      R"({"traceEvents": [{"ph": "X", "name": "a", "pid": 1, "tid": 1, "ts": 1500, "dur": 20}], "displayTimeUnit": "ns"})";
  r = ImportText(late_ns, 1000, "late.json");
  ASSERT_FALSE(r->status.ok());
  EXPECT_NE(r->status.message().find("late.json: "), std::string::npos);
  EXPECT_NE(r->status.message().find("--time-unit ns"), std::string::npos) << r->status.message();

  // ... which the option resolves, either way.
  KinetoImportOptions opt;
  opt.time_unit = TraceTimeUnit::kNanoseconds;
  r = ImportText(late_ns, 1000, "late_rank0.json", opt);
  ASSERT_TRUE(r->status.ok()) << r->status.message();
  EXPECT_EQ(r->sink.events.at(0).start_ns, 1500);
  opt.time_unit = TraceTimeUnit::kMicroseconds;
  r = ImportText(ns, 1000, "rank0.json", opt);
  ASSERT_TRUE(r->status.ok());
  EXPECT_EQ(r->sink.events.at(0).start_ns, 1500000);

  // "ms" (what Kineto writes by default) is only a display hint: µs.
  const std::string ms =
      R"({"displayTimeUnit": "ms", "traceEvents": [{"ph": "X", "name": "a", "pid": 1, "tid": 1, "ts": 2, "dur": 1}]})";
  r = ImportText(ms, 1000);
  ASSERT_TRUE(r->status.ok());
  EXPECT_EQ(r->sink.events.at(0).start_ns, 2000);

  // Exponent notation is accepted.
  const std::string expo =
      R"({"traceEvents": [{"ph": "X", "name": "a", "pid": 1, "tid": 1, "ts": 1.5e3, "dur": 2E0}]})";
  r = ImportText(expo, 1000);
  ASSERT_TRUE(r->status.ok());
  EXPECT_EQ(r->sink.events.at(0).start_ns, 1500000);
  EXPECT_EQ(r->sink.events.at(0).end_ns, 1502000);
}

TEST(KinetoImporterTest, ByteOrderMarkIsAcceptedAtAnySplit) {
  const std::string trace =
      "\xEF\xBB\xBF[{\"ph\": \"X\", \"name\": \"a\", \"pid\": 1, \"tid\": 1, \"ts\": 1, \"dur\": "
      "1}]";
  for (size_t chunk : {size_t{1}, size_t{2}, trace.size()}) {
    auto r = ImportText(trace, chunk);
    ASSERT_TRUE(r->status.ok()) << chunk << ": " << r->status.message();
    EXPECT_EQ(r->info.events_emitted, 1u);
  }
}

TEST(KinetoImporterTest, RankResolutionOrder) {
  const std::string with_dist =
      R"({"traceEvents": [], "distributedInfo": {"rank": 3, "world_size": 4, "backend": "gloo"}})";
  const std::string without = R"({"traceEvents": []})";
  // distributedInfo (even after traceEvents) beats the file name.
  auto r = ImportText(with_dist, 2, "/x/rank7.json");
  ASSERT_TRUE(r->status.ok());
  EXPECT_EQ(r->info.rank, 3);
  EXPECT_EQ(r->info.world_size, 4);
  EXPECT_EQ(r->info.backend, "gloo");
  // The option beats both.
  KinetoImportOptions opt;
  opt.rank = 9;
  r = ImportText(with_dist, 2, "/x/rank7.json", opt);
  EXPECT_EQ(r->info.rank, 9);
  // The file name, in its usual spellings, when nothing else says.
  for (const auto& [name, rank] :
       std::vector<std::pair<std::string, int>>{{"/a/rank12/trace.json", -1},
                                                {"/a/b/job_rank3.json", 3},
                                                {"gpu128_rank-0.json.gz", 0},
                                                {"x/RANK_15.pt.trace.json", 15},
                                                {"worker-Rank42-host.json", 42}}) {
    r = ImportText(without, 5, name);
    if (rank < 0) {
      ASSERT_FALSE(r->status.ok()) << name;  // only the base name counts
      continue;
    }
    ASSERT_TRUE(r->status.ok()) << name << ": " << r->status.message();
    EXPECT_EQ(r->info.rank, rank) << name;
  }
  r = ImportText(without, 5, "/a/trace.json");
  ASSERT_FALSE(r->status.ok());
  EXPECT_EQ(
      r->status.message(),
      "/a/trace.json: cannot tell which rank wrote this trace: it has no distributedInfo.rank "
      "and no rank number in its name; when several trace files are diagnosed together, "
      "each must say its rank: rename it to include it (e.g. trace_rank3.json)");
  // With a default rank (diagnose of a single file), that rank, said to be assumed.
  KinetoImportOptions options;
  options.default_rank = 0;
  r = ImportText(without, 5, "/a/trace.json", options);
  ASSERT_TRUE(r->status.ok()) << r->status.message();
  EXPECT_EQ(r->info.rank, 0);
  EXPECT_TRUE(r->info.rank_assumed);
  r = ImportText(without, 5, "/a/b/job_rank3.json", options);
  ASSERT_TRUE(r->status.ok()) << r->status.message();
  EXPECT_EQ(r->info.rank, 3);
  EXPECT_FALSE(r->info.rank_assumed);
  // Allowed to have none (the pipeline numbers tensorboard_trace_handler's files): rank -1,
  // said to be missing; a rank found anywhere still wins.
  KinetoImportOptions allow;
  allow.allow_missing_rank = true;
  r = ImportText(without, 5, "/a/vm_2568.1795788448589.pt.trace.json", allow);
  ASSERT_TRUE(r->status.ok()) << r->status.message();
  EXPECT_EQ(r->info.rank, -1);
  EXPECT_TRUE(r->info.rank_missing);
  EXPECT_FALSE(r->info.rank_assumed);
  r = ImportText(with_dist, 5, "/a/vm_2568.1795788448589.pt.trace.json", allow);
  ASSERT_TRUE(r->status.ok()) << r->status.message();
  EXPECT_FALSE(r->info.rank_missing);
  EXPECT_GE(r->info.rank, 0);
}

// Every bad input gives exactly one line naming the file and the problem.
void ExpectError(const ImportResult& r, const std::string& file, const std::string& problem) {
  ASSERT_FALSE(r.status.ok()) << "expected an error about: " << problem;
  const std::string& m = r.status.message();
  EXPECT_EQ(m.rfind(file + ": ", 0), 0u) << m;
  EXPECT_NE(m.find(problem), std::string::npos) << m;
  EXPECT_EQ(m.find('\n'), std::string::npos) << m;
}

TEST(KinetoImporterTest, BadFilesGiveOneClearLine) {
  TempDir dir;
  ExpectError(*ImportPath("/nonexistent/rank0.json"), "/nonexistent/rank0.json",
              "no such file or directory");
  const std::string empty = dir.Write("rank0.json", "");
  ExpectError(*ImportPath(empty), empty, "empty (0 bytes)");
  const std::string spaces = dir.Write("rank1.json", "  \n ");
  ExpectError(*ImportPath(spaces), spaces, "only whitespace");
  const std::string binary = dir.Write("bin_rank0.json", std::string("\x89PNG\r\n\x1a\n\0\0", 10));
  ExpectError(*ImportPath(binary), binary, "binary data");
  const std::string text = dir.Write("text_rank0.json", "hello world, this is not json");
  ExpectError(*ImportPath(text), text, "not JSON");
  const std::string number = dir.Write("num_rank0.json", "42");
  ExpectError(*ImportPath(number), number, "JSON number");
  const std::string no_events =
      dir.Write("obj_rank0.json", R"({"schemaVersion": 1, "foo": [1, 2]})");
  ExpectError(*ImportPath(no_events), no_events,
              "not a trace: the top-level object has no \"traceEvents\" array (expected what "
              "torch.profiler's export_chrome_trace writes)");
  const std::string not_array = dir.Write("na_rank0.json", R"({"traceEvents": {"a": 1}})");
  ExpectError(*ImportPath(not_array), not_array, "\"traceEvents\" is not an array");
  const std::string list_of_numbers = dir.Write("list_rank0.json", "[1, 2, 3]");
  ExpectError(*ImportPath(list_of_numbers), list_of_numbers,
              "element 0 of the top-level list is not an event object");
  const std::string trailing = dir.Write("trail_rank0.json", R"({"traceEvents": []} xyz)");
  ExpectError(*ImportPath(trailing), trailing, "unexpected data after the end");
  const std::string zstd =
      dir.Write("z_rank0.json.zst", std::string("\x28\xB5\x2F\xFD\x00\x00", 6));
  ExpectError(*ImportPath(zstd), zstd, "zstd");
  ExpectError(*ImportPath(dir.Write("d_rank0.json", "{\"traceEvents\": [{\"ph\": \"X\"} {}]}")),
              dir.Write("d_rank0.json", "{\"traceEvents\": [{\"ph\": \"X\"} {}]}"),
              "expected ',' or ']' after event 0");
}

TEST(KinetoImporterTest, TruncatedFilesSayWhere) {
  TempDir dir;
  const std::string full(kMixedTrace);
  const size_t cut = full.find("\"ph\": \"X\", \"cat\": \"gpu_memset\"");
  const std::string truncated = dir.Write("cut_rank0.json", full.substr(0, cut + 10));
  auto r = ImportPath(truncated);
  ExpectError(
      *r, truncated,
      "truncated at byte " + std::to_string(cut + 10) + ": the file ends inside traceEvents");
  EXPECT_NE(r->status.message().find("was the profiler killed while writing?"), std::string::npos);
  EXPECT_EQ(r->status.code(), StatusCode::kDataLoss);

  // Cut between events, and after traceEvents.
  const size_t between = full.find("},\n  {\"ph\": \"X\", \"cat\": \"gpu_memset\"") + 2;
  ExpectError(*ImportPath(dir.Write("b_rank0.json", full.substr(0, between))),
              dir.Write("b_rank0.json", ""), "the file ends inside traceEvents");
  const size_t after = full.find("\"traceName\"");
  ExpectError(*ImportPath(dir.Write("c_rank0.json", full.substr(0, after))),
              dir.Write("c_rank0.json", ""), "the file ends inside the top-level object");

  // Gzip: truncated stream, and corrupt data.
  const std::string gz = Gzip(full);
  const std::string gz_cut = dir.Write("g_rank0.json.gz", gz.substr(0, gz.size() / 2));
  ExpectError(*ImportPath(gz_cut), gz_cut, "truncated gzip file");
  std::string bad = gz;
  for (size_t i = 20; i < 60; ++i) bad[i] = static_cast<char>(bad[i] ^ 0x5a);
  const std::string gz_bad = dir.Write("bad_rank0.json.gz", bad);
  ExpectError(*ImportPath(gz_bad), gz_bad, "corrupt gzip data at compressed byte");
}

TEST(KinetoImporterTest, MalformedEventsAreCountedNotFatal) {
  const std::string trace = R"({"traceEvents": [
    {"ph": "X", "name": "ok", "pid": 1, "tid": 1, "ts": 10, "dur": 1},
    {"ph": "X", "name": "nots", "pid": 1, "tid": 1, "dur": 1},
    {"ph": "X", "name": "strts", "pid": 1, "tid": 1, "ts": "10", "dur": 1},
    {"ph": "X", "name": "negdur", "pid": 1, "tid": 1, "ts": 10, "dur": -5},
    {"ph": "X", "pid": 1, "tid": 1, "ts": 10, "dur": 1},
    {"ph": "X", "name": "nodur", "pid": 1, "tid": 1, "ts": 10},
    {"ph": "X", "name": "badjson", "pid": 1, "tid": 1, "ts": 10, "dur": 1, "args": {"a": ?}},
    {"ph": "E", "pid": 1, "tid": 9, "ts": 10},
    {"ph": "X", "name": "ok2", "pid": 1, "tid": 1, "ts": 11, "dur": 1}
  ]})";
  const auto whole = ImportText(trace, trace.size());
  ASSERT_TRUE(whole->status.ok()) << whole->status.message();
  EXPECT_EQ(whole->info.events_emitted, 2u);
  EXPECT_EQ(whole->info.events_malformed, 7u);
  const std::string first_expected =
      "event at byte " + std::to_string(trace.find("{\"ph\": \"X\", \"name\": \"nots\"")) +
      " (\"nots\"): no \"ts\"";
  EXPECT_EQ(whole->info.first_malformed, first_expected);
  for (size_t chunk : {1, 2, 3, 17, 64}) {
    EXPECT_EQ(ImportText(trace, chunk)->Dump(), whole->Dump()) << chunk;
  }
}

TEST(KinetoImporterTest, EndBeyondTheInt64RangeIsMalformedNotOverflow) {
  // Nanosecond timestamps near the 64-bit limit (issue 13): ts + dur would overflow (this
  // test runs under UBSan); the event is counted as malformed, the others import.
  const std::string trace = R"({"displayTimeUnit": "ns", "traceEvents": [
    {"ph": "X", "name": "ok", "pid": 1, "tid": 1, "ts": 10, "dur": 1},
    {"ph": "X", "name": "late", "pid": 1, "tid": 1, "ts": 9223372036854775000, "dur": 5000},
    {"ph": "X", "name": "ok2", "pid": 1, "tid": 1, "ts": 20, "dur": 1}
  ]})";
  const auto r = ImportText(trace, trace.size());
  ASSERT_TRUE(r->status.ok()) << r->status.message();
  EXPECT_EQ(r->info.time_unit, TraceTimeUnit::kNanoseconds);
  EXPECT_EQ(r->info.events_emitted, 2u);
  EXPECT_EQ(r->info.events_malformed, 1u);
  EXPECT_NE(r->info.first_malformed.find("\"late\""), std::string::npos) << r->info.first_malformed;
  EXPECT_NE(r->info.first_malformed.find("out of range"), std::string::npos)
      << r->info.first_malformed;
}

TEST(KinetoImporterTest, TimesBeyondTwoToThe62NsAreMalformedNotPassedOn) {
  // Times that fit int64 but lie beyond 2^62 ns (~146 years) from the epoch are bad data
  // (issue 13): a later difference of two of them (a span, a clock offset) would overflow.
  // Each is counted where it is read, whatever the event's phase; only the sane ones reach
  // the sink, so no consumer (summarizer, Perfetto export) sees them.
  const std::string trace = R"({"displayTimeUnit": "ns", "traceEvents": [
    {"ph": "X", "name": "ok", "pid": 1, "tid": 1, "ts": 10, "dur": 1},
    {"ph": "X", "name": "far", "pid": 1, "tid": 1, "ts": 9200000000000000000, "dur": 10},
    {"ph": "X", "name": "before", "pid": 1, "tid": 1, "ts": -9200000000000000000, "dur": 10},
    {"ph": "X", "name": "long", "pid": 1, "tid": 1, "ts": 0, "dur": 9200000000000000000},
    {"ph": "B", "name": "open_early", "pid": 1, "tid": 2, "ts": -9223372036854775000},
    {"ph": "E", "pid": 1, "tid": 2, "ts": 9223372036854775000},
    {"ph": "B", "name": "open", "pid": 1, "tid": 3, "ts": 5},
    {"ph": "E", "pid": 1, "tid": 3, "ts": 9223372036854775000},
    {"ph": "X", "name": "ok2", "pid": 1, "tid": 1, "ts": 20, "dur": 1}
  ]})";
  for (size_t chunk : {trace.size(), size_t{7}}) {
    const auto r = ImportText(trace, chunk);
    ASSERT_TRUE(r->status.ok()) << r->status.message();
    EXPECT_EQ(r->info.events_emitted, 2u) << chunk;
    // far, before, long, open_early's B, the E it would have closed (now unmatched), open's E
    EXPECT_EQ(r->info.events_malformed, 6u) << chunk;
    EXPECT_NE(r->info.first_malformed.find("\"far\""), std::string::npos)
        << r->info.first_malformed;
    EXPECT_NE(r->info.first_malformed.find("out of range"), std::string::npos)
        << r->info.first_malformed;
    for (const Event& e : r->sink.events) {
      EXPECT_LT(e.end_ns, int64_t{1} << 62);
      EXPECT_GT(e.start_ns, -(int64_t{1} << 62));
    }
  }
}

// Peak RSS (VmHWM) in kB after resetting it; 0 where /proc does not allow it.
long ResetAndReadPeakKb(bool reset) {
  if (reset) {
    std::ofstream("/proc/self/clear_refs") << "5";
  }
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("VmHWM:", 0) == 0) return std::atol(line.c_str() + 6);
  }
  return 0;
}

#if defined(__SANITIZE_ADDRESS__)
constexpr bool kUnderAsan = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
constexpr bool kUnderAsan = true;
#else
constexpr bool kUnderAsan = false;
#endif
#else
constexpr bool kUnderAsan = false;
#endif

TEST(KinetoImporterTest, HugeStringsKeepMemoryBounded) {
  // A 20 MB event name, streamed in 64 KB chunks that are generated on the fly (the test
  // itself never holds the document): the name is truncated and counted, memory stays flat.
  constexpr size_t kHuge = 20u << 20;
  constexpr size_t kChunk = 64u << 10;
  const std::string head = R"({"INFO": ")";
  const std::string mid =
      R"(", "traceEvents": [{"ph": "X", "pid": 1, "tid": 1, "ts": 5, "dur": 1, "name": ")";
  const std::string tail =
      R"("}, {"ph": "X", "name": "next", "pid": 1, "tid": 1, "ts": 6, "dur": 1}]})";
  FunctionTable functions;
  RecordingSink sink;
  KinetoImporter importer("huge_rank0.json", &functions, &sink);
  const long before = ResetAndReadPeakKb(true);
  std::string chunk(kChunk, 'n');
  auto feed_filler = [&](size_t n) {
    for (size_t left = n; left > 0;) {
      const size_t k = std::min(left, kChunk);
      ASSERT_TRUE(importer.Parse(chunk.data(), k).ok());
      left -= k;
    }
  };
  ASSERT_TRUE(importer.Parse(head.data(), head.size()).ok());
  feed_filler(kHuge);  // a huge top-level string, skipped
  ASSERT_TRUE(importer.Parse(mid.data(), mid.size()).ok());
  feed_filler(kHuge);  // a huge name inside an event that spans 320 chunks
  ASSERT_TRUE(importer.Parse(tail.data(), tail.size()).ok());
  auto info = importer.Finish();
  const long after = ResetAndReadPeakKb(false);
  ASSERT_TRUE(info.ok()) << info.status().message();
  EXPECT_EQ(info->events_emitted, 2u);
  EXPECT_EQ(info->names_truncated, 1u);
  ASSERT_EQ(sink.events.size(), 2u);
  EXPECT_EQ(functions.Get(sink.events[0].function_id).name.size(), KinetoImporter::kMaxNameBytes);
  EXPECT_EQ(sink.events[0].start_ns, 5000);
  if (!kUnderAsan && before > 0) {
    EXPECT_LT(after - before, 8 * 1024) << "peak RSS grew by " << (after - before) << " kB";
  }
}

TEST(KinetoImporterTest, HugeEventStructureIsSkippedWithAReason) {
  // An event whose args hold 20 MB of numbers (not a string, so nothing to cap): counted
  // as malformed, the import goes on.
  FunctionTable functions;
  RecordingSink sink;
  KinetoImporter importer("big_rank0.json", &functions, &sink);
  const std::string head =
      R"({"traceEvents": [{"ph": "X", "name": "big", "pid": 1, "tid": 1, "ts": 5, "dur": 1, "args": {"x": [)";
  const std::string tail =
      R"(1]}}, {"ph": "X", "name": "next", "pid": 1, "tid": 1, "ts": 6, "dur": 1}]})";
  ASSERT_TRUE(importer.Parse(head.data(), head.size()).ok());
  std::string numbers;
  for (int i = 0; i < 32768; ++i) numbers += "1,";
  for (size_t total = 0; total < (20u << 20); total += numbers.size()) {
    ASSERT_TRUE(importer.Parse(numbers.data(), numbers.size()).ok());
  }
  ASSERT_TRUE(importer.Parse(tail.data(), tail.size()).ok());
  auto info = importer.Finish();
  ASSERT_TRUE(info.ok()) << info.status().message();
  EXPECT_EQ(info->events_emitted, 1u);
  EXPECT_EQ(info->events_malformed, 1u);
  EXPECT_NE(info->first_malformed.find("event larger than 16 MiB"), std::string::npos)
      << info->first_malformed;
}

TEST(KinetoImporterTest, LongNamesAreTruncatedAtUtf8Boundary) {
  std::string name(KinetoImporter::kMaxNameBytes - 1, 'a');
  name += "\xc3\xa9tail";  // 'é' straddles the cap
  const std::string trace = R"({"traceEvents": [{"ph": "X", "name": ")" + name +
                            R"(", "pid": 1, "tid": 1, "ts": 1, "dur": 1}]})";
  for (size_t chunk : {trace.size(), size_t{1000}, size_t{7}}) {
    auto r = ImportText(trace, chunk);
    ASSERT_TRUE(r->status.ok());
    EXPECT_EQ(r->info.names_truncated, 1u);
    EXPECT_EQ(r->Name(r->sink.events.at(0)), std::string(KinetoImporter::kMaxNameBytes - 1, 'a'));
  }
}

TEST(KinetoEventClassifierTest, CategoryAndNameMapping) {
  auto kind = [](std::string_view cat, std::string_view name) {
    return ClassifyKinetoEvent(true, cat, name).kind;
  };
  EXPECT_EQ(kind("cuda_runtime", "cudaLaunchKernelExC"), EventKind::kKernelLaunch);
  EXPECT_EQ(kind("cuda_driver", "cuLaunchKernel"), EventKind::kKernelLaunch);
  EXPECT_EQ(kind("cuda_runtime", "cudaLaunchCooperativeKernel"), EventKind::kKernelLaunch);
  // ROCm: hipBLASLt / Triton launch through hipExtModuleLaunchKernel (TraceLens' MI300 traces).
  EXPECT_EQ(kind("cuda_runtime", "hipLaunchKernel"), EventKind::kKernelLaunch);
  EXPECT_EQ(kind("cuda_runtime", "hipModuleLaunchKernel"), EventKind::kKernelLaunch);
  EXPECT_EQ(kind("cuda_runtime", "hipExtModuleLaunchKernel"), EventKind::kKernelLaunch);
  EXPECT_EQ(kind("cuda_runtime", "cudaDeviceSynchronize"), EventKind::kSync);
  EXPECT_EQ(kind("cuda_runtime", "cudaEventSynchronize"), EventKind::kSync);
  EXPECT_EQ(kind("cuda_runtime", "cudaStreamWaitEvent"), EventKind::kSync);
  EXPECT_EQ(kind("cuda_runtime", "cudaMemcpyAsync"), EventKind::kRuntimeCall);
  EXPECT_EQ(kind("cuda_sync", "Stream Sync"), EventKind::kSync);
  EXPECT_EQ(kind("kernel",
                 "ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)"),
            EventKind::kCollective);
  EXPECT_EQ(kind("cpu_op", "gloo:all_reduce"), EventKind::kCollective);
  EXPECT_EQ(kind("gpu_user_annotation", "## forward ##"), EventKind::kUserAnnotation);
  EXPECT_TRUE(ClassifyKinetoEvent(true, "gpu_user_annotation", "x").on_device);
  EXPECT_EQ(kind("Kernel", "legacy_kernel"), EventKind::kGpuKernel);  // torch <= 1.9 names
  // Copies between device memories are GPU work, never host-device traffic.
  auto flags = [](std::string_view cat, std::string_view name) {
    return ClassifyKinetoEvent(true, cat, name).flags;
  };
  EXPECT_TRUE(flags("gpu_memcpy", "Memcpy DtoD (Device -> Device)") & kEventFlagDeviceToDevice);
  EXPECT_TRUE(flags("Memcpy", "Memcpy DtoD (Device -> Device)") & kEventFlagDeviceToDevice);
  EXPECT_TRUE(flags("gpu_memcpy", "Memcpy PtoP (Device -> Device)") & kEventFlagDeviceToDevice);
  EXPECT_FALSE(flags("gpu_memcpy", "Memcpy HtoD (Pinned -> Device)") & kEventFlagDeviceToDevice);
  EXPECT_FALSE(flags("gpu_memcpy", "Memcpy DtoH (Device -> Pageable)") & kEventFlagDeviceToDevice);
  EXPECT_TRUE(flags("gpu_memcpy", "Memcpy DtoH (Device -> Pageable)") & kEventFlagPageable);
  EXPECT_FALSE(ClassifyKinetoEvent(true, "Trace", "PyTorch Profiler (0)").keep);
  EXPECT_FALSE(ClassifyKinetoEvent(true, "ac2g", "ac2g").keep);
  // No category (torch 1.13 CPU-only).
  auto nocat = [](std::string_view name) { return ClassifyKinetoEvent(false, "", name).kind; };
  EXPECT_EQ(nocat("aten::add"), EventKind::kTorchOp);
  EXPECT_EQ(nocat("AddmmBackward0"), EventKind::kTorchOp);
  EXPECT_EQ(nocat("my_region"), EventKind::kUserAnnotation);
  EXPECT_EQ(nocat("ProfilerStep#3"), EventKind::kIteration);
  EXPECT_EQ(ClassifyKinetoEvent(false, "", "ProfilerStep#3").name, "ProfilerStep");
  EXPECT_EQ(KinetoDtypeSize("Float"), 4u);
  EXPECT_EQ(KinetoDtypeSize("BFloat16"), 2u);
  EXPECT_EQ(KinetoDtypeSize("Long"), 8u);
  EXPECT_EQ(KinetoDtypeSize("Float8_e4m3fn"), 1u);
  EXPECT_EQ(KinetoDtypeSize("mystery"), 0u);
}

// The real traces in ../shared/data/kineto. Expected counts were computed once, independently
// of this importer, with /usr/bin/python3 + json + gzip over traceEvents (ph "X" only):
//   kernels     cat == "kernel" and not name.startswith("nccl")
//   collectives cat == "kernel" and name.startswith("nccl"), plus cat in (cpu_op,
//               user_annotation, none) and name.startswith(("nccl:", "gloo:"))
//   memcpy / memset   cat == "gpu_memcpy" / "gpu_memset"
//   launches    cat in (cuda_runtime, cuda_driver) and name.startswith(("cudaLaunch", "cuLaunch"))
//   iterations  cat in (cpu_op, user_annotation, none) and name.startswith("ProfilerStep#")
//   emitted     every ph "X" event whose cat is not "Trace"
struct RealTrace {
  const char* file;
  int rank;
  int world_size;
  const char* backend;
  int kernels, memcpy, memset, collectives, launches, iterations;
  uint64_t emitted;
};

TEST(KinetoImporterTest, RealTracesMatchIndependentCounts) {
  const std::string dir = SharedDataDir();
  if (!fs::exists(dir)) GTEST_SKIP() << "no ../shared/data/kineto";
  const RealTrace traces[] = {
      {"alexnet_1gpu.json.gz", 0, -1, "", 79, 16, 3, 0, 79, 0, 867},
      {"cpu_only_rank-34.json.gz", 34, 300, "gloo", 0, 0, 0, 10, 0, 1, 15},
      {"gpu128_rank-0.json.gz", 0, 128, "nccl", 1144, 40, 10, 20, 1154, 2, 4810},
      {"gpu128_rank-1.json.gz", 1, 128, "nccl", 1094, 40, 10, 20, 1104, 2, 4675},
      {"nccl2_rank-0.json.gz", 0, 2, "nccl", 2679, 960, 114, 42, 2700, 3, 26932},
  };
  for (const RealTrace& t : traces) {
    SCOPED_TRACE(t.file);
    const std::string path = dir + "/" + t.file;
    if (!fs::exists(path)) continue;
    auto r = ImportPath(path);
    ASSERT_TRUE(r->status.ok()) << r->status.message();
    EXPECT_EQ(r->info.rank, t.rank);
    EXPECT_EQ(r->info.world_size, t.world_size);
    EXPECT_EQ(r->info.backend, t.backend);
    EXPECT_EQ(r->info.events_malformed, 0u) << r->info.first_malformed;
    EXPECT_EQ(r->info.events_emitted, t.emitted);
    EXPECT_EQ(r->Count(EventKind::kGpuKernel), t.kernels);
    EXPECT_EQ(r->Count(EventKind::kMemcpy), t.memcpy);
    EXPECT_EQ(r->Count(EventKind::kMemset), t.memset);
    EXPECT_EQ(r->Count(EventKind::kCollective), t.collectives);
    EXPECT_EQ(r->Count(EventKind::kKernelLaunch), t.launches);
    EXPECT_EQ(r->Count(EventKind::kIteration), t.iterations);
  }
  // Spot checks on nccl2_rank-0 (values read from the file with python): the first NCCL
  // kernel, fractional µs, payload from "In msg nelems" 6637568 × Float.
  const std::string nccl2 = dir + "/nccl2_rank-0.json.gz";
  if (!fs::exists(nccl2)) return;
  auto r = ImportPath(nccl2);
  ASSERT_TRUE(r->status.ok());
  const Event* first_nccl = nullptr;
  for (const Event& e : r->sink.events) {
    if (e.kind == EventKind::kCollective && (e.flags & kEventFlagOnDevice)) {
      first_nccl = &e;  // the first one in file order
      break;
    }
  }
  ASSERT_NE(first_nccl, nullptr);
  EXPECT_EQ(r->Name(*first_nccl),
            "ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)");
  EXPECT_EQ(first_nccl->start_ns, 4458677009853422);
  EXPECT_EQ(first_nccl->end_ns, 4458677009853422 + 2636669);
  EXPECT_EQ(first_nccl->payload, 6637568u * 4);
  // Its process group: the default group of the 2-rank job.
  ASSERT_EQ(r->sink.groups.size(), 1u);
  EXPECT_EQ(first_nccl->group, r->sink.groups[0].id);
  EXPECT_EQ(r->sink.groups[0].name, "0");
  EXPECT_EQ(r->sink.groups[0].ranks, (std::vector<int32_t>{0, 1}));
  for (const Event& e : r->sink.events) {
    if (e.kind == EventKind::kCollective && (e.flags & kEventFlagOnDevice)) {
      EXPECT_EQ(e.group, first_nccl->group) << r->Name(e);
    }
  }
}

// Public traces whose NCCL kernels name their process group (tracelens b200 and mi300: 8 ranks):
// every group is read with all its ranks, and its backend from the trace's pg_config.
TEST(KinetoImporterTest, RealTracesNameTheirProcessGroups) {
  const std::string dir = SharedDataDir();
  struct Case {
    const char* file;
    size_t groups;
    std::vector<int32_t> ranks;  // of every group
    const char* backend;         // of every group
  };
  const std::vector<int32_t> eight{0, 1, 2, 3, 4, 5, 6, 7};
  const Case cases[] = {
      {"external/tracelens/tests/traces/b200/eager_trace.json.gz", 1, eight, "cuda:nccl"},
      {"external/tracelens/tests/traces/mi300/resnet_act_checkpoint.json.gz", 1, eight,
       "cuda:nccl"},
      {"nccl2_rank-0.json.gz", 1, {0, 1}, "cuda:nccl"},
  };
  size_t found = 0;
  for (const Case& c : cases) {
    SCOPED_TRACE(c.file);
    const std::string path = dir + "/" + c.file;
    if (!fs::exists(path)) continue;
    ++found;
    auto r = ImportPath(path);
    ASSERT_TRUE(r->status.ok()) << r->status.message();
    ASSERT_EQ(r->sink.groups.size(), c.groups);
    for (const ProcessGroupInfo& g : r->sink.groups) {
      EXPECT_EQ(g.ranks, c.ranks);
      EXPECT_EQ(g.size, c.ranks.size());
      EXPECT_EQ(g.backend, c.backend);
    }
    size_t grouped = 0;
    for (const Event& e : r->sink.events) grouped += e.group != 0;
    EXPECT_GT(grouped, 0u);
  }
  if (found == 0) GTEST_SKIP() << "no external traces under " << dir;
}

}  // namespace
}  // namespace perftracker
