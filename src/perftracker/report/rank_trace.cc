#include "perftracker/report/rank_trace.h"

#include "perftracker/core/event_time.h"

namespace perftracker {

void RankTrace::OnTrack(const TrackInfo& track) {
  tracks_.push_back(track);
  if (forward_ != nullptr) forward_->OnTrack(track);
}

void RankTrace::OnEvent(const Event& event) {
  if (!HasValidTimes(event)) {
    // Bad data (a hostile trace, a rank writing garbage into its ring): never recorded, so
    // that no export computes with it; the sink forwarded to counts it as malformed.
  } else if (events_.size() < max_events_) {
    events_.push_back(event);
  } else {
    NotRecorded& n = not_recorded_[event.track_id];
    ++n.count;
    n.ns += event.duration_ns();
  }
  if (forward_ != nullptr) forward_->OnEvent(event);
}

void RankTrace::OnMetric(const MetricSample& sample) {
  if (forward_ != nullptr) forward_->OnMetric(sample);
}

uint64_t RankTrace::not_recorded_count() const {
  uint64_t n = 0;
  for (const auto& [track, r] : not_recorded_) n += r.count;
  return n;
}

}  // namespace perftracker
