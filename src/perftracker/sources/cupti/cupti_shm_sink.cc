#include "perftracker/sources/cupti/cupti_shm_sink.h"

#include <unistd.h>

namespace perftracker {

StatusOr<std::unique_ptr<CuptiShmSink>> CuptiShmSink::Create(const std::string& path, int32_t rank,
                                                             uint32_t ring_events) {
  AgentShmOptions o;
  o.num_rings = 1;
  o.ring_capacity = ring_events;
  o.function_capacity = 1u << 14;
  auto shm = AgentShm::Create(path, rank, o);
  if (!shm.ok()) return shm.status();
  return std::unique_ptr<CuptiShmSink>(new CuptiShmSink(std::move(shm.value())));
}

void CuptiShmSink::OnTrack(const TrackInfo& /*track*/) {}

void CuptiShmSink::OnMetric(const MetricSample& /*sample*/) {}

void CuptiShmSink::OnEvent(const Event& event) {
  while (published_ < functions_.size()) {
    const FunctionTable::Entry& e = functions_.Get(published_);
    if (!shm_->PublishFunction(published_, e.kind, e.name, FunctionTable::kNoParent)) break;
    ++published_;
  }
  if (event.function_id >= published_) {
    shm_->header()->dropped_function_table.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  if (ring_ < 0) {
    ring_ = shm_->ClaimRing(static_cast<uint64_t>(gettid()));
    if (ring_ < 0) {
      shm_->header()->dropped_no_ring.fetch_add(1, std::memory_order_relaxed);
      return;
    }
  }
  if (shm_->Push(ring_, event)) ++events_;
}

}  // namespace perftracker
