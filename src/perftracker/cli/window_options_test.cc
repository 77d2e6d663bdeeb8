// `perftracker run` and `perftracker server` take the same window flags, with the same
// meaning: both register them through AddWindowOptions.
#include "perftracker/cli/window_options.h"

#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <CLI/CLI.hpp>

#include "perftracker/cli/run_command.h"
#include "perftracker/cli/server_command.h"

namespace perftracker {
namespace {

const std::vector<std::string> kWindowFlags = {
    "--window-seconds",  "7.5", "--window-min-iterations",  "4", "--window-max-seconds", "60",
    "--window-delay-ms", "150", "--wait-summaries-seconds", "2", "--cooldown-seconds",   "9",
    "--max-windows",     "11"};

// Parses `perftracker <command> <flags...>` as main.cc does; "" when it parsed.
std::string Parse(const std::string& command, std::vector<std::string> flags, RunOptions* run,
                  ServerCommandOptions* server) {
  CLI::App app("perftracker");
  AddRunCommand(app, run);
  AddServerCommand(app, server);
  flags.insert(flags.begin(), command);
  std::vector<std::string> reversed(flags.rbegin(), flags.rend());
  try {
    app.parse(reversed);
  } catch (const CLI::ParseError& e) {
    return e.what();
  }
  return "";
}

TEST(WindowOptionsTest, RunAndServerMapTheSameFlagsToTheSameWindows) {
  RunOptions run;
  ServerCommandOptions server;
  std::vector<std::string> run_flags = kWindowFlags;
  run_flags.insert(run_flags.end(), {"--", "true"});
  ASSERT_EQ(Parse("run", run_flags, &run, &server), "");
  ASSERT_EQ(Parse("server", kWindowFlags, &run, &server), "");
  CoordinatorOptions from_run;
  CoordinatorOptions from_server;
  ApplyWindowOptions(run.window, &from_run);
  ApplyWindowOptions(server.window, &from_server);
  for (const CoordinatorOptions* co : {&from_run, &from_server}) {
    EXPECT_EQ(co->window_ns, 7'500'000'000);
    EXPECT_EQ(co->window_min_iterations, 4);
    EXPECT_EQ(co->window_max_ns, 60'000'000'000);
    EXPECT_EQ(co->delay_ns, 150'000'000);
    EXPECT_EQ(co->wait_summaries_ns, 2'000'000'000);
    EXPECT_EQ(co->cooldown_ns, 9'000'000'000);
    EXPECT_EQ(co->max_windows, 11);
  }
}

TEST(WindowOptionsTest, EachCommandKeepsItsOwnWindowLimitAndDefault) {
  RunOptions run;
  ServerCommandOptions server;
  ASSERT_EQ(Parse("server", {}, &run, &server), "");
  EXPECT_EQ(server.window.max_windows, 5);
  ASSERT_EQ(Parse("run", {"--", "true"}, &run, &server), "");
  EXPECT_EQ(run.window.max_windows, 3);
  EXPECT_EQ(Parse("server", {"--max-windows", "5000"}, &run, &server), "");
  EXPECT_NE(
      Parse("run", {"--max-windows", "5000", "--", "true"}, &run, &server).find("--max-windows"),
      std::string::npos);
}

// A window never ends before --window-seconds, even with a shorter --window-max-seconds.
TEST(WindowOptionsTest, AWindowLastsAtLeastItsLength) {
  WindowOptions o;
  o.window_seconds = 30;
  o.window_max_seconds = 10;
  CoordinatorOptions co;
  ApplyWindowOptions(o, &co);
  EXPECT_EQ(co.window_max_ns, co.window_ns);
}

TEST(WindowOptionsTest, AnOutOfRangeValueNamesTheFlag) {
  RunOptions run;
  ServerCommandOptions server;
  EXPECT_NE(Parse("server", {"--window-seconds", "0"}, &run, &server).find("--window-seconds"),
            std::string::npos);
}

}  // namespace
}  // namespace perftracker
