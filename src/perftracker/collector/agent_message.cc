#include "perftracker/collector/agent_message.h"

#include <algorithm>
#include <vector>

#include <fmt/core.h>
#include <nlohmann/json.hpp>

namespace perftracker {
namespace {

using Json = nlohmann::json;

// Field readers: false when absent or of the wrong type. No exception can escape: types are
// checked before every get<>().
bool GetInt(const Json& j, const char* key, int64_t* out) {
  auto it = j.find(key);
  if (it == j.end() || !it->is_number_integer()) return false;
  *out = it->is_number_unsigned() ? static_cast<int64_t>(it->get<uint64_t>()) : it->get<int64_t>();
  return true;
}

bool GetUint(const Json& j, const char* key, uint64_t* out) {
  auto it = j.find(key);
  if (it == j.end() || !it->is_number_integer()) return false;
  if (it->is_number_unsigned()) {
    *out = it->get<uint64_t>();
    return true;
  }
  const int64_t v = it->get<int64_t>();
  if (v < 0) return false;
  *out = static_cast<uint64_t>(v);
  return true;
}

bool GetString(const Json& j, const char* key, std::string* out, size_t max_len) {
  auto it = j.find(key);
  if (it == j.end() || !it->is_string()) return false;
  const auto& s = it->get_ref<const std::string&>();
  *out = s.size() > max_len ? s.substr(0, max_len) : s;
  return true;
}

bool GetRank(const Json& j, int32_t* rank) {
  int64_t v = 0;
  if (!GetInt(j, "rank", &v) || v < -1 || v > INT32_MAX) return false;
  *rank = static_cast<int32_t>(v);
  return true;
}

ParseOutcome Fail(std::string* error, std::string message) {
  if (error != nullptr) *error = std::move(message);
  return ParseOutcome::kMalformed;
}

ParseOutcome Missing(std::string* error, std::string_view type, std::string_view field) {
  return Fail(error, fmt::format("'{}' message without a valid '{}' field", type, field));
}

}  // namespace

ParseOutcome ParseAgentMessage(std::string_view line, AgentMessage* message, std::string* error) {
  const Json j = Json::parse(line.begin(), line.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return Fail(error, "not valid JSON");
  if (!j.is_object()) return Fail(error, "not a JSON object");
  std::string type;
  if (!GetString(j, "type", &type, 64)) return Fail(error, "no 'type' string field");

  AgentMessage& m = *message;
  m = AgentMessage();
  if (type == "hello") {
    m.type = AgentMessageType::kHello;
    int64_t pid = 0;
    if (!GetInt(j, "pid", &pid) || pid <= 0 || pid > INT32_MAX) return Missing(error, type, "pid");
    if (!GetRank(j, &m.rank)) return Missing(error, type, "rank");
    if (!GetString(j, "shm", &m.shm_path, 4096) || m.shm_path.empty())
      return Missing(error, type, "shm");
    m.worker.pid = static_cast<int32_t>(pid);
    m.worker.rank = m.rank;
    int64_t v = 0;
    if (GetInt(j, "world_size", &v) && v >= 0 && v <= INT32_MAX) {
      m.worker.world_size = static_cast<int32_t>(v);
    }
    if (GetInt(j, "local_rank", &v) && v >= -1 && v <= INT32_MAX) {
      m.worker.local_rank = static_cast<int32_t>(v);
    }
    GetString(j, "host", &m.worker.host, 256);
    GetInt(j, "version", &m.version);
  } else if (type == "iteration") {
    m.type = AgentMessageType::kIteration;
    if (!GetRank(j, &m.rank)) return Missing(error, type, "rank");
    if (!GetInt(j, "end_ns", &m.end_ns)) return Missing(error, type, "end_ns");
    if (!GetInt(j, "duration_ns", &m.duration_ns) || m.duration_ns < 0) {
      return Missing(error, type, "duration_ns");
    }
  } else if (type == "trigger") {
    m.type = AgentMessageType::kTrigger;
    if (!GetRank(j, &m.rank)) return Missing(error, type, "rank");
    std::string reason;
    if (!GetString(j, "reason", &reason, 64) || !ParseWindowReason(reason, &m.reason)) {
      return Missing(error, type, "reason");
    }
    GetString(j, "detail", &m.detail, kMaxMessageStringField);
  } else if (type == "window_done") {
    m.type = AgentMessageType::kWindowDone;
    if (!GetRank(j, &m.rank)) return Missing(error, type, "rank");
    if (!GetUint(j, "window", &m.window)) return Missing(error, type, "window");
    GetUint(j, "events", &m.events);
    GetUint(j, "dropped", &m.dropped);
    if (!GetInt(j, "gpu_stopped_ns", &m.gpu_stopped_ns) || m.gpu_stopped_ns < 0) {
      m.gpu_stopped_ns = 0;  // optional: an agent that does not know it sends none
    }
  } else if (type == "stacks") {
    m.type = AgentMessageType::kStacks;
    if (!GetRank(j, &m.rank)) return Missing(error, type, "rank");
    if (!GetUint(j, "window", &m.window)) return Missing(error, type, "window");
    if (!GetString(j, "text", &m.text, SIZE_MAX)) return Missing(error, type, "text");
    if (auto it = j.find("available"); it != j.end() && it->is_boolean()) {
      m.available = it->get<bool>();
    }
  } else if (type == "ended") {
    m.type = AgentMessageType::kEnded;
    if (!GetRank(j, &m.rank)) return Missing(error, type, "rank");
    GetString(j, "detail", &m.detail, kMaxMessageStringField);
  } else if (type == "process_group") {
    m.type = AgentMessageType::kProcessGroup;
    if (!GetRank(j, &m.rank)) return Missing(error, type, "rank");
    uint64_t id = 0;
    if (!GetUint(j, "group", &id) || id == 0 || id > UINT16_MAX) {
      return Missing(error, type, "group");
    }
    m.group.id = static_cast<uint16_t>(id);
    GetString(j, "name", &m.group.name, 256);
    GetString(j, "backend", &m.group.backend, 64);
    const auto ranks = j.find("ranks");
    if (ranks == j.end() || !ranks->is_array() || ranks->empty() ||
        ranks->size() > kMaxProcessGroupRanks) {
      return Missing(error, type, "ranks");
    }
    m.group.ranks.reserve(ranks->size());
    for (const Json& r : *ranks) {
      if (!r.is_number_integer() || (r.is_number_unsigned() && r.get<uint64_t>() > INT32_MAX) ||
          (!r.is_number_unsigned() && (r.get<int64_t>() < 0 || r.get<int64_t>() > INT32_MAX))) {
        return Fail(error, fmt::format("'process_group' message for group {} lists {}, which is "
                                       "not a global rank",
                                       id, r.dump().substr(0, 32)));
      }
      m.group.ranks.push_back(static_cast<int32_t>(r.get<int64_t>()));
    }
    std::vector<int32_t> sorted = m.group.ranks;
    std::sort(sorted.begin(), sorted.end());
    if (const auto dup = std::adjacent_find(sorted.begin(), sorted.end()); dup != sorted.end()) {
      return Fail(
          error, fmt::format("'process_group' message for group {} lists rank {} twice", id, *dup));
    }
    uint64_t size = m.group.ranks.size();
    if (j.contains("size") &&
        (!GetUint(j, "size", &size) || size < m.group.ranks.size() || size > INT32_MAX)) {
      return Missing(error, type, "size");
    }
    m.group.size = static_cast<uint32_t>(size);
  } else if (type == "comm_thread") {
    m.type = AgentMessageType::kCommThread;
    if (!GetRank(j, &m.rank)) return Missing(error, type, "rank");
    int64_t tid = 0;
    if (!GetInt(j, "tid", &tid) || tid <= 0 || tid > INT32_MAX) {
      return Missing(error, type, "tid");
    }
    m.tid = static_cast<int32_t>(tid);
  } else if (type == "bye") {
    m.type = AgentMessageType::kBye;
    if (!GetRank(j, &m.rank)) m.rank = -1;
  } else {
    if (error != nullptr) *error = fmt::format("unknown message type '{}'", type);
    return ParseOutcome::kUnknownType;
  }
  return ParseOutcome::kOk;
}

std::string WindowMessage(const WindowSpec& window) {
  return fmt::format(
      "{{\"type\":\"window\",\"window\":{},\"start_ns\":{},\"duration_ns\":{},\"reason\":\"{}\"}}"
      "\n",
      window.id, window.start_ns, window.duration_ns, WindowReasonName(window.reason));
}

std::string DumpStacksMessage(uint64_t window) {
  return fmt::format("{{\"type\":\"dump_stacks\",\"window\":{}}}\n", window);
}

std::string EndWindowMessage(uint64_t window) {
  return fmt::format("{{\"type\":\"end_window\",\"window\":{}}}\n", window);
}

}  // namespace perftracker
