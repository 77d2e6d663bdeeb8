// ControlChannel: the agent's end of the Unix stream socket to the node collector,
// newline-delimited JSON (docs/agent-protocol.md). Owned and used by one thread (the
// agent's control thread) only. Never blocks: the socket is non-blocking, sends use
// MSG_NOSIGNAL (a dead collector gives EPIPE, never SIGPIPE), output waits in a bounded
// buffer while the socket is full, and any error closes the channel (the caller reconnects
// with back-off).
//
// Input is bounded too, because this runs inside the user's training process and the peer
// may be buggy or not a collector at all. Invariants, between calls:
//   - `in_` holds bytes received but not yet handed out: complete lines that did not fit in
//     the last ReadLines call, then at most one partial line of at most kMaxLineIn bytes;
//     with one recv() chunk appended, never more than kMaxLineIn + kReadChunk bytes.
//   - A line longer than kMaxLineIn is dropped whole: once its partial passes the limit the
//     buffered part is freed and everything up to and including its '\n' is discarded as it
//     arrives (`skipping_oversized_`). Each such line counts once in oversized_lines_in().
//   - One ReadLines call hands out at most kMaxLinesPerRead lines and stops reading the
//     socket once it has them; the rest waits in `in_` (has_buffered_lines()) or in the
//     kernel's socket buffer, in order, for the next call. A flooding peer thus costs the
//     caller bounded memory and bounded work per call, and nothing well-formed is lost.
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
  // Longest collector -> agent line accepted. The longest the collector sends is `window`
  // (collector/agent_message.cc WindowMessage: four integers and a reason name, under 160
  // bytes); `config` (four numbers) is shorter. 4 KiB leaves room for new fields while a
  // hostile or broken peer can make the agent hold little.
  static constexpr size_t kMaxLineIn = 4 * 1024;
  // Lines one ReadLines call hands out: the control thread handles a flood in steps and
  // does its other work (hang checks, window timers, sends) between them.
  static constexpr size_t kMaxLinesPerRead = 64;
  static constexpr size_t kReadChunk = 16 * 1024;  // bytes per recv()

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
  // Reads what is available; appends at most kMaxLinesPerRead complete lines (without their
  // '\n') to *lines. False when the peer closed or the channel broke (complete lines read
  // before are still returned).
  bool ReadLines(std::vector<std::string>* lines);
  // True when complete lines wait in the channel's buffer (the last ReadLines stopped at
  // kMaxLinesPerRead): call ReadLines again without waiting for the socket, which may not
  // become readable again for them.
  bool has_buffered_lines() const { return buffered_lines_; }
  // Bytes received and not handed out yet (at most kMaxLineIn + kReadChunk).
  size_t buffered_bytes() const { return in_.size(); }

  uint64_t dropped_lines() const { return dropped_lines_; }
  // Collector lines longer than kMaxLineIn, dropped (over the channel's life, reconnects
  // included).
  uint64_t oversized_lines_in() const { return oversized_in_; }
  const std::string& last_error() const { return last_error_; }

 private:
  void Fail(const char* what);
  // Appends received bytes to in_, discarding the rest of an oversized line first.
  void Append(std::string_view bytes);
  // Moves at most `max` complete lines from in_ to *lines; returns how many it moved.
  size_t TakeLines(std::vector<std::string>* lines, size_t max);

  int fd_ = -1;
  std::string out_;
  size_t out_pos_ = 0;
  std::string in_;
  bool skipping_oversized_ = false;  // inside a line longer than kMaxLineIn
  bool buffered_lines_ = false;      // in_ holds a complete line
  uint64_t dropped_lines_ = 0;
  uint64_t oversized_in_ = 0;
  std::string last_error_;
};

}  // namespace perftracker
