#include "perftracker/wire/control_client.h"

#include <chrono>
#include <deque>
#include <mutex>
#include <utility>

#include <grpcpp/grpcpp.h>

#include "control.grpc.pb.h"
#include "perftracker/wire/control_convert.h"

namespace perftracker {
namespace {

namespace pb = perftracker::v1;

constexpr size_t kMaxEarlyMessages = 64;

std::string Describe(const grpc::Status& st, const std::string& address) {
  switch (st.error_code()) {
    case grpc::StatusCode::UNAVAILABLE:
      return "cannot reach the server at " + address + " (" + st.error_message() + ")";
    case grpc::StatusCode::UNAUTHENTICATED:
      return "the server at " + address + " refused the token: " + st.error_message();
    case grpc::StatusCode::DEADLINE_EXCEEDED:
      return "the server at " + address + " did not answer in time";
    default:
      return "the server at " + address + " ended the stream (" +
             std::to_string(static_cast<int>(st.error_code())) + "): " + st.error_message();
  }
}

class StreamImpl final : public ControlStream {
 public:
  StreamImpl(pb::ControlPlane::Stub* stub, const ControlClientOptions& options)
      : address_(options.address) {
    if (!options.token.empty()) context_.AddMetadata("authorization", "Bearer " + options.token);
    stream_ = stub->Connect(&context_);
  }
  ~StreamImpl() override {
    if (!finished_) {
      context_.TryCancel();
      pb::ServerMessage ignored;
      while (stream_->Read(&ignored)) {
      }
      (void)stream_->Finish();
    }
  }

  bool Write(const CollectorMessage& message) override {
    pb::CollectorMessage m;
    wire_internal::ToProto(message, &m);
    return stream_->Write(m);
  }

  bool Read(ServerMessage* message) override {
    if (!early_.empty()) {
      *message = std::move(early_.front());
      early_.pop_front();
      return true;
    }
    return ReadStream(message);
  }

  bool ReadStream(ServerMessage* message) {
    pb::ServerMessage m;
    if (!stream_->Read(&m)) return false;
    StatusOr<ServerMessage> decoded = wire_internal::FromProto(m);
    *message =
        decoded.ok()
            ? std::move(decoded).value()
            : ServerMessage(ControlRejected{"from the server: " + decoded.status().message()});
    return true;
  }

  bool WritesDone() override { return stream_->WritesDone(); }

  void Cancel() override { context_.TryCancel(); }

  Status Finish() override {
    if (finished_) return final_;
    finished_ = true;
    const grpc::Status st = stream_->Finish();
    final_ = st.ok() ? Status::Ok() : Status::InvalidArgument(Describe(st, address_));
    return final_;
  }

  const ControlRegistered& registered() const override { return registered_; }

  // Sends the registration and reads the answer.
  Status Register(const ControlRegistration& registration) {
    if (!Write(registration)) {
      (void)Finish();
      return final_;
    }
    // Commands may overtake the answer (a window opened meanwhile): kept for Read.
    for (;;) {
      ServerMessage answer;
      if (!ReadStream(&answer)) {
        (void)Finish();
        return final_.ok() ? Status::InvalidArgument("the server at " + address_ +
                                                     " closed the stream without answering")
                           : final_;
      }
      if (const auto* r = std::get_if<ControlRegistered>(&answer)) {
        registered_ = *r;
        return Status::Ok();
      }
      if (const auto* r = std::get_if<ControlRejected>(&answer)) {
        return Status::InvalidArgument("the server at " + address_ +
                                       " rejected the registration: " + r->error);
      }
      if (early_.size() >= kMaxEarlyMessages) {
        return Status::InvalidArgument("the server at " + address_ +
                                       " did not answer the registration");
      }
      early_.push_back(std::move(answer));
    }
  }

 private:
  std::string address_;
  grpc::ClientContext context_;
  std::unique_ptr<grpc::ClientReaderWriter<pb::CollectorMessage, pb::ServerMessage>> stream_;
  bool finished_ = false;
  Status final_;
  ControlRegistered registered_;
  std::deque<ServerMessage> early_;  // read before the registration's answer
};

class ClientImpl final : public ControlClient {
 public:
  explicit ClientImpl(ControlClientOptions options) : options_(std::move(options)) {
    std::shared_ptr<grpc::ChannelCredentials> creds;
    grpc::ChannelArguments args;
    args.SetMaxSendMessageSize(static_cast<int>(options_.max_message_bytes));
    args.SetMaxReceiveMessageSize(static_cast<int>(options_.max_message_bytes));
    // Reconnection is the link's business (it backs off itself); keep gRPC's short.
    args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 200);
    args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 2000);
    // A server that stops answering pings for keepalive time + timeout is taken as gone.
    args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, 30000);
    args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 20000);
    if (options_.private_connection) args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
    if (!options_.tls_ca_pem.empty()) {
      grpc::SslCredentialsOptions ssl;
      ssl.pem_root_certs = options_.tls_ca_pem;
      creds = grpc::SslCredentials(ssl);
      if (!options_.tls_server_name.empty()) {
        args.SetSslTargetNameOverride(options_.tls_server_name);
      }
    } else {
      creds = grpc::InsecureChannelCredentials();
    }
    channel_ = grpc::CreateCustomChannel(options_.address, creds, args);
    stub_ = pb::ControlPlane::NewStub(channel_);
  }

  StatusOr<std::unique_ptr<ControlStream>> Connect(const ControlRegistration& registration,
                                                   int timeout_ms) override {
    const auto deadline = std::chrono::system_clock::now() + std::chrono::milliseconds(timeout_ms);
    if (!channel_->WaitForConnected(deadline)) {
      return Status::InvalidArgument("cannot reach the server at " + options_.address + " within " +
                                     std::to_string(timeout_ms) + " ms" +
                                     (options_.tls_ca_pem.empty()
                                          ? std::string()
                                          : std::string(" (or the TLS handshake failed: is the "
                                                        "certificate the server's?)")));
    }
    auto stream = std::make_unique<StreamImpl>(stub_.get(), options_);
    PERFTRACKER_RETURN_IF_ERROR(stream->Register(registration));
    return std::unique_ptr<ControlStream>(std::move(stream));
  }

 private:
  ControlClientOptions options_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<pb::ControlPlane::Stub> stub_;
};

}  // namespace

StatusOr<std::unique_ptr<ControlClient>> ControlClient::Create(
    const ControlClientOptions& options) {
  if (options.address.empty()) return Status::InvalidArgument("no server address given");
  wire_internal::QuietGrpcLogging();
  return std::unique_ptr<ControlClient>(std::make_unique<ClientImpl>(options));
}

}  // namespace perftracker
