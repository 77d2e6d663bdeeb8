// RenderedFinding: a worded finding ready for ranking. Victims are filled in only for the
// findings that make the cut (FindingWording::FillVictims).
#pragma once

#include <cstdint>
#include <vector>

#include "perftracker/localize/diagnosis.h"

namespace perftracker::localize {

struct RenderedFinding {
  Finding finding;
  bool wants_victims = false;
  std::vector<uint32_t> culprits;       // worker indices
  std::vector<uint32_t> extra_victims;  // workers whose wait findings it explained
};

}  // namespace perftracker::localize
