/// @file
/// opfuse/status.hpp - error reporting at the library boundary.
///
/// Every public entry point returns a Status (or a Result<T>, which is a value or a Status).
/// The library never exits, aborts or lets an exception escape: a bad call comes back as a
/// code plus a message that names the op, the parameter and the offending value, e.g.
///   "conv2d: input channels 3 do not match weight channels 4 (input 'w', dim 1)".
#pragma once

#include "opfuse/export.h"

#include <string>
#include <utility>
#include <variant>

// OPFUSE_API on the namespace: everything this header declares is part of the exported API.
namespace opfuse OPFUSE_API {

/// What went wrong, in the categories the CLI maps to exit codes.
enum class StatusCode : int {
  ok = 0,                ///< no error
  invalid_argument = 1,  ///< shapes, parameters or tensors that violate the op's contract
  unsupported = 2,       ///< a valid request no available kernel (or build) can serve
  out_of_memory = 3,     ///< an allocation failed
  internal = 4,          ///< a bug in opfuse or a peer library; please report it
};

/// The code's name.
/// @param code A status code.
/// @return "ok", "invalid_argument", "unsupported", "out_of_memory" or "internal" (a static string).
const char* to_string(StatusCode code) noexcept;

/// The outcome of a call: ok, or an error code with a message naming the op, the parameter and
/// the offending value.
class [[nodiscard]] Status {
 public:
  Status() noexcept = default;  ///< ok
  /// An error (or ok, for StatusCode::ok).
  /// @param code What kind of error.
  /// @param message What went wrong, naming the op or node, the parameter and the value.
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  /// @return An ok Status.
  static Status ok() noexcept { return {}; }
  /// @return Whether this is ok (no error).
  bool is_ok() const noexcept { return code_ == StatusCode::ok; }
  /// @return is_ok().
  explicit operator bool() const noexcept { return is_ok(); }
  /// @return The error code (StatusCode::ok when there is none).
  StatusCode code() const noexcept { return code_; }
  /// @return The message; empty when ok.
  const std::string& message() const noexcept { return message_; }
  /// For logs and CLI output.
  /// @return "invalid_argument: conv2d: ...", or "ok".
  std::string to_string() const;

 private:
  StatusCode code_ = StatusCode::ok;
  std::string message_;
};

/// A value or the Status that explains why there is none.
/// @tparam T The value's type.
template <class T>
class [[nodiscard]] Result {
 public:
  /// A Result holding a value.
  /// @param value The value.
  Result(T value) : v_(std::move(value)) {}  // NOLINT(google-explicit-constructor)
  /// A Result holding an error.
  /// @param status The error (an ok Status becomes an internal error: it has no value to give).
  Result(Status status) : v_(std::move(status)) {  // NOLINT(google-explicit-constructor)
    // A Result built from a Status must carry an error; an ok Status has no value to give.
    if (std::get<Status>(v_).is_ok()) v_ = Status(StatusCode::internal, "Result built from an ok Status");
  }

  /// @return Whether it holds a value.
  bool is_ok() const noexcept { return std::holds_alternative<T>(v_); }
  /// @return is_ok().
  explicit operator bool() const noexcept { return is_ok(); }
  /// @return The error; Status::ok() when there is a value.
  Status status() const { return is_ok() ? Status::ok() : std::get<Status>(v_); }
  /// @return The value (only when is_ok()).
  T& value() & { return std::get<T>(v_); }
  /// @return The value (only when is_ok()).
  const T& value() const& { return std::get<T>(v_); }
  /// By value, so `for (auto& x : f().value())` does not dangle.
  /// @return The value, moved out (only when is_ok()).
  T value() && { return std::get<T>(std::move(v_)); }
  /// @return A pointer to the value (only when is_ok()).
  T* operator->() { return &value(); }
  /// @return A pointer to the value (only when is_ok()).
  const T* operator->() const { return &value(); }
  /// @return The value (only when is_ok()).
  T& operator*() & { return value(); }
  /// @return The value (only when is_ok()).
  const T& operator*() const& { return value(); }

 private:
  std::variant<T, Status> v_;
};

}  // namespace OPFUSE_API
