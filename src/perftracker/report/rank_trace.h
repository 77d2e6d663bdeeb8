// RankTrace: one rank's raw events kept for a timeline export (Perfetto / Chrome trace).
//
// The summarizer folds events into a few KB per worker and drops them; an export needs the
// events themselves. RankTrace records them (40 B each, plus one TrackInfo per track) while
// passing every call on to the sink it wraps, so one import pass feeds both the diagnosis and
// the export. It owns the FunctionTable the importer and the summarizer intern into, so the
// names outlive the import.
//
// A cap (set_max_events) bounds the memory of a live window's recording: events beyond it
// are not kept but counted per track (not_recorded), so that the export says what it lacks.
// Events with invalid times (HasValidTimes in core/event_time.h: out of range, or ending before
// they start) are bad data, never kept: the summarizer they are forwarded to counts them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "perftracker/core/event_sink.h"
#include "perftracker/core/function_table.h"

namespace perftracker {

class RankTrace : public EventSink {
 public:
  // `forward` (may be null) receives every call after it is recorded; set it before the import.
  void set_forward(EventSink* forward) { forward_ = forward; }
  // Keep at most this many events; later ones are counted in not_recorded().
  void set_max_events(size_t max_events) { max_events_ = max_events; }

  struct NotRecorded {
    uint64_t count = 0;
    int64_t ns = 0;
  };

  void OnTrack(const TrackInfo& track) override;
  void OnEvent(const Event& event) override;
  void OnMetric(const MetricSample& sample) override;
  // Not recorded (a Perfetto export shows no groups): forwarded.
  void OnProcessGroup(const ProcessGroupInfo& group) override {
    if (forward_ != nullptr) forward_->OnProcessGroup(group);
  }

  FunctionTable* functions() { return &functions_; }
  const FunctionTable& functions() const { return functions_; }
  const std::vector<TrackInfo>& tracks() const { return tracks_; }
  const std::vector<Event>& events() const { return events_; }
  // Per track id: the events over the cap (or over the cap of the recording this was read from).
  const std::map<uint32_t, NotRecorded>& not_recorded() const { return not_recorded_; }
  std::map<uint32_t, NotRecorded>* mutable_not_recorded() { return &not_recorded_; }
  uint64_t not_recorded_count() const;
  // Moves the events out / in (a recorder handing its events to a self-contained trace).
  std::vector<Event> TakeEvents() { return std::move(events_); }
  void AdoptEvents(std::vector<Event> events) { events_ = std::move(events); }

  int32_t rank = -1;
  std::string host;    // "" when the source does not say
  std::string source;  // the trace file, for messages

 private:
  EventSink* forward_ = nullptr;
  FunctionTable functions_;
  std::vector<TrackInfo> tracks_;
  std::vector<Event> events_;
  size_t max_events_ = SIZE_MAX;
  std::map<uint32_t, NotRecorded> not_recorded_;
};

}  // namespace perftracker
