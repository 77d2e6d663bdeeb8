#include "perftracker/summary/worker_summary.h"

#include <algorithm>
#include <vector>

namespace perftracker {

int64_t WorkerSummary::median_iteration_ns() const {
  if (iterations.empty()) return window_ns();
  std::vector<int64_t> d;
  d.reserve(iterations.size());
  for (const auto& it : iterations) d.push_back(it.duration_ns);
  std::nth_element(d.begin(), d.begin() + static_cast<std::ptrdiff_t>(d.size() / 2), d.end());
  return d[d.size() / 2];
}

namespace {

// The index of function i's derived parent, or FunctionSummary::kNoParent.
uint32_t DerivedParent(const std::vector<FunctionSummary>& fs, size_t i) {
  const uint32_t p = fs[i].parent;
  return p < i ? p : FunctionSummary::kNoParent;
}

size_t LeafSize(const FunctionSummary& f) {
  return EventKindName(f.kind).size() + 1 + f.name.size();
}

bool LeafIs(const FunctionSummary& f, std::string_view leaf) {
  const std::string_view kind = EventKindName(f.kind);
  return leaf.size() == kind.size() + 1 + f.name.size() && leaf.starts_with(kind) &&
         leaf[kind.size()] == ':' && leaf.substr(kind.size() + 1) == f.name;
}

constexpr std::string_view kSeparator = " > ";

}  // namespace

std::string WorkerSummary::Key(size_t i) const {
  std::string key;
  key.reserve(KeySize(i));
  std::vector<size_t> chain;
  size_t cur = i;
  for (;;) {
    chain.push_back(cur);
    if (!functions[cur].key.empty()) break;
    const uint32_t p = DerivedParent(functions, cur);
    if (p == FunctionSummary::kNoParent) break;
    cur = p;
  }
  for (auto it = chain.rbegin(); it != chain.rend(); ++it) {
    const FunctionSummary& f = functions[*it];
    if (!key.empty()) key += kSeparator;
    if (!f.key.empty()) {
      key += f.key;
      continue;
    }
    key += EventKindName(f.kind);
    key += ':';
    key += f.name;
  }
  return key;
}

bool WorkerSummary::KeyIs(size_t i, std::string_view key) const {
  for (size_t cur = i;;) {
    const FunctionSummary& f = functions[cur];
    if (!f.key.empty()) return key == f.key;
    const uint32_t p = DerivedParent(functions, cur);
    if (p == FunctionSummary::kNoParent) return LeafIs(f, key);
    const size_t leaf = LeafSize(f);
    if (key.size() < leaf + kSeparator.size()) return false;
    const size_t split = key.size() - leaf - kSeparator.size();
    if (key.substr(split, kSeparator.size()) != kSeparator ||
        !LeafIs(f, key.substr(split + kSeparator.size()))) {
      return false;
    }
    key = key.substr(0, split);
    cur = p;
  }
}

size_t WorkerSummary::KeySize(size_t i) const {
  size_t size = 0;
  for (size_t cur = i;;) {
    const FunctionSummary& f = functions[cur];
    if (!f.key.empty()) return size + f.key.size();
    size += LeafSize(f);
    const uint32_t p = DerivedParent(functions, cur);
    if (p == FunctionSummary::kNoParent) return size;
    size += kSeparator.size();
    cur = p;
  }
}

}  // namespace perftracker
