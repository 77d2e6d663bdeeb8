#include "perftracker/server/embedded/embedded_run.h"

#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <string>

#include <fmt/core.h>
#include <gtest/gtest.h>

namespace perftracker {
namespace {

namespace fs = std::filesystem;

class EmbeddedRunTest : public testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / fmt::format("perftracker_embedded_{}", ::getpid());
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  EmbeddedRunOptions Options() const {
    EmbeddedRunOptions o;
    o.run_id = NewRunId();
    o.title = "python train.py";
    o.coordinator.report_dir = (dir_ / "reports").string();
    o.coordinator.wait_summaries_ns = 100'000'000;
    return o;
  }

  fs::path dir_;
};

TEST_F(EmbeddedRunTest, AJobWithoutAgentsEndsWithNoWindowAndItsRunInTheStore) {
  EmbeddedRunOptions o = Options();
  o.store = (dir_ / "runs.db").string();
  StatusOr<std::unique_ptr<EmbeddedRun>> run = EmbeddedRun::Start(o);
  ASSERT_TRUE(run.ok()) << run.status().message();
  ASSERT_TRUE((*run)->live()) << ((*run)->warnings().empty() ? "" : (*run)->warnings()[0]);
  const auto env = (*run)->JobEnvironment();
  ASSERT_EQ(env.size(), 2u);
  EXPECT_EQ(env[0].first, "PERFTRACKER_SOCKET");
  struct stat st {};
  EXPECT_EQ(::stat(env[0].second.c_str(), &st), 0) << env[0].second;
  EXPECT_EQ(env[1], std::make_pair(std::string("PERFTRACKER_RUN_ID"), o.run_id));
  (*run)->Finish(0);
  EXPECT_NE(::stat(env[0].second.c_str(), &st), 0) << "the socket's directory is removed";
  EXPECT_EQ((*run)->FinalSummary(),
            "perftracker: no window was taken: the job ran without a slowdown or hang trigger\n"
            "perftracker: no rank reported a training iteration: the detector learns the loop "
            "from DataLoader next() and optimizer.step() (a loop without them can call "
            "perftracker.step() once per iteration); --trigger-at-seconds takes a window "
            "anyway\n");
  EXPECT_TRUE(fs::exists(dir_ / "runs.db"));
}

TEST_F(EmbeddedRunTest, AStoreThatCannotBeOpenedIsOneLineNamingTheOption) {
  EmbeddedRunOptions o = Options();
  o.store = (dir_ / "no-such-dir" / "runs.db").string();
  StatusOr<std::unique_ptr<EmbeddedRun>> run = EmbeddedRun::Start(o);
  ASSERT_FALSE(run.ok());
  const std::string& message = run.status().message();
  EXPECT_EQ(message.rfind("--store " + o.store + ": ", 0), 0u) << message;
  EXPECT_NE(message.find("(--store off runs without it)"), std::string::npos) << message;
  EXPECT_EQ(message.find('\n'), std::string::npos) << message;
}

}  // namespace
}  // namespace perftracker
