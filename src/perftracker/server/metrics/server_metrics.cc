#include "perftracker/server/metrics/server_metrics.h"

#include <prometheus/text_serializer.h>

#include <string>
#include <utility>

namespace perftracker {
namespace {

// Family indices for ForgetJob's bookkeeping.
enum Family : int {
  kIterationSeconds,
  kIterations,
  kTriggers,
  kWindows,
  kFindings,
  kDroppedEvents,
};

std::string_view WindowStateLabel(WindowMetricState state) {
  switch (state) {
    case WindowMetricState::kOpened:
      return "opened";
    case WindowMetricState::kDiagnosed:
      return "diagnosed";
    case WindowMetricState::kAbandoned:
      return "abandoned";
  }
  return "unknown";
}

}  // namespace

ServerMetrics::ServerMetrics() : registry_(std::make_shared<prometheus::Registry>()) {
  iteration_seconds_ = &prometheus::BuildGauge()
                            .Name("perftracker_iteration_seconds")
                            .Help("Duration of the worker's last reported iteration")
                            .Register(*registry_);
  iterations_ = &prometheus::BuildCounter()
                     .Name("perftracker_iterations_total")
                     .Help("Iterations reported by the worker")
                     .Register(*registry_);
  triggers_ = &prometheus::BuildCounter()
                   .Name("perftracker_triggers_total")
                   .Help("Window triggers received (slowdown, hang, manual)")
                   .Register(*registry_);
  windows_ = &prometheus::BuildCounter()
                  .Name("perftracker_windows_total")
                  .Help("Profiling windows by what happened to them (opened, diagnosed, abandoned)")
                  .Register(*registry_);
  findings_ = &prometheus::BuildCounter()
                   .Name("perftracker_findings_total")
                   .Help("Material findings in the job's diagnoses, by catalogue code")
                   .Register(*registry_);
  dropped_events_ = &prometheus::BuildCounter()
                         .Name("perftracker_dropped_events_total")
                         .Help("Events the worker's agent dropped because its ring was full")
                         .Register(*registry_);
  collectors_connected_ = &prometheus::BuildGauge()
                               .Name("perftracker_collectors_connected")
                               .Help("Node collectors currently connected to this server")
                               .Register(*registry_)
                               .Add({});
  http_requests_ = &prometheus::BuildCounter()
                        .Name("perftracker_http_requests_total")
                        .Help("HTTP responses by status class")
                        .Register(*registry_);
  http_unauthorized_ = &prometheus::BuildCounter()
                            .Name("perftracker_http_unauthorized_total")
                            .Help("HTTP requests refused for a missing or wrong token")
                            .Register(*registry_)
                            .Add({});
}

void ServerMetrics::Remember(const std::string& job, int family, const prometheus::Labels& labels) {
  std::lock_guard<std::mutex> lock(mu_);
  job_series_[job].emplace(family, labels);
}

void ServerMetrics::RecordIteration(const std::string& job, int32_t rank, int64_t duration_ns) {
  const prometheus::Labels labels = {{"job_id", job}, {"rank", std::to_string(rank)}};
  iteration_seconds_->Add(labels).Set(static_cast<double>(duration_ns) * 1e-9);
  iterations_->Add(labels).Increment();
  Remember(job, kIterationSeconds, labels);
}

void ServerMetrics::RecordTrigger(const std::string& job, const std::string& reason) {
  const prometheus::Labels labels = {{"job_id", job}, {"reason", reason}};
  triggers_->Add(labels).Increment();
  Remember(job, kTriggers, labels);
}

void ServerMetrics::RecordWindow(const std::string& job, WindowMetricState state) {
  const prometheus::Labels labels = {{"job_id", job},
                                     {"state", std::string(WindowStateLabel(state))}};
  windows_->Add(labels).Increment();
  Remember(job, kWindows, labels);
}

void ServerMetrics::RecordFinding(const std::string& job, const std::string& code) {
  const prometheus::Labels labels = {{"job_id", job}, {"code", code}};
  findings_->Add(labels).Increment();
  Remember(job, kFindings, labels);
}

void ServerMetrics::AddDroppedEvents(const std::string& job, int32_t rank, uint64_t count) {
  const prometheus::Labels labels = {{"job_id", job}, {"rank", std::to_string(rank)}};
  dropped_events_->Add(labels).Increment(static_cast<double>(count));
  Remember(job, kDroppedEvents, labels);
}

void ServerMetrics::CollectorConnected() { collectors_connected_->Increment(); }

void ServerMetrics::CollectorDisconnected() { collectors_connected_->Decrement(); }

void ServerMetrics::RecordHttpResponse(int status) {
  const std::string status_class = std::to_string(status / 100) + "xx";
  http_requests_->Add({{"status", status_class}}).Increment();
}

void ServerMetrics::RecordUnauthorized() { http_unauthorized_->Increment(); }

void ServerMetrics::ForgetJob(const std::string& job) {
  std::set<std::pair<int, prometheus::Labels>> series;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = job_series_.find(job);
    if (it == job_series_.end()) return;
    series = std::move(it->second);
    job_series_.erase(it);
  }
  for (const auto& [family, labels] : series) {
    switch (family) {
      case kIterationSeconds:
        iteration_seconds_->Remove(&iteration_seconds_->Add(labels));
        iterations_->Remove(&iterations_->Add(labels));
        break;
      case kTriggers:
        triggers_->Remove(&triggers_->Add(labels));
        break;
      case kWindows:
        windows_->Remove(&windows_->Add(labels));
        break;
      case kFindings:
        findings_->Remove(&findings_->Add(labels));
        break;
      case kDroppedEvents:
        dropped_events_->Remove(&dropped_events_->Add(labels));
        break;
      default:
        break;
    }
  }
}

std::string ServerMetrics::Serialize() const {
  return prometheus::TextSerializer().Serialize(registry_->Collect());
}

}  // namespace perftracker
