// opfuse/tensor.hpp - fp32 tensors: owning 64-byte-aligned buffers and views over user memory.
//
// A Tensor is a cheap handle (copying it shares the buffer, like a oneDNN memory object).
// Its shape is always *logical*: for rank >= 3 dimension 1 is channels, so a 4-D activation
// is (N, C, H, W) whatever its memory order. The layout tag says how it is laid out in memory:
//   Layout::nchw  channels-first, dense row-major in the logical order (also plain rank 1-2);
//   Layout::nhwc  channels-last: (N, H, W, C) in memory, (N, D, H, W, C) for rank 5.
// strides() gives, for each logical dimension, the step in elements in memory, so a kernel
// written with strides handles both layouts.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>

#include "opfuse/status.hpp"

namespace opfuse {

inline constexpr int kMaxRank = 5;
inline constexpr std::size_t kAlignment = 64;  // bytes; one cache line, one AVX-512 vector

enum class Layout : std::uint8_t { nchw = 0, nhwc = 1 };
const char* to_string(Layout layout) noexcept;

// Logical dimensions, outermost first. Construction never fails; validate() checks it.
struct Shape {
  int rank = 0;
  std::array<std::int64_t, kMaxRank> dims{};

  Shape() = default;
  Shape(std::initializer_list<std::int64_t> d);
  // Builds from a pointer and a count; ranks above kMaxRank are kept as rank (invalid) so
  // validation can report them.
  static Shape of(const std::int64_t* d, int n);

  std::int64_t operator[](int i) const { return dims[static_cast<std::size_t>(i)]; }
  std::int64_t& operator[](int i) { return dims[static_cast<std::size_t>(i)]; }
  // Product of the dims; only meaningful for a validated shape.
  std::int64_t numel() const noexcept;
  // "1x3x224x224" ("scalar" for rank 0).
  std::string str() const;
  // invalid_argument unless 1 <= rank <= kMaxRank, every dim >= 1 and the byte size of an
  // fp32 tensor of this shape fits in a signed 64-bit integer. `what` prefixes the message.
  Status validate(const std::string& what) const;

  friend bool operator==(const Shape& a, const Shape& b) noexcept;
  friend bool operator!=(const Shape& a, const Shape& b) noexcept { return !(a == b); }
};

// What an op needs to know about an operand before it sees data: shape and memory order.
struct TensorDesc {
  Shape shape;
  Layout layout = Layout::nchw;
  friend bool operator==(const TensorDesc& a, const TensorDesc& b) noexcept {
    return a.shape == b.shape && (a.layout == b.layout || a.shape.rank < 3);
  }
};

// Element strides of a dense tensor with this shape and layout, indexed by logical dim.
std::array<std::int64_t, kMaxRank> dense_strides(const Shape& shape, Layout layout) noexcept;

// The allocator behind owning tensors and kernel workspaces, for callers that want the same
// policy for their own buffers: `bytes` (rounded up to kAlignment) of 64-byte aligned memory,
// or null when the allocation fails; release with free_buffer. On Linux, buffers of 2 MiB or
// more are 2 MiB aligned and advised as transparent huge pages (madvise MADV_HUGEPAGE, which
// works where THP is set to "madvise", Debian's default): large activations streamed from DRAM
// then take a TLB miss per 2 MiB instead of per 4 KiB. OPFUSE_HUGEPAGES=0 turns that off.
float* alloc_buffer(std::size_t bytes) noexcept;
void free_buffer(float* p) noexcept;

class Tensor {
 public:
  Tensor() = default;  // empty: no shape, no data

  // Owning tensor, 64-byte aligned (alloc_buffer), zero-filled. invalid_argument for a bad shape,
  // out_of_memory when the allocation fails.
  static Result<Tensor> create(const Shape& shape, Layout layout = Layout::nchw);
  // Non-owning views over user memory (which may be unaligned). The caller keeps the memory
  // alive while the view is used. A view of const memory is read-only: passing it as an op
  // output is an invalid_argument error.
  static Result<Tensor> view(float* data, const Shape& shape, Layout layout = Layout::nchw);
  static Result<Tensor> view(const float* data, const Shape& shape, Layout layout = Layout::nchw);

  bool empty() const noexcept { return data_ == nullptr; }
  const Shape& shape() const noexcept { return desc_.shape; }
  const TensorDesc& desc() const noexcept { return desc_; }
  Layout layout() const noexcept { return desc_.layout; }
  int rank() const noexcept { return desc_.shape.rank; }
  std::int64_t dim(int i) const noexcept { return desc_.shape[i]; }
  std::int64_t numel() const noexcept { return desc_.shape.numel(); }
  std::size_t bytes() const noexcept { return static_cast<std::size_t>(numel()) * sizeof(float); }
  std::array<std::int64_t, kMaxRank> strides() const noexcept { return dense_strides(desc_.shape, desc_.layout); }

  const float* data() const noexcept { return data_; }
  // Tensor is a handle: writing through a const handle is allowed, like a pointer.
  // nullptr for a read-only view.
  float* mutable_data() const noexcept { return read_only_ ? nullptr : data_; }
  bool read_only() const noexcept { return read_only_; }
  bool owns_data() const noexcept { return static_cast<bool>(storage_); }

  // Deep copy into a new owning tensor with the same shape and layout.
  Result<Tensor> clone() const;
  // Copies the values of `src` (same shape; any layouts) into this tensor.
  Status copy_from(const Tensor& src) const;

 private:
  std::shared_ptr<float> storage_;
  float* data_ = nullptr;
  TensorDesc desc_;
  bool read_only_ = false;
};

}  // namespace opfuse
