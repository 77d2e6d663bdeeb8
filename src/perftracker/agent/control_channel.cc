#include "perftracker/agent/control_channel.h"

#include <fcntl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "perftracker/agent/fork_gate.h"

namespace perftracker {

ControlChannel::~ControlChannel() { Close(); }

Status ControlChannel::Connect(const std::string& path) {
  Close();
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.size() >= sizeof(addr.sun_path)) {
    return Status::InvalidArgument("collector socket path too long: " + path);
  }
  std::memcpy(addr.sun_path, path.data(), path.size());
  const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return Status::Internal(std::string("socket: ") + std::strerror(errno));
  // A Unix-socket connect completes or fails at once (no network round trip).
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    const std::string err = std::strerror(errno);
    close(fd);
    return Status::NotFound(err);
  }
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
  fd_ = fd;
  out_.clear();
  out_pos_ = 0;
  return Status::Ok();
}

void ControlChannel::Close() {
  if (fd_ >= 0) close(fd_);
  fd_ = -1;
  out_.clear();
  out_pos_ = 0;
  // A closed channel holds nothing of its connection: a line cut off by the close is
  // incomplete, and the lines of a collector that is gone are not acted on.
  in_.clear();
  in_.shrink_to_fit();
  skipping_oversized_ = false;
  buffered_lines_ = false;
}

void ControlChannel::Fail(const char* what) {
  last_error_ = std::string(what) + ": " + std::strerror(errno);
  Close();
}

bool ControlChannel::SendLine(std::string_view line) {
  if (fd_ < 0 || line.size() + 1 > kMaxLine ||
      out_.size() - out_pos_ + line.size() + 1 > kMaxPendingOut) {
    ++dropped_lines_;
    return false;
  }
  if (out_pos_ == out_.size()) {
    out_.clear();
    out_pos_ = 0;
  }
  out_.append(line);
  out_.push_back('\n');
  return Flush();
}

bool ControlChannel::Flush() {
  while (fd_ >= 0 && out_pos_ < out_.size()) {
    const ssize_t n =
        send(fd_, out_.data() + out_pos_, out_.size() - out_pos_, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      out_pos_ += static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return true;  // later
    if (n < 0 && errno == EINTR) continue;
    Fail("send");
    return false;
  }
  if (out_pos_ == out_.size()) {
    out_.clear();
    out_pos_ = 0;
  }
  return fd_ >= 0;
}

void ControlChannel::Append(std::string_view bytes) {
  if (skipping_oversized_) {
    const size_t nl = bytes.find('\n');
    if (nl == std::string_view::npos) return;  // still inside the over-long line
    bytes.remove_prefix(nl + 1);
    skipping_oversized_ = false;
  }
  in_.append(bytes);
}

size_t ControlChannel::TakeLines(std::vector<std::string>* lines, size_t max) {
  size_t taken = 0;
  size_t pos = 0;
  size_t nl = std::string::npos;
  while (taken < max && (nl = in_.find('\n', pos)) != std::string::npos) {
    if (nl - pos > kMaxLineIn) {
      ++oversized_in_;  // complete but over-long: dropped whole
    } else {
      lines->emplace_back(in_, pos, nl - pos);
      ++taken;
    }
    pos = nl + 1;
  }
  in_.erase(0, pos);
  buffered_lines_ = taken == max && in_.find('\n') != std::string::npos;
  if (!buffered_lines_ && in_.size() > kMaxLineIn) {
    // A partial line already over the limit: free it and skip to its end.
    ++oversized_in_;
    in_.clear();
    skipping_oversized_ = true;
  }
  return taken;
}

bool ControlChannel::ReadLines(std::vector<std::string>* lines) {
  size_t taken = TakeLines(lines, kMaxLinesPerRead);  // what the last call left
  char buf[kReadChunk];
  while (fd_ >= 0 && taken < kMaxLinesPerRead) {
    ForkGate::Yield();  // a collector that keeps sending must not hold up the job's fork
    const ssize_t n = recv(fd_, buf, sizeof(buf), MSG_DONTWAIT);
    if (n == 0) {
      last_error_ = "the collector closed the connection";
      Close();
      return false;
    }
    if (n < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK) return true;
      if (errno == EINTR) continue;
      Fail("recv");
      return false;
    }
    Append(std::string_view(buf, static_cast<size_t>(n)));
    taken += TakeLines(lines, kMaxLinesPerRead - taken);
  }
  return fd_ >= 0;
}

}  // namespace perftracker
