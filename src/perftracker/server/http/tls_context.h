// TlsContext: the server side of TLS (an OpenSSL SSL_CTX) loaded from a PEM certificate
// chain and its private key. TLS 1.2 or later, no renegotiation, no session tickets kept
// across restarts (none are issued). Connections are non-blocking: ConnectionGate drives the
// handshake from its event loop, so a client that stops halfway costs no thread.
#pragma once

#include <memory>
#include <string>

#include "perftracker/core/status.h"

struct ssl_ctx_st;
struct ssl_st;

namespace perftracker {

class TlsContext {
 public:
  // Errors name both files (e.g. "cannot use TLS certificate a.pem with key b.pem (...)").
  static StatusOr<std::unique_ptr<TlsContext>> Load(const std::string& cert_file,
                                                    const std::string& key_file);
  ~TlsContext();
  TlsContext(const TlsContext&) = delete;
  TlsContext& operator=(const TlsContext&) = delete;

  // A new server-side connection on `fd` (not yet handshaken), or null.
  ssl_st* NewConnection(int fd) const;

 private:
  explicit TlsContext(ssl_ctx_st* ctx) : ctx_(ctx) {}
  ssl_ctx_st* ctx_;
};

}  // namespace perftracker
