#include "perftracker/wire/summary_codec.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include <zlib.h>

#include "perftracker.pb.h"
#include "perftracker/wire/iteration_proto.h"
#include "perftracker/wire/proto_parse.h"

namespace perftracker {

using wire_internal::ParseWireMessage;
using wire_internal::WireDataLoss;

namespace {

// Keys derive from parent + leaf; a hostile message (a long parent chain) could make the
// keys a reader builds quadratic. Reject messages whose keys add up to more than this.
constexpr size_t kMaxKeyBytesPerMessageByte = 512;
constexpr size_t kMinKeyBudget = 16u << 20;

std::string LeafKey(EventKind kind, std::string_view name) {
  std::string key(EventKindName(kind));
  key += ':';
  key += name;
  return key;
}

// Whole numbers below 2^53 travel as varints (exact round trip through int64).
bool Integral(double v) { return std::isfinite(v) && v == std::trunc(v) && std::abs(v) < 9e15; }

void EncodeSketch(const QuantileSketch& in, v1::QuantileSketch* out) {
  out->set_offset(in.offset());
  out->mutable_buckets()->Add(in.buckets().begin(), in.buckets().end());
  out->set_zero_count(in.zero_count());
  if (Integral(in.sum())) {
    out->set_sum_int(static_cast<int64_t>(in.sum()));
  } else {
    out->set_sum(in.sum());
  }
  if (Integral(in.min())) {
    out->set_min_int(static_cast<int64_t>(in.min()));
  } else {
    out->set_min(in.min());
  }
  if (Integral(in.max())) {
    out->set_max_int(static_cast<int64_t>(in.max()));
  } else {
    out->set_max(in.max());
  }
}

void AppendVarint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out += static_cast<char>((v & 0x7f) | 0x80);
    v >>= 7;
  }
  out += static_cast<char>(v);
}

bool ReadVarint(std::string_view& in, uint64_t& v) {
  v = 0;
  for (int shift = 0; shift < 64 && !in.empty(); shift += 7) {
    const auto byte = static_cast<uint8_t>(in.front());
    in.remove_prefix(1);
    v |= static_cast<uint64_t>(byte & 0x7f) << shift;
    if ((byte & 0x80) == 0) return true;
  }
  return false;
}

// The string table as varint-length-prefixed names, deflated; empty if deflating fails.
std::string DeflateNames(const std::vector<std::string_view>& names) {
  std::string raw;
  for (std::string_view n : names) {
    AppendVarint(raw, n.size());
    raw += n;
  }
  uLongf size = compressBound(static_cast<uLong>(raw.size()));
  std::string out(size, '\0');
  if (compress2(reinterpret_cast<Bytef*>(out.data()), &size,
                reinterpret_cast<const Bytef*>(raw.data()), static_cast<uLong>(raw.size()),
                Z_BEST_COMPRESSION) != Z_OK) {
    return {};
  }
  out.resize(size);
  return out;
}

// Inflates at most `limit` bytes; returns false on corrupt, truncated or oversized input.
bool Inflate(std::string_view in, size_t limit, std::string& out) {
  z_stream z{};
  if (inflateInit(&z) != Z_OK) return false;
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(in.data()));
  z.avail_in = static_cast<uInt>(in.size());
  int rc = Z_OK;
  char buf[16384];
  while (rc == Z_OK) {
    z.next_out = reinterpret_cast<Bytef*>(buf);
    z.avail_out = sizeof(buf);
    rc = inflate(&z, Z_NO_FLUSH);
    if (rc != Z_OK && rc != Z_STREAM_END) break;
    out.append(buf, sizeof(buf) - z.avail_out);
    if (out.size() > limit) {
      rc = Z_MEM_ERROR;
      break;
    }
    if (rc == Z_OK && z.avail_in == 0 && z.avail_out != 0) {
      rc = Z_BUF_ERROR;  // input ended before the stream did
      break;
    }
  }
  const bool ok = rc == Z_STREAM_END && z.avail_in == 0;
  inflateEnd(&z);
  return ok;
}

// A function's name where UnknownValues::first names it (a note, a log line): a templated
// kernel's name of kilobytes cut, at a UTF-8 boundary.
std::string NameInNote(std::string_view name) {
  constexpr size_t kMaxBytes = 96;
  if (name.size() <= kMaxBytes) return std::string(name);
  size_t cut = kMaxBytes;
  while (cut > 0 && (static_cast<uint8_t>(name[cut]) & 0xc0) == 0x80) --cut;
  return std::string(name.substr(0, cut)) + "...";
}

// "0x48".
std::string Hex(uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof(buf), "%#x", v);
  return buf;
}

// The functions a decoder leaves out: those of an event kind it does not know (a newer
// collector's) and every function below one (their keys run through it). Each parent chain
// is walked once; a chain that loops or leaves the table ends kept (the decoder refuses it
// where that is corrupt).
std::vector<bool> UnknownKindSubtrees(const v1::WorkerSummary& m) {
  const size_t n = static_cast<size_t>(m.functions_size());
  enum : uint8_t { kOpen, kOnPath, kKept, kLeftOut };
  std::vector<uint8_t> state(n, kOpen);
  std::vector<size_t> path;
  for (size_t i = 0; i < n; ++i) {
    path.clear();
    uint8_t result = kKept;
    for (size_t j = i;;) {
      if (state[j] == kKept || state[j] == kLeftOut) {
        result = state[j];
        break;
      }
      if (state[j] == kOnPath) break;
      const v1::FunctionSummary& f = m.functions(static_cast<int>(j));
      if (f.kind() >= static_cast<uint32_t>(kNumEventKinds)) {
        state[j] = kLeftOut;
        result = kLeftOut;
        break;
      }
      state[j] = kOnPath;
      path.push_back(j);
      if (f.parent() == 0 || f.parent() > n) break;
      j = f.parent() - 1;
    }
    for (size_t k : path) state[k] = result;
  }
  std::vector<bool> left_out(n);
  for (size_t i = 0; i < n; ++i) left_out[i] = state[i] == kLeftOut;
  return left_out;
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
    wire_internal::EncodeIteration(it, m.add_iterations());
  }
  std::unordered_map<std::string_view, uint32_t> names;
  std::vector<std::string_view> name_list;
  for (size_t i = 0; i < s.functions.size(); ++i) {
    const FunctionSummary& f = s.functions[i];
    v1::FunctionSummary* o = m.add_functions();
    auto [it, inserted] = names.try_emplace(f.name, static_cast<uint32_t>(names.size()));
    if (inserted) name_list.push_back(f.name);
    o->set_name(it->second);
    o->set_kind(static_cast<uint32_t>(f.kind));
    // The decoder derives the key from a preceding parent, or a root's leaf: it is sent
    // only where that derivation would give another key.
    const bool parent_precedes = f.parent != FunctionSummary::kNoParent && f.parent < i;
    if (f.parent != FunctionSummary::kNoParent) o->set_parent(f.parent + 1);
    bool derivable = f.parent == FunctionSummary::kNoParent || parent_precedes;
    if (!f.key.empty()) {
      const std::string leaf = LeafKey(f.kind, f.name);
      if (!parent_precedes) {
        derivable = derivable && f.key == leaf;
      } else {
        const std::string_view key = f.key;
        const size_t tail = leaf.size() + 3;
        derivable = key.size() > tail && key.ends_with(leaf) &&
                    key.substr(key.size() - tail, 3) == " > " &&
                    s.KeyIs(f.parent, key.substr(0, key.size() - tail));
      }
    }
    if (!derivable) o->set_key(s.Key(i));
    o->set_count(f.count);
    o->set_total_ns(f.total_ns);
    o->set_self_ns(f.self_ns);
    o->set_critical_ns(f.critical_ns);
    o->set_idle_gap_before_ns(f.idle_gap_before_ns);
    o->set_event_flags(f.event_flags);
    o->set_bytes(f.bytes);
    if (f.onset_iteration > 0) {
      o->set_onset_iteration(f.onset_iteration);
      o->set_onset_ns(f.onset_ns);
    }
    if (f.slack_after_ns > 0) o->set_slack_after_ns(f.slack_after_ns);
    if (f.enclosing_op < s.functions.size()) o->set_enclosing_op(f.enclosing_op + 1);
    if (f.durations.count() > 0) EncodeSketch(f.durations, o->mutable_durations());
    for (const FunctionMetric& fm : f.metrics) {
      o->add_metric_ids(static_cast<uint32_t>(fm.metric));
      o->add_metric_means(static_cast<float>(fm.mean));
      o->add_metric_stddevs(static_cast<float>(fm.stddev));
    }
  }
  size_t plain_bytes = 0;
  for (std::string_view n : name_list) plain_bytes += n.size() + 2;
  std::string deflated = plain_bytes > 256 ? DeflateNames(name_list) : std::string();
  if (!deflated.empty() && deflated.size() < plain_bytes) {
    m.set_strings_deflated(std::move(deflated));
  } else {
    for (std::string_view n : name_list) m.add_strings(std::string(n));
  }
  v1::SummaryStats* st = m.mutable_stats();
  st->set_events(s.stats.events);
  st->set_dropped_events(s.stats.dropped_events);
  st->set_out_of_order_events(s.stats.out_of_order_events);
  st->set_malformed_events(s.stats.malformed_events);
  st->set_deep_events(s.stats.deep_events);
  st->set_names_truncated(s.stats.names_truncated);
  st->set_invalid_function_events(s.stats.invalid_function_events);
  st->set_metric_samples_process_gone(s.stats.metric_samples_process_gone);
  st->set_metric_reads_failed(s.stats.metric_reads_failed);
  st->set_metric_readings_truncated(s.stats.metric_readings_truncated);
  st->set_gpu_untraced_ms(s.stats.gpu_untraced_ms);
  st->set_first_problem(s.stats.first_problem);
  for (const FunctionMetric& fm : s.worker_metrics) {
    m.add_worker_metric_ids(static_cast<uint32_t>(fm.metric));
    m.add_worker_metric_means(static_cast<float>(fm.mean));
    m.add_worker_metric_stddevs(static_cast<float>(fm.stddev));
  }
  for (const CollectiveGroup& g : s.collective_groups.groups) {
    v1::ProcessGroup* o = m.add_process_groups();
    o->set_name(g.name);
    for (int32_t r : g.ranks) o->add_ranks(r);
    o->set_size(g.size);
    o->set_backend(g.backend);
  }
  for (const CollectiveGroupCalls& c : s.collective_groups.calls) {
    v1::CollectiveGroupCalls* o = m.add_collective_group_calls();
    o->set_function(c.function);
    o->set_group(c.group);
    o->set_count(c.count);
    o->set_total_ns(c.total_ns);
    o->set_bytes(c.bytes);
  }
  return m.SerializeAsString();
}

StatusOr<WorkerSummary> DecodeWorkerSummary(std::string_view bytes, UnknownValues* unknown) {
  constexpr std::string_view kWhat = "WorkerSummary";
  UnknownValues skipped;
  v1::WorkerSummary m;
  PERFTRACKER_RETURN_IF_ERROR(ParseWireMessage(m, bytes, kWhat));

  WorkerSummary s;
  s.rank = m.rank();
  s.host = m.host();
  s.source = m.source();
  s.window_start_ns = m.window_start_ns();
  s.window_end_ns = m.window_end_ns();
  s.has_device = m.has_device();
  const std::string rank = "rank " + std::to_string(s.rank);
  if (s.window_end_ns < s.window_start_ns) {
    return WireDataLoss(kWhat, rank + ": window ends before it starts");
  }
  s.iterations.reserve(static_cast<size_t>(m.iterations_size()));
  for (const v1::IterationSummary& it : m.iterations()) {
    const IterationSummary o = wire_internal::DecodeIteration(it);
    if (o.duration_ns < 0) {
      return WireDataLoss(kWhat, rank + ": iteration " + std::to_string(s.iterations.size()) +
                                     " has a negative duration");
    }
    s.iterations.push_back(o);
  }

  // SharedStrings: every function named by one entry shares its one copy.
  std::vector<SharedString> strings(m.strings().begin(), m.strings().end());
  if (!m.strings_deflated().empty()) {
    if (!strings.empty()) {
      return WireDataLoss(kWhat, rank + ": both a plain and a deflated string table");
    }
    std::string raw;
    if (!Inflate(m.strings_deflated(), kMaxWireMessageBytes, raw)) {
      return WireDataLoss(kWhat, rank + ": the deflated string table (" +
                                     std::to_string(m.strings_deflated().size()) +
                                     " bytes) does not inflate");
    }
    std::string_view in = raw;
    while (!in.empty()) {
      uint64_t len = 0;
      if (!ReadVarint(in, len) || len > in.size()) {
        return WireDataLoss(kWhat, rank + ": string table entry " + std::to_string(strings.size()) +
                                       " overruns the table");
      }
      strings.emplace_back(in.substr(0, len));
      in.remove_prefix(len);
    }
  }

  const size_t num_functions = static_cast<size_t>(m.functions_size());
  // A newer collector's event kinds: those functions and the ones below them are left out,
  // and the others renumbered (parents, collective calls).
  const std::vector<bool> left_out = UnknownKindSubtrees(m);
  std::vector<uint32_t> kept_index(num_functions, FunctionSummary::kNoParent);
  for (size_t i = 0, next = 0; i < num_functions; ++i) {
    if (!left_out[i]) kept_index[i] = static_cast<uint32_t>(next++);
  }
  const size_t key_budget = std::max(kMinKeyBudget, kMaxKeyBytesPerMessageByte * bytes.size());
  size_t key_bytes = 0;
  std::vector<size_t> key_sizes;  // per function: its key's size
  key_sizes.reserve(num_functions);
  s.functions.reserve(num_functions);
  for (size_t i = 0; i < num_functions; ++i) {
    const v1::FunctionSummary& f = m.functions(static_cast<int>(i));
    const std::string where = rank + ", function " + std::to_string(i);
    FunctionSummary o;
    if (f.name() >= strings.size()) {
      return WireDataLoss(kWhat, where + ": name index " + std::to_string(f.name()) +
                                     " is outside the string table of " +
                                     std::to_string(strings.size()) + " entries");
    }
    o.name = strings[f.name()];
    const uint32_t wire_parent = f.parent() == 0 ? FunctionSummary::kNoParent : f.parent() - 1;
    if (wire_parent != FunctionSummary::kNoParent &&
        (wire_parent >= num_functions || wire_parent == i)) {
      return WireDataLoss(kWhat, where + " (" + o.name + "): parent index " +
                                     std::to_string(wire_parent) + " is out of range (" +
                                     std::to_string(num_functions) + " functions)");
    }
    if (left_out[i]) {
      ++skipped.functions;
      if (skipped.first.empty()) {
        skipped.first = "function " + std::to_string(i) + " (" + NameInNote(o.name) + "): " +
                        (f.kind() >= static_cast<uint32_t>(kNumEventKinds)
                             ? "event kind " + std::to_string(f.kind())
                             : "below a function of an unknown event kind");
      }
      continue;
    }
    o.kind = static_cast<EventKind>(f.kind());
    // A kept function's parent is kept (left_out spans whole subtrees).
    if (wire_parent != FunctionSummary::kNoParent) o.parent = kept_index[wire_parent];
    const size_t at = s.functions.size();  // its index in the decoded summary
    // A derived key stays implicit (WorkerSummary::Key); its size is still budgeted.
    size_t key_size = 0;
    const size_t leaf_size = EventKindName(o.kind).size() + 1 + o.name.size();
    if (f.has_key()) {
      o.key = f.key();
      key_size = o.key.size();
    } else if (o.parent == FunctionSummary::kNoParent) {
      key_size = leaf_size;
    } else if (o.parent < at) {
      key_size = key_sizes[o.parent] + 3 + leaf_size;
    } else {
      return WireDataLoss(kWhat, where + " (" + o.name + "): its key derives from parent " +
                                     std::to_string(wire_parent) + ", which does not precede it");
    }
    key_sizes.push_back(key_size);
    key_bytes += key_size;
    if (key_bytes > key_budget) {
      return WireDataLoss(kWhat, where + ": function keys add up to more than " +
                                     std::to_string(key_budget) + " bytes");
    }
    o.count = f.count();
    o.total_ns = f.total_ns();
    o.self_ns = f.self_ns();
    o.critical_ns = f.critical_ns();
    o.idle_gap_before_ns = f.idle_gap_before_ns();
    // A newer collector's flag bits (or any bit above them) are left out and counted: the
    // rules read these bits (on a device, pageable, point to point), and a bit of a meaning
    // they do not know must not reach them as one they do.
    o.event_flags = static_cast<uint8_t>(f.event_flags() & kSummaryEventFlags);
    if ((f.event_flags() & ~uint32_t{kSummaryEventFlags}) != 0) {
      ++skipped.event_flags;
      if (skipped.first.empty()) {
        skipped.first = "function " + std::to_string(i) + " (" + NameInNote(o.name) +
                        "): event flags " + Hex(f.event_flags()) + " (bits " +
                        Hex(f.event_flags() & ~uint32_t{kSummaryEventFlags}) + " not known)";
      }
    }
    o.bytes = f.bytes();
    o.onset_iteration = f.onset_iteration();
    o.onset_ns = f.onset_ns();
    if (o.onset_iteration >= std::max<size_t>(s.iterations.size(), 1) || o.onset_ns < 0) {
      return WireDataLoss(kWhat, where + " (" + o.name + "): onset at iteration " +
                                     std::to_string(o.onset_iteration) + " of " +
                                     std::to_string(s.iterations.size()) + " with " +
                                     std::to_string(o.onset_ns) + " ns");
    }
    o.slack_after_ns = f.slack_after_ns();
    if (o.slack_after_ns < 0 || o.slack_after_ns > std::max<int64_t>(o.total_ns, 0)) {
      return WireDataLoss(kWhat, where + " (" + o.name + "): " + std::to_string(o.slack_after_ns) +
                                     " ns followed by a receive wait, of " +
                                     std::to_string(o.total_ns) + " ns in all");
    }
    if (f.enclosing_op() != 0) {
      const uint32_t e = f.enclosing_op() - 1;
      if (e >= num_functions || e == i) {
        return WireDataLoss(kWhat, where + " (" + o.name + "): enclosing op index " +
                                       std::to_string(e) + " is out of range (" +
                                       std::to_string(num_functions) + " functions)");
      }
      // An op of a kind this decoder does not know is left out with its link.
      o.enclosing_op = kept_index[e];
    }
    if (f.has_durations()) {
      const v1::QuantileSketch& d = f.durations();
      std::vector<uint64_t> buckets(d.buckets().begin(), d.buckets().end());
      const double sum = d.has_sum_int() ? static_cast<double>(d.sum_int()) : d.sum();
      const double min = d.has_min_int() ? static_cast<double>(d.min_int()) : d.min();
      const double max = d.has_max_int() ? static_cast<double>(d.max_int()) : d.max();
      if (!o.durations.Restore(d.offset(), std::move(buckets), d.zero_count(), sum, min, max)) {
        return WireDataLoss(kWhat, where + " (" + o.name + "): inconsistent duration sketch (" +
                                       std::to_string(d.buckets_size()) + " buckets, offset " +
                                       std::to_string(d.offset()) + ")");
      }
    }
    if (f.metric_means_size() != f.metric_ids_size() ||
        f.metric_stddevs_size() != f.metric_ids_size()) {
      return WireDataLoss(kWhat, where + " (" + o.name + "): metric arrays differ in length");
    }
    o.metrics.reserve(static_cast<size_t>(f.metric_ids_size()));
    for (int j = 0; j < f.metric_ids_size(); ++j) {
      if (f.metric_ids(j) >= static_cast<uint32_t>(kNumMetrics)) {
        ++skipped.metrics;
        if (skipped.first.empty()) {
          skipped.first = "function " + std::to_string(i) + " (" + NameInNote(o.name) +
                          "): metric " + std::to_string(f.metric_ids(j));
        }
        continue;
      }
      o.metrics.push_back(
          {static_cast<Metric>(f.metric_ids(j)), f.metric_means(j), f.metric_stddevs(j)});
    }
    s.functions.push_back(std::move(o));
  }
  const v1::SummaryStats& st = m.stats();
  s.stats.events = st.events();
  s.stats.dropped_events = st.dropped_events();
  s.stats.out_of_order_events = st.out_of_order_events();
  s.stats.malformed_events = st.malformed_events();
  s.stats.deep_events = st.deep_events();
  s.stats.names_truncated = st.names_truncated();
  s.stats.invalid_function_events = st.invalid_function_events();
  s.stats.metric_samples_process_gone = st.metric_samples_process_gone();
  s.stats.metric_reads_failed = st.metric_reads_failed();
  s.stats.metric_readings_truncated = st.metric_readings_truncated();
  s.stats.gpu_untraced_ms = st.gpu_untraced_ms();
  s.stats.first_problem = st.first_problem();
  if (m.worker_metric_means_size() != m.worker_metric_ids_size() ||
      m.worker_metric_stddevs_size() != m.worker_metric_ids_size()) {
    return WireDataLoss(kWhat, rank + ": worker metric arrays differ in length");
  }
  for (int j = 0; j < m.worker_metric_ids_size(); ++j) {
    if (m.worker_metric_ids(j) >= static_cast<uint32_t>(kNumMetrics)) {
      ++skipped.metrics;
      if (skipped.first.empty()) {
        skipped.first = "worker metric " + std::to_string(m.worker_metric_ids(j));
      }
      continue;
    }
    s.worker_metrics.push_back({static_cast<Metric>(m.worker_metric_ids(j)),
                                m.worker_metric_means(j), m.worker_metric_stddevs(j)});
  }
  for (const v1::ProcessGroup& g : m.process_groups()) {
    CollectiveGroup& o = s.collective_groups.groups.emplace_back();
    o.name = g.name();
    o.ranks.assign(g.ranks().begin(), g.ranks().end());
    o.size = g.size();
    o.backend = g.backend();
  }
  for (const v1::CollectiveGroupCalls& c : m.collective_group_calls()) {
    if (c.function() >= num_functions || c.group() >= s.collective_groups.groups.size()) {
      return WireDataLoss(kWhat, rank + ": a collective's process group names function " +
                                     std::to_string(c.function()) + " or group " +
                                     std::to_string(c.group()) + ", which the summary lacks");
    }
    if (c.total_ns() < 0) {
      return WireDataLoss(kWhat, rank + ": a collective's process group has negative time");
    }
    if (left_out[c.function()]) continue;  // a left-out function's calls go with it
    s.collective_groups.calls.push_back(
        {kept_index[c.function()], c.group(), c.count(), c.total_ns(), c.bytes()});
  }
  if (unknown != nullptr) *unknown = std::move(skipped);
  return s;
}

}  // namespace perftracker
