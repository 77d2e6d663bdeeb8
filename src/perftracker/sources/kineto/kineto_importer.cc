// Kineto / Chrome-trace importer.
//
// Input: what torch.profiler's export_chrome_trace (Kineto) writes, either
//   - the object form {"schemaVersion": 1, "distributedInfo": {...}, "traceEvents": [...], ...}
//     with its keys in any order (old Kineto writes "displayTimeUnit" after the events, new
//     Kineto before them; distributedInfo may come after the events), or
//   - the bare-list form [ {...}, {...} ] of torch 1.13 CPU-only traces (no "cat" at all,
//     pid "CPU functions", integer µs timestamps).
// ImportKinetoFile adds plain / gzip detection by magic bytes (concatenated members too).
//
// Algorithm (a chunked tokenizer in the spirit of Perfetto's ChunkedTraceReader):
//   1. A byte-level state machine walks the document structure outside the events: top-level
//      keys, and values it does not need, which are skipped without building anything. It
//      is resumable at every byte, so chunks may split keys, strings or numbers anywhere.
//      It captures only distributedInfo (its depth-1 members; nested pg_config lists are
//      replaced by a placeholder while streaming, so a 10k-rank job costs nothing) and
//      displayTimeUnit. Of pg_config it keeps each entry's pg_name and backend_config (the
//      entry's scalars, read one entry at a time, its ranks list skipped): the process
//      groups' backends.
//   2. Inside the events array, each event object is parsed in place by KinetoEventParser
//      (the hot path: a hand-written field scanner, one pass, no allocation; it decodes only
//      ph, cat, name, pid, tid, ts, dur and args.{device, stream, correlation, bytes,
//      "In msg nelems", dtype, "Collective name" and the process group's fields}).
//   3. When an event object runs past the end of a chunk, EventCarry copies just that object
//      (tracking depth / string / escape state so it knows where the object ends) and the
//      parser runs again once the object is complete. EventCarry keeps at most
//      kMaxKeptStringBytes of any string, so a 50 MB name costs 32 KB, and gives up (counts
//      the event as malformed) past kMaxCarryBytes of structure. Memory is therefore bounded
//      by the chunk size plus one capped event, whatever the file size.
// Invariant: the emitted events do not depend on where the chunks are split (tests feed every
// split size), except for events over kMaxCarryBytes, which are only parsed when they lie in
// one chunk.
//
// Timestamps: Chrome-trace ts / dur are µs, integers or fractional ("4458676983543.183"); they
// are converted to ns exactly from their decimal digits (not through a double). A document
// whose "displayTimeUnit" is "ns" before the first event has ns timestamps (as Perfetto reads
// it), unless its timestamps carry a fraction: Kineto built with DISPLAY_TRACE_IN_NS writes
// "ns" but keeps µs with 3 decimals. When "ns" only appears after events were read as µs
// (integer timestamps), the import stops and asks for --time-unit. Options override all this.
//
// Category → EventKind (pid/tid may be numbers or strings):
//   cpu_op (legacy "Operator")             kTorchOp
//   user_annotation                         kUserAnnotation
//   python_function                         kPythonCall
//   kernel                                  kGpuKernel on device; "nccl*" kernels kCollective
//                                           (payload = "In msg nelems" × sizeof(dtype); the
//                                           process group from "Process Group Ranks" etc.,
//                                           kineto_process_group.h: Event::group, declared
//                                           once per file through EventSink::OnProcessGroup,
//                                           with its backend from distributedInfo.pg_config;
//                                           again with it when distributedInfo follows)
//   gpu_memcpy                              kMemcpy on device, payload = args.bytes,
//                                           kEventFlagPageable when the name says Pageable,
//                                           kEventFlagDeviceToDevice for DtoD / PtoP copies
//   gpu_memset                              kMemset on device, payload = args.bytes
//   cuda_runtime / cuda_driver              cudaLaunch* / cuLaunch* / *GraphLaunch: kKernelLaunch;
//                                           cuda{Device,Stream,Event}Synchronize,
//                                           cudaStreamWaitEvent (and cu*/hip* twins): kSync;
//                                           anything else kRuntimeCall
//   cuda_sync                               kSync on the device stream it was recorded on
//   gpu_user_annotation                     kUserAnnotation on device; "ProfilerStep#N"
//                                           kIteration on device (the GPU-side twin)
//   host names, for cpu_op / user_annotation / no category:
//     "ProfilerStep#N"                      kIteration, named "ProfilerStep" (no step number)
//     "nccl:*", "gloo:*"                    kCollective (payload from args when present)
//     "Optimizer.step#*"                    kOptimizerStep
//     "enumerate(DataLoader)*", "*DataLoaderIter.__next__*"   kDataLoad
//   no category (torch 1.13 CPU-only): names with "::" or autograd nodes ("AddmmBackward0")
//   kTorchOp, any other name kUserAnnotation (record_function).
//   Skipped and counted: "Trace" (the profiler span), flows (s / f / ac2g / fwdbwd),
//   metadata (M), instants (i / I), counters (C), unknown categories.
// Device events (kernel, gpu_memcpy, gpu_memset, cuda_sync, gpu_user_annotation) go on a
// kDeviceStream track (device = args.device or pid, stream = args.stream or tid); the others
// on a kHostThread track per (pid, tid). B / E pairs are matched per host track with a stack.
// Functions are interned with FunctionTable::kNoParent: nesting is rebuilt by the summarizer.
//
// Rank: KinetoImportOptions::rank, else distributedInfo.rank, else a rank number in the file's
// base name (RankFromFileName), else default_rank (said to be assumed). torch writes
// distributedInfo only with Kineto and an initialized process group: Debian's torch 1.13
// (no Kineto) writes bare lists without it, and torch 2.x writes none for a process without a
// process group; tensorboard_trace_handler's file names ("<host>_<pid>.<time>.pt.trace.json",
// trace_file_name.h) hold no rank either. With allow_missing_rank such a trace imports with
// rank -1 and KinetoTraceInfo::rank_missing, for the caller to number (the diagnosis
// pipeline numbers such files by name); without it, the import fails with one line.
#include "perftracker/sources/kineto/kineto_importer.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <nlohmann/json.hpp>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "perftracker/core/event_time.h"
#include "perftracker/core/input_file.h"
#include "perftracker/core/point_to_point.h"
#include "perftracker/sources/kineto/kineto_event_classifier.h"
#include "perftracker/sources/kineto/kineto_event_parser.h"
#include "perftracker/sources/kineto/kineto_process_group.h"

namespace perftracker {
namespace {

constexpr size_t kMaxKeyBytes = 64;
constexpr size_t kMaxCaptureBytes = 64 * 1024;
// A pg_config entry without its ranks is ~100 bytes; a longer one is not read (its group's
// backend stays unknown).
constexpr size_t kMaxPgEntryBytes = 4096;
constexpr size_t kMaxBackendBytes = 64;
constexpr size_t kMaxOpenSlicesPerTrack = 1024;
// Times beyond kEventTimeLimitNs (core/event_time.h) are bad data: the event is counted as
// malformed and never reaches the sink, so no consumer computes with them.
constexpr std::string_view kTsOutOfRange = "\"ts\" is out of range (beyond 2^62 ns from the epoch)";

inline bool IsWs(char c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; }

std::string DescribeByte(char c) {
  const auto u = static_cast<unsigned char>(c);
  if (u >= 0x20 && u < 0x7f) return std::string("'") + c + "'";
  static constexpr char kHex[] = "0123456789abcdef";
  return std::string("byte 0x") + kHex[u >> 4] + kHex[u & 15];
}

bool IsBinaryByte(char c) {
  const auto u = static_cast<unsigned char>(c);
  return (u < 0x20 && !IsWs(c)) || u == 0x7f;
}

// Collects one event object that spans chunks. It tracks the JSON structure (depth, strings,
// escapes) to know where the object ends, and keeps only what the event parser may need:
// every byte outside strings, and at most kMaxKeptStringBytes of each string, never cutting
// an escape sequence, so that a 50 MB name costs 32 KB. Past kMaxCarryBytes of kept bytes
// the object is marked oversized and dropped (counted as malformed by the caller).
class EventCarry {
 public:
  static constexpr size_t kMaxKeptStringBytes = 32 * 1024;
  static constexpr size_t kMaxCarryBytes = 16 * 1024 * 1024;

  void Start(uint64_t offset) {
    bytes_.clear();
    depth_ = 0;
    in_string_ = false;
    escape_ = false;
    unicode_left_ = 0;
    string_kept_ = 0;
    string_cut_ = false;
    oversized_ = false;
    offset_ = offset;
  }

  // Consumes [p, end); returns one past the object's closing brace, or nullptr when the
  // object continues in the next chunk.
  const char* Consume(const char* p, const char* end) {
    while (p < end) {
      const char c = *p++;
      if (in_string_) {
        const bool unit_start = !escape_ && unicode_left_ == 0;
        if (escape_) {
          escape_ = false;
          if (c == 'u') unicode_left_ = 4;
        } else if (unicode_left_ > 0) {
          --unicode_left_;
        } else if (c == '\\') {
          escape_ = true;
        } else if (c == '"') {
          in_string_ = false;
          Keep(c);
          continue;
        }
        if (!string_cut_ && unit_start && string_kept_ >= kMaxKeptStringBytes) string_cut_ = true;
        if (!string_cut_) {
          Keep(c);
          ++string_kept_;
        }
        continue;
      }
      Keep(c);
      if (c == '"') {
        in_string_ = true;
        string_kept_ = 0;
        string_cut_ = false;
      } else if (c == '{' || c == '[') {
        ++depth_;
      } else if ((c == '}' || c == ']') && --depth_ == 0) {
        return p;
      }
    }
    return nullptr;
  }

  bool oversized() const { return oversized_; }
  const std::string& bytes() const { return bytes_; }
  uint64_t offset() const { return offset_; }
  void Release() {
    bytes_.clear();
    if (bytes_.capacity() > (1u << 20)) bytes_.shrink_to_fit();
  }

 private:
  void Keep(char c) {
    if (oversized_) return;
    if (bytes_.size() >= kMaxCarryBytes) {
      oversized_ = true;
      bytes_.clear();
      bytes_.shrink_to_fit();
      return;
    }
    bytes_.push_back(c);
  }

  std::string bytes_;
  uint32_t depth_ = 0;
  bool in_string_ = false;
  bool escape_ = false;
  uint8_t unicode_left_ = 0;
  bool string_cut_ = false;
  bool oversized_ = false;
  size_t string_kept_ = 0;
  uint64_t offset_ = 0;
};

// Calls fn(key, value) for each member of a flat JSON object (nested values were replaced
// by a placeholder while capturing). String values come without their quotes.
template <typename Fn>
void ForEachFlatMember(std::string_view obj, Fn fn) {
  size_t i = 0;
  auto skip_ws = [&] {
    while (i < obj.size() && IsWs(obj[i])) ++i;
  };
  auto read_string = [&](std::string_view* out) {
    const size_t start = ++i;
    while (i < obj.size() && obj[i] != '"') i += obj[i] == '\\' ? 2 : 1;
    if (i >= obj.size()) return false;
    *out = obj.substr(start, i - start);
    ++i;
    return true;
  };
  skip_ws();
  if (i >= obj.size() || obj[i] != '{') return;
  ++i;
  for (;;) {
    skip_ws();
    if (i >= obj.size() || obj[i] != '"') return;
    std::string_view key;
    if (!read_string(&key)) return;
    skip_ws();
    if (i >= obj.size() || obj[i] != ':') return;
    ++i;
    skip_ws();
    if (i >= obj.size()) return;
    std::string_view value;
    if (obj[i] == '"') {
      if (!read_string(&value)) return;
    } else {
      const size_t start = i;
      while (i < obj.size() && obj[i] != ',' && obj[i] != '}' && !IsWs(obj[i])) ++i;
      value = obj.substr(start, i - start);
    }
    fn(key, value);
    skip_ws();
    if (i >= obj.size() || obj[i] != ',') return;
    ++i;
  }
}

std::optional<int64_t> ParseInt(std::string_view s) {
  int64_t v = 0;
  auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || ptr == s.data()) return std::nullopt;
  return v;
}

}  // namespace

std::optional<int32_t> RankFromFileName(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  std::string base = slash == std::string::npos ? path : path.substr(slash + 1);
  for (char& c : base) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  for (size_t pos = base.find("rank"); pos != std::string::npos; pos = base.find("rank", pos + 1)) {
    size_t i = pos + 4;
    if (i < base.size() && (base[i] == '-' || base[i] == '_')) ++i;
    size_t j = i;
    while (j < base.size() && j - i < 9 && std::isdigit(static_cast<unsigned char>(base[j]))) ++j;
    if (j > i) {
      int32_t rank = 0;
      std::from_chars(base.data() + i, base.data() + j, rank);
      return rank;
    }
  }
  return std::nullopt;
}

class KinetoImporter::Impl {
 public:
  Impl(std::string source, FunctionTable* functions, EventSink* sink, KinetoImportOptions options)
      : source_(std::move(source)), functions_(functions), sink_(sink), options_(options) {}

  Status Parse(const char* data, size_t size);
  StatusOr<KinetoTraceInfo> Finish();

 private:
  enum class State : uint8_t {
    kDocStart,
    kTopKeyOrEnd,
    kTopKey,
    kTopColon,
    kTopValue,
    kTopSkipScalar,
    kTopSkipString,
    kTopSkipContainer,
    kTopAfterValue,
    kEventsElem,
    kEventsAfterElem,
    kEventCarry,
    kDocEnd,
  };
  enum class Capture : uint8_t { kNone, kDistributedInfo, kDisplayTimeUnit };

  struct OpenSlice {
    int64_t start_ns = 0;
    uint64_t payload = 0;
    uint32_t function_id = 0;
    uint32_t correlation = 0;
    EventKind kind = EventKind::kTorchOp;
    uint8_t flags = 0;
    uint16_t group = 0;
    bool keep = false;
  };

  uint64_t Offset(const char* p) const { return chunk_offset_ + static_cast<uint64_t>(p - chunk_); }
  Status Fail(StatusCode code, const std::string& what);
  Status DataError(const std::string& what) { return Fail(StatusCode::kDataLoss, what); }
  Status NotATrace(const std::string& what) {
    return Fail(StatusCode::kInvalidArgument, "not a trace: " + what);
  }

  Status DocStart(char c, const char* p);
  Status TopValue(const char* p);
  const char* StartEvent(const char* p, const char* end);
  const char* ContinueCarry(const char* p, const char* end);
  void EndEventsArray();
  Status FinishCapture();

  void HandleEvent(const KinetoRawEvent& ev, uint64_t offset);
  // When `ev` (its JSON object [begin, end)) is the host-load metadata event: its args'
  // numbers (rare: one per trace, so parsed as a whole instead of on the hot path). Every
  // other event returns at once.
  void ReadHostLoad(const KinetoRawEvent& ev, const char* begin, const char* end);
  // end_ns: the "E" event's time, none when it is out of range.
  void HandleEnd(const KinetoRawEvent& ev, std::optional<int64_t> end_ns, uint64_t offset);
  bool DecideUnit(const TraceNumber& ts);
  uint32_t TrackFor(const KinetoRawEvent& ev, bool on_device);
  static uint8_t FlagsOf(const KinetoRawEvent& ev, const KinetoEventClass& c);
  uint32_t FunctionOf(const KinetoEventClass& c, uint8_t flags);
  std::string directed_name_;  // scratch for FunctionOf
  // A collective's process group: its Event::group, declared to the sink on first sight.
  uint16_t GroupOf(const KinetoRawEvent& ev, const KinetoEventClass& c);
  std::unordered_map<std::string, uint16_t> group_ids_;
  // Until distributedInfo is read (it may follow the events): the groups declared so far,
  // declared again with their backends once it is.
  bool saw_distributed_info_ = false;
  std::vector<ProcessGroupInfo> declared_before_info_;
  uint64_t PayloadOf(const KinetoRawEvent& ev, const KinetoEventClass& c) const;
  void Malformed(uint64_t offset, const std::string& what, std::string_view name = {});

  const std::string source_;
  FunctionTable* const functions_;
  EventSink* const sink_;
  const KinetoImportOptions options_;

  Status error_;
  State state_ = State::kDocStart;
  const char* chunk_ = nullptr;
  uint64_t chunk_offset_ = 0;
  uint64_t bytes_read_ = 0;

  // Top-level object.
  uint64_t bom_matched_ = 0;
  bool bare_list_ = false;
  bool saw_trace_events_ = false;
  bool top_first_member_ = true;
  std::string key_;
  bool key_escape_ = false;
  Capture capture_ = Capture::kNone;
  std::string capture_buf_;
  bool capture_overflow_ = false;
  uint32_t skip_depth_ = 0;
  bool skip_in_string_ = false;
  bool skip_escape_ = false;
  // distributedInfo.pg_config: each group's backend_config by its pg_name ("2" ->
  // "cpu:gloo,cuda:gloo"). pg_entry_ is the entry being read (an object at depth 3 of the
  // skipped value, its nested lists replaced by a 0), pg_entry_open_ while it is.
  std::unordered_map<std::string, std::string> pg_backends_;
  std::string pg_entry_;
  bool pg_entry_open_ = false;
  void ReadPgEntry();

  // Events.
  KinetoEventParser parser_;
  KinetoRawEvent raw_;
  EventCarry carry_;
  uint64_t elements_ = 0;  // elements of the events array seen so far

  // Time unit.
  bool unit_decided_ = false;
  bool micros_ = true;
  bool first_ts_fractional_ = false;
  bool display_ns_ = false;
  uint64_t first_event_offset_ = 0;

  // Tracks.
  struct NumericTrack {
    bool valid = false;
    int64_t first = 0;
    int64_t second = 0;
    uint32_t id = 0;
  };
  std::unordered_map<std::string, uint32_t> tracks_;
  std::string track_key_;
  NumericTrack last_numeric_[2];  // [0] host, [1] device
  std::unordered_map<uint32_t, std::vector<OpenSlice>> open_slices_;

  // The perftracker_host_load metadata event's args (0: none).
  double load_cpu_ns_ = 0;
  double load_run_delay_ns_ = 0;
  double load_wall_ns_ = 0;
  double load_steal_fraction_ = -1;

  // distributedInfo.
  std::optional<int32_t> dist_rank_;
  int32_t world_size_ = -1;
  std::string backend_;

  // Statistics.
  uint64_t emitted_ = 0;
  uint64_t skipped_ = 0;
  uint64_t malformed_ = 0;
  uint64_t names_truncated_ = 0;
  std::string first_malformed_;
};

Status KinetoImporter::Impl::Fail(StatusCode code, const std::string& what) {
  const std::string msg = source_ + ": " + what;
  switch (code) {
    case StatusCode::kNotFound:
      error_ = Status::NotFound(msg);
      break;
    case StatusCode::kDataLoss:
      error_ = Status::DataLoss(msg);
      break;
    case StatusCode::kInternal:
      error_ = Status::Internal(msg);
      break;
    default:
      error_ = Status::InvalidArgument(msg);
      break;
  }
  return error_;
}

void KinetoImporter::Impl::Malformed(uint64_t offset, const std::string& what,
                                     std::string_view name) {
  ++malformed_;
  if (!first_malformed_.empty()) return;
  first_malformed_ = "event at byte " + std::to_string(offset);
  if (!name.empty()) {
    first_malformed_ += " (\"";
    first_malformed_ += name.substr(0, 80);
    first_malformed_ += "\")";
  }
  first_malformed_ += ": " + what;
}

Status KinetoImporter::Impl::DocStart(char c, const char* p) {
  const std::string where = " at byte " + std::to_string(Offset(p));
  const std::string expected =
      "expected an object with a \"traceEvents\" array (what torch.profiler's "
      "export_chrome_trace writes)";
  if (c == '{') {
    state_ = State::kTopKeyOrEnd;
    return Status::Ok();
  }
  if (c == '[') {
    bare_list_ = true;
    saw_trace_events_ = true;
    state_ = State::kEventsElem;
    return Status::Ok();
  }
  if (c == '-' || (c >= '0' && c <= '9'))
    return NotATrace("the document is a JSON number; " + expected);
  if (c == '"') return NotATrace("the document is a JSON string; " + expected);
  if (IsBinaryByte(c) || static_cast<unsigned char>(c) >= 0x80) {
    return NotATrace("binary data (" + DescribeByte(c) + where +
                     "), not JSON text; only .json and gzip-compressed .json.gz are read");
  }
  return NotATrace("not JSON: the text starts with " + DescribeByte(c) + where +
                   " where a JSON document starts with '{' or '['; " + expected);
}

Status KinetoImporter::Impl::TopValue(const char* p) {
  const char c = *p;
  if (key_ == "traceEvents") {
    if (c != '[') {
      return NotATrace("\"traceEvents\" is not an array (found " + DescribeByte(c) + " at byte " +
                       std::to_string(Offset(p)) + ")");
    }
    saw_trace_events_ = true;
    elements_ = 0;
    state_ = State::kEventsElem;
    return Status::Ok();
  }
  capture_ = key_ == "distributedInfo"   ? Capture::kDistributedInfo
             : key_ == "displayTimeUnit" ? Capture::kDisplayTimeUnit
                                         : Capture::kNone;
  capture_buf_.clear();
  capture_overflow_ = false;
  if (c == '"') {
    state_ = State::kTopSkipString;
    skip_escape_ = false;
  } else if (c == '{' || c == '[') {
    state_ = State::kTopSkipContainer;
    skip_depth_ = 0;
    skip_in_string_ = false;
    skip_escape_ = false;
  } else if (c == '-' || (c >= '0' && c <= '9') || c == 't' || c == 'f' || c == 'n') {
    state_ = State::kTopSkipScalar;
  } else {
    return DataError("invalid JSON at byte " + std::to_string(Offset(p)) + ": " + DescribeByte(c) +
                     " is not a value (after \"" + key_ + "\":)");
  }
  return Status::Ok();
}

void KinetoImporter::Impl::ReadPgEntry() {
  std::string_view name, backend;
  ForEachFlatMember(pg_entry_, [&](std::string_view key, std::string_view value) {
    if (key == "pg_name") name = value;
    if (key == "backend_config") backend = value;
  });
  if (name.empty() || backend.empty() || pg_backends_.size() >= UINT16_MAX) return;
  pg_backends_[std::string(name.substr(0, kMaxKeyBytes))] =
      std::string(backend.substr(0, kMaxBackendBytes));
}

Status KinetoImporter::Impl::FinishCapture() {
  if (capture_ == Capture::kDistributedInfo && !saw_distributed_info_) {
    saw_distributed_info_ = true;
    for (ProcessGroupInfo& g : declared_before_info_) {
      const auto it = pg_backends_.find(g.name);
      if (it == pg_backends_.end()) continue;
      g.backend = it->second;
      sink_->OnProcessGroup(g);  // replaces the one declared without a backend
    }
    declared_before_info_ = {};
  }
  if (capture_overflow_) return Status::Ok();
  if (capture_ == Capture::kDisplayTimeUnit) {
    if (capture_buf_ == "ns") {
      if (options_.time_unit == TraceTimeUnit::kAuto && unit_decided_ && !first_ts_fractional_) {
        return Fail(StatusCode::kInvalidArgument,
                    "\"displayTimeUnit\": \"ns\" comes after the events (the first one at byte " +
                        std::to_string(first_event_offset_) +
                        "), which were already read as microseconds; pass --time-unit ns if the "
                        "timestamps are nanoseconds, or --time-unit us if they are microseconds");
      }
      display_ns_ = true;
    }
  } else if (capture_ == Capture::kDistributedInfo) {
    ForEachFlatMember(capture_buf_, [&](std::string_view key, std::string_view value) {
      if (key == "rank") {
        if (auto v = ParseInt(value); v && *v >= 0 && *v <= INT32_MAX)
          dist_rank_ = static_cast<int32_t>(*v);
      } else if (key == "world_size") {
        if (auto v = ParseInt(value); v && *v > 0 && *v <= INT32_MAX)
          world_size_ = static_cast<int32_t>(*v);
      } else if (key == "backend") {
        backend_ = std::string(value.substr(0, 64));
      }
    });
  }
  capture_ = Capture::kNone;
  capture_buf_.clear();
  return Status::Ok();
}

void KinetoImporter::Impl::EndEventsArray() {
  state_ = bare_list_ ? State::kDocEnd : State::kTopAfterValue;
}

const char* KinetoImporter::Impl::StartEvent(const char* p, const char* end) {
  ++elements_;
  if (parser_.Parse(p, end, &raw_) == KinetoEventParser::Result::kOk) {
    ReadHostLoad(raw_, p, parser_.object_end());
    HandleEvent(raw_, Offset(p));
    state_ = State::kEventsAfterElem;
    return parser_.object_end();
  }
  // Incomplete (the object runs past this chunk) or invalid: let EventCarry find its end.
  carry_.Start(Offset(p));
  state_ = State::kEventCarry;
  return ContinueCarry(p, end);
}

const char* KinetoImporter::Impl::ContinueCarry(const char* p, const char* end) {
  const char* object_end = carry_.Consume(p, end);
  if (object_end == nullptr) return end;
  state_ = State::kEventsAfterElem;
  if (carry_.oversized()) {
    Malformed(carry_.offset(), "event larger than " +
                                   std::to_string(EventCarry::kMaxCarryBytes >> 20) +
                                   " MiB after capping its strings; skipped");
  } else {
    const std::string& bytes = carry_.bytes();
    const auto result = parser_.Parse(bytes.data(), bytes.data() + bytes.size(), &raw_);
    if (result == KinetoEventParser::Result::kOk) {
      ReadHostLoad(raw_, bytes.data(), parser_.object_end());
      HandleEvent(raw_, carry_.offset());
    } else if (result == KinetoEventParser::Result::kSyntaxError) {
      Malformed(carry_.offset(), std::string("invalid JSON in the event at its byte ") +
                                     std::to_string(parser_.error_offset()) + ": " +
                                     parser_.error());
    } else {
      Malformed(carry_.offset(), "invalid JSON in the event (it ends early)");
    }
  }
  carry_.Release();
  return object_end;
}

bool KinetoImporter::Impl::DecideUnit(const TraceNumber& ts) {
  if (unit_decided_) return micros_;
  unit_decided_ = true;
  first_ts_fractional_ = ts.has_fraction;
  switch (options_.time_unit) {
    case TraceTimeUnit::kMicroseconds:
      micros_ = true;
      break;
    case TraceTimeUnit::kNanoseconds:
      micros_ = false;
      break;
    case TraceTimeUnit::kAuto:
      micros_ = !display_ns_ || ts.has_fraction;
      break;
  }
  return micros_;
}

uint32_t KinetoImporter::Impl::TrackFor(const KinetoRawEvent& ev, bool on_device) {
  // A device track is (device, stream), a host track (pid, tid); either id may be a string.
  int32_t device = -1;
  TraceId first = ev.pid;
  TraceId second = ev.tid;
  if (on_device) {
    if (ev.device.valid) {
      device = static_cast<int32_t>(std::min<uint64_t>(ev.device.ToUnsigned(), INT32_MAX));
    } else if (ev.pid.present && !ev.pid.is_string && ev.pid.number >= 0) {
      device = static_cast<int32_t>(std::min<int64_t>(ev.pid.number, INT32_MAX));
    }
    first = TraceId{true, false, device, {}};
    if (ev.stream.valid)
      second = TraceId{true, false, static_cast<int64_t>(ev.stream.ToUnsigned()), {}};
  }
  // Fast path: numeric ids equal to the previous event's on the same side (host / device).
  const bool numeric = first.present && !first.is_string && second.present && !second.is_string;
  NumericTrack& cached = last_numeric_[on_device ? 1 : 0];
  if (numeric && cached.valid && cached.first == first.number && cached.second == second.number) {
    return cached.id;
  }
  char buf[32];
  auto append_id = [&](const TraceId& id) {
    if (!id.present) {
      track_key_ += '-';
    } else if (id.is_string) {
      track_key_ += 's';
      track_key_ += id.text;
    } else {
      track_key_ += 'n';
      auto [ptr, ec] = std::to_chars(buf, buf + sizeof(buf), id.number);
      track_key_.append(buf, ptr);
    }
  };
  track_key_.assign(1, on_device ? 'D' : 'H');
  append_id(first);
  const size_t second_at = track_key_.size() + 1;
  track_key_ += '|';
  append_id(second);
  auto [it, inserted] = tracks_.try_emplace(track_key_, static_cast<uint32_t>(tracks_.size()));
  if (inserted) {
    TrackInfo info;
    info.track_id = it->second;
    info.kind = on_device ? TrackKind::kDeviceStream : TrackKind::kHostThread;
    info.device = device;
    // The second id is "n<number>", "s<string>" or "-".
    const std::string_view id = std::string_view(track_key_).substr(second_at);
    const std::string text = id.size() > 1 ? std::string(id.substr(1)) : std::string("?");
    if (on_device) {
      info.name = "stream " + text;
    } else {
      info.name = id.starts_with('s') ? text : "thread " + text;
    }
    sink_->OnTrack(info);
  }
  if (numeric) cached = NumericTrack{true, first.number, second.number, it->second};
  return it->second;
}

uint64_t KinetoImporter::Impl::PayloadOf(const KinetoRawEvent& ev,
                                         const KinetoEventClass& c) const {
  if (c.payload_bytes) return ev.bytes.ToUnsigned();
  if (c.payload_nelems && ev.in_msg_nelems.valid) {
    return ev.in_msg_nelems.ToUnsigned() * KinetoDtypeSize(ev.dtype);
  }
  return 0;
}

uint16_t KinetoImporter::Impl::GroupOf(const KinetoRawEvent& ev, const KinetoEventClass& c) {
  if (c.kind != EventKind::kCollective || (ev.pg_name.empty() && ev.pg_ranks.empty())) return 0;
  std::optional<ProcessGroupInfo> group = KinetoProcessGroupOf(ev);
  if (!group) return 0;
  std::string key = group->name;
  key += '\x1f';
  for (int32_t r : group->ranks) key += std::to_string(r) + ",";
  key += '\x1f' + std::to_string(group->size);
  const auto it = group_ids_.find(key);
  if (it != group_ids_.end()) return it->second;
  if (group_ids_.size() >= UINT16_MAX) return 0;  // ids run out: the rest are not known
  group->id = static_cast<uint16_t>(group_ids_.size() + 1);
  group_ids_.emplace(std::move(key), group->id);
  if (const auto b = pg_backends_.find(group->name); b != pg_backends_.end()) {
    group->backend = b->second;
  }
  if (!saw_distributed_info_ && !bare_list_) declared_before_info_.push_back(*group);
  sink_->OnProcessGroup(*group);
  return group->id;
}

// NCCL's fused SendRecv kernel runs sends and receives under one name: with the direction
// its metadata gives, they are two functions ("... [send]", "... [recv]"), so that a
// receive's wait is never averaged with sends.
uint32_t KinetoImporter::Impl::FunctionOf(const KinetoEventClass& c, uint8_t flags) {
  const uint8_t direction = flags & (kEventFlagSend | kEventFlagReceive);
  if (direction == 0 || direction == (kEventFlagSend | kEventFlagReceive) ||
      PointToPointOf(c.name) != PointToPoint::kSendReceive) {
    return functions_->Intern(c.kind, c.name);
  }
  directed_name_.assign(c.name);
  directed_name_ += direction == kEventFlagSend ? " [send]" : " [recv]";
  return functions_->Intern(c.kind, directed_name_);
}

// The class's flags, and a point-to-point call's direction from its "Collective name"
// (NCCL's SendRecv kernel serves both; the metadata says which).
uint8_t KinetoImporter::Impl::FlagsOf(const KinetoRawEvent& ev, const KinetoEventClass& c) {
  return c.flags | (ev.collective.empty() ? 0 : PointToPointFlagsOfCollective(ev.collective));
}

void KinetoImporter::Impl::ReadHostLoad(const KinetoRawEvent& ev, const char* begin,
                                        const char* end) {
  if (ev.ph != 'M' || ev.name != kHostLoadEventName) return;
  const nlohmann::json event = nlohmann::json::parse(begin, end, nullptr, false);
  if (event.is_discarded() || !event.is_object()) return;
  const auto args = event.find("args");
  if (args == event.end() || !args->is_object()) return;
  const auto number = [&](const char* key) {
    const auto it = args->find(key);
    return it != args->end() && it->is_number() && it->get<double>() >= 0 ? it->get<double>()
                                                                          : -1.0;
  };
  const double cpu = number("cpu_ns");
  const double delay = number("run_delay_ns");
  const double wall = number("wall_ns");
  if (cpu < 0 || delay < 0 || wall <= 0) return;  // incomplete: as if absent
  load_cpu_ns_ = cpu;
  load_run_delay_ns_ = delay;
  load_wall_ns_ = wall;
  // Optional; a fraction of 1 or more is not one (every CPU second stolen).
  const double steal = number("steal_fraction");
  load_steal_fraction_ = steal < 1 ? steal : -1;
}

void KinetoImporter::Impl::HandleEvent(const KinetoRawEvent& ev, uint64_t offset) {
  switch (ev.ph) {
    case 'X':
    case 'B':
    case 'E':
      break;
    case 0:
      Malformed(offset, "no \"ph\"", ev.name);
      return;
    default:
      ++skipped_;
      return;
  }
  if (!ev.ts.present) {
    Malformed(offset, "no \"ts\"", ev.name);
    return;
  }
  if (!ev.ts.valid) {
    Malformed(offset, "\"ts\" is not a number", ev.name);
    return;
  }
  if (!unit_decided_) first_event_offset_ = offset;
  const bool micros = DecideUnit(ev.ts);
  int64_t ts_ns = 0;
  const bool ts_in_range = ev.ts.ToNanoseconds(micros, &ts_ns) && TimeInRange(ts_ns);
  if (ev.ph == 'E') {
    // Out of range, it still closes its "B" (the pair is one malformed event).
    HandleEnd(ev, ts_in_range ? std::optional<int64_t>(ts_ns) : std::nullopt, offset);
    return;
  }
  if (!ts_in_range) {
    Malformed(offset, std::string(kTsOutOfRange), ev.name);
    return;
  }
  if (!ev.has_name) {
    Malformed(offset, "no \"name\" (or it is not a string)");
    return;
  }
  const KinetoEventClass c = ClassifyKinetoEvent(ev.has_cat, ev.cat, ev.name);
  if (ev.ph == 'B') {
    const uint32_t track = TrackFor(ev, false);
    std::vector<OpenSlice>& stack = open_slices_[track];
    if (stack.size() >= kMaxOpenSlicesPerTrack) {
      Malformed(offset,
                "more than " + std::to_string(kMaxOpenSlicesPerTrack) +
                    " nested \"B\" events without \"E\" on one thread",
                ev.name);
      return;
    }
    OpenSlice s;
    s.keep = c.keep;
    if (c.keep) {
      s.start_ns = ts_ns;
      s.kind = c.kind;
      s.flags = FlagsOf(ev, c);
      s.payload = PayloadOf(ev, c);
      s.correlation = static_cast<uint32_t>(ev.correlation.ToUnsigned());
      s.function_id = FunctionOf(c, s.flags);
      s.group = GroupOf(ev, c);
      if (ev.name_truncated) ++names_truncated_;
    }
    stack.push_back(s);
    return;
  }
  if (!c.keep) {
    ++skipped_;
    return;
  }
  if (!ev.dur.present) {
    Malformed(offset, "complete event (\"ph\": \"X\") without \"dur\"", ev.name);
    return;
  }
  int64_t dur_ns = 0;
  if (!ev.dur.valid || !ev.dur.ToNanoseconds(micros, &dur_ns)) {
    Malformed(offset, "\"dur\" is not a number", ev.name);
    return;
  }
  if (dur_ns < 0) {
    Malformed(offset, "negative \"dur\"", ev.name);
    return;
  }
  int64_t end_ns = 0;
  if (__builtin_add_overflow(ts_ns, dur_ns, &end_ns) || !TimeInRange(end_ns)) {
    Malformed(offset, "\"ts\" + \"dur\" is out of range (beyond 2^62 ns from the epoch)", ev.name);
    return;
  }
  Event e;
  e.start_ns = ts_ns;
  e.end_ns = end_ns;
  e.payload = PayloadOf(ev, c);
  e.correlation = static_cast<uint32_t>(ev.correlation.ToUnsigned());
  e.kind = c.kind;
  e.flags = FlagsOf(ev, c);
  e.track_id = TrackFor(ev, c.on_device);
  e.function_id = FunctionOf(c, e.flags);
  e.group = GroupOf(ev, c);
  if (ev.name_truncated) ++names_truncated_;
  sink_->OnEvent(e);
  ++emitted_;
}

void KinetoImporter::Impl::HandleEnd(const KinetoRawEvent& ev, std::optional<int64_t> end_ns,
                                     uint64_t offset) {
  const uint32_t track = TrackFor(ev, false);
  auto it = open_slices_.find(track);
  if (it == open_slices_.end() || it->second.empty()) {
    Malformed(offset, "\"E\" event without a matching \"B\" on its thread", ev.name);
    return;
  }
  const OpenSlice s = it->second.back();
  it->second.pop_back();
  if (!end_ns) {
    Malformed(offset, std::string(kTsOutOfRange), ev.name);
    return;
  }
  const int64_t ts_ns = *end_ns;
  if (!s.keep) {
    ++skipped_;
    return;
  }
  if (ts_ns < s.start_ns) {
    Malformed(offset, "\"E\" event before its \"B\"", ev.name);
    return;
  }
  Event e;
  e.start_ns = s.start_ns;
  e.end_ns = ts_ns;
  e.payload = s.payload;
  e.correlation = s.correlation;
  e.kind = s.kind;
  e.flags = s.flags;
  e.track_id = track;
  e.function_id = s.function_id;
  e.group = s.group;
  sink_->OnEvent(e);
  ++emitted_;
}

Status KinetoImporter::Impl::Parse(const char* data, size_t size) {
  if (!error_.ok()) return error_;
  chunk_ = data;
  chunk_offset_ = bytes_read_;
  bytes_read_ += size;
  const char* p = data;
  const char* const end = data + size;
  while (p < end) {
    switch (state_) {
      case State::kDocStart: {
        // A UTF-8 byte order mark, possibly split across chunks.
        static constexpr unsigned char kBom[] = {0xEF, 0xBB, 0xBF};
        if (bom_matched_ < 3 && Offset(p) == bom_matched_ &&
            static_cast<unsigned char>(*p) == kBom[bom_matched_]) {
          ++bom_matched_;
          ++p;
          continue;
        }
        while (p < end && IsWs(*p)) ++p;
        if (p == end) break;
        PERFTRACKER_RETURN_IF_ERROR(DocStart(*p, p));
        ++p;
        break;
      }
      case State::kTopKeyOrEnd: {
        while (p < end && IsWs(*p)) ++p;
        if (p == end) break;
        if (*p == '"') {
          key_.clear();
          key_escape_ = false;
          state_ = State::kTopKey;
        } else if (*p == '}') {
          state_ = State::kDocEnd;
        } else {
          return DataError("invalid JSON at byte " + std::to_string(Offset(p)) +
                           ": expected a key, found " + DescribeByte(*p));
        }
        ++p;
        break;
      }
      case State::kTopKey: {
        while (p < end) {
          const char c = *p++;
          if (key_escape_) {
            key_escape_ = false;
          } else if (c == '\\') {
            key_escape_ = true;
          } else if (c == '"') {
            state_ = State::kTopColon;
            break;
          }
          if (key_.size() < kMaxKeyBytes) key_ += c;
        }
        break;
      }
      case State::kTopColon: {
        while (p < end && IsWs(*p)) ++p;
        if (p == end) break;
        if (*p != ':') {
          return DataError("invalid JSON at byte " + std::to_string(Offset(p)) +
                           ": expected ':' after \"" + key_ + "\", found " + DescribeByte(*p));
        }
        ++p;
        state_ = State::kTopValue;
        break;
      }
      case State::kTopValue: {
        while (p < end && IsWs(*p)) ++p;
        if (p == end) break;
        PERFTRACKER_RETURN_IF_ERROR(TopValue(p));
        // Containers and scalars are consumed by their skip state from their first byte.
        if (state_ == State::kEventsElem || state_ == State::kTopSkipString) ++p;
        break;
      }
      case State::kTopSkipScalar: {
        while (p < end && *p != ',' && *p != '}' && *p != ']' && !IsWs(*p)) ++p;
        if (p < end) state_ = State::kTopAfterValue;
        break;
      }
      case State::kTopSkipString: {
        while (p < end) {
          const char c = *p++;
          if (skip_escape_) {
            skip_escape_ = false;
          } else if (c == '\\') {
            skip_escape_ = true;
          } else if (c == '"') {
            state_ = State::kTopAfterValue;
            PERFTRACKER_RETURN_IF_ERROR(FinishCapture());
            break;
          }
          if (capture_ != Capture::kNone && !capture_overflow_) {
            if (capture_buf_.size() >= kMaxCaptureBytes) {
              capture_overflow_ = true;
            } else {
              capture_buf_ += c;
            }
          }
        }
        break;
      }
      case State::kTopSkipContainer: {
        // Captures (for distributedInfo) the bytes at depth <= 1, with nested containers
        // replaced by a 0, so the capture stays small whatever pg_config holds; and each
        // object at depth 3 (a pg_config entry) the same way, one at a time (ReadPgEntry).
        const bool capture = capture_ == Capture::kDistributedInfo;
        while (p < end) {
          const char c = *p++;
          const bool keep = capture && !capture_overflow_;
          const bool entry = capture && pg_entry_open_ && skip_depth_ == 3;
          if (skip_in_string_) {
            if (skip_escape_) {
              skip_escape_ = false;
            } else if (c == '\\') {
              skip_escape_ = true;
            } else if (c == '"') {
              skip_in_string_ = false;
            }
            if (keep && skip_depth_ <= 1) capture_buf_ += c;
            if (entry) pg_entry_ += c;
          } else if (c == '"') {
            skip_in_string_ = true;
            if (keep && skip_depth_ <= 1) capture_buf_ += c;
            if (entry) pg_entry_ += c;
          } else if (c == '{' || c == '[') {
            if (keep && skip_depth_ == 0) capture_buf_ += c;
            if (keep && skip_depth_ == 1) capture_buf_ += '0';
            if (entry) pg_entry_ += '0';
            if (capture && skip_depth_ == 2 && c == '{') {
              pg_entry_open_ = true;
              pg_entry_.assign(1, c);
            }
            ++skip_depth_;
          } else if (c == '}' || c == ']') {
            --skip_depth_;
            if (keep && skip_depth_ == 0) capture_buf_ += c;
            if (capture && pg_entry_open_ && skip_depth_ == 2) {
              pg_entry_ += c;
              ReadPgEntry();
              pg_entry_open_ = false;
            }
            if (skip_depth_ == 0) {
              state_ = State::kTopAfterValue;
              PERFTRACKER_RETURN_IF_ERROR(FinishCapture());
              break;
            }
          } else {
            if (keep && skip_depth_ <= 1) capture_buf_ += c;
            if (entry) pg_entry_ += c;
          }
          if (keep && capture_buf_.size() > kMaxCaptureBytes) capture_overflow_ = true;
          if (pg_entry_open_ && pg_entry_.size() > kMaxPgEntryBytes) pg_entry_open_ = false;
        }
        break;
      }
      case State::kTopAfterValue: {
        while (p < end && IsWs(*p)) ++p;
        if (p == end) break;
        if (*p == ',') {
          state_ = State::kTopKeyOrEnd;
          top_first_member_ = false;
        } else if (*p == '}') {
          state_ = State::kDocEnd;
        } else {
          return DataError("invalid JSON at byte " + std::to_string(Offset(p)) +
                           ": expected ',' or '}' after the value of \"" + key_ + "\", found " +
                           DescribeByte(*p));
        }
        ++p;
        break;
      }
      case State::kEventsElem: {
        while (p < end && IsWs(*p)) ++p;
        if (p == end) break;
        if (*p == '{') {
          p = StartEvent(p, end);
        } else if (*p == ']') {
          EndEventsArray();
          ++p;
        } else {
          const std::string where = bare_list_ ? "the top-level list" : "\"traceEvents\"";
          return NotATrace("element " + std::to_string(elements_) + " of " + where +
                           " is not an event object (found " + DescribeByte(*p) + " at byte " +
                           std::to_string(Offset(p)) + ")");
        }
        break;
      }
      case State::kEventsAfterElem: {
        // The hot loop: between events there is only ", " and whitespace.
        while (p < end && IsWs(*p)) ++p;
        if (p == end) break;
        if (*p == ',') {
          ++p;
          while (p < end && IsWs(*p)) ++p;
          if (p < end && *p == '{') {
            p = StartEvent(p, end);
          } else {
            state_ = State::kEventsElem;
          }
        } else if (*p == ']') {
          EndEventsArray();
          ++p;
        } else {
          return DataError("invalid JSON at byte " + std::to_string(Offset(p)) +
                           ": expected ',' or ']' after event " + std::to_string(elements_ - 1) +
                           ", found " + DescribeByte(*p));
        }
        break;
      }
      case State::kEventCarry:
        p = ContinueCarry(p, end);
        break;
      case State::kDocEnd: {
        while (p < end && (IsWs(*p) || *p == '\0')) ++p;
        if (p == end) break;
        return DataError("unexpected data after the end of the JSON document at byte " +
                         std::to_string(Offset(p)) + " (" + DescribeByte(*p) + ")");
      }
    }
  }
  return Status::Ok();
}

StatusOr<KinetoTraceInfo> KinetoImporter::Impl::Finish() {
  if (!error_.ok()) return error_;
  const std::string at = std::to_string(bytes_read_);
  switch (state_) {
    case State::kDocEnd:
      break;
    case State::kDocStart:
      return Fail(StatusCode::kInvalidArgument,
                  bytes_read_ == 0 ? "the file is empty (0 bytes): not a trace"
                                   : "not a trace: the file holds only whitespace");
    case State::kEventsElem:
    case State::kEventsAfterElem:
    case State::kEventCarry: {
      std::string what =
          "truncated at byte " + at + ": the file ends inside " +
          (bare_list_ ? std::string("the list of events") : std::string("traceEvents"));
      if (state_ == State::kEventCarry) {
        what += " (in the event that starts at byte " + std::to_string(carry_.offset()) + ")";
      }
      what += " after " + std::to_string(emitted_ + skipped_ + malformed_) +
              " events; was the profiler killed while writing?";
      return DataError(what);
    }
    default:
      return DataError("truncated at byte " + at + ": the file ends inside the top-level object" +
                       (saw_trace_events_ ? std::string(" (after traceEvents)")
                                          : std::string(" before any \"traceEvents\"")) +
                       "; was the profiler killed while writing?");
  }
  if (!saw_trace_events_) {
    return NotATrace(
        "the top-level object has no \"traceEvents\" array (expected what torch.profiler's "
        "export_chrome_trace writes)");
  }
  for (const auto& [track, stack] : open_slices_) {
    for (const OpenSlice& s : stack) {
      (void)s;
      Malformed(bytes_read_,
                "\"B\" event without a matching \"E\" on track " + std::to_string(track));
    }
  }
  KinetoTraceInfo info;
  if (options_.rank) {
    info.rank = *options_.rank;
  } else if (dist_rank_) {
    info.rank = *dist_rank_;
  } else if (auto r = RankFromFileName(source_)) {
    info.rank = *r;
  } else if (options_.default_rank) {
    info.rank = *options_.default_rank;
    info.rank_assumed = true;
  } else if (options_.allow_missing_rank) {
    info.rank = -1;
    info.rank_missing = true;
  } else {
    return Fail(StatusCode::kInvalidArgument,
                "cannot tell which rank wrote this trace: it has no distributedInfo.rank and no "
                "rank number in its name; when several trace files are diagnosed together, "
                "each must say its rank: rename it to include it (e.g. trace_rank3.json)");
  }
  info.world_size = world_size_;
  info.backend = backend_;
  info.bytes_read = bytes_read_;
  info.events_emitted = emitted_;
  info.events_skipped = skipped_;
  info.events_malformed = malformed_;
  info.first_malformed = first_malformed_;
  info.names_truncated = names_truncated_;
  info.tracks = tracks_.size();
  info.time_unit = micros_ ? TraceTimeUnit::kMicroseconds : TraceTimeUnit::kNanoseconds;
  info.bare_list = bare_list_;
  info.load_cpu_ns = load_cpu_ns_;
  info.load_run_delay_ns = load_run_delay_ns_;
  info.load_wall_ns = load_wall_ns_;
  info.load_steal_fraction = load_steal_fraction_;
  return info;
}

KinetoImporter::KinetoImporter(std::string source_name, FunctionTable* functions, EventSink* sink,
                               KinetoImportOptions options)
    : impl_(std::make_unique<Impl>(std::move(source_name), functions, sink, options)) {}

KinetoImporter::~KinetoImporter() = default;

Status KinetoImporter::Parse(const char* data, size_t size) { return impl_->Parse(data, size); }

StatusOr<KinetoTraceInfo> KinetoImporter::Finish() { return impl_->Finish(); }

// ---------------------------------------------------------------------------------------
// Files.

namespace {

constexpr size_t kReadChunkBytes = 1 << 20;
constexpr size_t kInflateChunkBytes = 1 << 20;

// A read / inflate buffer in an anonymous mapping of its own, not from malloc. glibc raises
// its mmap threshold to the size of any mapped block that is freed (and its trim threshold
// to twice that): a 1 MiB std::vector freed at the end of the import moved every later block
// of 128 KiB to 1 MiB into the brk heap, among the pages the import freed. The offline
// summary's per-path array is such a block on a file of ~1,000-8,700 call paths (120 bytes a
// path): reserved whole after the events are freed, it is meant to be a mapping of its own
// (summary/window_summarizer.cc, Finish). In the heap it raised resnet_act_checkpoint's peak
// (docs/performance.md, "The allocator's thresholds"). Pages are resident once written.
class ChunkBuffer {
 public:
  explicit ChunkBuffer(size_t size) : size_(size) {
    void* p = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
      fallback_.resize(size);  // no mapping: the heap, as before
      data_ = fallback_.data();
    } else {
      data_ = static_cast<char*>(p);
      mapped_ = true;
    }
  }
  ~ChunkBuffer() {
    if (mapped_) ::munmap(data_, size_);
  }
  ChunkBuffer(const ChunkBuffer&) = delete;
  ChunkBuffer& operator=(const ChunkBuffer&) = delete;

  char* data() { return data_; }
  size_t size() const { return size_; }
  char& operator[](size_t i) { return data_[i]; }

 private:
  size_t size_;
  char* data_ = nullptr;
  bool mapped_ = false;
  std::vector<char> fallback_;
};

class FileReader {
 public:
  explicit FileReader(int fd) : fd_(fd) {}
  ~FileReader() {
    if (fd_ >= 0) ::close(fd_);
  }
  FileReader(const FileReader&) = delete;
  FileReader& operator=(const FileReader&) = delete;

  // Fills `buf` as far as the file allows; returns bytes read, or -1 with errno set.
  ssize_t Read(char* buf, size_t size) {
    size_t got = 0;
    while (got < size) {
      const ssize_t n = ::read(fd_, buf + got, size - got);
      if (n < 0) {
        if (errno == EINTR) continue;
        return -1;
      }
      if (n == 0) break;
      got += static_cast<size_t>(n);
    }
    return static_cast<ssize_t>(got);
  }

 private:
  int fd_;
};

// A compression format we do not read, recognised by its magic bytes.
const char* OtherCompression(const char* p, size_t n) {
  auto starts = [&](const char* magic, size_t len) {
    return n >= len && std::memcmp(p, magic, len) == 0;
  };
  if (starts("\x28\xB5\x2F\xFD", 4)) return "zstd (decompress it with: zstd -d)";
  if (starts("BZh", 3) && n > 3 && p[3] >= '1' && p[3] <= '9')
    return "bzip2 (decompress it with: bunzip2)";
  if (starts("\xFD"
             "7zXZ",
             5))
    return "xz (decompress it with: xz -d)";
  if (starts("PK\x03\x04", 4)) return "a zip archive (extract it with: unzip)";
  return nullptr;
}

Status InflateInto(const std::string& path, FileReader* file, char* in, size_t in_size,
                   size_t first_bytes, KinetoImporter* importer, uint64_t* compressed_total) {
  z_stream zs{};
  if (inflateInit2(&zs, 16 + MAX_WBITS) != Z_OK) {
    return Status::Internal(path + ": cannot initialise zlib");
  }
  struct Closer {
    z_stream* zs;
    ~Closer() { inflateEnd(zs); }
  } closer{&zs};
  ChunkBuffer out(kInflateChunkBytes);
  zs.next_in = reinterpret_cast<Bytef*>(in);
  zs.avail_in = static_cast<uInt>(first_bytes);
  uint64_t file_bytes = first_bytes;
  bool eof = first_bytes < in_size;
  uint64_t uncompressed = 0;
  auto compressed_offset = [&] { return file_bytes - zs.avail_in; };
  auto refill = [&]() -> Status {
    if (zs.avail_in > 0 || eof) return Status::Ok();
    const ssize_t n = file->Read(in, in_size);
    if (n < 0) return Status::DataLoss(path + ": read error: " + std::strerror(errno));
    if (static_cast<size_t>(n) < in_size) eof = true;
    file_bytes += static_cast<uint64_t>(n);
    zs.next_in = reinterpret_cast<Bytef*>(in);
    zs.avail_in = static_cast<uInt>(n);
    return Status::Ok();
  };
  for (;;) {
    PERFTRACKER_RETURN_IF_ERROR(refill());
    zs.next_out = reinterpret_cast<Bytef*>(out.data());
    zs.avail_out = static_cast<uInt>(out.size());
    const int ret = inflate(&zs, Z_NO_FLUSH);
    const size_t produced = out.size() - zs.avail_out;
    uncompressed += produced;
    if (produced > 0) PERFTRACKER_RETURN_IF_ERROR(importer->Parse(out.data(), produced));
    if (ret == Z_STREAM_END) {
      // Another gzip member may follow (concatenated .gz files); zero padding is ignored.
      for (;;) {
        PERFTRACKER_RETURN_IF_ERROR(refill());
        while (zs.avail_in > 0 && *zs.next_in == 0) {
          ++zs.next_in;
          --zs.avail_in;
        }
        if (zs.avail_in > 0 || eof) break;
      }
      if (zs.avail_in == 0) break;
      if (*zs.next_in != 0x1f) {
        return Status::DataLoss(
            path + ": unexpected data after the end of the gzip stream at compressed byte " +
            std::to_string(compressed_offset()));
      }
      inflateReset(&zs);
      continue;
    }
    if (ret == Z_BUF_ERROR || (ret == Z_OK && produced == 0 && zs.avail_in == 0)) {
      if (eof && zs.avail_in == 0) {
        return Status::DataLoss(path + ": truncated gzip file: the compressed data ends at byte " +
                                std::to_string(file_bytes) + " (after " +
                                std::to_string(uncompressed) +
                                " uncompressed bytes) before the end of the gzip stream; was the "
                                "profiler killed while writing, or the copy cut short?");
      }
      continue;
    }
    if (ret != Z_OK) {
      const std::string why = zs.msg != nullptr ? zs.msg : "error " + std::to_string(ret);
      return Status::DataLoss(path + ": corrupt gzip data at compressed byte " +
                              std::to_string(compressed_offset()) + " (" + why + ")");
    }
  }
  *compressed_total = file_bytes;
  return Status::Ok();
}

}  // namespace

StatusOr<KinetoTraceInfo> ImportKinetoFile(const std::string& path, FunctionTable* functions,
                                           EventSink* sink, KinetoImportOptions options) {
  // Refuses FIFOs, devices, sockets and directories without blocking on them.
  StatusOr<int> fd = OpenInputFile(path);
  if (!fd.ok()) return fd.status();
  FileReader file(*fd);
  KinetoImporter importer(path, functions, sink, options);
  ChunkBuffer buf(kReadChunkBytes);
  ssize_t n = file.Read(buf.data(), buf.size());
  if (n < 0) return Status::DataLoss(path + ": read error: " + std::strerror(errno));
  const auto first = static_cast<size_t>(n);
  if (first >= 2 && static_cast<unsigned char>(buf[0]) == 0x1f &&
      static_cast<unsigned char>(buf[1]) == 0x8b) {
    uint64_t compressed = 0;
    PERFTRACKER_RETURN_IF_ERROR(
        InflateInto(path, &file, buf.data(), buf.size(), first, &importer, &compressed));
    return importer.Finish();
  }
  if (const char* other = OtherCompression(buf.data(), first)) {
    return Status::InvalidArgument(path + ": not a trace: the file is compressed with " + other +
                                   "; only .json and gzip .json.gz are read");
  }
  size_t got = first;
  for (;;) {
    if (got > 0) PERFTRACKER_RETURN_IF_ERROR(importer.Parse(buf.data(), got));
    if (got < buf.size()) break;
    n = file.Read(buf.data(), buf.size());
    if (n < 0) return Status::DataLoss(path + ": read error: " + std::strerror(errno));
    got = static_cast<size_t>(n);
    if (got == 0) break;
  }
  return importer.Finish();
}

}  // namespace perftracker
