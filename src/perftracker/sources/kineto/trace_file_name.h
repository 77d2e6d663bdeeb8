// What a trace file's name says about the process that wrote it, for traces that do not say
// their rank.
//
// torch.profiler.tensorboard_trace_handler(dir, worker_name=None) writes one file per
// profiling cycle, named "<worker_name>.<time>.pt.trace.json" (".gz" with use_gzip), where
// worker_name defaults to "<hostname>_<pid>" and <time> is the wall clock (torch 1.13:
// milliseconds; torch 2.x: nanoseconds). Its traces carry the rank only in distributedInfo,
// which torch writes only with Kineto and an initialized process group: torch 1.13 built
// without Kineto (Debian's, CPU-only) writes a bare list of events and no rank, and any
// torch writes none for processes that never called init_process_group.
#pragma once

#include <cstdint>
#include <string>

namespace perftracker {

struct TraceFileName {
  std::string base;  // the file's base name
  // tensorboard_trace_handler's worker_name, when the name has its shape; else empty.
  std::string worker;
  // From a default worker_name ("<hostname>_<pid>"): the host and the process id; else empty
  // and -1.
  std::string host;
  int64_t pid = -1;
  // The worker where there is one, else the base name: what a report calls the file.
  std::string Label() const { return worker.empty() ? base : worker; }
};

TraceFileName ParseTraceFileName(const std::string& path);

// Natural order: runs of digits compare as numbers ("host_999" < "host_1000",
// "node2" < "node10"), the rest byte by byte; a tie (e.g. "007" and "7") is broken by the
// plain byte order, so the order is total.
bool NaturalLess(const std::string& a, const std::string& b);

}  // namespace perftracker
