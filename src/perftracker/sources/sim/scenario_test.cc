#include "perftracker/sources/sim/scenario.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <string>

namespace perftracker {
namespace {

std::string ErrorOf(const std::string& json) {
  auto s = ParseScenario(json, "scenarios/x.json");
  return s.ok() ? std::string("ok") : s.status().message();
}

TEST(ScenarioTest, ParsesAJobWithFaultsAndExpectation) {
  auto s = ParseScenario(R"({
    "name": "throttle", "executor": "sim",
    "job": {"ranks": 64, "tp": 8, "pp": 2, "gpus_per_host": 8, "iterations": 10, "seed": 3},
    "faults": [{"kind": "gpu_throttle", "hosts": [2], "magnitude": 1.5, "start": 1}],
    "expect": {"findings": [{"code": "PT-GPU-THROTTLED", "hosts": [2]}]}})",
                         "t.json");
  ASSERT_TRUE(s.ok()) << s.status().message();
  EXPECT_EQ(s->job.dp, 4);
  EXPECT_EQ(s->job.hosts(), 8);
  ASSERT_EQ(s->faults.size(), 1u);
  EXPECT_EQ(s->faults[0].kind, FaultKind::kGpuThrottle);
  EXPECT_EQ(s->TargetRanks(s->faults[0]), (std::vector<int32_t>{16, 17, 18, 19, 20, 21, 22, 23}));
  ASSERT_EQ(s->expected.size(), 1u);
  EXPECT_EQ(s->expected[0].workers.size(), 8u);
  EXPECT_EQ(s->expected[0].workers[0], 16);
  EXPECT_FALSE(s->healthy);
}

TEST(ScenarioTest, ExpectedFindingsSayWhetherTheyMustBeMaterial) {
  auto s = ParseScenario(R"({"name": "m", "job": {"ranks": 16, "pp": 2},
    "faults": [{"kind": "gc", "ranks": [15]}, {"kind": "slow_data", "ranks": [1]},
               {"kind": "gpu_slow", "ranks": [2]}],
    "expect": {"findings": [{"code": "PT-STRAGGLER-GC", "workers": [15], "material": false},
                            {"code": "PT-STRAGGLER-DATA", "workers": [1], "material": "either"},
                            {"code": "PT-GPU-SLOW", "workers": [2]}]}})",
                         "m.json");
  ASSERT_TRUE(s.ok()) << s.status().message();
  ASSERT_EQ(s->expected.size(), 3u);
  EXPECT_EQ(s->expected[0].material, ExpectedMateriality::kMinor);
  EXPECT_EQ(s->expected[1].material, ExpectedMateriality::kEither);
  EXPECT_EQ(s->expected[2].material, ExpectedMateriality::kMaterial);
}

TEST(ScenarioTest, HealthyScenario) {
  auto s =
      ParseScenario(R"({"name": "h", "job": {"dp": 16}, "expect": {"healthy": true}})", "h.json");
  ASSERT_TRUE(s.ok()) << s.status().message();
  EXPECT_TRUE(s->healthy);
  EXPECT_EQ(s->job.ranks, 16);
}

TEST(ScenarioTest, ARealJobThatMustNotBeCalledHungJudgedAtItsEnd) {
  auto s = ParseScenario(
      R"({"name": "p", "executor": "real", "job": {"ranks": 4, "steps": 150, "loader_workers": 2,
          "teardown_seconds": 35}, "faults": [{"kind": "pause", "ranks": [1], "start": 40,
          "magnitude": 3}], "expect": {"absent": [{"code": "PT-HANG"}], "judge": "final"}})",
      "p.json");
  ASSERT_TRUE(s.ok()) << s.status().message();
  EXPECT_EQ(s->job.loader_workers, 2);
  EXPECT_DOUBLE_EQ(s->job.teardown_seconds, 35);
  ASSERT_EQ(s->faults.size(), 1u);
  EXPECT_EQ(s->faults[0].kind, FaultKind::kPause);
  EXPECT_TRUE(s->judge_final);
  EXPECT_FALSE(s->healthy);
  EXPECT_TRUE(s->expected.empty());
  ASSERT_EQ(s->absent.size(), 1u);
  EXPECT_EQ(s->absent[0].code, "PT-HANG");
}

TEST(ScenarioTest, ErrorsNameTheFileAndTheField) {
  const std::string job = R"("job": {"ranks": 8, "gpus_per_host": 8})";
  const std::string ok_expect = R"("expect": {"healthy": true})";
  EXPECT_EQ(ErrorOf("{"), "scenarios/x.json: not valid JSON");
  EXPECT_EQ(ErrorOf(R"({"name": "a", )" + job + R"(, "expect": {"healthy": true}, "x": 1})"),
            "scenarios/x.json: x: unknown field (known: name, description, executor, job, faults, "
            "expect)");
  EXPECT_EQ(
      ErrorOf(
          R"({"name": "a", )" + job +
          R"(, "faults": [{"kind": "gc", "ranks": [9]}], "expect": {"findings": [{"code": "PT-GC"}]}})"),
      "scenarios/x.json: faults[0].ranks[0]: rank 9 is not in [0, 8)");
  EXPECT_EQ(ErrorOf(R"({"name": "a", )" + job +
                    R"(, "faults": [{"kind": "melt", "ranks": [1]}], )" + ok_expect + "}")
                .substr(0, 60),
            "scenarios/x.json: faults[0].kind: unknown fault 'melt' (know");
  EXPECT_EQ(ErrorOf(R"({"name": "a", "job": {"ranks": 8, "tp": 3}, )" + ok_expect + "}"),
            "scenarios/x.json: job.ranks: 8 ranks are not a multiple of tp x pp = 3");
  EXPECT_EQ(ErrorOf(R"({"name": "a", )" + job + R"(, "expect": {}})"),
            "scenarios/x.json: expect: give {\"healthy\": true}, at least one finding, or "
            "findings that must be absent");
  EXPECT_EQ(ErrorOf(R"({"name": "a", )" + job +
                    R"(, "expect": {"absent": [{"code": "PT-HANG"}], "judge": "final"}})"),
            "scenarios/x.json: expect.judge: \"final\" is for real jobs only");
  EXPECT_EQ(ErrorOf(R"({"name": "a", "executor": "real", "job": {"ranks": 4}, )"
                    R"("expect": {"absent": [{"code": "PT-HANG"}], "judge": "last"}})")
                .substr(0, 47),
            "scenarios/x.json: expect.judge: must be \"first\"");
  EXPECT_EQ(
      ErrorOf(R"({"name": "a", "job": {"ranks": 8, "loader_workers": 2}, )" + ok_expect + "}"),
      "scenarios/x.json: job: loader_workers and teardown_seconds are for real jobs only");
  EXPECT_EQ(ErrorOf(R"({"name": "a", )" + job + R"(, "expect": {"findings": [{"code": "GPU"}]}})"),
            "scenarios/x.json: expect.findings[0].code: 'GPU' is not a finding code (PT-..., "
            "docs/findings.md)");
  EXPECT_EQ(
      ErrorOf(
          R"({"name": "a", "executor": "real", "job": {"ranks": 4}, "faults": [{"kind": "gpu_throttle", "ranks": [1]}], )" +
          ok_expect + "}"),
      "scenarios/x.json: faults[0].kind: 'gpu_throttle' needs a GPU cluster: only with "
      "executor sim");
  EXPECT_EQ(
      ErrorOf(
          R"({"name": "a", )" + job +
          R"(, "faults": [{"kind": "gc_all", "ranks": [1]}], "expect": {"findings": [{"code": "PT-GC"}]}})"),
      "scenarios/x.json: faults[0]: 'gc_all' hits every rank: leave out ranks and hosts");
  EXPECT_EQ(ErrorOf(R"({"name": "a", )" + job + R"(, "faults": [{"kind": "gc", "ranks": [1]}], )" +
                    ok_expect + "}"),
            "scenarios/x.json: expect.healthy: a scenario with faults is not healthy");
  EXPECT_EQ(
      ErrorOf(R"({"name": "a", "job": {"ranks": 8}, "faults": [{"kind": "gc", "ranks": [1]}], )"
              R"("expect": {"findings": [{"code": "PT-GC", "material": "no"}]}})"),
      "scenarios/x.json: expect.findings[0].material: must be true, false or \"either\"");
  EXPECT_EQ(ErrorOf(R"({"name": "a", "job": {"ranks": 8, "host_trace": 1}, )" + ok_expect + "}"),
            "scenarios/x.json: job.host_trace: must be true or false");
  EXPECT_EQ(
      ErrorOf(R"({"name": "a", "job": {"ranks": 8, "process_groups": "yes"}, )" + ok_expect + "}"),
      "scenarios/x.json: job.process_groups: must be true or false");
  EXPECT_EQ(
      ErrorOf(R"({"name": "a", "executor": "real", "job": {"ranks": 4, "process_groups": true}, )" +
              ok_expect + "}"),
      "scenarios/x.json: job.process_groups: only with executor sim");
  EXPECT_EQ(
      ErrorOf(
          R"({"name": "a", "executor": "real", "job": {"ranks": 4}, "faults": [{"kind": "untraced_pause", "ranks": [1]}], )"
          R"("expect": {"findings": [{"code": "PT-STRAGGLER-UNTRACED"}]}})"),
      "scenarios/x.json: faults[0].kind: 'untraced_pause' needs a GPU cluster: only with "
      "executor sim");
  EXPECT_EQ(ErrorOf(R"({"name": "a", "job": {"ranks": "8"}, )" + ok_expect + "}"),
            "scenarios/x.json: job.ranks: must be an integer");
}

TEST(ScenarioTest, RealExtraCodeOnSeveralRanksAndRoles) {
  auto s = ParseScenario(
      R"({"name": "a", "executor": "real", "job": {"ranks": 8},
          "faults": [{"kind": "extra_function", "ranks": [2, 5], "start": 40, "magnitude": 12}],
          "expect": {"findings": [{"code": "PT-FUNCTION-ONLY-ON-SOME", "workers": [2, 5]}]}})",
      "scenarios/x.json");
  ASSERT_TRUE(s.ok()) << s.status().message();
  ASSERT_EQ(s->faults.size(), 1u);
  EXPECT_EQ(s->faults[0].kind, FaultKind::kExtraFunction);
  EXPECT_EQ(s->faults[0].ranks, (std::vector<int32_t>{2, 5}));
  auto roles = ParseScenario(
      R"({"name": "a", "executor": "real", "job": {"ranks": 6, "roles": "two_models"},
          "expect": {"healthy": true}})",
      "scenarios/x.json");
  ASSERT_TRUE(roles.ok()) << roles.status().message();
  EXPECT_EQ(roles->job.roles, "two_models");
  EXPECT_EQ(ErrorOf(R"({"name": "a", "job": {"ranks": 8, "roles": "two_models"},
                        "expect": {"healthy": true}})"),
            "scenarios/x.json: job.roles: only with executor real");
  EXPECT_EQ(
      ErrorOf(R"({"name": "a", "executor": "real", "job": {"ranks": 4},
                  "faults": [{"kind": "cpu_contention", "ranks": [1, 2]}],
                  "expect": {"findings": [{"code": "PT-CPU-CONTENTION"}]}})"),
      "scenarios/x.json: faults[0].ranks: a real job takes one fault rank for 'cpu_contention'");
}

TEST(ScenarioTest, MissingFileIsNotFound) {
  auto s = LoadScenario("/nonexistent/s.json");
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), StatusCode::kNotFound);
  EXPECT_EQ(s.status().message(),
            "/nonexistent/s.json: cannot open the scenario file: no such file or directory");
}

TEST(ScenarioTest, AFifoIsRefusedNotWaitedOn) {
  const std::string path = "/tmp/perftracker-scenario-test-fifo-" + std::to_string(getpid());
  ASSERT_EQ(mkfifo(path.c_str(), 0600), 0);
  auto s = LoadScenario(path);
  unlink(path.c_str());
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find(path + ": cannot open the scenario file: is a FIFO"),
            std::string::npos)
      << s.status().message();
}

}  // namespace
}  // namespace perftracker
