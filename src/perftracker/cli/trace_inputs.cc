#include "perftracker/cli/trace_inputs.h"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <filesystem>
#include <string_view>

#include <fmt/core.h>

#include "perftracker/core/input_file.h"

namespace perftracker {
namespace {

namespace fs = std::filesystem;

bool IsTraceFileName(const fs::path& p) {
  const std::string name = p.filename().string();
  auto ends_with = [&](std::string_view suffix) {
    return name.size() >= suffix.size() &&
           name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0;
  };
  return ends_with(".json") || ends_with(".json.gz");
}

}  // namespace

StatusOr<std::vector<std::string>> ExpandTraceInputs(const std::vector<std::string>& paths) {
  std::vector<std::string> files;
  for (const auto& path : paths) {
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0) return InputPathError(path, errno);
    std::error_code ec;
    if (S_ISDIR(st.st_mode)) {
      std::vector<std::string> found;
      for (auto it = fs::recursive_directory_iterator(
               path, fs::directory_options::skip_permission_denied, ec);
           !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
        if (!IsTraceFileName(it->path())) continue;
        // A regular file, or anything else under a trace's name but a directory (a FIFO, a
        // socket, a device, a dangling symlink, a symlink loop): listed too, so that diagnose
        // skips it with the reason (one note) instead of passing over it in silence. Its own
        // error code: a loop must not end the walk.
        std::error_code entry_ec;
        if (!fs::is_directory(it->status(entry_ec))) found.push_back(it->path().string());
      }
      if (ec)
        return Status::InvalidArgument(
            fmt::format("{}: cannot read directory: {}", path, ec.message()));
      if (found.empty()) {
        return Status::NotFound(fmt::format(
            "{}: no trace files (*.json, *.json.gz) in this directory; point perftracker at the "
            "files torch.profiler's export_chrome_trace wrote",
            path));
      }
      std::sort(found.begin(), found.end());
      files.insert(files.end(), found.begin(), found.end());
    } else {
      files.push_back(path);
    }
  }
  return files;
}

}  // namespace perftracker
