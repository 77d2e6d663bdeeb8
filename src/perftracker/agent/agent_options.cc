#include "perftracker/agent/agent_options.h"

#include <charconv>
#include <cmath>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <vector>

namespace perftracker {
namespace {

struct Key {
  double min;
  double max;
  bool integer;
  bool power_of_two;
  std::function<void(AgentOptions&, double)> set;
};

const std::map<std::string, Key, std::less<>>& Keys() {
  static const auto* keys = new std::map<std::string, Key, std::less<>>{
      {"rings",
       {1, 1024, true, false,
        [](AgentOptions& o, double v) { o.shm.num_rings = static_cast<uint32_t>(v); }}},
      {"ring_events",
       {2, 1 << 26, true, true,
        [](AgentOptions& o, double v) { o.shm.ring_capacity = static_cast<uint32_t>(v); }}},
      {"functions",
       {16, 1 << 22, true, false,
        [](AgentOptions& o, double v) { o.shm.function_capacity = static_cast<uint32_t>(v); }}},
      {"learn_repeats",
       {1, 1000, true, false,
        [](AgentOptions& o, double v) { o.detector.learn_repeats = static_cast<int>(v); }}},
      {"relearn_after",
       {1, 1e6, true, false,
        [](AgentOptions& o, double v) { o.detector.relearn_after = static_cast<int>(v); }}},
      {"window_iterations",
       {1, 1e5, true, false,
        [](AgentOptions& o, double v) { o.detector.window_iterations = static_cast<int>(v); }}},
      {"slowdown_ratio",
       {0, 100, false, false, [](AgentOptions& o, double v) { o.detector.slowdown_ratio = v; }}},
      {"hang_factor",
       {1, 1e4, false, false, [](AgentOptions& o, double v) { o.detector.hang_factor = v; }}},
      {"hang_longest_factor",
       {0, 1e4, false, false,
        [](AgentOptions& o, double v) { o.detector.hang_longest_factor = v; }}},
      {"min_hang_ms",
       {0, 1e8, false, false,
        [](AgentOptions& o, double v) { o.detector.min_hang_ns = static_cast<int64_t>(v * 1e6); }}},
      {"hang_check_ms",
       {1, 60'000, false, false,
        [](AgentOptions& o, double v) {
          o.hang_check_interval_ns = static_cast<int64_t>(v * 1e6);
        }}},
      {"stack_timeout_ms",
       {10, 600'000, false, false,
        [](AgentOptions& o, double v) { o.stack_timeout_ns = static_cast<int64_t>(v * 1e6); }}},
      {"reconnect_max_ms",
       {10, 3'600'000, false, false,
        [](AgentOptions& o, double v) { o.reconnect_max_ns = static_cast<int64_t>(v * 1e6); }}},
      {"outbox",
       {16, 1 << 20, true, true,
        [](AgentOptions& o, double v) { o.outbox_capacity = static_cast<uint32_t>(v); }}},
      {"eval_hook", {0, 1, true, false, [](AgentOptions& o, double v) { o.eval_hook = v != 0; }}},
      {"gpu_tracing",
       {0, 2, true, false, [](AgentOptions& o, double v) { o.gpu_tracing = static_cast<int>(v); }}},
  };
  return *keys;
}

std::string Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t' || s.front() == '\n')) {
    s.remove_prefix(1);
  }
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\n')) {
    s.remove_suffix(1);
  }
  return std::string(s);
}

Status Apply(AgentOptions& o, std::string_view key, std::optional<double> value,
             std::string_view raw) {
  const auto& keys = Keys();
  auto it = keys.find(key);
  if (it == keys.end()) {
    return Status::InvalidArgument("PERFTRACKER_AGENT_OPTIONS: unknown option '" +
                                   std::string(key) + "' (known: " + AgentOptionKeys() + ")");
  }
  const Key& k = it->second;
  auto bad = [&](std::string_view why) {
    return Status::InvalidArgument("PERFTRACKER_AGENT_OPTIONS: " + std::string(key) + "=" +
                                   std::string(raw) + " " + std::string(why) +
                                   " (accepted: " + (k.integer ? "an integer" : "a number") +
                                   " in [" + std::to_string(static_cast<int64_t>(k.min)) + ", " +
                                   std::to_string(static_cast<int64_t>(k.max)) + "]" +
                                   (k.power_of_two ? ", a power of two" : "") + ")");
  };
  if (!value || !std::isfinite(*value)) return bad("is not a number");
  const double v = *value;
  if (v < k.min || v > k.max) return bad("is out of range");
  if (k.integer && v != std::floor(v)) return bad("is not an integer");
  if (k.power_of_two) {
    const auto u = static_cast<uint64_t>(v);
    if ((u & (u - 1)) != 0) return bad("is not a power of two");
  }
  k.set(o, v);
  return Status::Ok();
}

std::optional<double> ParseNumber(std::string_view s) {
  double v = 0;
  const auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || ptr != s.data() + s.size() || s.empty()) return std::nullopt;
  return v;
}

}  // namespace

std::string AgentOptionKeys() {
  std::string out;
  for (const auto& [name, key] : Keys()) {
    if (!out.empty()) out += ", ";
    out += name;
  }
  return out;
}

StatusOr<AgentOptions> ParseAgentOptions(std::string_view text) {
  AgentOptions o;
  const std::string trimmed = Trim(text);
  if (trimmed.empty()) return o;
  if (trimmed.front() == '{') {
    const nlohmann::json j = nlohmann::json::parse(trimmed, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded() || !j.is_object()) {
      return Status::InvalidArgument(
          "PERFTRACKER_AGENT_OPTIONS: not a valid JSON object (use {\"key\": number, ...} or "
          "key=value,key=value)");
    }
    for (const auto& [key, value] : j.items()) {
      std::optional<double> v;
      if (value.is_number()) v = value.get<double>();
      if (value.is_string()) v = ParseNumber(value.get<std::string>());
      PERFTRACKER_RETURN_IF_ERROR(Apply(o, key, v, value.dump()));
    }
    return o;
  }
  size_t pos = 0;
  while (pos <= trimmed.size()) {
    size_t end = trimmed.find_first_of(",; ", pos);
    if (end == std::string::npos) end = trimmed.size();
    const std::string item = Trim(std::string_view(trimmed).substr(pos, end - pos));
    pos = end + 1;
    if (item.empty()) continue;
    const size_t eq = item.find('=');
    if (eq == std::string::npos) {
      return Status::InvalidArgument("PERFTRACKER_AGENT_OPTIONS: '" + item +
                                     "' is not key=value (known keys: " + AgentOptionKeys() + ")");
    }
    const std::string key = Trim(std::string_view(item).substr(0, eq));
    const std::string raw = Trim(std::string_view(item).substr(eq + 1));
    PERFTRACKER_RETURN_IF_ERROR(Apply(o, key, ParseNumber(raw), raw));
  }
  return o;
}

}  // namespace perftracker
