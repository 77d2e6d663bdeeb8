#include "perftracker/wire/summary_codec.h"

#include <algorithm>
#include <cstdint>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "perftracker.pb.h"

namespace perftracker {
namespace {

// Keys are rebuilt from parent + leaf; a hostile message (a long parent chain) could make
// them quadratic. Reject messages whose keys add up to more than this.
constexpr size_t kMaxKeyBytesPerMessageByte = 512;
constexpr size_t kMinKeyBudget = 16u << 20;

std::string LeafKey(EventKind kind, std::string_view name) {
  std::string key(EventKindName(kind));
  key += ':';
  key += name;
  return key;
}

Status Corrupt(std::string_view what, std::string detail) {
  return Status::DataLoss(std::string(what) + ": " + std::move(detail) +
                          " (the message is corrupt, truncated, or not a perftracker.v1 " +
                          std::string(what) + "; re-send it or check both sides run the same "
                          "perftracker version)");
}

Status Parse(google::protobuf::MessageLite& message, std::string_view bytes,
             std::string_view what) {
  if (bytes.size() > kMaxWireMessageBytes) {
    return Corrupt(what, std::to_string(bytes.size()) + " bytes exceeds the limit of " +
                             std::to_string(kMaxWireMessageBytes) + " bytes");
  }
  if (!message.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) {
    return Corrupt(what, "protobuf parsing failed on " + std::to_string(bytes.size()) +
                             " bytes");
  }
  return Status::Ok();
}

void EncodeSketch(const QuantileSketch& in, v1::QuantileSketch* out) {
  if (in.count() == 0) return;
  out->set_offset(in.offset());
  out->mutable_buckets()->Add(in.buckets().begin(), in.buckets().end());
  out->set_zero_count(in.zero_count());
  out->set_sum(in.sum());
  out->set_min(in.min());
  out->set_max(in.max());
}

}  // namespace

std::string EncodeWorkerSummary(const WorkerSummary& s) {
  v1::WorkerSummary m;
  m.set_rank(s.rank);
  m.set_host(s.host);
  m.set_source(s.source);
  m.set_window_start_ns(s.window_start_ns);
  m.set_window_end_ns(s.window_end_ns);
  m.set_has_device(s.has_device);
  for (const IterationSummary& it : s.iterations) {
    v1::IterationSummary* o = m.add_iterations();
    o->set_start_ns(it.start_ns);
    o->set_duration_ns(it.duration_ns);
    o->set_compute_ns(it.compute_ns);
    o->set_communication_ns(it.communication_ns);
    o->set_wait_ns(it.wait_ns);
    o->set_data_ns(it.data_ns);
    o->set_host_only_ns(it.host_only_ns);
  }
  std::unordered_map<std::string_view, uint32_t> names;
  for (size_t i = 0; i < s.functions.size(); ++i) {
    const FunctionSummary& f = s.functions[i];
    v1::FunctionSummary* o = m.add_functions();
    auto [it, inserted] = names.try_emplace(f.name, static_cast<uint32_t>(names.size()));
    if (inserted) m.add_strings(f.name);
    o->set_name(it->second);
    o->set_kind(static_cast<uint32_t>(f.kind));
    std::string derived;
    bool derivable = true;
    if (f.parent != FunctionSummary::kNoParent) {
      o->set_parent(f.parent + 1);
      if (f.parent < i) {
        derived = s.functions[f.parent].key + " > " + LeafKey(f.kind, f.name);
      } else {
        derivable = false;
      }
    } else {
      derived = LeafKey(f.kind, f.name);
    }
    if (!derivable || derived != f.key) o->set_key(f.key);
    o->set_count(f.count);
    o->set_total_ns(f.total_ns);
    o->set_self_ns(f.self_ns);
    o->set_critical_ns(f.critical_ns);
    o->set_idle_gap_before_ns(f.idle_gap_before_ns);
    o->set_bytes(f.bytes);
    if (f.durations.count() > 0) EncodeSketch(f.durations, o->mutable_durations());
    for (const FunctionMetric& fm : f.metrics) {
      v1::FunctionMetric* om = o->add_metrics();
      om->set_metric(static_cast<uint32_t>(fm.metric));
      om->set_mean(fm.mean);
      om->set_stddev(fm.stddev);
    }
  }
  v1::SummaryStats* st = m.mutable_stats();
  st->set_events(s.stats.events);
  st->set_dropped_events(s.stats.dropped_events);
  st->set_out_of_order_events(s.stats.out_of_order_events);
  st->set_malformed_events(s.stats.malformed_events);
  st->set_first_problem(s.stats.first_problem);
  return m.SerializeAsString();
}

StatusOr<WorkerSummary> DecodeWorkerSummary(std::string_view bytes) {
  constexpr std::string_view kWhat = "WorkerSummary";
  v1::WorkerSummary m;
  PERFTRACKER_RETURN_IF_ERROR(Parse(m, bytes, kWhat));

  WorkerSummary s;
  s.rank = m.rank();
  s.host = m.host();
  s.source = m.source();
  s.window_start_ns = m.window_start_ns();
  s.window_end_ns = m.window_end_ns();
  s.has_device = m.has_device();
  const std::string rank = "rank " + std::to_string(s.rank);
  if (s.window_end_ns < s.window_start_ns) {
    return Corrupt(kWhat, rank + ": window ends before it starts");
  }
  s.iterations.reserve(static_cast<size_t>(m.iterations_size()));
  for (const v1::IterationSummary& it : m.iterations()) {
    IterationSummary o;
    o.start_ns = it.start_ns();
    o.duration_ns = it.duration_ns();
    o.compute_ns = it.compute_ns();
    o.communication_ns = it.communication_ns();
    o.wait_ns = it.wait_ns();
    o.data_ns = it.data_ns();
    o.host_only_ns = it.host_only_ns();
    if (o.duration_ns < 0) {
      return Corrupt(kWhat, rank + ": iteration " + std::to_string(s.iterations.size()) +
                                " has a negative duration");
    }
    s.iterations.push_back(o);
  }

  const size_t num_functions = static_cast<size_t>(m.functions_size());
  const size_t key_budget = std::max(kMinKeyBudget, kMaxKeyBytesPerMessageByte * bytes.size());
  size_t key_bytes = 0;
  s.functions.reserve(num_functions);
  for (size_t i = 0; i < num_functions; ++i) {
    const v1::FunctionSummary& f = m.functions(static_cast<int>(i));
    const std::string where = rank + ", function " + std::to_string(i);
    FunctionSummary o;
    if (f.name() >= static_cast<uint32_t>(m.strings_size())) {
      return Corrupt(kWhat, where + ": name index " + std::to_string(f.name()) +
                                " is outside the string table of " +
                                std::to_string(m.strings_size()) + " entries");
    }
    o.name = m.strings(static_cast<int>(f.name()));
    if (f.kind() >= static_cast<uint32_t>(kNumEventKinds)) {
      return Corrupt(kWhat, where + " (" + o.name + "): unknown event kind " +
                                std::to_string(f.kind()));
    }
    o.kind = static_cast<EventKind>(f.kind());
    if (f.parent() != 0) {
      o.parent = f.parent() - 1;
      if (o.parent >= num_functions || o.parent == i) {
        return Corrupt(kWhat, where + " (" + o.name + "): parent index " +
                                  std::to_string(o.parent) + " is out of range (" +
                                  std::to_string(num_functions) + " functions)");
      }
    }
    if (f.has_key()) {
      o.key = f.key();
    } else if (o.parent == FunctionSummary::kNoParent) {
      o.key = LeafKey(o.kind, o.name);
    } else if (o.parent < i) {
      o.key = s.functions[o.parent].key + " > " + LeafKey(o.kind, o.name);
    } else {
      return Corrupt(kWhat, where + " (" + o.name + "): its key derives from parent " +
                                std::to_string(o.parent) + ", which does not precede it");
    }
    key_bytes += o.key.size();
    if (key_bytes > key_budget) {
      return Corrupt(kWhat, where + ": function keys add up to more than " +
                                std::to_string(key_budget) + " bytes");
    }
    o.count = f.count();
    o.total_ns = f.total_ns();
    o.self_ns = f.self_ns();
    o.critical_ns = f.critical_ns();
    o.idle_gap_before_ns = f.idle_gap_before_ns();
    o.bytes = f.bytes();
    if (f.has_durations()) {
      const v1::QuantileSketch& d = f.durations();
      std::vector<uint64_t> buckets(d.buckets().begin(), d.buckets().end());
      if (!o.durations.Restore(d.offset(), std::move(buckets), d.zero_count(), d.sum(), d.min(),
                               d.max())) {
        return Corrupt(kWhat, where + " (" + o.name + "): inconsistent duration sketch (" +
                                  std::to_string(d.buckets_size()) + " buckets, offset " +
                                  std::to_string(d.offset()) + ")");
      }
    }
    o.metrics.reserve(static_cast<size_t>(f.metrics_size()));
    for (const v1::FunctionMetric& fm : f.metrics()) {
      if (fm.metric() >= static_cast<uint32_t>(kNumMetrics)) {
        return Corrupt(kWhat, where + " (" + o.name + "): unknown metric " +
                                  std::to_string(fm.metric()));
      }
      o.metrics.push_back({static_cast<Metric>(fm.metric()), fm.mean(), fm.stddev()});
    }
    s.functions.push_back(std::move(o));
  }
  const v1::SummaryStats& st = m.stats();
  s.stats.events = st.events();
  s.stats.dropped_events = st.dropped_events();
  s.stats.out_of_order_events = st.out_of_order_events();
  s.stats.malformed_events = st.malformed_events();
  s.stats.first_problem = st.first_problem();
  return s;
}

std::string EncodeDiagnosis(const Diagnosis& d) {
  v1::Diagnosis m;
  m.set_num_workers(d.num_workers);
  m.set_median_iteration_ns(d.median_iteration_ns);
  for (const Finding& f : d.findings) {
    v1::Finding* o = m.add_findings();
    o->set_code(f.code);
    o->set_category(static_cast<uint32_t>(f.category));
    o->set_title(f.title);
    o->mutable_workers()->Add(f.workers.begin(), f.workers.end());
    o->mutable_victims()->Add(f.victims.begin(), f.victims.end());
    o->set_function(f.function);
    o->set_function_key(f.function_key);
    o->set_resource(f.resource);
    o->set_lost_ns_per_iteration(f.lost_ns_per_iteration);
    o->set_lost_share(f.lost_share);
    o->set_material(f.material);
    for (const Evidence& e : f.evidence) {
      v1::Evidence* oe = o->add_evidence();
      oe->set_label(e.label);
      oe->set_value(e.value);
    }
  }
  for (const std::string& note : d.notes) m.add_notes(note);
  return m.SerializeAsString();
}

StatusOr<Diagnosis> DecodeDiagnosis(std::string_view bytes) {
  constexpr std::string_view kWhat = "Diagnosis";
  v1::Diagnosis m;
  PERFTRACKER_RETURN_IF_ERROR(Parse(m, bytes, kWhat));
  Diagnosis d;
  d.num_workers = m.num_workers();
  d.median_iteration_ns = m.median_iteration_ns();
  if (d.num_workers < 0) {
    return Corrupt(kWhat, "negative worker count " + std::to_string(d.num_workers));
  }
  d.findings.reserve(static_cast<size_t>(m.findings_size()));
  for (const v1::Finding& f : m.findings()) {
    Finding o;
    o.code = f.code();
    const auto category = static_cast<FindingCategory>(f.category());
    if (f.category() > UINT8_MAX || FindingCategoryName(category) == "unknown") {
      return Corrupt(kWhat, "finding " + std::to_string(d.findings.size()) + " (" + o.code +
                                "): unknown category " + std::to_string(f.category()));
    }
    o.category = category;
    o.title = f.title();
    o.workers.assign(f.workers().begin(), f.workers().end());
    o.victims.assign(f.victims().begin(), f.victims().end());
    o.function = f.function();
    o.function_key = f.function_key();
    o.resource = f.resource();
    o.lost_ns_per_iteration = f.lost_ns_per_iteration();
    o.lost_share = f.lost_share();
    o.material = f.material();
    o.evidence.reserve(static_cast<size_t>(f.evidence_size()));
    for (const v1::Evidence& e : f.evidence()) o.evidence.push_back({e.label(), e.value()});
    d.findings.push_back(std::move(o));
  }
  d.notes.assign(m.notes().begin(), m.notes().end());
  return d;
}

}  // namespace perftracker
