// `perftracker run` as a user runs it: the real binary, its exit code, its output lines.
#include "perftracker/cli/run_command.h"
#include "perftracker/cli/remote_options.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

extern char** environ;  // NOLINT(readability-identifier-naming): POSIX

namespace perftracker {
namespace {

namespace fs = std::filesystem;

struct Spawned {
  pid_t pid = -1;
  int out = -1;
  int err = -1;
};

Spawned Spawn(std::vector<std::string> args, const std::vector<std::string>& extra_env = {}) {
  args.insert(args.begin(), PERFTRACKER_BINARY);
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::vector<std::string> env_strings;
  for (char** e = environ; *e != nullptr; ++e) env_strings.emplace_back(*e);
  for (const auto& e : extra_env) env_strings.push_back(e);
  std::vector<char*> envp;
  for (auto& e : env_strings) envp.push_back(e.data());
  envp.push_back(nullptr);
  int out[2];
  int err[2];
  EXPECT_EQ(pipe2(out, O_CLOEXEC), 0);
  EXPECT_EQ(pipe2(err, O_CLOEXEC), 0);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, out[1], 1);
  posix_spawn_file_actions_adddup2(&fa, err[1], 2);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  Spawned s;
  EXPECT_EQ(posix_spawn(&s.pid, argv[0], &fa, nullptr, argv.data(), envp.data()), 0);
  posix_spawn_file_actions_destroy(&fa);
  close(out[1]);
  close(err[1]);
  s.out = out[0];
  s.err = err[0];
  return s;
}

std::string ReadAll(int fd) {
  std::string text;
  char buf[4096];
  ssize_t n = 0;
  while ((n = read(fd, buf, sizeof(buf))) > 0) text.append(buf, static_cast<size_t>(n));
  close(fd);
  return text;
}

struct Result {
  int code = -1;
  std::string out;
  std::string err;
};

Result Finish(const Spawned& s) {
  Result r;
  // Outputs are small (well under a pipe buffer): read after the exit.
  int status = 0;
  waitpid(s.pid, &status, 0);
  r.out = ReadAll(s.out);
  r.err = ReadAll(s.err);
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return r;
}

Result RunPerftracker(std::vector<std::string> args, const std::vector<std::string>& extra_env = {}) {
  return Finish(Spawn(std::move(args), extra_env));
}

// Waits for `path` to exist: a job says it reached a point by creating a file. The deadline
// is generous (a machine busy with other work can take seconds to start a process); the
// tests never depend on how fast it gets there.
bool WaitForFile(const fs::path& path, int timeout_ms = 60000) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  while (!fs::exists(path)) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return true;
}

size_t Lines(const std::string& text) {
  size_t n = 0;
  for (char c : text) n += c == '\n';
  return n;
}

class RunCommandTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("perftracker-run-test-" + std::to_string(getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string ReportDir() const { return (dir_ / "reports").string(); }
  fs::path dir_;
};

TEST_F(RunCommandTest, BadUsageIsOneLineAndExitCode2) {
  const std::vector<std::vector<std::string>> bad = {
      {"run"},
      {"run", "--window-seconds", "-1", "--", "true"},
      {"run", "--window-seconds", "abc", "--", "true"},
      {"run", "--ring-events", "1000", "--", "true"},
      {"run", "--rings", "0", "--", "true"},
      {"run", "--slowdown-ratio", "0", "--", "true"},
      {"run", "--hang-factor", "0.5", "--", "true"},
      {"run", "--max-windows", "-3", "--", "true"},
      {"run", "--no-such-option", "--", "true"},
      {"run", "--keep-summaries-mb", "0", "--", "true"},
      {"run", "--keep-summaries-seconds", "-5", "--", "true"},
      {"collector", "--server", "127.0.0.1:1", "--keep-summaries-mb", "lots"},
  };
  for (const auto& args : bad) {
    const Result r = RunPerftracker(args);
    std::string cmd;
    for (const auto& a : args) cmd += a + " ";
    EXPECT_EQ(r.code, 2) << cmd;
    EXPECT_EQ(Lines(r.err), 1u) << cmd << "\n" << r.err;
    EXPECT_TRUE(r.out.empty()) << cmd << "\n" << r.out;
  }
  EXPECT_NE(RunPerftracker({"run"}).err.find("no command given"), std::string::npos);
  EXPECT_NE(RunPerftracker({"run", "--ring-events", "1000", "--", "true"}).err.find("power of two"),
            std::string::npos);
}

TEST_F(RunCommandTest, AReportDirThatCannotBeCreatedIsABadOption) {
  const std::string file = (dir_ / "a-file").string();
  { FILE* f = fopen(file.c_str(), "w"); fclose(f); }
  const Result r = RunPerftracker({"run", "--report-dir", file + "/sub", "--", "true"});
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(Lines(r.err), 1u) << r.err;
  EXPECT_NE(r.err.find("--report-dir"), std::string::npos) << r.err;
}

TEST_F(RunCommandTest, PassesTheExitCodeThroughAndSaysNoWindowWasTaken) {
  const Result r = RunPerftracker({"run", "--report-dir", ReportDir(), "--", "/bin/sh", "-c", "exit 3"});
  EXPECT_EQ(r.code, 3);
  EXPECT_NE(r.out.find("no window was taken: the job ran without a slowdown or hang trigger"),
            std::string::npos)
      << r.out;
}

TEST_F(RunCommandTest, ASignalEndingTheJobIs128PlusTheSignal) {
  const Result r =
      RunPerftracker({"run", "--report-dir", ReportDir(), "--", "/bin/sh", "-c", "kill -TERM $$"});
  EXPECT_EQ(r.code, 128 + SIGTERM);
}

TEST_F(RunCommandTest, ACommandThatCannotStartIs127) {
  const Result r = RunPerftracker({"run", "--report-dir", ReportDir(), "--", "/nonexistent/train"});
  EXPECT_EQ(r.code, 127);
  EXPECT_NE(r.err.find("cannot run '/nonexistent/train'"), std::string::npos) << r.err;
}

TEST_F(RunCommandTest, TheJobSeesTheAgentEnvironment) {
  const Result r = RunPerftracker({"run", "--report-dir", ReportDir(), "--ring-events", "1024", "--rings",
                        "4", "--slowdown-ratio", "0.1", "--", "/bin/sh", "-c",
                        "echo \"S=$PERFTRACKER_SOCKET\"; echo \"R=$PERFTRACKER_RUN_ID\"; "
                        "echo \"O=$PERFTRACKER_AGENT_OPTIONS\"; test -S \"$PERFTRACKER_SOCKET\""});
  EXPECT_EQ(r.code, 0) << r.err;  // the socket exists while the job runs
  EXPECT_NE(r.out.find("/collector.sock\n"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("R="), std::string::npos);
  EXPECT_EQ(r.out.find("R=\n"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("O=rings=4,ring_events=1024,learn_repeats=10,relearn_after=200,"
                       "window_iterations=50,slowdown_ratio=0.1,hang_factor=4,min_hang_ms=30000,"
                       "gpu_tracing=1\n"),
            std::string::npos)
      << r.out;
}

TEST_F(RunCommandTest, PythonPathGetsTheBootAndPackageDirectories) {
  // A fake agent package: the boot dir only needs to exist with its files for `run` to use it.
  const fs::path py = dir_ / "py";
  fs::create_directories(py / "perftracker" / "_boot");
  { FILE* f = fopen((py / "perftracker" / "_boot" / "sitecustomize.py").c_str(), "w"); fclose(f); }
  { FILE* f = fopen((py / "perftracker" / "_agent.cpython-311-x86_64-linux-gnu.so").c_str(), "w"); fclose(f); }
  const Result r =
      RunPerftracker({"run", "--report-dir", ReportDir(), "--", "/bin/sh", "-c", "echo \"P=$PYTHONPATH\""},
          {"PERFTRACKER_PYTHON_DIR=" + py.string(), "PYTHONPATH=/user/path"});
  EXPECT_EQ(r.code, 0);
  EXPECT_NE(r.out.find("P=" + (py / "perftracker" / "_boot").string() + ":" + py.string() +
                       ":/user/path\n"),
            std::string::npos)
      << r.out;
}

TEST_F(RunCommandTest, AMissingAgentIsNamedAndTheJobStillRuns) {
  const Result r = RunPerftracker({"run", "--report-dir", ReportDir(), "--", "/bin/sh", "-c", "exit 0"},
                       {"PERFTRACKER_PYTHON_DIR=/nonexistent/py"});
  EXPECT_EQ(r.code, 0);
  EXPECT_NE(r.err.find("the agent is not available: /nonexistent/py/perftracker/_boot/"
                       "sitecustomize.py not found"),
            std::string::npos)
      << r.err;
}

TEST_F(RunCommandTest, AnUnreachableServerIsOneLineAndTheJobRuns) {
  const Result r = RunPerftracker({"run", "--server", "127.0.0.1:1", "--report-dir", ReportDir(),
                                   "--", "/bin/sh", "-c", "echo job-ran; exit 5"});
  EXPECT_EQ(r.code, 5);
  EXPECT_NE(r.out.find("job-ran"), std::string::npos) << r.out;
  const std::string line = "cannot reach the server at 127.0.0.1:1";
  const size_t at = r.err.find(line);
  ASSERT_NE(at, std::string::npos) << r.err;
  EXPECT_EQ(r.err.find(line, at + 1), std::string::npos) << "one line: " << r.err;
}

TEST_F(RunCommandTest, AMissingTokenFileIsABadOption) {
  const Result r = RunPerftracker({"run", "--server", "127.0.0.1:1", "--token-file",
                                   ReportDir() + "/no-such.token", "--report-dir", ReportDir(),
                                   "--", "true"});
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("perftracker run: --token-file: "), std::string::npos) << r.err;
}

TEST_F(RunCommandTest, TriggerAtSecondsWithAServerIsRefusedNotIgnored) {
  // The server coordinates the windows: a local trigger time would silently do nothing.
  const Result r =
      RunPerftracker({"run", "--server", "127.0.0.1:1", "--trigger-at-seconds", "2", "--report-dir",
                      ReportDir(), "--", "/bin/sh", "-c", "echo job-ran"});
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(Lines(r.err), 1u) << r.err;
  EXPECT_NE(r.err.find("--trigger-at-seconds"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("--server"), std::string::npos) << r.err;
  EXPECT_EQ(r.out.find("job-ran"), std::string::npos) << "refused before the job starts";
}

TEST_F(RunCommandTest, AFifoAsTokenFileOrTlsCaIsRefusedNotWaitedOn) {
  // Opening a FIFO nobody writes to would block forever.
  const std::string fifo = (dir_ / "fifo").string();
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  RemoteOptions o;
  o.server = "127.0.0.1:1";
  o.tls_ca = fifo;
  StatusOr<GrpcLinkOptions> link = MakeLinkOptions(o, "t");
  ASSERT_FALSE(link.ok());
  EXPECT_NE(link.status().message().find("--tls-ca " + fifo + ": is a FIFO"), std::string::npos)
      << link.status().message();
  o.tls_ca.clear();
  o.token_file = fifo;
  link = MakeLinkOptions(o, "t");
  ASSERT_FALSE(link.ok());
  EXPECT_NE(link.status().message().find(fifo + ": is a FIFO"), std::string::npos)
      << link.status().message();
}

// The collector's keep limits for progressive disclosure reach its link.
TEST(RemoteOptionsTest, KeepLimitsReachTheLink) {
  RemoteOptions o;
  o.server = "127.0.0.1:1";
  StatusOr<GrpcLinkOptions> link = MakeLinkOptions(o, "t");
  ASSERT_TRUE(link.ok()) << link.status().message();
  EXPECT_EQ(link->max_kept_bytes, size_t{512} << 20);
  EXPECT_EQ(link->keep_summaries_ms, 600'000);
  o.keep_summaries_mb = 64;
  o.keep_summaries_seconds = 30;
  link = MakeLinkOptions(o, "t");
  ASSERT_TRUE(link.ok()) << link.status().message();
  EXPECT_EQ(link->max_kept_bytes, size_t{64} << 20);
  EXPECT_EQ(link->keep_summaries_ms, 30'000);
}

TEST_F(RunCommandTest, SigtermIsForwardedToTheJob) {
  // The job says when its trap is set and its child runs (the signal goes to the job's
  // whole process group: a child forked after it would outlive the test's pipes).
  const fs::path ready = dir_ / "trap-set";
  Spawned s = Spawn({"run", "--report-dir", ReportDir(), "--", "/bin/sh", "-c",
                     "trap 'exit 7' TERM; sleep 30 & touch " + ready.string() + "; wait"});
  ASSERT_TRUE(WaitForFile(ready)) << "the job did not start";
  kill(s.pid, SIGTERM);
  const Result r = Finish(s);
  EXPECT_EQ(r.code, 7);
}

TEST_F(RunCommandTest, KillingPerftrackerLeavesTheJobRunning) {
  // perftracker is killed once the job runs; the job must go on to its end.
  const fs::path started = dir_ / "job-started";
  const fs::path marker = dir_ / "job-finished";
  Spawned s = Spawn({"run", "--report-dir", ReportDir(), "--", "/bin/sh", "-c",
                     "touch " + started.string() + "; sleep 1; touch " + marker.string()});
  ASSERT_TRUE(WaitForFile(started)) << "the job did not start";
  kill(s.pid, SIGKILL);
  Finish(s);
  EXPECT_TRUE(WaitForFile(marker)) << "the job died with perftracker";
}

TEST(AgentOptionsStringTest, CarriesEveryThresholdAndRingSize) {
  RunOptions o;
  o.rings = 8;
  o.ring_events = 4096;
  o.learn_repeats = 3;
  o.relearn_after = 50;
  o.window_iterations = 20;
  o.slowdown_ratio = 0.25;
  o.hang_factor = 3.5;
  o.min_hang_seconds = 0.25;
  EXPECT_EQ(AgentOptionsString(o),
            "rings=8,ring_events=4096,learn_repeats=3,relearn_after=50,window_iterations=20,"
            "slowdown_ratio=0.25,hang_factor=3.5,min_hang_ms=250,gpu_tracing=1");
  o.gpu_tracing = "off";
  EXPECT_NE(AgentOptionsString(o).find(",gpu_tracing=0"), std::string::npos);
  o.gpu_tracing = "always";
  EXPECT_NE(AgentOptionsString(o).find(",gpu_tracing=2"), std::string::npos);
}

}  // namespace
}  // namespace perftracker
