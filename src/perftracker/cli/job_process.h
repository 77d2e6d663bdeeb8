// The job's process under `perftracker run`: spawned in a process group of its own with
// this process' environment plus `env`; SIGINT, SIGTERM, SIGHUP and SIGQUIT are forwarded to
// that group (until this process exits, so that workers of a launcher that died are still
// reached); on a terminal the job is the foreground group, and Ctrl-Z stops both.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace perftracker {

// Runs `command` and waits for it. Returns its exit code (128 + N when a signal N ended
// it), or 127 after one line on stderr when it cannot be started.
int RunJobProcess(const std::vector<std::string>& command,
                  const std::vector<std::pair<std::string, std::string>>& env);

}  // namespace perftracker
