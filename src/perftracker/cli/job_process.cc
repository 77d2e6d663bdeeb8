#include "perftracker/cli/job_process.h"

#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <iterator>
#include <string_view>

#include <fmt/core.h>

extern char** environ;  // NOLINT(readability-identifier-naming): POSIX

namespace perftracker {
namespace {

constexpr int kForwardedSignals[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT};

// The job's process group, for the signal handler (0 = no job yet).
std::atomic<pid_t> g_job_pgid{0};

void ForwardSignal(int sig) {
  const pid_t pgid = g_job_pgid.load();
  if (pgid > 0) kill(-pgid, sig);  // async-signal-safe
}

// environ plus `set` (replacing variables of the same name).
std::vector<std::string> ChildEnvironment(
    const std::vector<std::pair<std::string, std::string>>& set) {
  std::vector<std::string> env;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    const std::string_view entry(*e);
    bool replaced = false;
    for (const auto& [name, value] : set) {
      if (entry.size() > name.size() && entry.starts_with(name) && entry[name.size()] == '=') {
        replaced = true;
      }
    }
    if (!replaced) env.emplace_back(entry);
  }
  for (const auto& [name, value] : set) env.push_back(name + "=" + value);
  return env;
}

// Spawns the job in its own process group with the default disposition of the signals this
// process handles or ignores. Returns the pid, or -errno.
pid_t SpawnJob(const std::vector<std::string>& command, const std::vector<std::string>& env,
               const sigset_t& child_mask) {
  std::vector<char*> argv;
  for (const auto& a : command) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  std::vector<char*> envp;
  for (const auto& e : env) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);

  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t defaults;
  sigemptyset(&defaults);
  for (int sig : kForwardedSignals) sigaddset(&defaults, sig);
  sigaddset(&defaults, SIGPIPE);
  posix_spawnattr_setsigdefault(&attr, &defaults);
  posix_spawnattr_setsigmask(&attr, &child_mask);
  posix_spawnattr_setpgroup(&attr, 0);
  posix_spawnattr_setflags(&attr,
                           POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETSIGMASK);
  pid_t pid = 0;
  const int rc = posix_spawnp(&pid, argv[0], nullptr, &attr, argv.data(), envp.data());
  posix_spawnattr_destroy(&attr);
  return rc == 0 ? pid : -rc;
}

// Makes this process's group the terminal's foreground group again (from a background
// group tcsetpgrp raises SIGTTOU: ignored meanwhile).
void TakeTerminal() {
  struct sigaction ignore {};
  struct sigaction old_ttou {};
  ignore.sa_handler = SIG_IGN;
  sigemptyset(&ignore.sa_mask);
  sigaction(SIGTTOU, &ignore, &old_ttou);
  tcsetpgrp(STDIN_FILENO, getpgrp());
  sigaction(SIGTTOU, &old_ttou, nullptr);
}

}  // namespace

int RunJobProcess(const std::vector<std::string>& command,
                  const std::vector<std::pair<std::string, std::string>>& env) {
  // Signals: blocked around the spawn so that none is lost before the job's pgid is known;
  // the job starts with the caller's mask and default dispositions.
  sigset_t forwarded;
  sigemptyset(&forwarded);
  for (int sig : kForwardedSignals) sigaddset(&forwarded, sig);
  sigset_t old_mask;
  pthread_sigmask(SIG_BLOCK, &forwarded, &old_mask);
  struct sigaction sa {};
  sa.sa_handler = ForwardSignal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  struct sigaction old_actions[std::size(kForwardedSignals)];
  for (size_t i = 0; i < std::size(kForwardedSignals); ++i) {
    sigaction(kForwardedSignals[i], &sa, &old_actions[i]);
  }
  signal(SIGPIPE, SIG_IGN);

  const pid_t pid = SpawnJob(command, ChildEnvironment(env), old_mask);
  if (pid > 0) g_job_pgid = pid;
  // On a terminal, the job becomes the foreground process group (as a shell would make
  // it): Ctrl-C and Ctrl-Z reach it directly, and it may read the terminal.
  const bool terminal =
      pid > 0 && isatty(STDIN_FILENO) == 1 && tcgetpgrp(STDIN_FILENO) == getpgrp();
  if (terminal) tcsetpgrp(STDIN_FILENO, pid);
  pthread_sigmask(SIG_SETMASK, &old_mask, nullptr);

  int exit_code = 0;
  if (pid < 0) {
    fmt::print(stderr, "perftracker run: cannot run '{}': {}\n", command[0],
               std::strerror(static_cast<int>(-pid)));
    exit_code = 127;
  } else {
    int status = 0;
    for (;;) {
      if (waitpid(pid, &status, WUNTRACED) < 0) {
        if (errno == EINTR) continue;
        break;
      }
      if (!WIFSTOPPED(status)) break;
      // Ctrl-Z stopped the job: stop too, so that the shell sees a stopped job; on `fg`
      // hand the terminal back to the job and continue it.
      if (terminal) TakeTerminal();
      kill(getpid(), SIGSTOP);
      if (terminal && tcgetpgrp(STDIN_FILENO) == getpgrp()) tcsetpgrp(STDIN_FILENO, pid);
      kill(-pid, SIGCONT);
    }
    if (WIFEXITED(status)) {
      exit_code = WEXITSTATUS(status);
    } else if (WIFSIGNALED(status)) {
      exit_code = 128 + WTERMSIG(status);
    }
  }
  if (terminal) TakeTerminal();
  // The job's process group may live on (workers of a launcher that died): signals that
  // arrive from now on are still forwarded until we exit.

  return exit_code;
}

}  // namespace perftracker
