// One training process as its agent introduced itself (the `hello` message): what the
// collector tells the server when a worker joins, in process (CoordinatorLink) and on the
// wire (control.proto's RankInfo).
#pragma once

#include <cstdint>
#include <string>

namespace perftracker {

struct WorkerInfo {
  int32_t rank = -1;
  int32_t world_size = 0;
  int32_t local_rank = -1;
  int32_t pid = 0;
  std::string host;
};

}  // namespace perftracker
