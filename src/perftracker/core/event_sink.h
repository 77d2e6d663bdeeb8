// EventSink: what every source writes into. Sources (trace importers, the agent's ring
// reader, samplers, the simulator) produce; the WindowSummarizer consumes. Data flows one
// way: a sink never calls back into its source.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "perftracker/core/event.h"
#include "perftracker/core/metric_sample.h"

namespace perftracker {

struct TrackInfo {
  uint32_t track_id = 0;
  TrackKind kind = TrackKind::kHostThread;
  int32_t device = -1;  // GPU index for device streams, -1 for host threads
  std::string name;     // "thread 23695", "stream 7", ...
};

// A process group (communicator) that collectives ran in: the global ranks of its members.
// `ranks` may hold only the first members (a source that truncates long lists): `size` says
// how many there are (0 = not known), and the list is complete when it holds `size` ranks.
struct ProcessGroupInfo {
  uint16_t id = 0;   // Event::group of its collectives; > 0, unique per source
  std::string name;  // "0", "tp", a communicator hash: for reading, never compared across workers
  std::vector<int32_t> ranks;
  uint32_t size = 0;
  // torch's backend of it, as torch names it: "gloo", "nccl", or per device
  // "cpu:gloo,cuda:nccl" (a Kineto trace's pg_config, a 2.x group made for several devices);
  // "" = not known.
  std::string backend;
};

class EventSink {
 public:
  virtual ~EventSink() = default;
  // Called once per track before the first event on it.
  virtual void OnTrack(const TrackInfo& track) = 0;
  // Events arrive in any order across tracks and mostly in start order within a track.
  virtual void OnEvent(const Event& event) = 0;
  virtual void OnMetric(const MetricSample& sample) = 0;
  // Called once per process group before the first event that names it (Event::group).
  // Sources that know no groups never call it. Called again for the same id when the source
  // learns more of it later (a Kineto trace's backends, when distributedInfo follows the
  // events): the later call replaces the group.
  virtual void OnProcessGroup(const ProcessGroupInfo& /*group*/) {}
};

}  // namespace perftracker
