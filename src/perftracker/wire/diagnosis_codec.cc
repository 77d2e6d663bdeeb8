#include "perftracker/wire/diagnosis_codec.h"

#include <cstdint>
#include <string>
#include <utility>

#include "perftracker.pb.h"
#include "perftracker/wire/proto_parse.h"

namespace perftracker {

using wire_internal::ParseWireMessage;
using wire_internal::WireDataLoss;

std::string EncodeDiagnosis(const Diagnosis& d) {
  v1::Diagnosis m;
  m.set_num_workers(d.num_workers);
  m.set_median_iteration_ns(d.median_iteration_ns);
  for (const Finding& f : d.findings) {
    v1::Finding* o = m.add_findings();
    o->set_code(f.code);
    o->set_category(static_cast<uint32_t>(f.category));
    o->set_title(f.title);
    o->mutable_workers()->Add(f.workers.begin(), f.workers.end());
    o->mutable_victims()->Add(f.victims.begin(), f.victims.end());
    o->set_function(f.function);
    o->set_function_key(f.function_key);
    o->set_resource(f.resource);
    o->set_lost_ns_per_iteration(f.lost_ns_per_iteration);
    o->set_lost_share(f.lost_share);
    o->set_material(f.material);
    for (const Evidence& e : f.evidence) {
      v1::Evidence* oe = o->add_evidence();
      oe->set_label(e.label);
      oe->set_value(e.value);
    }
  }
  for (const std::string& note : d.notes) m.add_notes(note);
  return m.SerializeAsString();
}

StatusOr<Diagnosis> DecodeDiagnosis(std::string_view bytes) {
  constexpr std::string_view kWhat = "Diagnosis";
  v1::Diagnosis m;
  PERFTRACKER_RETURN_IF_ERROR(ParseWireMessage(m, bytes, kWhat));
  Diagnosis d;
  d.num_workers = m.num_workers();
  d.median_iteration_ns = m.median_iteration_ns();
  if (d.num_workers < 0) {
    return WireDataLoss(kWhat, "negative worker count " + std::to_string(d.num_workers));
  }
  d.findings.reserve(static_cast<size_t>(m.findings_size()));
  for (const v1::Finding& f : m.findings()) {
    Finding o;
    o.code = f.code();
    const auto category = static_cast<FindingCategory>(f.category());
    if (f.category() > UINT8_MAX || FindingCategoryName(category) == "unknown") {
      return WireDataLoss(kWhat, "finding " + std::to_string(d.findings.size()) + " (" + o.code +
                                     "): unknown category " + std::to_string(f.category()));
    }
    o.category = category;
    o.title = f.title();
    o.workers.assign(f.workers().begin(), f.workers().end());
    o.victims.assign(f.victims().begin(), f.victims().end());
    o.function = f.function();
    o.function_key = f.function_key();
    o.resource = f.resource();
    o.lost_ns_per_iteration = f.lost_ns_per_iteration();
    o.lost_share = f.lost_share();
    o.material = f.material();
    o.evidence.reserve(static_cast<size_t>(f.evidence_size()));
    for (const v1::Evidence& e : f.evidence()) o.evidence.push_back({e.label(), e.value()});
    d.findings.push_back(std::move(o));
  }
  d.notes.assign(m.notes().begin(), m.notes().end());
  return d;
}

}  // namespace perftracker
