// The `perftracker` command.
#include <cstdio>
#include <exception>

#include <fmt/core.h>
#include <CLI/CLI.hpp>

#include "perftracker/cli/bench_command.h"
#include "perftracker/cli/collector_command.h"
#include "perftracker/cli/compare_command.h"
#include "perftracker/cli/diagnose_command.h"
#include "perftracker/cli/probe_command.h"
#include "perftracker/cli/run_command.h"
#include "perftracker/cli/server_command.h"

#ifndef PERFTRACKER_VERSION
#define PERFTRACKER_VERSION "0.0.0"
#endif

int main(int argc, char** argv) {
  CLI::App app{
      "perftracker: tells you why a distributed training job is slow: which worker, which "
      "function, which resource."};
  app.set_version_flag("--version", "perftracker " PERFTRACKER_VERSION);
  app.require_subcommand(1);
  perftracker::DiagnoseOptions diagnose;
  CLI::App* diagnose_cmd = perftracker::AddDiagnoseCommand(app, &diagnose);
  perftracker::RunOptions run;
  CLI::App* run_cmd = perftracker::AddRunCommand(app, &run);
  perftracker::ServerCommandOptions server;
  CLI::App* server_cmd = perftracker::AddServerCommand(app, &server);
  perftracker::CollectorCommandOptions collector;
  CLI::App* collector_cmd = perftracker::AddCollectorCommand(app, &collector);
  perftracker::BenchOptions bench;
  CLI::App* bench_cmd = perftracker::AddBenchCommand(app, &bench);
  perftracker::ProbeOptions probe;
  CLI::App* probe_cmd = perftracker::AddProbeCommand(app, &probe);
  perftracker::CompareCommandOptions compare;
  CLI::App* compare_cmd = perftracker::AddCompareCommand(app, &compare);
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    // One line: what is wrong and where to look.
    fmt::print(stderr, "perftracker: {} (see perftracker --help)\n", e.what());
    return 2;
  }
  try {
    if (diagnose_cmd->parsed()) return perftracker::RunDiagnose(diagnose);
    if (run_cmd->parsed()) return perftracker::RunJob(run);
    if (server_cmd->parsed()) return perftracker::RunServer(server);
    if (collector_cmd->parsed()) return perftracker::RunCollector(collector);
    if (bench_cmd->parsed()) return perftracker::RunBenchAccuracy(bench);
    if (probe_cmd->parsed()) return perftracker::RunProbe(probe);
    if (compare_cmd->parsed()) return perftracker::RunCompare(compare);
  } catch (const std::exception& e) {
    fmt::print(stderr, "perftracker: internal error: {}\n", e.what());
    return 2;
  }
  return 2;
}
