// LineReader: frames a byte stream into newline-delimited lines of bounded length (the
// agent<->collector control protocol, docs/agent-protocol.md).
//
// Bytes arrive in arbitrary chunks (whatever read() returned). Complete lines are handed
// out without their '\n' (and a trailing '\r'); empty lines are skipped. A line longer than
// max_line is never buffered whole: once the partial line passes the limit the reader drops
// what it holds, counts one oversized line and discards input up to the next '\n'. So the
// memory per connection is bounded by max_line whatever the peer sends.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace perftracker {

class LineReader {
 public:
  static constexpr size_t kDefaultMaxLine = 64 * 1024;

  explicit LineReader(size_t max_line = kDefaultMaxLine) : max_line_(max_line) {}

  // Appends `bytes`; every line completed by them is appended to `lines`.
  void Feed(std::string_view bytes, std::vector<std::string>* lines);

  uint64_t oversized_lines() const { return oversized_; }
  size_t buffered() const { return partial_.size(); }

 private:
  size_t max_line_;
  std::string partial_;
  bool skipping_ = false;  // inside an oversized line: discard up to the next '\n'
  uint64_t oversized_ = 0;
};

}  // namespace perftracker
