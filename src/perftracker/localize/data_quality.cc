#include "perftracker/localize/data_quality.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdint>

#include "perftracker/core/rank_list.h"
#include "perftracker/core/units.h"
#include "perftracker/localize/finding_catalogue.h"
#include "perftracker/localize/rule_context.h"
#include "perftracker/summary/data_quality_counters.h"

namespace perftracker::localize {
namespace {

namespace fc = finding_codes;

// A worker whose events were this much dropped / malformed is badly incomplete.
constexpr double kIncompleteShare = 0.1;
// A note's rank list is cut here ("..., … (N ranks)").
constexpr size_t kMaxRankListChars = 160;

}  // namespace

void CheckDataQuality(const JobTable& job, Diagnosis& d, bool hang_window) {
  // Ranks: missing, duplicate, absent.
  int32_t max_rank = -1;
  for (const auto& wr : job.workers()) max_rank = std::max(max_rank, wr.rank);
  constexpr int32_t kMaxRankChecked = 1 << 24;
  if (max_rank >= kMaxRankChecked) {
    d.notes.push_back(
        fmt::format("rank {} is implausibly large; rank gaps were not checked", max_rank));
  } else if (max_rank >= 0) {
    std::vector<uint32_t> seen(static_cast<size_t>(max_rank) + 1, 0);
    for (const auto& wr : job.workers()) {
      if (wr.rank >= 0) ++seen[static_cast<size_t>(wr.rank)];
    }
    std::vector<int32_t> missing, duplicate;
    for (int32_t r = 0; r <= max_rank; ++r) {
      if (seen[static_cast<size_t>(r)] == 0) missing.push_back(r);
      if (seen[static_cast<size_t>(r)] > 1) duplicate.push_back(r);
    }
    if (!missing.empty()) {
      d.notes.push_back(fmt::format(
          "missing ranks: {} ({} of {} expected ranks have no data; a missing worker may be "
          "the one the others wait for, check that its profile was written)",
          FormatRanks(missing, kMaxRankListChars, ", "), missing.size(), max_rank + 1));
    }
    if (!duplicate.empty()) {
      d.notes.push_back(fmt::format(
          "duplicate ranks: {} appear more than once (two profiles of one rank, or mixed "
          "windows); each copy was compared as a separate worker",
          FormatRanks(duplicate, kMaxRankListChars, ", ")));
    }
  }
  if (!job.unranked_sources().empty()) {
    d.notes.push_back(
        fmt::format("{} worker(s) have no rank (first: {}); they are named by their input position",
                    job.unranked_sources().size(), job.unranked_sources().front()));
  }

  // Event problems per worker.
  std::vector<uint32_t> incomplete;
  double worst_lost_share = 0;  // over the incomplete workers that have data
  size_t empty = 0;             // incomplete workers with no data at all
  size_t noted = 0;
  for (const auto& p : job.problems()) {
    const SummaryStats& st = p.stats;
    const double total = static_cast<double>(st.events + st.dropped_events);
    const double lost_share =
        p.empty ? 1.0 : (total > 0 ? static_cast<double>(LostEvents(st)) / total : 0);
    if (noted < kMaxNotesPerKind) {
      std::string note;
      if (p.empty && hang_window) {
        note = fmt::format(
            "{}: no call returned in the hang window (no functions and no iterations in its "
            "summary): its calls are still open, stuck or waiting in C++ (e.g. in a "
            "collective) for a rank that is; its stacks say where",
            job.WorkerName(p.worker));
      } else if (p.empty) {
        note = fmt::format("{}: no functions and no iterations in its summary",
                           job.WorkerName(p.worker));
      } else {
        // "rank 5: 0 dropped, 0 malformed, 3 out-of-order of N events; 2 names truncated":
        // every counter of the table (summary/data_quality_counters.h) that has a count.
        std::string counted, more;
        for (const DataQualityCounter& c : kDataQualityCounters) {
          const uint64_t n = st.*c.count;
          if (c.noted_at_zero) {
            counted += fmt::format("{}{} {}", counted.empty() ? "" : ", ", n, c.phrase);
          } else if (n > 0) {
            more += fmt::format("; {} {}", n, c.phrase);
          }
        }
        note = fmt::format("{}: {} of {} events{}", job.WorkerName(p.worker), counted,
                           st.events + st.dropped_events, more);
      }
      if (!st.first_problem.empty()) note += fmt::format(" (first: {})", st.first_problem);
      if (!p.source.empty()) note += fmt::format(" [{}]", p.source);
      d.notes.push_back(std::move(note));
    }
    ++noted;
    if (p.empty && hang_window) continue;  // the hang's doing: said in its note
    if (lost_share >= kIncompleteShare) {
      incomplete.push_back(p.worker);
      if (p.empty) {
        ++empty;
      } else {
        worst_lost_share = std::max(worst_lost_share, lost_share);
      }
    }
  }
  if (noted > kMaxNotesPerKind) {
    d.notes.push_back(
        fmt::format("... and {} more workers with event problems", noted - kMaxNotesPerKind));
  }
  if (!incomplete.empty()) {
    Finding f;
    f.code = fc::kIncompleteData;
    f.category = FindingCategory::kDataQuality;
    std::sort(incomplete.begin(), incomplete.end(), [&](uint32_t a, uint32_t b) {
      return job.workers()[a].rank < job.workers()[b].rank;
    });
    // An empty summary is no data, not lost data (a window the job's end cut short, a rank
    // that recorded nothing): "100 % of events lost" would send the user to the ring sizes.
    const std::string what =
        empty == incomplete.size() ? std::string("no functions and no iterations in the window")
        : empty == 0
            ? fmt::format("up to {} of events lost or malformed", FormatShare(worst_lost_share))
            : fmt::format("up to {} of events lost or malformed; {} with no data at all",
                          FormatShare(worst_lost_share), empty);
    f.title =
        fmt::format("{}: profile badly incomplete ({}); findings about {} are less certain",
                    job.WorkersPhrase(incomplete), what, incomplete.size() == 1 ? "it" : "them");
    for (size_t i = 0; i < incomplete.size() && i < kMaxListedWorkers; ++i) {
      f.workers.push_back(job.workers()[incomplete[i]].rank);
    }
    f.resource = "profiler";
    f.evidence.push_back({"workers with incomplete data", fmt::format("{}", incomplete.size())});
    if (empty < incomplete.size()) {
      f.evidence.push_back(
          {"worst share of events dropped or malformed", FormatShare(worst_lost_share)});
    }
    if (empty > 0) {
      f.evidence.push_back(
          {"workers with no data (no functions, no iterations)", fmt::format("{}", empty)});
    }
    f.evidence.push_back({"threshold", FormatShare(kIncompleteShare)});
    if (hang_window) {
      d.notes.push_back(f.title);  // the hang leads; this is what its data lacks
    } else {
      d.findings.push_back(std::move(f));
    }
  }
}

}  // namespace perftracker::localize
