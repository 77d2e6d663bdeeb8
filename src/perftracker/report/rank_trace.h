// RankTrace: one rank's raw events kept for a timeline export (Perfetto / Chrome trace).
//
// The summarizer folds events into a few KB per worker and drops them; an export needs the
// events themselves. RankTrace records them (40 B each, plus one TrackInfo per track) while
// passing every call on to the sink it wraps, so one import pass feeds both the diagnosis and
// the export. It owns the FunctionTable the importer and the summarizer intern into, so the
// names outlive the import.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "perftracker/core/event_sink.h"
#include "perftracker/core/function_table.h"

namespace perftracker {

class RankTrace : public EventSink {
 public:
  // `forward` (may be null) receives every call after it is recorded; set it before the import.
  void set_forward(EventSink* forward) { forward_ = forward; }

  void OnTrack(const TrackInfo& track) override;
  void OnEvent(const Event& event) override;
  void OnMetric(const MetricSample& sample) override;

  FunctionTable* functions() { return &functions_; }
  const FunctionTable& functions() const { return functions_; }
  const std::vector<TrackInfo>& tracks() const { return tracks_; }
  const std::vector<Event>& events() const { return events_; }

  int32_t rank = -1;
  std::string host;    // "" when the source does not say
  std::string source;  // the trace file, for messages

 private:
  EventSink* forward_ = nullptr;
  FunctionTable functions_;
  std::vector<TrackInfo> tracks_;
  std::vector<Event> events_;
};

}  // namespace perftracker
