#include "perftracker/server/http/request_framer.h"

#include <cctype>
#include <cstdint>

namespace perftracker {
namespace {

bool EqualsIgnoreCase(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(a[i])) !=
        std::tolower(static_cast<unsigned char>(b[i]))) {
      return false;
    }
  }
  return true;
}

std::string_view TrimSpaces(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

RequestFrame Refuse(int status, std::string reason) {
  RequestFrame frame;
  frame.kind = RequestFrame::Kind::kRefused;
  frame.status = status;
  frame.reason = std::move(reason);
  return frame;
}

}  // namespace

RequestFrame FrameRequest(std::string_view buffered, size_t max_head_bytes, size_t max_body_bytes) {
  const size_t end = buffered.find("\r\n\r\n");
  if (end == std::string_view::npos) {
    if (buffered.size() > max_head_bytes) {
      return Refuse(431, "request head larger than " + std::to_string(max_head_bytes) + " bytes");
    }
    return RequestFrame{};
  }
  RequestFrame frame;
  frame.head_complete = true;
  frame.head_length = end + 4;
  if (frame.head_length > max_head_bytes) {
    return Refuse(431, "request head larger than " + std::to_string(max_head_bytes) + " bytes");
  }
  bool has_length = false;
  uint64_t length = 0;
  // Header lines start after the request line's CRLF.
  size_t pos = buffered.find("\r\n");
  while (pos < end) {
    const size_t line_start = pos + 2;
    const size_t line_end = buffered.find("\r\n", line_start);
    const std::string_view line = buffered.substr(line_start, line_end - line_start);
    pos = line_end;
    const size_t colon = line.find(':');
    if (colon == std::string_view::npos) continue;  // cpp-httplib answers it
    const std::string_view name = line.substr(0, colon);
    const std::string_view value = TrimSpaces(line.substr(colon + 1));
    if (EqualsIgnoreCase(name, "Transfer-Encoding")) {
      return Refuse(411, "request bodies must carry Content-Length (Transfer-Encoding refused)");
    }
    if (EqualsIgnoreCase(name, "Expect") && EqualsIgnoreCase(value, "100-continue")) {
      frame.expect_offset = line_start;
      frame.expect_length = line.size() + 2;
      continue;
    }
    if (!EqualsIgnoreCase(name, "Content-Length")) continue;
    if (value.empty() || value.size() > 19) return Refuse(400, "bad Content-Length");
    uint64_t parsed = 0;
    for (char c : value) {
      if (c < '0' || c > '9') return Refuse(400, "bad Content-Length");
      parsed = parsed * 10 + static_cast<uint64_t>(c - '0');
    }
    if (has_length && parsed != length) return Refuse(400, "conflicting Content-Length headers");
    has_length = true;
    length = parsed;
  }
  if (length > max_body_bytes) {
    return Refuse(413, "request body larger than " + std::to_string(max_body_bytes) + " bytes");
  }
  frame.body_length = static_cast<size_t>(length);
  frame.has_content_length = has_length;
  frame.kind = buffered.size() >= frame.total_length() ? RequestFrame::Kind::kComplete
                                                       : RequestFrame::Kind::kIncomplete;
  return frame;
}

}  // namespace perftracker
