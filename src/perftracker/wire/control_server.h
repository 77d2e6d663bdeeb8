// ControlServer: the gRPC endpoint of the control plane (control.proto), with gRPC and the
// generated types hidden behind plain structs. The server/ layer implements ControlHandler
// (what to do with a collector) and never sees gRPC.
//
// Streams. Each collector holds one ControlPlane.Connect stream (callback API: no thread per
// stream, 2,000 collectors are 2,000 reactors). The first message must be a registration;
// the handler answers it with a ControlSession (or an error, which ends the stream with
// FAILED_PRECONDITION / INVALID_ARGUMENT and that line). Then every message goes to the
// session; a message the session rejects (unknown window, bad summary bytes) is answered
// with a ControlRejected line and the stream goes on. What the server sends goes through a
// CommandSink: a bounded per-stream queue that never blocks the caller (a full queue drops
// and counts). Messages are handled on the server's own worker threads (worker_threads),
// one at a time per stream and in order, never on gRPC's transport threads (which must keep
// answering keepalive pings and serving other streams). When the stream ends (the collector left,
// the network broke, the server stops) the session's OnClosed runs once, from a gRPC thread.
//
// Security. With a token, every call must carry `authorization: Bearer <token>`; the
// comparison takes the same time whatever the mismatch. A call without it or with a wrong
// one ends with UNAUTHENTICATED, and the first refusal from each peer address is logged
// (later ones only counted). With a certificate and key the port speaks TLS only.
// Messages over max_message_bytes end the stream with RESOURCE_EXHAUSTED (gRPC's check,
// before any parsing); bytes that do not parse end it with INTERNAL; fields that break the
// limits of control_messages.h are rejected with a line.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "perftracker/core/status.h"
#include "perftracker/wire/control_messages.h"

namespace perftracker {

// Queues a message for one collector's stream. Thread-safe, never blocks; false when the
// stream is gone or its queue is full (the message is dropped and counted).
class CommandSink {
 public:
  virtual ~CommandSink() = default;
  virtual bool Send(ServerMessage message) = 0;
  // The peer's address ("ipv4:10.0.0.2:51234").
  virtual const std::string& peer() const = 0;
};

// One registered collector's stream, on the server side.
class ControlSession {
 public:
  virtual ~ControlSession() = default;
  // A message after the registration. A non-ok Status rejects this message only: its line
  // goes back to the collector as ControlRejected.
  virtual Status OnMessage(CollectorMessage message) = 0;
  // The stream ended (called once; the sink accepts nothing from now on).
  virtual void OnClosed() = 0;
};

class ControlHandler {
 public:
  virtual ~ControlHandler() = default;
  // A stream's registration. The session may keep `sink` for as long as it likes.
  virtual StatusOr<std::shared_ptr<ControlSession>> OnRegister(
      const ControlRegistration& registration, std::shared_ptr<CommandSink> sink) = 0;
};

struct ControlServerOptions {
  std::string listen = "127.0.0.1:0";  // host:port; port 0 picks a free one
  std::string token;                   // empty: no authentication (loopback use only)
  std::string tls_cert_pem;            // both set: TLS
  std::string tls_key_pem;
  size_t max_message_bytes = 64u << 20;  // largest message a collector may send
  size_t max_queued_per_stream = 1024;   // commands waiting to be sent on one stream
  int worker_threads = 4;                // threads that run the handler's calls
  // Open files this process may hold (each collector's connection is one); once the streams
  // come within 256 of it the log says so, once. 0: the process's RLIMIT_NOFILE.
  size_t open_files_limit = 0;
  std::function<void(std::string_view)> log;  // default: stderr, "perftracker: " prefix
};

struct ControlServerStats {
  uint64_t streams_opened = 0;
  uint64_t streams_open = 0;
  uint64_t unauthenticated = 0;
  uint64_t registrations = 0;
  uint64_t registrations_refused = 0;
  uint64_t messages = 0;
  uint64_t messages_rejected = 0;
  uint64_t commands_dropped = 0;
};

class ControlServer {
 public:
  // Binds and starts serving. `handler` is not owned and must outlive Shutdown().
  static StatusOr<std::unique_ptr<ControlServer>> Start(ControlServerOptions options,
                                                        ControlHandler* handler);
  virtual ~ControlServer() = default;
  // The bound port (useful with port 0).
  virtual int port() const = 0;
  // Ends every stream (sessions get OnClosed) and stops serving. Idempotent.
  virtual void Shutdown() = 0;
  virtual ControlServerStats stats() const = 0;
};

// Compares a presented token with the expected one in time that depends only on their
// lengths (not on where they differ).
bool TokenMatches(std::string_view presented, std::string_view expected);

}  // namespace perftracker
