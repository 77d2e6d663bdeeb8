// `perftracker probe`: what this host offers perftracker's hardware sources, checked the way
// the agent and the collector use them: NVML (every GPU, every metric, two samples so that
// rates show), CUPTI (the library loads and a subscription succeeds), the NCCL profiler
// plugin (loads, exports ncclProfiler_v5 / _v4), RDMA ports and link state. The first thing
// to run on a new node type; it changes nothing and always exits 0 unless an option is bad.
#pragma once

#include <string>

namespace CLI {
class App;
}

namespace perftracker {

struct ProbeOptions {
  int interval_ms = 1000;   // between the two samples
  std::string nccl_plugin;  // "" = the one `perftracker run` would give NCCL
  std::string sys_root = "/sys";
  std::string nvml_library = "libnvidia-ml.so.1";
};

CLI::App* AddProbeCommand(CLI::App& app, ProbeOptions* options);
int RunProbe(const ProbeOptions& options);

}  // namespace perftracker
