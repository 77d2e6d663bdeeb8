#include "perftracker/server/metrics/server_metrics.h"

#include <gtest/gtest.h>

#include <string>
#include <thread>
#include <vector>

namespace perftracker {
namespace {

bool HasLine(const std::string& text, const std::string& line) {
  return text.find("\n" + line + "\n") != std::string::npos || text.rfind(line + "\n", 0) == 0;
}

TEST(ServerMetricsTest, ExposesEveryMetricInTextFormat) {
  ServerMetrics metrics;
  metrics.RecordIteration("job-1", 2, 42'500'000);
  metrics.RecordIteration("job-1", 2, 43'000'000);
  metrics.RecordIteration("job-1", 0, 10'000'000);
  metrics.RecordTrigger("job-1", "slowdown");
  metrics.RecordWindow("job-1", WindowMetricState::kOpened);
  metrics.RecordWindow("job-1", WindowMetricState::kDiagnosed);
  metrics.RecordFinding("job-1", "PT-STRAGGLER-COMPUTE");
  metrics.AddDroppedEvents("job-1", 3, 17);
  metrics.AddDroppedEvents("job-1", 3, 3);
  metrics.CollectorConnected();
  metrics.CollectorConnected();
  metrics.CollectorDisconnected();
  metrics.RecordHttpResponse(200);
  metrics.RecordHttpResponse(401);
  metrics.RecordUnauthorized();

  const std::string text = metrics.Serialize();
  EXPECT_TRUE(HasLine(text, "# TYPE perftracker_iteration_seconds gauge")) << text;
  EXPECT_TRUE(HasLine(text, "perftracker_iteration_seconds{job_id=\"job-1\",rank=\"2\"} 0.043"))
      << text;
  EXPECT_TRUE(HasLine(text, "perftracker_iterations_total{job_id=\"job-1\",rank=\"2\"} 2")) << text;
  EXPECT_TRUE(HasLine(text, "perftracker_triggers_total{job_id=\"job-1\",reason=\"slowdown\"} 1"));
  EXPECT_TRUE(HasLine(text, "perftracker_windows_total{job_id=\"job-1\",state=\"diagnosed\"} 1"));
  EXPECT_TRUE(
      HasLine(text, "perftracker_findings_total{code=\"PT-STRAGGLER-COMPUTE\",job_id=\"job-1\"} 1"))
      << text;
  EXPECT_TRUE(HasLine(text, "perftracker_dropped_events_total{job_id=\"job-1\",rank=\"3\"} 20"));
  EXPECT_TRUE(HasLine(text, "perftracker_collectors_connected 1"));
  EXPECT_TRUE(HasLine(text, "perftracker_http_requests_total{status=\"4xx\"} 1"));
  EXPECT_TRUE(HasLine(text, "perftracker_http_unauthorized_total 1"));
}

TEST(ServerMetricsTest, EscapesLabelValuesFromCollectors) {
  ServerMetrics metrics;
  metrics.RecordTrigger("we\"ird\njob\\", "slowdown");
  const std::string text = metrics.Serialize();
  EXPECT_NE(text.find(R"(job_id="we\"ird\njob\\")"), std::string::npos) << text;
}

TEST(ServerMetricsTest, ForgetJobDropsOnlyThatJob) {
  ServerMetrics metrics;
  metrics.RecordIteration("old", 0, 1'000'000);
  metrics.RecordFinding("old", "PT-GC");
  metrics.RecordIteration("live", 1, 2'000'000);
  metrics.ForgetJob("old");
  metrics.ForgetJob("never-seen");
  const std::string text = metrics.Serialize();
  EXPECT_EQ(text.find("job_id=\"old\""), std::string::npos) << text;
  EXPECT_TRUE(HasLine(text, "perftracker_iteration_seconds{job_id=\"live\",rank=\"1\"} 0.002"));
}

TEST(ServerMetricsTest, ConcurrentRecording) {
  ServerMetrics metrics;
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 1000; ++i) {
        metrics.RecordIteration("j", t, 1000);
        if (i % 100 == 0) (void)metrics.Serialize();
      }
    });
  }
  for (auto& t : threads) t.join();
  const std::string text = metrics.Serialize();
  for (int t = 0; t < 4; ++t) {
    EXPECT_TRUE(HasLine(text, "perftracker_iterations_total{job_id=\"j\",rank=\"" +
                                  std::to_string(t) + "\"} 1000"));
  }
}

}  // namespace
}  // namespace perftracker
