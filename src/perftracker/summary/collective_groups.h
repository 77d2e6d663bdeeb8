// CollectiveGroups: which process group (communicator) a worker's collectives ran in, kept
// beside WorkerSummary::functions as a table of its own: each group once (its members' global
// ranks), then per (function, group) the calls, time and bytes. A function (one call path)
// may run in several groups: one NCCL kernel name serves the tensor-parallel all-reduce
// inside a host and the data-parallel one across hosts. The localizer tells inter-node
// traffic (the NIC's) from intra-node traffic (NVLink's) with it, using the workers' hosts.
// Empty when the sources know no groups (older traces, live hooks, older summaries).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "perftracker/core/event_sink.h"

namespace perftracker {

struct CollectiveGroup {
  std::string name;            // the source's name for it ("0", "tp"): for reading only
  std::vector<int32_t> ranks;  // global ranks of its members, maybe only the first ones
  uint32_t size = 0;           // how many members it has; 0 = not known
  // torch's backend ("gloo", "nccl", "cpu:gloo,cuda:nccl": ProcessGroupInfo::backend);
  // "" = not known (a trace without pg_config, a summary older than the field).
  std::string backend;
  // Every member is listed.
  bool complete() const { return size > 0 && ranks.size() == size; }
  // Every backend it names is gloo ("gloo", "cpu:gloo,cuda:gloo"): its bytes go through TCP
  // sockets on every device, never over NVLink. False when the backend is not known.
  bool gloo_only() const;
};

struct CollectiveGroupCalls {
  uint32_t function = 0;  // index in WorkerSummary::functions
  uint32_t group = 0;     // index in CollectiveGroups::groups
  uint64_t count = 0;
  int64_t total_ns = 0;  // counted as FunctionSummary::total_ns is (inside the iterations)
  uint64_t bytes = 0;
};

struct CollectiveGroups {
  std::vector<CollectiveGroup> groups;
  std::vector<CollectiveGroupCalls> calls;  // sorted by (function, group)
  bool empty() const { return calls.empty(); }
};

// The summarizer's side of it: groups as the sources declare them, calls as they are counted.
class CollectiveGroupRecorder {
 public:
  void Declare(const ProcessGroupInfo& group);
  // A counted collective call of function `function` in the source's group `group` (> 0).
  void Add(uint32_t function, uint16_t group, int64_t inside_ns, uint64_t bytes);
  // The table, with only the groups some call ran in.
  CollectiveGroups Build() const;

 private:
  std::map<uint16_t, CollectiveGroup> declared_;
  std::map<std::pair<uint32_t, uint16_t>, CollectiveGroupCalls> calls_;
};

}  // namespace perftracker
