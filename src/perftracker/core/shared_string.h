// SharedString: an immutable string held by one pointer and shared by reference count.
//
// Why: a summary holds one name per call path, and traces recorded with Python stacks hold
// about one distinct path per two events while their distinct leaf names number a few
// hundred. A std::string per path is 32 bytes plus a heap copy of the name (~60 bytes for a
// Python frame); a SharedString is 8 bytes, and every path ending in the same leaf shares one
// copy of its text (the summarizer and the wire decoder hand out one per distinct name).
// Assigning a string (a literal, a std::string) makes a copy of its own, so writers need not
// know about the sharing; copies share the text (an atomic count: safe across threads).
//
// Invariants: the text never changes once made; the empty string holds no allocation.
#pragma once

#include <atomic>
#include <compare>
#include <cstddef>
#include <cstdint>
#include <ostream>
#include <string>
#include <string_view>

namespace perftracker {

class SharedString {
 public:
  SharedString() = default;
  SharedString(std::string_view text);  // NOLINT(google-explicit-constructor): a string value
  SharedString(const char* text) : SharedString(std::string_view(text)) {}         // NOLINT
  SharedString(const std::string& text) : SharedString(std::string_view(text)) {}  // NOLINT
  SharedString(const SharedString& other) noexcept : node_(other.node_) { Ref(); }
  SharedString(SharedString&& other) noexcept : node_(other.node_) { other.node_ = nullptr; }
  SharedString& operator=(const SharedString& other) noexcept;
  SharedString& operator=(SharedString&& other) noexcept;
  ~SharedString() { Unref(); }

  std::string_view view() const {
    return node_ == nullptr ? std::string_view() : std::string_view(node_->text(), node_->size);
  }
  operator std::string_view() const { return view(); }  // NOLINT(google-explicit-constructor)
  // A copy, for code that takes a std::string (a map key, a report field).
  operator std::string() const { return str(); }  // NOLINT(google-explicit-constructor)
  std::string str() const { return std::string(view()); }
  const char* data() const { return node_ == nullptr ? "" : node_->text(); }
  size_t size() const { return node_ == nullptr ? 0 : node_->size; }
  bool empty() const { return node_ == nullptr; }
  // std::string_view's readers, for code written against a string.
  size_t find(std::string_view s, size_t pos = 0) const { return view().find(s, pos); }
  bool starts_with(std::string_view s) const { return view().starts_with(s); }
  bool ends_with(std::string_view s) const { return view().ends_with(s); }
  std::string_view substr(size_t pos, size_t n = std::string_view::npos) const {
    return view().substr(pos, n);
  }
  // Whether the two share one copy of their text (for tests of the sharing).
  bool SharesTextWith(const SharedString& other) const { return node_ == other.node_; }

  friend bool operator==(const SharedString& a, std::string_view b) { return a.view() == b; }
  friend std::strong_ordering operator<=>(const SharedString& a, std::string_view b) {
    return a.view() <=> b;
  }
  friend std::ostream& operator<<(std::ostream& os, const SharedString& s) {
    return os << s.view();
  }

 private:
  // Header of the one allocation; the text (NUL-terminated) follows it.
  struct Node {
    std::atomic<uint32_t> refs{1};
    size_t size = 0;
    const char* text() const { return reinterpret_cast<const char*>(this + 1); }
    char* text() { return reinterpret_cast<char*>(this + 1); }
  };
  void Ref() const {
    if (node_ != nullptr) node_->refs.fetch_add(1, std::memory_order_relaxed);
  }
  void Unref();

  Node* node_ = nullptr;
};

inline std::string operator+(std::string a, const SharedString& b) { return a += b.view(); }
inline std::string operator+(const SharedString& a, std::string_view b) {
  std::string s(a.view());
  return s += b;
}
inline std::string operator+(const SharedString& a, const char* b) {
  return a + std::string_view(b);
}
inline std::string operator+(const char* a, const SharedString& b) { return std::string(a) + b; }

}  // namespace perftracker

template <>
struct std::hash<perftracker::SharedString> {
  size_t operator()(const perftracker::SharedString& s) const noexcept {
    return std::hash<std::string_view>()(s.view());
  }
};
