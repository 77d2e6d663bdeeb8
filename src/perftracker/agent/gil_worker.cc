#include "perftracker/agent/gil_worker.h"

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <chrono>

namespace perftracker {

GilWorker::~GilWorker() {
  // Stop() must have been called (joining here could deadlock on the GIL); a still
  // joinable thread is only possible in a forked child, where the object is leaked.
}

void GilWorker::Start() {
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
  for (;;) {
    std::shared_ptr<Task> task;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
      if (stop_) {
        for (auto& t : queue_) t->done = true;
        queue_.clear();
        cv_.notify_all();
        return;
      }
      task = std::move(queue_.front());
      queue_.pop_front();
    }
    const PyGILState_STATE gil = PyGILState_Ensure();
    try {
      task->fn();
    } catch (...) {  // no exception crosses the thread
    }
    if (PyErr_Occurred()) PyErr_Clear();
    PyGILState_Release(gil);
    {
      std::lock_guard<std::mutex> lock(mu_);
      task->done = true;
    }
    cv_.notify_all();
  }
}

}  // namespace perftracker
