#include "perftracker/server/http/timeline_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <string_view>

#include <fmt/format.h>

namespace perftracker {
namespace {

constexpr std::string_view kTimelineSuffix = ".perfetto.json";

bool EndsWith(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

// Why `path` is not one this server serves, or "" when it may be.
std::string PathProblem(const std::string& path) {
  const std::filesystem::path p(path);
  if (!p.is_absolute()) return "not an absolute path";
  for (const std::filesystem::path& part : p) {
    if (part == "." || part == "..") return "a path with '.' or '..' in it";
  }
  if (path.find('\0') != std::string::npos) return "a path with a NUL byte";
  if (!EndsWith(p.filename().string(), kTimelineSuffix) ||
      p.filename().string() == kTimelineSuffix) {
    return "not a Perfetto export's name (*.perfetto.json)";
  }
  return "";
}

}  // namespace

StatusOr<std::unique_ptr<TimelineFile>> TimelineFile::Open(Store* store, const std::string& job_id,
                                                           uint64_t window_id) {
  StatusOr<DiagnosisRecord> d = store->GetDiagnosis(job_id, window_id);
  if (!d.ok()) return d.status();
  const std::string& path = d->perfetto_path;
  if (path.empty()) {
    return Status::NotFound(fmt::format(
        "job {} window {} has no Perfetto export (the server writes one when its collectors "
        "record the window's events: perftracker server/run --perfetto)",
        job_id, window_id));
  }
  const std::string problem = PathProblem(path);
  if (!problem.empty()) {
    return Status::NotFound(fmt::format(
        "job {} window {}: the stored Perfetto export {} is refused: {}", job_id, window_id,
        path.substr(0, 200), problem));
  }
  const int fd = ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    const int err = errno;
    return Status::NotFound(fmt::format(
        "job {} window {}: the Perfetto export {} cannot be opened on this server: {}", job_id,
        window_id, path, err == ELOOP ? "it is a symbolic link" : std::strerror(err)));
  }
  struct stat st {};
  std::string refused;
  if (::fstat(fd, &st) != 0) {
    refused = std::strerror(errno);
  } else if (!S_ISREG(st.st_mode)) {
    refused = "not a regular file";
  } else if (st.st_uid != ::geteuid()) {
    refused = "owned by another user than this server's";
  }
  if (!refused.empty()) {
    ::close(fd);
    return Status::NotFound(fmt::format(
        "job {} window {}: the Perfetto export {} is refused: {}", job_id, window_id, path,
        refused));
  }
  return std::unique_ptr<TimelineFile>(
      new TimelineFile(fd, static_cast<uint64_t>(st.st_size),
                       std::filesystem::path(path).filename().string()));
}

TimelineFile::~TimelineFile() { ::close(fd_); }

int64_t TimelineFile::Read(uint64_t offset, char* out, size_t length) const {
  while (true) {
    const ssize_t n = ::pread(fd_, out, length, static_cast<off_t>(offset));
    if (n >= 0) return n;
    if (errno != EINTR) return -1;
  }
}

}  // namespace perftracker
