#include "perftracker/core/point_to_point.h"

#include <cctype>
#include <string>

#include "perftracker/core/event.h"

namespace perftracker {

PointToPoint PointToPointOf(std::string_view name, uint8_t flags) {
  const bool send_flag = (flags & kEventFlagSend) != 0;
  const bool receive_flag = (flags & kEventFlagReceive) != 0;
  if (send_flag && receive_flag) return PointToPoint::kSendReceive;
  if (send_flag) return PointToPoint::kSend;
  if (receive_flag) return PointToPoint::kReceive;
  std::string lower(name);
  for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  // NCCL's SendRecv kernels (ncclDevKernel_SendRecv, ncclKernel_SendRecv_...) serve both
  // directions; what the rest of the name says decides ("... SendRecv recv (pp)").
  bool fused = false;
  for (std::string_view word : {"sendrecv", "send_recv"}) {
    for (size_t at = lower.find(word); at != std::string::npos; at = lower.find(word)) {
      lower.erase(at, word.size());
      fused = true;
    }
  }
  const bool send = lower.find("send") != std::string::npos;
  const bool receive = lower.find("recv") != std::string::npos;
  if (send && receive) return PointToPoint::kSendReceive;  // batch_isend_irecv
  if (send) return PointToPoint::kSend;
  if (receive) return PointToPoint::kReceive;
  return fused ? PointToPoint::kSendReceive : PointToPoint::kNone;
}

uint8_t PointToPointFlagsOfCollective(std::string_view collective_name) {
  std::string lower(collective_name.substr(0, 32));
  for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (lower == "send" || lower == "isend") return kEventFlagSend;
  if (lower == "recv" || lower == "irecv" || lower == "recvanysource") return kEventFlagReceive;
  return 0;
}

bool IsTorchCommunicationOp(std::string_view name) {
  return name.starts_with("c10d::") || name.starts_with("_c10d_functional::") ||
         name.starts_with("c10d_functional::") || name.starts_with("_c10d_functional_autograd::") ||
         name == "record_param_comms";
}

}  // namespace perftracker
