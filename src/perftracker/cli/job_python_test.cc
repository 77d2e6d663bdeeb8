// Which agent `perftracker run` gives a job: the job's interpreter from its command (a
// Python, or a script's "#!" line) and what that interpreter says it has installed. Fake
// interpreters (shell scripts named python3.x) answer the probe.
#include "perftracker/cli/job_python.h"

#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include <gtest/gtest.h>

namespace perftracker {
namespace {
namespace fs = std::filesystem;

class JobPythonTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/perftracker-job-python-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string Write(const std::string& name, const std::string& text, bool exec = true) {
    const fs::path p = dir_ / name;
    fs::create_directories(p.parent_path());
    std::ofstream(p) << text;
    if (exec) chmod(p.c_str(), 0755);
    return p.string();
  }
  // A fake interpreter that answers the probe with (package dir, extension suffix, version).
  std::string FakePython(const std::string& name, const std::string& package_dir,
                         const std::string& suffix) {
    return Write(
        name, "#!/bin/sh\nprintf '%s\\n%s\\n%s\\n' '" + package_dir + "' '" + suffix + "' 3.12\n");
  }

  fs::path dir_;
};

TEST_F(JobPythonTest, TheInterpreterIsTheProgramOrTheOneOnItsShebangLine) {
  const std::string py = FakePython("venv/bin/python3.12", "", ".so");
  EXPECT_EQ(JobPython({py, "train.py"}), py);
  const std::string torchrun = Write("venv/bin/torchrun", "#!" + py + "\nimport sys\n");
  EXPECT_EQ(JobPython({torchrun, "--nproc_per_node", "2", "train.py"}), py);
  const std::string env_script = Write("venv/bin/tool", "#!/usr/bin/env -S " + py + "\n");
  EXPECT_EQ(JobPython({env_script}), py);
  const std::string shell = Write("run.sh", "#!/bin/sh\nexec python3 train.py\n");
  EXPECT_EQ(JobPython({shell}), "");
  EXPECT_EQ(JobPython({"sh", "-c", "true"}), "");
  EXPECT_EQ(JobPython({(dir_ / "missing-python3").string()}), "");
}

TEST_F(JobPythonTest, AnAgentInstalledInTheJobsPythonIsUsed) {
  const std::string pkg = (dir_ / "venv/lib/python3.12/site-packages/perftracker").string();
  Write("venv/lib/python3.12/site-packages/perftracker/_boot/sitecustomize.py", "", false);
  const std::string py = FakePython("venv/bin/python3", pkg, ".cpython-312-x86_64-linux-gnu.so");
  const JobAgent a = LocateJobAgent({py, "train.py"}, "/nonexistent/build/python", "/src");
  EXPECT_EQ(a.from, JobAgent::From::kJobPython);
  EXPECT_EQ(a.boot_dir, pkg + "/_boot");
}

TEST_F(JobPythonTest, TheBuildTreesAgentIsUsedWhenItFitsTheJobsPython) {
  Write("build/python/perftracker/_agent.cpython-312-x86_64-linux-gnu.so", "", false);
  const std::string py = FakePython("bin/python3", "", ".cpython-312-x86_64-linux-gnu.so");
  EXPECT_EQ(LocateJobAgent({py}, (dir_ / "build/python").string(), "/src").from,
            JobAgent::From::kBuildTree);
  // A command that is not a Python (a shell script): the build tree's, as before.
  EXPECT_EQ(LocateJobAgent({"sh", "-c", "true"}, "/nonexistent", "/src").from,
            JobAgent::From::kBuildTree);
}

TEST_F(JobPythonTest, AJobPythonWithoutAnAgentGetsOneLineSayingWhatToInstall) {
  Write("build/python/perftracker/_agent.cpython-311-x86_64-linux-gnu.so", "", false);
  const std::string py = FakePython("bin/python3.12", "", ".cpython-312-x86_64-linux-gnu.so");
  const JobAgent a = LocateJobAgent({py, "train.py"}, (dir_ / "build/python").string(), "/src");
  EXPECT_EQ(a.from, JobAgent::From::kNone);
  EXPECT_EQ(a.message.find('\n'), std::string::npos);
  EXPECT_NE(a.message.find(py + " -m pip install --no-build-isolation /src"), std::string::npos)
      << a.message;
  EXPECT_NE(a.message.find("3.12"), std::string::npos) << a.message;
}

}  // namespace
}  // namespace perftracker
