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
                                  const std::vector<uint32_t>& sorted_collectives) {
  auto& bucket = by_hash_[HashIds(sorted_ids, sorted_collectives)];
  for (uint32_t id : bucket) {
    if (signatures_[id] == sorted_ids && collectives_[id] == sorted_collectives) {
      ++counts_[id];
      return id;
    }
  }
  const auto id = static_cast<uint32_t>(signatures_.size());
  signatures_.push_back(sorted_ids);
  collectives_.push_back(sorted_collectives);
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

std::vector<uint32_t> PeerGroups::Cluster(double min_jaccard) const {
  std::vector<uint32_t> order(signatures_.size());
  std::iota(order.begin(), order.end(), 0u);
  std::stable_sort(order.begin(), order.end(),
                   [&](uint32_t x, uint32_t y) { return counts_[x] > counts_[y]; });
  std::vector<uint32_t> group(signatures_.size(), 0);
  std::vector<uint32_t> representatives;  // signature id founding each cluster
  std::vector<uint64_t> cluster_workers;  // workers placed in each cluster so far
  for (uint32_t sig : order) {
    const auto& s = signatures_[sig];
    bool placed = false;
    const size_t limit = std::min(representatives.size(), kMaxClusterComparisons);
    for (size_t c = 0; c < limit && !placed; ++c) {
      const auto& r = signatures_[representatives[c]];
      size_t sym_diff = 0;
      const double jac = Jaccard(s, r, &sym_diff);
      const bool near_identical =
          jac >= min_jaccard || (sym_diff <= 1 && std::min(s.size(), r.size()) >= 2);
      // Extra code on a minority of an otherwise alike group (see the header).
      const bool extra_code_on_minority = r.size() >= 2 && counts_[sig] < cluster_workers[c] &&
                                          collectives_[sig] == collectives_[representatives[c]] &&
                                          Covers(s, r, min_jaccard);
      if (near_identical || extra_code_on_minority) {
        group[sig] = static_cast<uint32_t>(c);
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
  return group;
}

}  // namespace perftracker
