// Wire form of a Diagnosis (message perftracker.v1.Diagnosis, perftracker.proto). No process
// sends diagnoses today (the server renders them into the report's JSON and text); the codec
// keeps the schema's Diagnosis message exercised and ready for a client that reads diagnoses
// over the wire. A library of its own (perftracker_wire_diagnosis) so that the summary codec,
// which the store and the collector link, does not pull in the localizer.
//
// Decoding validates the worker count and returns a DataLoss Status with one line saying what
// is wrong; corrupt or random bytes never crash. A finding of a category this perftracker
// does not know (a newer server's) is left out, not guessed into another category: a note of
// the decoded diagnosis keeps its code and title, and it is counted in *unknown when given
// (unknown_values.h).
#pragma once

#include <string>
#include <string_view>

#include "perftracker/core/status.h"
#include "perftracker/localize/diagnosis.h"
#include "perftracker/wire/unknown_values.h"

namespace perftracker {

std::string EncodeDiagnosis(const Diagnosis& diagnosis);
StatusOr<Diagnosis> DecodeDiagnosis(std::string_view bytes, UnknownValues* unknown = nullptr);

}  // namespace perftracker
