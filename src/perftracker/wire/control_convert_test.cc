// The control messages' reasons on the wire: a trigger's reason is parsed into the one
// WindowReason when the server decodes it; a reason that one side does not know (another
// version's peer) reads as manual, and the window opens all the same.
#include "perftracker/wire/control_convert.h"

#include <cstdint>
#include <string>
#include <variant>
#include <vector>

#include <gtest/gtest.h>

namespace perftracker {
namespace {

namespace pb = perftracker::v1;

// A newer collector's trigger reason: refused, the slowdown it saw would never be diagnosed
// by an older server. It opens a manual window, the reason named in the detail.
TEST(ControlConvertTest, ATriggerWithAReasonThisServerDoesNotKnowOpensAManualWindow) {
  pb::CollectorMessage m;
  m.mutable_trigger()->set_rank(2);
  m.mutable_trigger()->set_reason("bored");
  m.mutable_trigger()->set_detail("nothing to do for 3.0 s");
  StatusOr<CollectorMessage> decoded = wire_internal::FromProto(m);
  ASSERT_TRUE(decoded.ok()) << decoded.status().message();
  const auto& trigger = std::get<ControlTrigger>(*decoded);
  EXPECT_EQ(trigger.rank, 2);
  EXPECT_EQ(trigger.reason, WindowReason::kManual);
  EXPECT_EQ(trigger.detail,
            "reason 'bored', which this server does not know (a newer collector?): nothing to do "
            "for 3.0 s");
}

TEST(ControlConvertTest, EachTriggerReasonGoesOnTheWireByItsName) {
  for (WindowReason reason :
       {WindowReason::kSlowdown, WindowReason::kHang, WindowReason::kManual}) {
    pb::CollectorMessage m;
    wire_internal::ToProto(CollectorMessage(ControlTrigger{3, reason, "mean 1.3x"}), &m);
    EXPECT_EQ(m.trigger().reason(), WindowReasonName(reason));
    StatusOr<CollectorMessage> decoded = wire_internal::FromProto(m);
    ASSERT_TRUE(decoded.ok()) << decoded.status().message();
    const auto& trigger = std::get<ControlTrigger>(*decoded);
    EXPECT_EQ(trigger.rank, 3);
    EXPECT_EQ(trigger.reason, reason);
    EXPECT_EQ(trigger.detail, "mean 1.3x");
  }
}

TEST(ControlConvertTest, AWindowWithAReasonThisCollectorDoesNotKnowOpensAsManual) {
  pb::ServerMessage m;
  pb::Window* w = m.mutable_start_window();
  w->set_id(4);
  w->set_start_ns(123);
  w->set_duration_ns(456);
  w->set_reason("thermal");
  StatusOr<ServerMessage> decoded = wire_internal::FromProto(m);
  ASSERT_TRUE(decoded.ok()) << decoded.status().message();
  const auto& window = std::get<WindowSpec>(*decoded);
  EXPECT_EQ(window.id, 4u);
  EXPECT_EQ(window.start_ns, 123);
  EXPECT_EQ(window.duration_ns, 456);
  EXPECT_EQ(window.reason, WindowReason::kManual);

  pb::ServerMessage hang;
  wire_internal::ToProto(ServerMessage(WindowSpec{5, 10, 20, WindowReason::kHang}), &hang);
  EXPECT_EQ(hang.start_window().reason(), "hang");
  decoded = wire_internal::FromProto(hang);
  ASSERT_TRUE(decoded.ok()) << decoded.status().message();
  EXPECT_EQ(std::get<WindowSpec>(*decoded).reason, WindowReason::kHang);
}

// Progressive disclosure: the collector's answer for the requested summaries it no longer
// keeps, and the server's word that it takes that answer (an older server does not).
TEST(ControlConvertTest, SummariesNotKeptGoOnTheWireWithTheirReason) {
  pb::CollectorMessage m;
  wire_internal::ToProto(
      CollectorMessage(ControlSummariesNotKept{7, {3, 9}, "older than --keep-summaries-seconds"}),
      &m);
  StatusOr<CollectorMessage> decoded = wire_internal::FromProto(m);
  ASSERT_TRUE(decoded.ok()) << decoded.status().message();
  const auto& n = std::get<ControlSummariesNotKept>(*decoded);
  EXPECT_EQ(n.window, 7u);
  EXPECT_EQ(n.ranks, (std::vector<int32_t>{3, 9}));
  EXPECT_EQ(n.reason, "older than --keep-summaries-seconds");

  m.mutable_summaries_not_kept()->add_ranks(-1);
  decoded = wire_internal::FromProto(m);
  ASSERT_FALSE(decoded.ok());
  EXPECT_EQ(decoded.status().message(), "summaries_not_kept: a rank is negative");
  m.mutable_summaries_not_kept()->set_window(0);
  EXPECT_EQ(wire_internal::FromProto(m).status().message(),
            "summaries_not_kept: window id 0 does not exist");

  for (bool takes : {false, true}) {
    pb::ServerMessage r;
    wire_internal::ToProto(ServerMessage(ControlRegistered{"c", 1, true, takes}), &r);
    StatusOr<ServerMessage> back = wire_internal::FromProto(r);
    ASSERT_TRUE(back.ok()) << back.status().message();
    EXPECT_EQ(std::get<ControlRegistered>(*back).takes_summaries_not_kept, takes);
  }
}

}  // namespace
}  // namespace perftracker
