#include "perftracker/report/report_model.h"

#include <algorithm>
#include <cmath>
#include <unordered_set>

#include <fmt/format.h>

#include "perftracker/localize/pipeline_slack.h"
#include "perftracker/report/format.h"
#include "perftracker/summary/iteration_breakdown.h"

namespace perftracker::report {
namespace {

constexpr size_t kMaxRanksInVerdict = 40;  // characters of a rank list in one sentence

double Median(std::vector<double> values) {
  if (values.empty()) return 0;
  const size_t mid = values.size() / 2;
  std::nth_element(values.begin(), values.begin() + static_cast<std::ptrdiff_t>(mid),
                   values.end());
  return values[mid];
}

// What the culprits of a finding of this category are, as a predicate of the sentence.
std::string_view CulpritPhrase(FindingCategory category, bool plural) {
  switch (category) {
    case FindingCategory::kCompute:
      return plural ? "are the stragglers" : "is the straggler";
    case FindingCategory::kGpuHardware:
      return plural ? "have slow GPUs" : "has a slow GPU";
    case FindingCategory::kCpuContention:
      return plural ? "are short of CPU" : "is short of CPU";
    case FindingCategory::kDataLoading:
      return plural ? "are held up by data loading" : "is held up by data loading";
    case FindingCategory::kCommunication:
      return plural ? "are slow to communicate" : "is slow to communicate";
    case FindingCategory::kHang:
      return plural ? "hang" : "hangs";
    default:
      return plural ? "stand out" : "stands out";
  }
}

std::string CleanTitle(std::string_view title) {
  std::string t = SanitizeText(title);
  while (!t.empty() && (t.back() == '.' || t.back() == ' ')) t.pop_back();
  return t;
}

bool CoversAll(const std::vector<int32_t>& ranks, int32_t num_workers) {
  if (ranks.empty()) return true;
  std::unordered_set<int32_t> unique(ranks.begin(), ranks.end());
  return num_workers > 1 && unique.size() >= static_cast<size_t>(num_workers);
}

}  // namespace

std::string_view WorkerRoleName(WorkerRole role) {
  switch (role) {
    case WorkerRole::kPeer: return "peer";
    case WorkerRole::kCulprit: return "culprit";
    case WorkerRole::kVictim: return "victim";
  }
  return "peer";
}

const Diagnosis& ReportModel::EmptyDiagnosis() {
  static const Diagnosis kEmpty;
  return kEmpty;
}

ReportModel::ReportModel(const ReportInput& input)
    : diagnosis_(input.diagnosis ? input.diagnosis : &EmptyDiagnosis()),
      title_(SanitizeText(input.title)) {
  for (const Finding& f : diagnosis_->findings) {
    if (!f.material) continue;
    ++material_count_;
    if (!top_) top_ = &f;
  }
  // Roles: culprits of material findings win over victims of others.
  for (const Finding& f : diagnosis_->findings) {
    if (!f.material) continue;
    for (int32_t r : f.victims) roles_.emplace(r, WorkerRole::kVictim);
  }
  for (const Finding& f : diagnosis_->findings) {
    if (!f.material) continue;
    for (int32_t r : f.workers) roles_[r] = WorkerRole::kCulprit;
  }

  if (input.workers) {
    workers_.reserve(input.workers->size());
    for (const WorkerSummary& w : *input.workers) {
      WorkerRow row;
      row.rank = w.rank;
      row.summary = &w;
      row.role = RoleOf(w.rank);
      row.iterations = w.iterations.size();
      row.median_iteration_ns = static_cast<double>(w.median_iteration_ns());
      const IterationBreakdown mean = MeanBreakdown(w);
      row.mean_iteration_ns = w.iterations.empty() ? row.median_iteration_ns : mean.duration_ns;
      if (mean.duration_ns > 0) {
        row.compute_share = mean.compute_ns / mean.duration_ns;
        row.communication_share = mean.communication_ns / mean.duration_ns;
        row.wait_share = mean.wait_ns / mean.duration_ns;
        row.data_share = mean.data_ns / mean.duration_ns;
        row.host_only_share = mean.host_only_ns / mean.duration_ns;
      }
      workers_.push_back(row);
    }
    std::stable_sort(workers_.begin(), workers_.end(),
                     [](const WorkerRow& a, const WorkerRow& b) { return a.rank < b.rank; });
    for (size_t i = 0; i < workers_.size(); ++i) row_of_rank_.emplace(workers_[i].rank, i);
    window_only_ =
        !workers_.empty() && std::all_of(workers_.begin(), workers_.end(),
                                         [](const WorkerRow& w) { return w.iterations == 0; });
  }

  num_workers_ = diagnosis_->num_workers > 0 ? diagnosis_->num_workers
                                             : static_cast<int32_t>(workers_.size());
  if (!top_) {
    for (const Finding& f : diagnosis_->findings) {
      if (!f.workers.empty() && !CoversAll(f.workers, num_workers_)) {
        minor_straggler_ = &f;
        break;
      }
    }
  }
  median_iteration_ns_ = Finite(diagnosis_->median_iteration_ns);
  if (median_iteration_ns_ <= 0 && !workers_.empty()) {
    std::vector<double> medians;
    for (const WorkerRow& w : workers_) medians.push_back(w.median_iteration_ns);
    median_iteration_ns_ = Median(std::move(medians));
  }
}

WorkerRole ReportModel::RoleOf(int32_t rank) const {
  auto it = roles_.find(rank);
  return it == roles_.end() ? WorkerRole::kPeer : it->second;
}

std::string ReportModel::Verdict() const {
  // Where no worker completed an iteration the "iteration" is the window.
  const std::string median =
      median_iteration_ns_ <= 0 ? ""
      : window_only_            ? fmt::format(" (a {} window, no iteration completed)",
                                              FormatDuration(median_iteration_ns_))
                     : fmt::format(" (median iteration {})", FormatDuration(median_iteration_ns_));
  if (!top_) {
    if (num_workers_ <= 0) return "nothing to diagnose: no worker data was given";
    if (num_workers_ == 1) return "no material finding on the single worker" + median;
    // A minor straggler: the workers do not behave alike, one costs the job little.
    if (minor_straggler_) return "no material finding: " + Sentence(*minor_straggler_);
    return fmt::format("no material finding: the {} workers behave alike{}", num_workers_,
                       median);
  }
  return Sentence(*top_);
}

std::string ReportModel::Sentence(const Finding& finding) const {
  std::string sentence;
  const std::string title = CleanTitle(finding.title);
  if (CoversAll(finding.workers, num_workers_)) {
    sentence = RanksLabel({}, num_workers_) + ": " + title;
  } else {
    std::unordered_set<int32_t> unique(finding.workers.begin(), finding.workers.end());
    const bool plural = unique.size() > 1;
    const std::string who = RanksLabel(finding.workers, num_workers_, kMaxRanksInVerdict);
    // "rank 2 is the straggler: rank 2 spends ..." reads "... : it spends ...". A title that
    // already says it ("rank 1 hangs in ...") is the sentence: not "rank 1 hangs: it hangs".
    const std::string_view phrase = CulpritPhrase(finding.category, plural);
    if (title.rfind(fmt::format("{} {} ", who, phrase), 0) == 0) {
      sentence = title;
    } else {
      std::string rest = title;
      if (rest.rfind(who + " ", 0) == 0) {
        rest = (plural ? "they" : "it") + rest.substr(who.size());
      }
      sentence = fmt::format("{} {}: {}", who, phrase, rest);
    }
  }
  // The pipeline absorbed the culprits' excess: the title says what the job loses, and
  // lost_share is the culprits' own excess, which the job does not pay.
  for (const Evidence& e : finding.evidence) {
    if (e.label == kAbsorbedByPipelineEvidence) return sentence;
  }
  const double share = Finite(finding.lost_share);
  const double lost = Finite(finding.lost_ns_per_iteration);
  if (finding.category == FindingCategory::kHang) {
    // A hang's time is its silence (the title says how long), not a cost per iteration.
  } else if (share > 0 && title.find(FormatShare(share)) != std::string::npos) {
    // The title already says what it costs.
  } else if (share > 0) {
    sentence += fmt::format(", costing {} {}", FormatShare(share),
                            window_only_ ? "of the window's wall time" : "of each iteration");
    if (lost > 0) sentence += fmt::format(" ({})", FormatDuration(lost));
  } else if (lost > 0) {
    sentence += fmt::format(", costing {} {}", FormatDuration(lost),
                            window_only_ ? "in the window" : "per iteration");
  }
  return sentence;
}

std::string ReportModel::LostPhrase(const Finding& f) const {
  const double lost = Finite(f.lost_ns_per_iteration);
  const double share = Finite(f.lost_share);
  if (f.category == FindingCategory::kHang) {
    return lost > 0 ? "no progress for " + FormatDuration(lost) : "not estimated";
  }
  if (lost <= 0 && share <= 0) return "not estimated";
  if (window_only_) {
    return fmt::format("{} in the window, {} of its wall time (no iteration completed)",
                       FormatDuration(lost), FormatShare(share));
  }
  return fmt::format("{} per iteration, {} of iteration time", FormatDuration(lost),
                     FormatShare(share));
}

std::string ReportModel::ShortLostPhrase(const Finding& f) const {
  const double lost = Finite(f.lost_ns_per_iteration);
  if (f.category == FindingCategory::kHang) return "no progress for " + FormatDuration(lost);
  return fmt::format("{}{} ({})", FormatDuration(lost), window_only_ ? " in the window" : "/iter",
                     FormatShare(Finite(f.lost_share)));
}

std::vector<size_t> ReportModel::SelectWorkers(size_t max_rows) const {
  std::vector<size_t> chosen;
  if (max_rows == 0) return chosen;
  const auto of_role = [&](WorkerRole role) {
    std::vector<size_t> out;
    for (size_t i = 0; i < workers_.size(); ++i) {
      if (workers_[i].role == role) out.push_back(i);
    }
    return out;
  };
  if (workers_.size() <= max_rows) {
    // Everything fits: still culprits first, then victims, then peers.
    for (WorkerRole role : {WorkerRole::kCulprit, WorkerRole::kVictim, WorkerRole::kPeer}) {
      for (size_t i : of_role(role)) chosen.push_back(i);
    }
    return chosen;
  }
  std::vector<bool> taken(workers_.size(), false);
  const auto take = [&](size_t i) {
    if (chosen.size() < max_rows && !taken[i]) {
      taken[i] = true;
      chosen.push_back(i);
    }
  };
  // Takes up to `count` of `candidates` (sorted by rank), evenly spread over them.
  const auto take_evenly = [&](const std::vector<size_t>& candidates, size_t count) {
    count = std::min(count, candidates.size());
    for (size_t j = 0; j < count; ++j) {
      take(candidates[j * candidates.size() / count]);
    }
  };
  const std::vector<size_t> culprits = of_role(WorkerRole::kCulprit);
  take_evenly(culprits, max_rows);
  // Victims: at most half of what is left, so that peers and outliers remain visible. When
  // everyone else is a victim (synchronous training) this is a sample over all ranks.
  take_evenly(of_role(WorkerRole::kVictim), (max_rows - chosen.size()) / 2);
  // The slowest remaining workers: an unflagged outlier is worth a row.
  constexpr size_t kSlowest = 3;
  std::vector<size_t> by_time(workers_.size());
  for (size_t i = 0; i < by_time.size(); ++i) by_time[i] = i;
  const size_t k = std::min(by_time.size(), kSlowest + chosen.size());
  std::partial_sort(by_time.begin(), by_time.begin() + static_cast<std::ptrdiff_t>(k),
                    by_time.end(), [&](size_t a, size_t b) {
                      return workers_[a].median_iteration_ns > workers_[b].median_iteration_ns;
                    });
  size_t added = 0;
  for (size_t j = 0; j < k && added < kSlowest; ++j) {
    if (!taken[by_time[j]]) {
      take(by_time[j]);
      ++added;
    }
  }
  // An even sample over the remaining ranks.
  std::vector<size_t> rest;
  for (size_t i = 0; i < workers_.size(); ++i) {
    if (!taken[i]) rest.push_back(i);
  }
  take_evenly(rest, max_rows - chosen.size());
  return chosen;
}

double ReportModel::PerIterationNs(const WorkerSummary& worker, const std::string& key) {
  for (size_t i = 0; i < worker.functions.size(); ++i) {
    if (worker.KeyIs(i, key)) {
      return static_cast<double>(worker.functions[i].total_ns) /
             static_cast<double>(worker.iteration_count());
    }
  }
  return -1;
}

std::string ReportModel::VictimWait(const Finding& finding) const {
  if (finding.victims.empty() || workers_.empty()) return "";
  struct Acc {
    std::string name;
    double victims = 0;
    double culprits = 0;
  };
  std::unordered_map<std::string, Acc> acc;
  const auto add = [&](const std::vector<int32_t>& ranks, bool victim) -> size_t {
    size_t n = 0;
    for (int32_t r : ranks) {
      auto it = row_of_rank_.find(r);
      if (it == row_of_rank_.end()) continue;
      const WorkerSummary& w = *workers_[it->second].summary;
      ++n;
      for (size_t i = 0; i < w.functions.size(); ++i) {
        const FunctionSummary& f = w.functions[i];
        if (f.kind != EventKind::kCollective && f.kind != EventKind::kSync) continue;
        Acc& a = acc[w.Key(i)];
        if (a.name.empty()) a.name = f.name;
        const double per_iter =
            static_cast<double>(f.total_ns) / static_cast<double>(w.iteration_count());
        (victim ? a.victims : a.culprits) += per_iter;
      }
    }
    return n;
  };
  const size_t nv = add(finding.victims, true);
  const size_t nc = add(finding.workers, false);
  if (nv == 0) return "";
  const std::string* best = nullptr;
  const std::string* best_key = nullptr;
  double best_extra = 0;
  for (const auto& [key, a] : acc) {
    const double extra = a.victims / static_cast<double>(nv) -
                         (nc > 0 ? a.culprits / static_cast<double>(nc) : 0);
    // Ties broken by key so that the report does not depend on hash order.
    if (extra > best_extra || (best_key && extra == best_extra && key < *best_key)) {
      best_extra = extra;
      best = &a.name;
      best_key = &key;
    }
  }
  return best ? SanitizeText(*best) : "";
}

}  // namespace perftracker::report
