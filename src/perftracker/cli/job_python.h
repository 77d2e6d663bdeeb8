// JobPython: which perftracker agent `perftracker run` gives a job, found in the job's own
// Python. The job's interpreter is its command's program when that is a Python, else the
// interpreter on the program's "#!" line (torchrun and every other console script of a venv
// or conda env). The interpreter is asked (one short `python -c`) whether it can import
// perftracker._agent (the agent was pip-installed into it: docs/live-mode.md) and which
// extension suffix it loads. Then:
//  - installed: the job gets <package>/_boot on PYTHONPATH (its sitecustomize starts the
//    agent; the interpreter imports the package from its own site-packages);
//  - not installed, and the build tree's agent fits the interpreter (same extension suffix),
//    or the job's interpreter is not known: the build tree's python/ (as before);
//  - not installed and the build tree's does not fit: no agent, and one line saying what to
//    install.
#pragma once

#include <string>
#include <vector>

namespace perftracker {

struct JobAgent {
  enum class From { kBuildTree, kJobPython, kNone };
  From from = From::kBuildTree;
  std::string boot_dir;  // kJobPython: <package>/_boot, for the job's PYTHONPATH
  std::string message;   // kNone: one line for the user (the job runs without an agent)
};

// The job's Python interpreter (a path), or "" when the command does not run one directly.
std::string JobPython(const std::vector<std::string>& command);

// The agent for `command`. `build_python_dir` is the build tree's python/ directory (holds
// perftracker/_agent<suffix>.so and perftracker/_boot/), `source_dir` the checkout the
// install hint names.
JobAgent LocateJobAgent(const std::vector<std::string>& command,
                        const std::string& build_python_dir, const std::string& source_dir);

}  // namespace perftracker
