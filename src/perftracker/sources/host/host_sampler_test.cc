#include "perftracker/sources/host/host_sampler.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <sys/syscall.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <future>
#include <iostream>
#include <optional>
#include <sstream>
#include <thread>

namespace perftracker {
namespace {

namespace fs = std::filesystem;

constexpr int64_t kSec = 1'000'000'000;

// A fixture tree of /proc and /sys with the kernel's real file formats.
class FixtureTree {
 public:
  FixtureTree() {
    std::string tmpl = (fs::temp_directory_path() / "host_sampler_XXXXXX").string();
    root_ = mkdtemp(tmpl.data());
  }
  ~FixtureTree() {
    std::error_code ec;
    fs::remove_all(root_, ec);
  }
  std::string proc() const { return root_ + "/proc"; }
  std::string sys() const { return root_ + "/sys"; }

  void Write(const std::string& rel, const std::string& text) {
    const fs::path p = fs::path(root_) / rel;
    fs::create_directories(p.parent_path());
    std::ofstream(p) << text;
  }
  void Remove(const std::string& rel) { fs::remove_all(fs::path(root_) / rel); }

  void Process(int pid, uint64_t utime, uint64_t stime, uint64_t rss_pages) {
    const std::string d = "proc/" + std::to_string(pid);
    // comm with a space and a parenthesis, as a renamed Python thread can have.
    Write(d + "/stat", std::to_string(pid) + " (pt_main (x) 1) R 1 " + std::to_string(pid) + " " +
                           std::to_string(pid) + " 0 -1 4194560 52000 0 12 0 " +
                           std::to_string(utime) + " " + std::to_string(stime) +
                           " 0 0 20 0 3 0 123456 3279814656 " + std::to_string(rss_pages) +
                           " 18446744073709551615 1 1 0 0 0 0 0 16781312 17642 0 0 0 17 1 0 0 "
                           "0 0 0\n");
    Write(d + "/statm", "800755 " + std::to_string(rss_pages) + " 30000 1000 0 120000 0\n");
  }
  void Thread(int pid, int tid, uint64_t cpu_ns, uint64_t run_delay_ns, uint64_t voluntary,
              uint64_t involuntary) {
    const std::string d = "proc/" + std::to_string(pid) + "/task/" + std::to_string(tid);
    // Timeslices: once on a CPU per switch away from it.
    Write(d + "/schedstat", std::to_string(cpu_ns) + " " + std::to_string(run_delay_ns) + " " +
                                std::to_string(voluntary + involuntary) + "\n");
    Write(d + "/status", "Name:\tpt_main\nUmask:\t0022\nState:\tR (running)\nTgid:\t" +
                             std::to_string(pid) + "\nPid:\t" + std::to_string(tid) +
                             "\nVmRSS:\t  819200 kB\nThreads:\t3\n"
                             "Cpus_allowed_list:\t0-1\nvoluntary_ctxt_switches:\t" +
                             std::to_string(voluntary) + "\nnonvoluntary_ctxt_switches:\t" +
                             std::to_string(involuntary) + "\n");
  }
  void Nic(const std::string& name, int ifindex, uint64_t tx, uint64_t rx) {
    const std::string d = "sys/class/net/" + name;
    Write(d + "/ifindex", std::to_string(ifindex) + "\n");
    Write(d + "/statistics/tx_bytes", std::to_string(tx) + "\n");
    Write(d + "/statistics/rx_bytes", std::to_string(rx) + "\n");
  }

 private:
  std::string root_;
};

std::optional<double> Find(const std::vector<PidSample>& samples, int32_t pid, Metric metric,
                           uint32_t source) {
  for (const auto& s : samples) {
    if (s.pid == pid && s.sample.metric == metric && s.sample.source == source) {
      return s.sample.value;
    }
  }
  return std::nullopt;
}

TEST(HostSamplerTest, FixtureDeltasGiveExactRates) {
  const double ticks = static_cast<double>(sysconf(_SC_CLK_TCK));
  const double page = static_cast<double>(sysconf(_SC_PAGESIZE));
  FixtureTree t;
  t.Process(4242, 1000, 200, 50'000);
  t.Thread(4242, 4242, 900'000'000, 100'000'000, 10, 5);
  t.Thread(4242, 4250, 100'000'000, 20'000'000, 100, 0);
  t.Nic("lo", 1, 1'000'000, 1'000'000);
  t.Nic("eth0", 2, 5'000'000, 7'000'000);
  t.Nic("ib0", 7, 0, 0);
  HostSampler sampler(t.proc(), t.sys());
  std::vector<PidSample> out;
  sampler.Sample(10 * kSec, {4242}, &out);
  // First sample: levels only.
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].sample.metric, Metric::kMemoryRssBytes);
  EXPECT_DOUBLE_EQ(out[0].sample.value, 50'000 * page);

  // Two seconds later: +1.5 s of CPU time (0.75 of one core), 0.6 s of run-queue delay over
  // the two threads and a new one (which contributes all of its counts).
  const auto cpu_ticks = static_cast<uint64_t>(1.5 * ticks);
  t.Process(4242, 1000 + cpu_ticks / 3, 200 + cpu_ticks - cpu_ticks / 3, 60'000);
  t.Thread(4242, 4242, 1'900'000'000, 500'000'000, 30, 45);
  t.Thread(4242, 4250, 300'000'000, 120'000'000, 150, 0);
  t.Thread(4242, 4260, 300'000'000, 100'000'000, 20, 15);
  t.Nic("eth0", 2, 5'000'000 + 2'000'000'000, 7'000'000 + 500'000);
  t.Nic("ib0", 7, 0, 0);
  out.clear();
  sampler.Sample(12 * kSec, {4242}, &out);

  // (1000 + 200 + 300) ms of CPU time over 2 s, from the threads' schedstat (exact).
  EXPECT_DOUBLE_EQ(*Find(out, 4242, Metric::kCpuUtilization, 4242), 0.75);
  // (400 + 100 + 100) ms of run delay over 2 s.
  EXPECT_DOUBLE_EQ(*Find(out, 4242, Metric::kRunQueueDelayFraction, 4242), 0.3);
  // The main thread's (tid 4242) alone: 400 ms over 2 s.
  EXPECT_DOUBLE_EQ(*Find(out, 4242, Metric::kMainThreadRunQueueFraction, 4242), 0.2);
  // Timeslices (schedstat's third field): (75 - 15) + (150 - 100) + 35 over 2 s; the main
  // thread's 60.
  EXPECT_DOUBLE_EQ(*Find(out, 4242, Metric::kTimeslicesPerSec, 4242), (60 + 50 + 35) / 2.0);
  EXPECT_DOUBLE_EQ(*Find(out, 4242, Metric::kMainThreadTimeslicesPerSec, 4242), 60 / 2.0);
  EXPECT_DOUBLE_EQ(*Find(out, 4242, Metric::kVoluntaryCtxSwitchesPerSec, 4242),
                   (20 + 50 + 20) / 2.0);
  EXPECT_DOUBLE_EQ(*Find(out, 4242, Metric::kInvoluntaryCtxSwitchesPerSec, 4242),
                   (40 + 0 + 15) / 2.0);
  EXPECT_DOUBLE_EQ(*Find(out, 4242, Metric::kMemoryRssBytes, 4242), 60'000 * page);
  EXPECT_DOUBLE_EQ(*Find(out, -1, Metric::kNicTxBytesPerSec, 2), 1e9);
  EXPECT_DOUBLE_EQ(*Find(out, -1, Metric::kNicRxBytesPerSec, 2), 250'000);
  EXPECT_DOUBLE_EQ(*Find(out, -1, Metric::kNicTxBytesPerSec, 7), 0);
  EXPECT_FALSE(Find(out, -1, Metric::kNicTxBytesPerSec, 1).has_value()) << "loopback skipped";
  EXPECT_EQ(out.size(), 8u + 4u);  // 8 per pid, 2 per interface
  EXPECT_EQ(sampler.stats().vanished_pids, 0u);
  EXPECT_EQ(sampler.stats().unreadable_files, 0u) << sampler.stats().first_problem;
}

TEST(HostSamplerTest, CommunicationThreadsAreSampledAsARoleOfTheirOwn) {
  FixtureTree t;
  t.Process(4242, 0, 0, 100);
  t.Thread(4242, 4242, 0, 0, 0, 0);
  t.Thread(4242, 4250, 0, 0, 0, 0);  // a gloo worker
  t.Thread(4242, 4251, 0, 0, 0, 0);  // another
  t.Thread(4242, 4252, 0, 0, 0, 0);  // the autograd thread, not named
  HostSampler sampler(t.proc(), t.sys());
  // The main thread is never a communication thread; 9999 does not exist.
  sampler.SetCommThreads(4242, {4250, 4251, 4242, 9999});
  std::vector<PidSample> out;
  sampler.Sample(10 * kSec, {4242}, &out);
  EXPECT_FALSE(Find(out, 4242, Metric::kCommThreadRunQueueFraction, 4242).has_value());

  t.Thread(4242, 4242, 500'000'000, 400'000'000, 20, 20);
  t.Thread(4242, 4250, 100'000'000, 300'000'000, 100, 50);
  t.Thread(4242, 4251, 100'000'000, 100'000'000, 40, 10);
  t.Thread(4242, 4252, 100'000'000, 900'000'000, 10, 0);
  t.Thread(4242, 4253, 0, 0, 0, 0);
  out.clear();
  sampler.Sample(12 * kSec, {4242}, &out);
  // (300 + 100) ms of run delay over 2 s, (150 + 50) turns on a CPU over 2 s: 2 ms per turn.
  EXPECT_DOUBLE_EQ(*Find(out, 4242, Metric::kCommThreadRunQueueFraction, 4242), 0.2);
  EXPECT_DOUBLE_EQ(*Find(out, 4242, Metric::kCommThreadTimeslicesPerSec, 4242), 100);
  EXPECT_DOUBLE_EQ(*Find(out, 4242, Metric::kMainThreadRunQueueFraction, 4242), 0.2);

  // A thread named after it appeared counts from the next call on (its earlier counts could
  // span its whole life); one that exited is left out; an empty list forgets the role.
  sampler.SetCommThreads(4242, {4250, 4253});
  t.Thread(4242, 4250, 100'000'000, 500'000'000, 110, 90);  // +200 ms, +50 turns
  t.Thread(4242, 4253, 0, 100'000'000, 30, 20);             // +100 ms, +50 turns
  out.clear();
  sampler.Sample(14 * kSec, {4242}, &out);
  EXPECT_DOUBLE_EQ(*Find(out, 4242, Metric::kCommThreadRunQueueFraction, 4242), 0.15);
  EXPECT_DOUBLE_EQ(*Find(out, 4242, Metric::kCommThreadTimeslicesPerSec, 4242), 50);
  sampler.SetCommThreads(4242, {});
  out.clear();
  sampler.Sample(16 * kSec, {4242}, &out);
  EXPECT_FALSE(Find(out, 4242, Metric::kCommThreadRunQueueFraction, 4242).has_value());
  EXPECT_TRUE(Find(out, 4242, Metric::kRunQueueDelayFraction, 4242).has_value());
  EXPECT_EQ(sampler.stats().unreadable_files, 4u) << sampler.stats().first_problem;  // /sys
}

TEST(HostSamplerTest, StealTimeOfTheHostComesWithEachPidsCpuSamples) {
  // A VM whose hypervisor ran other guests: /proc/stat's eighth field (steal) grew by 50
  // ticks of the 1,000 the two CPUs' fields grew by (guest and guest_nice, already inside
  // user and nice, are not added again).
  FixtureTree t;
  t.Process(10, 0, 0, 100);
  t.Thread(10, 10, 0, 0, 0, 0);
  t.Write("proc/stat",
          "cpu  1000 10 300 5000 20 0 5 100 400 0\ncpu0 500 5 150 2500 10 0 3 50 200 0\n"
          "intr 12345\n");
  HostSampler sampler(t.proc(), t.sys());
  std::vector<PidSample> out;
  sampler.Sample(1 * kSec, {10}, &out);
  EXPECT_FALSE(Find(out, 10, Metric::kCpuStealFraction, 10).has_value()) << "no interval yet";
  t.Thread(10, 10, 500'000'000, 100'000'000, 1, 1);
  t.Write("proc/stat", "cpu  1600 10 500 5130 20 0 25 150 900 0\nintr 12399\n");
  out.clear();
  sampler.Sample(2 * kSec, {10}, &out);
  EXPECT_DOUBLE_EQ(*Find(out, 10, Metric::kCpuStealFraction, 10), 50.0 / 1000.0);
  EXPECT_DOUBLE_EQ(*Find(out, 10, Metric::kCpuUtilization, 10), 0.5);

  // A kernel without the steal field says nothing, and is not an error.
  t.Write("proc/stat", "cpu  1700 10 500 5200\n");
  out.clear();
  sampler.Sample(3 * kSec, {10}, &out);
  EXPECT_FALSE(Find(out, 10, Metric::kCpuStealFraction, 10).has_value());
  EXPECT_TRUE(Find(out, 10, Metric::kCpuUtilization, 10).has_value());
  EXPECT_EQ(sampler.stats().unreadable_files, 3u) << sampler.stats().first_problem;  // /sys
}

TEST(HostSamplerTest, ClockTicksWhenSchedstatIsMissing) {
  // A kernel without CONFIG_SCHED_INFO: CPU time from /proc/<pid>/stat, no run-queue delay.
  const auto ticks = static_cast<uint64_t>(sysconf(_SC_CLK_TCK));
  FixtureTree t;
  t.Process(77, 500, 100, 10);
  t.Thread(77, 77, 0, 0, 1, 1);
  t.Remove("proc/77/task/77/schedstat");
  HostSampler sampler(t.proc(), t.sys());
  std::vector<PidSample> out;
  sampler.Sample(1 * kSec, {77}, &out);
  t.Process(77, 500 + ticks, 100, 10);  // one second of user time
  out.clear();
  sampler.Sample(3 * kSec, {77}, &out);
  EXPECT_DOUBLE_EQ(*Find(out, 77, Metric::kCpuUtilization, 77), 0.5);
  EXPECT_FALSE(Find(out, 77, Metric::kRunQueueDelayFraction, 77).has_value());
  EXPECT_EQ(sampler.stats().unreadable_files, 2u + 2u);  // schedstat and /sys, per call
  EXPECT_NE(sampler.stats().first_problem.find("schedstat"), std::string::npos)
      << sampler.stats().first_problem;
}

TEST(HostSamplerTest, VanishedPidsAndUnreadableFilesAreCountedNotFatal) {
  FixtureTree t;
  t.Process(10, 0, 0, 100);
  t.Thread(10, 10, 0, 0, 0, 0);
  t.Process(11, 0, 0, 100);
  t.Thread(11, 11, 0, 0, 0, 0);
  t.Nic("eth0", 2, 0, 0);
  t.Nic("broken0", 3, 0, 0);
  t.Remove("sys/class/net/broken0/statistics");
  HostSampler sampler(t.proc(), t.sys());
  std::vector<PidSample> out;
  sampler.Sample(1 * kSec, {10, 11, 999}, &out);
  EXPECT_EQ(sampler.stats().vanished_pids, 1u);  // 999 never existed
  EXPECT_EQ(sampler.stats().unreadable_files, 1u);
  EXPECT_NE(sampler.stats().first_problem.find("broken0"), std::string::npos)
      << sampler.stats().first_problem;

  t.Remove("proc/11");
  t.Write("proc/10/task/10/schedstat", "5\n");  // no run_delay field
  out.clear();
  sampler.Sample(2 * kSec, {10, 11}, &out);
  EXPECT_EQ(sampler.stats().vanished_pids, 2u);
  EXPECT_TRUE(Find(out, 10, Metric::kCpuUtilization, 10).has_value());
  EXPECT_FALSE(Find(out, 10, Metric::kRunQueueDelayFraction, 10).has_value());
  EXPECT_FALSE(Find(out, 11, Metric::kCpuUtilization, 11).has_value());
  EXPECT_EQ(sampler.stats().unreadable_files, 3u);  // broken0 again, the schedstat
}

TEST(HostSamplerTest, PidThatReturnsStartsOverWithLevels) {
  FixtureTree t;
  t.Process(10, 0, 0, 100);
  t.Thread(10, 10, 0, 0, 0, 0);
  HostSampler sampler(t.proc(), t.sys() + "/missing");
  std::vector<PidSample> out;
  sampler.Sample(1 * kSec, {10}, &out);
  sampler.Sample(2 * kSec, {}, &out);  // not asked for: forgotten
  out.clear();
  sampler.Sample(3 * kSec, {10}, &out);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].sample.metric, Metric::kMemoryRssBytes);
  EXPECT_EQ(sampler.stats().unreadable_files, 3u);  // the missing /sys, once per call
}

TEST(HostSamplerTest, RealProcBurningCpu) {
  if (access("/proc/self/stat", R_OK) != 0) GTEST_SKIP() << "no /proc on this system";
  HostSampler sampler;
  const auto pid = static_cast<int32_t>(getpid());
  auto now = [] {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(
               std::chrono::steady_clock::now().time_since_epoch())
        .count();
  };
  std::vector<PidSample> out;
  sampler.Sample(now(), {pid}, &out);
  const auto start = std::chrono::steady_clock::now();
  volatile uint64_t sink = 0;
  while (std::chrono::steady_clock::now() - start < std::chrono::milliseconds(200)) {
    for (int i = 0; i < 10'000; ++i) sink = sink + static_cast<uint64_t>(i) * 2654435761u;
  }
  out.clear();
  sampler.Sample(now(), {pid}, &out);
  const auto cpu = Find(out, pid, Metric::kCpuUtilization, static_cast<uint32_t>(pid));
  const auto run_delay = Find(out, pid, Metric::kRunQueueDelayFraction, static_cast<uint32_t>(pid));
  ASSERT_TRUE(cpu.has_value());
  ASSERT_TRUE(run_delay.has_value()) << sampler.stats().first_problem;
  // One thread was always runnable: it either ran or waited in a run queue, so the two
  // fractions add up to about one (the other threads of the test sleep).
  EXPECT_NEAR(*cpu + *run_delay, 1.0, 0.15) << "cpu " << *cpu << ", run-queue " << *run_delay;
  if (*run_delay < 0.4) {
    EXPECT_GT(*cpu, 0.5);
  } else {
    std::cout << "host busy: the burn waited " << *run_delay * 100
              << "% of the time for a CPU; utilization " << *cpu << "\n";
  }
  EXPECT_LT(*cpu, 1.2);  // one thread burned
  const auto rss = Find(out, pid, Metric::kMemoryRssBytes, static_cast<uint32_t>(pid));
  ASSERT_TRUE(rss.has_value());
  EXPECT_GT(*rss, 1e6);
  EXPECT_EQ(sampler.stats().vanished_pids, 0u);
}

struct Schedstat {
  uint64_t run_delay_ns = 0;
  uint64_t timeslices = 0;
};

Schedstat ReadSchedstat(int32_t tid) {
  std::ifstream in("/proc/self/task/" + std::to_string(tid) + "/schedstat");
  uint64_t cpu_ns = 0;
  Schedstat s;
  in >> cpu_ns >> s.run_delay_ns >> s.timeslices;
  return s;
}

// A real thread of this process in the communication role: it does some work and sleeps 60
// times (each wake is a turn on a CPU), between two samples; the sampler's figures for the
// role are exactly that thread's schedstat counts, read by the test itself while the thread
// is blocked, whatever the load on the machine.
TEST(HostSamplerTest, RealCommunicationThreadIsMeasuredAlone) {
  if (access("/proc/self/task", R_OK) != 0) GTEST_SKIP() << "no /proc on this system";
  const auto pid = static_cast<int32_t>(getpid());
  if (access(("/proc/self/task/" + std::to_string(pid) + "/schedstat").c_str(), R_OK) != 0) {
    GTEST_SKIP() << "kernel without schedstat (CONFIG_SCHED_INFO)";
  }
  std::promise<int32_t> tid_promise;
  std::promise<void> go, done, leave;
  std::shared_future<void> go_f = go.get_future().share();
  std::shared_future<void> leave_f = leave.get_future().share();
  constexpr int kSleeps = 60;
  std::thread comm([&] {
    tid_promise.set_value(static_cast<int32_t>(::syscall(SYS_gettid)));
    go_f.wait();
    volatile uint64_t sink = 0;
    for (int i = 0; i < kSleeps; ++i) {
      for (int j = 0; j < 20'000; ++j) sink = sink + static_cast<uint64_t>(j) * 2654435761u;
      std::this_thread::sleep_for(std::chrono::microseconds(500));
    }
    done.set_value();
    leave_f.wait();
  });
  const int32_t tid = tid_promise.get_future().get();
  auto now = [] {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(
               std::chrono::steady_clock::now().time_since_epoch())
        .count();
  };
  HostSampler sampler;
  sampler.SetCommThreads(pid, {tid, pid});  // the main thread is never one
  std::vector<PidSample> out;
  // The thread is parked on `go` (a futex): its counters stand still until it is released.
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  const Schedstat before = ReadSchedstat(tid);
  const int64_t t0 = now();
  sampler.Sample(t0, {pid}, &out);
  go.set_value();
  done.get_future().wait();
  // Let it park on `leave`; the main thread meanwhile is put on a CPU again (not counted).
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  out.clear();
  const int64_t t1 = now();
  sampler.Sample(t1, {pid}, &out);
  const Schedstat after = ReadSchedstat(tid);
  leave.set_value();
  comm.join();

  const double wall_ns = static_cast<double>(t1 - t0);
  const auto fraction = Find(out, pid, Metric::kCommThreadRunQueueFraction, pid);
  const auto rate = Find(out, pid, Metric::kCommThreadTimeslicesPerSec, pid);
  ASSERT_TRUE(fraction.has_value()) << sampler.stats().first_problem;
  ASSERT_TRUE(rate.has_value());
  const double turns = *rate * wall_ns / 1e9;
  EXPECT_NEAR(turns, static_cast<double>(after.timeslices - before.timeslices), 1e-6 * turns);
  EXPECT_GE(turns, kSleeps) << "every wake from a sleep is a turn on a CPU";
  EXPECT_NEAR(*fraction * wall_ns, static_cast<double>(after.run_delay_ns - before.run_delay_ns),
              1e-6 * wall_ns);
  // The whole process was put on a CPU more often (its main thread too).
  EXPECT_GT(*Find(out, pid, Metric::kTimeslicesPerSec, pid), *rate);
}

}  // namespace
}  // namespace perftracker
