#include "perftracker/core/private_file_mode.h"

#include <atomic>

namespace perftracker {
namespace {

constexpr mode_t kDefaultMode = 0600;
std::atomic<mode_t> g_mode{kDefaultMode};

}  // namespace

mode_t PrivateFileMode() { return g_mode.load(std::memory_order_relaxed); }

mode_t PrivateDirMode() {
  const mode_t m = PrivateFileMode();
  return m | ((m & 0444) >> 2);
}

Status SetPrivateFileMode(const std::string& octal) {
  const std::string what = "--report-mode " + octal + ": ";
  if (octal.empty() || octal.size() > 4) {
    return Status::InvalidArgument(what + "expected an octal file mode such as 0600 or 0640");
  }
  mode_t mode = 0;
  for (char c : octal) {
    if (c < '0' || c > '7') {
      return Status::InvalidArgument(what + "expected an octal file mode such as 0600 or 0640");
    }
    mode = mode * 8 + static_cast<mode_t>(c - '0');
  }
  if ((mode & ~static_cast<mode_t>(0666)) != 0) {
    return Status::InvalidArgument(what + "only read and write bits (reports are not programs)");
  }
  if ((mode & 0600) != 0600) {
    return Status::InvalidArgument(what + "the owner must keep read and write (0600)");
  }
  g_mode.store(mode, std::memory_order_relaxed);
  return Status::Ok();
}

}  // namespace perftracker
