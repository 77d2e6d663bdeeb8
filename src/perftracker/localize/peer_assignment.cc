#include "perftracker/localize/peer_assignment.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <string_view>
#include <unordered_map>

#include "perftracker/localize/peer_groups.h"
#include "perftracker/localize/robust_stats.h"
#include "perftracker/localize/rule_context.h"

namespace perftracker::localize {

PeerAssignment AssignPeerGroups(const JobTable& job, const LocalizerOptions& options,
                                double iteration_ns, std::vector<std::string>& notes) {
  const std::vector<FunctionInfo>& functions = job.functions();
  const std::vector<WorkerRecord>& workers = job.workers();
  std::vector<uint8_t> significant(functions.size(), 0);
  for (uint32_t fid = 0; fid < functions.size(); ++fid) {
    const FunctionInfo& fn = functions[fid];
    const FunctionTotals& t = job.Totals(fid);
    significant[fid] = t.present > 0 && !fn.under_wait && fn.kind != EventKind::kGc &&
                       t.sum_time_ns / t.present >= options.signature_share * iteration_ns;
  }
  // The collectives a worker takes part in, by name (their call paths depend on timing).
  std::unordered_map<std::string_view, uint32_t> collective_ids;
  std::vector<uint32_t> collective_of(functions.size(), kNone);
  for (uint32_t fid = 0; fid < functions.size(); ++fid) {
    if (functions[fid].kind != EventKind::kCollective) continue;
    collective_of[fid] =
        collective_ids.try_emplace(job.Name(fid), static_cast<uint32_t>(collective_ids.size()))
            .first->second;
  }
  PeerGroups peer_groups;
  std::vector<uint32_t> signature, collectives;
  std::vector<uint32_t> worker_signature(workers.size());
  for (uint32_t w = 0; w < workers.size(); ++w) {
    const WorkerRecord& wr = workers[w];
    signature.clear();
    collectives.clear();
    job.records().ForEach(wr.first_record, wr.num_records, [&](uint64_t, const FunctionRecord& r) {
      if (significant[r.fid] && r.time_ns > 0) signature.push_back(r.fid);
      if (collective_of[r.fid] != kNone) collectives.push_back(collective_of[r.fid]);
    });
    // A worker's records follow its function list, whose fids are usually in order already
    // (they were interned in that order): a sort per worker was half of this step.
    if (!std::is_sorted(signature.begin(), signature.end())) {
      std::sort(signature.begin(), signature.end());
    }
    if (!std::is_sorted(collectives.begin(), collectives.end())) {
      std::sort(collectives.begin(), collectives.end());
    }
    collectives.erase(std::unique(collectives.begin(), collectives.end()), collectives.end());
    worker_signature[w] = peer_groups.AddSignature(signature, collectives);
  }
  const std::vector<uint32_t> signature_group = peer_groups.Cluster(options.peer_jaccard);
  uint32_t num_groups = 0;
  for (uint32_t g : signature_group) num_groups = std::max(num_groups, g + 1);
  PeerAssignment out;
  out.members.resize(num_groups);
  out.worker_group.resize(workers.size());
  for (uint32_t w = 0; w < workers.size(); ++w) {
    out.worker_group[w] = signature_group[worker_signature[w]];
    out.members[out.worker_group[w]].push_back(w);
  }
  if (num_groups > 1) {
    std::vector<size_t> sizes;
    for (const auto& m : out.members) sizes.push_back(m.size());
    std::sort(sizes.rbegin(), sizes.rend());
    std::string list;
    for (size_t i = 0; i < sizes.size() && i < 8; ++i) {
      list += (i ? ", " : "") + fmt::format("{}", sizes[i]);
    }
    if (sizes.size() > 8) list += ", ...";
    notes.push_back(fmt::format(
        "workers form {} peer groups by the functions they run (sizes {}); each worker is "
        "compared only with its own group",
        num_groups, list));
    size_t small = 0;
    for (const auto& m : out.members) small += m.size() < kMinPeers ? m.size() : 0;
    if (small > 0) {
      notes.push_back(fmt::format(
          "{} worker(s) are in peer groups of fewer than {} workers and were only checked "
          "against expectations",
          small, kMinPeers));
    }
  } else if (workers.size() < kMinPeers) {
    notes.push_back(fmt::format("only {} worker(s): peer comparison needs at least {}",
                                workers.size(), kMinPeers));
  }

  out.group_wait_median.assign(num_groups, 0);
  out.group_work_median.assign(num_groups, 0);
  out.group_outside_wait_median.assign(num_groups, -1);
  std::vector<float> values;
  for (uint32_t g = 0; g < num_groups; ++g) {
    values.clear();
    for (uint32_t w : out.members[g]) values.push_back(workers[w].wait_fn_ns);
    out.group_wait_median[g] = static_cast<float>(MedianInPlace(values));
    values.clear();
    for (uint32_t w : out.members[g]) values.push_back(workers[w].work_ns);
    out.group_work_median[g] = static_cast<float>(MedianInPlace(values));
    values.clear();
    for (uint32_t w : out.members[g]) {
      const double outside = OutsideWaitNs(workers[w]);
      if (outside >= 0) values.push_back(static_cast<float>(outside));
    }
    if (!values.empty()) {
      out.group_outside_wait_median[g] = static_cast<float>(MedianInPlace(values));
    }
  }
  return out;
}

double OutsideWaitNs(const WorkerRecord& w) {
  if (w.mean_iteration_ns <= 0) return -1;
  return std::max(0.0, static_cast<double>(w.mean_iteration_ns) - w.wait_fn_ns);
}

}  // namespace perftracker::localize
