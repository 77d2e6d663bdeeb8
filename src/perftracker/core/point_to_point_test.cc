#include "perftracker/core/point_to_point.h"

#include <gtest/gtest.h>

#include "perftracker/core/event.h"

namespace perftracker {
namespace {

TEST(PointToPointTest, NamesOfTorchAndNcclCalls) {
  EXPECT_EQ(PointToPointOf("nccl:recv"), PointToPoint::kReceive);
  EXPECT_EQ(PointToPointOf("c10d::irecv_"), PointToPoint::kReceive);
  EXPECT_EQ(PointToPointOf("c10d::recv_"), PointToPoint::kReceive);
  EXPECT_EQ(PointToPointOf("gloo:recv"), PointToPoint::kReceive);
  EXPECT_EQ(PointToPointOf("nccl:send"), PointToPoint::kSend);
  EXPECT_EQ(PointToPointOf("c10d::send"), PointToPoint::kSend);
  EXPECT_EQ(PointToPointOf("ncclDevKernel_SendRecv recv (pp)"), PointToPoint::kReceive);
  EXPECT_EQ(PointToPointOf("ncclDevKernel_SendRecv send (pp)"), PointToPoint::kSend);
  // NCCL's fused kernels serve both directions.
  EXPECT_EQ(PointToPointOf("ncclDevKernel_SendRecv(ncclDevComm*, unsigned long, ncclWork*)"),
            PointToPoint::kSendReceive);
  EXPECT_EQ(PointToPointOf("ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t"),
            PointToPoint::kSendReceive);
  EXPECT_EQ(PointToPointOf("c10d::batch_isend_irecv"), PointToPoint::kSendReceive);
  // Collectives among a group are not point to point.
  EXPECT_EQ(PointToPointOf("nccl:all_reduce"), PointToPoint::kNone);
  EXPECT_EQ(PointToPointOf("c10d::allreduce_"), PointToPoint::kNone);
  EXPECT_EQ(PointToPointOf("gloo:all_reduce"), PointToPoint::kNone);
  EXPECT_EQ(PointToPointOf("ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*, unsigned long, "
                           "ncclWork*)"),
            PointToPoint::kNone);
}

TEST(PointToPointTest, TheSourcesFlagsWinOverTheName) {
  const char* kernel = "ncclDevKernel_SendRecv(ncclDevComm*, unsigned long, ncclWork*)";
  EXPECT_EQ(PointToPointOf(kernel, kEventFlagReceive), PointToPoint::kReceive);
  EXPECT_EQ(PointToPointOf(kernel, kEventFlagSend), PointToPoint::kSend);
  EXPECT_EQ(PointToPointOf(kernel, kEventFlagSend | kEventFlagReceive), PointToPoint::kSendReceive);
  EXPECT_EQ(PointToPointOf("record_param_comms", kEventFlagReceive), PointToPoint::kReceive);
}

}  // namespace
}  // namespace perftracker
