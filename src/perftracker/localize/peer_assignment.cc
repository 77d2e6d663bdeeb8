#include "perftracker/localize/peer_assignment.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <span>
#include <string_view>
#include <unordered_map>
#include <unordered_set>

#include "perftracker/localize/peer_groups.h"
#include "perftracker/localize/robust_stats.h"
#include "perftracker/localize/rule_context.h"

namespace perftracker::localize {

namespace {

// Members of each group from the group of each signature.
PeerAssignment Assign(const std::vector<uint32_t>& signature_group,
                      const std::vector<uint32_t>& worker_signature) {
  uint32_t num_groups = 0;
  for (uint32_t g : signature_group) num_groups = std::max(num_groups, g + 1);
  PeerAssignment out;
  out.members.resize(num_groups);
  out.worker_group.resize(worker_signature.size());
  for (uint32_t w = 0; w < worker_signature.size(); ++w) {
    out.worker_group[w] = signature_group[worker_signature[w]];
    out.members[out.worker_group[w]].push_back(w);
  }
  return out;
}

}  // namespace

std::vector<uint32_t> RolesOfWorkers(const JobTable& job) {
  const std::vector<WorkerRecord>& workers = job.workers();
  // Union-find over global ranks: the workers' and every member their groups list (whether
  // its worker is in the window or not: a sample of a job's workers, as the digest path
  // compares, is linked as the whole job is).
  std::unordered_map<int32_t, uint32_t> node_of;
  std::vector<uint32_t> parent;
  auto node = [&](int32_t rank) {
    auto [it, inserted] = node_of.try_emplace(rank, static_cast<uint32_t>(parent.size()));
    if (inserted) parent.push_back(it->second);
    return it->second;
  };
  auto find = [&](uint32_t x) {
    while (parent[x] != x) x = parent[x] = parent[parent[x]];
    return x;
  };
  auto unite = [&](uint32_t a, uint32_t b) {
    a = find(a), b = find(b);
    if (a != b) parent[std::max(a, b)] = std::min(a, b);
  };
  std::vector<uint8_t> linked;  // per group id: its members united already
  std::unordered_set<int32_t> seen;
  for (uint32_t w = 0; w < workers.size(); ++w) {
    const std::span<const uint32_t> groups = job.WorkerGroups(w);
    // Every worker must say: one without groups (another source, no collective) could be in
    // any role.
    if (workers[w].rank < 0 || groups.empty()) return {};
    if (!seen.insert(workers[w].rank).second) return {};  // two workers with one rank
    const uint32_t self = node(workers[w].rank);
    for (uint32_t g : groups) {
      const std::vector<int32_t>& ranks = job.CollectiveGroupRanks(g);
      // Its own rank joins the group's first (a list cut short may not hold it).
      unite(self, node(ranks.front()));
      if (g >= linked.size()) linked.resize(g + 1, 0);
      if (linked[g]) continue;
      linked[g] = 1;
      const uint32_t first = node(ranks.front());
      for (size_t i = 1; i < ranks.size(); ++i) unite(first, node(ranks[i]));
    }
  }
  std::unordered_map<uint32_t, uint32_t> role_of_root;
  std::vector<uint32_t> roles(workers.size());
  for (uint32_t w = 0; w < workers.size(); ++w) {
    const uint32_t root = find(node_of.at(workers[w].rank));
    roles[w] =
        role_of_root.try_emplace(root, static_cast<uint32_t>(role_of_root.size())).first->second;
  }
  if (role_of_root.size() < 2) return {};
  return roles;
}

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
  // Roles from the process groups (RolesOfWorkers); empty when the sources do not say.
  const std::vector<uint32_t> roles = RolesOfWorkers(job);
  PeerGroups peer_groups, role_groups;
  std::vector<uint32_t> signature, collectives;
  std::vector<uint32_t> worker_signature(workers.size()), worker_role_signature;
  if (!roles.empty()) worker_role_signature.resize(workers.size());
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
    if (!roles.empty()) {
      worker_role_signature[w] = role_groups.AddSignature(signature, collectives, roles[w]);
    }
  }
  PeerAssignment out = Assign(peer_groups.Cluster(options.peer_jaccard), worker_signature);
  bool by_roles = false;
  if (!roles.empty()) {
    PeerAssignment within =
        Assign(role_groups.ClusterWithinRoles(options.peer_jaccard), worker_role_signature);
    // Never fewer peers than the functions alone give: a group too small to compare its
    // workers (a stage of two ranks) is taken only where the functions form it too.
    bool keeps_peers = true;
    for (const auto& m : within.members) {
      if (m.size() >= kMinPeers) continue;
      const auto& other = out.members[out.worker_group[m.front()]];
      keeps_peers &= other == m;
    }
    if (keeps_peers) {
      out = std::move(within);
      by_roles = true;
    }
  }
  const auto num_groups = static_cast<uint32_t>(out.members.size());
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
        "workers form {} peer groups by the functions they run{} (sizes {}); each worker is "
        "compared only with its own group",
        num_groups, by_roles ? " and the process groups of their collectives" : "", list));
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

  out.worker_role = roles;
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
