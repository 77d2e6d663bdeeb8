#include "perftracker/sources/kineto/kineto_event_parser.h"

#include <charconv>
#include <cmath>
#include <algorithm>
#include <array>
#include <cstring>
#include <limits>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace perftracker {
namespace {

constexpr size_t kMaxKeyBytes = 64;
constexpr int kMaxFractionDigits = 9;
constexpr uint32_t kPow10[] = {1,      10,      100,      1000,      10000,
                               100000, 1000000, 10000000, 100000000, 1000000000};

inline bool IsWs(char c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; }
inline bool IsDigit(char c) { return c >= '0' && c <= '9'; }

// The first '"' or '\\' in [p, end), or end. Strings are most of a trace's bytes (names,
// keys), so this is the parser's inner loop: 16 bytes at a time where SSE2 is available.
inline const char* FindQuoteOrBackslash(const char* p, const char* end) {
#if defined(__SSE2__)
  const __m128i quote = _mm_set1_epi8('"');
  const __m128i backslash = _mm_set1_epi8('\\');
  while (end - p >= 16) {
    const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
    const int mask = _mm_movemask_epi8(
        _mm_or_si128(_mm_cmpeq_epi8(v, quote), _mm_cmpeq_epi8(v, backslash)));
    if (mask != 0) return p + __builtin_ctz(static_cast<unsigned>(mask));
    p += 16;
  }
#endif
  while (p < end && *p != '"' && *p != '\\') ++p;
  return p;
}

// Bytes that matter while skipping a nested value: quotes and brackets.
constexpr auto kStructural = [] {
  std::array<bool, 256> t{};
  t['"'] = t['{'] = t['}'] = t['['] = t[']'] = true;
  return t;
}();

// Largest prefix of `s` no longer than `cap` bytes that does not cut a UTF-8 character.
// Requires s.size() > cap (the byte at `cap` tells whether a character straddles the cut).
size_t Utf8Prefix(std::string_view s, size_t cap) {
  size_t n = cap;
  while (n > 0 && (static_cast<unsigned char>(s[n]) & 0xC0) == 0x80) --n;
  return n;
}

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

bool ParseHex4(const char* p, uint32_t* out) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) {
    const int h = HexValue(p[i]);
    if (h < 0) return false;
    v = v * 16 + static_cast<uint32_t>(h);
  }
  *out = v;
  return true;
}

size_t EncodeUtf8(uint32_t cp, char* out) {
  if (cp < 0x80) {
    out[0] = static_cast<char>(cp);
    return 1;
  }
  if (cp < 0x800) {
    out[0] = static_cast<char>(0xC0 | (cp >> 6));
    out[1] = static_cast<char>(0x80 | (cp & 0x3F));
    return 2;
  }
  if (cp < 0x10000) {
    out[0] = static_cast<char>(0xE0 | (cp >> 12));
    out[1] = static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out[2] = static_cast<char>(0x80 | (cp & 0x3F));
    return 3;
  }
  out[0] = static_cast<char>(0xF0 | (cp >> 18));
  out[1] = static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
  out[2] = static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
  out[3] = static_cast<char>(0x80 | (cp & 0x3F));
  return 4;
}

}  // namespace

bool TraceNumber::ToNanoseconds(bool value_is_microseconds, int64_t* out) const {
  if (!valid) return false;
  if (use_double) {
    const double v = approx * (value_is_microseconds ? 1000.0 : 1.0);
    if (!std::isfinite(v) || std::fabs(v) >= 9.2e18) return false;
    *out = std::llround(v);
    return true;
  }
  const uint64_t mult = value_is_microseconds ? 1000 : 1;
  if (int_part > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) / mult - 1) return false;
  auto v = static_cast<int64_t>(int_part * mult);
  if (value_is_microseconds) {
    v += static_cast<int64_t>((frac_e9 + 500000u) / 1000000u);  // 1e-9 µs units -> ns
  } else {
    v += frac_e9 >= 500000000u ? 1 : 0;
  }
  *out = negative ? -v : v;
  return true;
}

uint64_t TraceNumber::ToUnsigned() const {
  if (!valid || negative) return 0;
  if (use_double) {
    if (!(approx > 0)) return 0;
    if (approx >= 1.8e19) return std::numeric_limits<uint64_t>::max();
    return static_cast<uint64_t>(approx);
  }
  return int_part;
}

bool KinetoEventParser::Incomplete() {
  result_ = Result::kIncomplete;
  return false;
}

bool KinetoEventParser::SyntaxError(const char* what) {
  if (p_ >= end_) return Incomplete();
  result_ = Result::kSyntaxError;
  error_ = what;
  error_offset_ = static_cast<size_t>(p_ - begin_);
  return false;
}

bool KinetoEventParser::SkipWs() {
  if (p_ < end_ && !IsWs(*p_)) [[likely]] return true;
  while (p_ < end_ && IsWs(*p_)) ++p_;
  return p_ < end_ || Incomplete();
}

bool KinetoEventParser::Expect(char c, const char* what) {
  if (!SkipWs()) return false;
  if (*p_ != c) return SyntaxError(what);
  ++p_;
  return SkipWs();
}

bool KinetoEventParser::SkipString() {
  ++p_;
  for (;;) {
    const char* q = FindQuoteOrBackslash(p_, end_);
    if (q >= end_) {
      p_ = end_;
      return Incomplete();
    }
    if (*q == '"') {
      p_ = q + 1;
      return true;
    }
    if (end_ - q < 2) {
      p_ = end_;
      return Incomplete();
    }
    p_ = q + 2;  // a backslash and the byte it escapes
  }
}

bool KinetoEventParser::ReadString(std::string_view* out, std::string* scratch, size_t cap,
                                   bool* truncated) {
  const char* start = ++p_;
  const char* q = FindQuoteOrBackslash(p_, end_);
  if (q >= end_) {
    p_ = end_;
    return Incomplete();
  }
  if (*q == '"') [[likely]] {
    std::string_view s(start, static_cast<size_t>(q - start));
    if (s.size() > cap) [[unlikely]] {
      *truncated = true;
      s = s.substr(0, Utf8Prefix(s, cap));
    }
    *out = s;
    p_ = q + 1;
    return true;
  }
  p_ = q;
  return DecodeEscapedString(start, out, scratch, cap, truncated);
}

bool KinetoEventParser::DecodeEscapedString(const char* start, std::string_view* out,
                                            std::string* scratch, size_t cap, bool* truncated) {
  // Keeps a few bytes past the cap so that Utf8Prefix can see whether a character straddles it.
  const size_t keep = cap + 4;
  scratch->assign(start, std::min(static_cast<size_t>(p_ - start), keep));
  bool over = static_cast<size_t>(p_ - start) > cap;
  auto append = [&](const char* s, size_t n) {
    if (scratch->size() + n <= keep) {
      scratch->append(s, n);
    } else {
      scratch->append(s, keep - scratch->size());
    }
    if (scratch->size() > cap) over = true;
  };
  while (p_ < end_) {
    const char c = *p_;
    if (c == '"') {
      ++p_;
      if (over) {
        *truncated = true;
        scratch->resize(Utf8Prefix(*scratch, std::min(cap, scratch->size() - 1)));
      }
      *out = *scratch;
      return true;
    }
    if (c != '\\') {
      append(&c, 1);
      ++p_;
      continue;
    }
    if (end_ - p_ < 2) return Incomplete();
    char buf[8];
    size_t n = 1;
    size_t consumed = 2;
    switch (p_[1]) {
      case '"': case '\\': case '/': buf[0] = p_[1]; break;
      case 'b': buf[0] = '\b'; break;
      case 'f': buf[0] = '\f'; break;
      case 'n': buf[0] = '\n'; break;
      case 'r': buf[0] = '\r'; break;
      case 't': buf[0] = '\t'; break;
      case 'u': {
        if (end_ - p_ < 6) return Incomplete();
        uint32_t cp = 0;
        if (!ParseHex4(p_ + 2, &cp)) return SyntaxError("invalid \\u escape in a string");
        consumed = 6;
        if (cp >= 0xD800 && cp < 0xDC00) {  // high surrogate: pair it with the low one
          if (end_ - p_ < 7) return Incomplete();
          if (p_[6] == '\\' && end_ - p_ < 12) return Incomplete();
          uint32_t lo = 0;
          if (p_[6] == '\\' && p_[7] == 'u' && ParseHex4(p_ + 8, &lo) && lo >= 0xDC00 &&
              lo < 0xE000) {
            cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
            consumed = 12;
          } else {
            cp = 0xFFFD;
          }
        } else if (cp >= 0xDC00 && cp < 0xE000) {
          cp = 0xFFFD;
        }
        n = EncodeUtf8(cp, buf);
        break;
      }
      default:
        return SyntaxError("invalid escape in a string");
    }
    append(buf, n);
    p_ += consumed;
  }
  return Incomplete();
}

bool KinetoEventParser::ReadNumber(TraceNumber* out) {
  const char* start = p_;
  TraceNumber n;
  n.present = true;
  if (*p_ == '-') {
    n.negative = true;
    ++p_;
    if (p_ == end_) return Incomplete();
  }
  if (!IsDigit(*p_)) return SyntaxError("invalid number");
  int int_digits = 0;
  while (p_ < end_ && IsDigit(*p_)) {
    if (++int_digits > 19) n.use_double = true;
    n.int_part = n.int_part * 10 + static_cast<uint64_t>(*p_ - '0');
    ++p_;
  }
  if (p_ == end_) return Incomplete();
  if (*p_ == '.') {
    n.has_fraction = true;
    ++p_;
    int frac_digits = 0;
    uint32_t frac = 0;
    while (p_ < end_ && IsDigit(*p_)) {
      if (frac_digits < kMaxFractionDigits) {
        frac = frac * 10 + static_cast<uint32_t>(*p_ - '0');
        ++frac_digits;
      }
      ++p_;
    }
    if (p_ == end_) return Incomplete();
    if (frac_digits == 0) return SyntaxError("invalid number: no digit after '.'");
    n.frac_e9 = frac * kPow10[kMaxFractionDigits - frac_digits];
  }
  if (*p_ == 'e' || *p_ == 'E') {
    n.use_double = true;
    ++p_;
    if (p_ < end_ && (*p_ == '+' || *p_ == '-')) ++p_;
    while (p_ < end_ && IsDigit(*p_)) ++p_;
    if (p_ == end_) return Incomplete();
  }
  if (n.use_double) {
    const char* num_start = start;
    // from_chars does not accept a leading '+', and handles the '-' itself.
    auto [ptr, ec] = std::from_chars(num_start, p_, n.approx);
    if (ec != std::errc() || ptr != p_) return SyntaxError("invalid number");
  }
  n.valid = true;
  *out = n;
  return true;
}

bool KinetoEventParser::ReadNumberField(TraceNumber* out) {
  if (*p_ == '-' || IsDigit(*p_)) return ReadNumber(out);
  *out = TraceNumber{};
  out->present = true;  // present but not a number
  return SkipValue();
}

bool KinetoEventParser::ReadId(TraceId* out, std::string* scratch) {
  *out = TraceId{};
  if (*p_ == '"') {
    bool truncated = false;
    if (!ReadString(&out->text, scratch, kMaxShortStringBytes, &truncated)) return false;
    out->present = true;
    out->is_string = true;
    return true;
  }
  if (*p_ == '-' || IsDigit(*p_)) {
    TraceNumber n;
    if (!ReadNumber(&n)) return false;
    out->present = true;
    const auto magnitude = static_cast<int64_t>(
        std::min<uint64_t>(n.int_part, static_cast<uint64_t>(std::numeric_limits<int64_t>::max())));
    out->number = n.negative ? -magnitude : magnitude;
    return true;
  }
  return SkipValue();
}

bool KinetoEventParser::SkipContainer() {
  int depth = 0;
  while (p_ < end_) {
    const char c = *p_;
    if (!kStructural[static_cast<unsigned char>(c)]) {
      ++p_;
      continue;
    }
    if (c == '"') {
      if (!SkipString()) return false;
      continue;
    }
    if (c == '{' || c == '[') {
      ++depth;
    } else if (c == '}' || c == ']') {
      if (--depth == 0) {
        ++p_;
        return true;
      }
    }
    ++p_;
  }
  return Incomplete();
}

bool KinetoEventParser::SkipValue() {
  const char c = *p_;
  if (c == '"') return SkipString();
  if (c == '{' || c == '[') return SkipContainer();
  if (c == '-' || IsDigit(c)) {
    while (p_ < end_ && (IsDigit(*p_) || *p_ == '-' || *p_ == '+' || *p_ == '.' || *p_ == 'e' ||
                         *p_ == 'E')) {
      ++p_;
    }
    return p_ < end_ || Incomplete();
  }
  if (c == 't' || c == 'f' || c == 'n') {
    while (p_ < end_ && *p_ >= 'a' && *p_ <= 'z') ++p_;
    return p_ < end_ || Incomplete();
  }
  return SyntaxError("invalid JSON value");
}

bool KinetoEventParser::ReadText(std::string_view* out, std::string* scratch) {
  if (*p_ == '"') {
    bool truncated = false;
    return ReadString(out, scratch, kMaxShortStringBytes, &truncated);
  }
  const char* start = p_;
  if (!SkipValue()) return false;
  *out = std::string_view(start, static_cast<size_t>(p_ - start));
  return true;
}

bool KinetoEventParser::ParseArgs(KinetoRawEvent* event) {
  if (*p_ != '{') return SkipValue();
  ++p_;
  if (!SkipWs()) return false;
  if (*p_ == '}') {
    ++p_;
    return true;
  }
  for (;;) {
    if (*p_ != '"') return SyntaxError("expected a key in \"args\"");
    std::string_view key;
    bool key_truncated = false;
    if (!ReadString(&key, &key_scratch_, kMaxKeyBytes, &key_truncated)) return false;
    if (!Expect(':', "expected ':' after a key in \"args\"")) return false;
    bool ok = true;
    if (key == "device") {
      ok = ReadNumberField(&event->device);
    } else if (key == "stream") {
      ok = ReadNumberField(&event->stream);
    } else if (key == "correlation") {
      ok = ReadNumberField(&event->correlation);
    } else if (key == "bytes") {
      ok = ReadNumberField(&event->bytes);
    } else if (key == "In msg nelems") {
      ok = ReadNumberField(&event->in_msg_nelems);
    } else if (key == "dtype" && *p_ == '"') {
      bool truncated = false;
      ok = ReadString(&event->dtype, &dtype_scratch_, kMaxShortStringBytes, &truncated);
    } else if (key == "Collective name" && *p_ == '"') {
      bool truncated = false;
      ok = ReadString(&event->collective, &collective_scratch_, kMaxShortStringBytes, &truncated);
    } else if (key == "Process Group Name" || key == "Process Group ID") {
      ok = ReadText(&event->pg_name, &pg_name_scratch_);
    } else if (key == "Process Group Ranks") {
      ok = ReadText(&event->pg_ranks, &pg_ranks_scratch_);
    } else if (key == "Group size") {
      ok = ReadNumberField(&event->group_size);
    } else if (key == "Global rank start") {
      ok = ReadNumberField(&event->rank_start);
    } else if (key == "Global rank stride") {
      ok = ReadNumberField(&event->rank_stride);
    } else {
      ok = SkipValue();
    }
    if (!ok || !SkipWs()) return false;
    if (*p_ == ',') {
      ++p_;
      if (!SkipWs()) return false;
      continue;
    }
    if (*p_ == '}') {
      ++p_;
      return true;
    }
    return SyntaxError("expected ',' or '}' in \"args\"");
  }
}

KinetoEventParser::Result KinetoEventParser::Parse(const char* begin, const char* end,
                                                   KinetoRawEvent* event) {
  begin_ = begin;
  p_ = begin;
  end_ = end;
  result_ = Result::kOk;
  *event = KinetoRawEvent{};
  if (p_ >= end_) return Result::kIncomplete;
  if (*p_ != '{') {
    SyntaxError("expected '{'");
    return result_;
  }
  ++p_;
  if (!SkipWs()) return result_;
  if (*p_ == '}') {
    ++p_;
    return Result::kOk;
  }
  for (;;) {
    if (*p_ != '"') {
      SyntaxError("expected a key");
      return result_;
    }
    std::string_view key;
    bool key_truncated = false;
    if (!ReadString(&key, &key_scratch_, kMaxKeyBytes, &key_truncated)) return result_;
    if (!Expect(':', "expected ':' after a key")) return result_;
    bool ok = true;
    bool is_string = *p_ == '"';
    if (key == "ph") {
      if (is_string) {
        std::string_view ph;
        bool truncated = false;
        ok = ReadString(&ph, &key_scratch_, kMaxShortStringBytes, &truncated);
        event->ph = ph.size() == 1 ? ph[0] : '?';
      } else {
        event->ph = '?';
        ok = SkipValue();
      }
    } else if (key == "ts") {
      ok = ReadNumberField(&event->ts);
    } else if (key == "dur") {
      ok = ReadNumberField(&event->dur);
    } else if (key == "name") {
      if (is_string) {
        event->has_name = true;
        ok = ReadString(&event->name, &name_scratch_, kMaxNameBytes, &event->name_truncated);
      } else {
        ok = SkipValue();
      }
    } else if (key == "cat") {
      if (is_string) {
        event->has_cat = true;
        bool truncated = false;
        ok = ReadString(&event->cat, &cat_scratch_, kMaxShortStringBytes, &truncated);
      } else {
        ok = SkipValue();
      }
    } else if (key == "pid") {
      ok = ReadId(&event->pid, &pid_scratch_);
    } else if (key == "tid") {
      ok = ReadId(&event->tid, &tid_scratch_);
    } else if (key == "args") {
      ok = ParseArgs(event);
    } else {
      ok = SkipValue();
    }
    if (!ok || !SkipWs()) return result_;
    if (*p_ == ',') {
      ++p_;
      if (!SkipWs()) return result_;
      continue;
    }
    if (*p_ == '}') {
      ++p_;
      return Result::kOk;
    }
    SyntaxError("expected ',' or '}' after a value");
    return result_;
  }
}

}  // namespace perftracker
