// CuptiShmSink: where the CUPTI tracer's Events go in a training process: a shared-memory file
// of its own in the agent's format (core/agent_shm.h), /dev/shm/perftracker-<run id>-<pid>-cupti
// by convention (next to the agent's file and the NCCL plugin's "-nccl" one), so that CUPTI's
// worker thread never touches the agent's function table (single writer: the agent).
//
// Functions: the converter interns names into functions() (a FunctionTable, ids dense from 0,
// all roots); OnEvent publishes every entry not yet published before pushing the event, so an
// event's function is always in the file first (the agent file's rule). Events go into one
// ring: the tracer serializes its buffer callbacks, so there is one producer at a time. A full
// ring or function table drops and counts (the file's counters). Track names are not carried
// (the format has none): the reader names tracks after the ring's thread and tells device
// tracks by kEventFlagOnDevice.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "perftracker/core/agent_shm.h"
#include "perftracker/core/event_sink.h"
#include "perftracker/core/function_table.h"
#include "perftracker/core/status.h"

namespace perftracker {

class CuptiShmSink : public EventSink {
 public:
  static StatusOr<std::unique_ptr<CuptiShmSink>> Create(const std::string& path, int32_t rank,
                                                        uint32_t ring_events = 1u << 18);

  FunctionTable* functions() { return &functions_; }
  AgentShm* shm() { return shm_.get(); }
  uint64_t events() const { return events_; }

  void OnTrack(const TrackInfo& track) override;
  void OnEvent(const Event& event) override;
  void OnMetric(const MetricSample& sample) override;

 private:
  explicit CuptiShmSink(std::unique_ptr<AgentShm> shm) : shm_(std::move(shm)) {}

  std::unique_ptr<AgentShm> shm_;
  FunctionTable functions_;
  uint32_t published_ = 0;
  int ring_ = -1;
  uint64_t events_ = 0;
};

}  // namespace perftracker
