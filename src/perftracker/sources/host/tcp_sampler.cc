// TcpSampler — per process, its TCP connections' delivered bytes and delivery rate.
//
// Each Sample() walks /proc/<pid>/fd; for every entry that is a socket ("socket:[inode]")
// it takes a copy of the process's descriptor (pidfd_getfd: the same open socket, never a
// new connection), keeps it when it is an established TCP socket, and reads TCP_INFO:
//   tcpi_bytes_acked     bytes the peer acknowledged: a counter, so the change between two
//                        samples is what the connection delivered in the interval
//   tcpi_delivery_rate   the kernel's rate sample (RFC draft "delivery rate estimation",
//                        the input of BBR): bytes delivered over the interval they took, of
//                        the latest ACK. A sender limited by its path (a token bucket, a NIC
//                        at 100 Mbit/s) measures the path; one whose peer only acknowledges
//                        late (the receiver is behind the slow path) still measures its own
//                        fast path, which is what tells the two apart (rank 1 behind a
//                        100 Mbit/s tbf: 96 Mbit/s; the peers sending to it: 30-57 Gbit/s).
// Only the connection that delivered the most in the interval gives the rate, and only when
// it was busy (>= kBusyBytes): an idle connection's last estimate is stale. The wire time adds
// up, over the busy connections, what each delivered divided by its rate: the time the bytes
// took on their paths. Its sum over a window, not the mean of the rate samples, is what says
// how fast a process's bytes went: a rate sample is of the latest ACK only, and behind a token
// bucket some caught a burst the bucket let through at line rate (rank 1 behind a 25 Mbit/s
// tbf: 8 of 127 busy samples above 100 Mbit/s, up to 1.24 Gbit/s, most of them app-limited;
// the samples' mean 80.8 Mbit/s, their bytes over their wire time 19.5 Mbit/s).
//
// A sample the kernel marks app-limited (tcpi_delivery_rate_app_limited: the sender had too
// little queued to fill the path) is only a lower bound of the path's rate: the wire time
// takes it at the connection's best sample so far when that is higher. On loopback every
// sample of a gloo rank is app-limited (1,280 of 1,280 in `ss -ti` over 8 s), and a few low
// ones once made a healthy rank's rate 1.33 Gbit/s against its peers' 130 (a material
// PT-NET-SLOW-LINK on real-healthy-3); behind a token bucket the sender keeps a queue, its
// samples are not app-limited and keep their rate.
//
// Connections whose two ends are on this host (loopback: the peer is 127.0.0.0/8 or ::1,
// or the connection's own address) cross no network link, and are left out: their rate
// samples say how fast two processes exchange bytes through the kernel, which depends on
// how fast each runs. The ranks of a one-host gloo job once looked like a slow link: on a
// 16-core H200 machine (torch 2.11) rank 0's loopback connections delivered at 1.82 Gbit/s
// against its peers' 105, a material PT-NET-SLOW-LINK for a healthy job.
//
// The copies are closed at once; reading TCP_INFO changes nothing in the socket, so the
// job's traffic is untouched. The one side effect: while a copy is open (a few
// microseconds) a socket the job closes stays open until the copy is closed, so its FIN
// leaves that much later. (NETLINK_SOCK_DIAG would avoid even that, but only sees the
// collector's own network namespace; ranks in their own namespaces are common.) Per pid the state
// is a pidfd (closed when the pid is no longer asked for) and the last bytes_acked per socket inode
// (only the inodes seen last time), so memory is bounded by the pids and their open sockets.
#include "perftracker/sources/host/tcp_sampler.h"

#include <dirent.h>
#include <linux/tcp.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstdlib>
#include <cstring>

namespace perftracker {
namespace {

int PidfdOpen(int32_t pid) {
#ifdef SYS_pidfd_open
  return static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
#else
  errno = ENOSYS;
  return -1;
#endif
}

int PidfdGetfd(int pidfd, int fd) {
#ifdef SYS_pidfd_getfd
  return static_cast<int>(::syscall(SYS_pidfd_getfd, pidfd, fd, 0));
#else
  errno = ENOSYS;
  return -1;
#endif
}

// The socket inode of a /proc/<pid>/fd link target "socket:[12345]", or 0.
uint64_t SocketInode(const char* target) {
  constexpr char kPrefix[] = "socket:[";
  if (std::strncmp(target, kPrefix, sizeof(kPrefix) - 1) != 0) return 0;
  return std::strtoull(target + sizeof(kPrefix) - 1, nullptr, 10);
}

struct TcpReading {
  uint64_t bytes_acked = 0;
  uint64_t delivery_rate = 0;  // bytes per second
  bool app_limited = false;    // the rate sample is a lower bound
};

// TCP_INFO of an established IPv4/IPv6 TCP socket; false for anything else.
bool ReadTcpInfo(int fd, TcpReading* out) {
  int value = 0;
  socklen_t len = sizeof(value);
  if (getsockopt(fd, SOL_SOCKET, SO_PROTOCOL, &value, &len) != 0 || value != IPPROTO_TCP) {
    return false;
  }
  struct tcp_info info {};
  len = sizeof(info);
  if (getsockopt(fd, IPPROTO_TCP, TCP_INFO, &info, &len) != 0) return false;
  // Kernels older than 4.9 return a shorter struct without these fields.
  if (len < offsetof(struct tcp_info, tcpi_delivery_rate) + sizeof(info.tcpi_delivery_rate)) {
    return false;
  }
  if (info.tcpi_state != 1 /* TCP_ESTABLISHED */) return false;
  out->bytes_acked = info.tcpi_bytes_acked;
  out->delivery_rate = info.tcpi_delivery_rate;
  out->app_limited = info.tcpi_delivery_rate_app_limited != 0;
  return true;
}

// True when the socket's peer is this host: a loopback address, or the socket's own address
// (two processes of this host talking over its external address). False when unknown.
bool HostLocal(int fd) {
  sockaddr_storage self{}, peer{};
  socklen_t self_len = sizeof(self), peer_len = sizeof(peer);
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&self), &self_len) != 0 ||
      getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &peer_len) != 0) {
    return false;
  }
  auto v4 = [](const sockaddr_storage& a, in_addr* out) {
    if (a.ss_family == AF_INET) {
      *out = reinterpret_cast<const sockaddr_in&>(a).sin_addr;
      return true;
    }
    const in6_addr& six = reinterpret_cast<const sockaddr_in6&>(a).sin6_addr;
    if (a.ss_family == AF_INET6 && IN6_IS_ADDR_V4MAPPED(&six)) {
      std::memcpy(&out->s_addr, six.s6_addr + 12, 4);
      return true;
    }
    return false;
  };
  in_addr self4{}, peer4{};
  if (v4(peer, &peer4)) {
    if ((ntohl(peer4.s_addr) >> 24) == 127) return true;
    return v4(self, &self4) && self4.s_addr == peer4.s_addr;
  }
  if (peer.ss_family != AF_INET6 || self.ss_family != AF_INET6) return false;
  const in6_addr& peer6 = reinterpret_cast<const sockaddr_in6&>(peer).sin6_addr;
  const in6_addr& self6 = reinterpret_cast<const sockaddr_in6&>(self).sin6_addr;
  return IN6_IS_ADDR_LOOPBACK(&peer6) || std::memcmp(&peer6, &self6, sizeof(peer6)) == 0;
}

}  // namespace

TcpSampler::TcpSampler(std::string proc_root, bool host_local)
    : proc_root_(std::move(proc_root)), host_local_(host_local) {}

uint64_t TcpSampler::TcpRateForWireTime(uint64_t sample, bool app_limited, uint64_t best) {
  return app_limited ? std::max(sample, best) : sample;
}

TcpSampler::~TcpSampler() {
  for (auto& [pid, state] : pids_) {
    if (state.pidfd >= 0) ::close(state.pidfd);
  }
}

void TcpSampler::Problem(const std::string& what) {
  if (stats_.first_problem.empty()) stats_.first_problem = what;
}

void TcpSampler::Sample(int64_t now_ns, const std::vector<int32_t>& pids,
                        std::vector<PidSample>* out) {
  ++stats_.samples;
  std::map<int32_t, PidState> next;
  for (int32_t pid : pids) {
    if (next.count(pid) != 0) continue;
    PidState state;
    auto it = pids_.find(pid);
    if (it != pids_.end()) {
      state = std::move(it->second);
      pids_.erase(it);
    }
    if (state.denied) {
      CountProblem(pid, SampleProblem::kUnreadable);  // each sample it misses
      next.emplace(pid, std::move(state));
      continue;
    }
    if (!SamplePid(now_ns, pid, &state, out)) {
      if (state.pidfd >= 0) ::close(state.pidfd);
      if (!state.denied) continue;  // gone: a later call starts over
      state.pidfd = -1;             // denied: remembered, never asked again
      state.acked.clear();
      state.best_rate.clear();
    }
    next.emplace(pid, std::move(state));
  }
  for (auto& [pid, state] : pids_) {  // pids no longer asked for
    if (state.pidfd >= 0) ::close(state.pidfd);
  }
  pids_ = std::move(next);
}

bool TcpSampler::SamplePid(int64_t now_ns, int32_t pid, PidState* state,
                           std::vector<PidSample>* out) {
  if (state->pidfd < 0) {
    state->pidfd = PidfdOpen(pid);
    if (state->pidfd < 0) {
      if (errno == ESRCH) {
        ++stats_.vanished_pids;
        CountProblem(pid, SampleProblem::kProcessGone);
      } else {
        CountProblem(pid, SampleProblem::kUnreadable);
        Problem("pidfd_open(" + std::to_string(pid) + "): " + std::strerror(errno) +
                " (Linux 5.6 or newer needed for TCP samples)");
      }
      return false;
    }
  }
  const std::string fd_dir = proc_root_ + "/" + std::to_string(pid) + "/fd";
  DIR* dir = ::opendir(fd_dir.c_str());
  if (dir == nullptr) {
    if (errno == ENOENT) {
      ++stats_.vanished_pids;
      CountProblem(pid, SampleProblem::kProcessGone);
    } else {
      state->denied = true;
      ++stats_.unreadable_pids;
      CountProblem(pid, SampleProblem::kUnreadable);
      Problem(fd_dir + ": " + std::strerror(errno));
    }
    return false;
  }
  std::map<uint64_t, uint64_t> acked;
  std::map<uint64_t, uint64_t> best_rate;
  uint64_t delivered = 0, busiest = 0, busiest_rate = 0;
  double wire_seconds = 0;  // what the busy connections delivered, each at its rate
  int sockets = 0;
  char target[64];
  while (const dirent* e = ::readdir(dir)) {
    if (e->d_name[0] == '.') continue;
    const std::string link = fd_dir + "/" + e->d_name;
    const ssize_t n = ::readlink(link.c_str(), target, sizeof(target) - 1);
    if (n <= 0) continue;
    target[n] = '\0';
    const uint64_t inode = SocketInode(target);
    if (inode == 0) continue;
    if (++sockets > kMaxSockets) {
      ++stats_.truncated;
      CountProblem(pid, SampleProblem::kTruncated);
      break;
    }
    const int copy = PidfdGetfd(state->pidfd, std::atoi(e->d_name));
    if (copy < 0) {
      if (errno == EPERM || errno == EACCES) {
        ::closedir(dir);
        state->denied = true;
        ++stats_.unreadable_pids;
        CountProblem(pid, SampleProblem::kUnreadable);
        Problem("pid " + std::to_string(pid) +
                ": no permission to read its sockets (run perftracker as the job's parent, "
                "its user or root): no TCP samples for it");
        return false;
      }
      continue;  // closed meanwhile
    }
    TcpReading r;
    const bool tcp = ReadTcpInfo(copy, &r);
    const bool local = tcp && !host_local_ && HostLocal(copy);
    ::close(copy);
    if (!tcp) continue;
    if (local) {
      ++stats_.host_local_skipped;
      continue;
    }
    acked[inode] = r.bytes_acked;
    auto best_it = state->best_rate.find(inode);
    const uint64_t best = best_it == state->best_rate.end() ? 0 : best_it->second;
    best_rate[inode] = std::max(best, r.delivery_rate);
    const uint64_t rate = TcpRateForWireTime(r.delivery_rate, r.app_limited, best);
    auto prev = state->acked.find(inode);
    if (prev == state->acked.end() || r.bytes_acked < prev->second) continue;
    const uint64_t d = r.bytes_acked - prev->second;
    delivered += d;
    if (d >= kBusyBytes && rate > 0) {
      wire_seconds += static_cast<double>(d) / static_cast<double>(rate);
    }
    if (d > busiest) {
      busiest = d;
      busiest_rate = rate;
    }
  }
  ::closedir(dir);
  if (state->time_ns > 0 && now_ns > state->time_ns) {
    const double seconds = static_cast<double>(now_ns - state->time_ns) / 1e9;
    auto add = [&](Metric m, double v) {
      PidSample s;
      s.pid = pid;
      s.sample.time_ns = now_ns;
      s.sample.metric = m;
      s.sample.value = v;
      out->push_back(s);
    };
    if (!acked.empty()) {
      add(Metric::kTcpSendBytesPerSec, static_cast<double>(delivered) / seconds);
      add(Metric::kTcpWireSecondsPerSec, wire_seconds / seconds);
    }
    if (busiest >= kBusyBytes && busiest_rate > 0) {
      add(Metric::kTcpDeliveryRateBytesPerSec, static_cast<double>(busiest_rate));
    }
  }
  state->time_ns = now_ns;
  state->acked = std::move(acked);
  state->best_rate = std::move(best_rate);
  return true;
}

}  // namespace perftracker
