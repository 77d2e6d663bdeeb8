#include "perftracker/compare/run_comparer.h"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <cstdint>
#include <map>
#include <string>
#include <unordered_map>
#include <unordered_set>

#include <fmt/core.h>
#include <fmt/format.h>

#include "perftracker/core/point_to_point.h"
#include "perftracker/core/units.h"

namespace perftracker::compare {
namespace {

// Below this share of the baseline's time in functions the current run also has, the
// comparison says that the code changed (a Python frame's line number moves with any edit).
constexpr double kLowOverlap = 0.5;
// Functions whose self time is below this share of the iteration in both runs do not vote on
// the shared scale: their ratio is mostly noise.
constexpr double kSharedMinShare = 0.01;
// At most this many changes per direction are listed; the rest are counted in a note.
constexpr size_t kMaxChanges = 50;

std::string RankList(const std::vector<int32_t>& ranks) {
  std::string s;
  size_t shown = 0;
  for (int32_t r : ranks) {
    if (shown == 8) {
      s += fmt::format(", … ({} ranks)", ranks.size());
      break;
    }
    if (!s.empty()) s += ", ";
    s += std::to_string(r);
    ++shown;
  }
  return s.empty() ? "none" : s;
}

// The noise of a worker's mean iteration time over its window: spread / sqrt(iterations).
double StandardError(const ProfileWorker& w) {
  return w.iteration_spread_ns / std::sqrt(static_cast<double>(std::max<size_t>(1, w.iterations)));
}

// The bar of a change `current - scale x baseline` on one rank (see the header): the
// material share of the baseline's iteration and the noise of both runs' mean iteration,
// the baseline's as it is multiplied, both in the current run's terms.
double Bar(const CompareOptions& options, const ProfileWorker& b, const ProfileWorker& c,
           double scale) {
  return std::max(options.material_share * scale * b.median_iteration_ns,
                  options.noise_sigmas * std::hypot(scale * StandardError(b), StandardError(c)));
}

// A frame whose time is a wait for the other ranks: a collective, a synchronization, a torch
// communication operator (c10d::, record_param_comms, ...).
bool IsWait(const CallPathTree& tree, uint32_t node) {
  const std::string& kind = tree.kind(node);
  return kind == "collective" || kind == "sync" ||
         (kind == "torch_op" && IsTorchCommunicationOp(tree.name(node)));
}

// True when `node` is a wait or lies inside one.
bool InsideWait(const CallPathTree& tree, uint32_t node) {
  for (uint32_t n = node; n != CallPathTree::kRoot; n = tree.parent(n)) {
    if (IsWait(tree, n)) return true;
  }
  return false;
}

bool IsAnnotation(const std::string& kind) { return kind == "annotation"; }
bool IsUserLevel(const std::string& kind) {
  return kind == "python" || kind == "data_load" || kind == "optimizer_step";
}

struct MaterialRanks {
  std::vector<int32_t> ranks;
  std::vector<size_t> pairs;   // as the ranks: their RankPair's index
  std::vector<double> deltas;  // signed, as the ranks
  double size = 0;             // median |delta|
};

// The pair of workers of one rank in both runs.
struct RankPair {
  const ProfileWorker* baseline = nullptr;
  const ProfileWorker* current = nullptr;
  double bar_ns = 0;
  // The factor this rank's functions are measured beyond: current - scale x baseline (the
  // shared factor, times this rank's own load against the median rank's; see Compare()).
  double scale = 1;
};

const FunctionTimes* Find(const ProfileWorker& w, uint32_t node) {
  auto it = w.functions.find(node);
  return it == w.functions.end() ? nullptr : &it->second;
}

class Walker {
 public:
  Walker(const CallPathTree& tree, const std::vector<RankPair>& pairs, double baseline_iteration_ns)
      : tree_(tree), pairs_(pairs), baseline_iteration_ns_(baseline_iteration_ns) {
    for (int side = 0; side < 2; ++side) SetAsideWaits(side);
    CreditUnstretchedWaits();
  }

  // The changes in one direction, largest first; `dropped` counts those beyond kMaxChanges.
  std::vector<FunctionChange> Changes(ChangeDirection direction, size_t* dropped) {
    const double sign = direction == ChangeDirection::kSlower ? 1 : -1;
    std::unordered_map<uint32_t, MaterialRanks> material;
    for (const RankPair& p : pairs_) {
      const size_t pair = static_cast<size_t>(&p - pairs_.data());
      auto visit = [&](uint32_t node) {
        const double delta = Delta(pair, node);
        if (sign * delta < p.bar_ns) return;
        MaterialRanks& m = material[node];
        m.ranks.push_back(p.baseline->rank);
        m.pairs.push_back(pair);
        m.deltas.push_back(delta);
      };
      for (const auto& [node, t] : p.baseline->functions) visit(node);
      for (const auto& [node, t] : p.current->functions) {
        if (p.baseline->functions.count(node) == 0) visit(node);
      }
    }
    KeepChangesThatAreNotTheirPeersScatter(sign, &material);
    for (auto& [node, m] : material) {
      std::vector<double> abs;
      for (double d : m.deltas) abs.push_back(std::fabs(d));
      m.size = Median(std::move(abs));
    }

    std::unordered_set<uint32_t> consumed;
    // The nearest unconsumed material node above `node`, or kRoot.
    auto nearest = [&](uint32_t node) {
      for (uint32_t n = tree_.parent(node); n != CallPathTree::kRoot; n = tree_.parent(n)) {
        if (material.count(n) != 0 && consumed.count(n) == 0) return n;
      }
      return static_cast<uint32_t>(CallPathTree::kRoot);
    };
    auto larger = [&](uint32_t a, uint32_t b) {
      const double sa = material.at(a).size;
      const double sb = material.at(b).size;
      return sa != sb ? sa > sb : a < b;  // ties by node: deterministic
    };

    std::vector<FunctionChange> changes;
    while (consumed.size() < material.size()) {
      uint32_t root = CallPathTree::kRoot;
      for (const auto& [node, m] : material) {
        if (consumed.count(node) != 0 || nearest(node) != CallPathTree::kRoot) continue;
        if (root == CallPathTree::kRoot || larger(node, root)) root = node;
      }
      assert(root != CallPathTree::kRoot);
      std::vector<uint32_t> path{root};
      while (true) {
        const uint32_t cur = path.back();
        uint32_t best = CallPathTree::kRoot;
        for (const auto& [node, m] : material) {
          if (consumed.count(node) != 0 || node == cur || nearest(node) != cur) continue;
          if (best == CallPathTree::kRoot || larger(node, best)) best = node;
        }
        if (best == CallPathTree::kRoot ||
            material.at(best).size < kExplainsMost * material.at(cur).size) {
          break;
        }
        path.push_back(best);
      }
      size_t named_pos = 0;
      bool annotated = false;
      for (size_t i = 0; i < path.size(); ++i) {
        const std::string& kind = tree_.kind(path[i]);
        if (IsAnnotation(kind)) {
          named_pos = i;
          annotated = true;
        } else if (!annotated && IsUserLevel(kind)) {
          named_pos = i;
        }
      }
      // A change in a wait is the communication's: named by the outermost wait on the path.
      for (size_t i = 0; i < path.size(); ++i) {
        if (IsWait(tree_, path[i])) {
          named_pos = i;
          break;
        }
      }
      const uint32_t named = path[named_pos];
      changes.push_back(Change(direction, named, path.back(), material.at(named)));
      for (uint32_t n : path) consumed.insert(n);
      for (const auto& [node, m] : material) {
        if (tree_.IsAncestor(named, node)) consumed.insert(node);
      }
    }
    std::sort(changes.begin(), changes.end(), [](const FunctionChange& a, const FunctionChange& b) {
      return std::fabs(a.delta_ns) > std::fabs(b.delta_ns);
    });
    *dropped = changes.size() > kMaxChanges ? changes.size() - kMaxChanges : 0;
    if (changes.size() > kMaxChanges) changes.resize(kMaxChanges);
    return changes;
  }

 private:
  // A function whose delta passes its bar on some ranks is a change there only when it is
  // one the job shares or one those ranks do not share with the others: the median delta
  // over all ranks passes the median bar (the job's change: every rank that passes is named),
  // or the rank's delta passes its bar beyond the median of the other ranks' (that rank's
  // change). Otherwise the ranks that pass are the high end of a change every rank made and
  // that is within the noise: two healthy runs, the second beside two busy loops (a
  // clean-clone CI run at db5fb34), aten::mm +8.2, +8.1, +10.1 ms per iteration on ranks
  // 0-2 beyond the shared factor, the bar 9.1 ms: "aten::mm is slower on rank 2".
  void KeepChangesThatAreNotTheirPeersScatter(
      double sign, std::unordered_map<uint32_t, MaterialRanks>* material) {
    std::vector<double> bars;
    for (const RankPair& p : pairs_) bars.push_back(p.bar_ns);
    const double median_bar = Median(std::move(bars));
    std::vector<double> all(pairs_.size());
    std::vector<size_t> order(pairs_.size());
    std::vector<size_t> position(pairs_.size());  // pair -> its place in `sorted`
    std::vector<double> sorted(pairs_.size());
    for (auto it = material->begin(); it != material->end();) {
      MaterialRanks& m = it->second;
      for (size_t i = 0; i < pairs_.size(); ++i) all[i] = sign * Delta(i, it->first);
      for (size_t i = 0; i < order.size(); ++i) order[i] = i;
      std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return all[a] < all[b]; });
      for (size_t k = 0; k < order.size(); ++k) {
        sorted[k] = all[order[k]];
        position[order[k]] = k;
      }
      const bool shared = MedianOf(sorted, sorted.size()) >= median_bar;
      MaterialRanks kept;
      for (size_t j = 0; j < m.ranks.size(); ++j) {
        bool keep = shared;
        if (!keep) {
          const size_t pair = m.pairs[j];
          keep = all[pair] - MedianOf(sorted, position[pair]) >= pairs_[pair].bar_ns;
        }
        if (keep) {
          kept.ranks.push_back(m.ranks[j]);
          kept.pairs.push_back(m.pairs[j]);
          kept.deltas.push_back(m.deltas[j]);
        }
      }
      if (kept.ranks.empty()) {
        it = material->erase(it);
      } else {
        m = std::move(kept);
        ++it;
      }
    }
  }

  // The median of `sorted` without its element at `skip` (none when skip == size()).
  static double MedianOf(const std::vector<double>& sorted, size_t skip) {
    const size_t n = skip < sorted.size() ? sorted.size() - 1 : sorted.size();
    if (n == 0) return 0;
    auto at = [&](size_t k) { return sorted[k < skip ? k : k + 1]; };
    return n % 2 == 1 ? at(n / 2) : (at(n / 2 - 1) + at(n / 2)) / 2;
  }

  FunctionChange Change(ChangeDirection direction, uint32_t named, uint32_t leaf,
                        const MaterialRanks& m) const {
    FunctionChange c;
    c.direction = direction;
    c.function = tree_.name(named);
    c.function_key = tree_.Key(named);
    c.kind = tree_.kind(named);
    if (leaf != named) c.time_goes_into = tree_.name(leaf);
    c.workers = m.ranks;
    std::sort(c.workers.begin(), c.workers.end());
    std::vector<double> base;
    std::vector<double> cur;
    for (size_t i = 0; i < pairs_.size(); ++i) {
      const RankPair& p = pairs_[i];
      RankChange r;
      r.rank = p.baseline->rank;
      r.baseline_ns = Time(0, i, named);
      r.current_ns = Time(1, i, named);
      r.delta_ns = Delta(i, named);
      r.material = std::binary_search(c.workers.begin(), c.workers.end(), r.rank);
      if (r.material) {
        base.push_back(r.baseline_ns);
        cur.push_back(r.current_ns);
      }
      c.ranks.push_back(r);
    }
    c.baseline_ns = Median(std::move(base));
    c.current_ns = Median(std::move(cur));
    c.delta_ns = Median(m.deltas);
    c.delta_share = baseline_iteration_ns_ > 0 ? std::fabs(c.delta_ns) / baseline_iteration_ns_ : 0;
    return c;
  }

  // Waits (see the header): a wait's time on a rank is its own part, which every rank
  // spends, plus the time it waits for slower ranks. Only the first is the wait's; the rest
  // moves between ranks from run to run (which rank arrives last) and belongs to whatever
  // made the others late. So every wait frame counts as its minimum over the ranks, in each
  // run, and its callers lose the excess: Time() of a wait (or a frame inside one) is that
  // minimum, of any other frame its inclusive time minus the excess of the waits below it.
  void SetAsideWaits(int side) {
    auto worker = [&](const RankPair& p) -> const ProfileWorker& {
      return side == 0 ? *p.baseline : *p.current;
    };
    std::unordered_map<uint32_t, bool> inside_wait;  // node -> is or lies inside a wait
    auto in_wait = [&](uint32_t node) {
      auto it = inside_wait.find(node);
      if (it != inside_wait.end()) return it->second;
      bool w = false;
      for (uint32_t n = node; n != CallPathTree::kRoot && !w; n = tree_.parent(n)) {
        w = IsWait(tree_, n);
      }
      inside_wait.emplace(node, w);
      return w;
    };
    std::unordered_map<uint32_t, double>& minimum = wait_minimum_[side];
    for (const RankPair& p : pairs_) {
      for (const auto& [node, t] : worker(p).functions) {
        if (!in_wait(node)) continue;
        auto [it, inserted] = minimum.emplace(node, t.inclusive_ns);
        if (!inserted) it->second = std::min(it->second, t.inclusive_ns);
      }
    }
    // A rank without the frame spent nothing in it: the minimum is 0.
    for (auto& [node, m] : minimum) {
      for (const RankPair& p : pairs_) {
        if (worker(p).functions.count(node) == 0) m = 0;
      }
    }
    excess_[side].resize(pairs_.size());
    for (size_t i = 0; i < pairs_.size(); ++i) {
      for (const auto& [node, t] : worker(pairs_[i]).functions) {
        // The outermost wait frames only: a wait inside a wait is part of it.
        if (!IsWait(tree_, node) || in_wait(tree_.parent(node))) continue;
        const double e = t.inclusive_ns - minimum.at(node);
        if (e <= 0) continue;
        for (uint32_t n = tree_.parent(node); n != CallPathTree::kRoot; n = tree_.parent(n)) {
          excess_[side][i][n] += e;
        }
      }
    }
  }

  // The time per iteration of `node` on pair `pair`'s rank in run `side` (0 baseline, 1
  // current), waits set aside.
  // The change of `node` on one rank: current - scale x baseline. A wait (or a frame inside
  // one) is not CPU work: the shared factor of a busier (or quieter) machine may stretch it,
  // or not at all (its transfer and its waiting for the others keep their time), so its
  // change is only what lies outside [baseline, scale x baseline]. Seen: two healthy runs,
  // the second beside two busy loops (factor x1.38, explained by the load): gloo:all_reduce
  // 17.0 -> 13.5 ms, "-10.0 ms faster" against 1.38 x 17.0, material on two ranks.
  double Delta(size_t pair, uint32_t node) const {
    const double b = Time(0, pair, node);
    const double c = Time(1, pair, node);
    const double scale = pairs_[pair].scale;
    if (scale == 1) return c - b;
    if (InsideWait(tree_, node)) return WaitDelta(b, c, scale);
    // A caller of waits: its own work scaled, its waits as above.
    auto w = wait_credit_[pair].find(node);
    return c - scale * b - (w == wait_credit_[pair].end() ? 0.0 : w->second);
  }

  static double WaitDelta(double b, double c, double scale) {
    const double lo = std::min(b, scale * b);
    const double hi = std::max(b, scale * b);
    return c > hi ? c - hi : (c < lo ? c - lo : 0.0);
  }

  // For every caller of an outermost wait, per rank: what `c - scale x b` of its waits says
  // beyond WaitDelta of them (the part the factor may not stretch).
  void CreditUnstretchedWaits() {
    wait_credit_.resize(pairs_.size());
    for (size_t i = 0; i < pairs_.size(); ++i) {
      const double scale = pairs_[i].scale;
      if (scale == 1) continue;
      std::unordered_set<uint32_t> seen;
      for (const ProfileWorker* w : {pairs_[i].baseline, pairs_[i].current}) {
        for (const auto& [node, t] : w->functions) {
          if (!seen.insert(node).second || !IsWait(tree_, node)) continue;
          if (InsideWait(tree_, tree_.parent(node))) continue;
          const double b = Time(0, i, node);
          const double c = Time(1, i, node);
          const double credit = (c - scale * b) - WaitDelta(b, c, scale);
          for (uint32_t a = tree_.parent(node); a != CallPathTree::kRoot; a = tree_.parent(a)) {
            wait_credit_[i][a] += credit;
          }
        }
      }
    }
  }

  double Time(int side, size_t pair, uint32_t node) const {
    auto m = wait_minimum_[side].find(node);
    if (m != wait_minimum_[side].end()) return m->second;
    const RankPair& p = pairs_[pair];
    const FunctionTimes* t = Find(side == 0 ? *p.baseline : *p.current, node);
    if (t == nullptr) return 0;
    const auto& excess = excess_[side][pair];
    auto e = excess.find(node);
    return e == excess.end() ? t->inclusive_ns : std::max(0.0, t->inclusive_ns - e->second);
  }

  const CallPathTree& tree_;
  const std::vector<RankPair>& pairs_;
  double baseline_iteration_ns_;
  std::unordered_map<uint32_t, double> wait_minimum_[2];
  std::vector<std::unordered_map<uint32_t, double>> excess_[2];
  std::vector<std::unordered_map<uint32_t, double>> wait_credit_;  // per pair, by caller
};

}  // namespace

StatusOr<Comparison> RunComparer::Compare(const RunProfile& baseline,
                                          const RunProfile& current) const {
  assert(baseline.tree() == current.tree());
  const CallPathTree& tree = *baseline.tree();
  if (baseline.workers().empty()) {
    return Status::InvalidArgument(
        fmt::format("{}: the baseline has no workers", baseline.title()));
  }
  if (current.workers().empty()) {
    return Status::InvalidArgument(
        fmt::format("{}: the current run has no workers", current.title()));
  }
  std::map<int32_t, const ProfileWorker*> base_by_rank;
  std::map<int32_t, const ProfileWorker*> cur_by_rank;
  for (const ProfileWorker& w : baseline.workers()) base_by_rank.emplace(w.rank, &w);
  for (const ProfileWorker& w : current.workers()) cur_by_rank.emplace(w.rank, &w);
  std::vector<RankPair> pairs;
  std::vector<int32_t> only_base;
  std::vector<int32_t> only_cur;
  for (const auto& [rank, w] : base_by_rank) {
    auto it = cur_by_rank.find(rank);
    if (it == cur_by_rank.end()) {
      only_base.push_back(rank);
    } else {
      pairs.push_back({w, it->second, 0});
    }
  }
  for (const auto& [rank, w] : cur_by_rank) {
    if (base_by_rank.count(rank) == 0) only_cur.push_back(rank);
  }
  if (pairs.empty()) {
    std::vector<int32_t> b;
    std::vector<int32_t> c;
    for (const auto& [rank, w] : base_by_rank) b.push_back(rank);
    for (const auto& [rank, w] : cur_by_rank) c.push_back(rank);
    return Status::InvalidArgument(fmt::format(
        "{} and {} are not runs of one job: the baseline's ranks ({}) and the current run's ({}) "
        "have none in common",
        baseline.title(), current.title(), RankList(b), RankList(c)));
  }

  Comparison out;
  out.baseline_title = baseline.title();
  out.current_title = current.title();
  out.baseline_workers = static_cast<int32_t>(baseline.workers().size());
  out.current_workers = static_cast<int32_t>(current.workers().size());
  out.baseline_iteration_ns = baseline.median_iteration_ns();
  out.current_iteration_ns = current.median_iteration_ns();
  out.material_share = options_.material_share;
  out.noise_sigmas = options_.noise_sigmas;
  for (const std::string& n : baseline.notes()) out.notes.push_back("baseline: " + n);
  for (const std::string& n : current.notes()) out.notes.push_back("current: " + n);
  if (!only_base.empty()) {
    out.notes.push_back(
        fmt::format("ranks only in the baseline (not compared): {}", RankList(only_base)));
  }
  if (!only_cur.empty()) {
    out.notes.push_back(
        fmt::format("ranks only in the current run (not compared): {}", RankList(only_cur)));
  }

  out.compared_functions = baseline.has_functions() && current.has_functions();
  if (!out.compared_functions) {
    out.notes.push_back(
        "a report carries no function times (written by an older perftracker): only iteration "
        "times are compared; compare the trace sets for per-function changes");
  }

  // What every function shares, and how much of the baseline the current run still has.
  std::vector<double> ratios;
  double total_self = 0;
  double shared_self = 0;
  if (out.compared_functions) {
    for (const RankPair& p : pairs) {
      for (const auto& [node, b] : p.baseline->functions) {
        total_self += b.self_ns;
        const FunctionTimes* c = Find(*p.current, node);
        if (c == nullptr) continue;
        shared_self += b.self_ns;
        // A vote needs a material share of the iteration in both runs, each of its own run's
        // iteration: under CPU contention a tiny operator's preemptions inflate it 10-60x,
        // past a share of the quiet run's iteration but not of the loaded run's.
        if (!InsideWait(tree, node) &&
            b.self_ns >= kSharedMinShare * p.baseline->median_iteration_ns &&
            c->self_ns >= kSharedMinShare * p.current->median_iteration_ns) {
          ratios.push_back(c->self_ns / b.self_ns);
        }
      }
    }
    if (total_self > 0 && shared_self == 0) {
      return Status::InvalidArgument(
          fmt::format("{} and {} are not runs of one job: they have no function in common",
                      baseline.title(), current.title()));
    }
    if (total_self > 0 && shared_self < kLowOverlap * total_self) {
      out.notes.push_back(fmt::format(
          "only {} of the baseline's time is in functions the current run also has: the "
          "code changed (a Python frame's line number moves with any edit), so functions that "
          "moved show as one slower and one faster",
          FormatShare(shared_self / total_self)));
    }
    out.shared_scale = ratios.empty() ? 1 : Median(std::move(ratios));
  } else {
    out.shared_scale =
        out.baseline_iteration_ns > 0 ? out.current_iteration_ns / out.baseline_iteration_ns : 1;
  }

  std::vector<double> bars;
  for (RankPair& p : pairs) {
    const ProfileWorker& b = *p.baseline;
    const ProfileWorker& c = *p.current;
    p.bar_ns = Bar(options_, b, c, 1.0);
    WorkerChange w;
    w.rank = b.rank;
    w.host = c.host.empty() ? b.host : c.host;
    w.baseline_iteration_ns = b.median_iteration_ns;
    w.current_iteration_ns = c.median_iteration_ns;
    w.baseline_spread_ns = b.iteration_spread_ns;
    w.current_spread_ns = c.iteration_spread_ns;
    w.bar_ns = p.bar_ns;
    w.material = std::fabs(c.median_iteration_ns - b.median_iteration_ns) >= p.bar_ns;
    out.workers.push_back(std::move(w));
    bars.push_back(p.bar_ns);
  }
  out.median_bar_ns = Median(std::move(bars));
  out.shared_delta_ns = (out.shared_scale - 1) * out.baseline_iteration_ns;
  // The shared factor is a change of the job only when the iteration itself moved beyond the
  // bar the same way: self-time ratios of a few large functions scatter on a loaded machine
  // while the iteration stays put (waits shrink as work grows).
  const double iteration_delta = out.current_iteration_ns - out.baseline_iteration_ns;
  const bool factor_passes_bar = std::fabs(out.shared_delta_ns) >= out.median_bar_ns;
  out.shared_material = factor_passes_bar && std::fabs(iteration_delta) >= out.median_bar_ns &&
                        (iteration_delta > 0) == (out.shared_delta_ns > 0);

  // Machine load: how much longer each CPU second took in the current run than in the
  // baseline (the median over ranks of the ratio of their CPU stretch), when both runs say.
  std::vector<double> load_ratio(pairs.size(), 0);  // per pair, 0 when a run does not say
  std::vector<double> load_ratios;
  for (size_t i = 0; i < pairs.size(); ++i) {
    const RankPair& p = pairs[i];
    if (p.baseline->cpu_stretch > 0 && p.current->cpu_stretch > 0) {
      load_ratio[i] = p.current->cpu_stretch / p.baseline->cpu_stretch;
      load_ratios.push_back(load_ratio[i]);
    }
  }
  if (!load_ratios.empty()) out.machine_scale = Median(std::move(load_ratios));
  // Whether or not the iteration moved with it (a function that got slower while the machine
  // got quieter moves it the other way), a factor the load explains is the machine's; and
  // whether or not its cost passes the bar: it is then applied (below), not left as noise
  // (two healthy runs, the second beside two busy loops: x1.17 with the load at x1.61, a
  // cost of 18.3 ms against a bar of 19.4 ms; left unapplied, every function was compared
  // as it was, and rank 3's aten::mm, x1.97 with its own load at x1.80, was named).
  if (out.machine_scale > 0 && out.shared_scale != 1) {
    const double shared_log = std::log(out.shared_scale);
    const double machine_log = std::log(out.machine_scale);
    // Explained: the machine moved the same way, by at least kLoadExplains of the factor.
    if (shared_log * machine_log > 0 &&
        std::fabs(machine_log) >= kLoadExplains * std::fabs(shared_log)) {
      out.shared_material = false;
      out.shared_explained_by_load = true;
    }
    if (factor_passes_bar || out.shared_explained_by_load) {
      out.notes.push_back(fmt::format(
          "every function is x{:.2f}; the ranks' threads waited for a CPU so that each CPU second "
          "took x{:.2f} as long as in the baseline (CPU time + run-queue wait per CPU time): {}",
          out.shared_scale, out.machine_scale,
          out.shared_explained_by_load
              ? "the machine's load explains the shared factor, probably not the code (functions "
                "are measured beyond it)"
              : "the machine's load does not explain the shared factor"));
    }
  }

  if (out.compared_functions) {
    // A shared factor that is not a change of the job is noise: functions are measured
    // against their baseline times as they are.
    // A factor the machine's load explains is applied too: every function is measured beyond
    // it, so that one slower beyond the load is still named.
    const double scale =
        out.shared_material || out.shared_explained_by_load ? out.shared_scale : 1.0;
    // Each rank's own load. The shared factor is the median rank's; a rank whose threads
    // waited for a CPU more (or less) than the median rank's, relative to its baseline, has
    // every CPU function stretched by that much more (or less): its functions are measured
    // beyond scale x its load ratio / the median load ratio. Seen on a 2-core machine at
    // load 12: in the baseline ranks 0 and 1 waited 1.5x as long per CPU second as ranks 2
    // and 3 (stretch 6.0, 5.9 against 3.7, 4.0) and their block2 took 19.1 and 16.8 ms
    // against 8.0 and 7.4; in the current run the four ranks waited alike. Measured beyond
    // the one shared factor, rank 1's block2 slowdown read +30.8 ms (below its bar of 38.7)
    // and ranks 2's and 3's +59; beyond each rank's own factor, +38.9 to +56.6.
    std::vector<std::string> own;
    for (size_t i = 0; i < pairs.size(); ++i) {
      RankPair& p = pairs[i];
      p.scale = scale;
      if (load_ratio[i] > 0) {
        p.scale = scale * load_ratio[i] / out.machine_scale;
        if (std::fabs(std::log(load_ratio[i] / out.machine_scale)) >= std::log(kOwnLoadNoted)) {
          own.push_back(fmt::format("rank {} x{:.2f} (its load x{:.2f})", p.baseline->rank, p.scale,
                                    load_ratio[i]));
        }
      }
      // Functions are measured as current - scale x baseline: the baseline's noise and share
      // are scaled with it (a slowdown on a quieter machine is measured against the quieter
      // machine's noise, not the busy baseline's; a busier current run raises the bar).
      p.bar_ns = Bar(options_, *p.baseline, *p.current, p.scale);
      out.workers[i].scale = p.scale;
    }
    if (!own.empty()) {
      out.notes.push_back(fmt::format(
          "the ranks' load changed unevenly: each rank's functions are measured beyond x{:.2f} "
          "times its own load ratio over the median rank's (x{:.2f}): {}",
          scale, out.machine_scale, fmt::join(own, ", ")));
    }
    Walker walker(tree, pairs, out.baseline_iteration_ns);
    for (ChangeDirection d : {ChangeDirection::kSlower, ChangeDirection::kFaster}) {
      size_t dropped = 0;
      std::vector<FunctionChange> changes = walker.Changes(d, &dropped);
      for (FunctionChange& c : changes) out.changes.push_back(std::move(c));
      if (dropped > 0) {
        out.notes.push_back(fmt::format("{} more {} functions not listed", dropped,
                                        d == ChangeDirection::kSlower ? "slower" : "faster"));
      }
    }
    std::stable_sort(out.changes.begin(), out.changes.end(),
                     [](const FunctionChange& a, const FunctionChange& b) {
                       return std::fabs(a.delta_ns) > std::fabs(b.delta_ns);
                     });
  }
  return out;
}

}  // namespace perftracker::compare
