#include "perftracker/localize/peer_groups.h"

#include <algorithm>
#include <numeric>

namespace perftracker {
namespace {

// A cluster compares a new signature against at most this many existing clusters (the
// most populous ones), which bounds the worst case (every worker unique) at O(S x 256 x L).
constexpr size_t kMaxClusterComparisons = 256;

uint64_t HashIds(const std::vector<uint32_t>& ids, const std::vector<uint32_t>& more) {
  // 64-bit FNV-1a over the ids, then a final avalanche (splitmix64).
  uint64_t h = 1469598103934665603ull;
  for (uint32_t id : ids) {
    h ^= id;
    h *= 1099511628211ull;
  }
  h ^= 0xffffffffull;  // separates the two lists
  h *= 1099511628211ull;
  for (uint32_t id : more) {
    h ^= id;
    h *= 1099511628211ull;
  }
  h ^= h >> 31;
  h *= 0x7fb5d329728ea185ull;
  h ^= h >> 27;
  return h;
}

}  // namespace

uint32_t PeerGroups::AddSignature(const std::vector<uint32_t>& sorted_ids,
                                  const std::vector<uint32_t>& sorted_collectives, uint32_t role) {
  auto& bucket = by_hash_[HashIds(sorted_ids, sorted_collectives) ^ (uint64_t{role} << 17)];
  for (uint32_t id : bucket) {
    if (signatures_[id] == sorted_ids && collectives_[id] == sorted_collectives &&
        roles_[id] == role) {
      ++counts_[id];
      return id;
    }
  }
  const auto id = static_cast<uint32_t>(signatures_.size());
  signatures_.push_back(sorted_ids);
  collectives_.push_back(sorted_collectives);
  roles_.push_back(role);
  counts_.push_back(1);
  bucket.push_back(id);
  return id;
}

double PeerGroups::Jaccard(const std::vector<uint32_t>& a, const std::vector<uint32_t>& b,
                           size_t* sym_diff) {
  size_t i = 0, j = 0, common = 0;
  while (i < a.size() && j < b.size()) {
    if (a[i] == b[j]) {
      ++common, ++i, ++j;
    } else if (a[i] < b[j]) {
      ++i;
    } else {
      ++j;
    }
  }
  const size_t uni = a.size() + b.size() - common;
  if (sym_diff != nullptr) *sym_diff = uni - common;
  return uni == 0 ? 1.0 : static_cast<double>(common) / static_cast<double>(uni);
}

bool PeerGroups::Covers(const std::vector<uint32_t>& a, const std::vector<uint32_t>& b,
                        double min_share) {
  if (a.size() <= b.size()) return false;
  size_t common = 0;
  for (size_t i = 0, j = 0; i < a.size() && j < b.size();) {
    if (a[i] == b[j]) {
      ++common, ++i, ++j;
    } else if (a[i] < b[j]) {
      ++i;
    } else {
      ++j;
    }
  }
  return static_cast<double>(common) >= min_share * static_cast<double>(b.size());
}

std::vector<uint32_t> PeerGroups::Order() const {
  std::vector<uint32_t> order(signatures_.size());
  std::iota(order.begin(), order.end(), 0u);
  std::stable_sort(order.begin(), order.end(),
                   [&](uint32_t x, uint32_t y) { return counts_[x] > counts_[y]; });
  return order;
}

void PeerGroups::Greedy(const std::vector<uint32_t>& order, double min_jaccard,
                        std::vector<uint32_t>& group,
                        std::vector<uint32_t>& representatives) const {
  const size_t first_cluster = representatives.size();
  std::vector<uint64_t> cluster_workers;  // workers placed in each of its clusters so far
  for (uint32_t sig : order) {
    const auto& s = signatures_[sig];
    bool placed = false;
    const size_t limit = std::min(cluster_workers.size(), kMaxClusterComparisons);
    for (size_t c = 0; c < limit && !placed; ++c) {
      const uint32_t rep = representatives[first_cluster + c];
      const auto& r = signatures_[rep];
      size_t sym_diff = 0;
      const double jac = Jaccard(s, r, &sym_diff);
      const bool near_identical =
          jac >= min_jaccard || (sym_diff <= 1 && std::min(s.size(), r.size()) >= 2);
      // Extra code on a minority of an otherwise alike group (see the header).
      const bool extra_code_on_minority = r.size() >= 2 && counts_[sig] < cluster_workers[c] &&
                                          collectives_[sig] == collectives_[rep] &&
                                          Covers(s, r, min_jaccard);
      if (near_identical || extra_code_on_minority) {
        group[sig] = static_cast<uint32_t>(first_cluster + c);
        cluster_workers[c] += counts_[sig];
        placed = true;
      }
    }
    if (!placed) {
      group[sig] = static_cast<uint32_t>(representatives.size());
      representatives.push_back(sig);
      cluster_workers.push_back(counts_[sig]);
    }
  }
}

std::vector<uint32_t> PeerGroups::Cluster(double min_jaccard) const {
  std::vector<uint32_t> group(signatures_.size(), 0);
  std::vector<uint32_t> representatives;  // signature id founding each cluster
  Greedy(Order(), min_jaccard, group, representatives);
  return group;
}

std::vector<uint32_t> PeerGroups::ClusterWithinRoles(double min_jaccard) const {
  const std::vector<uint32_t> order = Order();
  // Each role's signatures, most common first, clustered on their own.
  std::unordered_map<uint32_t, std::vector<uint32_t>> by_role;
  std::vector<uint32_t> roles_in_order;
  for (uint32_t sig : order) {
    auto [it, inserted] = by_role.try_emplace(roles_[sig]);
    if (inserted) roles_in_order.push_back(roles_[sig]);
    it->second.push_back(sig);
  }
  std::vector<uint32_t> local(signatures_.size(), 0);
  std::vector<uint32_t> representatives;  // founding signature of each role's clusters
  for (uint32_t role : roles_in_order) Greedy(by_role[role], min_jaccard, local, representatives);
  // Clusters of different roles whose founders run the same code in the same collectives are
  // one group (the middle stages of a pipeline). Numbered by their most common founder.
  std::vector<uint32_t> cluster_order(representatives.size());
  std::iota(cluster_order.begin(), cluster_order.end(), 0u);
  std::stable_sort(cluster_order.begin(), cluster_order.end(), [&](uint32_t x, uint32_t y) {
    return counts_[representatives[x]] > counts_[representatives[y]];
  });
  std::vector<uint32_t> final_of(representatives.size(), 0);
  std::vector<uint32_t> founders;  // representative of each final group
  for (uint32_t c : cluster_order) {
    const uint32_t rep = representatives[c];
    uint32_t found = static_cast<uint32_t>(founders.size());
    for (uint32_t g = 0; g < founders.size(); ++g) {
      if (signatures_[founders[g]] == signatures_[rep] &&
          collectives_[founders[g]] == collectives_[rep]) {
        found = g;
        break;
      }
    }
    if (found == founders.size()) founders.push_back(rep);
    final_of[c] = found;
  }
  std::vector<uint32_t> group(signatures_.size(), 0);
  for (uint32_t sig = 0; sig < signatures_.size(); ++sig) group[sig] = final_of[local[sig]];
  return group;
}

}  // namespace perftracker
