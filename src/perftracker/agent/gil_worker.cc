#include "perftracker/agent/gil_worker.h"

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <pthread.h>

#include <chrono>

#include "perftracker/agent/fork_gate.h"

namespace perftracker {
namespace {

// CPython up to 3.11 (gh-112275): a child forked while another thread holds the
// interpreter's thread-list lock (HEAD_LOCK) waits on that lock forever in
// PyOS_AfterFork_Child, which takes it before it re-creates it. A thread without a
// PyThreadState takes the lock WITHOUT the GIL when it creates one (PyGILState_Ensure does),
// so it can hold it while the GIL's holder forks: a DataLoader forking its workers right
// after init_process_group started the agent hung in a worker on a loaded machine. The worker
// creates its thread state once, under this mutex, which fork() takes first (pthread_atfork):
// a fork waits the few microseconds the creation takes, which needs no GIL.
std::mutex& ThreadStateCreationMutex() {
  static std::mutex* mu = new std::mutex();  // leaked: fork handlers outlive static destructors
  return *mu;
}
void LockBeforeFork() { ThreadStateCreationMutex().lock(); }
void UnlockAfterFork() { ThreadStateCreationMutex().unlock(); }

}  // namespace

GilWorker::~GilWorker() {
  // Stop() must have been called (joining here could deadlock on the GIL); a still
  // joinable thread is only possible in a forked child, where the object is leaked.
}

void GilWorker::Start() {
  static const bool fork_handlers_registered =
      pthread_atfork(&LockBeforeFork, &UnlockAfterFork, &UnlockAfterFork) == 0;
  (void)fork_handlers_registered;
  interp_ = PyInterpreterState_Get();  // Start() runs with the GIL held
  thread_ = std::thread([this] { Run(); });
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
  PyThreadState* tstate = nullptr;
  {
    std::lock_guard<std::mutex> fork_guard(ThreadStateCreationMutex());
    tstate = PyThreadState_New(static_cast<PyInterpreterState*>(interp_));
  }
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
