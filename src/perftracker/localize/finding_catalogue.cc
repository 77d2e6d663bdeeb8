#include "perftracker/localize/finding_catalogue.h"

#include <array>

namespace perftracker {
namespace {

namespace fc = finding_codes;

constexpr std::array kCatalogue = {
    CatalogueEntry{fc::kStragglerCompute, FindingCategory::kCompute, false,
                   "A worker spends more time per iteration in a compute function (kernel, "
                   "operator, annotated block, Python function) than its peers; the others "
                   "wait for it.",
                   "Check that worker's GPU / CPU (clocks, thermal throttling, other processes "
                   "on the host) and whether its input (shape, sequence length) differs."},
    CatalogueEntry{fc::kStragglerData, FindingCategory::kDataLoading, false,
                   "A worker spends more time per iteration loading data than its peers.",
                   "Look at that worker's data loader: storage or network file system latency, "
                   "too few loader workers, CPU contention on its host, uneven shards."},
    CatalogueEntry{fc::kStragglerComm, FindingCategory::kCommunication, false,
                   "One worker's collective / point-to-point communication is slower than its "
                   "peers' while no worker computes longer: the time is lost in the network.",
                   "Check that worker's NIC / link (errors, speed negotiated, congestion), its "
                   "NCCL transport and topology, and the switch port it hangs off."},
    CatalogueEntry{fc::kStragglerSync, FindingCategory::kSynchronization, false,
                   "One worker's host waits longer for its device than its peers do, and no "
                   "traced device work explains it.",
                   "Profile that worker's device (throttling, ECC, other processes on the GPU) "
                   "and remove unneeded synchronizations (.item(), .cpu(), prints)."},
    CatalogueEntry{fc::kStragglerGc, FindingCategory::kGc, false,
                   "One worker pauses longer in the garbage collector than its peers.",
                   "Look for objects that only that rank allocates (logging, metrics); consider "
                   "gc.freeze() after setup or gc.disable() with periodic gc.collect()."},
    CatalogueEntry{fc::kStragglerMemcpy, FindingCategory::kMemory, false,
                   "One worker's memory copies are slower than its peers'.",
                   "Check that worker's PCIe link (width / speed), NUMA placement and pinned "
                   "memory use."},
    CatalogueEntry{fc::kStragglerUntraced, FindingCategory::kHostOverhead, false,
                   "Every peer waits for this worker, yet none of its traced functions is "
                   "longer: the time goes outside traced code (a sleep, Python the profiler "
                   "did not record, a stalled thread). The finding says where in the "
                   "iteration the time sits; without run-queue evidence it is not called CPU "
                   "contention.",
                   "Look at that rank's code just before the function named (time.sleep, "
                   "logging, checkpoint or metric code outside record_function), trace it with "
                   "with_stack / Python function events, and check its host's run-queue "
                   "delay."},
    CatalogueEntry{fc::kFunctionOnlyOnSome, FindingCategory::kCompute, true,
                   "A function with material time runs only on a minority of a peer group's "
                   "workers; the others wait for them.",
                   "Check whether the extra work is intended on those ranks (checkpointing, "
                   "logging, evaluation, a debug hook) and move it off the critical path."},
    CatalogueEntry{fc::kCpuContention, FindingCategory::kCpuContention, false,
                   "A worker is slower than its peers while its threads wait for a CPU far "
                   "longer (run-queue delay): it is starved of CPU, not running slow code.",
                   "Find what else runs on that host's cores (top, pidstat -w; other jobs, "
                   "data-loader workers, OpenMP / MKL threads); pin each rank to its own "
                   "cores and cap torch.set_num_threads / OMP_NUM_THREADS."},
    CatalogueEntry{fc::kHang, FindingCategory::kHang, false,
                   "The job stopped making progress: one rank (or a few) is stuck outside "
                   "communication while the others wait for it in a collective.",
                   "Look at the culprit's stack in the report: a dead lock, an endless loop, "
                   "a stuck data loader or I/O call, or a rank that skipped a collective; set "
                   "a collective timeout (init_process_group(timeout=...)) so hangs fail fast."},
    CatalogueEntry{fc::kHostBound, FindingCategory::kHostOverhead, false,
                   "The device sits idle for a large share of each iteration while the host "
                   "runs Python / launches work: the job is host- or launch-bound.",
                   "Use CUDA graphs or torch.compile, larger batches or fused kernels, and "
                   "move host work (logging, metrics, data preparation) off the training loop."},
    CatalogueEntry{fc::kSyncCritical, FindingCategory::kSynchronization, false,
                   "Host-device synchronizations sit on the critical path of every worker.",
                   "Remove implicit synchronizations (.item(), .cpu(), .tolist(), printing "
                   "tensors, torch.cuda.synchronize()) from the training loop or batch them."},
    CatalogueEntry{fc::kDataCritical, FindingCategory::kDataLoading, false,
                   "Data loading sits on the critical path of every worker: training waits "
                   "for input.",
                   "Raise DataLoader num_workers / prefetch_factor, use pin_memory and "
                   "persistent_workers, cache or pre-process the data set."},
    CatalogueEntry{fc::kGc, FindingCategory::kGc, false,
                   "Garbage-collector pauses cost every worker a material share of each "
                   "iteration.",
                   "Call gc.freeze() after model setup, or disable automatic collection and "
                   "collect every N iterations; avoid creating reference cycles per step."},
    CatalogueEntry{fc::kPageableMemcpy, FindingCategory::kMemory, false,
                   "Host-device copies from pageable memory take a material share of the "
                   "iteration (they are slower and synchronous).",
                   "Use pinned memory (DataLoader(pin_memory=True), tensor.pin_memory()) and "
                   "non_blocking=True copies."},
    CatalogueEntry{fc::kSerializedMemcpy, FindingCategory::kMemory, false,
                   "Host-device copies run while the GPU computes nothing: they are serialized "
                   "with the kernels instead of overlapping them.",
                   "Copy the next batch ahead on a side CUDA stream (non_blocking=True from "
                   "pinned memory, then wait_stream), or move the copy out of the step."},
    CatalogueEntry{fc::kGpuThrottled, FindingCategory::kGpuHardware, false,
                   "A worker's GPU computes slower than its peers' while its SM clock is well "
                   "below its maximum or NVML reports throttle reasons (thermal, power).",
                   "Check that GPU's cooling, power cap and throttle history (nvidia-smi -q -d "
                   "PERFORMANCE,TEMPERATURE); drain the node if it keeps throttling."},
    CatalogueEntry{fc::kGpuSlow, FindingCategory::kGpuHardware, false,
                   "A worker's device computes every kernel slower than its peers, with no "
                   "clock or throttle evidence.",
                   "Compare that GPU's model, memory clock, ECC / row-remapping state and "
                   "other processes on it (nvidia-smi); run a GPU burn-in test on the node."},
    CatalogueEntry{fc::kLinkDegraded, FindingCategory::kCommunication, false,
                   "Transfers over a worker's NVLink or PCIe link run flat at a rate far below "
                   "the same link on its peers: the link is degraded.",
                   "Check the link's width and speed (nvidia-smi nvlink -s, lspci -vv), NVLink "
                   "errors and replays; reseat or replace the part."},
    CatalogueEntry{fc::kNicDegraded, FindingCategory::kCommunication, false,
                   "One host's NIC sends at a low, flat rate during collectives while the "
                   "other hosts' NICs reach much more and then wait for it.",
                   "Check that NIC's negotiated speed, error counters and the switch port "
                   "(ethtool, ibstat, perfquery); move the job off the host."},
    CatalogueEntry{fc::kNicFlapping, FindingCategory::kCommunication, false,
                   "One host's NIC went down during the window (link-down samples): its "
                   "collectives stall until it comes back and the whole job waits.",
                   "Check the cable, transceiver and switch port of that NIC (ip link, ibstat, "
                   "dmesg for link down / up); drain the host."},
    CatalogueEntry{fc::kNetSlowLink, FindingCategory::kCommunication, false,
                   "One rank's network connections deliver data at a fraction of the rate its "
                   "peers' connections reach: its link is slow, and every collective waits "
                   "for it.",
                   "Check that rank's interface (ethtool speed and error counters, tc qdisc "
                   "rate limits, the switch port); run a bandwidth test (iperf3, nccl-tests) "
                   "from its host to a healthy one; move the rank off the host."},
    CatalogueEntry{fc::kLaunchBound, FindingCategory::kHostOverhead, false,
                   "The GPU idles between many tiny kernels: launch overhead, not compute, "
                   "sets the pace.",
                   "Use CUDA graphs or torch.compile to fuse and batch kernels, larger "
                   "batches, or fused optimizers / layers."},
    CatalogueEntry{fc::kIncompleteData, FindingCategory::kDataQuality, false,
                   "A worker's profile is badly incomplete (events dropped or malformed, or no "
                   "data at all); findings about it are less certain.",
                   "Enlarge the agent's ring buffers or shorten the window; check the trace "
                   "file of that rank."},
};

}  // namespace

std::span<const CatalogueEntry> FindingCatalogue() { return kCatalogue; }

const CatalogueEntry* FindCatalogueEntry(std::string_view code) {
  for (const auto& e : kCatalogue) {
    if (e.code == code) return &e;
  }
  return nullptr;
}

}  // namespace perftracker
