#include "perftracker/core/shared_string.h"

#include <cstring>
#include <new>

namespace perftracker {

SharedString::SharedString(std::string_view text) {
  if (text.empty()) return;
  void* block = ::operator new(sizeof(Node) + text.size() + 1);
  node_ = new (block) Node;
  node_->size = text.size();
  std::memcpy(node_->text(), text.data(), text.size());
  node_->text()[text.size()] = '\0';
}

SharedString& SharedString::operator=(const SharedString& other) noexcept {
  if (node_ == other.node_) return *this;
  other.Ref();
  Unref();
  node_ = other.node_;
  return *this;
}

SharedString& SharedString::operator=(SharedString&& other) noexcept {
  if (this == &other) return *this;
  Unref();
  node_ = other.node_;
  other.node_ = nullptr;
  return *this;
}

void SharedString::Unref() {
  if (node_ == nullptr) return;
  if (node_->refs.fetch_sub(1, std::memory_order_acq_rel) == 1) {
    node_->~Node();
    ::operator delete(node_);
  }
  node_ = nullptr;
}

}  // namespace perftracker
