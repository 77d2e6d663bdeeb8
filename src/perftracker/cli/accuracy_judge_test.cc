#include "perftracker/cli/accuracy_judge.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "perftracker/sources/sim/cluster_simulator.h"

namespace perftracker {
namespace {

// A 16-rank job (two hosts of 8, tp 1: no NVLink traffic) with `faults` and `expect`.
Scenario Make(const std::string& faults, const std::string& expect) {
  auto s = ParseScenario(R"({"name": "t", "job": {"ranks": 16, "gpus_per_host": 8,
      "iterations": 6, "seed": 3}, "faults": [)" +
                             faults + R"(], "expect": {"findings": [)" + expect + "]}}",
                         "t.json");
  EXPECT_TRUE(s.ok()) << s.status().message();
  return *s;
}

DiagnosedFinding F(const std::string& code, std::vector<int32_t> workers, bool material) {
  DiagnosedFinding f;
  f.code = code;
  f.workers = std::move(workers);
  f.material = material;
  return f;
}

FaultCost Cost(double ms) {
  FaultCost c;
  c.measured = true;
  c.cost_ns = ms * 1e6;
  c.iteration_ns = 100e6;
  c.bar_ns = 5e6;
  return c;
}

const char kPcie[] = R"({"kind": "pcie_degraded", "ranks": [3], "magnitude": 4})";
const char kPcieExpected[] =
    R"({"code": "PT-LINK-DEGRADED", "workers": [3], "material": "either"})";
const char kThrottle[] = R"({"kind": "gpu_throttle", "ranks": [12], "magnitude": 2})";
const char kThrottleExpected[] = R"({"code": "PT-GPU-THROTTLED", "workers": [12]})";

// A report with no finding at all, where a fault costs over the bar: a failure that says so
// (the judge read the top finding's slot of an empty list).
TEST(AccuracyJudgeTest, NoFindingWhereAFaultCostsOverTheBarFails) {
  const Scenario s = Make(kThrottle, kThrottleExpected);
  const Judgement judged = JudgeByCost(s, {}, {Cost(40)});
  EXPECT_FALSE(judged.pass);
  EXPECT_FALSE(judged.healthy_like);
  EXPECT_NE(judged.detail.find("expected PT-GPU-THROTTLED[12] first, got no finding"),
            std::string::npos)
      << judged.detail;
}

TEST(AccuracyJudgeTest, AFaultThatCostsNothingIsJudgedAsAHealthyJob) {
  const Scenario s = Make(kPcie, kPcieExpected);
  // The report names nothing material; its top finding is something else, minor.
  const std::vector<DiagnosedFinding> findings = {F("PT-DATA-CRITICAL", {}, false)};
  const Judgement raw = JudgeRaw(s, findings);
  EXPECT_FALSE(raw.pass);
  EXPECT_NE(raw.detail.find("expected PT-LINK-DEGRADED[3] in the top 1"), std::string::npos);
  const Judgement judged = JudgeByCost(s, findings, {Cost(0)});
  EXPECT_TRUE(judged.pass) << judged.detail;
  EXPECT_TRUE(judged.healthy_like);
  // Judged as healthy, a material finding about something else is a false alarm ...
  const std::vector<DiagnosedFinding> alarm = {F("PT-STRAGGLER-COMPUTE", {7}, true)};
  const Judgement false_alarm = JudgeByCost(s, alarm, {Cost(0)});
  EXPECT_FALSE(false_alarm.pass);
  EXPECT_EQ(false_alarm.unexpected, std::vector<std::string>{"PT-STRAGGLER-COMPUTE[7]"});
  // ... and one that names the injected fault is flagged, not failed.
  const Judgement named = JudgeByCost(s, {F("PT-LINK-DEGRADED", {3}, true)}, {Cost(0.2)});
  EXPECT_TRUE(named.pass);
  EXPECT_TRUE(named.material_sub_bar);
  // At the bar it is expected at the top again, as the raw judgement does.
  EXPECT_FALSE(JudgeByCost(s, findings, {Cost(5)}).pass);
  EXPECT_TRUE(JudgeByCost(s, {F("PT-LINK-DEGRADED", {3}, false)}, {Cost(5)}).pass);
}

TEST(AccuracyJudgeTest, OfTwoFaultsOnlyTheOneThatCostsTheBarIsNeeded) {
  const Scenario s = Make(std::string(kPcie) + "," + kThrottle,
                          std::string(kPcieExpected) + "," + kThrottleExpected);
  const std::vector<FaultCost> costs = {Cost(1.2), Cost(30)};
  // The throttled GPU first; the degraded PCIe link (1.2 ms of 100) not in the top 2.
  const std::vector<DiagnosedFinding> findings = {F("PT-GPU-THROTTLED", {12}, true),
                                                  F("PT-DATA-CRITICAL", {}, false),
                                                  F("PT-LINK-DEGRADED", {3}, false)};
  EXPECT_FALSE(JudgeRaw(s, findings).pass);
  const Judgement judged = JudgeByCost(s, findings, costs);
  EXPECT_TRUE(judged.pass) << judged.detail;
  EXPECT_FALSE(judged.healthy_like);
  // The cheap fault ranked above the costly one fails.
  const std::vector<DiagnosedFinding> swapped = {F("PT-LINK-DEGRADED", {3}, true),
                                                 F("PT-GPU-THROTTLED", {12}, true)};
  EXPECT_TRUE(JudgeRaw(s, swapped).pass);
  const Judgement cheap_first = JudgeByCost(s, swapped, costs);
  EXPECT_FALSE(cheap_first.pass);
  EXPECT_NE(cheap_first.detail.find("expected PT-GPU-THROTTLED[12] first"), std::string::npos);
  // Both material: either one first, the other among the material findings, anywhere.
  const std::vector<FaultCost> both = {Cost(8), Cost(30)};
  const std::vector<DiagnosedFinding> apart = {F("PT-LINK-DEGRADED", {3}, true),
                                               F("PT-STRAGGLER-COMM", {5}, true),
                                               F("PT-GPU-THROTTLED", {12}, true)};
  EXPECT_FALSE(JudgeRaw(s, apart).pass);
  EXPECT_TRUE(JudgeByCost(s, apart, both).pass);
  // ... but not as a minor finding.
  const std::vector<DiagnosedFinding> minor = {F("PT-GPU-THROTTLED", {12}, true),
                                               F("PT-LINK-DEGRADED", {3}, false)};
  EXPECT_TRUE(JudgeRaw(s, minor).pass);
  EXPECT_FALSE(JudgeByCost(s, minor, both).pass);
}

TEST(AccuracyJudgeTest, TheRawJudgementIgnoresCostsAndUnmeasuredFaultsStayExpected) {
  const Scenario s = Make(kPcie, kPcieExpected);
  const std::vector<DiagnosedFinding> findings = {F("PT-DATA-CRITICAL", {}, false)};
  // No costs (a real scenario) or a fault that was not measured: the raw judgement.
  EXPECT_FALSE(JudgeByCost(s, findings, {}).pass);
  FaultCost unmeasured = Cost(0);
  unmeasured.measured = false;
  EXPECT_FALSE(JudgeByCost(s, findings, {unmeasured}).pass);
  EXPECT_FALSE(JudgeRaw(s, findings).pass);
}

TEST(AccuracyJudgeTest, ExpectationsPairWithTheFaultsOfTheirCulprits) {
  // Listed in the other order than the faults (scenarios/sim/sim-two-faults-1024.json).
  const Scenario s = Make(std::string(kPcie) + "," + kThrottle,
                          std::string(kThrottleExpected) + "," + kPcieExpected);
  EXPECT_EQ(PairExpectations(s), (std::vector<int>{1, 0}));
  // One fault and one expectation about other workers (its victims): still its fault.
  const Scenario victims =
      Make(kPcie, R"({"code": "PT-STRAGGLER-COMM", "workers": [1, 2], "material": "either"})");
  EXPECT_EQ(PairExpectations(victims), (std::vector<int>{0}));
}

TEST(AccuracyJudgeTest, AFaultsCostIsMeasuredWithoutIt) {
  // A degraded NVLink on a job without tensor parallelism carries nothing: it costs nothing.
  // A GPU at half its clock costs the whole job far more than the bar.
  const Scenario s =
      Make(R"({"kind": "nvlink_degraded", "hosts": [0], "magnitude": 3},)" + std::string(kThrottle),
           R"({"code": "PT-LINK-DEGRADED", "hosts": [0], "material": "either"},)" +
               std::string(kThrottleExpected));
  ClusterSimulator sim(s);
  sim.Run();
  const std::vector<double> iterations = sim.IterationNs();
  ASSERT_EQ(iterations.size(), 6u);
  const std::vector<FaultCost> costs = MeasureFaultCosts(s, iterations, 0.05);
  ASSERT_EQ(costs.size(), 2u);
  ASSERT_TRUE(costs[0].measured && costs[1].measured);
  EXPECT_GT(costs[0].bar_ns, 0);
  EXPECT_NEAR(costs[0].cost_ns, 0, 0.001 * costs[0].iteration_ns);
  EXPECT_FALSE(costs[0].material());
  EXPECT_TRUE(costs[1].material());
  EXPECT_GT(costs[1].cost_ns, 0.2 * costs[1].iteration_ns);
}

}  // namespace
}  // namespace perftracker
