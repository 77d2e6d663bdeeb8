// How `perftracker bench accuracy` judges a diagnosis against a scenario's ground truth, two
// ways, both reported:
//  - JudgeRaw (the score as the scenario states it): a healthy scenario passes when no finding
//    is material; a fault scenario when each of its k expected findings matches (code or
//    category, materiality, workers) one of the top k findings, each finding matching at most
//    one expectation; a material finding nobody expected is reported, not failed. Any finding
//    listed as absent fails it.
//  - JudgeByCost (the cost-judged score): each expected finding is paired with the fault it
//    is about (PairExpectations) and kept only when that fault costs the job at least the
//    report's materiality bar, measured counterfactually (the same scenario simulated again
//    without it: MeasureFaultCosts in scenario_executor.h). A fault that costs the job less
//    than the bar is not expected at the top: no rule that ranks by cost can put it there. With
//    no expectation kept the scenario is judged as a healthy one (no material finding, except
//    one that names an injected fault's code and culprits: the localizer costs a culprit by
//    what its peers wait for it, more than the job may lose; flagged, not failed); with
//    kept ones the top finding must match one of them and each other one a material finding
//    anywhere in the list. An expectation whose fault is not known (it cannot be paired) or
//    not measured is kept. The absent findings are judged as in JudgeRaw.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "perftracker/cli/scenario_executor.h"
#include "perftracker/sources/sim/scenario.h"

namespace perftracker {

struct Judgement {
  bool pass = false;
  std::string detail;                   // why it failed
  std::vector<std::string> unexpected;  // material findings nobody expected
  // JudgeByCost: every expected fault costs less than the bar (judged as a healthy job), ...
  bool healthy_like = false;
  // ... and a material finding names one of them (not a false alarm: counted apart).
  bool material_sub_bar = false;
};

Judgement JudgeRaw(const Scenario& scenario, const std::vector<DiagnosedFinding>& findings);

// Per expected finding (in scenario.expected order), the index of the fault it is about, or
// -1. An expectation with culprits pairs with the one fault whose target ranks are exactly
// those; one without culprits (a job-wide finding) with the one job-wide fault; when one
// expectation and one fault are left unpaired after that, they are paired.
std::vector<int> PairExpectations(const Scenario& scenario);

// `costs`: per fault of the scenario (MeasureFaultCosts). Without costs (a real scenario, a
// failed counterfactual run) the judgement is JudgeRaw's.
Judgement JudgeByCost(const Scenario& scenario, const std::vector<DiagnosedFinding>& findings,
                      const std::vector<FaultCost>& costs);

// "PT-LINK-DEGRADED[8,9,10,11,12,13,..(8)] (minor)".
std::string DescribeFinding(const DiagnosedFinding& f);

}  // namespace perftracker
