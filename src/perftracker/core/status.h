// Status / StatusOr<T>: the error channel across layers (DuckDB, Abseil style).
// A Status that is not ok carries a code and one human-readable line that says what failed,
// where (file, offset, rank) and, where possible, how to fix it.
#pragma once

#include <cassert>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>

namespace perftracker {

enum class StatusCode : uint8_t {
  kOk,
  kInvalidArgument,  // bad option or bad user input
  kNotFound,         // missing file
  kDataLoss,         // corrupt or truncated data
  kUnimplemented,
  kInternal,
};

class [[nodiscard]] Status {
 public:
  Status() = default;
  static Status Ok() { return Status(); }
  static Status InvalidArgument(std::string msg) {
    return Status(StatusCode::kInvalidArgument, std::move(msg));
  }
  static Status NotFound(std::string msg) { return Status(StatusCode::kNotFound, std::move(msg)); }
  static Status DataLoss(std::string msg) { return Status(StatusCode::kDataLoss, std::move(msg)); }
  static Status Internal(std::string msg) { return Status(StatusCode::kInternal, std::move(msg)); }

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }

 private:
  Status(StatusCode code, std::string msg) : code_(code), message_(std::move(msg)) {}
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

template <typename T>
class [[nodiscard]] StatusOr {
 public:
  StatusOr(Status status) : status_(std::move(status)) { assert(!status_.ok()); }  // NOLINT
  StatusOr(T value) : value_(std::move(value)) {}                                 // NOLINT

  bool ok() const { return status_.ok(); }
  const Status& status() const { return status_; }
  T& value() & { return *value_; }
  const T& value() const& { return *value_; }
  T&& value() && { return std::move(*value_); }
  T* operator->() { return &*value_; }
  const T* operator->() const { return &*value_; }
  T& operator*() { return *value_; }
  const T& operator*() const { return *value_; }

 private:
  Status status_;
  std::optional<T> value_;
};

#define PERFTRACKER_RETURN_IF_ERROR(expr)      \
  do {                                         \
    ::perftracker::Status _st = (expr);        \
    if (!_st.ok()) return _st;                 \
  } while (0)

}  // namespace perftracker
