// KinetoEventParser: the hot path of the Kineto importer. Parses one Chrome-trace event
// object ({"ph": "X", "cat": ..., "name": ..., "ts": ..., "args": {...}}) in place and picks
// out only the fields the importer uses; every other value is skipped without being
// decoded. No allocation on the common path: strings are returned as views into the input
// unless they contain escapes, in which case they are decoded into per-field scratch
// buffers capped at a fixed size.
//
// The input may end before the object does (a chunk boundary): Parse then says
// kIncomplete and the caller retries once it holds the whole object.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace perftracker {

// A JSON number kept as written, so that "4458676983543.183" µs becomes exactly
// 4458676983543183 ns (a double would lose the last digits).
struct TraceNumber {
  bool present = false;   // the key was there
  bool valid = false;     // ... and its value was a number
  bool negative = false;
  bool has_fraction = false;  // the text had a '.'
  bool use_double = false;    // exponent or > 19 integer digits: `approx` holds the value
  uint64_t int_part = 0;
  uint32_t frac_e9 = 0;       // first 9 fractional digits, in units of 1e-9
  double approx = 0;

  // The value scaled to nanoseconds, rounded to nearest; false when out of int64 range.
  bool ToNanoseconds(bool value_is_microseconds, int64_t* out) const;
  // The integer part (negative values clamp to 0); for ids and byte counts.
  uint64_t ToUnsigned() const;
};

// A pid or tid: Kineto writes numbers for real processes / threads and strings for its
// pseudo-processes ("Spans", "CPU functions").
struct TraceId {
  bool present = false;
  bool is_string = false;
  int64_t number = 0;
  std::string_view text;  // the string value (capped)
};

struct KinetoRawEvent {
  char ph = 0;  // 0 when absent
  bool has_name = false;
  bool name_truncated = false;
  bool has_cat = false;
  std::string_view name;
  std::string_view cat;
  TraceId pid;
  TraceId tid;
  TraceNumber ts;
  TraceNumber dur;
  // args
  TraceNumber device;
  TraceNumber stream;
  TraceNumber correlation;
  TraceNumber bytes;
  TraceNumber in_msg_nelems;
  std::string_view dtype;
  std::string_view collective;  // args "Collective name" (record_param_comms, NCCL kernels)
  // The process group of a collective (record_param_comms, NCCL kernels): its "Process Group
  // Name" (older traces: "Process Group ID"), "Process Group Ranks" ("[0, 1, ...]", a string,
  // cut after 30 ranks with ", ...]"), "Group size", "Global rank start" / "stride". The
  // string-valued ones as written (a string's contents, else the value's JSON text).
  std::string_view pg_name;
  std::string_view pg_ranks;
  TraceNumber group_size;
  TraceNumber rank_start;
  TraceNumber rank_stride;
};

class KinetoEventParser {
 public:
  enum class Result : uint8_t { kOk, kIncomplete, kSyntaxError };

  // Caps for the strings the importer keeps.
  static constexpr size_t kMaxNameBytes = 4096;
  static constexpr size_t kMaxShortStringBytes = 256;  // cat, pid/tid strings, dtype

  // `begin` points at the '{'. Views in `event` stay valid until the next call and while
  // the input is alive.
  Result Parse(const char* begin, const char* end, KinetoRawEvent* event);

  // After kOk: one past the closing '}'.
  const char* object_end() const { return p_; }
  // After kSyntaxError: what was wrong and where (offset from `begin`).
  const char* error() const { return error_; }
  size_t error_offset() const { return error_offset_; }

 private:
  bool SkipWs();
  bool Expect(char c, const char* what);
  bool ReadString(std::string_view* out, std::string* scratch, size_t cap, bool* truncated);
  bool DecodeEscapedString(const char* start, std::string_view* out, std::string* scratch,
                           size_t cap, bool* truncated);
  bool ReadNumber(TraceNumber* out);
  bool ReadId(TraceId* out, std::string* scratch);
  bool ReadNumberField(TraceNumber* out);
  // A string's contents, or any other value's JSON text (a number, a list).
  bool ReadText(std::string_view* out, std::string* scratch);
  bool SkipValue();
  bool SkipString();
  bool SkipContainer();
  bool ParseArgs(KinetoRawEvent* event);
  bool Incomplete();
  bool SyntaxError(const char* what);

  const char* begin_ = nullptr;
  const char* p_ = nullptr;
  const char* end_ = nullptr;
  Result result_ = Result::kOk;
  const char* error_ = "";
  size_t error_offset_ = 0;

  std::string key_scratch_;
  std::string name_scratch_;
  std::string cat_scratch_;
  std::string pid_scratch_;
  std::string tid_scratch_;
  std::string dtype_scratch_;
  std::string collective_scratch_;
  std::string pg_name_scratch_;
  std::string pg_ranks_scratch_;
};

}  // namespace perftracker
