#include "perftracker/cli/accuracy_judge.h"

#include <fmt/core.h>

#include <algorithm>

namespace perftracker {
namespace {

bool Matches(const ExpectedFinding& e, const DiagnosedFinding& f) {
  if (e.material == ExpectedMateriality::kMaterial && !f.material) return false;
  if (e.material == ExpectedMateriality::kMinor && f.material) return false;
  if (!e.code.empty() && e.code != f.code) return false;
  if (!e.category.empty() && e.category != f.category) return false;
  if (!e.workers.empty()) {
    std::vector<int32_t> w = f.workers;
    std::sort(w.begin(), w.end());
    if (w != e.workers) return false;
  }
  return true;
}

std::string Ranks(const std::vector<int32_t>& workers) {
  std::string ranks;
  for (size_t i = 0; i < workers.size() && i < 6; ++i) {
    ranks += fmt::format("{}{}", i ? "," : "", workers[i]);
  }
  if (workers.size() > 6) ranks += fmt::format(",..({})", workers.size());
  return ranks;
}

std::string DescribeExpected(const ExpectedFinding& e) {
  std::string what = e.code.empty() ? e.category : e.code;
  if (e.material == ExpectedMateriality::kMinor) what += " (minor)";
  if (e.workers.empty()) return what;
  return fmt::format("{}[{}]", what, Ranks(e.workers));
}

void Append(std::string& detail, const std::string& why) {
  detail += (detail.empty() ? "" : "; ") + why;
}

// The findings that must not be there (material ones only), e.g. a hang in a job that
// only pauses. Any of them fails the scenario.
void JudgeAbsent(const Scenario& s, const std::vector<DiagnosedFinding>& findings, Judgement& j) {
  for (const auto& e : s.absent) {
    for (const auto& f : findings) {
      if (!Matches(e, f)) continue;
      j.pass = false;
      Append(j.detail, fmt::format("{} must not be diagnosed, got {}", DescribeExpected(e),
                                   DescribeFinding(f)));
      break;
    }
  }
}

// No material finding expected.
void JudgeHealthy(const std::vector<DiagnosedFinding>& findings, Judgement& j) {
  for (const DiagnosedFinding& f : findings) {
    if (f.material) j.unexpected.push_back(DescribeFinding(f));
  }
  j.pass = j.unexpected.empty();
  if (!j.pass) j.detail = "material findings on a healthy job";
}

// Material findings that no expectation in `expected` matches and `used` did not take.
void ListUnexpected(const std::vector<ExpectedFinding>& expected,
                    const std::vector<DiagnosedFinding>& findings, const std::vector<bool>& used,
                    Judgement& j) {
  for (size_t i = 0; i < findings.size(); ++i) {
    if (used[i] || !findings[i].material) continue;
    bool matched = false;
    for (const auto& e : expected) matched |= Matches(e, findings[i]);
    if (!matched) j.unexpected.push_back(DescribeFinding(findings[i]));
  }
}

std::string Top(const std::vector<DiagnosedFinding>& findings) {
  return findings.empty() ? std::string("no finding") : DescribeFinding(findings[0]);
}

}  // namespace

std::string DescribeFinding(const DiagnosedFinding& f) {
  const std::string ranks = Ranks(f.workers);
  return fmt::format("{}{}{}", f.code, ranks.empty() ? "" : fmt::format("[{}]", ranks),
                     f.material ? "" : " (minor)");
}

Judgement JudgeRaw(const Scenario& s, const std::vector<DiagnosedFinding>& findings) {
  Judgement j;
  if (s.healthy) {
    JudgeHealthy(findings, j);
  } else {
    const size_t k = s.expected.size();
    std::vector<bool> used(findings.size(), false);
    j.pass = true;
    for (const auto& e : s.expected) {
      bool found = false;
      for (size_t i = 0; i < findings.size() && i < k && !found; ++i) {
        if (!used[i] && Matches(e, findings[i])) used[i] = found = true;
      }
      if (!found) {
        j.pass = false;
        Append(j.detail, fmt::format("expected {} in the top {}, got {}", DescribeExpected(e), k,
                                     Top(findings)));
      }
    }
    ListUnexpected(s.expected, findings, used, j);
  }
  JudgeAbsent(s, findings, j);
  return j;
}

std::vector<int> PairExpectations(const Scenario& s) {
  std::vector<int> pair(s.expected.size(), -1);
  std::vector<bool> taken(s.faults.size(), false);
  for (size_t e = 0; e < s.expected.size(); ++e) {
    int found = -1, candidates = 0;
    for (size_t f = 0; f < s.faults.size(); ++f) {
      if (s.TargetRanks(s.faults[f]) != s.expected[e].workers) continue;
      ++candidates;
      found = static_cast<int>(f);
    }
    if (candidates == 1 && !taken[static_cast<size_t>(found)]) {
      pair[e] = found;
      taken[static_cast<size_t>(found)] = true;
    }
  }
  const auto left = [](const auto& v, auto unpaired) {
    int n = 0, at = -1;
    for (size_t i = 0; i < v.size(); ++i) {
      if (unpaired(i)) ++n, at = static_cast<int>(i);
    }
    return n == 1 ? at : -1;
  };
  const int e = left(pair, [&](size_t i) { return pair[i] < 0; });
  const int f = left(taken, [&](size_t i) { return !taken[i]; });
  if (e >= 0 && f >= 0) pair[static_cast<size_t>(e)] = f;
  return pair;
}

Judgement JudgeByCost(const Scenario& s, const std::vector<DiagnosedFinding>& findings,
                      const std::vector<FaultCost>& costs) {
  if (s.healthy || costs.size() != s.faults.size()) return JudgeRaw(s, findings);
  const std::vector<int> pair = PairExpectations(s);
  std::vector<ExpectedFinding> kept;
  for (size_t e = 0; e < s.expected.size(); ++e) {
    const int f = pair[e];
    const bool below = f >= 0 && costs[static_cast<size_t>(f)].measured &&
                       !costs[static_cast<size_t>(f)].material();
    if (!below) kept.push_back(s.expected[e]);
  }
  Judgement j;
  if (kept.empty()) {
    // Judged as a healthy job: a material finding is a false alarm, unless it names one of
    // the injected faults (its code and culprits: the localizer costs a culprit by what its
    // peers wait for it, which can exceed what the job loses); those are counted apart.
    j.healthy_like = true;
    for (const DiagnosedFinding& f : findings) {
      if (!f.material) continue;
      bool names_fault = false;
      for (ExpectedFinding e : s.expected) {
        e.material = ExpectedMateriality::kEither;
        names_fault |= Matches(e, f);
      }
      if (names_fault) {
        j.material_sub_bar = true;
      } else {
        j.unexpected.push_back(DescribeFinding(f));
      }
    }
    j.pass = j.unexpected.empty();
    if (!j.pass) j.detail = "material findings where every fault costs under the bar";
  } else {
    // The top finding names one of the material faults; each other one is a material
    // finding somewhere in the list.
    std::vector<bool> used(findings.size(), false);
    std::vector<bool> named(kept.size(), false);
    for (size_t e = 0; e < kept.size() && !findings.empty(); ++e) {
      if (Matches(kept[e], findings[0])) {
        used[0] = named[e] = true;
        break;
      }
    }
    j.pass = true;
    if (findings.empty() || !used[0]) {
      j.pass = false;
      std::string which;
      for (const auto& e : kept) which += (which.empty() ? "" : " or ") + DescribeExpected(e);
      Append(j.detail, fmt::format("expected {} first, got {}", which, Top(findings)));
    }
    for (size_t e = 0; e < kept.size(); ++e) {
      if (named[e]) continue;
      for (size_t i = 1; i < findings.size() && !named[e]; ++i) {
        if (!used[i] && findings[i].material && Matches(kept[e], findings[i])) {
          used[i] = named[e] = true;
        }
      }
      if (!named[e]) {
        j.pass = false;
        Append(j.detail,
               fmt::format("expected {} among the material findings", DescribeExpected(kept[e])));
      }
    }
    ListUnexpected(s.expected, findings, used, j);
  }
  JudgeAbsent(s, findings, j);
  return j;
}

}  // namespace perftracker
