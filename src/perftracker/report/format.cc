#include "perftracker/report/format.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

namespace perftracker::report {
namespace {

constexpr uint32_t kReplacement = 0xFFFD;
constexpr uint32_t kInvalid = UINT32_MAX;
constexpr std::string_view kEllipsis = "…";

// Decodes the code point at text[*pos] and advances *pos; returns kInvalid (advancing one
// byte) for a malformed, overlong or surrogate sequence.
uint32_t DecodeUtf8(std::string_view text, size_t* pos) {
  const auto byte = [&](size_t i) { return static_cast<uint8_t>(text[i]); };
  const uint8_t b0 = byte(*pos);
  size_t len = 0;
  uint32_t cp = 0;
  uint32_t min = 0;
  if (b0 < 0x80) {
    ++*pos;
    return b0;
  } else if ((b0 & 0xE0) == 0xC0) {
    len = 2, cp = b0 & 0x1F, min = 0x80;
  } else if ((b0 & 0xF0) == 0xE0) {
    len = 3, cp = b0 & 0x0F, min = 0x800;
  } else if ((b0 & 0xF8) == 0xF0) {
    len = 4, cp = b0 & 0x07, min = 0x10000;
  } else {
    ++*pos;
    return kInvalid;
  }
  if (*pos + len > text.size()) {
    ++*pos;
    return kInvalid;
  }
  for (size_t i = 1; i < len; ++i) {
    const uint8_t b = byte(*pos + i);
    if ((b & 0xC0) != 0x80) {
      ++*pos;
      return kInvalid;
    }
    cp = (cp << 6) | (b & 0x3F);
  }
  if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) {
    ++*pos;
    return kInvalid;
  }
  *pos += len;
  return cp;
}

void AppendUtf8(uint32_t cp, std::string* out) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

// Splits sanitized text into code points (as UTF-8 substrings).
std::vector<std::string_view> CodePoints(std::string_view text) {
  std::vector<std::string_view> out;
  size_t pos = 0;
  while (pos < text.size()) {
    const size_t start = pos;
    DecodeUtf8(text, &pos);
    out.push_back(text.substr(start, pos - start));
  }
  return out;
}

}  // namespace

std::string RanksLabel(const std::vector<int32_t>& ranks, int32_t num_workers,
                       size_t max_chars) {
  std::vector<int32_t> sorted = ranks;
  std::sort(sorted.begin(), sorted.end());
  sorted.erase(std::unique(sorted.begin(), sorted.end()), sorted.end());
  const bool all = sorted.empty() ||
                   (num_workers > 1 && sorted.size() == static_cast<size_t>(num_workers) &&
                    sorted.front() == 0 && sorted.back() == num_workers - 1);
  if (all) {
    if (num_workers == 1) return "the single worker";
    return num_workers > 0 ? fmt::format("all {} workers", num_workers) : "all workers";
  }
  if (sorted.size() == 1) return fmt::format("rank {}", sorted.front());
  const size_t prefix = 6;  // "ranks "
  return "ranks " + FormatRanks(std::move(sorted), max_chars > prefix ? max_chars - prefix : 0);
}

std::string SanitizeText(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  size_t pos = 0;
  while (pos < text.size()) {
    const uint32_t cp = DecodeUtf8(text, &pos);
    if (cp == kInvalid) {
      AppendUtf8(kReplacement, &out);
    } else if (cp == '\t' || cp == '\n' || cp == '\r') {
      out.push_back(' ');
    } else if (cp < 0x20 || cp == 0x7F || (cp >= 0x80 && cp < 0xA0)) {
      continue;  // other control characters: dropped
    } else {
      AppendUtf8(cp, &out);
    }
  }
  return out;
}

std::string EscapeHtml(std::string_view text) {
  const std::string clean = SanitizeText(text);
  std::string out;
  out.reserve(clean.size() + clean.size() / 8);
  for (char c : clean) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&#39;"; break;
      default: out.push_back(c);
    }
  }
  return out;
}

size_t DisplayWidth(std::string_view text) {
  size_t width = 0;
  size_t pos = 0;
  while (pos < text.size()) {
    if (text[pos] == '\x1b' && pos + 1 < text.size() && text[pos + 1] == '[') {
      pos += 2;  // CSI: parameters, then one final byte in 0x40..0x7E
      while (pos < text.size() && !(text[pos] >= 0x40 && text[pos] <= 0x7E)) ++pos;
      if (pos < text.size()) ++pos;
      continue;
    }
    DecodeUtf8(text, &pos);
    ++width;
  }
  return width;
}

std::string TruncateEnd(std::string_view text, size_t width) {
  if (DisplayWidth(text) <= width) return std::string(text);
  if (width == 0) return "";
  const std::vector<std::string_view> cps = CodePoints(text);
  std::string out;
  for (size_t i = 0; i + 1 < width && i < cps.size(); ++i) out += cps[i];
  return out + std::string(kEllipsis);
}

std::string TruncateStart(std::string_view text, size_t width) {
  if (DisplayWidth(text) <= width) return std::string(text);
  if (width == 0) return "";
  const std::vector<std::string_view> cps = CodePoints(text);
  std::string out(kEllipsis);
  for (size_t i = cps.size() - (width - 1); i < cps.size(); ++i) out += cps[i];
  return out;
}

std::vector<std::string> WrapText(std::string_view text, size_t width,
                                  std::string_view first_prefix, std::string_view next_prefix) {
  std::vector<std::string> lines;
  std::string line(first_prefix);
  size_t line_width = DisplayWidth(first_prefix);
  bool line_has_word = false;
  const auto flush = [&]() {
    lines.push_back(line);
    line = std::string(next_prefix);
    line_width = DisplayWidth(next_prefix);
    line_has_word = false;
  };
  size_t pos = 0;
  while (pos < text.size()) {
    while (pos < text.size() && text[pos] == ' ') ++pos;
    if (pos >= text.size()) break;
    size_t end = text.find(' ', pos);
    if (end == std::string_view::npos) end = text.size();
    std::string_view word = text.substr(pos, end - pos);
    pos = end;
    size_t word_width = DisplayWidth(word);
    if (line_has_word && line_width + 1 + word_width > width) flush();
    if (line_has_word) {
      line += ' ';
      ++line_width;
    }
    // Split a word that does not fit on a line of its own.
    while (line_width + word_width > width && line_width < width) {
      const std::vector<std::string_view> cps = CodePoints(word);
      const size_t take = width - line_width;
      size_t bytes = 0;
      for (size_t i = 0; i < take; ++i) bytes += cps[i].size();
      line += word.substr(0, bytes);
      word = word.substr(bytes);
      word_width -= take;
      line_has_word = true;
      flush();
    }
    line += word;
    line_width += word_width;
    line_has_word = true;
  }
  if (line_has_word || lines.empty()) lines.push_back(line);
  return lines;
}

double Finite(double value) { return std::isfinite(value) ? value : 0; }

}  // namespace perftracker::report
