#include "perftracker/localize/call_path_collapse.h"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>

#include "perftracker/localize/finding_catalogue.h"

namespace perftracker::localize {
namespace {

namespace fc = finding_codes;

// Anomalies per worker considered for collapsing (the largest ones).
constexpr size_t kMaxAnomaliesPerWorker = 64;

std::string_view CodeFor(FindingCategory category) {
  switch (category) {
    case FindingCategory::kDataLoading:
      return fc::kStragglerData;
    case FindingCategory::kCommunication:
      return fc::kStragglerComm;
    case FindingCategory::kSynchronization:
      return fc::kStragglerSync;
    case FindingCategory::kGc:
      return fc::kStragglerGc;
    case FindingCategory::kMemory:
      return fc::kStragglerMemcpy;
    default:
      return fc::kStragglerCompute;
  }
}

// Whether `child`, a direct callee of the anomaly `parent` on its worker, carries the
// parent's excess although it explains less than kExplainsMost of it: it holds
// kExplainsMost of what the callees carry between them (each against its own peers' median:
// the median of the parent's sums is not the sum of its callees' medians when the peers are
// noisy in different callees) and a majority of the parent's anomalous excess.
bool CarriesExcessOf(const Anomaly& child, const Anomaly& parent) {
  const double excess = child.excess();
  return !parent.carrier && parent.callees_excess > 0 && excess > 0 &&
         excess > kCarriesMajority * parent.excess() &&
         excess >= kExplainsMost * parent.callees_excess;
}

}  // namespace

std::vector<WorkerFinding> CollapseCallPaths(const RuleContext& ctx,
                                             std::vector<Anomaly> anomalies) {
  const JobTable& job = *ctx.job;
  const std::vector<FunctionInfo>& functions = job.functions();
  std::vector<WorkerFinding> out;
  // The carriers (Anomaly::carrier) apart: the collapse steps into them, never from them.
  std::vector<Anomaly> carriers;
  for (const Anomaly& a : anomalies) {
    if (a.carrier) carriers.push_back(a);
  }
  std::erase_if(anomalies, [](const Anomaly& a) { return a.carrier; });
  std::sort(carriers.begin(), carriers.end(),
            [](const Anomaly& a, const Anomaly& b) { return a.worker < b.worker; });
  std::sort(anomalies.begin(), anomalies.end(), [](const Anomaly& a, const Anomaly& b) {
    return a.worker != b.worker ? a.worker < b.worker : a.excess() > b.excess();
  });
  std::vector<bool> consumed;
  for (size_t begin = 0; begin < anomalies.size();) {
    size_t end = begin;
    while (end < anomalies.size() && anomalies[end].worker == anomalies[begin].worker) ++end;
    // The largest anomalies of this worker (sorted by excess, descending).
    std::vector<Anomaly> s(anomalies.begin() + static_cast<std::ptrdiff_t>(begin),
                           anomalies.begin() + static_cast<std::ptrdiff_t>(
                                                   std::min(end, begin + kMaxAnomaliesPerWorker)));
    begin = end;
    consumed.assign(s.size(), false);
    // This worker's carriers: path entry -(c + 1) is cs[c].
    const auto cs_begin =
        std::lower_bound(carriers.begin(), carriers.end(), s.front().worker,
                         [](const Anomaly& a, uint32_t w) { return a.worker < w; });
    const auto cs_end = std::upper_bound(cs_begin, carriers.end(), s.front().worker,
                                         [](uint32_t w, const Anomaly& a) { return w < a.worker; });
    const std::vector<Anomaly> cs(cs_begin, cs_end);
    auto node = [&](int p) -> const Anomaly& {
      return p >= 0 ? s[static_cast<size_t>(p)] : cs[static_cast<size_t>(-p - 1)];
    };
    auto find = [&](uint32_t fid) -> int {
      for (size_t i = 0; i < s.size(); ++i) {
        if (!consumed[i] && s[i].fid == fid) return static_cast<int>(i);
      }
      return -1;
    };
    // This worker's own enclosing ops (JobTable::WorkerEnclosingOp), where the job's workers
    // disagree: an anomaly whose calls ran mostly inside another anomaly of this worker, whose
    // time there holds all of its excess, hangs under it. Its excess is (at most) the other's
    // time counted again: aten::mm of only the rank that runs an extra aten::matmul, where the
    // others' aten::mm run in the backward pass, is evidence of that aten::matmul, not a second
    // finding. (fid, op) pairs, by fid.
    std::vector<std::pair<uint32_t, uint32_t>> local_parent;
    for (const Anomaly& a : s) {
      if (a.fid >= functions.size() || job.EnclosingOp(a.fid) != kNone) continue;
      const uint32_t op = job.WorkerEnclosingOp(a.worker, a.fid);
      if (op == kNone) continue;
      for (const Anomaly& e : s) {
        if (e.fid == op && a.excess() <= static_cast<double>(e.value)) {
          local_parent.emplace_back(a.fid, op);
          break;
        }
      }
    }
    std::sort(local_parent.begin(), local_parent.end());
    auto up = [&](uint32_t fid) -> uint32_t {
      auto it = std::lower_bound(local_parent.begin(), local_parent.end(),
                                 std::pair<uint32_t, uint32_t>{fid, 0});
      return it != local_parent.end() && it->first == fid ? it->second
                                                          : job.CollapseParent(fid);
    };
    auto is_ancestor = [&](uint32_t ancestor, uint32_t fid) {
      int depth = 0;
      for (uint32_t a = up(fid); a != kNone && depth < kMaxDepth; a = up(a), ++depth) {
        if (a == ancestor) return true;
      }
      return false;
    };
    // Nearest unconsumed anomalous ancestor of s[i], or -1.
    auto nearest_ancestor = [&](size_t i) -> int {
      int depth = 0;
      for (uint32_t a = up(s[i].fid); a != kNone && depth < kMaxDepth; a = up(a), ++depth) {
        const int j = find(a);
        if (j >= 0) return j;
      }
      return -1;
    };
    for (;;) {
      // The largest unconsumed anomaly without an unconsumed anomalous ancestor.
      int root = -1;
      for (size_t i = 0; i < s.size() && root < 0; ++i) {
        if (!consumed[i] && nearest_ancestor(i) < 0) root = static_cast<int>(i);
      }
      if (root < 0) break;
      // The path: indices into s, or -(c + 1) for the carrier cs[c].
      std::vector<int> path{root};
      int anchor = root;  // the path's deepest anomaly
      for (;;) {
        const Anomaly& cur = node(path.back());
        const bool at_anchor = path.back() == anchor;
        // The largest step that explains most of cur's excess: an anomaly whose nearest
        // anomalous ancestor is the anchor (under cur, when cur is a carrier), or cur's
        // carrier.
        constexpr int kNoStep = std::numeric_limits<int>::min();
        int best = kNoStep;
        double best_excess = 0;
        for (size_t i = 0; i < s.size(); ++i) {
          if (consumed[i] || static_cast<int>(i) == anchor) continue;
          if (nearest_ancestor(i) != anchor) continue;
          if (!at_anchor && !is_ancestor(cur.fid, s[i].fid)) continue;
          const bool child = up(s[i].fid) == cur.fid;
          if (s[i].excess() < kExplainsMost * cur.excess() &&
              !(child && CarriesExcessOf(s[i], cur))) {
            continue;
          }
          if (best == kNoStep || s[i].excess() > best_excess) {
            best = static_cast<int>(i);
            best_excess = s[i].excess();
          }
        }
        if (at_anchor) {
          for (size_t c = 0; c < cs.size(); ++c) {
            if (up(cs[c].fid) != cur.fid) continue;
            if (cs[c].excess() < kExplainsMost * cur.excess() && !CarriesExcessOf(cs[c], cur)) {
              continue;
            }
            if (best == kNoStep || cs[c].excess() > best_excess) {
              best = -static_cast<int>(c) - 1;
              best_excess = cs[c].excess();
            }
          }
        }
        if (best == kNoStep) break;
        path.push_back(best);
        if (best >= 0) anchor = best;
      }
      // Name what the user wrote: the deepest annotation (record_function) on the path, else
      // the deepest other user-level function, else the path's top.
      size_t named_pos = 0;
      bool annotated = false;
      for (size_t p = 0; p < path.size(); ++p) {
        const EventKind kind = functions[node(path[p]).fid].kind;
        if (kind == EventKind::kUserAnnotation) {
          named_pos = p;
          annotated = true;
        } else if (!annotated && IsUserLevel(kind)) {
          named_pos = p;
        }
      }
      const Anomaly& named = node(path[named_pos]);
      WorkerFinding wf;
      wf.named = named;
      if (named.carrier) wf.carried_from = node(path[named_pos - 1]);
      for (size_t p = named_pos + 1; p < path.size(); ++p) wf.below.push_back(node(path[p]));
      // Category: data loading, GC, a collective, a synchronization anywhere on the call
      // path wins (in that order: a kernel under a collective is communication); otherwise
      // the leaf's kind. The call path is the anomalous path and every caller above it,
      // anomalous or not: a call deep inside a DataLoader iterator's __next__ is data
      // loading even when the __next__ itself varies too much across the peers to stand out
      // (real-normal-end-loader-workers: recvfds under __next__, called compute).
      const EventKind leaf = functions[node(path.back()).fid].kind;
      bool data = false, gc = false, collective = false, sync = false;
      auto note_kind = [&](EventKind kind) {
        data |= kind == EventKind::kDataLoad;
        gc |= kind == EventKind::kGc;
        collective |= kind == EventKind::kCollective;
        sync |= kind == EventKind::kSync;
      };
      for (int p : path) note_kind(functions[node(p).fid].kind);
      int depth = 0;
      for (uint32_t a = up(node(path.front()).fid); a != kNone && depth < kMaxDepth;
           a = up(a), ++depth) {
        note_kind(functions[a].kind);
      }
      if (data) {
        wf.category = FindingCategory::kDataLoading;
        wf.resource = "data loader";
      } else if (gc) {
        wf.category = FindingCategory::kGc;
        wf.resource = "CPU (Python GC)";
      } else if (collective) {
        wf.category = FindingCategory::kCommunication;
        wf.resource = "network";
      } else if (sync) {
        wf.category = FindingCategory::kSynchronization;
        wf.resource = "GPU";
      } else if (leaf == EventKind::kMemcpy || leaf == EventKind::kMemset) {
        wf.category = FindingCategory::kMemory;
        wf.resource = "PCIe";
      } else {
        wf.category = FindingCategory::kCompute;
        wf.resource = leaf == EventKind::kGpuKernel ? "GPU" : "CPU";
      }
      // GC pauses only some workers take are a GC straggler, not extra work.
      wf.code = wf.named.only_on_some && wf.category != FindingCategory::kGc
                    ? fc::kFunctionOnlyOnSome
                    : CodeFor(wf.category);
      // Consume the path down to the named function and everything under the named one.
      for (size_t p = 0; p <= named_pos; ++p) {
        if (path[p] >= 0) consumed[static_cast<size_t>(path[p])] = true;
      }
      for (size_t i = 0; i < s.size(); ++i) {
        if (consumed[i] || !is_ancestor(wf.named.fid, s[i].fid)) continue;
        consumed[i] = true;
        const bool on_path = std::find(path.begin(), path.end(), static_cast<int>(i)) != path.end();
        if (!on_path) wf.children.push_back(s[i]);
      }
      out.push_back(std::move(wf));
    }
  }
  return out;
}

}  // namespace perftracker::localize
