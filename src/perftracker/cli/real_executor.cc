// The real executor of `perftracker bench accuracy` (scenario_executor.h).
#include "perftracker/cli/scenario_executor.h"

namespace perftracker {

StatusOr<ScenarioRun> RunRealScenario(const Scenario&, const RealOptions&) {
  ScenarioRun run;
  run.skipped = true;
  run.note = "the real executor is not built yet";
  return run;
}

}  // namespace perftracker
