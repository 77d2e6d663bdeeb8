#include "perftracker/collector/line_reader.h"

namespace perftracker {

void LineReader::Feed(std::string_view bytes, std::vector<std::string>* lines) {
  while (!bytes.empty()) {
    const size_t nl = bytes.find('\n');
    const std::string_view piece = bytes.substr(0, nl);
    if (skipping_) {
      // Still inside an oversized line: drop its bytes.
    } else if (partial_.size() + piece.size() > max_line_) {
      ++oversized_;
      partial_.clear();
      partial_.shrink_to_fit();
      skipping_ = true;
    } else {
      partial_.append(piece);
    }
    if (nl == std::string_view::npos) return;
    if (!skipping_) {
      if (!partial_.empty() && partial_.back() == '\r') partial_.pop_back();
      if (!partial_.empty()) lines->push_back(std::move(partial_));
    }
    partial_.clear();
    skipping_ = false;
    bytes.remove_prefix(nl + 1);
  }
}

}  // namespace perftracker
