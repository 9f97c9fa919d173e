// tests/test_tensor.cpp - Shape, TensorDesc, Tensor (create, views, strides, clone, copy_from)
// and the Status / Result types every entry point returns.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <numeric>
#include <string>
#include <vector>

#include "opfuse/opfuse.hpp"

namespace opfuse {
namespace {

bool starts_with(const std::string& s, const std::string& prefix) { return s.rfind(prefix, 0) == 0; }

// ---- Status and Result -------------------------------------------------------------------

// alloc_buffer: 64-byte aligned always; 2 MiB aligned from 2 MiB up on Linux (the huge-page
// policy; OPFUSE_HUGEPAGES=0 in the environment turns it off, and then this test only checks
// the 64-byte alignment). Every byte is writable, and owning tensors use it.
TEST(AllocBuffer, AlignedAndLargeBuffersOnHugePageBoundaries) {
  const char* env = std::getenv("OPFUSE_HUGEPAGES");
  const bool huge = !(env && std::string(env) == "0");
  for (std::size_t bytes : {std::size_t{4}, std::size_t{100}, std::size_t{1} << 20, (std::size_t{2} << 20) - 64,
                            std::size_t{2} << 20, (std::size_t{3} << 20) + 12}) {
    float* p = alloc_buffer(bytes);
    ASSERT_NE(p, nullptr) << bytes;
    const auto addr = reinterpret_cast<std::uintptr_t>(p);
    EXPECT_EQ(addr % kAlignment, 0u) << bytes;
#ifdef __linux__
    if (huge && bytes >= (std::size_t{2} << 20)) {
      EXPECT_EQ(addr % (std::size_t{2} << 20), 0u) << bytes;
    }
#endif
    std::memset(p, 0x5a, bytes);
    EXPECT_EQ(reinterpret_cast<unsigned char*>(p)[bytes - 1], 0x5a);
    free_buffer(p);
  }
  auto t = Tensor::create(Shape{1024, 1024});  // 4 MiB
  ASSERT_TRUE(t);
#ifdef __linux__
  if (huge) {
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(t->data()) % (std::size_t{2} << 20), 0u);
  }
#endif
  EXPECT_EQ(t->data()[t->numel() - 1], 0.f);                                      // zero-filled
  EXPECT_EQ(alloc_buffer(std::numeric_limits<std::size_t>::max() - 8), nullptr);  // overflow: null, no throw
}

TEST(Status, DefaultIsOk) {
  Status s;
  EXPECT_TRUE(s.is_ok());
  EXPECT_TRUE(static_cast<bool>(s));
  EXPECT_EQ(s.code(), StatusCode::ok);
  EXPECT_EQ(s.message(), "");
  EXPECT_EQ(s.to_string(), "ok");
  EXPECT_TRUE(Status::ok().is_ok());
}

TEST(Status, ErrorCarriesCodeAndMessage) {
  Status s(StatusCode::invalid_argument, "conv2d: groups 0 must be >= 1");
  EXPECT_FALSE(s.is_ok());
  EXPECT_FALSE(static_cast<bool>(s));
  EXPECT_EQ(s.code(), StatusCode::invalid_argument);
  EXPECT_EQ(s.message(), "conv2d: groups 0 must be >= 1");
  EXPECT_EQ(s.to_string(), "invalid_argument: conv2d: groups 0 must be >= 1");
}

TEST(Status, CodeNames) {
  EXPECT_STREQ(to_string(StatusCode::ok), "ok");
  EXPECT_STREQ(to_string(StatusCode::invalid_argument), "invalid_argument");
  EXPECT_STREQ(to_string(StatusCode::unsupported), "unsupported");
  EXPECT_STREQ(to_string(StatusCode::out_of_memory), "out_of_memory");
  EXPECT_STREQ(to_string(StatusCode::internal), "internal");
  EXPECT_STREQ(to_string(static_cast<StatusCode>(99)), "unknown");
  EXPECT_EQ(Status(StatusCode::unsupported, "x").to_string(), "unsupported: x");
  EXPECT_EQ(Status(StatusCode::out_of_memory, "y").to_string(), "out_of_memory: y");
  EXPECT_EQ(Status(StatusCode::internal, "z").to_string(), "internal: z");
}

TEST(Result, HoldsValue) {
  Result<int> r(42);
  ASSERT_TRUE(r.is_ok());
  EXPECT_TRUE(static_cast<bool>(r));
  EXPECT_EQ(*r, 42);
  EXPECT_EQ(r.value(), 42);
  EXPECT_TRUE(r.status().is_ok());
  *r = 7;
  EXPECT_EQ(r.value(), 7);
}

TEST(Result, HoldsError) {
  Result<int> r(Status(StatusCode::out_of_memory, "tensor: cannot allocate"));
  EXPECT_FALSE(r.is_ok());
  EXPECT_FALSE(static_cast<bool>(r));
  EXPECT_EQ(r.status().code(), StatusCode::out_of_memory);
  EXPECT_EQ(r.status().message(), "tensor: cannot allocate");
}

TEST(Result, OkStatusBecomesInternalError) {
  // A Result must hold a value or an error; an ok Status carries neither.
  Result<int> r(Status::ok());
  EXPECT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), StatusCode::internal);
}

TEST(Result, MovesValueOut) {
  Result<std::vector<int>> r(std::vector<int>{1, 2, 3});
  ASSERT_TRUE(r);
  EXPECT_EQ(r->size(), 3u);
  std::vector<int> v = std::move(r).value();
  EXPECT_EQ(v, (std::vector<int>{1, 2, 3}));
}

// ---- Shape ---------------------------------------------------------------------------------

TEST(Shape, Basics) {
  const Shape s{2, 3, 4};
  EXPECT_EQ(s.rank, 3);
  EXPECT_EQ(s[0], 2);
  EXPECT_EQ(s[2], 4);
  EXPECT_EQ(s.numel(), 24);
  EXPECT_EQ(s.str(), "2x3x4");
  EXPECT_EQ(Shape().str(), "scalar");
  EXPECT_EQ(Shape().rank, 0);
  EXPECT_EQ(s, (Shape{2, 3, 4}));
  EXPECT_NE(s, (Shape{2, 3, 5}));
  EXPECT_NE(s, (Shape{2, 3, 4, 1}));
  const std::int64_t d[] = {5, 6};
  EXPECT_EQ(Shape::of(d, 2), (Shape{5, 6}));
  EXPECT_TRUE(s.validate("t").is_ok());
  EXPECT_TRUE((Shape{1}).validate("t").is_ok());
  EXPECT_TRUE((Shape{1, 1, 1, 1, 1}).validate("t").is_ok());
}

void expect_shape_invalid(const Shape& s, const std::string& why) {
  SCOPED_TRACE(why);
  const Status st = s.validate("gemm: input 'a'");
  EXPECT_EQ(st.code(), StatusCode::invalid_argument) << st.to_string();
  EXPECT_TRUE(starts_with(st.message(), "gemm: input 'a': ")) << st.message();
}

TEST(Shape, ValidateRejects) {
  expect_shape_invalid(Shape(), "rank 0");
  const std::int64_t six[] = {1, 1, 1, 1, 1, 1};
  expect_shape_invalid(Shape::of(six, 6), "rank 6");
  expect_shape_invalid(Shape{1, 0, 3}, "zero dim");
  expect_shape_invalid(Shape{0}, "zero rank-1 dim");
  expect_shape_invalid(Shape{2, -1}, "negative dim");
  expect_shape_invalid(Shape{std::numeric_limits<std::int64_t>::min()}, "INT64_MIN dim");
  // Products that overflow int64 outright, and ones whose fp32 byte size does.
  expect_shape_invalid(Shape{std::int64_t{1} << 40, std::int64_t{1} << 40}, "product overflows int64");
  expect_shape_invalid(Shape{std::int64_t{1} << 31, std::int64_t{1} << 31}, "byte size overflows int64");
  expect_shape_invalid(Shape{std::numeric_limits<std::int64_t>::max()}, "INT64_MAX elements");
  expect_shape_invalid(Shape{3, 1 << 20, 1 << 20, 1 << 20}, "rank-4 product overflows");
}

TEST(Shape, ValidateAcceptsTheLargestAddressableSize) {
  // 2^61 - 1 elements of 4 bytes fit in a signed 64-bit byte count; one element more does not
  // (INT64_MAX / 4 = 2^61 - 1).
  EXPECT_TRUE((Shape{(std::int64_t{1} << 61) - 1}).validate("t").is_ok());
  EXPECT_FALSE((Shape{std::int64_t{1} << 61}).validate("t").is_ok());
  EXPECT_TRUE((Shape{std::int64_t{1} << 30, std::int64_t{1} << 30}).validate("t").is_ok());
}

TEST(TensorDesc, LayoutMattersFromRank3) {
  EXPECT_EQ((TensorDesc{Shape{4, 5}, Layout::nchw}), (TensorDesc{Shape{4, 5}, Layout::nhwc}));
  EXPECT_EQ((TensorDesc{Shape{4}, Layout::nchw}), (TensorDesc{Shape{4}, Layout::nhwc}));
  EXPECT_FALSE((TensorDesc{Shape{2, 3, 4}, Layout::nchw}) == (TensorDesc{Shape{2, 3, 4}, Layout::nhwc}));
  EXPECT_FALSE((TensorDesc{Shape{1, 2, 3, 4}, Layout::nchw}) == (TensorDesc{Shape{1, 2, 3, 4}, Layout::nhwc}));
  EXPECT_STREQ(to_string(Layout::nchw), "nchw");
  EXPECT_STREQ(to_string(Layout::nhwc), "nhwc");
}

// ---- strides -------------------------------------------------------------------------------

using Strides = std::array<std::int64_t, kMaxRank>;

TEST(Strides, NchwIsRowMajor) {
  EXPECT_EQ(dense_strides(Shape{7}, Layout::nchw), (Strides{1, 0, 0, 0, 0}));
  EXPECT_EQ(dense_strides(Shape{3, 7}, Layout::nchw), (Strides{7, 1, 0, 0, 0}));
  EXPECT_EQ(dense_strides(Shape{2, 3, 4}, Layout::nchw), (Strides{12, 4, 1, 0, 0}));
  EXPECT_EQ(dense_strides(Shape{2, 3, 4, 5}, Layout::nchw), (Strides{60, 20, 5, 1, 0}));
  EXPECT_EQ(dense_strides(Shape{2, 3, 4, 5, 6}, Layout::nchw), (Strides{360, 120, 30, 6, 1}));
}

TEST(Strides, NhwcPutsChannelsLast) {
  // Ranks 1 and 2 have no channel dim to move: nhwc is the same as nchw.
  EXPECT_EQ(dense_strides(Shape{7}, Layout::nhwc), (Strides{1, 0, 0, 0, 0}));
  EXPECT_EQ(dense_strides(Shape{3, 7}, Layout::nhwc), (Strides{7, 1, 0, 0, 0}));
  // (N, C, W) stored as (N, W, C).
  EXPECT_EQ(dense_strides(Shape{2, 3, 4}, Layout::nhwc), (Strides{12, 1, 3, 0, 0}));
  // (N, C, H, W) stored as (N, H, W, C).
  EXPECT_EQ(dense_strides(Shape{2, 3, 4, 5}, Layout::nhwc), (Strides{60, 1, 15, 3, 0}));
  // (N, C, D, H, W) stored as (N, D, H, W, C).
  EXPECT_EQ(dense_strides(Shape{2, 3, 4, 5, 6}, Layout::nhwc), (Strides{360, 1, 90, 18, 3}));
}

// Every logical index maps to a distinct offset in [0, numel): the strides describe a dense
// permutation of the buffer.
void expect_dense_bijection(const Shape& s, Layout l) {
  SCOPED_TRACE(s.str() + " " + to_string(l));
  const Strides st = dense_strides(s, l);
  std::vector<int> hits(static_cast<std::size_t>(s.numel()), 0);
  std::array<std::int64_t, kMaxRank> idx{};
  for (std::int64_t n = 0; n < s.numel(); ++n) {
    std::int64_t off = 0;
    for (int d = 0; d < s.rank; ++d) off += idx[static_cast<std::size_t>(d)] * st[static_cast<std::size_t>(d)];
    ASSERT_GE(off, 0);
    ASSERT_LT(off, s.numel());
    ++hits[static_cast<std::size_t>(off)];
    for (int d = s.rank - 1; d >= 0; --d) {
      if (++idx[static_cast<std::size_t>(d)] < s[d]) break;
      idx[static_cast<std::size_t>(d)] = 0;
    }
  }
  for (int h : hits) ASSERT_EQ(h, 1);
}

TEST(Strides, DenseForEveryRankAndLayout) {
  for (Layout l : {Layout::nchw, Layout::nhwc}) {
    expect_dense_bijection(Shape{5}, l);
    expect_dense_bijection(Shape{3, 5}, l);
    expect_dense_bijection(Shape{2, 3, 5}, l);
    expect_dense_bijection(Shape{2, 3, 5, 7}, l);
    expect_dense_bijection(Shape{2, 3, 1, 5, 4}, l);
  }
}

TEST(Strides, TensorReportsItsLayoutsStrides) {
  auto t = Tensor::create({2, 3, 4, 5}, Layout::nhwc);
  ASSERT_TRUE(t);
  EXPECT_EQ(t->strides(), dense_strides(Shape{2, 3, 4, 5}, Layout::nhwc));
  EXPECT_EQ(t->layout(), Layout::nhwc);
}

// ---- Tensor::create ------------------------------------------------------------------------

TEST(TensorCreate, AlignedAndZeroFilled) {
  for (const Shape& s : {Shape{1}, Shape{3}, Shape{17, 3}, Shape{1, 3, 7, 7}, Shape{2, 3, 5, 7, 11}}) {
    SCOPED_TRACE(s.str());
    auto r = Tensor::create(s);
    ASSERT_TRUE(r) << r.status().to_string();
    const Tensor& t = *r;
    EXPECT_FALSE(t.empty());
    EXPECT_TRUE(t.owns_data());
    EXPECT_FALSE(t.read_only());
    EXPECT_EQ(t.shape(), s);
    EXPECT_EQ(t.rank(), s.rank);
    EXPECT_EQ(t.layout(), Layout::nchw);
    EXPECT_EQ(t.numel(), s.numel());
    EXPECT_EQ(t.bytes(), static_cast<std::size_t>(s.numel()) * sizeof(float));
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(t.data()) % kAlignment, 0u);
    EXPECT_EQ(t.mutable_data(), t.data());
    for (std::int64_t i = 0; i < t.numel(); ++i) ASSERT_EQ(t.data()[i], 0.f) << "element " << i;
  }
}

TEST(TensorCreate, KeepsLayoutAndDims) {
  auto t = Tensor::create({1, 8, 3, 5}, Layout::nhwc);
  ASSERT_TRUE(t);
  EXPECT_EQ(t->layout(), Layout::nhwc);
  EXPECT_EQ(t->dim(1), 8);
  EXPECT_EQ(t->desc(), (TensorDesc{Shape{1, 8, 3, 5}, Layout::nhwc}));
}

TEST(TensorCreate, RejectsBadShapes) {
  const std::int64_t six[] = {1, 1, 1, 1, 1, 1};
  for (const Shape& s :
       {Shape(), Shape{0}, Shape{2, -3}, Shape::of(six, 6), Shape{std::int64_t{1} << 40, std::int64_t{1} << 40}}) {
    auto r = Tensor::create(s);
    EXPECT_FALSE(r);
    EXPECT_EQ(r.status().code(), StatusCode::invalid_argument) << s.str();
    EXPECT_TRUE(starts_with(r.status().message(), "tensor:")) << r.status().message();
  }
}

#if !defined(__SANITIZE_ADDRESS__)
TEST(TensorCreate, HugeValidShapeIsOutOfMemory) {
  // 2^60 floats = 4 EiB: a valid shape no machine can allocate. (Skipped under ASan, whose
  // allocator aborts on such requests instead of returning null.)
  auto r = Tensor::create({std::int64_t{1} << 30, std::int64_t{1} << 30});
  EXPECT_FALSE(r);
  EXPECT_EQ(r.status().code(), StatusCode::out_of_memory) << r.status().to_string();
}
#endif

TEST(TensorCreate, CopiesShareTheBuffer) {
  Tensor a = Tensor::create({4}).value();
  Tensor b = a;  // a handle, like a oneDNN memory object
  a.mutable_data()[2] = 5.f;
  EXPECT_EQ(b.data(), a.data());
  EXPECT_EQ(b.data()[2], 5.f);
}

TEST(TensorCreate, DefaultIsEmpty) {
  Tensor t;
  EXPECT_TRUE(t.empty());
  EXPECT_EQ(t.data(), nullptr);
  EXPECT_EQ(t.mutable_data(), nullptr);
  EXPECT_FALSE(t.owns_data());
  EXPECT_EQ(t.rank(), 0);
}

// ---- views ---------------------------------------------------------------------------------

TEST(TensorView, UnalignedMutableView) {
  std::vector<float> buf(1 + 2 * 3 * 5);
  std::iota(buf.begin(), buf.end(), 0.f);
  float* p = buf.data() + 1;  // 4-byte offset: not 64-byte aligned
  auto r = Tensor::view(p, {2, 3, 5});
  ASSERT_TRUE(r) << r.status().to_string();
  EXPECT_EQ(r->data(), p);
  EXPECT_EQ(r->mutable_data(), p);
  EXPECT_FALSE(r->read_only());
  EXPECT_FALSE(r->owns_data());
  EXPECT_FALSE(r->empty());
  EXPECT_EQ(r->data()[0], 1.f);  // no copy, no zero-fill
  r->mutable_data()[3] = -1.f;
  EXPECT_EQ(buf[4], -1.f);
}

TEST(TensorView, ConstViewIsReadOnly) {
  const std::vector<float> buf(12, 2.f);
  auto r = Tensor::view(buf.data(), {3, 4});
  ASSERT_TRUE(r);
  EXPECT_TRUE(r->read_only());
  EXPECT_EQ(r->data(), buf.data());
  EXPECT_EQ(r->mutable_data(), nullptr);
  EXPECT_FALSE(r->owns_data());
  // A read-only tensor refuses to be written through copy_from.
  Tensor src = Tensor::create({3, 4}).value();
  const Status s = r->copy_from(src);
  EXPECT_EQ(s.code(), StatusCode::invalid_argument);
  EXPECT_TRUE(starts_with(s.message(), "tensor:")) << s.message();
  EXPECT_EQ(buf[0], 2.f);
}

TEST(TensorView, RejectsNullAndBadShapes) {
  float* null_mut = nullptr;
  const float* null_const = nullptr;
  auto a = Tensor::view(null_mut, {4});
  auto b = Tensor::view(null_const, {4});
  EXPECT_EQ(a.status().code(), StatusCode::invalid_argument);
  EXPECT_EQ(b.status().code(), StatusCode::invalid_argument);
  EXPECT_TRUE(starts_with(a.status().message(), "tensor:")) << a.status().message();
  float x[4] = {};
  EXPECT_EQ(Tensor::view(x, {0}).status().code(), StatusCode::invalid_argument);
  EXPECT_EQ(Tensor::view(x, {2, -2}).status().code(), StatusCode::invalid_argument);
  EXPECT_EQ(Tensor::view(x, Shape()).status().code(), StatusCode::invalid_argument);
}

// ---- clone ---------------------------------------------------------------------------------

TEST(TensorClone, DeepCopyWithSameShapeAndLayout) {
  Tensor a = Tensor::create({1, 3, 2, 2}, Layout::nhwc).value();
  for (int i = 0; i < 12; ++i) a.mutable_data()[i] = static_cast<float>(i) + 0.5f;
  auto c = a.clone();
  ASSERT_TRUE(c);
  EXPECT_NE(c->data(), a.data());
  EXPECT_TRUE(c->owns_data());
  EXPECT_EQ(c->desc(), a.desc());
  EXPECT_EQ(c->layout(), Layout::nhwc);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(c->data()) % kAlignment, 0u);
  for (int i = 0; i < 12; ++i) EXPECT_EQ(c->data()[i], a.data()[i]);
  a.mutable_data()[0] = 99.f;
  EXPECT_EQ(c->data()[0], 0.5f);
}

TEST(TensorClone, OfReadOnlyViewIsWritable) {
  const float buf[3] = {1.f, 2.f, 3.f};
  Tensor v = Tensor::view(buf, {3}).value();
  auto c = v.clone();
  ASSERT_TRUE(c);
  EXPECT_FALSE(c->read_only());
  EXPECT_NE(c->mutable_data(), nullptr);
  EXPECT_EQ(c->data()[2], 3.f);
}

TEST(TensorClone, OfEmptyFails) {
  auto c = Tensor().clone();
  EXPECT_EQ(c.status().code(), StatusCode::invalid_argument);
}

// ---- copy_from -----------------------------------------------------------------------------

// Value at a logical index, read through the tensor's strides.
float at(const Tensor& t, std::initializer_list<std::int64_t> idx) {
  const auto s = t.strides();
  std::int64_t off = 0;
  int d = 0;
  for (std::int64_t i : idx) off += i * s[static_cast<std::size_t>(d++)];
  return t.data()[off];
}

TEST(TensorCopy, SameLayout) {
  Tensor a = Tensor::create({2, 3}).value();
  Tensor b = Tensor::create({2, 3}).value();
  for (int i = 0; i < 6; ++i) a.mutable_data()[i] = static_cast<float>(i);
  ASSERT_TRUE(b.copy_from(a));
  for (int i = 0; i < 6; ++i) EXPECT_EQ(b.data()[i], static_cast<float>(i));
}

TEST(TensorCopy, AcrossLayoutsKeepsLogicalValues) {
  const Shape s{2, 3, 4, 5};
  Tensor nchw = Tensor::create(s, Layout::nchw).value();
  for (int i = 0; i < 120; ++i) nchw.mutable_data()[i] = static_cast<float>(i);  // value = nchw offset
  Tensor nhwc = Tensor::create(s, Layout::nhwc).value();
  ASSERT_TRUE(nhwc.copy_from(nchw));
  for (int n = 0; n < 2; ++n)
    for (int c = 0; c < 3; ++c)
      for (int h = 0; h < 4; ++h)
        for (int w = 0; w < 5; ++w) {
          ASSERT_EQ(at(nhwc, {n, c, h, w}), at(nchw, {n, c, h, w}));
          // Memory order of nhwc is (n, h, w, c).
          ASSERT_EQ(nhwc.data()[((n * 4 + h) * 5 + w) * 3 + c], static_cast<float>(((n * 3 + c) * 4 + h) * 5 + w));
        }
  // And back.
  Tensor back = Tensor::create(s, Layout::nchw).value();
  ASSERT_TRUE(back.copy_from(nhwc));
  for (int i = 0; i < 120; ++i) ASSERT_EQ(back.data()[i], static_cast<float>(i));
}

TEST(TensorCopy, AcrossLayoutsRank3And5) {
  for (const Shape& s : {Shape{2, 3, 5}, Shape{1, 4, 2, 3, 2}}) {
    SCOPED_TRACE(s.str());
    Tensor a = Tensor::create(s, Layout::nhwc).value();
    for (std::int64_t i = 0; i < a.numel(); ++i) a.mutable_data()[i] = static_cast<float>(i) * 0.25f;
    Tensor b = Tensor::create(s, Layout::nchw).value();
    ASSERT_TRUE(b.copy_from(a));
    Tensor c = Tensor::create(s, Layout::nhwc).value();
    ASSERT_TRUE(c.copy_from(b));
    for (std::int64_t i = 0; i < a.numel(); ++i) ASSERT_EQ(c.data()[i], a.data()[i]);
    // The nchw copy differs in memory order (channels > 1), so a plain memcpy would fail this.
    bool differs = false;
    for (std::int64_t i = 0; i < a.numel(); ++i) differs |= b.data()[i] != a.data()[i];
    EXPECT_TRUE(differs);
  }
}

TEST(TensorCopy, IntoUnalignedViewAndFromConstView) {
  std::vector<float> src_buf = {1, 2, 3, 4, 5, 6};
  std::vector<float> dst_buf(7, 0.f);
  Tensor src = Tensor::view(static_cast<const float*>(src_buf.data()), {2, 3}).value();
  Tensor dst = Tensor::view(dst_buf.data() + 1, {2, 3}).value();
  ASSERT_TRUE(dst.copy_from(src));
  EXPECT_EQ(dst_buf[0], 0.f);
  for (int i = 0; i < 6; ++i) EXPECT_EQ(dst_buf[static_cast<std::size_t>(i) + 1], src_buf[static_cast<std::size_t>(i)]);
}

TEST(TensorCopy, Errors) {
  Tensor a = Tensor::create({2, 3}).value();
  Tensor b = Tensor::create({3, 2}).value();
  b.mutable_data()[0] = 7.f;
  Status s = b.copy_from(a);
  EXPECT_EQ(s.code(), StatusCode::invalid_argument);
  EXPECT_TRUE(starts_with(s.message(), "tensor:")) << s.message();
  EXPECT_EQ(b.data()[0], 7.f);  // untouched
  EXPECT_EQ(a.copy_from(Tensor()).code(), StatusCode::invalid_argument);
  EXPECT_EQ(Tensor().copy_from(a).code(), StatusCode::invalid_argument);
}

}  // namespace
}  // namespace opfuse
