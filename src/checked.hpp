// src/checked.hpp - overflow-checked size arithmetic for dims that come from untrusted input.
//
// Dims reach the library from ONNX files, caller tensors and shape arithmetic folded at load
// time; any product of them may exceed int64 (two dims of 2^32) or a byte count may exceed what
// an allocation can hold. Every element count and byte size computed from such dims goes
// through these helpers, which report overflow instead of wrapping, so that the caller can
// return a Status naming the node and the dims before anything is allocated. Internal: not part
// of the installed API.
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <span>

namespace opfuse::detail {

// a * b, nullopt when the product overflows int64.
inline std::optional<std::int64_t> checked_mul(std::int64_t a, std::int64_t b) noexcept {
  std::int64_t r = 0;
  if (__builtin_mul_overflow(a, b, &r)) return std::nullopt;
  return r;
}

// a * b for unsigned sizes, nullopt on overflow.
inline std::optional<std::uint64_t> checked_mul(std::uint64_t a, std::uint64_t b) noexcept {
  std::uint64_t r = 0;
  if (__builtin_mul_overflow(a, b, &r)) return std::nullopt;
  return r;
}

// a + b for unsigned sizes, nullopt on overflow.
inline std::optional<std::uint64_t> checked_add(std::uint64_t a, std::uint64_t b) noexcept {
  std::uint64_t r = 0;
  if (__builtin_add_overflow(a, b, &r)) return std::nullopt;
  return r;
}

// The element count of `dims` (1 for rank 0); nullopt when a dim is negative or the product
// overflows int64.
inline std::optional<std::int64_t> checked_numel(std::span<const std::int64_t> dims) noexcept {
  std::int64_t n = 1;
  for (const std::int64_t d : dims)
    if (d < 0 || __builtin_mul_overflow(n, d, &n)) return std::nullopt;
  return n;
}

// The bytes of `dims` elements of `elem_size` bytes each; nullopt when the count or the byte
// size overflows (int64 for the count, uint64 for the bytes).
inline std::optional<std::uint64_t> checked_bytes(std::span<const std::int64_t> dims, std::size_t elem_size) noexcept {
  const std::optional<std::int64_t> n = checked_numel(dims);
  if (!n) return std::nullopt;
  return checked_mul(static_cast<std::uint64_t>(*n), static_cast<std::uint64_t>(elem_size));
}

// A saturating sum, for budgets: a total that would overflow counts as "more than any budget".
inline std::uint64_t saturating_add(std::uint64_t a, std::uint64_t b) noexcept {
  return checked_add(a, b).value_or(std::numeric_limits<std::uint64_t>::max());
}

}  // namespace opfuse::detail
