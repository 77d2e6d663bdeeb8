// TimelineFile: a window's Perfetto export (window-<id>.perfetto.json), opened for download
// (GET /api/v1/jobs/{job}/windows/{id}/perfetto, the web UI's "Perfetto" link).
//
// Path safety. The client names a job and a window id, never a path: the file is the one
// the store recorded for that window (DiagnosisRecord::perfetto_path, written by the server
// that made the export), and it is served only while it is still what that server wrote:
//   - an absolute path without "." or ".." components, whose name ends in ".perfetto.json";
//   - opened with O_NOFOLLOW: a symbolic link put in its place is refused;
//   - a regular file owned by this server's user (what its report writer made), not a
//     device, a directory or another user's file.
// A refusal is NotFound with one line that says which rule failed (the path is the server's
// own: nothing to hide from the token holder, who may read the store anyway).
//
// The file stays open (and is read with pread) until the object is destroyed, so a file
// replaced or removed while it is downloaded is still served whole, as it was at Open().
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "perftracker/core/status.h"
#include "perftracker/server/store/store.h"

namespace perftracker {

class TimelineFile {
 public:
  // The window's export; NotFound (one line naming the job and window) when the window has
  // no diagnosis, its diagnosis no export, the file is gone, or it breaks a rule above.
  static StatusOr<std::unique_ptr<TimelineFile>> Open(Store* store, const std::string& job_id,
                                                      uint64_t window_id);
  ~TimelineFile();
  TimelineFile(const TimelineFile&) = delete;
  TimelineFile& operator=(const TimelineFile&) = delete;

  uint64_t size() const { return size_; }
  // The name a browser saves it under: the stored file's name.
  const std::string& file_name() const { return file_name_; }
  // Up to `length` bytes from `offset` into `out` (at most `length` bytes long); the number
  // read (0 at the end), or -1 on a read error.
  int64_t Read(uint64_t offset, char* out, size_t length) const;

 private:
  TimelineFile(int fd, uint64_t size, std::string file_name)
      : fd_(fd), size_(size), file_name_(std::move(file_name)) {}

  int fd_;
  uint64_t size_;
  std::string file_name_;
};

}  // namespace perftracker
