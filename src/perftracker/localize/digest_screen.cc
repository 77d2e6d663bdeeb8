#include "perftracker/localize/digest_screen.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <unordered_map>
#include <utility>

#include "perftracker/localize/robust_stats.h"

namespace perftracker {
namespace {

// A function takes part in a worker's peer signature from this share of its iteration.
constexpr double kSignatureShare = 0.10;
// Robust scale floors, as the localizer's peer comparison: 1 % of the median, 1 us.
constexpr double kRelativeScaleFloor = 0.01;
constexpr double kTimeScaleFloorNs = 1000;
constexpr double kMetricScaleFloor = 1e-9;
constexpr size_t kBreakdownParts = 5;
// Smaller groups are not screened (their robust statistics mean little); they are sampled
// like every group, at least kMinSampledPerGroup of each.
constexpr size_t kMinScreenedGroup = 8;
constexpr size_t kMinSampledPerGroup = 3;
// At fleet size a feature's median and MAD come from every k-th worker, at most this many
// (their sampling error, ~1 % of the scale at 8,192, is far inside the suspect thresholds'
// margins); every worker is then tested against them. Exact below that.
constexpr size_t kMaxCenterSample = 8192;
// Each round of Refine multiplies the suspect thresholds by this (and doubles the sample).
constexpr double kRefineLoosening = 0.75;

struct FunctionFeatures {
  uint64_t hash = 0;
  float total = 0;  // per iteration
  float self = 0;
  float critical = 0;
  float count = 0;
};

static_assert(kNumMetrics <= 256, "MetricFeatures::metric is one byte");

struct MetricFeatures {
  uint8_t metric = 0;
  float mean = 0;
  float stddev = 0;
};

struct WorkerFeatures {
  int32_t rank = -1;
  uint64_t signature = 0;
  float median_iteration = 0;
  float breakdown[kBreakdownParts] = {};  // per iteration
  std::vector<FunctionFeatures> functions;
  std::vector<MetricFeatures> metrics;
  // The digest's (kMaxDigestFunctions / 2)-th largest time per iteration: every function
  // above it is in the digest (they are picked by time first).
  float total_cutoff = 0;
};

uint64_t Mix(uint64_t h, uint64_t v) {
  h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
  return h;
}

}  // namespace

class DigestScreen::Impl {
 public:
  explicit Impl(DigestScreenOptions options) : options_(options) {}

  void Add(const WorkerDigest& d) {
    WorkerFeatures w;
    w.rank = d.rank;
    w.median_iteration = static_cast<float>(d.median_iteration_ns());
    const double shown = d.iterations.empty() ? 1.0 : static_cast<double>(d.iterations.size());
    for (const IterationSummary& it : d.iterations) {
      const int64_t parts[kBreakdownParts] = {it.compute_ns, it.communication_ns, it.wait_ns,
                                              it.data_ns, it.host_only_ns};
      for (size_t p = 0; p < kBreakdownParts; ++p)
        w.breakdown[p] += static_cast<float>(static_cast<double>(parts[p]) / shown);
    }
    const double iters = static_cast<double>(d.iteration_count());
    std::vector<uint64_t> signature;
    for (const DigestFunction& f : d.functions) {
      FunctionFeatures ff;
      ff.hash = f.key_hash;
      ff.total = static_cast<float>(static_cast<double>(f.total_ns) / iters);
      ff.self = static_cast<float>(static_cast<double>(f.self_ns) / iters);
      ff.critical = static_cast<float>(static_cast<double>(f.critical_ns) / iters);
      ff.count = static_cast<float>(static_cast<double>(f.count) / iters);
      w.functions.push_back(ff);
      if (ff.total >= kSignatureShare * w.median_iteration) signature.push_back(f.key_hash);
    }
    std::vector<float> totals;
    for (const FunctionFeatures& f : w.functions) totals.push_back(f.total);
    std::sort(totals.begin(), totals.end(), std::greater<float>());
    const size_t by_time = kMaxDigestFunctions / 2;
    w.total_cutoff = totals.size() >= by_time ? totals[by_time - 1] : 0;
    std::sort(signature.begin(), signature.end());
    signature.erase(std::unique(signature.begin(), signature.end()), signature.end());
    for (uint64_t h : signature) w.signature = Mix(w.signature, h);
    // One per metric id in id order (the digest's order; ScreenPeers walks them so).
    for (const FunctionMetric& m : d.worker_metrics) {
      if (static_cast<int>(m.metric) >= kNumMetrics) continue;
      w.metrics.push_back({static_cast<uint8_t>(m.metric), static_cast<float>(m.mean),
                           static_cast<float>(m.stddev)});
    }
    std::stable_sort(
        w.metrics.begin(), w.metrics.end(),
        [](const MetricFeatures& a, const MetricFeatures& b) { return a.metric < b.metric; });
    w.metrics.erase(std::unique(w.metrics.begin(), w.metrics.end(),
                                [](const MetricFeatures& a, const MetricFeatures& b) {
                                  return a.metric == b.metric;
                                }),
                    w.metrics.end());
    w.metrics.shrink_to_fit();
    workers_.push_back(std::move(w));
  }

  ScreenResult Finish() { return Decide(options_, {}, {}, 0); }
  ScreenResult Refine(const ScreenResult& previous, const std::vector<int32_t>& named, int round);

 private:
  // Steps 2-4 with `options`; the workers of `forced` are suspects whatever their digests,
  // those of `keep` (ascending) are asked whatever the sample.
  ScreenResult Decide(const DigestScreenOptions& options, const std::vector<int32_t>& forced,
                      const std::vector<int32_t>& keep, int round);

  // Marks the workers (indices into workers_) whose value is a two-sided robust outlier.
  void FlagOutliers(const std::vector<std::pair<size_t, float>>& values, double scale_floor,
                    double effect_floor) {
    const DigestScreenOptions& options = *current_;
    if (values.size() < 3) return;
    const size_t n = values.size();
    const size_t step = n > kMaxCenterSample ? (n + kMaxCenterSample - 1) / kMaxCenterSample : 1;
    std::vector<float> v;
    v.reserve(n / step + 1);
    for (size_t j = 0; j < n; j += step) v.push_back(values[j].second);
    const RobustCenter c = MedianAndMadInPlace(v);
    const double scale = RobustScale(c, kRelativeScaleFloor, scale_floor);
    for (const auto& [i, x] : values) {
      const double dev = std::abs(static_cast<double>(x) - c.median);
      if (dev > options.suspect_z * scale && dev > options.suspect_relative * std::abs(c.median) &&
          dev >= effect_floor) {
        suspect_[i] = true;
      }
    }
  }

  void ScreenPeers(const std::vector<size_t>& group, double report_ns);

  DigestScreenOptions options_;
  const DigestScreenOptions* current_ = &options_;  // the options of this Decide
  std::vector<WorkerFeatures> workers_;
  std::vector<bool> suspect_;
};

void DigestScreen::Impl::ScreenPeers(const std::vector<size_t>& group, double report_ns) {
  std::vector<std::pair<size_t, float>> values;
  values.reserve(group.size());
  const auto flag = [&](auto get, double scale_floor, double effect_floor) {
    values.clear();
    for (size_t i : group) values.emplace_back(i, get(workers_[i]));
    FlagOutliers(values, scale_floor, effect_floor);
  };
  flag([](const WorkerFeatures& w) { return w.median_iteration; }, kTimeScaleFloorNs, report_ns);
  for (size_t p = 0; p < kBreakdownParts; ++p) {
    flag([p](const WorkerFeatures& w) { return w.breakdown[p]; }, kTimeScaleFloorNs, report_ns);
  }
  // Functions: hash -> (worker, its features).
  std::unordered_map<uint64_t, std::vector<std::pair<size_t, const FunctionFeatures*>>> by_hash;
  for (size_t i : group) {
    for (const FunctionFeatures& f : workers_[i].functions) by_hash[f.hash].emplace_back(i, &f);
  }
  // A function in the digests of a minority: a function of their own when it takes more
  // time than the majority's digests leave out (their (K/2)-th largest time, with a margin
  // for noise); otherwise it merely missed some digests' cut.
  std::vector<float> cutoffs;
  for (size_t i : group) cutoffs.push_back(workers_[i].total_cutoff);
  const double cutoff = MedianInPlace(cutoffs) * (1 + current_->suspect_relative);
  for (const auto& [hash, present] : by_hash) {
    if (present.size() * 2 < group.size()) {
      for (const auto& [i, f] : present) {
        if (f->total >= report_ns && f->total > cutoff) suspect_[i] = true;
      }
      continue;
    }
    const auto flag_fn = [&](auto get, double scale_floor, double effect_floor) {
      values.clear();
      for (const auto& [i, f] : present) values.emplace_back(i, get(*f));
      FlagOutliers(values, scale_floor, effect_floor);
    };
    flag_fn([](const FunctionFeatures& f) { return f.total; }, kTimeScaleFloorNs, report_ns);
    flag_fn([](const FunctionFeatures& f) { return f.self; }, kTimeScaleFloorNs, report_ns);
    flag_fn([](const FunctionFeatures& f) { return f.critical; }, kTimeScaleFloorNs, report_ns);
    flag_fn([](const FunctionFeatures& f) { return f.count; }, kMetricScaleFloor, 0);
  }
  // Worker-level metrics, one id at a time (each worker's in id order, a cursor each): the
  // level and the fluctuation of the workers that have it. Nothing per worker and metric is
  // held beyond `values` (at 100,000 workers of 31 metrics an index of them would be 50 MB).
  std::vector<uint8_t> cursor(group.size(), 0);
  for (int metric = 0; metric < kNumMetrics; ++metric) {
    for (int part = 0; part < 2; ++part) {
      values.clear();
      for (size_t j = 0; j < group.size(); ++j) {
        const std::vector<MetricFeatures>& ms = workers_[group[j]].metrics;
        if (size_t{cursor[j]} >= ms.size() || ms[cursor[j]].metric != metric) continue;
        const MetricFeatures& m = ms[cursor[j]];
        values.emplace_back(group[j], part == 0 ? m.mean : m.stddev);
        if (part == 1) ++cursor[j];
      }
      FlagOutliers(values, kMetricScaleFloor, 0);
    }
  }
}

ScreenResult DigestScreen::Impl::Refine(const ScreenResult& previous,
                                        const std::vector<int32_t>& named, int round) {
  DigestScreenOptions options = options_;
  const double loosen = std::pow(kRefineLoosening, round);
  options.suspect_z *= loosen;
  options.suspect_relative *= loosen;
  options.sample_workers <<= round;
  std::vector<int32_t> forced = previous.suspects;
  forced.insert(forced.end(), named.begin(), named.end());
  std::sort(forced.begin(), forced.end());
  forced.erase(std::unique(forced.begin(), forced.end()), forced.end());
  return Decide(options, forced, previous.ranks, round);
}

ScreenResult DigestScreen::Impl::Decide(const DigestScreenOptions& options,
                                        const std::vector<int32_t>& forced,
                                        const std::vector<int32_t>& keep, int round) {
  current_ = &options;
  ScreenResult r;
  r.round = round;
  r.workers = workers_.size();
  suspect_.assign(workers_.size(), false);
  const auto in = [](const std::vector<int32_t>& sorted, int32_t rank) {
    return std::binary_search(sorted.begin(), sorted.end(), rank);
  };
  std::vector<float> iters;
  for (const WorkerFeatures& w : workers_) {
    if (w.median_iteration > 0) iters.push_back(w.median_iteration);
  }
  const double job_iteration = MedianInPlace(iters);
  const double report_ns = options.report_share * job_iteration;

  std::map<uint64_t, std::vector<size_t>> groups;
  for (size_t i = 0; i < workers_.size(); ++i) groups[workers_[i].signature].push_back(i);
  for (const auto& [signature, members] : groups) {
    if (members.size() >= kMinScreenedGroup) ScreenPeers(members, report_ns);
  }
  current_ = &options_;
  for (size_t i = 0; i < workers_.size(); ++i) {
    if (!forced.empty() && in(forced, workers_[i].rank)) suspect_[i] = true;
  }
  size_t suspects = 0;
  for (size_t i = 0; i < workers_.size(); ++i) {
    if (!suspect_[i]) continue;
    ++suspects;
    r.suspects.push_back(workers_[i].rank);
  }
  std::sort(r.suspects.begin(), r.suspects.end());
  const size_t suspect_budget = std::max(
      options.min_suspects,
      static_cast<size_t>(options.max_suspect_share * static_cast<double>(workers_.size())));
  const auto all_ranks = [&] {
    r.ranks.clear();
    r.groups.clear();
    for (const WorkerFeatures& w : workers_) r.ranks.push_back(w.rank);
    std::sort(r.ranks.begin(), r.ranks.end());
    r.ranks.erase(std::unique(r.ranks.begin(), r.ranks.end()), r.ranks.end());
  };
  if (suspects > suspect_budget) {
    r.full = true;
    r.reason = fmt::format(
        "the digests flag {} of {} workers, more than the {} a sample can be compared with",
        suspects, workers_.size(), suspect_budget);
    all_ranks();
    return r;
  }
  // One sampling rate for every group, its suspects counted in (see the header comment,
  // step 3): groups of one size are asked in equal numbers, so a function that runs on half
  // of the job's workers runs on half of those asked. The rate leaves every group at least
  // 4 of its own peers per suspect.
  std::map<uint64_t, size_t> group_suspects;
  double rate = static_cast<double>(options.sample_workers) /
                static_cast<double>(std::max<size_t>(workers_.size(), 1));
  for (const auto& [signature, members] : groups) {
    size_t n = 0;
    for (size_t i : members) n += suspect_[i] ? 1 : 0;
    group_suspects[signature] = n;
    rate = std::max(rate, static_cast<double>(5 * n) / static_cast<double>(members.size()));
  }
  rate = std::min(rate, 1.0);
  std::vector<bool> asked(workers_.size(), false);
  for (const auto& [signature, members] : groups) {
    std::vector<size_t> others;
    for (size_t i : members) {
      if (suspect_[i]) {
        asked[i] = true;
      } else {
        others.push_back(i);
      }
    }
    std::sort(others.begin(), others.end(),
              [&](size_t a, size_t b) { return workers_[a].rank < workers_[b].rank; });
    const size_t quota =
        std::max(kMinSampledPerGroup,
                 static_cast<size_t>(std::ceil(rate * static_cast<double>(members.size()))));
    const size_t taken = group_suspects[signature];
    size_t k = std::min(others.size(), quota > taken ? quota - taken : 0);
    ScreenGroup g;
    std::vector<bool> picked(others.size(), false);
    // A later round keeps the peers asked before (their summaries are in), and samples the
    // rest of its quota evenly among the others.
    std::vector<size_t> free;
    for (size_t j = 0; j < others.size(); ++j) {
      if (!keep.empty() && in(keep, workers_[others[j]].rank)) {
        picked[j] = true;
        k -= std::min<size_t>(k, 1);
      } else {
        free.push_back(j);
      }
    }
    // Evenly over the ranks: k picks at (j + 0.5) * n / k.
    k = std::min(k, free.size());
    for (size_t j = 0; j < k; ++j) picked[free[(2 * j + 1) * free.size() / (2 * k)]] = true;
    for (size_t j = 0; j < others.size(); ++j) {
      const int32_t rank = workers_[others[j]].rank;
      if (picked[j]) {
        asked[others[j]] = true;
        g.sampled.push_back(rank);
      } else {
        g.not_asked.push_back(rank);
      }
    }
    r.groups.push_back(std::move(g));
  }
  for (size_t i = 0; i < workers_.size(); ++i) {
    if (asked[i]) r.ranks.push_back(workers_[i].rank);
  }
  std::sort(r.ranks.begin(), r.ranks.end());
  r.ranks.erase(std::unique(r.ranks.begin(), r.ranks.end()), r.ranks.end());
  if (static_cast<double>(r.ranks.size()) >=
      options.max_request_share * static_cast<double>(workers_.size())) {
    r.full = true;
    r.reason = fmt::format(
        "the {} suspect(s) and the peers to compare them with are {} of {} workers: every full "
        "summary is asked for",
        suspects, r.ranks.size(), workers_.size());
    all_ranks();
    return r;
  }
  r.reason = fmt::format(
      "{} digests screened in {} peer group(s): {} suspect(s); the full summaries of {} "
      "workers (the suspects and a sample of their peers)",
      workers_.size(), groups.size(), suspects, r.ranks.size());
  if (round > 0) {
    r.reason += fmt::format(
        "; round {}: the workers a finding named in a group's sample became suspects, the "
        "screen {:.2g}x looser and the sample {}x larger",
        round, std::pow(kRefineLoosening, round), 1 << round);
  }
  return r;
}

DigestScreen::DigestScreen(DigestScreenOptions options) : impl_(std::make_unique<Impl>(options)) {}
DigestScreen::~DigestScreen() = default;
void DigestScreen::Add(const WorkerDigest& digest) { impl_->Add(digest); }
ScreenResult DigestScreen::Finish() { return impl_->Finish(); }
ScreenResult DigestScreen::Refine(const ScreenResult& previous, const std::vector<int32_t>& named,
                                  int round) {
  return impl_->Refine(previous, named, round);
}

}  // namespace perftracker

namespace perftracker {
namespace {

// kWhole: the finding names every sampled peer of the group; kNone: none; kPart: some.
enum class Coverage : uint8_t { kNone, kWhole, kPart };

Coverage CoverageOf(const std::vector<int32_t>& named_sorted, const ScreenGroup& g) {
  size_t named = 0;
  for (int32_t r : g.sampled) {
    if (std::binary_search(named_sorted.begin(), named_sorted.end(), r)) ++named;
  }
  if (named == 0) return Coverage::kNone;
  return named == g.sampled.size() ? Coverage::kWhole : Coverage::kPart;
}

}  // namespace

bool GeneralizeToGroups(const ScreenResult& screen, Diagnosis* diagnosis,
                        std::vector<int32_t>* named_in_sample) {
  if (screen.full) {
    diagnosis->notes.push_back("progressive disclosure: full path: " + screen.reason);
    return true;
  }
  std::vector<std::vector<int32_t>> workers(diagnosis->findings.size());
  std::vector<std::vector<int32_t>> victims(diagnosis->findings.size());
  bool cannot_decide = false;
  for (size_t f = 0; f < diagnosis->findings.size(); ++f) {
    const Finding& finding = diagnosis->findings[f];
    std::vector<int32_t> named = finding.workers;
    std::sort(named.begin(), named.end());
    std::vector<int32_t> named_victims = finding.victims;
    std::sort(named_victims.begin(), named_victims.end());
    workers[f] = named;
    victims[f] = named_victims;
    if (named.empty()) continue;  // every worker
    for (const ScreenGroup& g : screen.groups) {
      if (g.not_asked.empty()) continue;
      switch (CoverageOf(named, g)) {
        case Coverage::kNone:
          break;
        case Coverage::kWhole:
          workers[f].insert(workers[f].end(), g.not_asked.begin(), g.not_asked.end());
          break;
        case Coverage::kPart:
          if (named_in_sample != nullptr) {
            for (int32_t r : g.sampled) {
              if (std::binary_search(named.begin(), named.end(), r)) {
                named_in_sample->push_back(r);
              }
            }
          }
          cannot_decide = true;
          continue;
      }
      if (CoverageOf(named_victims, g) == Coverage::kWhole) {
        victims[f].insert(victims[f].end(), g.not_asked.begin(), g.not_asked.end());
      }
    }
  }
  if (cannot_decide) {
    if (named_in_sample != nullptr) {
      std::sort(named_in_sample->begin(), named_in_sample->end());
      named_in_sample->erase(std::unique(named_in_sample->begin(), named_in_sample->end()),
                             named_in_sample->end());
    }
    return false;
  }
  for (size_t f = 0; f < diagnosis->findings.size(); ++f) {
    Finding& finding = diagnosis->findings[f];
    if (workers[f].size() != finding.workers.size()) {
      std::sort(workers[f].begin(), workers[f].end());
      finding.workers = std::move(workers[f]);
    }
    if (victims[f].size() != finding.victims.size()) {
      std::sort(victims[f].begin(), victims[f].end());
      finding.victims = std::move(victims[f]);
    }
  }
  diagnosis->num_workers = static_cast<int32_t>(screen.workers);
  diagnosis->notes.push_back("progressive disclosure: digest path: " + screen.reason);
  return true;
}

}  // namespace perftracker
