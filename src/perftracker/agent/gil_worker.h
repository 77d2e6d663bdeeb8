// GilWorker: one background thread that runs the agent's tasks needing the GIL (installing
// and removing the profile hook, dumping Python stacks), so that the control thread never
// waits for the GIL itself: it submits a task and, when it needs the answer, waits with a
// timeout (a thread that holds the GIL forever makes the task late, never the agent stuck).
//
// Lifetime: Start() after the interpreter is up; Stop() joins the thread and must be called
// WITHOUT the GIL held (the worker may be waiting for it), before the interpreter finalizes
// (the agent does it from atexit). Tasks still queued at Stop() are dropped.
// Fork safety: the worker creates its Python thread state once, while Start()'s caller keeps
// the GIL so that no fork from Python can interrupt it (see gil_worker.cc), and keeps it
// until Stop(). It handles a task without the
// GIL only inside a ForkGate busy stretch (fork_gate.h).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>

namespace perftracker {

class GilWorker {
 public:
  struct Task {
    std::function<void()> fn;
    bool done = false;  // guarded by GilWorker::mu_
  };

  GilWorker() = default;
  ~GilWorker();
  GilWorker(const GilWorker&) = delete;
  GilWorker& operator=(const GilWorker&) = delete;

  void Start();
  // Queues `fn` to run with the GIL held; exceptions it throws are swallowed.
  std::shared_ptr<Task> Submit(std::function<void()> fn);
  // Waits until `task` ran; false on timeout.
  bool Wait(const std::shared_ptr<Task>& task, int64_t timeout_ns);
  void Stop();  // GIL must NOT be held by the caller

 private:
  void Run();

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::shared_ptr<Task>> queue_;
  bool stop_ = false;
  bool has_thread_state_ = false;  // the worker made its PyThreadState (Start() waits for it)
  std::thread thread_;
  void* interp_ = nullptr;  // the PyInterpreterState of Start()'s caller
};

}  // namespace perftracker
