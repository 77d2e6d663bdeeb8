#include "perftracker/core/window_reason.h"

namespace perftracker {

std::string_view WindowReasonName(WindowReason reason) {
  switch (reason) {
    case WindowReason::kSlowdown:
      return "slowdown";
    case WindowReason::kHang:
      return "hang";
    case WindowReason::kManual:
      return "manual";
  }
  return "manual";
}

bool ParseWindowReason(std::string_view text, WindowReason* reason) {
  if (text == "slowdown") {
    *reason = WindowReason::kSlowdown;
  } else if (text == "hang") {
    *reason = WindowReason::kHang;
  } else if (text == "manual") {
    *reason = WindowReason::kManual;
  } else {
    return false;
  }
  return true;
}

}  // namespace perftracker
