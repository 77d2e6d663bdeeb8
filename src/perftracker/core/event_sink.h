// EventSink: what every source writes into. Sources (trace importers, the agent's ring
// reader, samplers, the simulator) produce; the WindowSummarizer consumes. Data flows one
// way: a sink never calls back into its source.
#pragma once

#include <cstdint>
#include <string>

#include "perftracker/core/event.h"
#include "perftracker/core/metric_sample.h"

namespace perftracker {

struct TrackInfo {
  uint32_t track_id = 0;
  TrackKind kind = TrackKind::kHostThread;
  int32_t device = -1;  // GPU index for device streams, -1 for host threads
  std::string name;     // "thread 23695", "stream 7", ...
};

class EventSink {
 public:
  virtual ~EventSink() = default;
  // Called once per track before the first event on it.
  virtual void OnTrack(const TrackInfo& track) = 0;
  // Events arrive in any order across tracks and mostly in start order within a track.
  virtual void OnEvent(const Event& event) = 0;
  virtual void OnMetric(const MetricSample& sample) = 0;
};

}  // namespace perftracker
