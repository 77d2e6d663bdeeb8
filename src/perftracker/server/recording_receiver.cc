#include "perftracker/server/recording_receiver.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include <fmt/core.h>

#include "perftracker/core/private_file_mode.h"

namespace perftracker {

RecordingReceiver::RecordingReceiver(std::string dir, uint64_t max_bytes)
    : dir_(std::move(dir)), max_bytes_(max_bytes) {}

RecordingReceiver::~RecordingReceiver() {
  while (!parts_.empty()) Drop(parts_.begin());
}

void RecordingReceiver::Drop(std::map<std::pair<uint64_t, int32_t>, Part>::iterator it) {
  it->second.out.close();
  std::error_code ec;
  std::filesystem::remove(it->second.path, ec);
  parts_.erase(it);
}

Status RecordingReceiver::Add(const ControlWindowRecording& chunk, std::string* complete) {
  complete->clear();
  const auto key = std::make_pair(chunk.window, chunk.rank);
  auto it = parts_.find(key);
  const std::string what =
      fmt::format("recording of rank {} for window {}", chunk.rank, chunk.window);
  if (it == parts_.end()) {
    if (chunk.offset != 0) {
      return Status::InvalidArgument(
          fmt::format("{}: a chunk at byte {} without the ones before it (dropped on the way?)",
                      what, chunk.offset));
    }
    std::error_code ec;
    if (std::filesystem::create_directories(dir_, ec)) ::chmod(dir_.c_str(), PrivateDirMode());
    Part part;
    part.path = (std::filesystem::path(dir_) /
                 fmt::format("window-{}-rank-{}.ptrace.part", chunk.window, chunk.rank))
                    .string();
    part.out.open(part.path, std::ios::binary | std::ios::trunc);
    if (!part.out) {
      return Status::Internal(
          fmt::format("{}: cannot write {}: {}", what, part.path, std::strerror(errno)));
    }
    ::chmod(part.path.c_str(), PrivateFileMode());
    it = parts_.emplace(key, std::move(part)).first;
  }
  Part& part = it->second;
  if (chunk.offset != part.bytes) {
    const uint64_t received = part.bytes;
    Drop(it);
    return Status::InvalidArgument(fmt::format(
        "{}: a chunk at byte {} where {} bytes were received (a chunk was lost on the way)", what,
        chunk.offset, received));
  }
  if (part.bytes + chunk.data.size() > max_bytes_) {
    Drop(it);
    return Status::InvalidArgument(fmt::format("{}: over the limit of {} bytes", what, max_bytes_));
  }
  part.out.write(chunk.data.data(), static_cast<std::streamsize>(chunk.data.size()));
  part.bytes += chunk.data.size();
  if (!part.out) {
    Drop(it);
    return Status::Internal(fmt::format("{}: cannot write to {}", what, dir_));
  }
  if (!chunk.last) return Status::Ok();
  part.out.close();
  const std::string path = part.path.substr(0, part.path.size() - std::strlen(".part"));
  std::error_code ec;
  std::filesystem::rename(part.path, path, ec);
  if (ec) {
    Drop(it);
    return Status::Internal(fmt::format("{}: cannot rename to {}: {}", what, path, ec.message()));
  }
  parts_.erase(it);
  *complete = path;
  return Status::Ok();
}

}  // namespace perftracker
