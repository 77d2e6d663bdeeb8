#include "perftracker/collector/fake_agent_for_test.h"

#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstring>

namespace perftracker {

FakeAgent::FakeAgent(int32_t rank, int32_t world_size, const std::string& tag)
    : rank_(rank), world_size_(world_size) {
  shm_path_ = "/dev/shm/perftracker-test-" + tag + "-" + std::to_string(getpid()) + "-" +
              std::to_string(rank);
  AgentShmOptions o;
  o.num_rings = 2;
  o.ring_capacity = 1u << 14;
  o.function_capacity = 256;
  auto shm = AgentShm::Create(shm_path_, rank, o);
  if (shm.ok()) {
    shm_ = std::move(shm.value());
    ring_ = shm_->ClaimRing(1000 + static_cast<uint64_t>(rank));
  }
}

FakeAgent::~FakeAgent() {
  Disconnect();
  unlink(shm_path_.c_str());
}

bool FakeAgent::Connect(const std::string& socket_path) {
  fd_ = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, socket_path.c_str(), sizeof(addr.sun_path) - 1);
  return connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
}

void FakeAgent::SendRaw(const std::string& bytes) {
  size_t off = 0;
  while (off < bytes.size() && fd_ >= 0) {
    const ssize_t n = send(fd_, bytes.data() + off, bytes.size() - off, MSG_NOSIGNAL);
    if (n <= 0) return;
    off += static_cast<size_t>(n);
  }
}

void FakeAgent::SendJson(const nlohmann::json& message) { SendRaw(message.dump() + "\n"); }

void FakeAgent::Hello(const std::string& shm_path) {
  SendJson({{"type", "hello"},
            {"pid", getpid()},
            {"rank", rank_},
            {"world_size", world_size_},
            {"local_rank", rank_},
            {"host", "testhost"},
            {"shm", shm_path.empty() ? shm_path_ : shm_path},
            {"version", 1}});
}

uint32_t FakeAgent::Publish(EventKind kind, const std::string& name, uint32_t parent) {
  const uint32_t id = next_function_++;
  shm_->PublishFunction(id, kind, name, parent);
  return id;
}

void FakeAgent::Push(uint32_t function, int64_t start_ns, int64_t end_ns, EventKind kind) {
  Event e;
  e.start_ns = start_ns;
  e.end_ns = end_ns;
  e.function_id = function;
  e.kind = kind;
  e.track_id = 1;
  if (shm_->Push(ring_, e)) ++pushed_;
}

void FakeAgent::WindowDone(uint64_t window, uint64_t dropped) {
  SendJson({{"type", "window_done"},
            {"rank", rank_},
            {"window", window},
            {"events", pushed_},
            {"dropped", dropped}});
}

std::optional<nlohmann::json> FakeAgent::WaitFor(const std::string& type, int timeout_ms) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  for (;;) {
    while (!pending_.empty()) {
      const std::string line = pending_.front();
      pending_.erase(pending_.begin());
      auto j = nlohmann::json::parse(line, nullptr, false);
      if (!j.is_discarded() && j.is_object() && j.value("type", "") == type) return j;
    }
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                          deadline - std::chrono::steady_clock::now())
                          .count();
    if (left <= 0 || fd_ < 0) return std::nullopt;
    pollfd p{fd_, POLLIN, 0};
    if (poll(&p, 1, static_cast<int>(left)) <= 0) continue;
    char buf[4096];
    const ssize_t n = recv(fd_, buf, sizeof(buf), 0);
    if (n <= 0) return std::nullopt;
    reader_.Feed(std::string_view(buf, static_cast<size_t>(n)), &pending_);
  }
}

void FakeAgent::Disconnect() {
  if (fd_ >= 0) close(fd_);
  fd_ = -1;
}

}  // namespace perftracker
