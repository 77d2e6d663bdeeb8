#include "perftracker/summary/receive_slack.h"

namespace perftracker {

void ReceiveSlack::OnCollective(uint32_t fn, int64_t end, int64_t ns) {
  if (pending_.size() >= kMaxPending) {
    pending_.erase(pending_.begin(),
                   pending_.begin() + static_cast<std::ptrdiff_t>(kMaxPending / 2));
  }
  pending_.push_back({fn, end, ns});
}

}  // namespace perftracker
