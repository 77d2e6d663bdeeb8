#include "perftracker/sources/kineto/kineto_process_group.h"

#include <charconv>
#include <cstdint>
#include <string>

namespace perftracker {
namespace {

// A group this large is not a communicator of a real job: its list is not trusted.
constexpr uint64_t kMaxGroupSize = 1u << 24;

// "[0, 1, 2]" (or "[0, 1, ...]"): the ranks, and whether the list was cut. False when the text
// is not such a list.
bool ParseRanks(std::string_view text, std::vector<int32_t>* ranks, bool* cut) {
  *cut = false;
  size_t i = 0;
  auto skip_ws = [&] {
    while (i < text.size() && (text[i] == ' ' || text[i] == '\t' || text[i] == '\n')) ++i;
  };
  skip_ws();
  if (i >= text.size() || text[i] != '[') return false;
  ++i;
  for (;;) {
    skip_ws();
    if (i >= text.size()) {
      *cut = true;  // the string itself was cut (the importer's cap)
      return true;
    }
    if (text[i] == ']') return true;
    if (text.substr(i).starts_with("...")) {
      *cut = true;
      return true;
    }
    int32_t r = 0;
    const auto [next, ec] = std::from_chars(text.data() + i, text.data() + text.size(), r);
    if (ec != std::errc() || r < 0) return false;
    ranks->push_back(r);
    i = static_cast<size_t>(next - text.data());
    skip_ws();
    if (i < text.size() && text[i] == ',') ++i;
  }
}

}  // namespace

std::optional<ProcessGroupInfo> KinetoProcessGroupOf(const KinetoRawEvent& ev) {
  if (ev.pg_name.empty() && ev.pg_ranks.empty()) return std::nullopt;
  ProcessGroupInfo g;
  g.name = std::string(ev.pg_name);
  bool cut = false;
  if (!ev.pg_ranks.empty() && !ParseRanks(ev.pg_ranks, &g.ranks, &cut)) g.ranks.clear();
  const uint64_t size =
      ev.group_size.valid && !ev.group_size.negative ? ev.group_size.ToUnsigned() : 0;
  g.size = size <= kMaxGroupSize ? static_cast<uint32_t>(size) : 0;
  if (g.size == 0 && !cut) g.size = static_cast<uint32_t>(g.ranks.size());
  if (g.ranks.size() > g.size && g.size > 0) g.ranks.resize(g.size);
  if (g.ranks.size() < g.size && ev.rank_start.valid && !ev.rank_start.negative &&
      ev.rank_stride.valid && !ev.rank_stride.negative && ev.rank_stride.ToUnsigned() > 0) {
    // Evenly spaced members: rebuilt whole when the listed ones agree with start and stride.
    const uint64_t start = ev.rank_start.ToUnsigned();
    const uint64_t stride = ev.rank_stride.ToUnsigned();
    bool agrees = start + stride * (g.size - 1) <= INT32_MAX;
    for (size_t i = 0; agrees && i < g.ranks.size(); ++i) {
      agrees = static_cast<uint64_t>(g.ranks[i]) == start + stride * i;
    }
    if (agrees) {
      g.ranks.clear();
      for (uint64_t i = 0; i < g.size; ++i) {
        g.ranks.push_back(static_cast<int32_t>(start + stride * i));
      }
    }
  }
  if (g.ranks.empty()) return std::nullopt;
  return g;
}

}  // namespace perftracker
