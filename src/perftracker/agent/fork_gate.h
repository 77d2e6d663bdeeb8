// ForkGate: the agent's own threads (control thread, GIL worker) stand still while the job
// forks, so that a forked child never inherits a lock one of them held halfway: the lock of
// a memory allocator without fork handlers above all. gcc 12's AddressSanitizer takes no
// allocator lock around fork(), so a child forked while an agent thread was inside malloc
// waited forever on that lock (seen in agent_python_test; agent_fork_test reproduces it).
// glibc's malloc is fork-safe by itself; the gate costs a fork only the wait described below.
//
// Protocol. A thread marks the stretches in which it may allocate or take locks as *busy*
// (Section, or Enter/Leave), and leaves them around every blocking wait (poll, condition
// variables, the GIL). fork()'s prepare handler (pthread_atfork) raises `pending`, then waits
// until no thread is busy; a thread that enters while `pending` is up steps back and waits
// for the fork to finish (the parent's and the child's handlers lower it). Both sides use
// sequentially consistent operations on two atomics (a store, then a load of the other's),
// so a thread can never be inside a busy stretch unseen by the forker.
//
// Never blocks the job for long: the prepare handler waits at most kMaxWaitNs (a busy
// stretch is one unit of work, microseconds; only a thread descheduled or blocked inside one
// makes a fork wait longer), then lets the fork go on exactly as without the gate (counted
// in timed_out()). A thread that dies leaves its stretch as the stack unwinds (Section). Threads
// that are not the agent's (the job's, torch's) are not covered. In the child no agent thread
// exists: its handler resets the count.
#pragma once

#include <cstdint>

namespace perftracker {

class ForkGate {
 public:
  static constexpr int64_t kMaxWaitNs = 1'000'000'000;

  // Registers the fork handlers (once per process; later calls do nothing).
  static void Install();
  // The calling thread begins / ends a busy stretch. Enter waits while a fork is under way.
  static void Enter();
  static void Leave();
  // Inside a busy stretch: steps out for a fork under way, if any (one atomic load if none).
  // Long stretches (a flood of collector messages) call it between units of work, so that a
  // fork waits for one unit at most.
  static void Yield();
  // Forks seen by the gate since the process started, and those whose wait ran out.
  static uint64_t forks();
  static uint64_t timed_out();

  // RAII busy stretch; Pause() leaves it for a blocking wait.
  class Section {
   public:
    Section() { Enter(); }
    ~Section() { Leave(); }
    Section(const Section&) = delete;
    Section& operator=(const Section&) = delete;
  };
  class Pause {
   public:
    Pause() { Leave(); }
    ~Pause() { Enter(); }
    Pause(const Pause&) = delete;
    Pause& operator=(const Pause&) = delete;
  };
};

}  // namespace perftracker
