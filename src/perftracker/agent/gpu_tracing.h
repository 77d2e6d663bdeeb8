// GpuTracing: the agent's CUPTI tracing, switched on for the profiling windows of a process
// that uses CUDA (docs/gpu-sources.md, "CUPTI").
//
// What it owns, created at the first Begin() and kept for the life of the process (CUPTI's
// callbacks are process-global; nothing is destroyed while CUPTI may still call in):
//   CuptiShmSink          /dev/shm/<agent file>-cupti: the agent's format, its own function
//                         table and ring (CUPTI's worker thread never writes the agent's file)
//   CuptiActivityTracer   subscribe + activity kinds on Begin(), disable + forced flush +
//                         unsubscribe on End(): every record is in the file when End() returns
//
// When it traces: the agent asks Python first (GpuProbe in agent.py): only when torch has
// initialized CUDA in this process (a CPU job never loads libcupti) and torch.profiler is not
// recording (CUPTI has one subscriber; the tracer also backs off by itself when another client
// holds it). Every refusal is said once per process (stderr, "perftracker agent: ...") and the
// window goes on with the Python-level events only. The other order, a torch.profiler that
// starts while a window traces: the agent's hook on torch's profiler preparation calls
// YieldTo() before Kineto initializes CUPTI, which ends the window's tracing early (flushed,
// unsubscribed) so that the user's profile keeps its GPU activities.
//
// Threads: Begin() and End() may take a while (CUPTI initializes on the first subscribe; the
// flush waits for the device) and are called without the GIL and without the agent's window
// lock; a mutex serializes them. Built without CUPTI headers, it is an empty shell that says so
// once.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <set>
#include <string>

namespace perftracker {

struct GpuTracingStats {
  uint64_t windows = 0;   // windows traced
  uint64_t events = 0;    // events written to the -cupti file, over all windows
  uint64_t yields = 0;    // windows whose tracing ended early for another CUPTI client (YieldTo)
  bool available = true;  // false once libcupti or CUPTI itself was found missing
};

class GpuTracing {
 public:
  // `agent_shm_path`: the agent's file; the tracer's is agent_shm_path + "-cupti".
  GpuTracing(std::string agent_shm_path, int32_t rank);
  ~GpuTracing();
  GpuTracing(const GpuTracing&) = delete;
  GpuTracing& operator=(const GpuTracing&) = delete;

  // Window start. `library`: the libcupti the user named (PERFTRACKER_CUPTI_LIBRARY); else
  // LoadCuptiApi's order with `hint` (torch's wheel's copy). False when nothing is traced
  // (the reason was logged once).
  bool Begin(const std::string& library = "", const std::string& hint = "");
  // Window end (or exit): no-op unless Begin() succeeded.
  void End();
  // Another CUPTI client is about to start (`who`: torch.profiler preparing its Kineto
  // session) while a window traces: tracing ends now exactly as at the window's end (what
  // CUPTI recorded so far is flushed into the -cupti file, the subscription released), so
  // that the other client finds CUPTI free; the rest of the window has no GPU data. Said once
  // per process, counted (`yields`). True when a window's tracing was ended; false (nothing
  // done) when none was on. Waits for a Begin() or End() in progress.
  bool YieldTo(const std::string& who);
  // The -cupti file is removed (the creating process, at exit).
  void RemoveFile();

  // Why GPU tracing is skipped for a window (Python's verdict), said once per reason.
  void SkipBecause(const std::string& reason);

  static bool Built();  // CUPTI headers were found at build time
  GpuTracingStats stats() const;
  std::string path() const { return path_; }

 private:
  struct Impl;
  std::string path_;
  int32_t rank_;
  mutable std::mutex mu_;
  std::unique_ptr<Impl> impl_;
  bool said_not_built_ = false;
  bool said_yield_ = false;
  std::set<std::string> said_skip_;
  GpuTracingStats stats_;
};

}  // namespace perftracker
