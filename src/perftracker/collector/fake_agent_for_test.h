// FakeAgent (tests only): what an agent does on the wire, without Python: creates its
// AgentShm file, connects to the collector's socket, says hello, publishes functions,
// pushes events and reads the collector's messages.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "perftracker/collector/line_reader.h"
#include "perftracker/core/agent_shm.h"
#include "perftracker/core/function_table.h"

namespace perftracker {

class FakeAgent {
 public:
  FakeAgent(int32_t rank, int32_t world_size, const std::string& tag);
  ~FakeAgent();

  bool Connect(const std::string& socket_path);
  void SendRaw(const std::string& bytes);
  void SendJson(const nlohmann::json& message);
  // hello with this agent's shm file, or `shm_path` when given.
  void Hello(const std::string& shm_path = "");
  uint32_t Publish(EventKind kind, const std::string& name,
                   uint32_t parent = FunctionTable::kNoParent);
  void Push(uint32_t function, int64_t start_ns, int64_t end_ns,
            EventKind kind = EventKind::kPythonCall);
  // window_done, saying the agent dropped `dropped` events of the window (full rings).
  void WindowDone(uint64_t window, uint64_t dropped = 0);
  // The next collector message of `type` (others are skipped), or nullopt after timeout.
  std::optional<nlohmann::json> WaitFor(const std::string& type, int timeout_ms);
  void Disconnect();

  int32_t rank() const { return rank_; }
  const std::string& shm_path() const { return shm_path_; }
  AgentShm* shm() { return shm_.get(); }

 private:
  int32_t rank_;
  int32_t world_size_;
  std::string shm_path_;
  std::unique_ptr<AgentShm> shm_;
  int ring_ = -1;
  uint32_t next_function_ = 0;
  uint64_t pushed_ = 0;
  int fd_ = -1;
  LineReader reader_;
  std::vector<std::string> pending_;
};

}  // namespace perftracker
