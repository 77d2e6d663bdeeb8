// Why a profiling window opens: the one reason type of every layer, from the agent's
// detector (slowdown, hang) through the collector and the wire to the server's reports
// (and a person's or an API client's manual request). On the wire and in reports it is
// written by WindowReasonName().
#pragma once

#include <cstdint>
#include <string_view>

namespace perftracker {

enum class WindowReason : uint8_t { kSlowdown = 0, kHang = 1, kManual = 2 };

std::string_view WindowReasonName(WindowReason reason);
// Parses "slowdown" / "hang" / "manual"; false for anything else.
bool ParseWindowReason(std::string_view text, WindowReason* reason);

}  // namespace perftracker
