#include "perftracker/collector/agent_message.h"

#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

namespace perftracker {
namespace {

TEST(AgentMessageTest, ParsesAHello) {
  AgentMessage m;
  ASSERT_EQ(ParseAgentMessage(R"({"type":"hello","pid":4242,"rank":3,"world_size":4,)"
                              R"("local_rank":3,"host":"node7","shm":"/dev/shm/x","version":1})",
                              &m),
            ParseOutcome::kOk);
  EXPECT_EQ(m.type, AgentMessageType::kHello);
  EXPECT_EQ(m.worker.pid, 4242);
  EXPECT_EQ(m.worker.rank, 3);
  EXPECT_EQ(m.worker.world_size, 4);
  EXPECT_EQ(m.worker.local_rank, 3);
  EXPECT_EQ(m.worker.host, "node7");
  EXPECT_EQ(m.shm_path, "/dev/shm/x");
  EXPECT_EQ(m.version, 1);
}

TEST(AgentMessageTest, ParsesEveryAgentMessageType) {
  AgentMessage m;
  ASSERT_EQ(
      ParseAgentMessage(R"({"type":"iteration","rank":1,"end_ns":5000,"duration_ns":100})", &m),
      ParseOutcome::kOk);
  EXPECT_EQ(m.type, AgentMessageType::kIteration);
  EXPECT_EQ(m.end_ns, 5000);
  EXPECT_EQ(m.duration_ns, 100);
  ASSERT_EQ(
      ParseAgentMessage(R"({"type":"trigger","rank":2,"reason":"hang","detail":"quiet"})", &m),
      ParseOutcome::kOk);
  EXPECT_EQ(m.reason, WindowReason::kHang);
  EXPECT_EQ(m.detail, "quiet");
  ASSERT_EQ(ParseAgentMessage(
                R"({"type":"window_done","rank":2,"window":7,"events":10,"dropped":3})", &m),
            ParseOutcome::kOk);
  EXPECT_EQ(m.window, 7u);
  EXPECT_EQ(m.events, 10u);
  EXPECT_EQ(m.dropped, 3u);
  EXPECT_EQ(m.gpu_stopped_ns, 0);  // the window's GPU tracing did not end early
  ASSERT_EQ(ParseAgentMessage(R"({"type":"window_done","rank":2,"window":8,"events":10,)"
                              R"("dropped":0,"gpu_stopped_ns":1700000000123456789})",
                              &m),
            ParseOutcome::kOk);
  EXPECT_EQ(m.gpu_stopped_ns, 1700000000123456789);
  ASSERT_EQ(ParseAgentMessage(
                R"({"type":"window_done","rank":2,"window":9,"gpu_stopped_ns":"soon"})", &m),
            ParseOutcome::kOk);
  EXPECT_EQ(m.gpu_stopped_ns, 0);  // optional: a bad value is none
  ASSERT_EQ(ParseAgentMessage(R"({"type":"stacks","rank":0,"window":1,"text":"a\nb"})", &m),
            ParseOutcome::kOk);
  EXPECT_EQ(m.text, "a\nb");
  EXPECT_TRUE(m.available);
  ASSERT_EQ(ParseAgentMessage(
                R"({"type":"stacks","rank":0,"window":1,"available":false,"text":"GIL"})", &m),
            ParseOutcome::kOk);
  EXPECT_FALSE(m.available);
  ASSERT_EQ(ParseAgentMessage(R"({"type":"bye","rank":0})", &m), ParseOutcome::kOk);
  EXPECT_EQ(m.type, AgentMessageType::kBye);
}

TEST(AgentMessageTest, RejectsMalformedMessagesWithAReason) {
  AgentMessage m;
  std::string error;
  EXPECT_EQ(ParseAgentMessage("{not json", &m, &error), ParseOutcome::kMalformed);
  EXPECT_EQ(error, "not valid JSON");
  EXPECT_EQ(ParseAgentMessage("[1,2]", &m, &error), ParseOutcome::kMalformed);
  EXPECT_EQ(error, "not a JSON object");
  EXPECT_EQ(ParseAgentMessage(R"({"rank":1})", &m, &error), ParseOutcome::kMalformed);
  // Wrong types never throw, they name the field.
  EXPECT_EQ(ParseAgentMessage(R"({"type":"hello","pid":"12","rank":0,"shm":"/x"})", &m, &error),
            ParseOutcome::kMalformed);
  EXPECT_EQ(error, "'hello' message without a valid 'pid' field");
  EXPECT_EQ(ParseAgentMessage(R"({"type":"hello","pid":12,"rank":0})", &m, &error),
            ParseOutcome::kMalformed);
  EXPECT_EQ(error, "'hello' message without a valid 'shm' field");
  EXPECT_EQ(ParseAgentMessage(R"({"type":"trigger","rank":0,"reason":"boom"})", &m, &error),
            ParseOutcome::kMalformed);
  EXPECT_EQ(ParseAgentMessage(R"({"type":"iteration","rank":1e99,"end_ns":1,"duration_ns":1})", &m,
                              &error),
            ParseOutcome::kMalformed);
  EXPECT_EQ(ParseAgentMessage(R"({"type":"window_done","rank":0,"window":-1})", &m, &error),
            ParseOutcome::kMalformed);
}

TEST(AgentMessageTest, UnknownTypesAreTheirOwnOutcome) {
  AgentMessage m;
  std::string error;
  EXPECT_EQ(ParseAgentMessage(R"({"type":"telemetry","x":1})", &m, &error),
            ParseOutcome::kUnknownType);
  EXPECT_EQ(error, "unknown message type 'telemetry'");
}

TEST(AgentMessageTest, CollectorMessagesAreOneJsonLine) {
  WindowSpec w;
  w.id = 3;
  w.start_ns = 1700000000123456789;
  w.duration_ns = 20'000'000'000;
  w.reason = WindowReason::kSlowdown;
  const std::string line = WindowMessage(w);
  ASSERT_EQ(line.back(), '\n');
  EXPECT_EQ(line.find('\n'), line.size() - 1);
  const auto j = nlohmann::json::parse(line);
  EXPECT_EQ(j["type"], "window");
  EXPECT_EQ(j["window"], 3);
  EXPECT_EQ(j["start_ns"].get<int64_t>(), 1700000000123456789);
  EXPECT_EQ(j["duration_ns"].get<int64_t>(), 20'000'000'000);
  EXPECT_EQ(j["reason"], "slowdown");
  const auto d = nlohmann::json::parse(DumpStacksMessage(9));
  EXPECT_EQ(d["type"], "dump_stacks");
  EXPECT_EQ(d["window"], 9);
  const auto e = nlohmann::json::parse(EndWindowMessage(4));
  EXPECT_EQ(e["type"], "end_window");
  EXPECT_EQ(e["window"], 4);
}

// `process_group` (issue 11, live mode): what the agent says of each torch.distributed group.
TEST(AgentMessageTest, ParsesAProcessGroup) {
  AgentMessage m;
  ASSERT_EQ(ParseAgentMessage(R"({"type":"process_group","rank":3,"group":2,"name":"1",)"
                              R"("backend":"nccl","ranks":[2,3],"size":2})",
                              &m),
            ParseOutcome::kOk);
  EXPECT_EQ(m.type, AgentMessageType::kProcessGroup);
  EXPECT_EQ(m.rank, 3);
  EXPECT_EQ(m.group.id, 2);
  EXPECT_EQ(m.group.name, "1");
  EXPECT_EQ(m.group.backend, "nccl");
  EXPECT_EQ(m.group.ranks, (std::vector<int32_t>{2, 3}));
  EXPECT_EQ(m.group.size, 2u);
  // A big group's first ranks, with its size; no size: the ranks listed are all of it.
  ASSERT_EQ(ParseAgentMessage(
                R"({"type":"process_group","rank":0,"group":1,"ranks":[0,8,16],"size":512})", &m),
            ParseOutcome::kOk);
  EXPECT_EQ(m.group.size, 512u);
  EXPECT_EQ(m.group.name, "");
  ASSERT_EQ(ParseAgentMessage(R"({"type":"process_group","rank":0,"group":1,"ranks":[5,1]})", &m),
            ParseOutcome::kOk);
  EXPECT_EQ(m.group.size, 2u);
}

TEST(AgentMessageTest, ABadProcessGroupIsMalformedWithTheReason) {
  const std::pair<const char*, const char*> cases[] = {
      {R"({"type":"process_group","rank":0,"ranks":[0,1]})",
       "'process_group' message without a valid 'group' field"},
      {R"({"type":"process_group","rank":0,"group":0,"ranks":[0,1]})",
       "'process_group' message without a valid 'group' field"},
      {R"({"type":"process_group","rank":0,"group":65536,"ranks":[0,1]})",
       "'process_group' message without a valid 'group' field"},
      {R"({"type":"process_group","rank":0,"group":1})",
       "'process_group' message without a valid 'ranks' field"},
      {R"({"type":"process_group","rank":0,"group":1,"ranks":[]})",
       "'process_group' message without a valid 'ranks' field"},
      {R"({"type":"process_group","rank":0,"group":1,"ranks":"0,1"})",
       "'process_group' message without a valid 'ranks' field"},
      {R"({"type":"process_group","rank":0,"group":3,"ranks":[0,-1]})",
       "'process_group' message for group 3 lists -1, which is not a global rank"},
      {R"({"type":"process_group","rank":0,"group":3,"ranks":[0,"1"]})",
       "'process_group' message for group 3 lists \"1\", which is not a global rank"},
      {R"({"type":"process_group","rank":0,"group":3,"ranks":[0,1.5]})",
       "'process_group' message for group 3 lists 1.5, which is not a global rank"},
      {R"({"type":"process_group","rank":0,"group":3,"ranks":[0,4294967296]})",
       "'process_group' message for group 3 lists 4294967296, which is not a global rank"},
      {R"({"type":"process_group","rank":0,"group":3,"ranks":[4,2,4]})",
       "'process_group' message for group 3 lists rank 4 twice"},
      {R"({"type":"process_group","rank":0,"group":3,"ranks":[0,1],"size":1})",
       "'process_group' message without a valid 'size' field"},
      {R"({"type":"process_group","rank":0,"group":3,"ranks":[0,1],"size":"2"})",
       "'process_group' message without a valid 'size' field"},
  };
  for (const auto& [line, reason] : cases) {
    SCOPED_TRACE(line);
    AgentMessage m;
    std::string error;
    EXPECT_EQ(ParseAgentMessage(line, &m, &error), ParseOutcome::kMalformed);
    EXPECT_EQ(error, reason);
  }
}

// `comm_thread` (issue 11 §3): a thread the agent saw complete a collective.
TEST(AgentMessageTest, ParsesACommThreadAndRejectsABadOne) {
  AgentMessage m;
  ASSERT_EQ(ParseAgentMessage(R"({"type":"comm_thread","rank":3,"tid":81234})", &m),
            ParseOutcome::kOk);
  EXPECT_EQ(m.type, AgentMessageType::kCommThread);
  EXPECT_EQ(m.rank, 3);
  EXPECT_EQ(m.tid, 81234);
  for (const char* line :
       {R"({"type":"comm_thread","rank":3})", R"({"type":"comm_thread","rank":3,"tid":0})",
        R"({"type":"comm_thread","rank":3,"tid":-5})",
        R"({"type":"comm_thread","rank":3,"tid":"81234"})",
        R"({"type":"comm_thread","rank":3,"tid":4294967296})"}) {
    SCOPED_TRACE(line);
    std::string error;
    EXPECT_EQ(ParseAgentMessage(line, &m, &error), ParseOutcome::kMalformed);
    EXPECT_EQ(error, "'comm_thread' message without a valid 'tid' field");
  }
}

}  // namespace
}  // namespace perftracker
