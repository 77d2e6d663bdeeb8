#include "perftracker/summary/receive_slack.h"

#include <gtest/gtest.h>

#include <map>

namespace perftracker {
namespace {

struct Credits {
  std::map<uint32_t, int64_t> ns;
  auto Fn() {
    return [this](uint32_t fn, int64_t v) { ns[fn] += v; };
  }
};

TEST(ReceiveSlackTest, AReceiveThatWaitsCreditsTheCollectivesBeforeIt) {
  ReceiveSlack slack;
  Credits c;
  slack.OnCollective(/*fn=*/1, /*end=*/100, /*ns=*/40);
  slack.OnCollective(/*fn=*/2, /*end=*/130, /*ns=*/30);
  // A receive that waits 50: the latest call first (30), then 20 of the earlier one.
  slack.OnPointToPoint(PointToPoint::kReceive, 140, 190, c.Fn());
  EXPECT_EQ(c.ns[2], 30);
  EXPECT_EQ(c.ns[1], 20);
  EXPECT_EQ(slack.pending(), 0u);
}

TEST(ReceiveSlackTest, ASendFirstCreditsNothing) {
  ReceiveSlack slack;
  Credits c;
  slack.OnCollective(1, 100, 40);
  slack.OnPointToPoint(PointToPoint::kSend, 110, 200, c.Fn());
  slack.OnPointToPoint(PointToPoint::kReceive, 210, 900, c.Fn());
  EXPECT_TRUE(c.ns.empty());
  // A fused send/receive is a send: it may be what the next stage waits for.
  slack.OnCollective(1, 1000, 40);
  slack.OnPointToPoint(PointToPoint::kSendReceive, 1010, 2000, c.Fn());
  slack.OnPointToPoint(PointToPoint::kReceive, 2010, 3000, c.Fn());
  EXPECT_TRUE(c.ns.empty());
}

TEST(ReceiveSlackTest, ACallStillRunningWaitsForTheNextPointToPointCall) {
  ReceiveSlack slack;
  Credits c;
  slack.OnCollective(1, 500, 400);  // on another stream, ends after the receive starts
  slack.OnPointToPoint(PointToPoint::kReceive, 200, 300, c.Fn());
  EXPECT_TRUE(c.ns.empty());
  EXPECT_EQ(slack.pending(), 1u);
  slack.OnPointToPoint(PointToPoint::kReceive, 600, 1600, c.Fn());
  EXPECT_EQ(c.ns[1], 400);
}

TEST(ReceiveSlackTest, PendingCallsAreBounded) {
  ReceiveSlack slack;
  for (uint32_t i = 0; i < 10 * ReceiveSlack::kMaxPending; ++i) slack.OnCollective(i, i, 1);
  EXPECT_LE(slack.pending(), ReceiveSlack::kMaxPending);
}

}  // namespace
}  // namespace perftracker
