#include "perftracker/report/rank_trace.h"

namespace perftracker {

void RankTrace::OnTrack(const TrackInfo& track) {
  tracks_.push_back(track);
  if (forward_ != nullptr) forward_->OnTrack(track);
}

void RankTrace::OnEvent(const Event& event) {
  events_.push_back(event);
  if (forward_ != nullptr) forward_->OnEvent(event);
}

void RankTrace::OnMetric(const MetricSample& sample) {
  if (forward_ != nullptr) forward_->OnMetric(sample);
}

}  // namespace perftracker
