// src/tensor.cpp - Status strings, shapes and the Tensor handle.
#include <fmt/format.h>

#include <cstdlib>
#include <cstring>
#include <limits>
#include <new>

#ifdef __linux__
#include <sys/mman.h>
#endif

#include "opfuse/status.hpp"
#include "opfuse/tensor.hpp"

namespace opfuse {

const char* to_string(StatusCode code) noexcept {
  switch (code) {
    case StatusCode::ok: return "ok";
    case StatusCode::invalid_argument: return "invalid_argument";
    case StatusCode::unsupported: return "unsupported";
    case StatusCode::out_of_memory: return "out_of_memory";
    case StatusCode::internal: return "internal";
  }
  return "unknown";
}

std::string Status::to_string() const {
  return is_ok() ? std::string("ok") : std::string(opfuse::to_string(code_)) + ": " + message_;
}

const char* to_string(Layout layout) noexcept { return layout == Layout::nhwc ? "nhwc" : "nchw"; }

Shape::Shape(std::initializer_list<std::int64_t> d) {
  rank = static_cast<int>(d.size());
  int i = 0;
  for (auto v : d) {
    if (i < kMaxRank) dims[static_cast<std::size_t>(i)] = v;
    ++i;
  }
}

Shape Shape::of(const std::int64_t* d, int n) {
  Shape s;
  s.rank = n;
  for (int i = 0; i < n && i < kMaxRank; ++i) s.dims[static_cast<std::size_t>(i)] = d[i];
  return s;
}

std::int64_t Shape::numel() const noexcept {
  std::int64_t n = 1;
  for (int i = 0; i < rank && i < kMaxRank; ++i) n *= dims[static_cast<std::size_t>(i)];
  return n;
}

std::string Shape::str() const {
  if (rank == 0) return "scalar";
  std::string s;
  for (int i = 0; i < rank && i < kMaxRank; ++i) {
    if (i) s += 'x';
    s += std::to_string(dims[static_cast<std::size_t>(i)]);
  }
  return s;
}

Status Shape::validate(const std::string& what) const {
  if (rank < 1 || rank > kMaxRank)
    return {StatusCode::invalid_argument, fmt::format("{}: rank {} is outside [1, {}]", what, rank, kMaxRank)};
  // The byte size must fit a signed 64-bit integer (and so every index computation).
  constexpr std::int64_t kMaxElems = std::numeric_limits<std::int64_t>::max() / 4;
  std::int64_t n = 1;
  for (int i = 0; i < rank; ++i) {
    const std::int64_t d = dims[static_cast<std::size_t>(i)];
    if (d < 1) return {StatusCode::invalid_argument, fmt::format("{}: dim {} is {} (must be >= 1)", what, i, d)};
    if (n > kMaxElems / d)
      return {StatusCode::invalid_argument,
              fmt::format("{}: shape {} has more elements than an fp32 buffer can address", what, str())};
    n *= d;
  }
  return Status::ok();
}

bool operator==(const Shape& a, const Shape& b) noexcept {
  if (a.rank != b.rank) return false;
  for (int i = 0; i < a.rank && i < kMaxRank; ++i)
    if (a.dims[static_cast<std::size_t>(i)] != b.dims[static_cast<std::size_t>(i)]) return false;
  return true;
}

std::array<std::int64_t, kMaxRank> dense_strides(const Shape& shape, Layout layout) noexcept {
  std::array<std::int64_t, kMaxRank> s{};
  const int r = shape.rank < kMaxRank ? shape.rank : kMaxRank;
  if (r <= 0) return s;
  // Memory order as a permutation of logical dims: channels-last moves dim 1 to the end.
  std::array<int, kMaxRank> order{};
  for (int i = 0; i < r; ++i) order[static_cast<std::size_t>(i)] = i;
  if (layout == Layout::nhwc && r >= 3) {
    for (int i = 1; i < r - 1; ++i) order[static_cast<std::size_t>(i)] = i + 1;
    order[static_cast<std::size_t>(r - 1)] = 1;
  }
  std::int64_t step = 1;
  for (int i = r - 1; i >= 0; --i) {
    const auto d = static_cast<std::size_t>(order[static_cast<std::size_t>(i)]);
    s[d] = step;
    step *= shape.dims[d];
  }
  return s;
}

namespace {
constexpr std::size_t kHugePage = std::size_t{2} << 20;

bool huge_pages_enabled() noexcept {
  static const bool on = [] {
    const char* v = std::getenv("OPFUSE_HUGEPAGES");
    return !(v && std::strcmp(v, "0") == 0);
  }();
  return on;
}

struct AlignedFree {
  void operator()(float* p) const noexcept { free_buffer(p); }
};
}  // namespace

// Large buffers stream from DRAM, where 4 KiB pages cost a TLB miss (and a page walk the
// prefetchers wait for) every 1024 floats per stream. Huge pages measured on this Zen 4 VM
// (opfuse-bench, 3 A/B pairs, 1 thread): the STREAM triad probe's bandwidth rose markedly, and
// relu and add on 64 MiB and the 4096 x 4096 softmax / rmsnorm / layernorm all ran faster (the
// current figures: reports/REPORT.md).
float* alloc_buffer(std::size_t bytes) noexcept {
  const std::size_t rounded = (bytes + kAlignment - 1) / kAlignment * kAlignment;
  if (rounded < bytes) return nullptr;
  if (rounded == 0) return static_cast<float*>(std::aligned_alloc(kAlignment, kAlignment));
#ifdef __linux__
  if (rounded >= kHugePage && huge_pages_enabled()) {
    void* p = nullptr;
    if (posix_memalign(&p, kHugePage, rounded) != 0) return nullptr;
    // Advice only: where THP is off the buffer is simply made of 4 KiB pages. The tail past
    // the last whole huge page stays out of the advice (madvise wants whole pages anyway).
    (void)madvise(p, rounded / kHugePage * kHugePage, MADV_HUGEPAGE);
    return static_cast<float*>(p);
  }
#endif
  return static_cast<float*>(std::aligned_alloc(kAlignment, rounded));
}

void free_buffer(float* p) noexcept { std::free(p); }

Result<Tensor> Tensor::create(const Shape& shape, Layout layout) {
  if (Status s = shape.validate("tensor"); !s) return s;
  const std::size_t bytes = static_cast<std::size_t>(shape.numel()) * sizeof(float);
  const std::size_t rounded = (bytes + kAlignment - 1) / kAlignment * kAlignment;
  if (rounded < bytes) return Status(StatusCode::out_of_memory, "tensor: size overflows size_t");
  float* p = alloc_buffer(rounded);
  if (!p) return Status(StatusCode::out_of_memory, fmt::format("tensor: cannot allocate {} bytes", rounded));
  std::memset(p, 0, rounded);
  Tensor t;
  try {
    t.storage_ = std::shared_ptr<float>(p, AlignedFree{});
  } catch (const std::bad_alloc&) {  // shared_ptr already freed p through the deleter
    return Status(StatusCode::out_of_memory, "tensor: cannot allocate the buffer handle");
  }
  t.data_ = t.storage_.get();
  t.desc_ = {shape, layout};
  return t;
}

Result<Tensor> Tensor::view(float* data, const Shape& shape, Layout layout) {
  if (!data) return Status(StatusCode::invalid_argument, "tensor: view of a null data pointer");
  if (Status s = shape.validate("tensor"); !s) return s;
  Tensor t;
  t.data_ = data;
  t.desc_ = {shape, layout};
  return t;
}

Result<Tensor> Tensor::view(const float* data, const Shape& shape, Layout layout) {
  auto r = view(const_cast<float*>(data), shape, layout);  // NOLINT: marked read-only below
  if (r) r->read_only_ = true;
  return r;
}

Result<Tensor> Tensor::clone() const {
  if (empty()) return Status(StatusCode::invalid_argument, "tensor: clone of an empty tensor");
  auto r = create(desc_.shape, desc_.layout);
  if (!r) return r;
  std::memcpy(r->data_, data_, bytes());
  return r;
}

Status Tensor::copy_from(const Tensor& src) const {
  if (empty() || src.empty()) return {StatusCode::invalid_argument, "tensor: copy_from with an empty tensor"};
  if (read_only_) return {StatusCode::invalid_argument, "tensor: copy_from into a read-only view"};
  if (src.shape() != shape())
    return {StatusCode::invalid_argument,
            fmt::format("tensor: copy_from shape {} into shape {}", src.shape().str(), shape().str())};
  if (src.layout() == layout() || rank() < 3) {
    std::memmove(data_, src.data_, bytes());
    return Status::ok();
  }
  // Different layouts: walk logical indices.
  const auto ds = strides(), ss = src.strides();
  std::array<std::int64_t, kMaxRank> idx{};
  const int r = rank();
  for (std::int64_t n = 0, total = numel(); n < total; ++n) {
    std::int64_t od = 0, os = 0;
    for (int d = 0; d < r; ++d) {
      od += idx[static_cast<std::size_t>(d)] * ds[static_cast<std::size_t>(d)];
      os += idx[static_cast<std::size_t>(d)] * ss[static_cast<std::size_t>(d)];
    }
    data_[od] = src.data_[os];
    for (int d = r - 1; d >= 0; --d) {
      auto u = static_cast<std::size_t>(d);
      if (++idx[u] < desc_.shape.dims[u]) break;
      idx[u] = 0;
    }
  }
  return Status::ok();
}

}  // namespace opfuse
