#include "perftracker/core/event.h"

namespace perftracker {

std::string_view EventKindName(EventKind kind) {
  switch (kind) {
    case EventKind::kPythonCall: return "python";
    case EventKind::kTorchOp: return "torch_op";
    case EventKind::kUserAnnotation: return "annotation";
    case EventKind::kGpuKernel: return "kernel";
    case EventKind::kMemcpy: return "memcpy";
    case EventKind::kMemset: return "memset";
    case EventKind::kKernelLaunch: return "launch";
    case EventKind::kRuntimeCall: return "runtime";
    case EventKind::kSync: return "sync";
    case EventKind::kCollective: return "collective";
    case EventKind::kGc: return "gc";
    case EventKind::kDataLoad: return "data_load";
    case EventKind::kOptimizerStep: return "optimizer_step";
    case EventKind::kIteration: return "iteration";
  }
  return "unknown";
}

}  // namespace perftracker
