#include "perftracker/server/http/tls_context.h"

#include <fmt/format.h>
#include <openssl/err.h>
#include <openssl/ssl.h>

namespace perftracker {
namespace {

std::string OpenSslError() {
  const unsigned long code = ERR_get_error();  // NOLINT(google-runtime-int): OpenSSL's type
  ERR_clear_error();
  if (code == 0) return "no detail from OpenSSL";
  char buf[256];
  ERR_error_string_n(code, buf, sizeof(buf));
  return buf;
}

}  // namespace

StatusOr<std::unique_ptr<TlsContext>> TlsContext::Load(const std::string& cert_file,
                                                       const std::string& key_file) {
  ERR_clear_error();
  SSL_CTX* ctx = SSL_CTX_new(TLS_server_method());
  if (ctx == nullptr)
    return Status::Internal("http: cannot create a TLS context: " + OpenSslError());
  std::unique_ptr<TlsContext> tls(new TlsContext(ctx));
  SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
  SSL_CTX_set_options(ctx, SSL_OP_NO_RENEGOTIATION | SSL_OP_NO_COMPRESSION | SSL_OP_NO_TICKET);
  // Writes from a handler thread may return early (non-blocking socket) and are retried
  // with the same bytes from a moved buffer.
  SSL_CTX_set_mode(ctx, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
  if (SSL_CTX_use_certificate_chain_file(ctx, cert_file.c_str()) != 1 ||
      SSL_CTX_use_PrivateKey_file(ctx, key_file.c_str(), SSL_FILETYPE_PEM) != 1 ||
      SSL_CTX_check_private_key(ctx) != 1) {
    return Status::InvalidArgument(fmt::format(
        "http: cannot use TLS certificate {} with key {} (PEM files of one key pair expected: {})",
        cert_file, key_file, OpenSslError()));
  }
  return tls;
}

TlsContext::~TlsContext() { SSL_CTX_free(ctx_); }

ssl_st* TlsContext::NewConnection(int fd) const {
  SSL* ssl = SSL_new(ctx_);
  if (ssl == nullptr) return nullptr;
  if (SSL_set_fd(ssl, fd) != 1) {
    SSL_free(ssl);
    return nullptr;
  }
  SSL_set_accept_state(ssl);
  return ssl;
}

}  // namespace perftracker
