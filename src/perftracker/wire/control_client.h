// ControlClient: a collector's end of the control plane (control.proto), with gRPC hidden
// behind plain structs. Blocking calls, made from the caller's own threads: one thread may
// Write while another Reads the same stream, and Cancel() from any thread unblocks both.
// The collector's GrpcCoordinatorLink (collector/) owns those threads, so nothing here ever
// runs on a thread that drains rings.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "perftracker/core/status.h"
#include "perftracker/wire/control_messages.h"

namespace perftracker {

struct ControlClientOptions {
  std::string address;          // host:port of the server
  std::string token;            // sent as `authorization: Bearer <token>` (empty: none)
  std::string tls_ca_pem;       // set: TLS, trusting this certificate (or CA bundle)
  std::string tls_server_name;  // TLS name to check, when it differs from the address' host
  size_t max_message_bytes = 64u << 20;
  // A connection of this client's own instead of one shared with other clients to the
  // same address (load generators spread streams over several connections).
  bool private_connection = false;
};

// One Connect stream, registered.
class ControlStream {
 public:
  virtual ~ControlStream() = default;
  // Blocking; false when the stream is broken (then Finish() says why).
  virtual bool Write(const CollectorMessage& message) = 0;
  // Blocking; false when the stream ended. A message the client cannot decode is returned
  // as ControlRejected with the reason.
  virtual bool Read(ServerMessage* message) = 0;
  // Half-closes: no more writes; the server ends the stream once it read everything, so
  // Read then returns false (an orderly goodbye that keeps what was written).
  virtual bool WritesDone() = 0;
  // Unblocks Read and Write (any thread).
  virtual void Cancel() = 0;
  // After Read returned false: the stream's final status (Ok, or one line).
  virtual Status Finish() = 0;
  virtual const ControlRegistered& registered() const = 0;
};

class ControlClient {
 public:
  static StatusOr<std::unique_ptr<ControlClient>> Create(const ControlClientOptions& options);
  virtual ~ControlClient() = default;
  // Connects (at most timeout_ms for the channel to come up), sends `registration` and waits
  // for the server's answer. The error says what failed: unreachable, refused token, TLS,
  // rejected registration.
  virtual StatusOr<std::unique_ptr<ControlStream>> Connect(const ControlRegistration& registration,
                                                           int timeout_ms) = 0;
};

}  // namespace perftracker
