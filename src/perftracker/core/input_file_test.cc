#include "perftracker/core/input_file.h"

#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

namespace perftracker {
namespace {

namespace fs = std::filesystem;

class InputFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("perftracker-input-file-" + std::to_string(getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string Path(const char* name) const { return (dir_ / name).string(); }
  fs::path dir_;
};

TEST_F(InputFileTest, ReadsARegularFile) {
  const std::string path = Path("ok.json");
  std::ofstream(path) << "[]";
  StatusOr<std::string> data = ReadInputFile(path, 1024);
  ASSERT_TRUE(data.ok()) << data.status().message();
  EXPECT_EQ(*data, "[]");
}

TEST_F(InputFileTest, FifoWithoutWriterIsRefusedWithoutBlocking) {
  const std::string path = Path("fifo.json");
  ASSERT_EQ(mkfifo(path.c_str(), 0600), 0);
  StatusOr<int> fd = OpenInputFile(path);  // would block forever if it opened the FIFO
  ASSERT_FALSE(fd.ok());
  EXPECT_NE(fd.status().message().find(path), std::string::npos);
  EXPECT_NE(fd.status().message().find("FIFO"), std::string::npos) << fd.status().message();
}

TEST_F(InputFileTest, SocketIsRefused) {
  const std::string path = Path("sock");
  const int s = socket(AF_UNIX, SOCK_STREAM, 0);
  ASSERT_GE(s, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  ASSERT_LT(path.size(), sizeof(addr.sun_path));
  std::snprintf(addr.sun_path, sizeof(addr.sun_path), "%s", path.c_str());
  ASSERT_EQ(bind(s, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  StatusOr<int> fd = OpenInputFile(path);
  close(s);
  ASSERT_FALSE(fd.ok());
  EXPECT_NE(fd.status().message().find("socket"), std::string::npos) << fd.status().message();
}

TEST_F(InputFileTest, DeviceIsRefused) {
  StatusOr<std::string> data = ReadInputFile("/dev/zero", 1 << 20);
  ASSERT_FALSE(data.ok());
  EXPECT_NE(data.status().message().find("/dev/zero: is a device"), std::string::npos)
      << data.status().message();
}

TEST_F(InputFileTest, SymlinkLoopSaysSymlinkLoop) {
  fs::create_symlink(Path("b"), Path("a"));
  fs::create_symlink(Path("a"), Path("b"));
  StatusOr<int> fd = OpenInputFile(Path("a"));
  ASSERT_FALSE(fd.ok());
  EXPECT_NE(fd.status().message().find("symlink loop"), std::string::npos) << fd.status().message();
  EXPECT_EQ(fd.status().message().find("no such file"), std::string::npos);
}

TEST_F(InputFileTest, MissingFileAndOversizedFile) {
  StatusOr<int> fd = OpenInputFile(Path("missing"));
  ASSERT_FALSE(fd.ok());
  EXPECT_EQ(fd.status().code(), StatusCode::kNotFound);
  const std::string big = Path("big");
  std::ofstream(big) << std::string(100, 'x');
  EXPECT_FALSE(ReadInputFile(big, 10).ok());
}

}  // namespace
}  // namespace perftracker
