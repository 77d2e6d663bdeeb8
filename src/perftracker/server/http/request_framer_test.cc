#include "perftracker/server/http/request_framer.h"

#include <gtest/gtest.h>

#include <string>

namespace perftracker {
namespace {

constexpr size_t kHead = 1024;
constexpr size_t kBody = 100;

TEST(RequestFramer, AHeadWithoutItsBlankLineIsIncompleteWhateverIsSentByteByByte) {
  const std::string request = "GET /api/v1/jobs HTTP/1.1\r\nHost: x\r\n\r\n";
  for (size_t n = 0; n < request.size(); ++n) {
    const RequestFrame f = FrameRequest(request.substr(0, n), kHead, kBody);
    EXPECT_EQ(f.kind, RequestFrame::Kind::kIncomplete) << n;
  }
  const RequestFrame f = FrameRequest(request, kHead, kBody);
  ASSERT_EQ(f.kind, RequestFrame::Kind::kComplete);
  EXPECT_EQ(f.total_length(), request.size());
  EXPECT_FALSE(f.has_content_length);
}

TEST(RequestFramer, TheBodyFollowsContentLengthAndAPipelinedRequestIsLeftOver) {
  const std::string first = "POST /t HTTP/1.1\r\ncontent-length:  5 \r\n\r\nhello";
  RequestFrame f = FrameRequest(first.substr(0, first.size() - 1), kHead, kBody);
  EXPECT_EQ(f.kind, RequestFrame::Kind::kIncomplete);
  EXPECT_TRUE(f.head_complete);
  f = FrameRequest(first + "GET / HTTP/1.1\r\n\r\n", kHead, kBody);
  ASSERT_EQ(f.kind, RequestFrame::Kind::kComplete);
  EXPECT_EQ(f.body_length, 5u);
  EXPECT_EQ(f.total_length(), first.size());
}

TEST(RequestFramer, OversizedOrAmbiguousRequestsAreRefusedWithTheirStatus) {
  EXPECT_EQ(FrameRequest(std::string(kHead + 1, 'a'), kHead, kBody).status, 431);
  EXPECT_EQ(
      FrameRequest("GET / HTTP/1.1\r\nX: " + std::string(kHead, 'a') + "\r\n\r\n", kHead, kBody)
          .status,
      431);
  const RequestFrame big =
      FrameRequest("POST / HTTP/1.1\r\nContent-Length: 101\r\n\r\n", kHead, kBody);
  EXPECT_EQ(big.kind, RequestFrame::Kind::kRefused);
  EXPECT_EQ(big.status, 413);
  EXPECT_NE(big.reason.find("larger than 100 bytes"), std::string::npos) << big.reason;
  EXPECT_EQ(FrameRequest("POST / HTTP/1.1\r\nContent-Length: -5\r\n\r\n", kHead, kBody).status,
            400);
  EXPECT_EQ(FrameRequest("POST / HTTP/1.1\r\nContent-Length: 99999999999999999999999\r\n\r\n",
                         kHead, kBody)
                .status,
            400);
  EXPECT_EQ(FrameRequest("POST / HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n", kHead,
                         kBody)
                .status,
            400);
  EXPECT_EQ(
      FrameRequest("POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n", kHead, kBody).status,
      411);
}

TEST(RequestFramer, ExpectContinueIsFoundSoTheLoopCanAnswerAndRemoveIt) {
  const std::string head = "POST /t HTTP/1.1\r\nExpect: 100-continue\r\nContent-Length: 3\r\n\r\n";
  const RequestFrame f = FrameRequest(head, kHead, kBody);
  EXPECT_EQ(f.kind, RequestFrame::Kind::kIncomplete);
  EXPECT_TRUE(f.head_complete);
  ASSERT_GT(f.expect_length, 0u);
  EXPECT_EQ(head.substr(f.expect_offset, f.expect_length), "Expect: 100-continue\r\n");
}

}  // namespace
}  // namespace perftracker
