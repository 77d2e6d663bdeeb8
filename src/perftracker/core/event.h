// Event: the one record every source emits (trace import, agent hooks, CUPTI, NCCL, sim).
// Fixed size and trivially copyable so that it can travel through the shared-memory rings
// between the agent and the collector unchanged.
#pragma once

#include <cstdint>
#include <string_view>
#include <type_traits>

namespace perftracker {

enum class EventKind : uint8_t {
  kPythonCall = 0,     // a Python function call (agent hook or python_function in a trace)
  kTorchOp = 1,        // an aten / torch operator on the host (cpu_op)
  kUserAnnotation = 2, // torch.profiler.record_function / NVTX-like user range
  kGpuKernel = 3,      // a kernel on a device stream
  kMemcpy = 4,         // device memcpy; payload = bytes
  kMemset = 5,         // device memset; payload = bytes
  kKernelLaunch = 6,   // host-side launch API (cudaLaunchKernel...); correlation links the kernel
  kRuntimeCall = 7,    // other host-side runtime API calls
  kSync = 8,           // host waits on the device (cudaDeviceSynchronize, stream/event sync)
  kCollective = 9,     // collective / p2p communication (nccl:*, gloo:*, NCCL kernels); payload = bytes
  kGc = 10,            // garbage-collector pause
  kDataLoad = 11,      // data-loader next() / wait
  kOptimizerStep = 12, // optimizer.step()
  kIteration = 13,     // one training iteration (ProfilerStep#N or learned by the detector)
};
inline constexpr int kNumEventKinds = 14;

std::string_view EventKindName(EventKind kind);

// Where an event ran. Host threads, device streams and communicators are distinct tracks;
// nesting (call stacks) is only meaningful within one track.
enum class TrackKind : uint8_t {
  kHostThread = 0,
  kDeviceStream = 1,
  kCommunicator = 2,
};

inline constexpr uint8_t kEventFlagOnDevice = 1u << 0;  // ran on a GPU / accelerator stream
inline constexpr uint8_t kEventFlagPageable = 1u << 1;  // memcpy touched pageable host memory
// A copy with device memory on both sides (DtoD within a GPU, PtoP between GPUs): GPU work,
// never host-device (PCIe) traffic.
inline constexpr uint8_t kEventFlagDeviceToDevice = 1u << 2;

struct Event {
  int64_t start_ns = 0;
  int64_t end_ns = 0;
  uint64_t payload = 0;       // bytes moved for memcpy / memset / collectives, else 0
  uint32_t function_id = 0;   // id in the producing process's FunctionTable
  uint32_t track_id = 0;      // id in the producing process's track list
  uint32_t correlation = 0;   // links a launch to its kernel (CUPTI / Kineto correlation), 0 = none
  EventKind kind = EventKind::kTorchOp;
  uint8_t flags = 0;
  // Collectives: the process group (communicator) they ran in, as the id its source gave it
  // in EventSink::OnProcessGroup; 0 = not known.
  uint16_t group = 0;

  int64_t duration_ns() const { return end_ns - start_ns; }
};
static_assert(std::is_trivially_copyable_v<Event>);
static_assert(sizeof(Event) == 40, "Event is a wire/ring record: keep its size fixed");

}  // namespace perftracker
