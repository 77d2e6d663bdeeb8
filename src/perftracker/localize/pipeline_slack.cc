#include "perftracker/localize/pipeline_slack.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <unordered_map>
#include <utility>

#include "perftracker/core/units.h"
#include "perftracker/localize/robust_stats.h"

namespace perftracker::localize {

namespace {

// Receive waits of one group's workers that differ by more than this share of the iteration
// belong to different pipeline stages (each stage waits a different time for its
// predecessor by design; within a stage the waits differ by noise).
constexpr double kStageGapShare = 0.025;

// Splits the workers of one (receive function, peer group) into stage bands by their wait
// (sorted `values`: (time, worker)), and returns each value's band median. A band smaller
// than half the median band size is no stage but workers that waited less than their own
// stage (the culprits this rule looks for, whose shortfall can exceed the gap): it is
// compared with the band above it.
void BandMedians(std::vector<std::pair<float, uint32_t>>& values, double gap,
                 std::vector<float>& median_of_worker) {
  std::sort(values.begin(), values.end());
  std::vector<size_t> starts{0};
  for (size_t i = 1; i < values.size(); ++i) {
    if (values[i].first - values[i - 1].first > gap) starts.push_back(i);
  }
  starts.push_back(values.size());
  const size_t bands = starts.size() - 1;
  std::vector<size_t> sizes;
  for (size_t b = 0; b < bands; ++b) sizes.push_back(starts[b + 1] - starts[b]);
  std::vector<size_t> sorted_sizes = sizes;
  std::sort(sorted_sizes.begin(), sorted_sizes.end());
  const size_t typical = sorted_sizes[bands / 2];
  auto is_stage = [&](size_t b) { return sizes[b] >= kMinPeers && 2 * sizes[b] >= typical; };
  std::vector<float> band_median(bands, -1);
  std::vector<float> scratch;
  for (size_t b = 0; b < bands; ++b) {
    if (!is_stage(b)) continue;
    scratch.clear();
    for (size_t i = starts[b]; i < starts[b + 1]; ++i) scratch.push_back(values[i].first);
    band_median[b] = static_cast<float>(MedianInPlace(scratch));
  }
  for (size_t b = 0; b < bands; ++b) {
    float m = band_median[b];
    for (size_t up = b + 1; m < 0 && up < bands; ++up) m = band_median[up];
    for (size_t down = b; m < 0 && down-- > 0;) m = band_median[down];
    for (size_t i = starts[b]; i < starts[b + 1]; ++i) median_of_worker[values[i].second] = m;
  }
}

}  // namespace

bool IsPointToPointReceive(std::string_view name) {
  return PointToPointOf(name) == PointToPoint::kReceive;
}

std::vector<float> ConsumedPipelineSlack(const RuleContext& ctx) {
  const JobTable& job = *ctx.job;
  const std::vector<WorkerRecord>& workers = job.workers();
  const std::vector<FunctionInfo>& functions = job.functions();
  std::vector<float> slack(workers.size(), 0);
  std::vector<uint32_t> receive_index(functions.size(), kNone);
  uint32_t receives = 0;
  for (size_t f = 0; f < functions.size(); ++f) {
    if (functions[f].outermost_wait && functions[f].kind == EventKind::kCollective &&
        functions[f].point_to_point == PointToPoint::kReceive) {
      receive_index[f] = receives++;
    }
  }
  if (receives == 0) return slack;
  const size_t groups = ctx.peers->members.size();
  // Per (receive function, peer group): (time, worker), then each worker's band median.
  std::vector<std::vector<std::pair<float, uint32_t>>> times(receives * groups);
  for (uint32_t w = 0; w < workers.size(); ++w) {
    const WorkerRecord& wr = workers[w];
    for (uint32_t k = 0; k < wr.num_records; ++k) {
      const FunctionRecord& r = job.records()[wr.first_record + k];
      if (receive_index[r.fid] == kNone) continue;
      times[receive_index[r.fid] * groups + ctx.peers->worker_group[w]].emplace_back(r.time_ns, w);
    }
  }
  std::vector<std::vector<float>> peer_median(receives);
  const double gap = kStageGapShare * ctx.iteration_ns;
  for (uint32_t i = 0; i < receives; ++i) {
    for (size_t g = 0; g < groups; ++g) {
      auto& v = times[i * groups + g];
      if (v.size() < kMinPeers) continue;
      if (peer_median[i].empty()) peer_median[i].assign(workers.size(), -1);
      BandMedians(v, gap, peer_median[i]);
    }
  }
  // Where the process groups say which stage a worker is in (its role: a stage's tensor- and
  // data-parallel groups hold only its ranks), a worker is compared with its own stage's
  // median instead of its band's: a worker that waits less than its stage by more than the
  // gap between two stages' waits is a band of its own, compared with the band above it,
  // another stage (a pause at the start of its iteration that its first receive waits out
  // whole: held-out rnd-s3-008, 155 ms absorbed, 41 ms by the bands). Roles with fewer than
  // kMinPeers workers keep their bands.
  const std::vector<uint32_t>& roles = ctx.peers->worker_role;
  if (!roles.empty()) {
    std::unordered_map<uint64_t, std::vector<float>> by_stage;  // (receive, group, role)
    auto key = [&](uint32_t i, uint32_t w) {
      return (static_cast<uint64_t>(i) * groups + ctx.peers->worker_group[w]) << 32 | roles[w];
    };
    for (uint32_t i = 0; i < receives; ++i) {
      if (peer_median[i].empty()) continue;
      for (size_t g = 0; g < groups; ++g) {
        for (const auto& [t, w] : times[i * groups + g]) by_stage[key(i, w)].push_back(t);
      }
    }
    std::unordered_map<uint64_t, float> stage_median;
    for (auto& [k, v] : by_stage) {
      if (v.size() >= kMinPeers) stage_median.emplace(k, static_cast<float>(MedianInPlace(v)));
    }
    for (uint32_t i = 0; i < receives; ++i) {
      for (size_t g = 0; g < groups && !peer_median[i].empty(); ++g) {
        for (const auto& [t, w] : times[i * groups + g]) {
          auto it = stage_median.find(key(i, w));
          if (it != stage_median.end()) peer_median[i][w] = it->second;
        }
      }
    }
  }
  for (uint32_t w = 0; w < workers.size(); ++w) {
    const WorkerRecord& wr = workers[w];
    double device = 0, host = 0;
    for (uint32_t k = 0; k < wr.num_records; ++k) {
      const FunctionRecord& r = job.records()[wr.first_record + k];
      const uint32_t i = receive_index[r.fid];
      if (i == kNone || peer_median[i].empty() || peer_median[i][w] < 0) continue;
      const double shorter = static_cast<double>(peer_median[i][w]) - r.time_ns;
      (functions[r.fid].on_device ? device : host) += shorter;
    }
    slack[w] = static_cast<float>(std::max({0.0, device, host}));
  }
  return slack;
}

void DiscountPipelineSlack(const RuleContext& ctx, std::vector<RenderedFinding>& all) {
  std::vector<float> slack;
  // A culprit's slack absorbs its excess once: its findings use it up largest first.
  std::vector<size_t> order;
  for (size_t i = 0; i < all.size(); ++i) {
    if (!all[i].culprits.empty()) order.push_back(i);
  }
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return all[a].finding.lost_ns_per_iteration > all[b].finding.lost_ns_per_iteration;
  });
  for (size_t i : order) {
    RenderedFinding& r = all[i];
    Finding& f = r.finding;
    if (slack.empty()) slack = ConsumedPipelineSlack(ctx);
    float absorbed = INFINITY;
    uint32_t least = r.culprits.front();
    for (uint32_t c : r.culprits) {
      if (slack[c] < absorbed) {
        absorbed = slack[c];
        least = c;
      }
    }
    absorbed = std::min(absorbed, static_cast<float>(f.lost_ns_per_iteration));
    for (uint32_t c : r.culprits) slack[c] -= absorbed;
    // The share of its loss in calls a later receive's wait followed (absorbed_share): the
    // stage waits as long for its predecessor either way.
    const auto followed = static_cast<float>(
        std::clamp(static_cast<double>(r.absorbed_share), 0.0, 1.0) * f.lost_ns_per_iteration);
    const bool by_receive_wait = followed > absorbed;
    absorbed = std::max(absorbed, followed);
    if (!f.material || absorbed < ctx.report_ns) continue;
    const double cost = f.lost_ns_per_iteration - absorbed;
    const std::string who = ctx.job->WorkerName(least);
    f.evidence.push_back(
        {std::string(kAbsorbedByPipelineEvidence),
         by_receive_wait
             ? fmt::format("{} of its calls' time was followed by a wait in the stage's next "
                           "point-to-point receive, before any send: that much of its extra "
                           "time ({}/iter) fell where its stage waits for another stage anyway",
                           FormatShare(r.absorbed_share), FormatDuration(absorbed))
             : fmt::format("{} waits {}/iter less than its peers in point-to-point receives: "
                           "that much of its extra time fell where its stage waits for another "
                           "stage anyway",
                           who, FormatDuration(absorbed))});
    f.evidence.push_back(
        {"cost to the job per iteration",
         fmt::format("{} ({} of the iteration): {} lost minus {} absorbed", FormatDuration(cost),
                     FormatShare(ctx.iteration_ns > 0 ? cost / ctx.iteration_ns : 0),
                     FormatDuration(f.lost_ns_per_iteration), FormatDuration(absorbed))});
    if (cost >= ctx.material_ns) continue;
    f.material = false;
    r.wants_victims = false;
    f.title = by_receive_wait
                  ? fmt::format(
                        "{}; absorbed by the pipeline: its stage's next receive waits out {}/iter "
                        "of it, so the job loses {}/iter",
                        f.title, FormatDuration(absorbed), FormatDuration(cost))
                  : fmt::format(
                        "{}; absorbed by the pipeline: {} waits {}/iter less for another stage, "
                        "so the job loses {}/iter",
                        f.title, who, FormatDuration(absorbed), FormatDuration(cost));
  }
}

}  // namespace perftracker::localize
