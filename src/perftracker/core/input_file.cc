#include "perftracker/core/input_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace perftracker {
namespace {

// Why a file of this type cannot be read as input, or nullptr for a regular file.
const char* NotRegularReason(mode_t mode) {
  if (S_ISREG(mode)) return nullptr;
  if (S_ISDIR(mode)) return "is a directory, not a file";
  if (S_ISFIFO(mode)) return "is a FIFO (named pipe), not a regular file; copy the data to a file";
  if (S_ISSOCK(mode)) return "is a socket, not a regular file";
  if (S_ISCHR(mode) || S_ISBLK(mode)) return "is a device, not a regular file";
  return "is not a regular file";
}

}  // namespace

Status InputPathError(const std::string& path, int err) {
  switch (err) {
    case ENOENT:
      return Status::NotFound(path + ": no such file or directory");
    case ELOOP:
      return Status::InvalidArgument(path + ": symlink loop (too many levels of symbolic links)");
    case EACCES:
      return Status::InvalidArgument(path + ": permission denied");
    case ENOTDIR:
      return Status::NotFound(path + ": a component of the path is not a directory");
    default:
      return Status::InvalidArgument(path + ": cannot open: " + std::strerror(err));
  }
}

StatusOr<int> OpenInputFile(const std::string& path) {
  // stat() first: open() on a socket fails with a misleading ENXIO.
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return InputPathError(path, errno);
  if (const char* why = NotRegularReason(st.st_mode)) {
    return Status::InvalidArgument(path + ": " + why);
  }
  // O_NONBLOCK: should the path become a FIFO between stat() and open(), open() still returns.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
  if (fd < 0) return InputPathError(path, errno);
  if (::fstat(fd, &st) != 0 || NotRegularReason(st.st_mode) != nullptr) {
    const char* why = NotRegularReason(st.st_mode);
    ::close(fd);
    return Status::InvalidArgument(path + ": " + (why != nullptr ? why : "cannot stat"));
  }
  const int flags = ::fcntl(fd, F_GETFL);
  if (flags < 0 || ::fcntl(fd, F_SETFL, flags & ~O_NONBLOCK) != 0) {
    const int err = errno;
    ::close(fd);
    return InputPathError(path, err);
  }
  return fd;
}

StatusOr<std::string> ReadInputFile(const std::string& path, size_t max_bytes) {
  StatusOr<int> fd = OpenInputFile(path);
  if (!fd.ok()) return fd.status();
  std::string data;
  char buf[65536];
  for (;;) {
    const ssize_t n = ::read(*fd, buf, sizeof(buf));
    if (n < 0) {
      if (errno == EINTR) continue;
      const int err = errno;
      ::close(*fd);
      return Status::DataLoss(path + ": read error: " + std::strerror(err));
    }
    if (n == 0) break;
    if (data.size() + static_cast<size_t>(n) > max_bytes) {
      ::close(*fd);
      return Status::InvalidArgument(path + ": larger than " + std::to_string(max_bytes) +
                                     " bytes; is this the right file?");
    }
    data.append(buf, static_cast<size_t>(n));
  }
  ::close(*fd);
  return data;
}

}  // namespace perftracker
