#include "perftracker/server/http/connection_gate.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <pthread.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "perftracker/server/http/connection_stream.h"
#include "perftracker/server/http/request_framer.h"
#include "perftracker/server/http/tls_context.h"

namespace perftracker {
namespace {

constexpr size_t kReadChunk = 16 * 1024;
constexpr int kListenBacklog = 512;
constexpr int kMaxEpollEvents = 128;
// The loop wakes at least this often (deadlines are checked when it wakes).
constexpr int kMaxLoopSleepMs = 1000;

void BlockSigpipe() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGPIPE);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
}

std::string PeerAddress(const sockaddr_storage& addr, int* port) {
  char buf[INET6_ADDRSTRLEN] = {};
  *port = 0;
  if (addr.ss_family == AF_INET) {
    const auto* in = reinterpret_cast<const sockaddr_in*>(&addr);
    inet_ntop(AF_INET, &in->sin_addr, buf, sizeof(buf));
    *port = ntohs(in->sin_port);
  } else if (addr.ss_family == AF_INET6) {
    const auto* in6 = reinterpret_cast<const sockaddr_in6*>(&addr);
    inet_ntop(AF_INET6, &in6->sin6_addr, buf, sizeof(buf));
    *port = ntohs(in6->sin6_port);
  }
  return buf;
}

const char* Reason(int status) {
  switch (status) {
    case 400:
      return "Bad Request";
    case 411:
      return "Length Required";
    case 413:
      return "Payload Too Large";
    case 431:
      return "Request Header Fields Too Large";
    case 503:
      return "Service Unavailable";
    default:
      return "Error";
  }
}

// A complete short answer for a request the gate refuses itself.
std::string ShortAnswer(int status, const std::string& reason) {
  std::string body = "{\"error\":\"" + std::to_string(status) + " " + Reason(status) + ": ";
  for (char c : reason) {
    if (c != '"' && c != '\\') body += c;
  }
  body += "\"}";
  return fmt::format(
      "HTTP/1.1 {} {}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n"
      "Connection: close\r\nX-Content-Type-Options: nosniff\r\n\r\n{}",
      status, Reason(status), body.size(), body);
}

}  // namespace

struct ConnectionGate::Connection {
  enum class State : uint8_t { kHandshake, kReading, kInHandler };
  int fd = -1;
  SSL* ssl = nullptr;
  std::string peer;
  int peer_port = 0;
  State state = State::kReading;
  std::string in;
  // When the connection became ready for its current request (or accepted, for a
  // handshake) and by when that must complete.
  Clock::time_point since;
  Clock::time_point deadline;
  bool sent_continue = false;
  int served = 0;
  uint32_t watched = 0;  // the epoll events registered, 0 when not registered
};

ConnectionGate::ConnectionGate(ConnectionGateOptions options, const TlsContext* tls,
                               Handler handler, CloseObserver observer)
    : options_(std::move(options)),
      tls_(tls),
      handler_(std::move(handler)),
      observer_(std::move(observer)) {}

ConnectionGate::~ConnectionGate() { Stop(); }

ConnectionGate::Stats ConnectionGate::stats() const {
  std::lock_guard<std::mutex> lock(stats_mu_);
  return stats_;
}

Status ConnectionGate::Start() {
  if (listen_fd_ >= 0) return Status::InvalidArgument("http: already started");
  const std::string where = options_.port == 0 ? fmt::format("{} (any port)", options_.host)
                                               : fmt::format("{}:{}", options_.host, options_.port);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  const std::string port_text = std::to_string(options_.port);
  if (const int rc = getaddrinfo(options_.host.c_str(), port_text.c_str(), &hints, &found);
      rc != 0) {
    return Status::InvalidArgument(
        fmt::format("http: cannot listen on {}: {}", where, gai_strerror(rc)));
  }
  int err = 0;
  for (addrinfo* a = found; a != nullptr && listen_fd_ < 0; a = a->ai_next) {
    const int fd =
        socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, a->ai_protocol);
    if (fd < 0) {
      err = errno;
      continue;
    }
    // SO_REUSEADDR only: SO_REUSEPORT would let a second process bind the same port and
    // receive part of the requests (tokens included).
    const int yes = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
    if (bind(fd, a->ai_addr, a->ai_addrlen) != 0 || listen(fd, kListenBacklog) != 0) {
      err = errno;
      close(fd);
      continue;
    }
    listen_fd_ = fd;
  }
  freeaddrinfo(found);
  if (listen_fd_ < 0) {
    return Status::InvalidArgument(
        fmt::format("http: cannot listen on {}: {}", where, std::strerror(err)));
  }
  sockaddr_storage bound{};
  socklen_t len = sizeof(bound);
  getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&bound), &len);
  PeerAddress(bound, &port_);

  epoll_fd_ = epoll_create1(EPOLL_CLOEXEC);
  wake_fd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (epoll_fd_ < 0 || wake_fd_ < 0) {
    err = errno;
    Stop();
    return Status::Internal(
        fmt::format("http: cannot create an event loop: {}", std::strerror(err)));
  }
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.fd = listen_fd_;
  epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, listen_fd_, &ev);
  ev.data.fd = wake_fd_;
  epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, wake_fd_, &ev);

  stopping_ = false;
  loop_ = std::thread([this] { Loop(); });
  for (int i = 0; i < std::max(1, options_.threads); ++i) {
    handlers_.emplace_back([this] { HandlerThread(); });
  }
  return Status::Ok();
}

void ConnectionGate::Stop() {
  stopping_ = true;
  if (wake_fd_ >= 0) Wake();
  if (loop_.joinable()) loop_.join();
  {
    std::lock_guard<std::mutex> lock(queue_mu_);
    queue_.clear();  // their connections are closed below
  }
  queue_cv_.notify_all();
  for (std::thread& t : handlers_) t.join();
  handlers_.clear();
  returned_.clear();
  for (auto& [fd, c] : connections_) {
    if (c->ssl != nullptr) SSL_free(c->ssl);
    close(fd);
  }
  connections_.clear();
  per_peer_.clear();
  for (int* fd : {&listen_fd_, &epoll_fd_, &wake_fd_}) {
    if (*fd >= 0) close(*fd);
    *fd = -1;
  }
}

void ConnectionGate::Wake() {
  const uint64_t one = 1;
  (void)!write(wake_fd_, &one, sizeof(one));
}

void ConnectionGate::Loop() {
  BlockSigpipe();
  epoll_event events[kMaxEpollEvents];
  while (!stopping_) {
    const int n = epoll_wait(epoll_fd_, events, kMaxEpollEvents, NextTimeoutMs(Clock::now()));
    const Clock::time_point now = Clock::now();
    for (int i = 0; i < n && !stopping_; ++i) {
      const int fd = events[i].data.fd;
      if (fd == listen_fd_) {
        Accept(now);
      } else if (fd == wake_fd_) {
        uint64_t count;
        (void)!read(wake_fd_, &count, sizeof(count));
      } else if (auto it = connections_.find(fd); it != connections_.end()) {
        Advance(it->second.get(), now);
      }
    }
    TakeBackReturned(now);
    ExpireDeadlines(now);
  }
}

int ConnectionGate::NextTimeoutMs(Clock::time_point now) const {
  Clock::time_point next = now + std::chrono::milliseconds(kMaxLoopSleepMs);
  for (const auto& [fd, c] : connections_) {
    if (c->state != Connection::State::kInHandler) next = std::min(next, c->deadline);
  }
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(next - now).count();
  return static_cast<int>(std::clamp<int64_t>(ms + 1, 0, kMaxLoopSleepMs));
}

void ConnectionGate::Accept(Clock::time_point now) {
  while (!stopping_) {
    sockaddr_storage addr{};
    socklen_t len = sizeof(addr);
    const int fd =
        accept4(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      // EAGAIN: all taken. EMFILE/ENFILE: out of descriptors; the backlog waits until a
      // deadline closes some.
      return;
    }
    auto c = std::make_unique<Connection>();
    c->fd = fd;
    c->peer = PeerAddress(addr, &c->peer_port);
    {
      std::lock_guard<std::mutex> lock(stats_mu_);
      ++stats_.accepted;
    }
    if (per_peer_[c->peer] >= options_.max_connections_per_peer) {
      if (tls_ == nullptr) {
        const std::string answer =
            ShortAnswer(503, fmt::format("too many connections from {} (at most {} at a time)",
                                         c->peer, options_.max_connections_per_peer));
        (void)!send(fd, answer.data(), answer.size(), MSG_NOSIGNAL);
      }
      {
        std::lock_guard<std::mutex> lock(stats_mu_);
        ++stats_.peer_limit;
      }
      if (observer_) observer_(GateClose::kPeerLimit, c->peer, 503);
      close(fd);
      continue;
    }
    if (connections_.size() >= options_.max_connections && !EvictLongestWaiting()) {
      close(fd);  // every connection is being answered: the newcomer waits for none
      continue;
    }
    const int yes = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &yes, sizeof(yes));
    ++per_peer_[c->peer];
    c->since = now;
    if (tls_ != nullptr) {
      c->ssl = tls_->NewConnection(fd);
      if (c->ssl == nullptr) {
        --per_peer_[c->peer];
        close(fd);
        continue;
      }
      c->state = Connection::State::kHandshake;
      c->deadline = now + options_.handshake_timeout;
    } else {
      c->state = Connection::State::kReading;
      c->deadline = now + options_.request_timeout;
    }
    Connection* raw = c.get();
    connections_.emplace(fd, std::move(c));
    Watch(raw, EPOLLIN);
    Advance(raw, now);  // data may already be there
  }
}

void ConnectionGate::Watch(Connection* c, uint32_t events) {
  if (c->watched == events) return;
  epoll_event ev{};
  ev.events = events;
  ev.data.fd = c->fd;
  if (events == 0) {
    epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, c->fd, nullptr);
  } else {
    epoll_ctl(epoll_fd_, c->watched == 0 ? EPOLL_CTL_ADD : EPOLL_CTL_MOD, c->fd, &ev);
  }
  c->watched = events;
}

void ConnectionGate::Advance(Connection* c, Clock::time_point now) {
  if (c->state == Connection::State::kHandshake) {
    ERR_clear_error();  // SSL_get_error reads this thread's queue
    const int r = SSL_do_handshake(c->ssl);
    if (r != 1) {
      const int err = SSL_get_error(c->ssl, r);
      if (err == SSL_ERROR_WANT_READ) {
        Watch(c, EPOLLIN);
      } else if (err == SSL_ERROR_WANT_WRITE) {
        Watch(c, EPOLLOUT);
      } else {
        Close(c);  // not TLS, or a failed handshake
      }
      return;
    }
    c->state = Connection::State::kReading;
    c->since = now;
    c->deadline = now + options_.request_timeout;
    Watch(c, EPOLLIN);
  }
  if (c->state != Connection::State::kReading) return;
  if (!ReadAvailable(c)) {
    Close(c);
    return;
  }
  Frame(c);
}

bool ConnectionGate::ReadAvailable(Connection* c) {
  // At most one request's worth is buffered: the framer refuses anything longer, and a
  // complete request leaves the loop before more is read.
  const size_t cap = options_.max_head_bytes + options_.max_body_bytes + kReadChunk;
  char buf[kReadChunk];
  while (c->in.size() < cap) {
    if (c->ssl != nullptr) {
      ERR_clear_error();
      const int n = SSL_read(c->ssl, buf, sizeof(buf));
      if (n > 0) {
        c->in.append(buf, static_cast<size_t>(n));
        continue;
      }
      const int err = SSL_get_error(c->ssl, n);
      return err == SSL_ERROR_WANT_READ || err == SSL_ERROR_WANT_WRITE;
    }
    const ssize_t n = recv(c->fd, buf, sizeof(buf), 0);
    if (n > 0) {
      c->in.append(buf, static_cast<size_t>(n));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    return n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
  }
  return true;
}

void ConnectionGate::Frame(Connection* c) {
  const RequestFrame frame = FrameRequest(c->in, options_.max_head_bytes, options_.max_body_bytes);
  switch (frame.kind) {
    case RequestFrame::Kind::kIncomplete:
      if (frame.head_complete && frame.expect_length > 0 && !c->sent_continue) {
        // The client waits for this before it sends the body.
        static constexpr char kContinue[] = "HTTP/1.1 100 Continue\r\n\r\n";
        if (c->ssl != nullptr) {
          (void)SSL_write(c->ssl, kContinue, sizeof(kContinue) - 1);
        } else {
          (void)!send(c->fd, kContinue, sizeof(kContinue) - 1, MSG_NOSIGNAL);
        }
        c->sent_continue = true;
      }
      return;
    case RequestFrame::Kind::kRefused:
      Answer(c, frame.status, frame.reason);
      return;
    case RequestFrame::Kind::kComplete:
      break;
  }
  std::string request = c->in.substr(0, frame.total_length());
  c->in.erase(0, frame.total_length());
  if (frame.expect_length > 0) request.erase(frame.expect_offset, frame.expect_length);
  if (!frame.has_content_length) {
    // Before the blank line that ends the head (the Expect line, if any, came before it).
    const size_t blank = request.find("\r\n\r\n");
    request.insert(blank + 2, "Content-Length: 0\r\n");
  }
  c->sent_continue = false;
  Dispatch(c, std::move(request));
}

void ConnectionGate::Answer(Connection* c, int status, const std::string& reason) {
  const std::string answer = ShortAnswer(status, reason);
  if (c->ssl != nullptr) {
    (void)SSL_write(c->ssl, answer.data(), static_cast<int>(answer.size()));
  } else {
    (void)!send(c->fd, answer.data(), answer.size(), MSG_NOSIGNAL);
  }
  shutdown(c->fd, SHUT_WR);
  CloseBecause(c, GateClose::kRefusedRequest, status);
}

void ConnectionGate::Dispatch(Connection* c, std::string request) {
  Watch(c, 0);
  c->state = Connection::State::kInHandler;
  {
    std::lock_guard<std::mutex> lock(stats_mu_);
    ++stats_.requests;
  }
  {
    std::lock_guard<std::mutex> lock(queue_mu_);
    queue_.emplace_back(c, std::move(request));
  }
  queue_cv_.notify_one();
}

void ConnectionGate::HandlerThread() {
  BlockSigpipe();
  while (true) {
    std::pair<Connection*, std::string> job;
    {
      std::unique_lock<std::mutex> lock(queue_mu_);
      queue_cv_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
      if (stopping_) return;
      job = std::move(queue_.front());
      queue_.pop_front();
    }
    Serve(job.first, std::move(job.second));
  }
}

void ConnectionGate::Serve(Connection* c, std::string request) {
  const bool last = c->served + 1 >= options_.max_requests_per_connection || stopping_;
  ConnectionStream stream(c->fd, c->ssl, std::move(request), c->peer, c->peer_port,
                          Clock::now() + options_.write_timeout);
  bool keep = false;
  try {
    keep = handler_(stream, last) && !last && !stream.write_failed();
  } catch (...) {
    keep = false;  // the handler answers its own exceptions; this keeps the thread alive
  }
  ++c->served;
  {
    std::lock_guard<std::mutex> lock(returned_mu_);
    returned_.emplace_back(c, keep);
  }
  Wake();
}

void ConnectionGate::TakeBackReturned(Clock::time_point now) {
  std::vector<std::pair<Connection*, bool>> returned;
  {
    std::lock_guard<std::mutex> lock(returned_mu_);
    returned.swap(returned_);
  }
  for (auto [c, keep] : returned) {
    if (!keep) {
      Close(c);
      continue;
    }
    c->state = Connection::State::kReading;
    c->since = now;
    c->deadline = now + options_.request_timeout;
    Watch(c, EPOLLIN);
    Frame(c);  // a pipelined request may already be buffered
  }
}

void ConnectionGate::ExpireDeadlines(Clock::time_point now) {
  std::vector<Connection*> expired;
  for (const auto& [fd, c] : connections_) {
    if (c->state != Connection::State::kInHandler && c->deadline <= now) expired.push_back(c.get());
  }
  for (Connection* c : expired) {
    CloseBecause(c, c->state == Connection::State::kHandshake ? GateClose::kHandshakeTimeout
                                                              : GateClose::kRequestTimeout);
  }
}

bool ConnectionGate::EvictLongestWaiting() {
  Connection* oldest = nullptr;
  for (const auto& [fd, c] : connections_) {
    if (c->state == Connection::State::kInHandler) continue;
    if (oldest == nullptr || c->since < oldest->since) oldest = c.get();
  }
  if (oldest == nullptr) return false;
  CloseBecause(oldest, GateClose::kEvicted);
  return true;
}

void ConnectionGate::CloseBecause(Connection* c, GateClose why, int status) {
  {
    std::lock_guard<std::mutex> lock(stats_mu_);
    switch (why) {
      case GateClose::kPeerLimit:
        ++stats_.peer_limit;
        break;
      case GateClose::kEvicted:
        ++stats_.evicted;
        break;
      case GateClose::kRequestTimeout:
        ++stats_.request_timeouts;
        break;
      case GateClose::kHandshakeTimeout:
        ++stats_.handshake_timeouts;
        break;
      case GateClose::kRefusedRequest:
        ++stats_.refused_requests;
        break;
    }
  }
  // An idle keep-alive connection that reached its deadline is ordinary, not worth a word.
  const bool idle_keep_alive = why == GateClose::kRequestTimeout && c->served > 0 && c->in.empty();
  if (observer_ && !idle_keep_alive) observer_(why, c->peer, status);
  Close(c);
}

void ConnectionGate::Close(Connection* c) {
  Watch(c, 0);
  if (c->ssl != nullptr) SSL_free(c->ssl);
  const int fd = c->fd;
  if (auto it = per_peer_.find(c->peer); it != per_peer_.end() && --it->second == 0) {
    per_peer_.erase(it);
  }
  close(fd);
  connections_.erase(fd);  // destroys *c
}

}  // namespace perftracker
