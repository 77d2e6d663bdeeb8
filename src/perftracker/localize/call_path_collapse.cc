#include "perftracker/localize/call_path_collapse.h"

#include <algorithm>
#include <cstddef>

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

}  // namespace

std::vector<WorkerFinding> CollapseCallPaths(const RuleContext& ctx,
                                             std::vector<Anomaly> anomalies) {
  const JobTable& job = *ctx.job;
  const std::vector<FunctionInfo>& functions = job.functions();
  std::vector<WorkerFinding> out;
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
    auto find = [&](uint32_t fid) -> int {
      for (size_t i = 0; i < s.size(); ++i) {
        if (!consumed[i] && s[i].fid == fid) return static_cast<int>(i);
      }
      return -1;
    };
    // Nearest unconsumed anomalous ancestor of s[i], or -1.
    auto nearest_ancestor = [&](size_t i) -> int {
      int depth = 0;
      for (uint32_t a = functions[s[i].fid].parent; a != kNone && depth < kMaxDepth;
           a = functions[a].parent, ++depth) {
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
      std::vector<size_t> path{static_cast<size_t>(root)};
      for (;;) {
        const size_t cur = path.back();
        int best = -1;
        for (size_t i = 0; i < s.size(); ++i) {
          if (consumed[i] || i == cur) continue;
          if (nearest_ancestor(i) != static_cast<int>(cur)) continue;
          if (best < 0 || s[i].excess() > s[static_cast<size_t>(best)].excess()) {
            best = static_cast<int>(i);
          }
        }
        if (best < 0 || s[static_cast<size_t>(best)].excess() < kExplainsMost * s[cur].excess()) {
          break;
        }
        path.push_back(static_cast<size_t>(best));
      }
      // Name what the user wrote: the deepest annotation (record_function) on the path, else
      // the deepest other user-level function, else the path's top.
      size_t named_pos = 0;
      bool annotated = false;
      for (size_t p = 0; p < path.size(); ++p) {
        const EventKind kind = functions[s[path[p]].fid].kind;
        if (kind == EventKind::kUserAnnotation) {
          named_pos = p;
          annotated = true;
        } else if (!annotated && IsUserLevel(kind)) {
          named_pos = p;
        }
      }
      const size_t named = path[named_pos];
      WorkerFinding wf;
      wf.named = s[named];
      for (size_t p = named_pos + 1; p < path.size(); ++p) wf.below.push_back(s[path[p]]);
      // Category: data loading, GC, a collective, a synchronization anywhere on the call
      // path wins (in that order: a kernel under a collective is communication); otherwise
      // the leaf's kind. The call path is the anomalous path and every caller above it,
      // anomalous or not: a call deep inside a DataLoader iterator's __next__ is data
      // loading even when the __next__ itself varies too much across the peers to stand out
      // (real-normal-end-loader-workers: recvfds under __next__, called compute).
      const EventKind leaf = functions[s[path.back()].fid].kind;
      bool data = false, gc = false, collective = false, sync = false;
      auto note_kind = [&](EventKind kind) {
        data |= kind == EventKind::kDataLoad;
        gc |= kind == EventKind::kGc;
        collective |= kind == EventKind::kCollective;
        sync |= kind == EventKind::kSync;
      };
      for (size_t p : path) note_kind(functions[s[p].fid].kind);
      int depth = 0;
      for (uint32_t a = functions[s[path.front()].fid].parent; a != kNone && depth < kMaxDepth;
           a = functions[a].parent, ++depth) {
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
      for (size_t p = 0; p <= named_pos; ++p) consumed[path[p]] = true;
      for (size_t i = 0; i < s.size(); ++i) {
        if (consumed[i] || !job.IsAncestor(s[named].fid, s[i].fid)) continue;
        consumed[i] = true;
        const bool on_path = std::find(path.begin(), path.end(), i) != path.end();
        if (!on_path) wf.children.push_back(s[i]);
      }
      out.push_back(std::move(wf));
    }
  }
  return out;
}

}  // namespace perftracker::localize
