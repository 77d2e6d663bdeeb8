#include "perftracker/server/report_writer.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <memory>
#include <string>

#include "perftracker/core/private_file_mode.h"
#include "perftracker/server/sqlite/sqlite_store.h"

namespace perftracker {
namespace {

namespace fs = std::filesystem;

mode_t ModeOf(const fs::path& p) {
  struct stat st {};
  return ::stat(p.c_str(), &st) == 0 ? (st.st_mode & 07777) : 0;
}

// Issue 13 §8: reports and the store are the owner's only unless told otherwise; told
// --report-mode 0640, reports, new directories and a new store are shared with the group.
TEST(ReportWriterTest, ReportModeOverridesTheOwnerOnlyDefault) {
  const fs::path dir =
      fs::temp_directory_path() / ("report_writer_test." + std::to_string(getpid()));
  fs::remove_all(dir);
  ReportInput input;
  StatusOr<WrittenReport> owner_only =
      WriteWindowReport((dir / "a" / "job").string(), 1, WindowReason::kManual, input, {});
  ASSERT_TRUE(owner_only.ok()) << owner_only.status().message();
  EXPECT_EQ(ModeOf(owner_only->json_path), 0600u);
  EXPECT_EQ(ModeOf(dir / "a" / "job"), 0700u);

  ASSERT_TRUE(SetPrivateFileMode("0640").ok());
  StatusOr<WrittenReport> shared =
      WriteWindowReport((dir / "b" / "job").string(), 1, WindowReason::kManual, input, {});
  ASSERT_TRUE(shared.ok()) << shared.status().message();
  EXPECT_EQ(ModeOf(shared->json_path), 0640u);
  EXPECT_EQ(ModeOf(shared->html_path), 0640u);
  EXPECT_EQ(ModeOf(dir / "b" / "job"), 0750u);
  {
    auto store = SqliteStore::Open((dir / "b" / "store.db").string());
    ASSERT_TRUE(store.ok()) << store.status().message();
  }
  EXPECT_EQ(ModeOf(dir / "b" / "store.db"), 0640u);
  ASSERT_TRUE(SetPrivateFileMode("0600").ok());
  fs::remove_all(dir);
}

// The report directory's names are read by the rule that makes them: a window's JSON report
// is found; its timeline, comparison, stacks and HTML are not reports.
TEST(ReportWriterTest, AWindowReportIsFoundByTheNameItWasWrittenUnder) {
  for (const WindowReason reason :
       {WindowReason::kSlowdown, WindowReason::kHang, WindowReason::kManual}) {
    const auto file = ParseWindowReportFileName(WindowReportStem(12, reason) + ".json");
    ASSERT_TRUE(file.has_value()) << WindowReportStem(12, reason);
    EXPECT_EQ(file->window, 12u);
    EXPECT_EQ(file->reason, reason);
  }
  EXPECT_FALSE(ParseWindowReportFileName(TimelineFileName(3)));
  EXPECT_FALSE(ParseWindowReportFileName(ComparisonReportStem(3, 1) + ".json"));
  EXPECT_FALSE(ParseWindowReportFileName(StacksFileName(3)));
  EXPECT_FALSE(ParseWindowReportFileName(WindowReportStem(3, WindowReason::kHang) + ".html"));
  EXPECT_FALSE(ParseWindowReportFileName("window--hang.json"));
  EXPECT_FALSE(ParseWindowReportFileName("window-x-hang.json"));
  EXPECT_FALSE(ParseWindowReportFileName("window-3-hang.json.tmp"));
}

}  // namespace
}  // namespace perftracker
