#include "perftracker/sources/ib/ib_sampler.h"

#include <dirent.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <string_view>

namespace perftracker {
namespace {

constexpr uint64_t kIffUp = 0x1;  // IFF_UP of <net/if.h>: the interface is configured up

bool ReadSmall(const std::string& path, std::string* out) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  char buf[256];
  ssize_t n;
  do {
    n = ::read(fd, buf, sizeof(buf));
  } while (n < 0 && errno == EINTR);
  ::close(fd);
  if (n < 0) return false;
  out->assign(buf, static_cast<size_t>(n));
  while (!out->empty() && (out->back() == '\n' || out->back() == ' ')) out->pop_back();
  return true;
}

bool ParseU64(std::string_view s, uint64_t* v) {
  const auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), *v);
  return ec == std::errc() && p == s.data() + s.size() && !s.empty();
}

// "0x1003": sysfs's hexadecimal flags.
bool ParseHex(std::string_view s, uint64_t* v) {
  if (s.size() > 2 && s[0] == '0' && (s[1] == 'x' || s[1] == 'X')) s.remove_prefix(2);
  const auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), *v, 16);
  return ec == std::errc() && p == s.data() + s.size() && !s.empty();
}

std::vector<std::string> List(const std::string& path) {
  std::vector<std::string> names;
  DIR* dir = ::opendir(path.c_str());
  if (dir == nullptr) return names;
  while (const dirent* e = ::readdir(dir)) {
    if (e->d_name[0] != '.') names.emplace_back(e->d_name);
  }
  ::closedir(dir);
  std::sort(names.begin(), names.end());
  return names;
}

constexpr double kBytesPerCounterUnit = 4.0;  // counters count octets divided by 4

}  // namespace

IbSampler::IbSampler(std::string sys_root) : sys_root_(std::move(sys_root)) {}

void IbSampler::Problem(const std::string& path, const char* why) {
  ++stats_.unreadable_files;
  CountProblem(-1, SampleProblem::kUnreadable);  // ports and links are host-wide
  if (stats_.first_problem.empty()) stats_.first_problem = path + ": " + why;
}

void IbSampler::Sample(int64_t now_ns, std::vector<MetricSample>* out) {
  ++stats_.samples;
  SamplePorts(now_ns, out);
  SampleCarrier(now_ns, out);
}

void IbSampler::Sample(int64_t now_ns, const std::vector<int32_t>& /*pids*/,
                       std::vector<PidSample>* out) {
  std::vector<MetricSample> samples;
  Sample(now_ns, &samples);
  for (const MetricSample& s : samples) out->push_back(PidSample{-1, s});
}

void IbSampler::SamplePorts(int64_t now_ns, std::vector<MetricSample>* out) {
  const std::string root = sys_root_ + "/class/infiniband";
  const std::vector<std::string> devices = List(root);
  std::map<std::string, PortState> seen;
  uint64_t port_count = 0;
  for (uint32_t dn = 0; dn < devices.size(); ++dn) {
    const std::string ports_dir = root + "/" + devices[dn] + "/ports";
    for (const std::string& port_name : List(ports_dir)) {
      uint64_t port = 0;
      if (!ParseU64(port_name, &port) || port > 255) continue;
      ++port_count;
      const std::string dir = ports_dir + "/" + port_name;
      const uint32_t source = PortSource(dn, static_cast<uint32_t>(port));
      auto emit = [&](Metric metric, double value) {
        MetricSample s;
        s.time_ns = now_ns;
        s.value = value;
        s.source = source;
        s.metric = metric;
        out->push_back(s);
      };
      std::string text;
      if (ReadSmall(dir + "/state", &text)) {
        // "4: ACTIVE": the number is the IBA port state; 4 is ACTIVE.
        uint64_t state = 0;
        const size_t colon = text.find(':');
        if (ParseU64(std::string_view(text).substr(0, colon), &state)) {
          emit(Metric::kNicLinkUp, state == 4 ? 1.0 : 0.0);
        } else {
          Problem(dir + "/state", "not \"<n>: <NAME>\"");
        }
      } else {
        Problem(dir + "/state", "cannot read");
      }
      uint64_t xmit = 0;
      uint64_t rcv = 0;
      std::string x;
      std::string r;
      if (!ReadSmall(dir + "/counters/port_xmit_data", &x) ||
          !ReadSmall(dir + "/counters/port_rcv_data", &r)) {
        Problem(dir + "/counters", "cannot read port_xmit_data / port_rcv_data");
        continue;
      }
      if (!ParseU64(x, &xmit) || !ParseU64(r, &rcv)) {
        Problem(dir + "/counters", "port_xmit_data / port_rcv_data is not a number");
        continue;
      }
      const std::string key = devices[dn] + "/" + port_name;
      auto it = ports_.find(key);
      if (it != ports_.end() && now_ns > it->second.time_ns && xmit >= it->second.xmit &&
          rcv >= it->second.rcv) {
        const double seconds = static_cast<double>(now_ns - it->second.time_ns) / 1e9;
        emit(Metric::kIbTxBytesPerSec,
             static_cast<double>(xmit - it->second.xmit) * kBytesPerCounterUnit / seconds);
        emit(Metric::kIbRxBytesPerSec,
             static_cast<double>(rcv - it->second.rcv) * kBytesPerCounterUnit / seconds);
      }
      seen[key] = PortState{now_ns, xmit, rcv};
    }
  }
  ports_ = std::move(seen);  // ports that vanished are forgotten
  stats_.ports = port_count;
}

void IbSampler::SampleCarrier(int64_t now_ns, std::vector<MetricSample>* out) {
  const std::string root = sys_root_ + "/class/net";
  uint64_t count = 0;
  for (const std::string& name : List(root)) {
    if (name == "lo") continue;
    const std::string dir = root + "/" + name;
    std::string text;
    uint64_t ifindex = 0;
    if (!ReadSmall(dir + "/ifindex", &text) || !ParseU64(text, &ifindex)) {
      Problem(dir + "/ifindex", "cannot read");
      continue;
    }
    // An interface configured down (IFF_UP clear in `flags`, e.g. an unused ifb0) carries
    // nothing: it is not a link that went down.
    uint64_t flags = 0;
    if (ReadSmall(dir + "/flags", &text) && ParseHex(text, &flags) && (flags & kIffUp) == 0) {
      continue;
    }
    ++count;
    double up = 0;
    if (ReadSmall(dir + "/carrier", &text)) {
      up = text == "1" ? 1.0 : 0.0;
    } else {
      // The kernel refuses to read carrier (EINVAL) while the interface is down.
      std::string oper;
      if (!ReadSmall(dir + "/operstate", &oper) || oper != "down") {
        Problem(dir + "/carrier", "cannot read");
        continue;
      }
    }
    MetricSample s;
    s.time_ns = now_ns;
    s.value = up;
    s.source = static_cast<uint32_t>(ifindex);
    s.metric = Metric::kNicLinkUp;
    out->push_back(s);
  }
  stats_.interfaces = count;
}

}  // namespace perftracker
