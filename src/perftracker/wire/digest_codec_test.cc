#include "perftracker/wire/digest_codec.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <string>

namespace perftracker {
namespace {

// A summary at every budget's limit, with times and counts as large as they get.
WorkerSummary Largest() {
  WorkerSummary s;
  s.rank = 99999;
  s.host = std::string(300, 'h');
  s.window_start_ns = 1'700'000'000'000'000'000;
  s.window_end_ns = s.window_start_ns + 600'000'000'000;
  s.has_device = true;
  for (int i = 0; i < 1000; ++i) {
    IterationSummary it;
    it.start_ns = s.window_start_ns + i * 600'000'000LL;
    it.duration_ns = 599'999'999'999;
    it.compute_ns = it.communication_ns = it.wait_ns = it.data_ns = it.host_only_ns =
        599'999'999'999;
    s.iterations.push_back(it);
  }
  for (int i = 0; i < 500; ++i) {
    FunctionSummary f;
    f.name = "aten::op_" + std::to_string(i) + std::string(200, 'x');
    f.kind = static_cast<EventKind>(
        i % kNumEventKinds == static_cast<int>(EventKind::kIteration) ? 0 : i % kNumEventKinds);
    f.parent = i == 0 ? FunctionSummary::kNoParent : static_cast<uint32_t>(i - 1);
    f.count = std::numeric_limits<uint32_t>::max();
    f.total_ns = f.self_ns = f.critical_ns = 599'999'999'999 - i;
    s.functions.push_back(f);
  }
  for (int m = 0; m < kNumMetrics; ++m) {
    s.worker_metrics.push_back({static_cast<Metric>(m), 1e12, 1e12});
  }
  s.stats.events = std::numeric_limits<uint64_t>::max();
  s.stats.dropped_events = std::numeric_limits<uint64_t>::max();
  return s;
}

TEST(DigestCodec, RoundTripsExactly) {
  const WorkerDigest d = MakeWorkerDigest(Largest());
  StatusOr<WorkerDigest> back = DecodeWorkerDigest(EncodeWorkerDigest(d));
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ(back->rank, d.rank);
  EXPECT_EQ(back->host, d.host);
  EXPECT_EQ(back->iteration_total, 1000u);
  ASSERT_EQ(back->iterations.size(), kMaxDigestIterations);
  EXPECT_EQ(back->iterations.back().start_ns, d.iterations.back().start_ns);
  ASSERT_EQ(back->functions.size(), d.functions.size());
  for (size_t i = 0; i < d.functions.size(); ++i) {
    EXPECT_EQ(back->functions[i].key_hash, d.functions[i].key_hash);
    EXPECT_EQ(back->functions[i].total_ns, d.functions[i].total_ns);
    EXPECT_EQ(back->functions[i].count, d.functions[i].count);
  }
  EXPECT_EQ(back->function_total, 500u);
  // Every worker-level metric of the summary: the screen compares them all.
  ASSERT_EQ(d.worker_metrics.size(), static_cast<size_t>(kNumMetrics));
  EXPECT_EQ(back->worker_metrics.size(), d.worker_metrics.size());
  EXPECT_EQ(back->dropped_events, d.dropped_events);
}

TEST(DigestCodec, TheLargestDigestFitsItsBudget) {
  WorkerDigest d = MakeWorkerDigest(Largest());
  EXPECT_LE(EncodeWorkerDigest(d).size(), kMaxDigestBytes);
  // A newer collector's, with as many metric ids as the decoder takes.
  for (size_t m = d.worker_metrics.size(); m < kMaxDigestMetrics; ++m) {
    d.worker_metrics.push_back({static_cast<Metric>(1000 + m), 1e12, 1e12});
  }
  const std::string bytes = EncodeWorkerDigest(d);
  EXPECT_LE(bytes.size(), kMaxDigestBytes);
  StatusOr<WorkerDigest> back = DecodeWorkerDigest(bytes);
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ(back->worker_metrics.size(), static_cast<size_t>(kNumMetrics));
}

TEST(DigestCodec, CorruptOrOversizedBytesAreOneLineOfDataLoss) {
  const std::string good = EncodeWorkerDigest(MakeWorkerDigest(Largest()));
  for (size_t cut = 1; cut < good.size(); cut += 97) {
    StatusOr<WorkerDigest> d = DecodeWorkerDigest(std::string_view(good).substr(0, cut));
    if (!d.ok()) {
      EXPECT_EQ(d.status().message().find('\n'), std::string::npos);
    }
  }
  StatusOr<WorkerDigest> big = DecodeWorkerDigest(std::string(kMaxDigestBytes + 1, '\x08'));
  ASSERT_FALSE(big.ok());
  EXPECT_NE(big.status().message().find("more than the 4096"), std::string::npos)
      << big.status().message();
  StatusOr<WorkerDigest> junk = DecodeWorkerDigest("\xff\xff\xff\xff");
  EXPECT_FALSE(junk.ok());
}

// A newer collector's digest: a worker metric or a function kind this server does not know
// is left out and counted (wire forward compatibility, docs/server.md "Versions").
TEST(DigestCodec, WhatANewerCollectorAddedIsLeftOutAndCounted) {
  WorkerDigest d;
  d.rank = 3;
  d.host = "node-1";
  for (uint64_t i = 0; i < 3; ++i) {
    d.functions.push_back({100 + i, EventKind::kTorchOp, 1, 30, 20, 10});
  }
  d.function_total = 3;
  d.worker_metrics.push_back({Metric::kCpuUtilization, 0.5, 0.125});
  const WorkerDigest known = d;
  d.worker_metrics.push_back({static_cast<Metric>(999), 1.0, 0.0});
  d.functions[1].kind = static_cast<EventKind>(200);
  UnknownValues unknown;
  StatusOr<WorkerDigest> back = DecodeWorkerDigest(EncodeWorkerDigest(d), &unknown);
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ(back->worker_metrics.size(), known.worker_metrics.size());
  ASSERT_EQ(back->functions.size(), known.functions.size() - 1);
  EXPECT_EQ(back->functions[0].key_hash, known.functions[0].key_hash);
  EXPECT_EQ(back->functions[1].key_hash, known.functions[2].key_hash);
  EXPECT_EQ(unknown.metrics, 1u);
  EXPECT_EQ(unknown.functions, 1u);
  EXPECT_EQ(unknown.first, "digest function 1: event kind 200");
  EXPECT_EQ(unknown.Describe(), "1 metric value and 1 function");
}

}  // namespace
}  // namespace perftracker
