// CompactVector<T>: a std::vector behind one pointer, for a member that is empty on almost
// every element of a large array (a FunctionSummary's metrics: empty on every call path of a
// trace file, which has no metric samples). 8 bytes when empty instead of std::vector's 24;
// the elements, when there are any, live in a vector on the heap. Copies are deep.
#pragma once

#include <cstddef>
#include <initializer_list>
#include <memory>
#include <utility>
#include <vector>

namespace perftracker {

template <typename T>
class CompactVector {
 public:
  CompactVector() = default;
  CompactVector(std::initializer_list<T> items) { *this = items; }
  CompactVector(const CompactVector& other)
      : items_(other.empty() ? nullptr : std::make_unique<std::vector<T>>(*other.items_)) {}
  CompactVector(CompactVector&& other) noexcept = default;
  CompactVector& operator=(const CompactVector& other) {
    if (this != &other) {
      items_ = other.empty() ? nullptr : std::make_unique<std::vector<T>>(*other.items_);
    }
    return *this;
  }
  CompactVector& operator=(CompactVector&& other) noexcept = default;
  CompactVector& operator=(std::initializer_list<T> items) {
    items_ = items.size() == 0 ? nullptr : std::make_unique<std::vector<T>>(items);
    return *this;
  }
  ~CompactVector() = default;

  bool empty() const { return items_ == nullptr || items_->empty(); }
  size_t size() const { return items_ == nullptr ? 0 : items_->size(); }
  const T* begin() const { return items_ == nullptr ? nullptr : items_->data(); }
  const T* end() const { return begin() + size(); }
  T* begin() { return items_ == nullptr ? nullptr : items_->data(); }
  T* end() { return begin() + size(); }
  const T& operator[](size_t i) const { return (*items_)[i]; }
  T& operator[](size_t i) { return (*items_)[i]; }

  void reserve(size_t n) {
    if (n > 0) Items().reserve(n);
  }
  void push_back(T item) { Items().push_back(std::move(item)); }
  void clear() { items_.reset(); }

 private:
  std::vector<T>& Items() {
    if (items_ == nullptr) items_ = std::make_unique<std::vector<T>>();
    return *items_;
  }

  std::unique_ptr<std::vector<T>> items_;
};

}  // namespace perftracker
