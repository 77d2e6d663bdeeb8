#include "perftracker/cli/job_python.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace perftracker {
namespace fs = std::filesystem;

namespace {

bool LooksLikePython(const std::string& path) {
  return fs::path(path).filename().string().starts_with("python");
}

// `name` as execvp would find it ("" when not found).
std::string Resolve(const std::string& name) {
  if (name.find('/') != std::string::npos) return access(name.c_str(), X_OK) == 0 ? name : "";
  const char* path = std::getenv("PATH");
  std::stringstream dirs(path != nullptr ? path : "/usr/local/bin:/usr/bin:/bin");
  for (std::string dir; std::getline(dirs, dir, ':');) {
    const std::string candidate = (fs::path(dir.empty() ? "." : dir) / name).string();
    if (access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  return "";
}

std::string ShellQuote(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

struct Probe {
  bool ok = false;
  std::string package_dir;  // where perftracker/_agent*.so was found; "" when not importable
  std::string ext_suffix;   // e.g. ".cpython-312-x86_64-linux-gnu.so"
  std::string version;      // "3.12"
};

Probe AskPython(const std::string& python) {
  static constexpr const char* kScript =
      "import importlib.util as u, os, sys, sysconfig\n"
      "try:\n"
      "    s = u.find_spec('perftracker._agent')\n"
      "except Exception:\n"
      "    s = None\n"
      "print(os.path.dirname(s.origin) if s is not None and s.origin else '')\n"
      "print(sysconfig.get_config_var('EXT_SUFFIX') or '')\n"
      "print('%d.%d' % sys.version_info[:2])\n";
  Probe p;
  const std::string cmd =
      ShellQuote(python) + " -c " + ShellQuote(kScript) + " 2>/dev/null </dev/null";
  FILE* f = popen(cmd.c_str(), "r");
  if (f == nullptr) return p;
  std::string out;
  char buf[4096];
  for (size_t n; (n = fread(buf, 1, sizeof(buf), f)) > 0;) out.append(buf, n);
  if (pclose(f) != 0) return p;
  std::stringstream lines(out);
  std::getline(lines, p.package_dir);
  std::getline(lines, p.ext_suffix);
  p.ok = static_cast<bool>(std::getline(lines, p.version));
  return p;
}

}  // namespace

std::string JobPython(const std::vector<std::string>& command) {
  if (command.empty()) return "";
  const std::string program = Resolve(command[0]);
  if (program.empty()) return "";
  if (LooksLikePython(program)) return program;
  std::ifstream in(program);
  std::string first;
  if (!std::getline(in, first) || !first.starts_with("#!")) return "";
  std::stringstream words(first.substr(2));
  std::string interpreter;
  words >> interpreter;
  if (fs::path(interpreter).filename() == "env") {
    while (words >> interpreter && interpreter.starts_with("-")) {
    }
    interpreter = Resolve(interpreter);
  }
  return !interpreter.empty() && LooksLikePython(interpreter) ? interpreter : "";
}

JobAgent LocateJobAgent(const std::vector<std::string>& command,
                        const std::string& build_python_dir, const std::string& source_dir) {
  JobAgent agent;
  const std::string python = JobPython(command);
  const Probe probe = python.empty() ? Probe{} : AskPython(python);
  if (!probe.ok) return agent;  // the job's Python is not known: the build tree's agent
  std::error_code ec;
  if (!probe.package_dir.empty() &&
      fs::exists(fs::path(probe.package_dir) / "_boot" / "sitecustomize.py", ec)) {
    agent.from = JobAgent::From::kJobPython;
    agent.boot_dir = (fs::path(probe.package_dir) / "_boot").string();
    return agent;
  }
  if (!build_python_dir.empty() &&
      fs::exists(fs::path(build_python_dir) / "perftracker" / ("_agent" + probe.ext_suffix), ec)) {
    return agent;
  }
  agent.from = JobAgent::From::kNone;
  agent.message = "the job's Python (" + python + ", " + probe.version +
                  ") has no perftracker agent; install it with: " + python +
                  " -m pip install --no-build-isolation " + source_dir +
                  " (running the job without the agent)";
  return agent;
}

}  // namespace perftracker
