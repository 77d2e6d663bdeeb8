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
  in_.clear();
  skipping_oversized_ = false;
  return Status::Ok();
}

void ControlChannel::Close() {
  if (fd_ >= 0) close(fd_);
  fd_ = -1;
  out_.clear();
  out_pos_ = 0;
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

bool ControlChannel::ReadLines(std::vector<std::string>* lines) {
  char buf[16384];
  while (fd_ >= 0) {
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
    for (ssize_t i = 0; i < n; ++i) {
      const char c = buf[i];
      if (c == '\n') {
        if (!skipping_oversized_) lines->push_back(std::move(in_));
        in_.clear();
        skipping_oversized_ = false;
      } else if (!skipping_oversized_) {
        in_.push_back(c);
        if (in_.size() > kMaxLine) {  // protocol violation: skip to the next newline
          ++oversized_in_;
          in_.clear();
          skipping_oversized_ = true;
        }
      }
    }
  }
  return false;
}

}  // namespace perftracker
