// PeerGroups: which workers should behave alike.
//
// Each worker contributes a signature: the sorted ids of the functions that take a material
// share of its iteration. Workers running the same code (data-parallel replicas, the ranks
// of one pipeline stage) get the same signature; different roles (pipeline stages, expert
// vs dense ranks, a parameter server) get different ones.
//
// Algorithm, built for 100,000 workers:
//  1. AddSignature() hashes the id lists and interns them (hash -> candidate ids, then an
//     exact compare), so identical signatures cost one hash lookup and are stored once.
//  2. Cluster() visits the distinct signatures from the most common to the least common
//     and puts each into the first existing cluster whose representative (its most common
//     signature) is near-identical: Jaccard similarity >= the threshold, or a symmetric
//     difference of one function between sets of at least two. Otherwise the signature
//     founds a new cluster. Distinct signatures are few in practice (tens), and the
//     comparisons per signature are capped, so this is O(signatures x clusters x length).
//
// Why near-identical signatures merge instead of splitting the group: a function that runs
// with material time on only a few workers (rank 0 writes a checkpoint, one rank has a
// debugging hook) or a function whose share hovers around the signature threshold must not
// move a worker out of its peer group: the former is itself a finding, the latter is noise.
//
// Extra code on a minority is not a role. A worker that runs everything its peers run plus
// code of its own (an extra record_function block with its own operators: several functions
// more, so neither rule above holds) is the straggler its peers wait for, and isolating it in
// a group of one would hide it. So a signature also joins a cluster when it *covers* the
// representative (holds at least the threshold share of its functions, of which it has at
// least two), its workers are fewer than the cluster's so far (a strict minority of the
// merged group: there the extra functions are compared as "only on some"), and it takes part
// in the same collectives (by name). The last condition is the shared structure that tells a
// straggler from a role: a pipeline's last stage may run the same layer code as the others
// plus the head and the loss on fewer ranks, but it receives where they send; data-parallel
// replicas, stragglers or not, run the same collectives. Roles that run disjoint code never
// merge, whatever their sizes.
//
// Roles the collectives declare (issue 11). Signatures alone cannot tell a pipeline's first
// stage (the layers plus the embedding) from the middle stages plus extra code on a minority:
// both differ by a function. The process groups of the collectives can: the ranks of one stage
// all-reduce their gradients together, in groups that hold no rank of another stage, and a
// straggler runs the same collectives in the same groups as its peers. So a caller that knows
// the groups gives each signature a `role` (its workers' connected component of collective
// groups: peer_assignment.h), and ClusterWithinRoles() clusters each role's signatures on its
// own, with the rules above, then joins clusters of different roles only when their founding
// signatures are identical (the middle stages of a pipeline run the same code: one group).
#pragma once

#include <cstddef>
#include <cstdint>
#include <unordered_map>
#include <vector>

namespace perftracker {

class PeerGroups {
 public:
  // Interns a signature: `sorted_ids` (the functions that matter) and `sorted_collectives`
  // (the collectives it takes part in, by name id) must be sorted and unique. Returns the
  // signature id; each call counts one more worker for it.
  // `role`: see ClusterWithinRoles(); Cluster() ignores it.
  uint32_t AddSignature(const std::vector<uint32_t>& sorted_ids,
                        const std::vector<uint32_t>& sorted_collectives = {}, uint32_t role = 0);

  size_t num_signatures() const { return signatures_.size(); }
  const std::vector<uint32_t>& signature(uint32_t id) const { return signatures_[id]; }
  uint32_t workers_with(uint32_t id) const { return counts_[id]; }

  // Assigns every signature to a cluster (peer group). Returns the group id of each
  // signature id; group 0 is the one founded by the most common signature.
  std::vector<uint32_t> Cluster(double min_jaccard) const;
  // Cluster() within each role, then clusters of different roles with identical founders
  // joined (see the header). Group 0 is the one founded by the most common signature.
  std::vector<uint32_t> ClusterWithinRoles(double min_jaccard) const;

  // Jaccard similarity |a n b| / |a u b| of two sorted id lists (1 for two empty lists),
  // and the size of their symmetric difference through `sym_diff`.
  static double Jaccard(const std::vector<uint32_t>& a, const std::vector<uint32_t>& b,
                        size_t* sym_diff);
  // Whether `a` holds at least `min_share` of the ids of `b`, and more ids than `b`.
  static bool Covers(const std::vector<uint32_t>& a, const std::vector<uint32_t>& b,
                     double min_share);

 private:
  // Signature ids, most workers first (ties: in order of addition).
  std::vector<uint32_t> Order() const;
  // The greedy pass of Cluster() over `order`: sets group[sig] for each of them to a cluster
  // index, appending founders to `representatives` (its clusters start at its size on entry).
  void Greedy(const std::vector<uint32_t>& order, double min_jaccard, std::vector<uint32_t>& group,
              std::vector<uint32_t>& representatives) const;

  std::vector<std::vector<uint32_t>> signatures_;
  std::vector<std::vector<uint32_t>> collectives_;
  std::vector<uint32_t> roles_;
  std::vector<uint32_t> counts_;
  std::unordered_map<uint64_t, std::vector<uint32_t>> by_hash_;
};

}  // namespace perftracker
