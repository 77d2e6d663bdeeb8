#include "perftracker/server/http/api_token.h"

#include <sys/random.h>

#include <cerrno>
#include <cstring>
#include <fstream>

#include "perftracker/core/input_file.h"

namespace perftracker {
namespace {

// A token is one line; a token file far larger than that is the wrong file.
constexpr size_t kMaxTokenFileBytes = 64 * 1024;

}  // namespace

bool ConstantTimeEquals(std::string_view presented, std::string_view expected) {
  // Accumulate differences over the expected length without branching on the data; the
  // presented bytes past its end read as 0 through a select that does not depend on
  // whether they matched. The volatile accumulator keeps the compiler from adding an
  // early exit.
  volatile unsigned char diff = presented.size() == expected.size() ? 0 : 1;
  for (size_t i = 0; i < expected.size(); ++i) {
    const unsigned char p = i < presented.size() ? static_cast<unsigned char>(presented[i]) : 0;
    diff = static_cast<unsigned char>(diff | (p ^ static_cast<unsigned char>(expected[i])));
  }
  return diff == 0;
}

StatusOr<std::string> GenerateApiToken() {
  unsigned char bytes[32];
  size_t got = 0;
  while (got < sizeof(bytes)) {
    const ssize_t n = getrandom(bytes + got, sizeof(bytes) - got, 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      return Status::Internal(std::string("cannot generate an API token: getrandom: ") +
                              std::strerror(errno));
    }
    got += static_cast<size_t>(n);
  }
  static constexpr char kHex[] = "0123456789abcdef";
  std::string token;
  token.reserve(2 * sizeof(bytes));
  for (unsigned char b : bytes) {
    token.push_back(kHex[b >> 4]);
    token.push_back(kHex[b & 0xf]);
  }
  return token;
}

StatusOr<std::string> ReadApiTokenFile(const std::string& path) {
  // Refuses a FIFO, device or socket instead of blocking on it.
  StatusOr<std::string> text = ReadInputFile(path, kMaxTokenFileBytes);
  if (!text.ok()) {
    const Status& st = text.status();
    return st.code() == StatusCode::kNotFound
               ? Status::NotFound("token file " + st.message())
               : Status::InvalidArgument("token file " + st.message());
  }
  const std::string line = text->substr(0, text->find('\n'));
  const size_t begin = line.find_first_not_of(" \t\r\n");
  const size_t end = line.find_last_not_of(" \t\r\n");
  const std::string token = begin == std::string::npos ? "" : line.substr(begin, end - begin + 1);
  if (token.empty()) return Status::InvalidArgument("token file " + path + ": empty");
  if (token.size() < kMinApiTokenLength) {
    return Status::InvalidArgument("token file " + path + ": the token has " +
                                   std::to_string(token.size()) + " characters; use at least " +
                                   std::to_string(kMinApiTokenLength) +
                                   " (e.g. openssl rand -hex 32)");
  }
  return token;
}

}  // namespace perftracker
