// The Store contract (store.h) as value-parameterized tests, run on every implementation:
// a backend's test binary compiles store_contract_test.cc and instantiates
// StoreContractTest with its StoreBackend.
#pragma once

#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "perftracker/server/store/store.h"

namespace perftracker {

struct StoreBackend {
  std::string name;  // a test-name suffix: "sqlite", "postgresql"
  // A fresh, empty store location for one test (a file under `test_dir`, a new database).
  std::function<StatusOr<std::string>(const std::string& test_dir)> new_location;
  // Opens (creates, migrates) the store at `location`; 0 keeps every iteration point.
  std::function<StatusOr<std::unique_ptr<Store>>(const std::string& location,
                                                 size_t max_iterations_per_job)>
      open;
  // The backend's own consistency check after a crash (Ok when it has none).
  std::function<Status(Store*)> check_integrity = [](Store*) { return Status::Ok(); };
};

class StoreContractTest : public ::testing::TestWithParam<StoreBackend> {
 protected:
  void SetUp() override;
  void TearDown() override;

  // A fresh location for this test.
  std::string NewLocation();
  std::unique_ptr<Store> OpenOrDie(const std::string& location,
                                   size_t max_iterations_per_job = 1'000'000);

  std::string dir_;
};

// Records the contract tests write, for a backend's own tests too: job `id`, window `id` of
// `job` (a slowdown of 10 s with two triggers), and rank `rank`'s summary of one function.
JobRecord Job(const std::string& id, int64_t created_ns = 1000);
WindowRecord Window(const std::string& job, uint64_t id, WindowState state = WindowState::kOpen);
WorkerSummary Summary(int32_t rank);

// For INSTANTIATE_TEST_SUITE_P's name generator.
struct StoreBackendName {
  std::string operator()(const ::testing::TestParamInfo<StoreBackend>& info) const {
    return info.param.name;
  }
};

}  // namespace perftracker
