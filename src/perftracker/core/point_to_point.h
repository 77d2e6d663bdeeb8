// PointToPoint: whether a communication call is a point-to-point send or receive, and which.
//
// Pipeline-parallel stages talk point to point: a stage receives its input from the previous
// stage and sends its output to the next. A receive that waits is slack: the stage was early,
// and its own lateness up to that wait costs nothing. What a call is comes from what the
// source says about it (kEventFlagSend / kEventFlagReceive: the collective metadata of a trace,
// e.g. Kineto's "Collective name") and else from its name (nccl:recv, c10d::irecv_, gloo's
// recv, NCCL's kernels). NCCL's SendRecv kernels serve both directions: by name alone they are
// kSendReceive.
#pragma once

#include <cstdint>
#include <string_view>

namespace perftracker {

// Event flags (Event::flags, beside those of core/event.h; the next free bits): a point-to-point
// send / receive, as the source knows it (a trace's collective metadata, e.g. Kineto's "Collective
// name" on NCCL's SendRecv kernel, which serves both directions). Both set: a fused send and
// receive. Neither: the name says (PointToPointOf).
inline constexpr uint8_t kEventFlagSend = 1u << 3;
inline constexpr uint8_t kEventFlagReceive = 1u << 4;

enum class PointToPoint : uint8_t {
  kNone = 0,         // not point to point (a collective among a group, or no communication)
  kSend = 1,         // sends only
  kReceive = 2,      // receives only
  kSendReceive = 3,  // both, or a fused kernel whose direction is not known
};

// `flags`: the event flags the call carried (kEventFlagSend / kEventFlagReceive win over the
// name when either is set).
PointToPoint PointToPointOf(std::string_view name, uint8_t flags = 0);

// The flags of a call whose source names its collective (PyTorch's "Collective name":
// "send", "recv", "recvAnySource", ...; "allreduce", "all_to_all" and the others are not
// point to point): kEventFlagSend, kEventFlagReceive or 0.
uint8_t PointToPointFlagsOfCollective(std::string_view collective_name);

// Whether a torch operator is communication: c10d:: (ProcessGroup calls, DDP's all-reduce
// inside AccumulateGrad hooks), torch 2.x's functional collectives (_c10d_functional::,
// c10d_functional:: in torch 2.0-2.2, _c10d_functional_autograd::: FSDP2, DTensor,
// torch.compile; their wait_tensor is where a rank waits for one) and record_param_comms
// (which wraps NCCL's and gloo's calls). Their time waits like a collective's, never compute.
bool IsTorchCommunicationOp(std::string_view name);

}  // namespace perftracker
