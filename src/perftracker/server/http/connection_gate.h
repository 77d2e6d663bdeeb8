// ConnectionGate: the HTTP server's listener and connection reader, built so that a client
// who sends slowly, or nothing, costs a buffer and a descriptor but never a handler thread.
//
// One event-loop thread (epoll) accepts connections, drives their TLS handshakes
// (non-blocking) and reads their requests into per-connection buffers; FrameRequest says
// when a request is complete. Only then is the request handed to one of `threads` handler
// threads, which answer it (ConnectionStream: reads from the buffer, writes to the socket
// under a write deadline) and give the connection back to the loop for its next request.
//
// Bounds, each enforced by the loop:
// - a whole request (head and body) must arrive within `request_timeout` of the connection
//   being ready for it (accepted, handshaken, or done with its previous request); the
//   deadline does not restart with each byte, so one byte every few seconds does not keep a
//   connection. An idle keep-alive connection is closed at the same deadline.
// - a TLS handshake must finish within `handshake_timeout` of the accept.
// - at most `max_connections_per_peer` open connections per client address; more are
//   refused at once (plain HTTP gets a 503 saying why).
// - at most `max_connections` in all; at the limit, the connection that has waited longest
//   without completing a request is closed to admit the new one (an attacker holding
//   connections from many addresses is evicted first, since clients that send a whole
//   request promptly rarely wait long).
// - heads over `max_head_bytes` get 431, bodies over `max_body_bytes` 413 (FrameRequest).
//
// The handler threads therefore only ever work on complete requests, and an authenticated
// client is answered after at most the requests queued before its own (each answered from
// memory: a 401 for an unauthenticated one).
//
// Threads: Start() binds and starts the loop and the handlers; Stop() joins them all (a
// request being answered finishes first; queued ones are dropped) and closes every
// connection. SIGPIPE is blocked on the gate's threads (a peer that went away gives EPIPE).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "perftracker/core/status.h"

namespace httplib {
class Stream;
}  // namespace httplib

namespace perftracker {

class TlsContext;

struct ConnectionGateOptions {
  std::string host = "127.0.0.1";
  int port = 0;  // 0: any free port
  int threads = 8;
  size_t max_connections = 512;
  size_t max_connections_per_peer = 32;
  std::chrono::milliseconds request_timeout{10'000};
  std::chrono::milliseconds handshake_timeout{10'000};
  std::chrono::milliseconds write_timeout{10'000};
  size_t max_head_bytes = 16 * 1024;
  size_t max_body_bytes = 64 * 1024;
  int max_requests_per_connection = 100;
};

// Why the gate closed a connection on its own (counted in ConnectionGate::Stats).
enum class GateClose : uint8_t {
  kPeerLimit,         // refused: its address already had max_connections_per_peer open
  kEvicted,           // closed to admit a new one at max_connections
  kRequestTimeout,    // no complete request within request_timeout
  kHandshakeTimeout,  // TLS handshake not done within handshake_timeout
  kRefusedRequest,    // FrameRequest refused its request (431, 413, 411, 400)
};

class ConnectionGate {
 public:
  // Answers one complete request on `stream`; `last` says the connection closes afterwards.
  // Returns whether the connection may stay open for another request.
  using Handler = std::function<bool(httplib::Stream& stream, bool last)>;
  // Told of every connection the gate closes on its own, with the peer's address and, for
  // kRefusedRequest, the status it answered. Called on the loop thread: must not block.
  using CloseObserver = std::function<void(GateClose why, const std::string& peer, int status)>;

  struct Stats {
    uint64_t accepted = 0;
    uint64_t peer_limit = 0;
    uint64_t evicted = 0;
    uint64_t request_timeouts = 0;
    uint64_t handshake_timeouts = 0;
    uint64_t refused_requests = 0;
    uint64_t requests = 0;  // handed to a handler
  };

  // `tls` may be null (plain HTTP); it and the callbacks must outlive the gate.
  ConnectionGate(ConnectionGateOptions options, const TlsContext* tls, Handler handler,
                 CloseObserver observer);
  ~ConnectionGate();  // Stop()s
  ConnectionGate(const ConnectionGate&) = delete;
  ConnectionGate& operator=(const ConnectionGate&) = delete;

  // Binds host:port and starts the threads. Errors name the address ("http: cannot listen
  // on 127.0.0.1:80: Permission denied").
  Status Start();
  void Stop();

  int port() const { return port_; }
  Stats stats() const;

 private:
  struct Connection;
  using Clock = std::chrono::steady_clock;

  void Loop();
  void Accept(Clock::time_point now);
  void Advance(Connection* c, Clock::time_point now);
  // Reads what the connection has sent; false when it closed or failed.
  bool ReadAvailable(Connection* c);
  // Frames the buffered bytes: dispatches a complete request, answers a refused one.
  void Frame(Connection* c);
  void Dispatch(Connection* c, std::string request);
  void Answer(Connection* c, int status, const std::string& reason);
  void Watch(Connection* c, uint32_t events);
  void Close(Connection* c);
  void CloseBecause(Connection* c, GateClose why, int status = 0);
  void TakeBackReturned(Clock::time_point now);
  void ExpireDeadlines(Clock::time_point now);
  bool EvictLongestWaiting();
  int NextTimeoutMs(Clock::time_point now) const;
  void Wake();

  void HandlerThread();
  void Serve(Connection* c, std::string request);

  ConnectionGateOptions options_;
  const TlsContext* tls_;
  Handler handler_;
  CloseObserver observer_;

  int listen_fd_ = -1;
  int epoll_fd_ = -1;
  int wake_fd_ = -1;
  int port_ = 0;
  std::thread loop_;
  std::vector<std::thread> handlers_;
  std::atomic<bool> stopping_{false};

  // Loop thread only (and Stop() once every thread is joined).
  std::unordered_map<int, std::unique_ptr<Connection>> connections_;
  std::unordered_map<std::string, size_t> per_peer_;

  // Handed from the loop to the handlers.
  std::mutex queue_mu_;
  std::condition_variable queue_cv_;
  std::deque<std::pair<Connection*, std::string>> queue_;

  // Handed back from the handlers to the loop: the connection and whether it stays open.
  std::mutex returned_mu_;
  std::vector<std::pair<Connection*, bool>> returned_;

  mutable std::mutex stats_mu_;
  Stats stats_;
};

}  // namespace perftracker
