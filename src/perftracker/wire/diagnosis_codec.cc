#include "perftracker/wire/diagnosis_codec.h"

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "perftracker.pb.h"
#include "perftracker/wire/proto_parse.h"

namespace perftracker {

using wire_internal::ParseWireMessage;
using wire_internal::WireDataLoss;

namespace {
// Findings left out are named one note each up to here, the rest counted in one more.
constexpr size_t kMaxLeftOutNotes = 16;
}  // namespace

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

StatusOr<Diagnosis> DecodeDiagnosis(std::string_view bytes, UnknownValues* unknown) {
  constexpr std::string_view kWhat = "Diagnosis";
  v1::Diagnosis m;
  PERFTRACKER_RETURN_IF_ERROR(ParseWireMessage(m, bytes, kWhat));
  Diagnosis d;
  UnknownValues skipped;
  std::vector<std::string> left_out;  // notes naming the findings left out
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
      const std::string what = "finding " + std::to_string(d.findings.size() + skipped.findings) +
                               " (" + o.code.substr(0, 64) + "): category " +
                               std::to_string(f.category());
      ++skipped.findings;
      if (skipped.first.empty()) skipped.first = what;
      if (left_out.size() < kMaxLeftOutNotes) {
        left_out.push_back(what + ", which this perftracker does not know (a newer server's?), " +
                           "left out: " + f.title().substr(0, 200));
      }
      continue;
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
  d.notes.insert(d.notes.end(), left_out.begin(), left_out.end());
  if (skipped.findings > left_out.size()) {
    d.notes.push_back("... and " + std::to_string(skipped.findings - left_out.size()) +
                      " more findings of categories this perftracker does not know, left out");
  }
  if (unknown != nullptr) *unknown = std::move(skipped);
  return d;
}

}  // namespace perftracker
