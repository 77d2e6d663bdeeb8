// IterationProto: one IterationSummary to and from its protobuf message, as the summary and
// the digest codecs both carry a worker's iterations. Internal to wire/ (it includes the
// generated header, which only wire/*.cc may see); checks of the values stay with each codec.
#pragma once

#include "perftracker.pb.h"
#include "perftracker/summary/worker_summary.h"

namespace perftracker::wire_internal {

inline void EncodeIteration(const IterationSummary& it, v1::IterationSummary* out) {
  out->set_start_ns(it.start_ns);
  out->set_duration_ns(it.duration_ns);
  out->set_compute_ns(it.compute_ns);
  out->set_communication_ns(it.communication_ns);
  out->set_wait_ns(it.wait_ns);
  out->set_data_ns(it.data_ns);
  out->set_host_only_ns(it.host_only_ns);
}

inline IterationSummary DecodeIteration(const v1::IterationSummary& m) {
  IterationSummary it;
  it.start_ns = m.start_ns();
  it.duration_ns = m.duration_ns();
  it.compute_ns = m.compute_ns();
  it.communication_ns = m.communication_ns();
  it.wait_ns = m.wait_ns();
  it.data_ns = m.data_ns();
  it.host_only_ns = m.host_only_ns();
  return it;
}

}  // namespace perftracker::wire_internal
