#include "perftracker/sources/kineto/kineto_event_classifier.h"

#include <array>
#include <cctype>
#include <string>

namespace perftracker {
namespace {

enum class Category : uint8_t {
  kNone,  // no "cat" key (torch 1.13 CPU-only)
  kCpuOp,
  kUserAnnotation,
  kPythonFunction,
  kKernel,
  kMemcpy,
  kMemset,
  kRuntime,  // cuda_runtime / cuda_driver (and the legacy "Runtime")
  kSync,
  kGpuUserAnnotation,
  kIgnored,  // Trace, ac2g, fwdbwd, overhead, unknown
};

bool EqualsIgnoreCase(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(a[i])) !=
        std::tolower(static_cast<unsigned char>(b[i]))) {
      return false;
    }
  }
  return true;
}

Category ParseCategory(std::string_view cat) {
  struct Entry {
    std::string_view name;
    Category category;
  };
  // Current Kineto names first, then the names torch <= 1.9 wrote ("Operator", "Kernel"...).
  static constexpr std::array<Entry, 17> kCategories = {{
      {"cpu_op", Category::kCpuOp},
      {"kernel", Category::kKernel},
      {"cuda_runtime", Category::kRuntime},
      {"user_annotation", Category::kUserAnnotation},
      {"python_function", Category::kPythonFunction},
      {"gpu_memcpy", Category::kMemcpy},
      {"gpu_memset", Category::kMemset},
      {"cuda_driver", Category::kRuntime},
      {"cuda_sync", Category::kSync},
      {"gpu_user_annotation", Category::kGpuUserAnnotation},
      {"operator", Category::kCpuOp},
      {"runtime", Category::kRuntime},
      {"memcpy", Category::kMemcpy},
      {"memset", Category::kMemset},
      {"python", Category::kPythonFunction},
      {"cpu_instant_event", Category::kIgnored},
      {"trace", Category::kIgnored},
  }};
  for (const Entry& e : kCategories) {
    if (cat == e.name) return e.category;
  }
  for (const Entry& e : kCategories) {
    if (EqualsIgnoreCase(cat, e.name)) return e.category;
  }
  return Category::kIgnored;
}

bool StartsWith(std::string_view s, std::string_view prefix) {
  return s.size() >= prefix.size() && s.substr(0, prefix.size()) == prefix;
}

bool IsLaunch(std::string_view name) {
  return StartsWith(name, "cudaLaunch") || StartsWith(name, "cuLaunch") ||
         StartsWith(name, "cudaGraphLaunch") || StartsWith(name, "cuGraphLaunch") ||
         StartsWith(name, "hipLaunch") || StartsWith(name, "hipExtLaunch") ||
         StartsWith(name, "hipModuleLaunch") || StartsWith(name, "hipExtModuleLaunch") ||
         StartsWith(name, "hipGraphLaunch");
}

bool IsSyncCall(std::string_view name) {
  static constexpr std::array<std::string_view, 12> kSyncs = {
      "cudaDeviceSynchronize", "cudaStreamSynchronize", "cudaEventSynchronize",
      "cudaStreamWaitEvent",   "cuStreamSynchronize",   "cuCtxSynchronize",
      "cuEventSynchronize",    "cuStreamWaitEvent",     "hipDeviceSynchronize",
      "hipStreamSynchronize",  "hipEventSynchronize",   "hipStreamWaitEvent"};
  for (std::string_view s : kSyncs) {
    if (name == s) return true;
  }
  return false;
}

// Kineto names copies "Memcpy <kind> (<src memory> -> <dst memory>)": "Memcpy DtoD (Device ->
// Device)", "Memcpy PtoP (Device -> Device)"; HIP traces write "hipMemcpyDtoD..." style names.
bool IsDeviceToDeviceCopy(std::string_view name) {
  return name.find("DtoD") != std::string_view::npos ||
         name.find("PtoP") != std::string_view::npos ||
         name.find("Device -> Device") != std::string_view::npos;
}

bool IsNcclKernel(std::string_view name) {
  return StartsWith(name, "nccl") || StartsWith(name, "void nccl");
}

// Host-side range names with a meaning of their own, whatever their category.
bool ClassifyHostName(std::string_view name, KinetoEventClass* c) {
  if (StartsWith(name, "ProfilerStep#")) {
    c->kind = EventKind::kIteration;
    c->name = "ProfilerStep";
    return true;
  }
  if (StartsWith(name, "nccl:") || StartsWith(name, "gloo:")) {
    c->kind = EventKind::kCollective;
    c->payload_nelems = true;
    return true;
  }
  if (StartsWith(name, "Optimizer.step#")) {
    c->kind = EventKind::kOptimizerStep;
    return true;
  }
  if (StartsWith(name, "enumerate(DataLoader)") ||
      name.find("DataLoaderIter.__next__") != std::string_view::npos) {
    c->kind = EventKind::kDataLoad;
    return true;
  }
  return false;
}

// torch 1.13 CPU-only traces have no category: operators are namespace-qualified
// ("aten::add", "c10d::allreduce_", "autograd::engine::evaluate_function: ...") or autograd
// nodes ("AddmmBackward0"); anything else is a record_function range.
bool LooksLikeOperator(std::string_view name) {
  if (name.find("::") != std::string_view::npos) return true;
  size_t end = name.size();
  while (end > 0 && name[end - 1] >= '0' && name[end - 1] <= '9') --end;
  return end < name.size() && end >= 8 && name.substr(end - 8, 8) == "Backward";
}

}  // namespace

KinetoEventClass ClassifyKinetoEvent(bool has_cat, std::string_view cat, std::string_view name) {
  KinetoEventClass c;
  c.name = name;
  c.keep = true;
  const Category category = has_cat ? ParseCategory(cat) : Category::kNone;
  switch (category) {
    case Category::kNone:
      if (!ClassifyHostName(name, &c)) {
        c.kind = LooksLikeOperator(name) ? EventKind::kTorchOp : EventKind::kUserAnnotation;
      }
      return c;
    case Category::kCpuOp:
      if (!ClassifyHostName(name, &c)) c.kind = EventKind::kTorchOp;
      return c;
    case Category::kUserAnnotation:
      if (!ClassifyHostName(name, &c)) c.kind = EventKind::kUserAnnotation;
      return c;
    case Category::kPythonFunction:
      c.kind = EventKind::kPythonCall;
      return c;
    case Category::kKernel:
      c.on_device = true;
      c.flags = kEventFlagOnDevice;
      if (IsNcclKernel(name)) {
        c.kind = EventKind::kCollective;
        c.payload_nelems = true;
      } else {
        c.kind = EventKind::kGpuKernel;
      }
      return c;
    case Category::kMemcpy:
      c.on_device = true;
      c.kind = EventKind::kMemcpy;
      c.payload_bytes = true;
      c.flags = kEventFlagOnDevice;
      if (name.find("Pageable") != std::string_view::npos) c.flags |= kEventFlagPageable;
      if (IsDeviceToDeviceCopy(name)) c.flags |= kEventFlagDeviceToDevice;
      return c;
    case Category::kMemset:
      c.on_device = true;
      c.kind = EventKind::kMemset;
      c.payload_bytes = true;
      c.flags = kEventFlagOnDevice;
      return c;
    case Category::kRuntime:
      c.kind = IsLaunch(name)     ? EventKind::kKernelLaunch
               : IsSyncCall(name) ? EventKind::kSync
                                  : EventKind::kRuntimeCall;
      return c;
    case Category::kSync:
      // Kineto writes cuda_sync activities on the device / stream rows (pid = device).
      c.on_device = true;
      c.kind = EventKind::kSync;
      c.flags = kEventFlagOnDevice;
      return c;
    case Category::kGpuUserAnnotation:
      c.on_device = true;
      c.kind = EventKind::kUserAnnotation;
      c.flags = kEventFlagOnDevice;
      // The GPU-side twin of ProfilerStep#N: the same iteration, as the GPU ran it. An
      // iteration marker on the device track (used when no host thread marks iterations).
      if (StartsWith(name, "ProfilerStep#")) {
        c.kind = EventKind::kIteration;
        c.name = "ProfilerStep";
      }
      return c;
    case Category::kIgnored:
      break;
  }
  c.keep = false;
  return c;
}

size_t KinetoDtypeSize(std::string_view dtype) {
  std::string d;
  for (char ch : dtype.substr(0, 32))
    d += static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  if (StartsWith(d, "nccl")) d = d.substr(4);
  if (StartsWith(d, "torch.")) d = d.substr(6);
  if (StartsWith(d, "float8") || StartsWith(d, "fp8")) return 1;
  struct Entry {
    std::string_view name;
    size_t size;
  };
  static constexpr std::array<Entry, 28> kSizes = {{
      {"float", 4},  {"float32", 4},      {"double", 8},         {"float64", 8},
      {"half", 2},   {"float16", 2},      {"bfloat16", 2},       {"int", 4},
      {"int32", 4},  {"long", 8},         {"int64", 8},          {"short", 2},
      {"int16", 2},  {"char", 1},         {"int8", 1},           {"byte", 1},
      {"uint8", 1},  {"bool", 1},         {"uint16", 2},         {"uint32", 4},
      {"uint64", 8}, {"complexfloat", 8}, {"complexdouble", 16}, {"complexhalf", 4},
      {"qint8", 1},  {"quint8", 1},       {"qint32", 4},         {"bf16", 2},
  }};
  for (const Entry& e : kSizes) {
    if (d == e.name) return e.size;
  }
  return 0;
}

}  // namespace perftracker
