#include "perftracker/report/rank_trace_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string_view>

#include <fmt/core.h>

#include "perftracker/core/event_time.h"

namespace perftracker {
namespace {

constexpr std::string_view kMagic = "PTRANK1\n";

class Writer {
 public:
  template <typename T>
  void Put(const T& v) {
    static_assert(std::is_trivially_copyable_v<T>);
    buf_.append(reinterpret_cast<const char*>(&v), sizeof(T));
  }
  void Str(std::string_view s) {
    Put(static_cast<uint32_t>(s.size()));
    buf_.append(s);
  }
  void Bytes(const void* data, size_t n) { buf_.append(static_cast<const char*>(data), n); }
  std::string& buf() { return buf_; }

 private:
  std::string buf_;
};

class Reader {
 public:
  explicit Reader(std::string_view data) : data_(data) {}
  template <typename T>
  bool Get(T* v) {
    if (data_.size() - at_ < sizeof(T)) return false;
    std::memcpy(v, data_.data() + at_, sizeof(T));
    at_ += sizeof(T);
    return true;
  }
  bool Str(std::string* s) {
    uint32_t n = 0;
    if (!Get(&n) || data_.size() - at_ < n) return false;
    s->assign(data_.data() + at_, n);
    at_ += n;
    return true;
  }
  // Whether `count` records of at least `min_size` bytes each can still be in the file.
  bool Fits(uint64_t count, size_t min_size) const {
    return count <= (data_.size() - at_) / min_size;
  }
  size_t left() const { return data_.size() - at_; }
  const char* here() const { return data_.data() + at_; }
  void Skip(size_t n) { at_ += n; }

 private:
  std::string_view data_;
  size_t at_ = 0;
};

}  // namespace

Status WriteRankTraceFile(const std::string& path, const RankTrace& trace,
                          const FunctionTable* functions, unsigned mode) {
  const FunctionTable& table = functions != nullptr ? *functions : trace.functions();
  Writer w;
  w.buf().reserve(256 + trace.events().size() * sizeof(Event));
  w.Bytes(kMagic.data(), kMagic.size());
  w.Put(trace.rank);
  w.Str(trace.host);
  w.Str(trace.source);
  w.Put(static_cast<uint32_t>(table.size()));
  for (uint32_t id = 0; id < table.size(); ++id) {
    const FunctionTable::Entry& e = table.Get(id);
    w.Put(static_cast<uint8_t>(e.kind));
    w.Put(e.parent);
    w.Str(e.name);
  }
  w.Put(static_cast<uint32_t>(trace.tracks().size()));
  for (const TrackInfo& t : trace.tracks()) {
    w.Put(t.track_id);
    w.Put(static_cast<uint8_t>(t.kind));
    w.Put(t.device);
    w.Str(t.name);
  }
  w.Put(static_cast<uint32_t>(trace.not_recorded().size()));
  for (const auto& [track, n] : trace.not_recorded()) {
    w.Put(track);
    w.Put(n.count);
    w.Put(n.ns);
  }
  w.Put(static_cast<uint64_t>(trace.events().size()));
  w.Bytes(trace.events().data(), trace.events().size() * sizeof(Event));

  const std::string tmp = path + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW,
                        static_cast<mode_t>(mode));
  if (fd < 0)
    return Status::Internal(fmt::format("{}: cannot write: {}", tmp, std::strerror(errno)));
  int err = ::fchmod(fd, static_cast<mode_t>(mode)) == 0 ? 0 : errno;
  const std::string& buf = w.buf();
  for (size_t done = 0; err == 0 && done < buf.size();) {
    const ssize_t n = ::write(fd, buf.data() + done, buf.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      err = errno;
      break;
    }
    done += static_cast<size_t>(n);
  }
  if (::close(fd) != 0 && err == 0) err = errno;
  std::error_code ec;
  if (err != 0) {
    std::filesystem::remove(tmp, ec);
    return Status::Internal(fmt::format("{}: cannot write: {}", tmp, std::strerror(err)));
  }
  std::filesystem::rename(tmp, path, ec);
  if (ec)
    return Status::Internal(fmt::format("{}: cannot rename into place: {}", path, ec.message()));
  return Status::Ok();
}

StatusOr<std::unique_ptr<RankTrace>> ReadRankTraceFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::NotFound(fmt::format("{}: cannot read: {}", path, std::strerror(errno)));
  const std::string data((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  auto bad = [&](std::string_view what) {
    return Status::DataLoss(fmt::format("{}: not a perftracker rank trace ({})", path, what));
  };
  if (std::string_view(data).substr(0, kMagic.size()) != kMagic) return bad("wrong magic");
  Reader r(std::string_view(data).substr(kMagic.size()));
  auto trace = std::make_unique<RankTrace>();
  if (!r.Get(&trace->rank) || !r.Str(&trace->host) || !r.Str(&trace->source)) {
    return bad("truncated header");
  }
  uint32_t n = 0;
  if (!r.Get(&n) || !r.Fits(n, 9)) return bad("bad function count");
  std::string name;
  for (uint32_t id = 0; id < n; ++id) {
    uint8_t kind = 0;
    uint32_t parent = 0;
    if (!r.Get(&kind) || !r.Get(&parent) || !r.Str(&name)) return bad("truncated function table");
    if (kind >= kNumEventKinds || (parent != FunctionTable::kNoParent && parent >= id)) {
      return bad(fmt::format("function {} is invalid", id));
    }
    if (trace->functions()->Intern(static_cast<EventKind>(kind), name, parent) != id) {
      return bad(fmt::format("function {} is a duplicate", id));
    }
  }
  if (!r.Get(&n) || !r.Fits(n, 13)) return bad("bad track count");
  for (uint32_t k = 0; k < n; ++k) {
    TrackInfo t;
    uint8_t kind = 0;
    if (!r.Get(&t.track_id) || !r.Get(&kind) || !r.Get(&t.device) || !r.Str(&t.name)) {
      return bad("truncated track list");
    }
    if (kind > static_cast<uint8_t>(TrackKind::kCommunicator)) return bad("bad track kind");
    t.kind = static_cast<TrackKind>(kind);
    trace->OnTrack(t);
  }
  if (!r.Get(&n) || !r.Fits(n, 20)) return bad("bad not-recorded count");
  for (uint32_t k = 0; k < n; ++k) {
    uint32_t track = 0;
    RankTrace::NotRecorded nr;
    if (!r.Get(&track) || !r.Get(&nr.count) || !r.Get(&nr.ns)) return bad("truncated counts");
    (*trace->mutable_not_recorded())[track] = nr;
  }
  uint64_t events = 0;
  if (!r.Get(&events) || r.left() % sizeof(Event) != 0 || events != r.left() / sizeof(Event)) {
    return bad("bad event count");
  }
  const size_t functions = trace->functions()->size();
  for (uint64_t k = 0; k < events; ++k) {
    Event e;
    std::memcpy(&e, r.here(), sizeof(Event));
    r.Skip(sizeof(Event));
    if (static_cast<uint8_t>(e.kind) >= kNumEventKinds || e.function_id >= functions ||
        !HasValidTimes(e)) {
      return bad(fmt::format("event {} is invalid", k));
    }
    trace->OnEvent(e);
  }
  return trace;
}

}  // namespace perftracker
