// ControlChannel: the agent's end of the Unix stream socket to the node collector,
// newline-delimited JSON (docs/agent-protocol.md). Owned and used by one thread (the
// agent's control thread) only. Never blocks: the socket is non-blocking, sends use
// MSG_NOSIGNAL (a dead collector gives EPIPE, never SIGPIPE), output waits in a bounded
// buffer while the socket is full, and any error closes the channel (the caller reconnects
// with back-off).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "perftracker/core/status.h"

namespace perftracker {

class ControlChannel {
 public:
  static constexpr size_t kMaxLine = 64 * 1024;          // protocol limit per message
  static constexpr size_t kMaxPendingOut = 1024 * 1024;  // unsent bytes kept while full

  ControlChannel() = default;
  ~ControlChannel();
  ControlChannel(const ControlChannel&) = delete;
  ControlChannel& operator=(const ControlChannel&) = delete;

  Status Connect(const std::string& path);
  void Close();
  bool connected() const { return fd_ >= 0; }
  int fd() const { return fd_; }

  // Queues one line (without its '\n') and sends what the socket takes. False when the line
  // was dropped (too long, not connected, output buffer full) or the channel broke.
  bool SendLine(std::string_view line);
  // Sends pending output; false when the channel broke.
  bool Flush();
  bool has_pending_output() const { return out_pos_ < out_.size(); }
  // Reads what is available; appends complete lines to *lines. False when the peer closed
  // or the channel broke (complete lines read before are still returned).
  bool ReadLines(std::vector<std::string>* lines);

  uint64_t dropped_lines() const { return dropped_lines_; }
  uint64_t oversized_lines_in() const { return oversized_in_; }
  const std::string& last_error() const { return last_error_; }

 private:
  void Fail(const char* what);

  int fd_ = -1;
  std::string out_;
  size_t out_pos_ = 0;
  std::string in_;
  bool skipping_oversized_ = false;
  uint64_t dropped_lines_ = 0;
  uint64_t oversized_in_ = 0;
  std::string last_error_;
};

}  // namespace perftracker
