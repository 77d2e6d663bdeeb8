#include "perftracker/agent/gil_worker.h"

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <chrono>

#include "perftracker/agent/fork_gate.h"

namespace perftracker {

GilWorker::~GilWorker() {
  // Stop() must have been called (joining here could deadlock on the GIL); a still
  // joinable thread is only possible in a forked child, where the object is leaked.
}

void GilWorker::Start() {
  interp_ = PyInterpreterState_Get();  // Start() runs with the GIL held
  thread_ = std::thread([this] { Run(); });
  // Keeps the GIL while the worker makes its thread state (microseconds; it needs no GIL), so
  // that no fork made from Python can happen meanwhile: see Run().
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return has_thread_state_; });
}

std::shared_ptr<GilWorker::Task> GilWorker::Submit(std::function<void()> fn) {
  auto task = std::make_shared<Task>();
  task->fn = std::move(fn);
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stop_) {
      task->done = true;
      return task;
    }
    queue_.push_back(task);
  }
  cv_.notify_all();
  return task;
}

bool GilWorker::Wait(const std::shared_ptr<Task>& task, int64_t timeout_ns) {
  std::unique_lock<std::mutex> lock(mu_);
  return cv_.wait_for(lock, std::chrono::nanoseconds(timeout_ns), [&] { return task->done; });
}

void GilWorker::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void GilWorker::Run() {
  // This thread's PyThreadState, kept until the thread ends: PyThreadState_New marks it as
  // the thread's own (PyGILState_Release never deletes it), so each task below only takes and
  // releases the GIL and never touches the thread list without it.
  //
  // Making it takes the interpreter's thread-list lock (HEAD_LOCK) without the GIL, and a
  // fork must never happen while this thread holds that lock: CPython 3.10-3.12 take it in
  // the child (PyOS_AfterFork_Child) before re-creating it, so the child would wait forever
  // for a lock its parent's thread held (gh-112275; a DataLoader worker hung). Start() keeps
  // the GIL until the state is made, and every fork whose child runs PyOS_AfterFork_Child is
  // made by the GIL's holder (os.fork, subprocess's preexec_fn), so none can happen
  // meanwhile. No lock of ours is held here: the agent's fix before this one made the state
  // under a mutex that fork()'s prepare handler (pthread_atfork) took, and CPython 3.13's
  // PyOS_BeforeFork takes HEAD_LOCK *before* fork() runs those handlers (3.10-3.12 take only
  // the import lock there), so the job's forking thread waited for our mutex while this
  // thread, holding it, waited for HEAD_LOCK: the job hung in os.fork (agent_python3.13).
  PyThreadState* tstate = PyThreadState_New(static_cast<PyInterpreterState*>(interp_));
  {
    std::lock_guard<std::mutex> lock(mu_);
    has_thread_state_ = true;
  }
  cv_.notify_all();
  // Busy for ForkGate only while it handles a task without the GIL (queue, std::function):
  // never while it waits for a task or for the GIL (a forking thread holds the GIL). With
  // the GIL held it cannot race a fork made from Python.
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
    }
    ForkGate::Section busy;
    std::shared_ptr<Task> task;  // after `busy`: freed inside the busy stretch
    {
      std::lock_guard<std::mutex> lock(mu_);  // only this thread pops: the queue is not empty
      if (stop_) {
        for (auto& t : queue_) t->done = true;
        queue_.clear();
        cv_.notify_all();
        break;
      }
      task = std::move(queue_.front());
      queue_.pop_front();
    }
    {
      ForkGate::Pause with_gil;
      const PyGILState_STATE gil = PyGILState_Ensure();
      try {
        task->fn();
      } catch (...) {  // no exception crosses the thread
      }
      if (PyErr_Occurred()) PyErr_Clear();
      PyGILState_Release(gil);
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      task->done = true;
    }
    cv_.notify_all();
  }
  // Stop() is called without the GIL and before the interpreter finalizes.
  if (tstate != nullptr) {
    PyEval_RestoreThread(tstate);
    PyThreadState_Clear(tstate);
    PyThreadState_DeleteCurrent();
  }
}

}  // namespace perftracker
