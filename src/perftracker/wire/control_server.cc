#include "perftracker/wire/control_server.h"

#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <functional>
#include <mutex>
#include <set>
#include <thread>
#include <utility>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "control.grpc.pb.h"
#include "perftracker/wire/control_convert.h"

namespace perftracker {
namespace {

namespace pb = perftracker::v1;

constexpr std::string_view kBearer = "Bearer ";

// Drops the port from a gRPC peer string ("ipv4:10.0.0.2:5123" -> "ipv4:10.0.0.2"), so that
// refusals are logged once per address, not once per connection.
std::string PeerAddress(const std::string& peer) {
  const size_t colon = peer.rfind(':');
  const size_t first = peer.find(':');
  if (colon == std::string::npos || colon == first) return peer;
  return peer.substr(0, colon);
}

grpc::StatusCode GrpcCode(StatusCode code) {
  switch (code) {
    case StatusCode::kInvalidArgument:
    case StatusCode::kDataLoss:
      return grpc::StatusCode::INVALID_ARGUMENT;
    case StatusCode::kNotFound:
      return grpc::StatusCode::NOT_FOUND;
    case StatusCode::kUnimplemented:
      return grpc::StatusCode::UNIMPLEMENTED;
    default:
      return grpc::StatusCode::FAILED_PRECONDITION;
  }
}

class ControlServerImpl;

// One Connect stream. Owns itself: deleted in OnDone, after every operation completed.
class ConnectReactor final
    : public grpc::ServerBidiReactor<pb::CollectorMessage, pb::ServerMessage> {
 public:
  ConnectReactor(ControlServerImpl* server, grpc::CallbackServerContext* context);

  void OnReadDone(bool ok) override;
  // The message just read, on a worker thread; then the next read.
  void Process();
  void OnWriteDone(bool ok) override;
  void OnDone() override;
  void OnCancel() override {}

  // From any thread, through the sink.
  bool Enqueue(const ServerMessage& message);

 private:
  class Sink;

  void FinishOnce(const grpc::Status& status);
  void CleanUpAndDelete();
  void HandleRegistration(const pb::CollectorMessage& message);

  ControlServerImpl* server_;
  std::string peer_;
  std::shared_ptr<Sink> sink_;
  std::shared_ptr<ControlSession> session_;
  pb::CollectorMessage in_;

  std::mutex mu_;
  std::deque<pb::ServerMessage> out_;  // front() is being written while writing_
  bool writing_ = false;
  bool finished_ = false;
  bool processing_ = false;  // a worker is handling the last message read
  bool done_ = false;        // gRPC called OnDone
  std::optional<grpc::Status> finish_after_write_;
};

class ConnectReactor::Sink final : public CommandSink {
 public:
  Sink(ConnectReactor* reactor, std::string peer) : reactor_(reactor), peer_(std::move(peer)) {}
  bool Send(ServerMessage message) override {
    std::lock_guard<std::mutex> lock(mu_);
    return reactor_ != nullptr && reactor_->Enqueue(message);
  }
  const std::string& peer() const override { return peer_; }
  void Detach() {
    std::lock_guard<std::mutex> lock(mu_);
    reactor_ = nullptr;
  }

 private:
  std::mutex mu_;
  ConnectReactor* reactor_;
  const std::string peer_;
};

class ControlServerImpl final : public ControlServer, public pb::ControlPlane::CallbackService {
 public:
  ControlServerImpl(ControlServerOptions options, ControlHandler* handler)
      : options_(std::move(options)), handler_(handler) {}
  ~ControlServerImpl() override { Shutdown(); }

  Status Listen() {
    open_files_limit_ = options_.open_files_limit;
    if (open_files_limit_ == 0) {
      rlimit lim{};
      if (getrlimit(RLIMIT_NOFILE, &lim) == 0 && lim.rlim_cur != RLIM_INFINITY) {
        open_files_limit_ = static_cast<size_t>(lim.rlim_cur);
      }
    }
    grpc::ServerBuilder builder;
    std::shared_ptr<grpc::ServerCredentials> creds;
    if (!options_.tls_cert_pem.empty() || !options_.tls_key_pem.empty()) {
      if (options_.tls_cert_pem.empty() || options_.tls_key_pem.empty()) {
        return Status::InvalidArgument("TLS needs both a certificate and a key");
      }
      grpc::SslServerCredentialsOptions ssl;
      ssl.pem_key_cert_pairs.push_back({options_.tls_key_pem, options_.tls_cert_pem});
      creds = grpc::SslServerCredentials(ssl);
    } else {
      creds = grpc::InsecureServerCredentials();
    }
    builder.AddListeningPort(options_.listen, creds, &port_);
    builder.SetMaxReceiveMessageSize(static_cast<int>(options_.max_message_bytes));
    builder.SetMaxSendMessageSize(static_cast<int>(options_.max_message_bytes));
    // Collectors ping to detect a dead server (keepalive); let them, even on idle streams.
    builder.AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS, 10000);
    builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
    // And ping them: a host that vanished without closing its connection (power loss, network
    // partition) ends its stream within keepalive time + timeout, so its ranks count as gone.
    builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIME_MS, 60000);
    builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 20000);
    builder.RegisterService(this);
    StartWorkers();
    server_ = builder.BuildAndStart();
    if (server_ == nullptr || port_ == 0) {
      server_.reset();
      return Status::InvalidArgument("cannot listen on " + options_.listen +
                                     ": the address is in use or not an address of this host "
                                     "(expected host:port, e.g. 127.0.0.1:7077)");
    }
    return Status::Ok();
  }

  int port() const override { return port_; }

  void Shutdown() override {
    std::unique_ptr<grpc::Server> server;
    {
      std::lock_guard<std::mutex> lock(mu_);
      server = std::move(server_);
    }
    if (server != nullptr) {
      // Cancels every open stream at once; returns when all their reactors are done (the
      // workers keep running until then: a reactor waits for its message's task).
      server->Shutdown(std::chrono::system_clock::now());
      server->Wait();
    }
    StopWorkers();
  }

  // Runs `task` on a worker thread (FIFO).
  void Post(std::function<void()> task) {
    {
      std::lock_guard<std::mutex> lock(tasks_mu_);
      tasks_.push_back(std::move(task));
    }
    tasks_cv_.notify_one();
  }

  ControlServerStats stats() const override {
    ControlServerStats s;
    s.streams_opened = streams_opened_.load();
    s.streams_open = streams_open_.load();
    s.unauthenticated = unauthenticated_.load();
    s.registrations = registrations_.load();
    s.registrations_refused = registrations_refused_.load();
    s.messages = messages_.load();
    s.messages_rejected = messages_rejected_.load();
    s.commands_dropped = commands_dropped_.load();
    return s;
  }

  grpc::ServerBidiReactor<pb::CollectorMessage, pb::ServerMessage>* Connect(
      grpc::CallbackServerContext* context) override {
    return new ConnectReactor(this, context);
  }

  // Whether the call carries the token; logs the first refusal of each peer address.
  bool Authorized(grpc::CallbackServerContext* context) {
    if (options_.token.empty()) return true;
    const auto& md = context->client_metadata();
    auto it = md.find("authorization");
    bool ok = false;
    if (it != md.end()) {
      const std::string_view value(it->second.data(), it->second.size());
      ok = value.starts_with(kBearer) && TokenMatches(value.substr(kBearer.size()), options_.token);
    }
    if (!ok) {
      ++unauthenticated_;
      const std::string who = PeerAddress(context->peer());
      bool first = false;
      {
        std::lock_guard<std::mutex> lock(mu_);
        first = refused_peers_.insert(who).second;
      }
      if (first) {
        Log("refused a collector from " + who + ": " +
            (it == md.end() ? "no token" : "wrong token") +
            " (collectors pass the server's token with --token-file; further refusals from "
            "this address are only counted)");
      }
    }
    return ok;
  }

  // Every collector's connection is an open file of this process: once they are near the
  // limit, further collectors cannot connect (the accept fails: EMFILE). Said once, with
  // the numbers and what to do.
  void CheckOpenFiles(uint64_t streams_open) {
    if (open_files_limit_ == 0) return;
    const size_t bar = open_files_limit_ > 2 * kOpenFilesReserve
                           ? open_files_limit_ - kOpenFilesReserve
                           : open_files_limit_ / 2;
    if (streams_open < bar || warned_open_files_.exchange(true)) return;
    Log(std::to_string(streams_open) + " collector streams are open and this process may open " +
        std::to_string(open_files_limit_) +
        " files (RLIMIT_NOFILE): each collector's connection is one, and collectors beyond "
        "about " +
        std::to_string(bar) +
        " cannot connect; raise the server's limit (ulimit -n, LimitNOFILE= in systemd, the "
        "container's nofile ulimit)");
  }

  void Log(const std::string& line) const {
    if (options_.log) {
      options_.log(line);
    } else {
      std::fprintf(stderr, "perftracker: %s\n", line.c_str());
    }
  }

  const ControlServerOptions& options() const { return options_; }
  ControlHandler* handler() { return handler_; }

  std::atomic<uint64_t> streams_opened_{0};
  std::atomic<uint64_t> streams_open_{0};
  std::atomic<uint64_t> unauthenticated_{0};
  std::atomic<uint64_t> registrations_{0};
  std::atomic<uint64_t> registrations_refused_{0};
  std::atomic<uint64_t> messages_{0};
  std::atomic<uint64_t> messages_rejected_{0};
  std::atomic<uint64_t> commands_dropped_{0};

 private:
  // Files kept for the store, the report files and the web server's connections.
  static constexpr size_t kOpenFilesReserve = 256;
  ControlServerOptions options_;
  ControlHandler* handler_;
  int port_ = 0;
  size_t open_files_limit_ = 0;  // 0: unknown or unlimited
  std::atomic<bool> warned_open_files_{false};
  void StartWorkers() {
    const int n = std::max(1, options_.worker_threads);
    for (int i = 0; i < n; ++i) {
      workers_.emplace_back([this] {
        std::unique_lock<std::mutex> lock(tasks_mu_);
        for (;;) {
          tasks_cv_.wait(lock, [&] { return stop_workers_ || !tasks_.empty(); });
          if (tasks_.empty()) return;  // stopping, and nothing left
          std::function<void()> task = std::move(tasks_.front());
          tasks_.pop_front();
          lock.unlock();
          task();
          lock.lock();
        }
      });
    }
  }

  void StopWorkers() {
    {
      std::lock_guard<std::mutex> lock(tasks_mu_);
      stop_workers_ = true;
    }
    tasks_cv_.notify_all();
    for (auto& t : workers_) {
      if (t.joinable()) t.join();
    }
    workers_.clear();
  }

  mutable std::mutex mu_;
  std::unique_ptr<grpc::Server> server_;
  std::set<std::string> refused_peers_;

  // Messages are handled here, not on gRPC's threads: a handler that decodes a summary or
  // writes the store must not hold up the transport (keepalive pings, other streams).
  std::mutex tasks_mu_;
  std::condition_variable tasks_cv_;
  std::deque<std::function<void()>> tasks_;
  bool stop_workers_ = false;
  std::vector<std::thread> workers_;
};

ConnectReactor::ConnectReactor(ControlServerImpl* server, grpc::CallbackServerContext* context)
    : server_(server), peer_(context->peer()) {
  ++server_->streams_opened_;
  server_->CheckOpenFiles(++server_->streams_open_);
  if (!server_->Authorized(context)) {
    FinishOnce(grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                            "perftracker server: missing or wrong token (pass the server's "
                            "token with --token-file)"));
    return;
  }
  sink_ = std::make_shared<Sink>(this, peer_);
  StartRead(&in_);
}

void ConnectReactor::HandleRegistration(const pb::CollectorMessage& message) {
  if (message.body_case() != pb::CollectorMessage::kRegistration) {
    ++server_->registrations_refused_;
    FinishOnce(grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                            "perftracker server: the first message of a stream must be a "
                            "registration (job, host, ranks)"));
    return;
  }
  StatusOr<CollectorMessage> decoded = wire_internal::FromProto(message);
  if (!decoded.ok()) {
    ++server_->registrations_refused_;
    FinishOnce(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                            "perftracker server: " + decoded.status().message()));
    return;
  }
  StatusOr<std::shared_ptr<ControlSession>> session =
      server_->handler()->OnRegister(std::get<ControlRegistration>(*decoded), sink_);
  if (!session.ok()) {
    ++server_->registrations_refused_;
    FinishOnce(grpc::Status(GrpcCode(session.status().code()),
                            "perftracker server: " + session.status().message()));
    return;
  }
  ++server_->registrations_;
  session_ = std::move(session).value();
}

void ConnectReactor::OnReadDone(bool ok) {
  if (!ok) {
    // The collector closed its side, or the stream broke. No Process() runs now (it posts
    // the next read as its last action), so OnDone may clean up.
    {
      std::lock_guard<std::mutex> lock(mu_);
      processing_ = false;
    }
    FinishOnce(grpc::Status::OK);
    return;
  }
  // One message of a stream at a time: the next read starts when this one is handled.
  {
    std::lock_guard<std::mutex> lock(mu_);
    processing_ = true;
  }
  server_->Post([this] { Process(); });
}

void ConnectReactor::Process() {
  ++server_->messages_;
  if (session_ == nullptr) {
    HandleRegistration(in_);
  } else {
    StatusOr<CollectorMessage> decoded = wire_internal::FromProto(in_);
    Status st = decoded.ok() ? session_->OnMessage(std::move(decoded).value()) : decoded.status();
    if (!st.ok()) {
      ++server_->messages_rejected_;
      Enqueue(ControlRejected{st.message()});
    }
  }
  // The task holds the reactor: gRPC may call OnDone meanwhile (the stream was finished
  // here or by a failed write), and then leaves the cleanup to us. Starting the next read
  // hands the reactor to the next OnReadDone (and its Process() on another worker), so it is
  // the last thing this task does: nothing of `this` may be touched after it (processing_
  // stays true for the next message's task, or OnReadDone(false) clears it).
  bool read_next = false;
  bool done = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    read_next = !done_ && !finished_ && !finish_after_write_;
    if (!read_next) {
      processing_ = false;
      done = done_;
    }
  }
  if (read_next) {
    in_.Clear();
    StartRead(&in_);
    return;
  }
  if (done) CleanUpAndDelete();
}

bool ConnectReactor::Enqueue(const ServerMessage& message) {
  const pb::ServerMessage* start = nullptr;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (finished_ || finish_after_write_) return false;
    if (out_.size() >= server_->options().max_queued_per_stream) {
      ++server_->commands_dropped_;
      return false;
    }
    out_.emplace_back();
    wire_internal::ToProto(message, &out_.back());
    if (!writing_) {
      writing_ = true;
      start = &out_.front();
    }
  }
  if (start != nullptr) StartWrite(start);
  return true;
}

void ConnectReactor::OnWriteDone(bool ok) {
  const pb::ServerMessage* next = nullptr;
  std::optional<grpc::Status> finish;
  {
    std::lock_guard<std::mutex> lock(mu_);
    out_.pop_front();
    if (!ok) {
      out_.clear();
      writing_ = false;
      if (!finished_) {
        finished_ = true;
        finish = grpc::Status::OK;
      }
    } else if (!out_.empty() && !finished_) {
      next = &out_.front();
    } else {
      writing_ = false;
      if (finish_after_write_ && !finished_) {
        finished_ = true;
        finish = *finish_after_write_;
      }
    }
  }
  if (next != nullptr) StartWrite(next);
  if (finish) Finish(*finish);
}

void ConnectReactor::FinishOnce(const grpc::Status& status) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (finished_ || finish_after_write_) return;
    if (writing_) {
      // Finish once the write in flight completes (one write at a time).
      finish_after_write_ = status;
      out_.erase(out_.begin() + 1, out_.end());
      return;
    }
    finished_ = true;
  }
  Finish(status);
}

void ConnectReactor::OnDone() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    done_ = true;
    if (processing_) return;  // Process() finishes the job
  }
  CleanUpAndDelete();
}

void ConnectReactor::CleanUpAndDelete() {
  if (sink_) sink_->Detach();
  if (session_) session_->OnClosed();
  --server_->streams_open_;
  delete this;
}

}  // namespace

bool TokenMatches(std::string_view presented, std::string_view expected) {
  // Every byte of `expected` is visited whatever `presented` holds.
  unsigned char diff = presented.size() == expected.size() ? 0 : 1;
  for (size_t i = 0; i < expected.size(); ++i) {
    const unsigned char p = i < presented.size() ? static_cast<unsigned char>(presented[i])
                                                 : static_cast<unsigned char>(0);
    diff |= static_cast<unsigned char>(p ^ static_cast<unsigned char>(expected[i]));
  }
  return diff == 0 && !expected.empty();
}

StatusOr<std::unique_ptr<ControlServer>> ControlServer::Start(ControlServerOptions options,
                                                              ControlHandler* handler) {
  wire_internal::QuietGrpcLogging();
  auto server = std::make_unique<ControlServerImpl>(std::move(options), handler);
  PERFTRACKER_RETURN_IF_ERROR(server->Listen());
  return std::unique_ptr<ControlServer>(std::move(server));
}

}  // namespace perftracker
