#include "perftracker/server/http/json_api.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "perftracker/server/http/example_store_for_test.h"
#include "perftracker/server/sqlite/sqlite_store.h"

namespace perftracker {
namespace {

using nlohmann::json;

std::string SourceDir() {
  const char* dir = std::getenv("PERFTRACKER_SOURCE_DIR");
  return dir != nullptr ? dir : ".";
}

class RecordingActions : public JobActions {
 public:
  Status TriggerWindow(const std::string& job_id) override {
    triggered.push_back(job_id);
    if (job_id == "busy") return Status::InvalidArgument("job busy: window 3 is already open");
    return Status::Ok();
  }
  std::vector<std::string> triggered;
};

class JsonApiTest : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = (std::filesystem::temp_directory_path() /
             ("json_api_test." + std::to_string(getpid()) + ".db"))
                .string();
    StatusOr<std::unique_ptr<SqliteStore>> store = SqliteStore::Open(path_);
    ASSERT_TRUE(store.ok()) << store.status().message();
    store_ = std::move(store).value();
    StatusOr<ExampleJob> example =
        FillStoreWithExample(store_.get(), SourceDir() + "/examples/straggler", "job-17");
    ASSERT_TRUE(example.ok()) << example.status().message();
    example_ = *example;
    api_ = std::make_unique<JsonApi>(store_.get(), &actions_);
  }
  void TearDown() override {
    api_.reset();
    store_.reset();
    for (const char* suffix : {"", "-wal", "-shm"}) std::filesystem::remove(path_ + suffix);
  }

  static json Body(const ApiResponse& r) {
    json j = json::parse(r.body, nullptr, false);
    EXPECT_FALSE(j.is_discarded()) << r.body;
    return j;
  }

  std::string path_;
  std::unique_ptr<SqliteStore> store_;
  ExampleJob example_;
  RecordingActions actions_;
  std::unique_ptr<JsonApi> api_;
};

TEST_F(JsonApiTest, TheExampleIsTheStragglerOfTheReadme) {
  EXPECT_EQ(example_.top_code, "PT-STRAGGLER-COMPUTE");
  EXPECT_EQ(example_.culprit_rank, 2);
  EXPECT_NE(example_.culprit_function_key.find("block2"), std::string::npos);
}

TEST_F(JsonApiTest, Jobs) {
  ApiResponse r = api_->ListJobs();
  ASSERT_EQ(r.status, 200);
  json j = Body(r);
  ASSERT_EQ(j["jobs"].size(), 1u);
  EXPECT_EQ(j["jobs"][0]["job_id"], "job-17");
  EXPECT_EQ(j["jobs"][0]["world_size"], 4);
  EXPECT_EQ(j["jobs"][0]["windows"], 1);
  EXPECT_EQ(j["jobs"][0]["latest_top_code"], "PT-STRAGGLER-COMPUTE");
  EXPECT_EQ(j["jobs"][0]["latest_window_id"], 1);
}

TEST_F(JsonApiTest, Job) {
  json j = Body(api_->GetJob("job-17"));
  EXPECT_EQ(j["job"]["job_id"], "job-17");
  ASSERT_EQ(j["workers"].size(), 4u);
  EXPECT_EQ(j["workers"][2]["rank"], 2);
  EXPECT_EQ(j["workers"][2]["host"], "node-1");
  ASSERT_EQ(j["windows"].size(), 1u);
  EXPECT_EQ(j["windows"][0]["state"], "diagnosed");
  EXPECT_EQ(j["windows"][0]["top_code"], "PT-STRAGGLER-COMPUTE");
  EXPECT_TRUE(j["windows"][0]["has_diagnosis"]);
  EXPECT_TRUE(j["baseline_window"].is_null());

  ApiResponse missing = api_->GetJob("nope");
  EXPECT_EQ(missing.status, 404);
  EXPECT_EQ(Body(missing)["error"], "store: no job nope");
}

TEST_F(JsonApiTest, Iterations) {
  ApiResponse r = api_->ListIterations("job-17", "", "");
  ASSERT_EQ(r.status, 200) << r.body;
  json j = Body(r);
  ASSERT_GE(j["points"].size(), 8u);
  // Every point is [rank, end_ms, duration_ms]; the straggler's iterations are as long as
  // its peers' (they wait for it), around the median of the diagnosis.
  for (const auto& p : j["points"]) {
    ASSERT_EQ(p.size(), 3u);
    EXPECT_GE(p[0].get<int>(), 0);
    EXPECT_LT(p[0].get<int>(), 4);
    EXPECT_GT(p[2].get<double>(), 1.0);
  }
  // Paging: nothing after next_since.
  const std::string next = j["next_since"];
  EXPECT_TRUE(Body(api_->ListIterations("job-17", next, ""))["points"].empty());
  EXPECT_EQ(Body(api_->ListIterations("job-17", "", "2"))["points"].size(), 2u);

  EXPECT_EQ(api_->ListIterations("job-17", "yesterday", "").status, 400);
  EXPECT_EQ(api_->ListIterations("job-17", "12abc", "").status, 400);
  ApiResponse bad_limit = api_->ListIterations("job-17", "", "99999999999");
  EXPECT_EQ(bad_limit.status, 400);
  EXPECT_NE(Body(bad_limit)["error"].get<std::string>().find("bad 'limit'"), std::string::npos);
  EXPECT_EQ(api_->ListIterations("job-17", "", "0").status, 400);
  EXPECT_EQ(api_->ListIterations("ghost", "", "").status, 404);
}

TEST_F(JsonApiTest, WindowsAndDiagnosis) {
  json w = Body(api_->ListWindows("job-17"));
  ASSERT_EQ(w["windows"].size(), 1u);
  EXPECT_EQ(w["windows"][0]["reason"], "slowdown");
  EXPECT_EQ(w["windows"][0]["triggers"].size(), 1u);

  ApiResponse r = api_->GetDiagnosis("job-17", "1");
  ASSERT_EQ(r.status, 200) << r.body;
  json d = Body(r);
  EXPECT_EQ(d["top_code"], "PT-STRAGGLER-COMPUTE") << r.body.substr(0, 3000);
  EXPECT_NE(d["text"].get<std::string>().find("rank 2"), std::string::npos);
  const json& finding = d["diagnosis"]["findings"][0];
  EXPECT_EQ(finding["code"], "PT-STRAGGLER-COMPUTE");
  EXPECT_EQ(finding["workers"], json::array({2}));
  EXPECT_FALSE(finding["evidence"].empty());

  for (const char* bad : {"0", "-1", "abc", "1.5", "", "99999999999999999999999"}) {
    ApiResponse b = api_->GetDiagnosis("job-17", bad);
    EXPECT_EQ(b.status, 400) << bad;
    EXPECT_NE(Body(b)["error"].get<std::string>().find("bad window id"), std::string::npos);
  }
  EXPECT_EQ(api_->GetDiagnosis("job-17", "2").status, 404);
  EXPECT_EQ(api_->GetDiagnosis("ghost", "1").status, 404);
}

TEST_F(JsonApiTest, SummariesCompactAndDrillDown) {
  ApiResponse r = api_->GetSummaries("job-17", "1", "", "");
  ASSERT_EQ(r.status, 200) << r.body;
  json s = Body(r);
  ASSERT_EQ(s["workers"].size(), 4u);
  ASSERT_FALSE(s["functions"].empty());
  EXPECT_LE(s["functions"].size(), 40u);
  EXPECT_EQ(s["columns"], json::array({"function", "count", "total_ms", "p50_ms", "p99_ms"}));

  // Drill-down to the culprit function: rank 2 takes ~3x its peers' time in it.
  r = api_->GetSummaries("job-17", "1", "", example_.culprit_function_key);
  ASSERT_EQ(r.status, 200) << r.body;
  s = Body(r);
  ASSERT_EQ(s["functions"].size(), 1u);
  EXPECT_EQ(s["functions"][0]["key"], example_.culprit_function_key);
  double culprit = 0;
  double peer_max = 0;
  for (const auto& w : s["workers"]) {
    ASSERT_EQ(w["functions"].size(), 1u);
    const double total = w["functions"][0][2];
    if (w["rank"] == 2) {
      culprit = total;
    } else {
      peer_max = std::max(peer_max, total);
    }
    EXPECT_GT(w["functions"][0][1].get<int>(), 0);  // count
    EXPECT_GE(w["functions"][0][4].get<double>(), w["functions"][0][3].get<double>());
  }
  EXPECT_GT(culprit, 2 * peer_max);

  EXPECT_EQ(Body(api_->GetSummaries("job-17", "1", "3", ""))["functions"].size(), 3u);
  EXPECT_EQ(api_->GetSummaries("job-17", "1", "0", "").status, 400);
  EXPECT_EQ(api_->GetSummaries("job-17", "1", "lots", "").status, 400);
  EXPECT_EQ(api_->GetSummaries("job-17", "x", "", "").status, 400);
  EXPECT_EQ(api_->GetSummaries("job-17", "7", "", "").status, 404);
  ApiResponse unknown = api_->GetSummaries("job-17", "1", "", "python:nowhere");
  EXPECT_EQ(unknown.status, 404);
  EXPECT_NE(Body(unknown)["error"].get<std::string>().find("no worker ran a function"),
            std::string::npos);
}

TEST_F(JsonApiTest, Trigger) {
  ApiResponse r = api_->Trigger("job-17");
  EXPECT_EQ(r.status, 202);
  EXPECT_EQ(actions_.triggered, std::vector<std::string>{"job-17"});
  EXPECT_EQ(api_->Trigger("ghost").status, 404);
  EXPECT_EQ(actions_.triggered.size(), 1u);

  ASSERT_TRUE(store_->UpsertJob({"busy", "t", 1, 1, 1}).ok());
  ApiResponse busy = api_->Trigger("busy");
  EXPECT_EQ(busy.status, 400);
  EXPECT_EQ(Body(busy)["error"], "job busy: window 3 is already open");

  JsonApi read_only(store_.get(), nullptr);
  EXPECT_EQ(read_only.Trigger("job-17").status, 501);
}

TEST_F(JsonApiTest, CompareWindowsWithTheBaseline) {
  ApiResponse none = api_->CompareWindows("job-17", "", "");
  EXPECT_EQ(none.status, 404);
  EXPECT_NE(Body(none)["error"].get<std::string>().find(
                "mark one (POST /api/v1/jobs/job-17/baseline?window=N)"),
            std::string::npos)
      << none.body;

  // block2 longer by half the iteration on every rank: well above the example's noise (its
  // iterations scatter by 6-13 ms; a bar of 7-14 ms per rank).
  ASSERT_TRUE(AddSlowerWindow(store_.get(), "job-17", 2, example_.culprit_function_key, 0.5).ok());
  ApiResponse marked = api_->SetBaseline("job-17", "1");
  ASSERT_EQ(marked.status, 200) << marked.body;
  EXPECT_EQ(Body(api_->GetJob("job-17"))["baseline_window"], 1);

  ApiResponse r = api_->CompareWindows("job-17", "", "");  // baseline 1, newest window 2
  ASSERT_EQ(r.status, 200) << r.body;
  json j = Body(r);
  EXPECT_EQ(j["kind"], "comparison");
  EXPECT_EQ(j["baseline_window"], 1);
  EXPECT_EQ(j["current_window"], 2);
  ASSERT_FALSE(j["changes"].empty()) << r.body;
  EXPECT_EQ(j["changes"][0]["function"], "block2");
  EXPECT_EQ(j["changes"][0]["direction"], "slower");
  EXPECT_EQ(j["changes"][0]["workers"], json({0, 1, 2, 3})) << r.body;

  json same = Body(api_->CompareWindows("job-17", "1", "1"));
  EXPECT_FALSE(same["has_material_change"].get<bool>()) << same.dump();

  EXPECT_EQ(api_->CompareWindows("job-17", "x", "").status, 400);
  EXPECT_EQ(api_->CompareWindows("job-17", "1", "9").status, 404);
  EXPECT_EQ(api_->CompareWindows("ghost", "1", "2").status, 404);
  EXPECT_EQ(api_->SetBaseline("job-17", "").status, 400);
  EXPECT_EQ(api_->SetBaseline("job-17", "7").status, 404);
}

// The stored diagnosis of window 1 with its Perfetto export at `path`.
void SetPerfettoPath(Store* store, const std::string& path) {
  StatusOr<DiagnosisRecord> d = store->GetDiagnosis("job-17", 1);
  ASSERT_TRUE(d.ok());
  d->perfetto_path = path;
  ASSERT_TRUE(store->PutDiagnosis(*d).ok());
}

std::string ReadAll(const TimelineFile& file) {
  std::string out;
  char buf[7];  // small: several reads
  for (uint64_t offset = 0;;) {
    const int64_t n = file.Read(offset, buf, sizeof(buf));
    EXPECT_GE(n, 0);
    if (n <= 0) return out;
    out.append(buf, static_cast<size_t>(n));
    offset += static_cast<uint64_t>(n);
  }
}

TEST_F(JsonApiTest, ThePerfettoExportTheStoreRecordedIsOpened) {
  const std::filesystem::path dir = path_ + ".reports";
  std::filesystem::create_directories(dir);
  const std::string file = (dir / "window-1.perfetto.json").string();
  { std::ofstream(file) << R"({"traceEvents": []})"; }
  std::unique_ptr<TimelineFile> opened;
  ApiResponse none = api_->OpenTimeline("job-17", "1", &opened);
  EXPECT_EQ(none.status, 404);
  EXPECT_NE(none.body.find("job job-17 window 1 has no Perfetto export"), std::string::npos)
      << none.body;
  EXPECT_FALSE(Body(api_->GetJob("job-17"))["windows"][0]["has_perfetto"].get<bool>());

  SetPerfettoPath(store_.get(), file);
  EXPECT_TRUE(Body(api_->GetJob("job-17"))["windows"][0]["has_perfetto"].get<bool>());
  EXPECT_TRUE(Body(api_->ListWindows("job-17"))["windows"][0]["has_perfetto"].get<bool>());
  ApiResponse r = api_->OpenTimeline("job-17", "1", &opened);
  ASSERT_EQ(r.status, 200) << r.body;
  ASSERT_NE(opened, nullptr);
  EXPECT_EQ(opened->file_name(), "window-1.perfetto.json");
  EXPECT_EQ(opened->size(), 19u);
  // Replaced while it is downloaded: the download is the file that was opened.
  std::filesystem::remove(file);
  { std::ofstream(file) << "replaced"; }
  EXPECT_EQ(ReadAll(*opened), R"({"traceEvents": []})");
  std::filesystem::remove_all(dir);
}

TEST_F(JsonApiTest, PerfettoDownloadsRefuseEveryPathButTheStoredExport) {
  const std::filesystem::path dir = path_ + ".reports";
  std::filesystem::create_directories(dir / "sub");
  { std::ofstream(dir / "secret.txt") << "secret"; }
  std::unique_ptr<TimelineFile> opened;
  // The client gives ids, never a path: traversal in the window id is a bad id.
  for (const char* bad :
       {"../../etc/passwd", "1/../2", "..%2F1", "1.perfetto.json", "", "0", "-1", "1 ", "%31"}) {
    ApiResponse r = api_->OpenTimeline("job-17", bad, &opened);
    EXPECT_EQ(r.status, 400) << bad << ": " << r.body;
    EXPECT_EQ(opened, nullptr);
  }
  // A job id is a key of the store, not a directory.
  for (const char* job : {"../job-17", "job-17/../job-17", "/etc/passwd", ".."}) {
    EXPECT_EQ(api_->OpenTimeline(job, "1", &opened).status, 404) << job;
  }
  EXPECT_EQ(api_->OpenTimeline("job-17", "2", &opened).status, 404);  // no such window

  // Stored paths that are not what a server's report writer makes are refused too (a store
  // edited by hand, or a file swapped on the disk).
  std::filesystem::create_symlink(dir / "secret.txt", dir / "link.perfetto.json");
  std::filesystem::create_directories(dir / "dir.perfetto.json");
  ASSERT_EQ(mkfifo((dir / "fifo.perfetto.json").c_str(), 0600), 0);
  const std::vector<std::pair<std::string, std::string>> refused = {
      {"reports/window-1.perfetto.json", "not an absolute path"},
      {(dir / "sub" / ".." / "secret.txt").string(), "'..'"},
      {(dir / "sub" / ".." / "x.perfetto.json").string(), "'..'"},
      {(dir / "secret.txt").string(), "not a Perfetto export's name"},
      {"/etc/passwd", "not a Perfetto export's name"},
      {(dir / ".perfetto.json").string(), "not a Perfetto export's name"},
      {(dir / "link.perfetto.json").string(), "symbolic link"},
      {(dir / "dir.perfetto.json").string(), "not a regular file"},
      {(dir / "fifo.perfetto.json").string(), "not a regular file"},
      {(dir / "gone.perfetto.json").string(), "No such file"},
  };
  for (const auto& [path, why] : refused) {
    SetPerfettoPath(store_.get(), path);
    ApiResponse r = api_->OpenTimeline("job-17", "1", &opened);
    EXPECT_EQ(r.status, 404) << path << ": " << r.body;
    EXPECT_NE(r.body.find(why), std::string::npos) << path << ": " << r.body;
    EXPECT_EQ(opened, nullptr) << path;
  }
  std::filesystem::remove_all(dir);
}

TEST_F(JsonApiTest, InvalidUtf8FromUserCodeIsReplacedNotThrown) {
  ASSERT_TRUE(store_->UpsertJob({"bad-utf8", "python3 \xff\xfe train.py", 1, 5, 5}).ok());
  ApiResponse r = api_->GetJob("bad-utf8");
  ASSERT_EQ(r.status, 200);
  EXPECT_EQ(Body(r)["job"]["title"], "python3 \xEF\xBF\xBD\xEF\xBF\xBD train.py");
}

}  // namespace
}  // namespace perftracker
