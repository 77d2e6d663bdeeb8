// HostSampler — counters from /proc and /sys turned into rates.
//
// Every quantity the kernel exposes here is a monotonically growing counter; a sample is
// the change since the previous Sample() divided by the wall time between the two calls:
//   /proc/<pid>/task/<tid>/schedstat  "cpu_ns run_delay_ns timeslices": run_delay is the
//                                  time the thread was runnable but waited in a run queue —
//                                  the direct measure of CPU contention; cpu_ns its exact
//                                  CPU time (the scheduler's sum_exec_runtime); timeslices
//                                  how often it was put on a CPU (run_delay / timeslices:
//                                  the wait per turn, which does not grow with how much the
//                                  thread runs or how often it wakes)
//                                  (summed over threads; the main thread's, tid == pid,
//                                  also alone: the training loop's own wait; and summed
//                                  over the communication threads the collector names,
//                                  SetCommThreads: gloo's workers, whose wait per turn
//                                  compared with the same role on other ranks tells a
//                                  crowded CPU where the training thread's may not)
//   /proc/<pid>/stat               fields 14, 15: utime, stime in clock ticks of the whole
//                                  thread group — the CPU time when schedstat is missing.
//                                  Tick accounting is sampled: over a 100-200 ms interval on a
//                                  busy (virtual) host it was off by 5x in a test, where the
//                                  schedstat pair (cpu + run delay = 1 for a busy thread) was
//                                  exact, so schedstat wins when every thread's is readable
//   /proc/<pid>/task/<tid>/status  voluntary_ctxt_switches / nonvoluntary_ctxt_switches
//                                  (per thread; /proc/<pid>/status shows the leader only)
//   /proc/<pid>/statm              field 2: resident pages (a level, not a counter)
//   /sys/class/net/<if>/statistics/{tx,rx}_bytes, /sys/class/net/<if>/ifindex
//   /proc/stat                     the "cpu" line: user nice system idle iowait irq softirq
//                                  steal (clock ticks of all CPUs). Steal is time the
//                                  hypervisor gave another guest while this one wanted to
//                                  run; its share of the line's total is host-wide and
//                                  given with each pid's CPU samples (a kernel without the
//                                  steal field, before 2.6.11, or a tree without the file
//                                  gives none)
// Thread counters are kept per thread id: a thread that appears between two samples
// contributes all of its counts (it ran only in that interval), one that exits loses its
// last interval (its counters are gone with it); a counter that went backwards (tid reused)
// restarts from zero. A pid missing from one call loses its history (a later call starts
// over with levels only), so state stays bounded by the pids asked for.
//
// The run-queue fraction sums over threads and can exceed 1 (two threads each waiting half
// the time = 1.0); CPU utilization likewise (2.0 = two cores busy).
#include "perftracker/sources/host/host_sampler.h"

#include <dirent.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <optional>
#include <set>
#include <string_view>

namespace perftracker {
namespace {

// Reads a small /proc or /sys file whole. /proc files report size 0, so read to EOF.
bool ReadFile(const std::string& path, std::string* out) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  out->clear();
  char buf[4096];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof(buf));
    if (n < 0) {
      if (errno == EINTR) continue;
      ::close(fd);
      return false;
    }
    if (n == 0) break;
    out->append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  return true;
}

bool ParseU64(std::string_view s, uint64_t* value) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  const auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), *value);
  return ec == std::errc() && ptr != s.data();
}

// The n-th (0-based) whitespace-separated field of s.
std::string_view Field(std::string_view s, int n) {
  size_t i = 0;
  for (int f = 0;; ++f) {
    while (i < s.size() && (s[i] == ' ' || s[i] == '\n' || s[i] == '\t')) ++i;
    if (i >= s.size()) return {};
    size_t j = i;
    while (j < s.size() && s[j] != ' ' && s[j] != '\n' && s[j] != '\t') ++j;
    if (f == n) return s.substr(i, j - i);
    i = j;
  }
}

// The value of "key:\t<number>" in a status file.
bool StatusValue(std::string_view text, std::string_view key, uint64_t* value) {
  size_t pos = 0;
  while (pos < text.size()) {
    size_t eol = text.find('\n', pos);
    if (eol == std::string_view::npos) eol = text.size();
    std::string_view line = text.substr(pos, eol - pos);
    if (line.size() > key.size() && line.substr(0, key.size()) == key && line[key.size()] == ':') {
      return ParseU64(line.substr(key.size() + 1), value);
    }
    pos = eol + 1;
  }
  return false;
}

std::vector<std::string> ListDir(const std::string& path, bool* ok) {
  std::vector<std::string> names;
  DIR* dir = ::opendir(path.c_str());
  *ok = dir != nullptr;
  if (dir == nullptr) return names;
  while (const dirent* e = ::readdir(dir)) {
    if (e->d_name[0] == '.') continue;
    names.emplace_back(e->d_name);
  }
  ::closedir(dir);
  return names;
}

uint64_t Delta(uint64_t now, uint64_t before) { return now >= before ? now - before : now; }

}  // namespace

HostSampler::HostSampler(std::string proc_root, std::string sys_root)
    : proc_root_(std::move(proc_root)), sys_root_(std::move(sys_root)) {
  if (const long ticks = ::sysconf(_SC_CLK_TCK); ticks > 0) {
    ticks_per_s_ = static_cast<double>(ticks);
  }
  if (const long page = ::sysconf(_SC_PAGESIZE); page > 0) page_bytes_ = static_cast<double>(page);
}

void HostSampler::Unreadable(int32_t pid, const std::string& path, const char* why) {
  ++stats_.unreadable_files;
  CountProblem(pid, SampleProblem::kUnreadable);
  if (stats_.first_problem.empty()) stats_.first_problem = path + ": " + why;
}

void HostSampler::SetCommThreads(int32_t pid, const std::vector<int32_t>& tids) {
  std::set<int32_t> set;
  for (int32_t tid : tids) {
    if (tid > 0 && tid != pid) set.insert(tid);
  }
  if (set.empty()) {
    comm_tids_.erase(pid);
  } else {
    comm_tids_[pid] = std::move(set);
  }
}

void HostSampler::Sample(int64_t now_ns, const std::vector<int32_t>& pids,
                         std::vector<PidSample>* out) {
  ++stats_.samples;
  std::set<int32_t> wanted(pids.begin(), pids.end());
  for (auto it = pids_.begin(); it != pids_.end();) {
    it = wanted.count(it->first) != 0 ? std::next(it) : pids_.erase(it);
  }
  for (auto it = comm_tids_.begin(); it != comm_tids_.end();) {
    it = wanted.count(it->first) != 0 ? std::next(it) : comm_tids_.erase(it);
  }
  steal_fraction_ = wanted.empty() ? -1 : SampleSteal();
  for (int32_t pid : wanted) {
    if (!SamplePid(now_ns, pid, out)) pids_.erase(pid);
  }
  SampleNics(now_ns, out);
}

double HostSampler::SampleSteal() {
  const std::string path = proc_root_ + "/stat";
  std::string text;
  // Optional, as the steal field is: without the file (a fixture tree) nothing is said.
  if (!ReadFile(path, &text)) {
    host_cpu_.valid = false;
    return -1;
  }
  const std::string_view line = std::string_view(text).substr(0, text.find('\n'));
  if (Field(line, 0) != "cpu") {
    Unreadable(-1, path, "no \"cpu\" line first");
    host_cpu_.valid = false;
    return -1;
  }
  // Fields 1..8: user nice system idle iowait irq softirq steal (guest time is already in
  // user and nice, so it is not added again).
  HostCpuState now;
  for (int f = 1; f <= 8; ++f) {
    uint64_t v = 0;
    if (!ParseU64(Field(line, f), &v)) {
      host_cpu_.valid = false;
      return -1;  // an old kernel without the steal field: nothing to say
    }
    now.total += v;
    if (f == 8) now.steal = v;
  }
  now.valid = true;
  const HostCpuState before = host_cpu_;
  host_cpu_ = now;
  if (!before.valid || now.total <= before.total || now.steal < before.steal) return -1;
  return static_cast<double>(now.steal - before.steal) /
         static_cast<double>(now.total - before.total);
}

bool HostSampler::SamplePid(int64_t now_ns, int32_t pid, std::vector<PidSample>* out) {
  const std::string dir = proc_root_ + "/" + std::to_string(pid);
  std::string text;
  if (!ReadFile(dir + "/stat", &text)) {
    ++stats_.vanished_pids;
    CountProblem(pid, SampleProblem::kProcessGone);
    return false;
  }
  auto emit = [&](Metric metric, double value) {
    PidSample s;
    s.pid = pid;
    s.sample.time_ns = now_ns;
    s.sample.value = value;
    s.sample.source = static_cast<uint32_t>(pid);
    s.sample.metric = metric;
    out->push_back(s);
  };

  // utime, stime: fields 14 and 15, counted after the last ')' (comm may hold spaces and
  // parentheses), where field 3 (state) starts.
  const size_t paren = text.rfind(')');
  uint64_t utime = 0;
  uint64_t stime = 0;
  const bool cpu_ok = paren != std::string::npos &&
                      ParseU64(Field(std::string_view(text).substr(paren + 1), 11), &utime) &&
                      ParseU64(Field(std::string_view(text).substr(paren + 1), 12), &stime);
  if (!cpu_ok) Unreadable(pid, dir + "/stat", "no utime/stime fields");

  if (ReadFile(dir + "/statm", &text)) {
    uint64_t resident = 0;
    if (ParseU64(Field(text, 1), &resident)) {
      emit(Metric::kMemoryRssBytes, static_cast<double>(resident) * page_bytes_);
    } else {
      Unreadable(pid, dir + "/statm", "no resident field");
    }
  } else {
    Unreadable(pid, dir + "/statm", "cannot read");
  }

  // Per-thread counters.
  bool listed = false;
  const std::vector<std::string> tids = ListDir(dir + "/task", &listed);
  if (!listed) Unreadable(pid, dir + "/task", "cannot list threads");
  std::map<int32_t, ThreadState> threads;
  bool run_delay_ok = listed;
  bool timeslices_ok = listed;
  bool switches_ok = listed;
  for (const std::string& name : tids) {
    int32_t tid = 0;
    if (std::from_chars(name.data(), name.data() + name.size(), tid).ec != std::errc()) continue;
    const std::string task = dir + "/task/" + name;
    ThreadState ts;
    if (ReadFile(task + "/schedstat", &text)) {
      // The third field (timeslices) is optional: without it only its metrics are missing.
      if (!ParseU64(Field(text, 2), &ts.timeslices)) timeslices_ok = false;
      if (!ParseU64(Field(text, 0), &ts.cpu_ns) || !ParseU64(Field(text, 1), &ts.run_delay_ns)) {
        Unreadable(pid, task + "/schedstat", "no run_delay field");
        run_delay_ok = false;
      }
    } else if (::access(task.c_str(), F_OK) == 0) {
      Unreadable(pid, task + "/schedstat", "cannot read (kernel without CONFIG_SCHED_INFO?)");
      run_delay_ok = false;
    } else {
      continue;  // the thread exited while we listed: not a problem
    }
    if (ReadFile(task + "/status", &text)) {
      if (!StatusValue(text, "voluntary_ctxt_switches", &ts.voluntary) ||
          !StatusValue(text, "nonvoluntary_ctxt_switches", &ts.involuntary)) {
        Unreadable(pid, task + "/status", "no *_ctxt_switches lines");
        switches_ok = false;
      }
    } else if (::access(task.c_str(), F_OK) == 0) {
      Unreadable(pid, task + "/status", "cannot read");
      switches_ok = false;
    }
    threads.emplace(tid, ts);
  }

  auto prev_it = pids_.find(pid);
  if (prev_it != pids_.end() && now_ns > prev_it->second.time_ns) {
    const PidState& prev = prev_it->second;
    const double wall_ns = static_cast<double>(now_ns - prev.time_ns);
    uint64_t cpu_ns = 0;
    uint64_t run_delay = 0;
    uint64_t timeslices = 0;
    uint64_t voluntary = 0;
    uint64_t involuntary = 0;
    std::optional<uint64_t> main_run_delay;  // the main thread's (tid == pid)
    uint64_t main_timeslices = 0;
    // The communication threads' seen in both calls (one that appeared since has no known
    // start: its counts could span its whole life before it was named).
    const auto comm_it = comm_tids_.find(pid);
    const std::set<int32_t>* comm = comm_it != comm_tids_.end() ? &comm_it->second : nullptr;
    bool comm_seen = false;
    uint64_t comm_run_delay = 0;
    uint64_t comm_timeslices = 0;
    for (const auto& [tid, ts] : threads) {
      const auto before = prev.threads.find(tid);
      const ThreadState zero;
      const ThreadState& b = before != prev.threads.end() ? before->second : zero;
      cpu_ns += Delta(ts.cpu_ns, b.cpu_ns);
      run_delay += Delta(ts.run_delay_ns, b.run_delay_ns);
      timeslices += Delta(ts.timeslices, b.timeslices);
      voluntary += Delta(ts.voluntary, b.voluntary);
      involuntary += Delta(ts.involuntary, b.involuntary);
      if (tid == pid && before != prev.threads.end()) {
        main_run_delay = Delta(ts.run_delay_ns, b.run_delay_ns);
        main_timeslices = Delta(ts.timeslices, b.timeslices);
      }
      if (comm != nullptr && before != prev.threads.end() && comm->count(tid) != 0) {
        comm_seen = true;
        comm_run_delay += Delta(ts.run_delay_ns, b.run_delay_ns);
        comm_timeslices += Delta(ts.timeslices, b.timeslices);
      }
    }
    if (run_delay_ok) {
      emit(Metric::kCpuUtilization, static_cast<double>(cpu_ns) / wall_ns);
      emit(Metric::kRunQueueDelayFraction, static_cast<double>(run_delay) / wall_ns);
      if (steal_fraction_ >= 0) emit(Metric::kCpuStealFraction, steal_fraction_);
      if (timeslices_ok) {
        emit(Metric::kTimeslicesPerSec, static_cast<double>(timeslices) * 1e9 / wall_ns);
      }
      if (main_run_delay) {
        emit(Metric::kMainThreadRunQueueFraction,
             std::min(1.0, static_cast<double>(*main_run_delay) / wall_ns));
        if (timeslices_ok) {
          emit(Metric::kMainThreadTimeslicesPerSec,
               static_cast<double>(main_timeslices) * 1e9 / wall_ns);
        }
      }
      if (comm_seen && timeslices_ok) {
        emit(Metric::kCommThreadRunQueueFraction, static_cast<double>(comm_run_delay) / wall_ns);
        emit(Metric::kCommThreadTimeslicesPerSec,
             static_cast<double>(comm_timeslices) * 1e9 / wall_ns);
      }
    } else if (cpu_ok) {
      const uint64_t ticks = Delta(utime + stime, prev.cpu_ticks);
      emit(Metric::kCpuUtilization, static_cast<double>(ticks) / ticks_per_s_ * 1e9 / wall_ns);
    }
    if (switches_ok) {
      emit(Metric::kVoluntaryCtxSwitchesPerSec, static_cast<double>(voluntary) * 1e9 / wall_ns);
      emit(Metric::kInvoluntaryCtxSwitchesPerSec, static_cast<double>(involuntary) * 1e9 / wall_ns);
    }
  }
  PidState& state = pids_[pid];
  state.time_ns = now_ns;
  state.cpu_ticks = cpu_ok ? utime + stime : 0;
  state.threads = std::move(threads);
  return true;
}

void HostSampler::SampleNics(int64_t now_ns, std::vector<PidSample>* out) {
  const std::string net = sys_root_ + "/class/net";
  bool listed = false;
  const std::vector<std::string> names = ListDir(net, &listed);
  if (!listed) {
    Unreadable(-1, net, "cannot list network interfaces");
    return;
  }
  std::map<std::string, NicState> now;
  std::string text;
  for (const std::string& name : names) {
    if (name == "lo") continue;
    const std::string dir = net + "/" + name;
    uint64_t ifindex = 0;
    NicState s;
    s.time_ns = now_ns;
    if (!ReadFile(dir + "/ifindex", &text) || !ParseU64(text, &ifindex)) {
      Unreadable(-1, dir + "/ifindex", "cannot read");
      continue;
    }
    if (!ReadFile(dir + "/statistics/tx_bytes", &text) || !ParseU64(text, &s.tx_bytes) ||
        !ReadFile(dir + "/statistics/rx_bytes", &text) || !ParseU64(text, &s.rx_bytes)) {
      Unreadable(-1, dir + "/statistics", "cannot read tx_bytes / rx_bytes");
      continue;
    }
    const auto before = nics_.find(name);
    if (before != nics_.end() && now_ns > before->second.time_ns) {
      const double wall_s = static_cast<double>(now_ns - before->second.time_ns) / 1e9;
      for (const auto& [metric, bytes] :
           {std::pair{Metric::kNicTxBytesPerSec, Delta(s.tx_bytes, before->second.tx_bytes)},
            std::pair{Metric::kNicRxBytesPerSec, Delta(s.rx_bytes, before->second.rx_bytes)}}) {
        PidSample ps;
        ps.pid = -1;
        ps.sample.time_ns = now_ns;
        ps.sample.value = static_cast<double>(bytes) / wall_s;
        ps.sample.source = static_cast<uint32_t>(ifindex);
        ps.sample.metric = metric;
        out->push_back(ps);
      }
    }
    now.emplace(name, s);
  }
  nics_ = std::move(now);
}

}  // namespace perftracker
