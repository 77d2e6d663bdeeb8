#include "perftracker/wire/digest_codec.h"

#include <cstdint>
#include <string>
#include <utility>

#include "perftracker.pb.h"
#include "perftracker/wire/iteration_proto.h"
#include "perftracker/wire/proto_parse.h"

namespace perftracker {

using wire_internal::ParseWireMessage;
using wire_internal::WireDataLoss;

namespace {
constexpr std::string_view kWhat = "worker digest";
}  // namespace

std::string EncodeWorkerDigest(const WorkerDigest& d) {
  v1::WorkerDigest m;
  m.set_rank(d.rank);
  m.set_host(d.host);
  m.set_window_start_ns(d.window_start_ns);
  m.set_window_end_ns(d.window_end_ns);
  m.set_has_device(d.has_device);
  for (const IterationSummary& it : d.iterations) {
    wire_internal::EncodeIteration(it, m.add_iterations());
  }
  m.set_iteration_total(d.iteration_total);
  for (const DigestFunction& f : d.functions) {
    m.add_function_key_hashes(f.key_hash);
    m.add_function_kinds(static_cast<uint32_t>(f.kind));
    m.add_function_counts(f.count);
    m.add_function_total_ns(f.total_ns);
    m.add_function_self_ns(f.self_ns);
    m.add_function_critical_ns(f.critical_ns);
  }
  m.set_function_total(d.function_total);
  for (const FunctionMetric& fm : d.worker_metrics) {
    m.add_worker_metric_ids(static_cast<uint32_t>(fm.metric));
    m.add_worker_metric_means(static_cast<float>(fm.mean));
    m.add_worker_metric_stddevs(static_cast<float>(fm.stddev));
  }
  m.set_events(d.events);
  m.set_dropped_events(d.dropped_events);
  return m.SerializeAsString();
}

StatusOr<WorkerDigest> DecodeWorkerDigest(std::string_view bytes, UnknownValues* unknown) {
  if (bytes.size() > kMaxDigestBytes) {
    return WireDataLoss(kWhat, std::to_string(bytes.size()) + " bytes, more than the " +
                                   std::to_string(kMaxDigestBytes) + " a digest may have");
  }
  v1::WorkerDigest m;
  PERFTRACKER_RETURN_IF_ERROR(ParseWireMessage(m, bytes, kWhat));
  WorkerDigest d;
  UnknownValues skipped;
  d.rank = m.rank();
  const std::string rank = "rank " + std::to_string(d.rank);
  d.host = m.host();
  d.window_start_ns = m.window_start_ns();
  d.window_end_ns = m.window_end_ns();
  d.has_device = m.has_device();
  if (static_cast<size_t>(m.iterations_size()) > kMaxDigestIterations) {
    return WireDataLoss(kWhat, rank + ": " + std::to_string(m.iterations_size()) +
                                   " iterations, more than a digest carries");
  }
  for (const v1::IterationSummary& it : m.iterations()) {
    const IterationSummary o = wire_internal::DecodeIteration(it);
    if (o.duration_ns < 0) {
      return WireDataLoss(kWhat, rank + ": an iteration has a negative duration");
    }
    d.iterations.push_back(o);
  }
  d.iteration_total = m.iteration_total();
  if (d.iteration_total < d.iterations.size()) {
    return WireDataLoss(kWhat, rank + ": fewer iterations in all than in the digest");
  }
  const int n = m.function_key_hashes_size();
  if (static_cast<size_t>(n) > kMaxDigestFunctions) {
    return WireDataLoss(kWhat,
                        rank + ": " + std::to_string(n) + " functions, more than a digest carries");
  }
  if (m.function_kinds_size() != n || m.function_counts_size() != n ||
      m.function_total_ns_size() != n || m.function_self_ns_size() != n ||
      m.function_critical_ns_size() != n) {
    return WireDataLoss(kWhat, rank + ": function arrays differ in length");
  }
  for (int i = 0; i < n; ++i) {
    DigestFunction f;
    f.key_hash = m.function_key_hashes(i);
    f.count = m.function_counts(i);
    f.total_ns = m.function_total_ns(i);
    f.self_ns = m.function_self_ns(i);
    f.critical_ns = m.function_critical_ns(i);
    if (f.total_ns < 0 || f.self_ns < 0 || f.critical_ns < 0) {
      return WireDataLoss(kWhat, rank + ": a function has a negative time");
    }
    if (m.function_kinds(i) >= static_cast<uint32_t>(kNumEventKinds)) {
      ++skipped.functions;
      if (skipped.first.empty()) {
        skipped.first = "digest function " + std::to_string(i) + ": event kind " +
                        std::to_string(m.function_kinds(i));
      }
      continue;
    }
    f.kind = static_cast<EventKind>(m.function_kinds(i));
    d.functions.push_back(f);
  }
  d.function_total = m.function_total();
  if (m.worker_metric_means_size() != m.worker_metric_ids_size() ||
      m.worker_metric_stddevs_size() != m.worker_metric_ids_size()) {
    return WireDataLoss(kWhat, rank + ": worker metric arrays differ in length");
  }
  if (static_cast<size_t>(m.worker_metric_ids_size()) > kMaxDigestMetrics) {
    return WireDataLoss(kWhat, rank + ": more worker metrics than a digest carries");
  }
  for (int j = 0; j < m.worker_metric_ids_size(); ++j) {
    if (m.worker_metric_ids(j) >= static_cast<uint32_t>(kNumMetrics)) {
      ++skipped.metrics;
      if (skipped.first.empty()) {
        skipped.first = "worker metric " + std::to_string(m.worker_metric_ids(j));
      }
      continue;
    }
    d.worker_metrics.push_back({static_cast<Metric>(m.worker_metric_ids(j)),
                                m.worker_metric_means(j), m.worker_metric_stddevs(j)});
  }
  d.events = m.events();
  d.dropped_events = m.dropped_events();
  if (unknown != nullptr) *unknown = std::move(skipped);
  return d;
}

}  // namespace perftracker
