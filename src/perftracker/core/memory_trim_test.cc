#include "perftracker/core/memory_trim.h"

#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

namespace perftracker {
namespace {

// The first trims of a process, from several threads at once: the diagnosis pipeline's
// per-file workers each trim after their file (CI at 836bb50: ASan SEGV in glibc's mtrim, in a
// ParallelFor worker). Each trial is a fresh child forked from this single-threaded test, so
// glibc's arena is as untouched as at a process's start (under ASan, or with tcmalloc /
// jemalloc preloaded, it is never initialized before the first trim). With raw malloc_trim(0)
// 1-4 % of trials crashed (SEGV in mtrim, or glibc's "a->attached_threads > 0" assertion).
TEST(MemoryTrimTest, FirstTrimsFromManyThreadsAtOnceDoNotCrash) {
  constexpr int kTrials = 1000;
  constexpr int kThreads = 4;
  int failed = 0;
  int first_status = 0;
  for (int t = 0; t < kTrials; ++t) {
    const pid_t pid = fork();
    ASSERT_GE(pid, 0) << "fork failed";
    if (pid == 0) {
      std::atomic<bool> go{false};
      std::vector<std::thread> threads;
      for (int i = 0; i < kThreads; ++i) {
        threads.emplace_back([&go] {
          while (!go.load()) {
          }
          ReturnFreedMemoryToSystem();
        });
      }
      go = true;
      for (std::thread& th : threads) th.join();
      _exit(0);
    }
    int status = 0;
    ASSERT_EQ(waitpid(pid, &status, 0), pid);
    if (!(WIFEXITED(status) && WEXITSTATUS(status) == 0)) {
      if (failed++ == 0) first_status = status;
    }
  }
  EXPECT_EQ(failed, 0) << failed << " of " << kTrials
                       << " children died in their first concurrent trims (first wait status "
                       << first_status << ")";
}

}  // namespace
}  // namespace perftracker
