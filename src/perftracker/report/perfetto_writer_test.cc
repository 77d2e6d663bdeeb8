#include "perftracker/report/perfetto_writer.h"

#include <array>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "perftracker/report/trace_event_format_check.h"
#include "perftracker/sources/kineto/kineto_importer.h"

namespace perftracker {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr int64_t kMs = 1'000'000;
// 20 days after the epoch (an absolute clock, still exact in ns when JSON holds µs as a double)
constexpr int64_t kBase = 1'700'000'000'000 * kMs / 1000;
constexpr int64_t kSkew = 5 * kMs;  // rank 1's clock runs 5 ms ahead
constexpr int kSteps = 4;
constexpr int64_t kStep = 100 * kMs;

// Two ranks, one host thread each. Per step: aten::mm then nccl:all_reduce. Rank 1 is the
// straggler (mm takes 48 ms, not 10), so rank 0 waits in the all_reduce from 10 ms to 50 ms.
// Rank 1's clock reads kSkew ahead; the all_reduce ends at true 50 ms on both.
std::unique_ptr<RankTrace> MakeRank(int32_t rank, int64_t base = kBase) {
  auto r = std::make_unique<RankTrace>();
  r->rank = rank;
  r->host = rank == 0 ? "node-a" : "node-b";
  r->source = "synthetic";
  TrackInfo t;
  t.track_id = 0;
  t.kind = TrackKind::kHostThread;
  t.name = "thread 7";
  r->OnTrack(t);
  const uint32_t mm = r->functions()->Intern(EventKind::kTorchOp, "aten::mm");
  const uint32_t ar = r->functions()->Intern(EventKind::kCollective, "nccl:all_reduce");
  const int64_t clock = rank == 1 ? kSkew : 0;
  const int64_t mm_ns = rank == 1 ? 48 * kMs : 10 * kMs;
  for (int i = 0; i < kSteps; ++i) {
    const int64_t s = base + i * kStep + clock;
    Event e;
    e.kind = EventKind::kTorchOp;
    e.function_id = mm;
    e.start_ns = s;
    e.end_ns = s + mm_ns;
    r->OnEvent(e);
    e.kind = EventKind::kCollective;
    e.function_id = ar;
    e.start_ns = s + mm_ns;
    e.end_ns = s + 50 * kMs;
    e.payload = 4096;
    r->OnEvent(e);
  }
  return r;
}

Diagnosis StragglerDiagnosis() {
  Diagnosis d;
  d.num_workers = 2;
  Finding f;
  f.code = "PT-STRAGGLER-COMPUTE";
  f.title = "rank 1 spends 48 ms/iter in aten::mm, 4.8x its peers";
  f.workers = {1};
  f.victims = {0};
  f.function = "aten::mm";
  f.function_key = "torch_op:aten::mm";
  f.resource = "CPU";
  f.lost_ns_per_iteration = 38.0 * kMs;
  f.material = true;
  d.findings.push_back(f);
  return d;
}

// The export's own metadata event (viewers skip it) is the only one not of the format.
TraceEventFormatCheck FormatCheck() { return TraceEventFormatCheck({"perftracker_rank"}); }

json Export(PerfettoWriter* writer, const Diagnosis& d) {
  std::ostringstream out;
  Status st = writer->Write(d, &out);
  EXPECT_TRUE(st.ok()) << st.message();
  json doc = json::parse(out.str(), nullptr, false);
  EXPECT_FALSE(doc.is_discarded()) << "the export is not valid JSON";
  // Every export is read strictly against the Trace Event Format, as a viewer would need it.
  const TraceEventFormatReport format = FormatCheck().Check(doc);
  EXPECT_TRUE(format.ok()) << format.problem_count << " problems, first: "
                           << (format.problems.empty() ? "" : format.problems[0]);
  return doc;
}

int64_t TsNs(const json& e) { return std::llround(e["ts"].get<double>() * 1000.0); }
int64_t DurNs(const json& e) { return std::llround(e["dur"].get<double>() * 1000.0); }

std::vector<json> Select(const json& doc, const std::string& ph, int pid, int64_t tid = -1) {
  std::vector<json> out;
  for (const json& e : doc["traceEvents"]) {
    if (e["ph"] == ph && e["pid"] == pid && (tid < 0 || e["tid"] == tid)) out.push_back(e);
  }
  return out;
}

// A finding track's slices without the short ones each arrow end starts ("end of the call",
// "end of the wait").
bool IsArrowEnd(const json& e) { return e["name"].get<std::string>().rfind("end of the ", 0) == 0; }

std::vector<json> Annotations(const json& doc, int pid, int64_t tid) {
  std::vector<json> out;
  for (json& e : Select(doc, "X", pid, tid)) {
    if (!IsArrowEnd(e)) out.push_back(std::move(e));
  }
  return out;
}

// The arrow-end slice of `pid`/`tid` that starts at `ts_ns`, or null.
json ArrowEndAt(const json& doc, int pid, int64_t tid, int64_t ts_ns) {
  for (const json& e : Select(doc, "X", pid, tid)) {
    if (IsArrowEnd(e) && std::llround(e["ts"].get<double>() * 1000.0) == ts_ns) return e;
  }
  return json();
}

json Metadata(const json& doc, const std::string& name, int pid) {
  for (const json& e : doc["traceEvents"]) {
    if (e["ph"] == "M" && e["name"] == name && e["pid"] == pid) return e["args"];
  }
  return json();
}

int64_t TidOfThread(const json& doc, int pid, const std::string& prefix) {
  for (const json& e : doc["traceEvents"]) {
    if (e["ph"] == "M" && e["name"] == "thread_name" && e["pid"] == pid &&
        e["args"]["name"].get<std::string>().rfind(prefix, 0) == 0) {
      return e["tid"].get<int64_t>();
    }
  }
  return -1;
}

TEST(PerfettoWriterTest, SkewedTwoRankStragglerIsAlignedAnnotatedAndLinked) {
  auto r0 = MakeRank(0);
  auto r1 = MakeRank(1);
  PerfettoWriter writer;
  writer.AddRank(r1.get());  // any order: written by rank
  writer.AddRank(r0.get());
  const json doc = Export(&writer, StragglerDiagnosis());

  // One process per rank, named with its host; the skew in the metadata.
  EXPECT_EQ(Metadata(doc, "process_name", 0)["name"], "rank 0 (node-a)");
  EXPECT_EQ(Metadata(doc, "process_name", 1)["name"], "rank 1 (node-b)");
  EXPECT_EQ(Metadata(doc, "perftracker_rank", 0)["clock_offset_ns"], 0);
  EXPECT_EQ(Metadata(doc, "perftracker_rank", 1)["clock_offset_ns"], kSkew);
  EXPECT_EQ(Metadata(doc, "perftracker_rank", 1)["sync_points"], kSteps);
  EXPECT_EQ(Metadata(doc, "perftracker_rank", 1)["sync_spread_ns"], 0);
  EXPECT_EQ(doc["otherData"]["time_shift_ns"], 0);
  EXPECT_NE(Metadata(doc, "process_labels", 1)["labels"].get<std::string>().find("+5.000 ms"),
            std::string::npos);
  EXPECT_EQ(doc["otherData"]["ranks"][1]["clock_offset_ns"], kSkew);
  EXPECT_EQ(Metadata(doc, "thread_name", 0)["name"], "thread 7");

  // Aligned: rank 1's aten::mm starts with rank 0's, on the true clock.
  const int64_t thread = TidOfThread(doc, 1, "thread 7");
  ASSERT_GT(thread, 0);
  std::vector<int64_t> mm_starts;
  for (const json& e : Select(doc, "X", 1, thread)) {
    if (e["name"] == "aten::mm") mm_starts.push_back(TsNs(e));
  }
  ASSERT_EQ(mm_starts.size(), static_cast<size_t>(kSteps));
  for (int i = 0; i < kSteps; ++i) EXPECT_EQ(mm_starts[i], kBase + i * kStep);

  // The finding on the culprit: one slice per call of aten::mm, on its own track.
  const int64_t culprit_track = TidOfThread(doc, 1, "perftracker #1 PT-STRAGGLER-COMPUTE");
  ASSERT_GT(culprit_track, 0);
  const std::vector<json> slices = Annotations(doc, 1, culprit_track);
  ASSERT_EQ(slices.size(), static_cast<size_t>(kSteps));
  for (int i = 0; i < kSteps; ++i) {
    EXPECT_EQ(TsNs(slices[i]), kBase + i * kStep);
    EXPECT_EQ(DurNs(slices[i]), 48 * kMs);
    EXPECT_EQ(slices[i]["args"]["code"], "PT-STRAGGLER-COMPUTE");
    EXPECT_EQ(slices[i]["args"]["message"], StragglerDiagnosis().findings[0].title);
  }
  // No annotation on rank 0 as a culprit; its track holds the waits.
  const int64_t victim_track = TidOfThread(doc, 0, "perftracker #1 PT-STRAGGLER-COMPUTE");
  ASSERT_GT(victim_track, 0);
  const std::vector<json> waits = Annotations(doc, 0, victim_track);
  ASSERT_EQ(waits.size(), static_cast<size_t>(kSteps));
  for (int i = 0; i < kSteps; ++i) {
    EXPECT_EQ(waits[i]["name"], "waits for rank 1");
    EXPECT_EQ(TsNs(waits[i]), kBase + i * kStep + 10 * kMs);
    EXPECT_EQ(DurNs(waits[i]), 40 * kMs);
  }

  // A flow from each culprit call to the wait it caused.
  const std::vector<json> starts = Select(doc, "s", 1);
  const std::vector<json> ends = Select(doc, "f", 0);
  ASSERT_EQ(starts.size(), static_cast<size_t>(kSteps));
  ASSERT_EQ(ends.size(), static_cast<size_t>(kSteps));
  for (int i = 0; i < kSteps; ++i) {
    EXPECT_EQ(starts[i]["id"], ends[i]["id"]);
    EXPECT_EQ(starts[i]["tid"], culprit_track);
    EXPECT_EQ(ends[i]["tid"], victim_track);
    EXPECT_EQ(ends[i]["bp"], "e");
    const int64_t s = TsNs(starts[i]);
    const int64_t f = TsNs(ends[i]);
    EXPECT_GT(s, TsNs(slices[i]));
    EXPECT_LT(s, TsNs(slices[i]) + DurNs(slices[i]));
    EXPECT_GT(f, TsNs(waits[i]));
    EXPECT_LT(f, TsNs(waits[i]) + DurNs(waits[i]));
    // Each end is the start of a slice that ends with the call or the wait (Chrome DevTools
    // binds a flow only there; Perfetto to the slice that encloses it).
    const json from = ArrowEndAt(doc, 1, culprit_track, s);
    const json to = ArrowEndAt(doc, 0, victim_track, f);
    ASSERT_FALSE(from.is_null()) << "no slice starts at arrow " << i << "'s start";
    ASSERT_FALSE(to.is_null()) << "no slice starts at arrow " << i << "'s end";
    EXPECT_EQ(s + DurNs(from), TsNs(slices[i]) + DurNs(slices[i]));
    EXPECT_EQ(f + DurNs(to), TsNs(waits[i]) + DurNs(waits[i]));
    EXPECT_EQ(from["cat"], starts[i]["cat"]);
    EXPECT_EQ(to["cat"], ends[i]["cat"]);
  }
  EXPECT_EQ(writer.stats().flows, static_cast<uint64_t>(kSteps));
  EXPECT_EQ(writer.stats().events_aggregated, 0u);
}

TEST(PerfettoWriterTest, AFindingWithoutCallsInTheTraceIsAnInstantNotASilentGap) {
  auto r0 = MakeRank(0);
  auto r1 = MakeRank(1);
  PerfettoWriter writer;
  writer.AddRank(r0.get());
  writer.AddRank(r1.get());
  Diagnosis d = StragglerDiagnosis();
  d.findings[0].function = "block9";
  d.findings[0].function_key = "annotation:block9";
  const json doc = Export(&writer, d);
  const int64_t track = TidOfThread(doc, 1, "perftracker #1");
  const std::vector<json> instants = Select(doc, "i", 1, track);
  ASSERT_EQ(instants.size(), 1u);
  EXPECT_EQ(instants[0]["args"]["code"], "PT-STRAGGLER-COMPUTE");
  EXPECT_EQ(instants[0]["args"]["note"], "no call of this function in this rank's events");
}

TEST(PerfettoWriterTest, BeyondTheCapShortEventsAreAggregatedAndCounted) {
  auto r0 = MakeRank(0);
  auto r1 = MakeRank(1);
  PerfettoOptions options;
  options.max_events = 8;  // of 16
  PerfettoWriter writer(options);
  writer.AddRank(r0.get());
  writer.AddRank(r1.get());
  const json doc = Export(&writer, StragglerDiagnosis());
  EXPECT_EQ(doc["otherData"]["events_total"], 16);
  EXPECT_EQ(doc["otherData"]["events_written"], 8);
  EXPECT_EQ(doc["otherData"]["events_aggregated"], 8);
  // Each rank keeps its 4 longest: rank 0 its 40 ms waits, rank 1 its 48 ms mm calls.
  const int64_t t0 = TidOfThread(doc, 0, "thread 7");
  const int64_t t1 = TidOfThread(doc, 1, "thread 7");
  for (const json& e : Select(doc, "X", 0, t0)) EXPECT_EQ(e["name"], "nccl:all_reduce");
  for (const json& e : Select(doc, "X", 1, t1)) EXPECT_EQ(e["name"], "aten::mm");
  EXPECT_EQ(Metadata(doc, "thread_name", 0)["events_aggregated"], 4);
  EXPECT_EQ(Metadata(doc, "thread_name", 0)["aggregated_ns"], 4 * 10 * kMs);
  EXPECT_EQ(Metadata(doc, "perftracker_rank", 1)["events_aggregated"], 4);
  // The diagnosis is drawn from all events, whatever the cap.
  EXPECT_EQ(Annotations(doc, 1, TidOfThread(doc, 1, "perftracker #1")).size(),
            static_cast<size_t>(kSteps));
}

TEST(PerfettoWriterTest, EventsWithTimesOutOfRangeAreNotRecordedNorDrawn) {
  // A hostile trace's or rank's times (issue 13): beyond 2^62 ns from the epoch, or ending
  // before they start. The rank's recording keeps none of them (the summary it forwards to
  // counts them as malformed), so the export's clock and duration arithmetic never sees them
  // (this test runs under UBSan: the export subtracted -9.2e18 from 9.2e18).
  auto r0 = MakeRank(0);
  auto r1 = MakeRank(1);
  const uint32_t mm = r0->functions()->Intern(EventKind::kTorchOp, "aten::mm");
  struct Times {
    int64_t start;
    int64_t end;
  };
  for (const Times t : {Times{-9'200'000'000'000'000'000, 9'200'000'000'000'000'000},
                        Times{INT64_MAX - 10, INT64_MAX}, Times{INT64_MIN, INT64_MIN + 10},
                        Times{kBase + 10, kBase}}) {
    Event e;
    e.kind = EventKind::kTorchOp;
    e.function_id = mm;
    e.start_ns = t.start;
    e.end_ns = t.end;
    r0->OnEvent(e);
  }
  EXPECT_EQ(r0->events().size(), 2u * kSteps);
  EXPECT_EQ(r0->not_recorded_count(), 0u);
  PerfettoWriter writer;
  writer.AddRank(r0.get());
  writer.AddRank(r1.get());
  const json doc = Export(&writer, StragglerDiagnosis());
  EXPECT_EQ(doc["otherData"]["events_total"], 4 * kSteps);
  const std::vector<json> drawn = Select(doc, "X", 0, TidOfThread(doc, 0, "thread 7"));
  EXPECT_EQ(drawn.size(), 2u * kSteps);
  for (const json& e : drawn) {
    EXPECT_GE(TsNs(e), kBase) << e.dump();
    EXPECT_LE(TsNs(e) + DurNs(e), kBase + kSteps * kStep) << e.dump();
  }
}

TEST(PerfettoWriterTest, RelativeClocksThatWouldGoNegativeAreShiftedTogether) {
  // Each rank's times start near 0 (torch 1.13 traces); rank 1, whose clock is 5 ms ahead,
  // recorded an op at its 0, i.e. 5 ms before rank 0's 0.
  auto r0 = MakeRank(0, 0);
  auto r1 = MakeRank(1, 0);
  Event early;
  early.kind = EventKind::kTorchOp;
  early.function_id = r1->functions()->Intern(EventKind::kTorchOp, "aten::empty");
  early.start_ns = 0;
  early.end_ns = kMs;
  r1->OnEvent(early);
  PerfettoWriter writer;
  writer.AddRank(r0.get());
  writer.AddRank(r1.get());
  const json doc = Export(&writer, StragglerDiagnosis());
  EXPECT_EQ(doc["otherData"]["time_shift_ns"], kSkew);
  EXPECT_EQ(Metadata(doc, "perftracker_rank", 1)["clock_offset_ns"], kSkew);
  std::map<int, std::vector<int64_t>> mm;
  for (const json& e : doc["traceEvents"]) {
    if (e["ph"] == "M") continue;
    EXPECT_GE(TsNs(e), 0) << e.dump();
    if (e["ph"] == "X" && e["name"] == "aten::mm") mm[e["pid"].get<int>()].push_back(TsNs(e));
  }
  EXPECT_EQ(mm[0], mm[1]);
  EXPECT_EQ(mm[0].front(), kSkew);
}

// --- Alignment: the sync points chosen, on trace sets with a known skew. ---

struct RankSpec {
  int32_t rank = 0;
  std::string host;
  int64_t clock = 0;       // this rank's clock reads true time + clock
  int64_t end_jitter = 0;  // its collective ends sit this far from the true end
  int first_step = 0;      // the first step its trace holds (of 0..kSteps-1)
  // Host-side collectives end at enqueue (asynchronous, like NCCL's), this far after their
  // start on this rank; the device-side kernel ends at the true sync point. 0: only the
  // host-side collective, which ends at the sync point (gloo).
  int64_t enqueue_ns = 0;
};

std::unique_ptr<RankTrace> MakeAlignedRank(const RankSpec& spec) {
  auto r = std::make_unique<RankTrace>();
  r->rank = spec.rank;
  r->host = spec.host;
  r->source = "synthetic";
  TrackInfo t;
  t.track_id = 0;
  t.kind = TrackKind::kHostThread;
  t.name = "thread 7";
  r->OnTrack(t);
  t.track_id = 1;
  t.kind = TrackKind::kDeviceStream;
  t.name = "stream 7";
  t.device = 0;
  r->OnTrack(t);
  const uint32_t mm = r->functions()->Intern(EventKind::kTorchOp, "aten::mm");
  const uint32_t ar = r->functions()->Intern(EventKind::kCollective, "nccl:all_reduce");
  const uint32_t kernel =
      r->functions()->Intern(EventKind::kCollective, "ncclKernel_AllReduce_RING_LL_Sum_float");
  for (int i = spec.first_step; i < kSteps; ++i) {
    const int64_t s = kBase + i * kStep + spec.clock;
    Event e;
    e.kind = EventKind::kTorchOp;
    e.function_id = mm;
    e.start_ns = s;
    e.end_ns = s + 10 * kMs;
    r->OnEvent(e);
    e.kind = EventKind::kCollective;
    e.function_id = ar;
    e.start_ns = s + 10 * kMs;
    // Asynchronous enqueues end at a time that says nothing about the other ranks: vary it.
    e.end_ns = spec.enqueue_ns > 0 ? e.start_ns + spec.enqueue_ns * (1 + (i + spec.rank) % 3)
                                   : s + 50 * kMs + spec.end_jitter;
    r->OnEvent(e);
    if (spec.enqueue_ns > 0) {
      e.function_id = kernel;
      e.track_id = 1;
      e.flags = kEventFlagOnDevice;
      e.start_ns = s + 11 * kMs;
      e.end_ns = s + 50 * kMs + spec.end_jitter;
      r->OnEvent(e);
    }
  }
  return r;
}

std::vector<PerfettoRankAlignment> AlignmentOf(const std::vector<RankSpec>& specs) {
  std::vector<std::unique_ptr<RankTrace>> ranks;
  PerfettoWriter writer;
  for (const RankSpec& spec : specs) {
    ranks.push_back(MakeAlignedRank(spec));
    writer.AddRank(ranks.back().get());
  }
  return writer.EstimateAlignment();
}

TEST(PerfettoWriterTest, AWindowCutByASkewedClockIsAlignedOnTheSameCalls) {
  // Rank 1's clock is 5 ms ahead and its trace starts a step earlier (a live window's span
  // read on its clock caught one more all_reduce): its n-th all_reduce is rank 0's (n-1)-th.
  const std::vector<PerfettoRankAlignment> a =
      AlignmentOf({{.rank = 0, .host = "node-a", .first_step = 1},
                   {.rank = 1, .host = "node-b", .clock = kSkew, .first_step = 0}});
  ASSERT_EQ(a.size(), 2u);
  EXPECT_EQ(a[1].offset_ns, kSkew);
  EXPECT_EQ(a[1].spread_ns, 0);
  EXPECT_EQ(a[1].sync_points, static_cast<size_t>(kSteps - 1));
  EXPECT_EQ(a[1].shifted_keys, 1u);
}

TEST(PerfettoWriterTest, DeviceSideCollectiveEndsWinOverAsynchronousHostEnqueues) {
  // The host-side all_reduce ends at enqueue (1-3 ms after its start, not in step across
  // ranks); the NCCL kernel ends when every rank's data is in.
  const std::vector<PerfettoRankAlignment> a =
      AlignmentOf({{.rank = 0, .host = "node-a", .enqueue_ns = kMs},
                   {.rank = 1, .host = "node-b", .clock = kSkew, .enqueue_ns = kMs}});
  ASSERT_EQ(a.size(), 2u);
  EXPECT_EQ(a[1].offset_ns, kSkew);
  EXPECT_TRUE(a[1].device_side);
  EXPECT_EQ(a[1].spread_ns, 0);
}

TEST(PerfettoWriterTest, RanksOfOneHostShareTheirHostsClock) {
  // node-b's clock is 5 ms ahead; each rank's collective ends jitter a little. Ranks on one
  // host read one clock: one offset per host, the reference's host exactly 0.
  auto r0 = MakeAlignedRank({.rank = 0, .host = "node-a"});
  auto r1 = MakeAlignedRank({.rank = 1, .host = "node-a", .end_jitter = kMs / 4});
  auto r2 = MakeAlignedRank({.rank = 2, .host = "node-b", .clock = kSkew, .end_jitter = kMs / 5});
  auto r3 = MakeAlignedRank({.rank = 3, .host = "node-b", .clock = kSkew});
  auto r4 = MakeAlignedRank({.rank = 4, .host = "node-b", .clock = kSkew, .end_jitter = -kMs / 10});
  PerfettoWriter writer;
  for (RankTrace* r : {r0.get(), r1.get(), r2.get(), r3.get(), r4.get()}) writer.AddRank(r);
  const std::vector<PerfettoRankAlignment> a = writer.EstimateAlignment();
  ASSERT_EQ(a.size(), 5u);
  EXPECT_EQ(a[1].offset_ns, 0);
  EXPECT_EQ(a[1].host_ranks, 2u);
  for (size_t i = 2; i < 5; ++i) {
    EXPECT_EQ(a[i].offset_ns, kSkew) << "rank " << i;
    EXPECT_EQ(a[i].host_ranks, 3u);
  }
  // The export says so, and aligns every rank of node-b by the same offset.
  const json doc = Export(&writer, Diagnosis{});
  EXPECT_EQ(Metadata(doc, "perftracker_rank", 3)["clock_offset_ns"], kSkew);
  EXPECT_EQ(Metadata(doc, "perftracker_rank", 3)["host_ranks_pooled"], 3);
  EXPECT_NE(Metadata(doc, "process_labels", 3)["labels"].get<std::string>().find(
                "shared by its host's 3 ranks"),
            std::string::npos);
}

// --- Round trip of real traces through perftracker's own importer. ---

struct KindCounts {
  std::array<uint64_t, kNumEventKinds> count{};
  std::array<int64_t, kNumEventKinds> total_ns{};
  bool operator==(const KindCounts&) const = default;
};

KindCounts CountsOf(const RankTrace& r) {
  KindCounts c;
  for (const Event& e : r.events()) {
    ++c.count[static_cast<size_t>(e.kind)];
    c.total_ns[static_cast<size_t>(e.kind)] += e.duration_ns();
  }
  return c;
}

void ExpectRoundTrip(const std::vector<std::string>& files) {
  std::vector<std::unique_ptr<RankTrace>> ranks;
  for (const std::string& f : files) {
    auto r = std::make_unique<RankTrace>();
    StatusOr<KinetoTraceInfo> info = ImportKinetoFile(f, r->functions(), r.get());
    ASSERT_TRUE(info.ok()) << info.status().message();
    r->rank = info->rank;
    r->source = f;
    ranks.push_back(std::move(r));
  }
  PerfettoWriter writer;
  for (const auto& r : ranks) writer.AddRank(r.get());
  // The diagnosis drawn on it (annotations, waits, arrows) is perftracker's own category,
  // which the importer skips: the re-imported events are the trace's, not more.
  Diagnosis d;
  Finding f;
  f.code = "PT-STRAGGLER-COMPUTE";
  f.title = "synthetic";
  f.workers = {ranks.back()->rank};
  for (const auto& r : ranks) {
    if (r != ranks.back()) f.victims.push_back(r->rank);
  }
  for (const Event& e : ranks.back()->events()) {
    if (e.kind == EventKind::kTorchOp) {
      f.function = std::string(ranks.back()->functions()->Get(e.function_id).name);
      break;
    }
  }
  d.findings.push_back(f);
  const json doc = Export(&writer, d);
  EXPECT_EQ(writer.stats().events_aggregated, 0u);
  EXPECT_GT(writer.stats().annotations, 0u);
  EXPECT_GT(writer.stats().flows, 0u);

  std::map<int, json> per_pid;
  for (const json& e : doc["traceEvents"]) per_pid[e["pid"].get<int>()].push_back(e);
  ASSERT_EQ(per_pid.size(), ranks.size());
  for (const auto& r : ranks) {
    SCOPED_TRACE(r->source);
    const std::string text = json{{"traceEvents", per_pid[r->rank]}}.dump();
    RankTrace back;
    KinetoImportOptions options;
    options.rank = r->rank;
    KinetoImporter importer("exported rank " + std::to_string(r->rank), back.functions(), &back,
                            options);
    ASSERT_TRUE(importer.Parse(text.data(), text.size()).ok());
    StatusOr<KinetoTraceInfo> info = importer.Finish();
    ASSERT_TRUE(info.ok()) << info.status().message();
    EXPECT_EQ(info->events_malformed, 0u);
    EXPECT_EQ(back.events().size(), r->events().size());
    // The same events of each kind, and the same time but for what was clipped so that the
    // slices of each track nest (the rank's perftracker_rank metadata says how much).
    const KindCounts got = CountsOf(back);
    const KindCounts want = CountsOf(*r);
    EXPECT_EQ(got.count, want.count) << "event counts per kind differ";
    int64_t clipped = 0;
    for (size_t k = 0; k < kNumEventKinds; ++k) {
      EXPECT_LE(got.total_ns[k], want.total_ns[k]) << "kind " << k;
      clipped += want.total_ns[k] - got.total_ns[k];
    }
    EXPECT_EQ(clipped, Metadata(doc, "perftracker_rank", r->rank)["clipped_ns"].get<int64_t>());
    EXPECT_EQ(back.tracks().size(), r->tracks().size());
  }
}

std::string SourceDir() {
  const char* src = std::getenv("PERFTRACKER_SOURCE_DIR");
  return src != nullptr ? src : ".";
}

TEST(PerfettoWriterTest, TheBundledStragglerExampleRoundTripsThroughTheImporter) {
  const std::string dir = SourceDir() + "/examples/straggler";
  std::vector<std::string> files;
  for (int r = 0; r < 4; ++r) files.push_back(dir + "/rank" + std::to_string(r) + ".json.gz");
  for (const auto& f : files) ASSERT_TRUE(fs::exists(f)) << f;
  ExpectRoundTrip(files);
}

TEST(PerfettoWriterTest, ARealGpuTraceSetRoundTripsThroughTheImporter) {
  const std::string dir = SourceDir() + "/../shared/data/kineto";
  const std::vector<std::string> files = {dir + "/gpu128_rank-0.json.gz",
                                          dir + "/gpu128_rank-1.json.gz"};
  for (const auto& f : files) {
    if (!fs::exists(f)) GTEST_SKIP() << f << " is absent";
  }
  ExpectRoundTrip(files);
}

}  // namespace
}  // namespace perftracker
