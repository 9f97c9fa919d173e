/// @file
/// opfuse/tensor.hpp - fp32 tensors: owning 64-byte-aligned buffers and views over user memory.
///
/// A Tensor is a cheap handle (copying it shares the buffer, like a oneDNN memory object).
/// Its shape is always *logical*: for rank >= 3 dimension 1 is channels, so a 4-D activation
/// is (N, C, H, W) whatever its memory order. The layout tag says how it is laid out in memory:
///   Layout::nchw  channels-first, dense row-major in the logical order (also plain rank 1-2);
///   Layout::nhwc  channels-last: (N, H, W, C) in memory, (N, D, H, W, C) for rank 5.
/// strides() gives, for each logical dimension, the step in elements in memory, so a kernel
/// written with strides handles both layouts.
#pragma once

#include "opfuse/export.h"

#include <array>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>

#include "opfuse/status.hpp"

// OPFUSE_API on the namespace: everything this header declares is part of the exported API.
namespace opfuse OPFUSE_API {

inline constexpr int kMaxRank = 5;             ///< the highest tensor rank opfuse supports
inline constexpr std::size_t kAlignment = 64;  ///< bytes; one cache line, one AVX-512 vector

/// Memory order of a tensor of rank >= 3 (rank 1-2 tensors are always dense row-major):
/// nchw: channels-first, dense row-major in the logical order; nhwc: channels-last, dimension 1
/// (channels) innermost in memory.
enum class Layout : std::uint8_t { nchw = 0, /**< channels-first */ nhwc = 1 /**< channels-last */ };
/// Name of a layout.
/// @param layout the layout
/// @return "nchw" or "nhwc"
const char* to_string(Layout layout) noexcept;

/// Logical dimensions, outermost first. Construction never fails; validate() checks it.
struct Shape {
  int rank = 0;                               ///< number of dimensions; 0 for an empty shape
  std::array<std::int64_t, kMaxRank> dims{};  ///< the first `rank` entries are the dims; the rest stay 0

  Shape() = default;  ///< rank 0, no dims
  /// Builds from a list of dims; more than kMaxRank dims keep the count as rank (invalid) so
  /// validation can report it.
  /// @param d the dims, outermost first
  Shape(std::initializer_list<std::int64_t> d);
  /// Builds from a pointer and a count; ranks above kMaxRank are kept as rank (invalid) so
  /// validation can report them.
  /// @param d the dims, outermost first (`n` values; only the first kMaxRank are read)
  /// @param n the rank
  /// @return the shape
  static Shape of(const std::int64_t* d, int n);

  /// Reads a dim (unchecked).
  /// @param i the logical dimension, 0 <= i < kMaxRank
  /// @return dims[i]
  std::int64_t operator[](int i) const { return dims[static_cast<std::size_t>(i)]; }
  /// Writes a dim (unchecked).
  /// @param i the logical dimension, 0 <= i < kMaxRank
  /// @return a reference to dims[i]
  std::int64_t& operator[](int i) { return dims[static_cast<std::size_t>(i)]; }
  /// Product of the dims; only meaningful for a validated shape.
  /// @return the number of elements (1 for rank 0)
  std::int64_t numel() const noexcept;
  /// Text form of the shape.
  /// @return "1x3x224x224" ("scalar" for rank 0)
  std::string str() const;
  /// Checks that the shape can describe an fp32 tensor.
  /// @param what prefixes the error message (e.g. the tensor's name)
  /// @return ok, or invalid_argument unless 1 <= rank <= kMaxRank, every dim >= 1 and the byte
  ///         size of an fp32 tensor of this shape fits in a signed 64-bit integer
  Status validate(const std::string& what) const;

  /// Equal rank and equal dims.
  /// @param a a shape
  /// @param b another shape
  /// @return true when the shapes are equal
  friend bool operator==(const Shape& a, const Shape& b) noexcept;
  /// Negation of operator==.
  /// @param a a shape
  /// @param b another shape
  /// @return true when the shapes differ
  friend bool operator!=(const Shape& a, const Shape& b) noexcept { return !(a == b); }
};

/// What an op needs to know about an operand before it sees data: shape and memory order.
struct TensorDesc {
  Shape shape;                   ///< logical shape
  Layout layout = Layout::nchw;  ///< memory order
  /// Equal shapes and equal layouts; the layout is ignored below rank 3, where both are the
  /// same memory order.
  /// @param a a descriptor
  /// @param b another descriptor
  /// @return true when both describe the same memory
  friend bool operator==(const TensorDesc& a, const TensorDesc& b) noexcept {
    return a.shape == b.shape && (a.layout == b.layout || a.shape.rank < 3);
  }
};

/// Element strides of a dense tensor with this shape and layout, indexed by logical dim.
/// @param shape the logical shape
/// @param layout the memory order
/// @return per logical dimension, the step in elements in memory; entries past the rank are 0
std::array<std::int64_t, kMaxRank> dense_strides(const Shape& shape, Layout layout) noexcept;

/// The allocator behind owning tensors and kernel workspaces, for callers that want the same
/// policy for their own buffers: `bytes` (rounded up to kAlignment) of 64-byte aligned memory,
/// or null when the allocation fails; release with free_buffer. On Linux, buffers of 2 MiB or
/// more are 2 MiB aligned and advised as transparent huge pages (madvise MADV_HUGEPAGE, which
/// works where THP is set to "madvise", Debian's default): large activations streamed from DRAM
/// then take a TLB miss per 2 MiB instead of per 4 KiB. OPFUSE_HUGEPAGES=0 turns that off.
/// @param bytes the size wanted (0 gives a buffer of kAlignment bytes)
/// @return the buffer (uninitialized), or nullptr when the allocation fails
float* alloc_buffer(std::size_t bytes) noexcept;
/// Releases a buffer from alloc_buffer.
/// @param p the buffer, or nullptr (then nothing happens)
void free_buffer(float* p) noexcept;

/// An fp32 tensor handle: an owning buffer or a view over user memory, with its shape and
/// layout. Copies share the buffer.
class Tensor {
 public:
  Tensor() = default;  ///< empty: no shape, no data

  /// Owning tensor, 64-byte aligned (alloc_buffer), zero-filled.
  /// @param shape the logical shape
  /// @param layout the memory order
  /// @return the tensor; invalid_argument for a bad shape (Shape::validate), out_of_memory when
  ///         the allocation fails
  static Result<Tensor> create(const Shape& shape, Layout layout = Layout::nchw);
  /// Non-owning view over writable user memory (which may be unaligned). The caller keeps the
  /// memory alive while the view is used.
  /// @param data the first element; dense in the given layout
  /// @param shape the logical shape
  /// @param layout the memory order of `data`
  /// @return the view; invalid_argument for a null `data` or a bad shape
  static Result<Tensor> view(float* data, const Shape& shape, Layout layout = Layout::nchw);
  /// Non-owning, read-only view over const user memory (which may be unaligned): passing it as
  /// an op output is an invalid_argument error. The caller keeps the memory alive while the
  /// view is used.
  /// @param data the first element; dense in the given layout
  /// @param shape the logical shape
  /// @param layout the memory order of `data`
  /// @return the view; invalid_argument for a null `data` or a bad shape
  static Result<Tensor> view(const float* data, const Shape& shape, Layout layout = Layout::nchw);

  /// Whether the tensor has no data (default-constructed).
  /// @return true for an empty tensor
  bool empty() const noexcept { return data_ == nullptr; }
  /// The logical shape.
  /// @return the shape (rank 0 when empty)
  const Shape& shape() const noexcept { return desc_.shape; }
  /// Shape and layout together.
  /// @return the descriptor
  const TensorDesc& desc() const noexcept { return desc_; }
  /// The memory order.
  /// @return the layout
  Layout layout() const noexcept { return desc_.layout; }
  /// Number of dimensions.
  /// @return the rank (0 when empty)
  int rank() const noexcept { return desc_.shape.rank; }
  /// One logical dim (unchecked).
  /// @param i the logical dimension, 0 <= i < kMaxRank
  /// @return its size
  std::int64_t dim(int i) const noexcept { return desc_.shape[i]; }
  /// Number of elements.
  /// @return the product of the dims
  std::int64_t numel() const noexcept { return desc_.shape.numel(); }
  /// Size of the data.
  /// @return numel() * sizeof(float)
  std::size_t bytes() const noexcept { return static_cast<std::size_t>(numel()) * sizeof(float); }
  /// Element strides, indexed by logical dim (dense_strides of the shape and layout).
  /// @return per logical dimension, the step in elements in memory
  std::array<std::int64_t, kMaxRank> strides() const noexcept { return dense_strides(desc_.shape, desc_.layout); }

  /// Read access to the data.
  /// @return the first element, or nullptr when empty
  const float* data() const noexcept { return data_; }
  /// Write access to the data. Tensor is a handle: writing through a const handle is allowed,
  /// like a pointer.
  /// @return the first element; nullptr for a read-only view or an empty tensor
  float* mutable_data() const noexcept { return read_only_ ? nullptr : data_; }
  /// Whether this is a view of const memory.
  /// @return true for a read-only view
  bool read_only() const noexcept { return read_only_; }
  /// Whether the tensor owns its buffer (made by create or clone).
  /// @return true for an owning tensor, false for a view or an empty tensor
  bool owns_data() const noexcept { return static_cast<bool>(storage_); }

  /// Deep copy into a new owning tensor with the same shape and layout.
  /// @return the copy; invalid_argument for an empty tensor, out_of_memory when the allocation
  ///         fails
  Result<Tensor> clone() const;
  /// Copies the values of `src` (same shape; any layouts) into this tensor.
  /// @param src the tensor to read
  /// @return ok; invalid_argument when either tensor is empty, this one is a read-only view or
  ///         the shapes differ
  Status copy_from(const Tensor& src) const;

 private:
  std::shared_ptr<float> storage_;
  float* data_ = nullptr;
  TensorDesc desc_;
  bool read_only_ = false;
};

}  // namespace OPFUSE_API
