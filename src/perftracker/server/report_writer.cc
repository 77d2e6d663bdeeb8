#include "perftracker/server/report_writer.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>

#include <fmt/core.h>
#include <nlohmann/json.hpp>

namespace perftracker {
namespace {

namespace fs = std::filesystem;

Status WriteAtomically(const std::string& path, const std::string& content) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out << content;
    out.close();
    if (!out) {
      const std::string err = std::strerror(errno);
      std::error_code ec;
      fs::remove(tmp, ec);
      return Status::Internal(fmt::format("{}: cannot write: {}", tmp, err));
    }
  }
  std::error_code ec;
  fs::rename(tmp, path, ec);
  if (ec) return Status::Internal(fmt::format("{}: cannot rename into place: {}", path, ec.message()));
  return Status::Ok();
}

}  // namespace

Status EnsureReportDir(const std::string& dir) {
  if (dir.empty()) return Status::InvalidArgument("the report directory is empty");
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) {
    return Status::InvalidArgument(
        fmt::format("{}: cannot create the report directory: {}", dir, ec.message()));
  }
  if (!fs::is_directory(dir, ec)) {
    return Status::InvalidArgument(fmt::format("{}: not a directory", dir));
  }
  if (access(dir.c_str(), W_OK) != 0) {
    return Status::InvalidArgument(fmt::format("{}: not writable: {}", dir, std::strerror(errno)));
  }
  return Status::Ok();
}

std::string RenderWindowJson(const ReportInput& input) {
  nlohmann::ordered_json report = nlohmann::ordered_json::parse(RenderJson(input), nullptr, false);
  if (report.is_discarded() || !report.is_object()) return RenderJson(input);
  report["skipped_inputs"] = nlohmann::ordered_json::array();
  return report.dump(2, ' ', false, nlohmann::ordered_json::error_handler_t::replace) + "\n";
}

StatusOr<WrittenReport> WriteWindowReport(const std::string& dir, uint64_t window,
                                          WindowReason reason, const ReportInput& input,
                                          const std::map<int32_t, std::string>& stacks) {
  PERFTRACKER_RETURN_IF_ERROR(EnsureReportDir(dir));
  WrittenReport written;
  const std::string base =
      (fs::path(dir) / fmt::format("window-{}-{}", window, WindowReasonName(reason))).string();
  written.json_path = base + ".json";
  written.html_path = base + ".html";
  PERFTRACKER_RETURN_IF_ERROR(WriteAtomically(written.json_path, RenderWindowJson(input)));
  PERFTRACKER_RETURN_IF_ERROR(WriteAtomically(written.html_path, RenderHtml(input)));
  if (!stacks.empty()) {
    std::string text;
    for (const auto& [rank, stack] : stacks) {
      text += fmt::format("==== rank {} ====\n{}", rank, stack);
      if (!stack.empty() && stack.back() != '\n') text += '\n';
      text += '\n';
    }
    written.stacks_path = (fs::path(dir) / fmt::format("window-{}-stacks.txt", window)).string();
    PERFTRACKER_RETURN_IF_ERROR(WriteAtomically(written.stacks_path, text));
  }
  return written;
}

}  // namespace perftracker
