// ServerMetrics: the server's Prometheus metrics (prometheus-cpp core) and their text
// exposition, which the HTTP server serves at /metrics on its own port (no second listener).
//
// Metric names (docs/web-ui.md lists them with their meaning):
//   perftracker_iteration_seconds{job_id,rank}         gauge: the worker's last iteration time
//   perftracker_iterations_total{job_id,rank}          counter: iterations reported
//   perftracker_triggers_total{job_id,reason}          counter: window triggers received
//   perftracker_windows_total{job_id,state}            counter: windows opened / diagnosed /
//   abandoned perftracker_findings_total{job_id,code}            counter: findings in diagnoses
//   (material ones) perftracker_dropped_events_total{job_id,rank}      counter: events the agents
//   dropped (full rings) perftracker_collectors_connected                gauge: collectors
//   currently connected perftracker_http_requests_total{status}         counter: HTTP responses by
//   status class perftracker_http_unauthorized_total             counter: requests refused for a
//   missing or wrong token
//
// The job label is `job_id`, not `job`: Prometheus sets `job` on every scraped series itself
// (the scrape job's name), and a clash would rename ours to `exported_job`.
//
// Every method is thread-safe (prometheus-cpp's families lock on Add, values are atomic).
// Label values are free text from collectors: the exposition escapes them. ForgetJob drops
// a job's series so a long-lived fleet server does not keep finished jobs forever.
#pragma once

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/registry.h>

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <string_view>

namespace perftracker {

enum class WindowMetricState : uint8_t { kOpened, kDiagnosed, kAbandoned };

class ServerMetrics {
 public:
  ServerMetrics();
  ServerMetrics(const ServerMetrics&) = delete;
  ServerMetrics& operator=(const ServerMetrics&) = delete;

  void RecordIteration(const std::string& job, int32_t rank, int64_t duration_ns);
  void RecordTrigger(const std::string& job, const std::string& reason);
  void RecordWindow(const std::string& job, WindowMetricState state);
  void RecordFinding(const std::string& job, const std::string& code);
  void AddDroppedEvents(const std::string& job, int32_t rank, uint64_t count);
  void CollectorConnected();
  void CollectorDisconnected();
  // `status`: the HTTP status code; counted by class ("2xx", "4xx", ...).
  void RecordHttpResponse(int status);
  void RecordUnauthorized();

  // Removes every series labelled with this job.
  void ForgetJob(const std::string& job);

  // The text exposition format (version 0.0.4) of every metric.
  std::string Serialize() const;
  prometheus::Registry& registry() { return *registry_; }

 private:
  // Remembers each label set added per job, for ForgetJob.
  void Remember(const std::string& job, int family, const prometheus::Labels& labels);

  std::shared_ptr<prometheus::Registry> registry_;
  prometheus::Family<prometheus::Gauge>* iteration_seconds_;
  prometheus::Family<prometheus::Counter>* iterations_;
  prometheus::Family<prometheus::Counter>* triggers_;
  prometheus::Family<prometheus::Counter>* windows_;
  prometheus::Family<prometheus::Counter>* findings_;
  prometheus::Family<prometheus::Counter>* dropped_events_;
  prometheus::Gauge* collectors_connected_;
  prometheus::Family<prometheus::Counter>* http_requests_;
  prometheus::Counter* http_unauthorized_;

  std::mutex mu_;
  std::map<std::string, std::set<std::pair<int, prometheus::Labels>>> job_series_;
};

}  // namespace perftracker
