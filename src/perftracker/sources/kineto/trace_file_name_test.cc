#include "perftracker/sources/kineto/trace_file_name.h"

#include <algorithm>
#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace perftracker {
namespace {

TEST(TraceFileName, TensorboardTraceHandlerDefaultName) {
  // torch 1.13: "<hostname>_<pid>.<ms>.pt.trace.json"; a host name may hold dots and '_'.
  const TraceFileName n =
      ParseTraceFileName("/runs/tb/node-1.cluster_x_2568.1795788448589.pt.trace.json");
  EXPECT_EQ(n.base, "node-1.cluster_x_2568.1795788448589.pt.trace.json");
  EXPECT_EQ(n.worker, "node-1.cluster_x_2568");
  EXPECT_EQ(n.host, "node-1.cluster_x");
  EXPECT_EQ(n.pid, 2568);
  EXPECT_EQ(n.Label(), "node-1.cluster_x_2568");
  // torch 2.x: time in ns, use_gzip.
  const TraceFileName g = ParseTraceFileName("vm_7.1732700000123456789.pt.trace.json.gz");
  EXPECT_EQ(g.worker, "vm_7");
  EXPECT_EQ(g.pid, 7);
}

TEST(TraceFileName, AWorkerNameOfTheUsersOwn) {
  const TraceFileName n = ParseTraceFileName("d/trainer-a.1795788448589.pt.trace.json");
  EXPECT_EQ(n.worker, "trainer-a");
  EXPECT_EQ(n.host, "");
  EXPECT_EQ(n.pid, -1);
}

TEST(TraceFileName, OtherNamesHaveNoWorker) {
  for (const char* path : {"trace.json", "a/b.json.gz", "x.pt.trace.json", "w.12a.pt.trace.json",
                           ".17.pt.trace.json"}) {
    SCOPED_TRACE(path);
    const TraceFileName n = ParseTraceFileName(path);
    EXPECT_EQ(n.worker, "");
    EXPECT_EQ(n.pid, -1);
    EXPECT_EQ(n.Label(), n.base);
  }
}

TEST(TraceFileName, NaturalOrderComparesDigitRunsAsNumbers) {
  std::vector<std::string> names = {"vm_1000.5.pt.trace.json",
                                    "vm_999.9.pt.trace.json",
                                    "node10_1.1",
                                    "node2_1.1",
                                    "vm_999.10.pt.trace.json",
                                    "a007",
                                    "a7",
                                    "a"};
  std::sort(names.begin(), names.end(), NaturalLess);
  EXPECT_EQ(names, (std::vector<std::string>{"a", "a007", "a7", "node2_1.1", "node10_1.1",
                                             "vm_999.9.pt.trace.json", "vm_999.10.pt.trace.json",
                                             "vm_1000.5.pt.trace.json"}));
  EXPECT_FALSE(NaturalLess("a7", "a7"));
}

}  // namespace
}  // namespace perftracker
