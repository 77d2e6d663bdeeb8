#include "perftracker/server/http/connection_stream.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace perftracker {

ConnectionStream::ConnectionStream(int fd, ssl_st* ssl, std::string request, std::string remote_ip,
                                   int remote_port, Clock::time_point write_deadline)
    : fd_(fd),
      ssl_(ssl),
      request_(std::move(request)),
      remote_ip_(std::move(remote_ip)),
      remote_port_(remote_port),
      write_deadline_(write_deadline) {}

ssize_t ConnectionStream::read(char* ptr, size_t size) {
  const size_t n = std::min(size, request_.size() - read_pos_);
  std::memcpy(ptr, request_.data() + read_pos_, n);
  read_pos_ += n;
  return static_cast<ssize_t>(n);
}

bool ConnectionStream::Wait(short events) const {
  const auto left =
      std::chrono::duration_cast<std::chrono::milliseconds>(write_deadline_ - Clock::now());
  if (left.count() <= 0) return false;
  pollfd p{fd_, events, 0};
  int r;
  do {
    r = ::poll(&p, 1, static_cast<int>(left.count()));
  } while (r < 0 && errno == EINTR);
  return r > 0 && (p.revents & (events | POLLHUP | POLLERR)) != 0;
}

ssize_t ConnectionStream::write(const char* ptr, size_t size) {
  size_t done = 0;
  while (!write_failed_ && done < size) {
    if (ssl_ != nullptr) {
      ERR_clear_error();  // SSL_get_error reads this thread's queue
      const int n =
          SSL_write(ssl_, ptr + done, static_cast<int>(std::min<size_t>(size - done, 1 << 20)));
      if (n > 0) {
        done += static_cast<size_t>(n);
        continue;
      }
      const int err = SSL_get_error(ssl_, n);
      if (err == SSL_ERROR_WANT_WRITE) {
        write_failed_ = !Wait(POLLOUT);
      } else if (err == SSL_ERROR_WANT_READ) {
        write_failed_ = !Wait(POLLIN);
      } else {
        write_failed_ = true;
      }
      continue;
    }
    const ssize_t n = ::send(fd_, ptr + done, size - done, MSG_NOSIGNAL);
    if (n > 0) {
      done += static_cast<size_t>(n);
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      write_failed_ = !Wait(POLLOUT);
    } else {
      write_failed_ = true;
    }
  }
  return write_failed_ ? -1 : static_cast<ssize_t>(size);
}

void ConnectionStream::get_remote_ip_and_port(std::string& ip, int& port) const {
  ip = remote_ip_;
  port = remote_port_;
}

void ConnectionStream::get_local_ip_and_port(std::string& ip, int& port) const {
  sockaddr_storage addr{};
  socklen_t len = sizeof(addr);
  ip.clear();
  port = 0;
  if (getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len) != 0) return;
  char buf[INET6_ADDRSTRLEN] = {};
  if (addr.ss_family == AF_INET) {
    const auto* in = reinterpret_cast<const sockaddr_in*>(&addr);
    inet_ntop(AF_INET, &in->sin_addr, buf, sizeof(buf));
    port = ntohs(in->sin_port);
  } else if (addr.ss_family == AF_INET6) {
    const auto* in6 = reinterpret_cast<const sockaddr_in6*>(&addr);
    inet_ntop(AF_INET6, &in6->sin6_addr, buf, sizeof(buf));
    port = ntohs(in6->sin6_port);
  }
  ip = buf;
}

}  // namespace perftracker
