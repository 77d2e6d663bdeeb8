#include "perftracker/agent/gpu_tracing.h"

#include <unistd.h>

#include <cstdio>
#include <utility>

#ifdef PERFTRACKER_HAVE_CUPTI
#include "perftracker/sources/cupti/cupti_activity_tracer.h"
#include "perftracker/sources/cupti/cupti_api.h"
#include "perftracker/sources/cupti/cupti_shm_sink.h"
#endif

namespace perftracker {
namespace {

void Say(const std::string& line) { std::fprintf(stderr, "perftracker agent: %s\n", line.c_str()); }

}  // namespace

#ifdef PERFTRACKER_HAVE_CUPTI
struct GpuTracing::Impl {
  std::unique_ptr<CuptiShmSink> sink;
  std::unique_ptr<CuptiActivityTracer> tracer;
  bool active = false;
};
#else
struct GpuTracing::Impl {};
#endif

GpuTracing::GpuTracing(std::string agent_shm_path, int32_t rank)
    : path_(std::move(agent_shm_path) + "-cupti"), rank_(rank) {}

// CUPTI may hold our callbacks until End(): the agent ends tracing before it lets go of this.
GpuTracing::~GpuTracing() { End(); }

bool GpuTracing::Built() {
#ifdef PERFTRACKER_HAVE_CUPTI
  return true;
#else
  return false;
#endif
}

bool GpuTracing::Begin(const std::string& library, const std::string& hint) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!stats_.available) return false;
#ifdef PERFTRACKER_HAVE_CUPTI
  if (impl_ == nullptr) {
    auto sink = CuptiShmSink::Create(path_, rank_);
    if (!sink.ok()) {
      Say("GPU tracing is off: " + sink.status().message());
      stats_.available = false;
      return false;
    }
    impl_ = std::make_unique<Impl>();
    impl_->sink = std::move(sink.value());
    CuptiShmSink* out = impl_->sink.get();
    auto api = LoadCuptiApi(library, hint);
    if (!api.ok() && !library.empty()) api = LoadCuptiApi("", hint);  // a wrong explicit path
    impl_->tracer =
        api.ok() ? std::make_unique<CuptiActivityTracer>(api.value(), out->functions(), out)
                 : std::make_unique<CuptiActivityTracer>(api.status(), out->functions(), out);
  }
  if (impl_->active) return true;
  const Status enabled = impl_->tracer->Enable();  // logs its own refusals, once
  if (!enabled.ok()) {
    if (impl_->tracer->state() == CuptiTracerState::kUnavailable) stats_.available = false;
    return false;
  }
  impl_->active = true;
  ++stats_.windows;
  return true;
#else
  (void)library;
  (void)hint;
  if (!said_not_built_) {
    said_not_built_ = true;
    Say("this process uses CUDA but the agent was built without CUPTI headers: no GPU kernel "
        "tracing (rebuild with the CUDA toolkit's CUPTI, see docs/gpu-sources.md)");
  }
  stats_.available = false;
  return false;
#endif
}

void GpuTracing::End() {
  std::lock_guard<std::mutex> lock(mu_);
#ifdef PERFTRACKER_HAVE_CUPTI
  if (impl_ == nullptr || !impl_->active) return;
  impl_->tracer->Disable();  // forced flush: every record is in the file when this returns
  impl_->active = false;
  stats_.events = impl_->sink->events();
#endif
}

bool GpuTracing::YieldTo(const std::string& who) {
  std::lock_guard<std::mutex> lock(mu_);
#ifdef PERFTRACKER_HAVE_CUPTI
  if (impl_ == nullptr || !impl_->active) return false;
  impl_->tracer->Disable();  // forced flush, then unsubscribe: the same as the window's end
  impl_->active = false;
  stats_.events = impl_->sink->events();
  ++stats_.yields;
  if (!said_yield_) {
    said_yield_ = true;
    Say(who +
        " started during a window: GPU tracing stopped for the rest of the window so "
        "that " +
        who + " gets CUPTI");
  }
  return true;
#else
  (void)who;
  return false;
#endif
}

void GpuTracing::RemoveFile() {
  std::lock_guard<std::mutex> lock(mu_);
  if (impl_ != nullptr) unlink(path_.c_str());
}

void GpuTracing::SkipBecause(const std::string& reason) {
  std::lock_guard<std::mutex> lock(mu_);
  if (said_skip_.insert(reason).second) Say("GPU tracing skipped for this window: " + reason);
}

GpuTracingStats GpuTracing::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

}  // namespace perftracker
