// RecordingReceiver: the server's side of a window's Perfetto recordings sent by a collector
// on another host (control.proto's WindowRecording, asked for after the window's diagnosis).
// It writes each rank's chunks, in order, to <dir>/window-<id>-rank-<r>.ptrace.part and
// renames the file to .ptrace when the last chunk is in (report/rank_trace_file.h reads it).
//
// Checks, each an InvalidArgument that names the window and rank (the part is dropped): a
// chunk that does not start where the file ends (a chunk lost on the way: the collector's
// queue was full), a recording over max_bytes. One receiver per collector stream; the parts
// a stream leaves unfinished (it broke) are removed with the receiver.
#pragma once

#include <cstdint>
#include <fstream>
#include <map>
#include <string>
#include <utility>

#include "perftracker/core/status.h"
#include "perftracker/wire/control_messages.h"

namespace perftracker {

class RecordingReceiver {
 public:
  // A rank's recording holds at most the collector's --perfetto-events-per-rank events of
  // 40 B (10 MB at the default 250,000) plus its function names; 1 GiB leaves room for
  // any cap a collector sets and still bounds the server's disk.
  static constexpr uint64_t kDefaultMaxBytes = uint64_t{1} << 30;

  explicit RecordingReceiver(std::string dir, uint64_t max_bytes = kDefaultMaxBytes);
  ~RecordingReceiver();
  RecordingReceiver(const RecordingReceiver&) = delete;
  RecordingReceiver& operator=(const RecordingReceiver&) = delete;

  // Appends `chunk` (one with `missing` set is not for this class). When it completed the
  // rank's file, *complete is its path; else *complete is left empty.
  Status Add(const ControlWindowRecording& chunk, std::string* complete);

 private:
  struct Part {
    std::string path;  // the .part file
    std::ofstream out;
    uint64_t bytes = 0;
  };
  void Drop(std::map<std::pair<uint64_t, int32_t>, Part>::iterator it);

  std::string dir_;
  uint64_t max_bytes_;
  std::map<std::pair<uint64_t, int32_t>, Part> parts_;  // (window, rank) -> its file so far
};

}  // namespace perftracker
