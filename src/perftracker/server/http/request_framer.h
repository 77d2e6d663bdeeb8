// FrameRequest: where one HTTP/1.1 request ends in the bytes a connection has sent so far.
//
// The server's event loop (ConnectionGate) reads every connection itself and hands a handler
// thread only a request whose head and body are both in, so a client that sends slowly or
// not at all costs a buffer, never a thread. This function is the loop's parser: it finds
// the end of the head ("\r\n\r\n"), reads Content-Length, and says whether the request is
// complete, still coming, or refused (with the status to answer). It parses no more than
// that: the request line and headers are parsed again, fully, by cpp-httplib on the handler
// thread.
//
// Refused: a head over `max_head_bytes` (431), a body over `max_body_bytes` (413), a
// Content-Length that is not a decimal number or appears twice with different values (400),
// and Transfer-Encoding (411: request bodies must say their length; every client of this
// server's API does).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace perftracker {

struct RequestFrame {
  enum class Kind : uint8_t { kIncomplete, kComplete, kRefused };
  Kind kind = Kind::kIncomplete;
  // kIncomplete and kComplete, once the head is in: its length (with the blank line) and the
  // body's length.
  bool head_complete = false;
  size_t head_length = 0;
  size_t body_length = 0;
  // Whether the head carries Content-Length. Without it (and without Transfer-Encoding) a
  // request has no body (RFC 9112 §6.3); the loop adds "Content-Length: 0" before a handler
  // sees it, since cpp-httplib answers a POST without one 400 (`curl -X POST URL` sends none).
  bool has_content_length = false;
  // The "Expect: 100-continue" header line (offset and length with its CRLF) inside the head,
  // or expect_length 0: the loop answers "100 Continue" itself and removes the line before a
  // handler sees the request, so the handler does not answer it a second time.
  size_t expect_offset = 0;
  size_t expect_length = 0;
  // kRefused: the status and a short reason.
  int status = 0;
  std::string reason;

  size_t total_length() const { return head_length + body_length; }
};

RequestFrame FrameRequest(std::string_view buffered, size_t max_head_bytes, size_t max_body_bytes);

}  // namespace perftracker
