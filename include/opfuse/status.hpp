// opfuse/status.hpp - error reporting at the library boundary.
//
// Every public entry point returns a Status (or a Result<T>, which is a value or a Status).
// The library never exits, aborts or lets an exception escape: a bad call comes back as a
// code plus a message that names the op, the parameter and the offending value, e.g.
//   "conv2d: input channels 3 do not match weight channels 4 (input 'w', dim 1)".
#pragma once

#include <string>
#include <utility>
#include <variant>

namespace opfuse {

enum class StatusCode : int {
  ok = 0,
  invalid_argument = 1,  // shapes, parameters or tensors that violate the op's contract
  unsupported = 2,       // a valid request no available kernel (or build) can serve
  out_of_memory = 3,     // an allocation failed
  internal = 4,          // a bug in opfuse or a peer library; please report it
};

const char* to_string(StatusCode code) noexcept;

class [[nodiscard]] Status {
 public:
  Status() noexcept = default;  // ok
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status ok() noexcept { return {}; }
  bool is_ok() const noexcept { return code_ == StatusCode::ok; }
  explicit operator bool() const noexcept { return is_ok(); }
  StatusCode code() const noexcept { return code_; }
  const std::string& message() const noexcept { return message_; }
  // "invalid_argument: conv2d: ..." - for logs and CLI output.
  std::string to_string() const;

 private:
  StatusCode code_ = StatusCode::ok;
  std::string message_;
};

// A value or the Status that explains why there is none.
template <class T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}        // NOLINT(google-explicit-constructor)
  Result(Status status) : v_(std::move(status)) {  // NOLINT(google-explicit-constructor)
    // A Result built from a Status must carry an error; an ok Status has no value to give.
    if (std::get<Status>(v_).is_ok()) v_ = Status(StatusCode::internal, "Result built from an ok Status");
  }

  bool is_ok() const noexcept { return std::holds_alternative<T>(v_); }
  explicit operator bool() const noexcept { return is_ok(); }
  // The error; Status::ok() when there is a value.
  Status status() const { return is_ok() ? Status::ok() : std::get<Status>(v_); }
  T& value() & { return std::get<T>(v_); }
  const T& value() const& { return std::get<T>(v_); }
  // By value, so `for (auto& x : f().value())` does not dangle.
  T value() && { return std::get<T>(std::move(v_)); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }

 private:
  std::variant<T, Status> v_;
};

}  // namespace opfuse
