#include "perftracker/wire/summary_codec.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "perftracker.pb.h"
#include "perftracker/summary/data_quality_counters.h"
#include "perftracker/wire/diagnosis_codec.h"

namespace perftracker {
namespace {

WorkerSummary SampleSummary() {
  WorkerSummary s;
  s.rank = 17;
  s.host = "node-3";
  s.source = "/traces/rank17.json.gz";
  s.window_start_ns = 1'682'725'898'236'567'000;
  s.window_end_ns = s.window_start_ns + 2'500'000'000;
  s.has_device = true;
  s.iterations.push_back({s.window_start_ns, 1'000'000, 600'000, 200'000, 50'000, 10'000, 90'000});
  s.iterations.push_back({s.window_start_ns + 1'000'000, 1'100'000, 1, 2, 3, 4, 5});

  FunctionSummary root;
  root.key = "annotation:compute_block";
  root.name = "compute_block";
  root.kind = EventKind::kUserAnnotation;
  root.count = 2;
  root.total_ns = 900'000;
  root.self_ns = 100'000;
  root.critical_ns = 50'000;
  root.idle_gap_before_ns = 12;
  root.durations.Add(400'000);
  root.durations.Add(500'000);
  root.metrics.push_back({Metric::kCpuUtilization, 0.9375, 0.0625});
  s.functions.push_back(root);

  FunctionSummary mm;
  mm.key = "annotation:compute_block > torch_op:aten::mm";
  mm.name = "aten::mm";
  mm.kind = EventKind::kTorchOp;
  mm.parent = 0;
  mm.count = 1000;
  mm.total_ns = 123'456'789;
  mm.self_ns = 100'000'000;
  mm.critical_ns = 3;
  for (int i = 1; i <= 1000; ++i) mm.durations.Add(1000.0 * i);
  mm.durations.Add(0);
  mm.onset_iteration = 1;  // its time steps up from the second iteration on
  mm.onset_ns = 77'000'000;
  s.functions.push_back(mm);

  FunctionSummary nccl;
  nccl.key = "annotation:compute_block > collective:nccl:all_reduce";
  nccl.name = "nccl:all_reduce";
  nccl.kind = EventKind::kCollective;
  nccl.parent = 0;
  nccl.count = 3;
  nccl.bytes = 3ull << 30;
  nccl.total_ns = 21'000'000;
  nccl.slack_after_ns = 9'000'000;  // a pipeline receive waited after two of its calls
  nccl.durations.Add(7e6, 3);
  nccl.metrics.push_back({Metric::kNicTxBytesPerSec, 8589934592.0, 268435456.0});
  nccl.metrics.push_back({Metric::kGpuSmActivity, 0.125, 0.0});
  s.functions.push_back(nccl);

  // Same leaf name as function 1 under a different parent: shares the string table entry.
  FunctionSummary mm2 = mm;
  mm2.key = "torch_op:aten::mm";
  mm2.parent = FunctionSummary::kNoParent;
  mm2.event_flags = kEventFlagDeviceToDevice;
  mm2.enclosing_op = 1;  // its calls ran inside the other aten::mm's (an op in an op)
  s.functions.push_back(mm2);

  // A key that does not follow the parent rule (hand-built): must travel explicitly.
  FunctionSummary odd;
  odd.key = "custom key that is not derivable";
  odd.name = "odd";
  odd.kind = EventKind::kGc;
  odd.parent = 5;  // refers forward: allowed when the key is explicit
  s.functions.push_back(odd);
  FunctionSummary tail;
  tail.key = "gc:tail";
  tail.name = "tail";
  tail.kind = EventKind::kGc;
  s.functions.push_back(tail);

  s.stats.events = 1'000'000;
  s.stats.dropped_events = 5;
  s.stats.out_of_order_events = 7;
  s.stats.malformed_events = 1;
  s.stats.deep_events = 3;
  s.stats.names_truncated = 4;
  s.stats.invalid_function_events = 6;
  s.stats.metric_samples_process_gone = 8;
  s.stats.metric_reads_failed = 9;
  s.stats.metric_readings_truncated = 2;
  s.stats.gpu_untraced_ms = 11;
  s.stats.first_problem = "end before start: event on track 3";
  s.worker_metrics.push_back({Metric::kRunQueueDelayFraction, 0.375, 0.125});
  s.worker_metrics.push_back({Metric::kInvoluntaryCtxSwitchesPerSec, 1536.0, 12.5});
  // nccl:all_reduce (function 2) ran in a group inside a host and in one across hosts.
  s.collective_groups.groups.push_back({"1", {16, 17}, 2, "nccl"});
  s.collective_groups.groups.push_back({"dp", {1, 17, 33}, 64, "cpu:gloo,cuda:nccl"});  // cut
  s.collective_groups.calls.push_back({2, 0, 3, 12'000'000, 3u << 20});
  s.collective_groups.calls.push_back({2, 1, 1, 9'000'000, 5u << 20});
  return s;
}

void ExpectSketchEq(const QuantileSketch& a, const QuantileSketch& b) {
  EXPECT_EQ(a.count(), b.count());
  EXPECT_EQ(a.offset(), b.offset());
  EXPECT_TRUE(std::ranges::equal(a.buckets(), b.buckets()));
  EXPECT_EQ(a.zero_count(), b.zero_count());
  EXPECT_EQ(a.sum(), b.sum());
  EXPECT_EQ(a.min(), b.min());
  EXPECT_EQ(a.max(), b.max());
}

void ExpectSummaryEq(const WorkerSummary& a, const WorkerSummary& b) {
  EXPECT_EQ(a.rank, b.rank);
  EXPECT_EQ(a.host, b.host);
  EXPECT_EQ(a.source, b.source);
  EXPECT_EQ(a.window_start_ns, b.window_start_ns);
  EXPECT_EQ(a.window_end_ns, b.window_end_ns);
  EXPECT_EQ(a.has_device, b.has_device);
  ASSERT_EQ(a.iterations.size(), b.iterations.size());
  for (size_t i = 0; i < a.iterations.size(); ++i) {
    const auto& x = a.iterations[i];
    const auto& y = b.iterations[i];
    EXPECT_EQ(x.start_ns, y.start_ns);
    EXPECT_EQ(x.duration_ns, y.duration_ns);
    EXPECT_EQ(x.compute_ns, y.compute_ns);
    EXPECT_EQ(x.communication_ns, y.communication_ns);
    EXPECT_EQ(x.wait_ns, y.wait_ns);
    EXPECT_EQ(x.data_ns, y.data_ns);
    EXPECT_EQ(x.host_only_ns, y.host_only_ns);
  }
  ASSERT_EQ(a.functions.size(), b.functions.size());
  for (size_t i = 0; i < a.functions.size(); ++i) {
    SCOPED_TRACE("function " + std::to_string(i));
    const auto& x = a.functions[i];
    const auto& y = b.functions[i];
    EXPECT_EQ(a.Key(i), b.Key(i));
    EXPECT_EQ(x.name, y.name);
    EXPECT_EQ(x.kind, y.kind);
    EXPECT_EQ(x.parent, y.parent);
    EXPECT_EQ(x.count, y.count);
    EXPECT_EQ(x.total_ns, y.total_ns);
    EXPECT_EQ(x.self_ns, y.self_ns);
    EXPECT_EQ(x.critical_ns, y.critical_ns);
    EXPECT_EQ(x.idle_gap_before_ns, y.idle_gap_before_ns);
    EXPECT_EQ(x.bytes, y.bytes);
    EXPECT_EQ(x.event_flags, y.event_flags);
    EXPECT_EQ(x.onset_iteration, y.onset_iteration);
    EXPECT_EQ(x.onset_ns, y.onset_ns);
    EXPECT_EQ(x.slack_after_ns, y.slack_after_ns);
    EXPECT_EQ(x.enclosing_op, y.enclosing_op);
    ExpectSketchEq(x.durations, y.durations);
    ASSERT_EQ(x.metrics.size(), y.metrics.size());
    for (size_t m = 0; m < x.metrics.size(); ++m) {
      EXPECT_EQ(x.metrics[m].metric, y.metrics[m].metric);
      EXPECT_EQ(x.metrics[m].mean, y.metrics[m].mean);
      EXPECT_EQ(x.metrics[m].stddev, y.metrics[m].stddev);
    }
  }
  EXPECT_EQ(a.stats.events, b.stats.events);
  EXPECT_EQ(a.stats.dropped_events, b.stats.dropped_events);
  EXPECT_EQ(a.stats.out_of_order_events, b.stats.out_of_order_events);
  EXPECT_EQ(a.stats.malformed_events, b.stats.malformed_events);
  EXPECT_EQ(a.stats.deep_events, b.stats.deep_events);
  EXPECT_EQ(a.stats.names_truncated, b.stats.names_truncated);
  for (const DataQualityCounter& c : kDataQualityCounters) {
    EXPECT_EQ(a.stats.*c.count, b.stats.*c.count) << c.name;
  }
  EXPECT_EQ(a.stats.first_problem, b.stats.first_problem);
  ASSERT_EQ(a.worker_metrics.size(), b.worker_metrics.size());
  for (size_t m = 0; m < a.worker_metrics.size(); ++m) {
    EXPECT_EQ(a.worker_metrics[m].metric, b.worker_metrics[m].metric);
    EXPECT_EQ(a.worker_metrics[m].mean, b.worker_metrics[m].mean);
    EXPECT_EQ(a.worker_metrics[m].stddev, b.worker_metrics[m].stddev);
  }
  const CollectiveGroups& ga = a.collective_groups;
  const CollectiveGroups& gb = b.collective_groups;
  ASSERT_EQ(ga.groups.size(), gb.groups.size());
  for (size_t i = 0; i < ga.groups.size(); ++i) {
    EXPECT_EQ(ga.groups[i].name, gb.groups[i].name);
    EXPECT_EQ(ga.groups[i].ranks, gb.groups[i].ranks);
    EXPECT_EQ(ga.groups[i].size, gb.groups[i].size);
    EXPECT_EQ(ga.groups[i].backend, gb.groups[i].backend);
  }
  ASSERT_EQ(ga.calls.size(), gb.calls.size());
  for (size_t i = 0; i < ga.calls.size(); ++i) {
    EXPECT_EQ(ga.calls[i].function, gb.calls[i].function);
    EXPECT_EQ(ga.calls[i].group, gb.calls[i].group);
    EXPECT_EQ(ga.calls[i].count, gb.calls[i].count);
    EXPECT_EQ(ga.calls[i].total_ns, gb.calls[i].total_ns);
    EXPECT_EQ(ga.calls[i].bytes, gb.calls[i].bytes);
  }
}

TEST(SummaryCodecTest, WorkerSummaryRoundTripsEveryField) {
  const WorkerSummary s = SampleSummary();
  const std::string bytes = EncodeWorkerSummary(s);
  auto decoded = DecodeWorkerSummary(bytes);
  ASSERT_TRUE(decoded.ok()) << decoded.status().message();
  ExpectSummaryEq(s, *decoded);
  // Derivable keys are not sent: only the hand-built one is in the bytes.
  EXPECT_EQ(bytes.find("compute_block > torch_op"), std::string::npos);
  EXPECT_NE(bytes.find("custom key that is not derivable"), std::string::npos);
}

// The communication threads' run-queue wait and turns (issue 11 §3) travel as worker metrics
// with ids of their own; an older server leaves them out and counts them (the test below), an
// older collector's summary has none (the localizer then judges the training threads alone).
TEST(SummaryCodecTest, CommunicationThreadMetricsTravelAsWorkerMetrics) {
  // Wire ids are the enum's values: they never change once sent.
  static_assert(static_cast<int>(Metric::kCommThreadRunQueueFraction) == 29);
  static_assert(static_cast<int>(Metric::kCommThreadTimeslicesPerSec) == 30);
  WorkerSummary s = SampleSummary();
  s.worker_metrics.push_back({Metric::kCommThreadRunQueueFraction, 0.2595f, 0.031f});
  s.worker_metrics.push_back({Metric::kCommThreadTimeslicesPerSec, 150.0f, 12.5f});
  UnknownValues unknown;
  auto decoded = DecodeWorkerSummary(EncodeWorkerSummary(s), &unknown);
  ASSERT_TRUE(decoded.ok()) << decoded.status().message();
  ExpectSummaryEq(s, *decoded);
  EXPECT_EQ(unknown.total(), 0u) << unknown.Describe();
  EXPECT_EQ(MetricName(Metric::kCommThreadRunQueueFraction),
            "comm_thread_run_queue_delay_fraction");
  EXPECT_EQ(MetricName(Metric::kCommThreadTimeslicesPerSec), "comm_thread_timeslices_per_s");
}

// An older collector's summary has no process groups: it decodes with none (its collectives'
// groups are not known, and the localizer treats them as before).
TEST(SummaryCodecTest, ASummaryWithoutProcessGroupsDecodesWithNone) {
  WorkerSummary s = SampleSummary();
  s.collective_groups = {};
  auto decoded = DecodeWorkerSummary(EncodeWorkerSummary(s));
  ASSERT_TRUE(decoded.ok()) << decoded.status().message();
  EXPECT_TRUE(decoded->collective_groups.empty());
  EXPECT_TRUE(decoded->collective_groups.groups.empty());
}

// A process group's backend is a field of its own (ProcessGroup.backend); a summary older
// than the field (its live collector named the group "0 (gloo)") decodes with the backend not
// known and the name as it was, which the localizer still reads (hardware_findings.cc).
TEST(SummaryCodecTest, AProcessGroupsBackendTravelsAsAFieldOfItsOwn) {
  WorkerSummary s = SampleSummary();
  auto decoded = DecodeWorkerSummary(EncodeWorkerSummary(s));
  ASSERT_TRUE(decoded.ok()) << decoded.status().message();
  ASSERT_EQ(decoded->collective_groups.groups.size(), 2u);
  EXPECT_EQ(decoded->collective_groups.groups[0].backend, "nccl");
  EXPECT_EQ(decoded->collective_groups.groups[1].backend, "cpu:gloo,cuda:nccl");

  s.collective_groups.groups[0].name = "0 (gloo)";  // what an older collector sent
  s.collective_groups.groups[0].backend.clear();
  decoded = DecodeWorkerSummary(EncodeWorkerSummary(s));
  ASSERT_TRUE(decoded.ok()) << decoded.status().message();
  EXPECT_EQ(decoded->collective_groups.groups[0].name, "0 (gloo)");
  EXPECT_EQ(decoded->collective_groups.groups[0].backend, "");
}

TEST(SummaryCodecTest, ImplicitKeysTravelAsParentAndLeafAndStayImplicit) {
  // What the summarizer writes: no key where it derives from parent, kind and name.
  const WorkerSummary given = SampleSummary();
  WorkerSummary s = given;
  for (size_t i = 0; i < 4; ++i) s.functions[i].key = {};
  for (size_t i = 0; i < s.functions.size(); ++i) {
    EXPECT_EQ(s.Key(i), given.Key(i));
    EXPECT_TRUE(s.KeyIs(i, given.functions[i].key));
    EXPECT_FALSE(s.KeyIs(i, given.functions[i].key + "x"));
    EXPECT_EQ(s.KeySize(i), given.functions[i].key.size());
  }
  const std::string bytes = EncodeWorkerSummary(s);
  EXPECT_EQ(bytes, EncodeWorkerSummary(given));
  auto decoded = DecodeWorkerSummary(bytes);
  ASSERT_TRUE(decoded.ok()) << decoded.status().message();
  ExpectSummaryEq(given, *decoded);
  EXPECT_TRUE(decoded->functions[1].key.empty());  // not rebuilt: derived on demand
  EXPECT_EQ(decoded->functions[4].key, "custom key that is not derivable");
}

TEST(SummaryCodecTest, LongKernelNamesTravelDeflated) {
  WorkerSummary s;
  s.rank = 3;
  for (int i = 0; i < 60; ++i) {
    FunctionSummary k;
    k.name =
        "void at::native::vectorized_elementwise_kernel<4, at::native::BinaryFunctor<float, "
        "float, float, at::native::binary_internal::MulFunctor<float> >, at::detail::Array"
        "<char*, 3> >(int, at::native::BinaryFunctor<float>, at::detail::Array<char*, 3>)#" +
        std::to_string(i);
    k.kind = EventKind::kGpuKernel;
    k.key = "kernel:" + k.name;
    k.count = static_cast<uint64_t>(i);
    k.durations.Add(1000.5 * (i + 1));  // not integral: sum/min/max travel as doubles
    s.functions.push_back(k);
  }
  size_t names = 0;
  for (const auto& f : s.functions) names += f.name.size();
  const std::string bytes = EncodeWorkerSummary(s);
  EXPECT_LT(bytes.size(), names / 4) << "names alone are " << names << " bytes";
  auto decoded = DecodeWorkerSummary(bytes);
  ASSERT_TRUE(decoded.ok()) << decoded.status().message();
  ExpectSummaryEq(s, *decoded);

  // Damage inside the deflated table is reported as such.
  const size_t at = bytes.find("x\xda");  // zlib header at best compression
  ASSERT_NE(at, std::string::npos);
  std::string damaged = bytes;
  for (size_t i = at + 10; i < at + 40 && i < damaged.size(); ++i) damaged[i] ^= 0x5a;
  auto bad = DecodeWorkerSummary(damaged);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kDataLoss);
}

TEST(SummaryCodecTest, EmptySummaryRoundTrips) {
  WorkerSummary s;
  auto decoded = DecodeWorkerSummary(EncodeWorkerSummary(s));
  ASSERT_TRUE(decoded.ok()) << decoded.status().message();
  ExpectSummaryEq(s, *decoded);
}

TEST(SummaryCodecTest, DiagnosisRoundTripsEveryField) {
  Diagnosis d;
  d.num_workers = 128;
  d.median_iteration_ns = 1.25e8;
  Finding f;
  f.code = "PT-STRAGGLER-FUNCTION";
  f.category = FindingCategory::kGpuHardware;
  f.title = "rank 3 runs aten::mm 2.1x slower than its peers";
  f.workers = {3, -1};
  f.victims = {0, 1, 2};
  f.function = "aten::mm";
  f.function_key = "annotation:block > torch_op:aten::mm";
  f.resource = "GPU";
  f.lost_ns_per_iteration = 4.2e7;
  f.lost_share = 0.33;
  f.material = true;
  f.evidence = {{"p50 on rank 3", "41.2 ms"}, {"median p50 of peers", "19.6 ms"}};
  d.findings.push_back(f);
  d.findings.push_back(Finding{});
  d.notes = {"rank 7: no trace", "2 events out of order"};

  auto decoded = DecodeDiagnosis(EncodeDiagnosis(d));
  ASSERT_TRUE(decoded.ok()) << decoded.status().message();
  EXPECT_EQ(decoded->num_workers, d.num_workers);
  EXPECT_EQ(decoded->median_iteration_ns, d.median_iteration_ns);
  EXPECT_EQ(decoded->notes, d.notes);
  ASSERT_EQ(decoded->findings.size(), 2u);
  const Finding& g = decoded->findings[0];
  EXPECT_EQ(g.code, f.code);
  EXPECT_EQ(g.category, f.category);
  EXPECT_EQ(g.title, f.title);
  EXPECT_EQ(g.workers, f.workers);
  EXPECT_EQ(g.victims, f.victims);
  EXPECT_EQ(g.function, f.function);
  EXPECT_EQ(g.function_key, f.function_key);
  EXPECT_EQ(g.resource, f.resource);
  EXPECT_EQ(g.lost_ns_per_iteration, f.lost_ns_per_iteration);
  EXPECT_EQ(g.lost_share, f.lost_share);
  EXPECT_EQ(g.material, f.material);
  ASSERT_EQ(g.evidence.size(), 2u);
  EXPECT_EQ(g.evidence[1].label, f.evidence[1].label);
  EXPECT_EQ(g.evidence[1].value, f.evidence[1].value);
  EXPECT_TRUE(decoded->has_material_finding());
}

TEST(SummaryCodecTest, TruncatedMessagesAreRejectedWithAClearMessage) {
  const std::string bytes = EncodeWorkerSummary(SampleSummary());
  size_t rejected = 0;
  for (size_t n = 0; n < bytes.size(); ++n) {
    auto decoded = DecodeWorkerSummary(std::string_view(bytes).substr(0, n));
    if (!decoded.ok()) {
      ++rejected;
      EXPECT_EQ(decoded.status().code(), StatusCode::kDataLoss);
      EXPECT_NE(decoded.status().message().find("WorkerSummary"), std::string::npos)
          << decoded.status().message();
    }
  }
  // A protobuf prefix that ends on a field boundary is itself a valid (smaller) message;
  // most cuts fall inside a field.
  EXPECT_GT(rejected, bytes.size() / 2);
  auto cut = DecodeWorkerSummary(std::string_view(bytes).substr(0, bytes.size() - 1));
  EXPECT_FALSE(cut.ok());
  EXPECT_NE(cut.status().message().find("protobuf parsing failed"), std::string::npos)
      << cut.status().message();
}

TEST(SummaryCodecTest, CorruptedAndRandomBytesNeverCrash) {
  const std::string bytes = EncodeWorkerSummary(SampleSummary());
  std::mt19937 rng(42);
  size_t ok = 0;
  for (int trial = 0; trial < 20000; ++trial) {
    std::string mutated = bytes;
    const int flips = 1 + static_cast<int>(rng() % 4);
    for (int i = 0; i < flips; ++i) {
      mutated[rng() % mutated.size()] = static_cast<char>(rng());
    }
    auto decoded = DecodeWorkerSummary(mutated);
    if (decoded.ok()) {
      ++ok;
      // Whatever decodes satisfies the invariants later layers rely on.
      const auto& fs = decoded->functions;
      for (size_t i = 0; i < fs.size(); ++i) {
        if (fs[i].parent != FunctionSummary::kNoParent) {
          ASSERT_LT(fs[i].parent, fs.size());
        }
        ASSERT_LT(static_cast<int>(fs[i].kind), kNumEventKinds);
      }
    } else {
      EXPECT_FALSE(decoded.status().message().empty());
    }
  }
  for (int trial = 0; trial < 5000; ++trial) {
    std::string random(rng() % 512, '\0');
    for (char& c : random) c = static_cast<char>(rng());
    (void)DecodeWorkerSummary(random);
    (void)DecodeDiagnosis(random);
  }
  SUCCEED() << ok << " mutated messages still decoded";
}

TEST(SummaryCodecTest, SemanticCorruptionIsNamed) {
  WorkerSummary s = SampleSummary();
  s.functions[1].parent = 99;  // out of range
  auto bad_parent = DecodeWorkerSummary(EncodeWorkerSummary(s));
  ASSERT_FALSE(bad_parent.ok());
  EXPECT_NE(bad_parent.status().message().find("rank 17, function 1 (aten::mm): parent index 99"),
            std::string::npos)
      << bad_parent.status().message();

  s = SampleSummary();
  s.functions[1].onset_iteration = 2;  // the summary has 2 iterations
  auto bad_onset = DecodeWorkerSummary(EncodeWorkerSummary(s));
  ASSERT_FALSE(bad_onset.ok());
  EXPECT_NE(bad_onset.status().message().find("(aten::mm): onset at iteration 2 of 2"),
            std::string::npos)
      << bad_onset.status().message();

  s = SampleSummary();
  s.functions[2].slack_after_ns = s.functions[2].total_ns + 1;  // more than its time
  auto bad_slack = DecodeWorkerSummary(EncodeWorkerSummary(s));
  ASSERT_FALSE(bad_slack.ok());
  EXPECT_NE(bad_slack.status().message().find("(nccl:all_reduce): 21000001 ns followed by a "
                                              "receive wait, of 21000000 ns in all"),
            std::string::npos)
      << bad_slack.status().message();

  s = SampleSummary();
  s.functions[3].enclosing_op = 3;  // itself
  auto bad_enclosing = DecodeWorkerSummary(EncodeWorkerSummary(s));
  ASSERT_FALSE(bad_enclosing.ok());
  EXPECT_NE(bad_enclosing.status().message().find(
                "function 3 (aten::mm): enclosing op index 3 is out of range"),
            std::string::npos)
      << bad_enclosing.status().message();

  s = SampleSummary();
  s.collective_groups.calls[1].group = 2;  // the summary has 2 groups
  auto bad_group = DecodeWorkerSummary(EncodeWorkerSummary(s));
  ASSERT_FALSE(bad_group.ok());
  EXPECT_NE(bad_group.status().message().find("rank 17: a collective's process group names "
                                              "function 2 or group 2, which the summary lacks"),
            std::string::npos)
      << bad_group.status().message();

  s = SampleSummary();
  s.window_end_ns = s.window_start_ns - 1;
  EXPECT_FALSE(DecodeWorkerSummary(EncodeWorkerSummary(s)).ok());

  // A left-out function's subtree does not hide a bad parent index below it.
  s = SampleSummary();
  s.functions[0].kind = static_cast<EventKind>(200);
  s.functions[1].parent = 99;
  EXPECT_FALSE(DecodeWorkerSummary(EncodeWorkerSummary(s)).ok());

  EXPECT_FALSE(DecodeWorkerSummary(std::string(kMaxWireMessageBytes + 1, '\0')).ok());
}

// Wire forward compatibility (docs/server.md, "Versions"): collectors and servers are
// upgraded at different times, and an older server once refused a whole rank's summary for
// one metric id it did not know (steal time, metric 28, from a newer collector): that rank
// was missing from the window's diagnosis. What a newer collector may add is left out and
// counted; the rest of the summary is read as it is.
TEST(SummaryCodecTest, AMetricThisServerDoesNotKnowIsLeftOutAndCounted) {
  const WorkerSummary known = SampleSummary();
  WorkerSummary s = known;
  s.functions[0].metrics.push_back({static_cast<Metric>(999), 0.5, 0.25});
  UnknownValues unknown;
  auto decoded = DecodeWorkerSummary(EncodeWorkerSummary(s), &unknown);
  ASSERT_TRUE(decoded.ok()) << decoded.status().message();
  ExpectSummaryEq(known, *decoded);  // the known metric's level kept, exactly
  EXPECT_EQ(unknown.metrics, 1u);
  EXPECT_EQ(unknown.total(), 1u);
  EXPECT_EQ(unknown.first, "function 0 (compute_block): metric 999");
  EXPECT_EQ(unknown.Describe(), "1 metric value");

  s = known;
  s.worker_metrics.insert(s.worker_metrics.begin() + 1, {static_cast<Metric>(777), 1.0, 0.0});
  s.functions[2].metrics.push_back({static_cast<Metric>(kNumMetrics), 2.0, 0.0});
  decoded = DecodeWorkerSummary(EncodeWorkerSummary(s), &unknown);
  ASSERT_TRUE(decoded.ok()) << decoded.status().message();
  ExpectSummaryEq(known, *decoded);
  EXPECT_EQ(unknown.metrics, 2u);
  EXPECT_EQ(unknown.first, "function 2 (nccl:all_reduce): metric " + std::to_string(kNumMetrics));
  EXPECT_EQ(unknown.Describe(), "2 metric values");

  // Without a counter to fill, the same summary decodes all the same.
  EXPECT_TRUE(DecodeWorkerSummary(EncodeWorkerSummary(s)).ok());
  // A summary with nothing unknown says so.
  ASSERT_TRUE(DecodeWorkerSummary(EncodeWorkerSummary(known), &unknown).ok());
  EXPECT_EQ(unknown.total(), 0u);
  EXPECT_EQ(unknown.Describe(), "");
}

// Event flag bits this server does not know (a newer collector's flag, or any bit above the
// byte a FunctionSummary keeps) are left out and counted; the function's known bits are kept.
// Before, the value reached the localizer unmasked (the rules test single bits, and a bit of
// a newer meaning would read as one of a later version of theirs) and bits above 8 were cut
// without a word.
TEST(SummaryCodecTest, EventFlagsThisServerDoesNotKnowAreLeftOutAndCounted) {
  const WorkerSummary known = SampleSummary();
  v1::WorkerSummary m;
  ASSERT_TRUE(m.ParseFromString(EncodeWorkerSummary(known)));
  ASSERT_EQ(m.functions(3).event_flags(), kEventFlagDeviceToDevice);  // mm2
  m.mutable_functions(3)->set_event_flags(kEventFlagDeviceToDevice | 0x40 | 0x200);
  m.mutable_functions(1)->set_event_flags(0x100);  // aten::mm, no known flag
  UnknownValues unknown;
  auto decoded = DecodeWorkerSummary(m.SerializeAsString(), &unknown);
  ASSERT_TRUE(decoded.ok()) << decoded.status().message();
  ExpectSummaryEq(known, *decoded);  // mm2's DtoD kept, nothing else set
  EXPECT_EQ(unknown.event_flags, 2u);
  EXPECT_EQ(unknown.total(), 2u);
  EXPECT_EQ(unknown.first, "function 1 (aten::mm): event flags 0x100 (bits 0x100 not known)");
  EXPECT_EQ(unknown.Describe(), "2 event flag values");

  // Every bit a summary keeps is known: a summary with all of them counts nothing.
  WorkerSummary all = known;
  all.functions[3].event_flags = kSummaryEventFlags;
  decoded = DecodeWorkerSummary(EncodeWorkerSummary(all), &unknown);
  ASSERT_TRUE(decoded.ok()) << decoded.status().message();
  EXPECT_EQ(decoded->functions[3].event_flags, kSummaryEventFlags);
  EXPECT_EQ(unknown.total(), 0u);
}

// A function of an event kind this server does not know is left out with the functions
// below it (their keys run through it), not given a kind it may not have: its time stays in
// its parent's total and in the iterations' breakdown. The rest is renumbered.
TEST(SummaryCodecTest, AFunctionOfAnEventKindThisServerDoesNotKnowIsLeftOutWithItsSubtree) {
  WorkerSummary s = SampleSummary();
  s.functions[2].kind = static_cast<EventKind>(200);  // nccl:all_reduce, a leaf
  UnknownValues unknown;
  auto decoded = DecodeWorkerSummary(EncodeWorkerSummary(s), &unknown);
  ASSERT_TRUE(decoded.ok()) << decoded.status().message();
  WorkerSummary expected = SampleSummary();
  expected.functions.erase(expected.functions.begin() + 2);
  expected.functions[3].parent = 4;          // odd's parent, tail, moved up one
  expected.collective_groups.calls.clear();  // both were all_reduce's
  ExpectSummaryEq(expected, *decoded);
  EXPECT_EQ(unknown.functions, 1u);
  EXPECT_EQ(unknown.first, "function 2 (nccl:all_reduce): event kind 200");

  s = SampleSummary();
  s.functions[0].kind = static_cast<EventKind>(200);  // compute_block, above aten::mm and nccl
  decoded = DecodeWorkerSummary(EncodeWorkerSummary(s), &unknown);
  ASSERT_TRUE(decoded.ok()) << decoded.status().message();
  expected = SampleSummary();
  expected.functions.erase(expected.functions.begin(), expected.functions.begin() + 3);
  expected.functions[1].parent = 2;
  expected.functions[0].enclosing_op = FunctionSummary::kNoParent;  // its op was left out
  expected.collective_groups.calls.clear();
  ExpectSummaryEq(expected, *decoded);
  EXPECT_EQ(decoded->Key(0), "torch_op:aten::mm");
  EXPECT_EQ(unknown.functions, 3u);
  EXPECT_EQ(unknown.first, "function 0 (compute_block): event kind 200");
  EXPECT_EQ(unknown.Describe(), "3 functions");
}

// A newer server's finding category: the finding is left out (no category of ours would be
// true), its code and title kept in a note, and counted.
TEST(SummaryCodecTest, AFindingOfACategoryThisPerftrackerDoesNotKnowIsANote) {
  Diagnosis d;
  d.num_workers = 4;
  Finding known;
  known.code = "PT-STRAGGLER-FUNCTION";
  known.category = FindingCategory::kCompute;
  known.title = "rank 3 runs aten::mm 2.1x slower than its peers";
  Finding newer;
  newer.code = "PT-SOMETHING-NEW";
  newer.category = static_cast<FindingCategory>(77);
  newer.title = "rank 2 does something new";
  d.findings = {newer, known};
  d.notes = {"rank 7: no trace"};
  UnknownValues unknown;
  auto decoded = DecodeDiagnosis(EncodeDiagnosis(d), &unknown);
  ASSERT_TRUE(decoded.ok()) << decoded.status().message();
  ASSERT_EQ(decoded->findings.size(), 1u);
  EXPECT_EQ(decoded->findings[0].code, known.code);
  EXPECT_EQ(decoded->notes,
            (std::vector<std::string>{
                "rank 7: no trace",
                "finding 0 (PT-SOMETHING-NEW): category 77, which this perftracker does not know "
                "(a newer server's?), left out: rank 2 does something new"}));
  EXPECT_EQ(unknown.findings, 1u);
  EXPECT_EQ(unknown.first, "finding 0 (PT-SOMETHING-NEW): category 77");

  // Hostile: many such findings make one note each up to a bound, and one more.
  d.findings.assign(100, newer);
  decoded = DecodeDiagnosis(EncodeDiagnosis(d), &unknown);
  ASSERT_TRUE(decoded.ok()) << decoded.status().message();
  EXPECT_TRUE(decoded->findings.empty());
  EXPECT_EQ(unknown.findings, 100u);
  ASSERT_EQ(decoded->notes.size(), 1u + 16u + 1u);
  EXPECT_EQ(decoded->notes.back(),
            "... and 84 more findings of categories this perftracker does not know, left out");
}

}  // namespace
}  // namespace perftracker
