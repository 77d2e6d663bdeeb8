#include "perftracker/server/report_writer.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstring>
#include <filesystem>
#include <vector>

#include <fmt/core.h>

#include "perftracker/core/private_file_mode.h"
#include "perftracker/report/compare_report.h"

namespace perftracker {
namespace {

namespace fs = std::filesystem;

// Reports name hosts, paths and code: files are readable by their owner only (0600) unless
// --report-mode says otherwise (PrivateFileMode).
Status WriteAtomically(const std::string& path, const std::string& content) {
  const std::string tmp = path + ".tmp";
  const mode_t mode = PrivateFileMode();
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, mode);
  if (fd < 0)
    return Status::Internal(fmt::format("{}: cannot write: {}", tmp, std::strerror(errno)));
  // Exactly `mode`: a leftover .tmp keeps its mode otherwise, and the umask may take bits.
  int err = ::fchmod(fd, mode) == 0 ? 0 : errno;
  for (size_t done = 0; err == 0 && done < content.size();) {
    const ssize_t n = ::write(fd, content.data() + done, content.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      err = errno;
      break;
    }
    done += static_cast<size_t>(n);
  }
  if (::close(fd) != 0 && err == 0) err = errno;
  if (err != 0) {
    std::error_code ec;
    fs::remove(tmp, ec);
    return Status::Internal(fmt::format("{}: cannot write: {}", tmp, std::strerror(err)));
  }
  std::error_code ec;
  fs::rename(tmp, path, ec);
  if (ec)
    return Status::Internal(fmt::format("{}: cannot rename into place: {}", path, ec.message()));
  return Status::Ok();
}

}  // namespace

Status EnsureReportDir(const std::string& dir) {
  if (dir.empty()) return Status::InvalidArgument("the report directory is empty");
  // Each directory created here is the owner's only (0700, or PrivateDirMode for
  // --report-mode); existing ones are left as they are.
  std::error_code ec;
  fs::path partial;
  for (const fs::path& part : fs::path(dir)) {
    partial /= part;
    if (::mkdir(partial.c_str(), PrivateDirMode()) == 0) {
      ::chmod(partial.c_str(), PrivateDirMode());  // the umask may have taken bits
      continue;
    }
    if (errno == EEXIST) continue;
    ec = std::error_code(errno, std::generic_category());
    break;
  }
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

std::string WindowReportStem(uint64_t window, WindowReason reason) {
  return fmt::format("window-{}-{}", window, WindowReasonName(reason));
}

std::string ComparisonReportStem(uint64_t window, uint64_t baseline) {
  return fmt::format("window-{}-vs-{}", window, baseline);
}

std::string TimelineFileName(uint64_t window) {
  return fmt::format("window-{}.perfetto.json", window);
}

std::string StacksFileName(uint64_t window) { return fmt::format("window-{}-stacks.txt", window); }

std::optional<WindowReportFile> ParseWindowReportFileName(std::string_view name) {
  constexpr std::string_view kPrefix = "window-", kSuffix = ".json";
  if (!name.starts_with(kPrefix) || !name.ends_with(kSuffix)) return std::nullopt;
  name = name.substr(kPrefix.size(), name.size() - kPrefix.size() - kSuffix.size());
  const size_t dash = name.find('-');
  if (dash == 0 || dash == std::string_view::npos) return std::nullopt;
  WindowReportFile file;
  const std::string_view id = name.substr(0, dash);
  const auto [end, ec] = std::from_chars(id.data(), id.data() + id.size(), file.window);
  if (ec != std::errc() || end != id.data() + id.size()) return std::nullopt;
  // "vs-<base>" (a comparison) and "<id>.perfetto" (no reason) are not reasons.
  if (!ParseWindowReason(name.substr(dash + 1), &file.reason)) return std::nullopt;
  return file;
}

StatusOr<std::string> WriteComparisonReport(const std::string& dir, uint64_t window,
                                            uint64_t baseline,
                                            const compare::Comparison& comparison) {
  PERFTRACKER_RETURN_IF_ERROR(EnsureReportDir(dir));
  const std::string base = (fs::path(dir) / ComparisonReportStem(window, baseline)).string();
  PERFTRACKER_RETURN_IF_ERROR(WriteAtomically(base + ".json", RenderComparisonJson(comparison)));
  PERFTRACKER_RETURN_IF_ERROR(WriteAtomically(base + ".html", RenderComparisonHtml(comparison)));
  return base + ".json";
}

StatusOr<WrittenReport> WriteWindowReport(const std::string& dir, uint64_t window,
                                          WindowReason reason, const ReportInput& input,
                                          const std::map<int32_t, std::string>& stacks) {
  PERFTRACKER_RETURN_IF_ERROR(EnsureReportDir(dir));
  WrittenReport written;
  const std::string base = (fs::path(dir) / WindowReportStem(window, reason)).string();
  written.json_path = base + ".json";
  written.html_path = base + ".html";
  const std::vector<SkippedInput> no_skipped_inputs;
  ReportInput json_input = input;
  json_input.skipped_inputs = &no_skipped_inputs;
  written.json = RenderJson(json_input);
  PERFTRACKER_RETURN_IF_ERROR(WriteAtomically(written.json_path, written.json));
  PERFTRACKER_RETURN_IF_ERROR(WriteAtomically(written.html_path, RenderHtml(input)));
  if (!stacks.empty()) {
    std::string text;
    for (const auto& [rank, stack] : stacks) {
      text += fmt::format("==== rank {} ====\n{}", rank, stack);
      if (!stack.empty() && stack.back() != '\n') text += '\n';
      text += '\n';
    }
    written.stacks_path = (fs::path(dir) / StacksFileName(window)).string();
    PERFTRACKER_RETURN_IF_ERROR(WriteAtomically(written.stacks_path, text));
  }
  return written;
}

}  // namespace perftracker
