// PostgresTestEnvironment: one PostgreSQL cluster (PostgresTestServer) for a whole test
// binary, started before its first test and stopped after its last. A test binary registers
// it once (PERFTRACKER_POSTGRES_TEST_ENVIRONMENT()) and reaches the server through server(),
// which is null when the cluster could not start (the environment's failure says why).
#pragma once

#include <gtest/gtest.h>

#include <memory>

#include "perftracker/server/postgres/postgres_test_server.h"

namespace perftracker {

class PostgresTestEnvironment : public ::testing::Environment {
 public:
  static PostgresTestServer* server() { return server_.get(); }

  void SetUp() override {
    StatusOr<std::unique_ptr<PostgresTestServer>> server = PostgresTestServer::Start();
    ASSERT_TRUE(server.ok()) << server.status().message();
    server_ = std::move(server).value();
  }
  void TearDown() override { server_.reset(); }

 private:
  static inline std::unique_ptr<PostgresTestServer> server_;
};

}  // namespace perftracker

#define PERFTRACKER_POSTGRES_TEST_ENVIRONMENT()                             \
  [[maybe_unused]] ::testing::Environment* const kPostgresTestEnvironment = \
      ::testing::AddGlobalTestEnvironment(new ::perftracker::PostgresTestEnvironment)
