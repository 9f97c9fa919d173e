// tests/test_errors.cpp - the error paths of every op, at the API boundary.
//
// Every bad request must come back as the exact StatusCode, with a message that starts with
// "<op>:", and must leave the outputs untouched (they hold a sentinel before the call and
// are checked after it). A bad desc is pushed through every entry point that takes one
// (validate, infer_outputs, prepare, prepare_kernel, run); bad tensors go through
// prepare() + execute() and run().
//
// Structure: generic mutations applied to all 24 ops (parameterized on OpKind: missing and
// extra inputs, zero / negative / overflowing dims, ranks, params of another op, layouts,
// contexts, tensor counts, null / empty / mis-shaped / read-only / overlapping tensors), then
// one block per op family for its own parameters.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "op_samples.hpp"
#include "opfuse/opfuse.hpp"

namespace opfuse {
namespace {

using testing::all_ops;
using testing::bind;
using testing::Bound;
using testing::fill;
using testing::kSentinel;
using testing::sample_desc;
using testing::td;
using testing::touched;

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

std::string op_str(OpKind op) { return std::string(op_name(op)); }

::testing::AssertionResult is_error(const Status& s, StatusCode code, OpKind op) {
  if (s.code() != code)
    return ::testing::AssertionFailure() << "expected " << to_string(code) << ", got " << s.to_string();
  const std::string prefix = op_str(op) + ":";
  if (s.message().rfind(prefix, 0) != 0)
    return ::testing::AssertionFailure() << "message does not start with '" << prefix << "': " << s.message();
  return ::testing::AssertionSuccess();
}

// The op's naive kernel; Registry.EveryOpHasANaiveKernel fails when it is missing, and
// callers here check for null rather than crash.
const KernelDef* naive_kernel(OpKind op) { return find_kernel(op_str(op) + "__naive"); }

// A bad desc is refused by every entry point with the same code, and run() leaves the
// outputs (tensors of the op's valid sample) untouched.
void expect_rejected(const OpDesc& bad, StatusCode code = StatusCode::invalid_argument) {
  const OpKind op = bad.op;
  EXPECT_TRUE(is_error(validate(bad), code, op)) << "validate";
  auto outs = infer_outputs(bad);
  EXPECT_TRUE(is_error(outs.status(), code, op)) << "infer_outputs";
  auto prim = prepare(bad);
  EXPECT_TRUE(is_error(prim.status(), code, op)) << "prepare";
  auto prim_naive = prepare(bad, Context{Stage::naive, 1, false});
  EXPECT_TRUE(is_error(prim_naive.status(), code, op)) << "prepare (naive)";
  if (const KernelDef* k = naive_kernel(op)) {
    auto prim_k = prepare_kernel(bad, *k);
    EXPECT_TRUE(is_error(prim_k.status(), code, op)) << "prepare_kernel";
  } else {
    ADD_FAILURE() << op_str(op) << " has no naive kernel";
  }

  const Bound b = bind(sample_desc(op));
  EXPECT_TRUE(is_error(run(bad, b.in_ptrs(), b.out_ptrs()), code, op)) << "run";
  for (std::size_t o = 0; o < b.out.size(); ++o) EXPECT_EQ(touched(b.out[o]), 0) << "run wrote output " << o;
}

#define EXPECT_REJECTED(...)      \
  do {                            \
    SCOPED_TRACE(#__VA_ARGS__);   \
    expect_rejected(__VA_ARGS__); \
  } while (0)

// The sample of `op` with `f` applied to it.
template <class F>
OpDesc with(OpKind op, F f) {
  OpDesc d = sample_desc(op);
  f(d);
  return d;
}

// The sample of `op` with `f` applied to its parameter struct P.
template <class P, class F>
OpDesc with_params(OpKind op, F f) {
  OpDesc d = sample_desc(op);
  P p = d.p<P>();
  f(p);
  d.params = p;
  return d;
}

// Values of a tensor, to check that a failed call did not write into its inputs either.
std::vector<float> values(const Tensor& t) { return {t.data(), t.data() + t.numel()}; }

// Executes the prepared sample with these tensors, expecting `code`; afterwards every
// writable output tensor passed and every output of `b` must still hold the sentinel, and
// the inputs of `b` must hold their values. Goes through prepare()+execute() and run().
void expect_execute_fails(const Bound& b, const std::vector<const Tensor*>& in, const std::vector<const Tensor*>& out,
                          StatusCode code = StatusCode::invalid_argument) {
  std::vector<std::vector<float>> before;
  for (const Tensor& t : b.in) before.push_back(values(t));
  auto prim = prepare(b.desc);
  ASSERT_TRUE(prim) << prim.status().to_string();
  EXPECT_TRUE(is_error(prim->execute(in, out), code, b.desc.op)) << "execute";
  EXPECT_TRUE(is_error(run(b.desc, in, out), code, b.desc.op)) << "run";
  const auto is_input = [&](const Tensor* t) {
    for (const Tensor& i : b.in)
      if (i.data() == t->data()) return true;  // checked below, with the inputs
    return false;
  };
  for (const Tensor* t : out) {
    if (t && !t->empty() && !t->read_only() && !is_input(t)) {
      EXPECT_EQ(touched(*t), 0) << "a failed call wrote an output";
    }
  }
  for (std::size_t o = 0; o < b.out.size(); ++o) EXPECT_EQ(touched(b.out[o]), 0) << "output " << o << " written";
  for (std::size_t i = 0; i < b.in.size(); ++i) EXPECT_EQ(values(b.in[i]), before[i]) << "input " << i << " written";
}

// A tensor like `d` with its last dim one larger, filled with the sentinel.
Tensor grown(const TensorDesc& d) {
  Shape s = d.shape;
  s[s.rank - 1] += 1;
  Tensor t = Tensor::create(s, d.layout).value();
  fill(t, kSentinel);
  return t;
}

// =============================================================================================
// Generic desc errors, every op.
// =============================================================================================

class DescErrors : public ::testing::TestWithParam<OpKind> {};

TEST_P(DescErrors, SampleRunsOk) {
  // The positive control: the unmodified sample validates, prepares and runs, and writes
  // every output element. Without it every test below could pass for the wrong reason.
  const OpKind op = GetParam();
  const Bound b = bind(sample_desc(op));
  ASSERT_TRUE(validate(b.desc)) << validate(b.desc).to_string();
  auto prim = prepare(b.desc);
  ASSERT_TRUE(prim) << prim.status().to_string();
  const Status s = prim->execute(b.in_ptrs(), b.out_ptrs());
  ASSERT_TRUE(s) << s.to_string();
  for (const Tensor& t : b.out) EXPECT_EQ(touched(t), t.numel());
  const Bound b2 = bind(sample_desc(op));
  EXPECT_TRUE(run(b2.desc, b2.in_ptrs(), b2.out_ptrs()));
  for (std::size_t o = 0; o < b.out.size(); ++o) EXPECT_EQ(values(b2.out[o]), values(b.out[o]));
}

TEST_P(DescErrors, MissingInput) {
  EXPECT_REJECTED(with(GetParam(), [](OpDesc& d) { d.inputs.pop_back(); }));
  EXPECT_REJECTED(with(GetParam(), [](OpDesc& d) { d.inputs.clear(); }));
}

TEST_P(DescErrors, ExtraInput) {
  EXPECT_REJECTED(with(GetParam(), [](OpDesc& d) { d.inputs.push_back(d.inputs[0]); }));
}

TEST_P(DescErrors, ZeroDimInEveryInput) {
  const OpDesc base = sample_desc(GetParam());
  for (std::size_t i = 0; i < base.inputs.size(); ++i) {
    SCOPED_TRACE("input " + std::to_string(i));
    OpDesc d = base;
    d.inputs[i].shape[d.inputs[i].shape.rank - 1] = 0;
    EXPECT_REJECTED(d);
  }
}

TEST_P(DescErrors, NegativeDimInEveryInput) {
  const OpDesc base = sample_desc(GetParam());
  for (std::size_t i = 0; i < base.inputs.size(); ++i) {
    SCOPED_TRACE("input " + std::to_string(i));
    OpDesc d = base;
    d.inputs[i].shape[0] = -2;
    EXPECT_REJECTED(d);
  }
}

TEST_P(DescErrors, DimsWhoseProductOverflows) {
  const OpDesc base = sample_desc(GetParam());
  for (std::size_t i : {std::size_t{0}, base.inputs.size() - 1}) {
    SCOPED_TRACE("input " + std::to_string(i));
    OpDesc d = base;
    Shape& s = d.inputs[i].shape;
    for (int j = 0; j < s.rank; ++j) s[j] = std::int64_t{1} << 62;  // 2^62 alone overflows the byte size
    EXPECT_REJECTED(d);
    OpDesc e = base;  // each dim fine, the product not
    Shape& t = e.inputs[i].shape;
    t[0] = std::numeric_limits<std::int64_t>::max() / 2;
    if (t.rank > 1) t[1] = 3;
    EXPECT_REJECTED(e);
  }
}

TEST_P(DescErrors, BadRank) {
  EXPECT_REJECTED(with(GetParam(), [](OpDesc& d) { d.inputs[0].shape = Shape(); }));
  EXPECT_REJECTED(with(GetParam(), [](OpDesc& d) {
    const std::int64_t six[] = {1, 2, 3, 4, 5, 6};
    d.inputs[0].shape = Shape::of(six, 6);
  }));
}

TEST_P(DescErrors, ParamsOfAnotherOp) {
  const OpKind op = GetParam();
  EXPECT_REJECTED(
      with(op, [&](OpDesc& d) { d.params = op == OpKind::gemm ? OpParams{Conv2dParams{}} : OpParams{GemmParams{}}; }));
  EXPECT_REJECTED(with(op, [&](OpDesc& d) {
    d.params = op == OpKind::attention ? OpParams{ChainParams{}} : OpParams{AttentionParams{}};
  }));
}

TEST_P(DescErrors, UnknownLayout) {
  EXPECT_REJECTED(with(GetParam(), [](OpDesc& d) { d.inputs[0].layout = static_cast<Layout>(7); }));
}

TEST_P(DescErrors, BadContext) {
  const OpKind op = GetParam();
  const Bound b = bind(sample_desc(op));
  Context unknown_stage;
  unknown_stage.stage = static_cast<Stage>(9);
  Context negative_threads;
  negative_threads.threads = -1;
  for (const Context& ctx : {unknown_stage, negative_threads}) {
    EXPECT_TRUE(is_error(prepare(b.desc, ctx).status(), StatusCode::invalid_argument, op));
    const KernelDef* k = naive_kernel(op);
    ASSERT_NE(k, nullptr);
    EXPECT_TRUE(is_error(prepare_kernel(b.desc, *k, ctx).status(), StatusCode::invalid_argument, op));
    EXPECT_TRUE(is_error(run(b.desc, b.in_ptrs(), b.out_ptrs(), ctx), StatusCode::invalid_argument, op));
    for (const Tensor& t : b.out) EXPECT_EQ(touched(t), 0);
  }
}

TEST_P(DescErrors, CudaWithoutFallbackIsUnsupported) {
  const OpKind op = GetParam();
  const Bound b = bind(sample_desc(op));
  for (const KernelDef& k : kernels())
    if (k.op == op && k.impl == Impl::cuda) GTEST_SKIP() << "this build has a cuda kernel for " << op_str(op);
  const Context cuda{Stage::cuda, 0, false};
  EXPECT_TRUE(is_error(prepare(b.desc, cuda).status(), StatusCode::unsupported, op));
  EXPECT_TRUE(is_error(run(b.desc, b.in_ptrs(), b.out_ptrs(), cuda), StatusCode::unsupported, op));
  for (const Tensor& t : b.out) EXPECT_EQ(touched(t), 0);
  // A bad desc is still a bad desc, whatever the context.
  const OpDesc bad = with(op, [](OpDesc& d) { d.inputs.pop_back(); });
  EXPECT_TRUE(is_error(prepare(bad, cuda).status(), StatusCode::invalid_argument, op));
}

INSTANTIATE_TEST_SUITE_P(AllOps, DescErrors, ::testing::ValuesIn(all_ops()),
                         [](const ::testing::TestParamInfo<OpKind>& i) { return op_str(i.param); });

// ---- ops with several inputs ----------------------------------------------------------------

class MultiInputErrors : public ::testing::TestWithParam<OpKind> {};

TEST_P(MultiInputErrors, MismatchedShape) {
  // Input 1 grows in its dim 1 (dim 0 when rank 1): for every sample that breaks a rule
  // (gemm: bias no longer broadcasts; conv2d: weight channels; attention: heads; ...).
  OpDesc d = sample_desc(GetParam());
  Shape& s = d.inputs[1].shape;
  s[s.rank > 1 ? 1 : 0] += 1;
  EXPECT_REJECTED(d);
}

INSTANTIATE_TEST_SUITE_P(MultiInputOps, MultiInputErrors,
                         ::testing::ValuesIn(testing::ops_where([](const OpDesc& d) { return d.inputs.size() >= 2; })),
                         [](const ::testing::TestParamInfo<OpKind>& i) { return op_str(i.param); });

TEST(DescErrorsMisc, UnknownOpKind) {
  OpDesc d{static_cast<OpKind>(kOpCount), UnaryParams{}, {td({4})}};
  EXPECT_EQ(validate(d).code(), StatusCode::invalid_argument);
  EXPECT_EQ(prepare(d).status().code(), StatusCode::invalid_argument);
  EXPECT_EQ(infer_outputs(d).status().code(), StatusCode::invalid_argument);
}

// =============================================================================================
// Generic tensor errors at execute, every op.
// =============================================================================================

class ExecErrors : public ::testing::TestWithParam<OpKind> {};

TEST_P(ExecErrors, WrongNumberOfTensors) {
  const Bound b = bind(sample_desc(GetParam()));
  auto in = b.in_ptrs(), out = b.out_ptrs();
  {
    SCOPED_TRACE("one input too few");
    auto v = in;
    v.pop_back();
    expect_execute_fails(b, v, out);
  }
  {
    SCOPED_TRACE("one input too many");
    auto v = in;
    v.push_back(in[0]);
    expect_execute_fails(b, v, out);
  }
  {
    SCOPED_TRACE("no inputs");
    expect_execute_fails(b, {}, out);
  }
  {
    SCOPED_TRACE("no outputs");
    expect_execute_fails(b, in, {});
  }
  {
    SCOPED_TRACE("one output too many");
    Tensor extra = Tensor::create(b.out[0].desc().shape, b.out[0].layout()).value();
    fill(extra, kSentinel);
    auto v = out;
    v.push_back(&extra);
    expect_execute_fails(b, in, v);
  }
}

TEST_P(ExecErrors, NullAndEmptyTensors) {
  const Bound b = bind(sample_desc(GetParam()));
  const Tensor empty;
  for (std::size_t i = 0; i < b.in.size(); ++i) {
    SCOPED_TRACE("input " + std::to_string(i));
    auto v = b.in_ptrs();
    v[i] = nullptr;
    expect_execute_fails(b, v, b.out_ptrs());
    v[i] = &empty;
    expect_execute_fails(b, v, b.out_ptrs());
  }
  for (std::size_t o = 0; o < b.out.size(); ++o) {
    SCOPED_TRACE("output " + std::to_string(o));
    auto v = b.out_ptrs();
    v[o] = nullptr;
    expect_execute_fails(b, b.in_ptrs(), v);
    v[o] = &empty;
    expect_execute_fails(b, b.in_ptrs(), v);
  }
}

TEST_P(ExecErrors, WrongInputShape) {
  const Bound b = bind(sample_desc(GetParam()));
  for (std::size_t i = 0; i < b.in.size(); ++i) {
    SCOPED_TRACE("input " + std::to_string(i));
    const Tensor t = grown(b.desc.inputs[i]);
    auto v = b.in_ptrs();
    v[i] = &t;
    expect_execute_fails(b, v, b.out_ptrs());
  }
}

TEST_P(ExecErrors, WrongOutputShape) {
  const Bound b = bind(sample_desc(GetParam()));
  for (std::size_t o = 0; o < b.out.size(); ++o) {
    SCOPED_TRACE("output " + std::to_string(o));
    const Tensor t = grown(b.out[o].desc());
    auto v = b.out_ptrs();
    v[o] = &t;
    expect_execute_fails(b, b.in_ptrs(), v);
    // Same element count, another shape: still refused.
    Shape flat;
    flat.rank = 1;
    flat[0] = b.out[o].numel();
    if (flat != b.out[o].shape()) {
      Tensor f = Tensor::create(flat).value();
      fill(f, kSentinel);
      v[o] = &f;
      expect_execute_fails(b, b.in_ptrs(), v);
    }
  }
}

TEST_P(ExecErrors, ReadOnlyOutput) {
  const Bound b = bind(sample_desc(GetParam()));
  for (std::size_t o = 0; o < b.out.size(); ++o) {
    SCOPED_TRACE("output " + std::to_string(o));
    const std::vector<float> buf(static_cast<std::size_t>(b.out[o].numel()), kSentinel);
    const Tensor ro = Tensor::view(buf.data(), b.out[o].shape(), b.out[o].layout()).value();
    ASSERT_TRUE(ro.read_only());
    auto v = b.out_ptrs();
    v[o] = &ro;
    expect_execute_fails(b, b.in_ptrs(), v);
    for (float x : buf) ASSERT_EQ(x, kSentinel);
  }
}

TEST_P(ExecErrors, OutputPartiallyOverlapsAnInput) {
  // Output 0 starts one element into the buffer of input i: never allowed, not even for ops
  // that may run in place (in place means the very same buffer and shape).
  const Bound b = bind(sample_desc(GetParam()));
  for (std::size_t i = 0; i < b.in.size(); ++i) {
    SCOPED_TRACE("input " + std::to_string(i));
    const auto n_in = static_cast<std::size_t>(b.in[i].numel()), n_out = static_cast<std::size_t>(b.out[0].numel());
    std::vector<float> buf(std::max(n_in, n_out + 1), 0.f);
    Tensor in_view = Tensor::view(buf.data(), b.in[i].shape(), b.in[i].layout()).value();
    ASSERT_TRUE(in_view.copy_from(b.in[i]));
    Tensor out_view = Tensor::view(buf.data() + 1, b.out[0].shape(), b.out[0].layout()).value();
    const std::vector<float> before = buf;
    auto in = b.in_ptrs();
    auto out = b.out_ptrs();
    in[i] = &in_view;
    out[0] = &out_view;
    auto prim = prepare(b.desc);
    ASSERT_TRUE(prim);
    EXPECT_TRUE(is_error(prim->execute(in, out), StatusCode::invalid_argument, b.desc.op));
    EXPECT_TRUE(is_error(run(b.desc, in, out), StatusCode::invalid_argument, b.desc.op));
    EXPECT_EQ(buf, before) << "a refused call wrote into the shared buffer";
    for (std::size_t o = 1; o < b.out.size(); ++o) EXPECT_EQ(touched(b.out[o]), 0);
  }
}

INSTANTIATE_TEST_SUITE_P(AllOps, ExecErrors, ::testing::ValuesIn(all_ops()),
                         [](const ::testing::TestParamInfo<OpKind>& i) { return op_str(i.param); });

// ---- suites for the ops they apply to ------------------------------------------------------

bool has_rank3_tensor(const OpDesc& d) {
  for (const TensorDesc& t : d.inputs)
    if (t.shape.rank >= 3) return true;
  return false;
}

bool an_input_is_like_the_output(const OpDesc& d) {
  const auto outs = infer_outputs(d);
  for (const TensorDesc& t : d.inputs)
    if (outs && t == (*outs)[0]) return true;
  return false;
}

class LayoutErrors : public ::testing::TestWithParam<OpKind> {};

TEST_P(LayoutErrors, WrongLayout) {
  const Bound b = bind(sample_desc(GetParam()));
  const auto other = [](Layout l) { return l == Layout::nchw ? Layout::nhwc : Layout::nchw; };
  for (std::size_t i = 0; i < b.in.size(); ++i) {
    if (b.in[i].rank() < 3) continue;  // the layout tag means nothing below rank 3
    SCOPED_TRACE("input " + std::to_string(i));
    Tensor t = Tensor::create(b.in[i].shape(), other(b.in[i].layout())).value();
    ASSERT_TRUE(t.copy_from(b.in[i]));
    auto v = b.in_ptrs();
    v[i] = &t;
    expect_execute_fails(b, v, b.out_ptrs());
  }
  for (std::size_t o = 0; o < b.out.size(); ++o) {
    if (b.out[o].rank() < 3) continue;
    SCOPED_TRACE("output " + std::to_string(o));
    Tensor t = Tensor::create(b.out[o].shape(), other(b.out[o].layout())).value();
    fill(t, kSentinel);
    auto v = b.out_ptrs();
    v[o] = &t;
    expect_execute_fails(b, b.in_ptrs(), v);
  }
}

INSTANTIATE_TEST_SUITE_P(OpsWithRank3Tensors, LayoutErrors, ::testing::ValuesIn(testing::ops_where(has_rank3_tensor)),
                         [](const ::testing::TestParamInfo<OpKind>& i) { return op_str(i.param); });

class InPlaceErrors : public ::testing::TestWithParam<OpKind> {};
class MultiOutputErrors : public ::testing::TestWithParam<OpKind> {};

TEST_P(InPlaceErrors, InPlaceOnlyWhereAllowed) {
  // For every input with the output's exact desc: if allows_inplace says yes, running with
  // output == input succeeds and gives the out-of-place result; otherwise it is refused.
  const OpDesc desc = sample_desc(GetParam());
  const Bound ref = bind(desc);
  ASSERT_TRUE(run(desc, ref.in_ptrs(), ref.out_ptrs()));
  for (std::size_t i = 0; i < desc.inputs.size(); ++i) {
    if (!(desc.inputs[i] == ref.out[0].desc())) continue;
    SCOPED_TRACE("output 0 = input " + std::to_string(i) + " ('" + input_names(desc)[i] + "')");
    const Bound b = bind(desc);
    auto out = b.out_ptrs();
    out[0] = &b.in[i];
    if (allows_inplace(desc, static_cast<int>(i), 0)) {
      const Status s = run(desc, b.in_ptrs(), out);
      ASSERT_TRUE(s) << s.to_string();
      EXPECT_EQ(values(b.in[i]), values(ref.out[0])) << "in-place result differs from out-of-place";
    } else {
      expect_execute_fails(b, b.in_ptrs(), out);
    }
  }
}

TEST_P(MultiOutputErrors, OutputsOverlapEachOther) {
  const Bound b = bind(sample_desc(GetParam()));
  auto out = b.out_ptrs();
  out[1] = out[0];
  expect_execute_fails(b, b.in_ptrs(), out);
}

INSTANTIATE_TEST_SUITE_P(OpsWithOutputShapedInputs, InPlaceErrors,
                         ::testing::ValuesIn(testing::ops_where(an_input_is_like_the_output)),
                         [](const ::testing::TestParamInfo<OpKind>& i) { return op_str(i.param); });
INSTANTIATE_TEST_SUITE_P(OpsWithTwoOutputs, MultiOutputErrors,
                         ::testing::ValuesIn(testing::ops_where([](const OpDesc& d) {
                           return output_names(d).size() >= 2;
                         })),
                         [](const ::testing::TestParamInfo<OpKind>& i) { return op_str(i.param); });

TEST(ExecErrorsMisc, EmptyPrimitive) {
  const Primitive p;
  Tensor x = Tensor::create({4}).value();
  EXPECT_EQ(p.execute({&x}, {&x}).code(), StatusCode::invalid_argument);
}

// =============================================================================================
// Sizes that only overflow after shape inference: every input is representable, the output
// (or the kernel's scratch) is not.
// =============================================================================================

constexpr std::int64_t kBig = std::int64_t{1} << 31;

TEST(SizeOverflow, GemmOutput) {
  // (2^31 x 1) * (1 x 2^31) is a 2^62-element y: 2^64 bytes.
  EXPECT_REJECTED(OpDesc{OpKind::gemm, GemmParams{}, {td({kBig, 1}), td({1, kBig})}});
}

TEST(SizeOverflow, Conv2dOutput) {
  // 2^40 output channels of a 2^20 x 2^20 map: 2^80 elements.
  const std::int64_t m = std::int64_t{1} << 20;
  EXPECT_REJECTED(OpDesc{OpKind::conv2d, Conv2dParams{}, {td({1, 1, m, m}), td({std::int64_t{1} << 40, 1, 1, 1})}});
}

TEST(SizeOverflow, BinaryOutput) {
  // (2^31, 1) against (1, 2^31) broadcasts to 2^62 elements.
  for (OpKind op : {OpKind::add, OpKind::sub, OpKind::mul, OpKind::div}) {
    SCOPED_TRACE(op_str(op));
    EXPECT_REJECTED(OpDesc{op, BinaryParams{}, {td({kBig, 1}), td({1, kBig})}});
  }
}

TEST(SizeOverflow, AttentionOutput) {
  // o is (B, H, Sq, Dv) = (1, 1, 2^31, 2^31).
  EXPECT_REJECTED(
      OpDesc{OpKind::attention, AttentionParams{}, {td({1, 1, kBig, 1}), td({1, 1, 4, 1}), td({1, 1, 4, kBig})}});
}

// inverted_residual without expansion on a (1, 1, 2^30, 2^30) map, projected to `cout`.
OpDesc big_block(std::int64_t ce, std::int64_t cout) {
  InvertedResidualParams p;
  p.has_expand = ce != 1;
  const std::int64_t m = std::int64_t{1} << 30;
  return inverted_residual_desc(td({1, 1, m, m}), ce, cout, p);
}

TEST(SizeOverflow, InvertedResidualOutput) {
  // Projecting 1 channel of 2^30 x 2^30 to 2 channels gives 2^61 elements: 2^63 bytes.
  EXPECT_REJECTED(big_block(1, 2));
}

// attention with Sq = Skv = 2^k: q, k, v are representable, the naive kernel's Sq x Skv score
// workspace is not. prepare must fail (out_of_memory: a valid problem whose scratch cannot be
// allocated), never succeed with a wrapped-around size.
OpDesc long_attention(std::int64_t s) {
  return {OpKind::attention, AttentionParams{}, {td({1, 1, s, 1}), td({1, 1, s, 1}), td({1, 1, s, 1})}};
}

TEST(SizeOverflow, AttentionScoreWorkspace) {
  // Sq = 2^31: 2^62 floats, more bytes than size_t holds; 2^32 and 2^40: the float count
  // itself wraps size_t (to 0). (A merely huge scratch, Sq = 2^20 for 4 TiB, is left out:
  // with memory overcommit its allocation can succeed.)
  for (int log2 : {31, 32, 40}) {
    SCOPED_TRACE("Sq = Skv = 2^" + std::to_string(log2));
    const OpDesc d = long_attention(std::int64_t{1} << log2);
    ASSERT_TRUE(validate(d)) << validate(d).to_string();
    auto prim = prepare(d, Context{Stage::naive, 1, false});
    EXPECT_TRUE(is_error(prim.status(), StatusCode::out_of_memory, OpKind::attention));
  }
}

TEST(SizeOverflow, InvertedResidualWorkspace) {
  // x and y have 2^60 elements each (valid); the naive kernel's expanded activations e and
  // depthwise output d have 8 * 2^60 = 2^63 floats each, which no int64 or size_t byte count
  // holds. prepare must report out_of_memory, not wrap the size around.
  const OpDesc d = big_block(8, 1);
  ASSERT_TRUE(validate(d)) << validate(d).to_string();
  auto prim = prepare(d, Context{Stage::naive, 1, false});
  EXPECT_TRUE(is_error(prim.status(), StatusCode::out_of_memory, OpKind::inverted_residual));
}

// =============================================================================================
// Per-op parameters and shapes.
// =============================================================================================

// ---- gemm ------------------------------------------------------------------------------------
// Sample: a (4,6), b (6,5), bias (5), post-ops add (4,5) then relu.

TEST(GemmErrors, Shapes) {
  const auto k = OpKind::gemm;
  EXPECT_REJECTED(with(k, [](OpDesc& d) { d.inputs[1] = td({7, 5}); }));     // K 6 vs 7
  EXPECT_REJECTED(with(k, [](OpDesc& d) { d.inputs[0] = td({1, 4, 6}); }));  // a rank 3
  EXPECT_REJECTED(with(k, [](OpDesc& d) { d.inputs[1] = td({6}); }));        // b rank 1
  EXPECT_REJECTED(with(k, [](OpDesc& d) { d.inputs[2] = td({3}); }));        // bias (3) vs (4,5)
  EXPECT_REJECTED(with(k, [](OpDesc& d) { d.inputs[2] = td({4, 5, 1}); }));  // bias of higher rank
  EXPECT_REJECTED(with(k, [](OpDesc& d) { d.inputs[3] = td({4, 6}); }));     // residual (4,6) vs (4,5)
  EXPECT_REJECTED(with(k, [](OpDesc& d) { d.inputs[3] = td({2, 4, 5}); }));
  // Transposes change which dim is K: b^T is (5,6), K 5 vs 6.
  EXPECT_REJECTED(with_params<GemmParams>(k, [](GemmParams& p) { p.trans_b = true; }));
  EXPECT_REJECTED(with_params<GemmParams>(k, [](GemmParams& p) { p.trans_a = true; }));
}

TEST(GemmErrors, Scalars) {
  const auto k = OpKind::gemm;
  EXPECT_REJECTED(with_params<GemmParams>(k, [](GemmParams& p) { p.alpha = kNaN; }));
  EXPECT_REJECTED(with_params<GemmParams>(k, [](GemmParams& p) { p.alpha = kInf; }));
  EXPECT_REJECTED(with_params<GemmParams>(k, [](GemmParams& p) { p.beta = -kInf; }));
}

TEST(GemmErrors, InputsDoNotMatchFlags) {
  // has_bias off while a bias tensor is still listed: one input too many.
  EXPECT_REJECTED(with_params<GemmParams>(OpKind::gemm, [](GemmParams& p) { p.has_bias = false; }));
  // One more post-op operand expected than given.
  EXPECT_REJECTED(with_params<GemmParams>(OpKind::gemm, [](GemmParams& p) { p.post_ops.push_back(PostOp::add()); }));
}

// gemm with a batchnorm post-op: operands 4 x (N).
OpDesc gemm_bn(float eps, std::int64_t len) {
  GemmParams p;
  p.post_ops = {PostOp::batchnorm(eps)};
  return {OpKind::gemm, p, {td({4, 6}), td({6, 5}), td({len}), td({len}), td({len}), td({len})}};
}

TEST(GemmErrors, PostOps) {
  const auto k = OpKind::gemm;
  ASSERT_TRUE(validate(gemm_bn(1e-5f, 5)));
  EXPECT_REJECTED(gemm_bn(0.f, 5));
  EXPECT_REJECTED(gemm_bn(-1e-5f, 5));
  EXPECT_REJECTED(gemm_bn(kNaN, 5));
  EXPECT_REJECTED(gemm_bn(1e-5f, 4));  // operands (4) vs N = 5
  EXPECT_REJECTED(with_params<GemmParams>(
      k, [](GemmParams& p) { p.post_ops[1] = PostOp::activation(Activation::clip(6.f, 0.f)); }));
  EXPECT_REJECTED(with_params<GemmParams>(
      k, [](GemmParams& p) { p.post_ops[1] = PostOp::activation(Activation::clip(kNaN, 1.f)); }));
  EXPECT_REJECTED(with_params<GemmParams>(
      k, [](GemmParams& p) { p.post_ops[1] = PostOp::activation(Activation::of(static_cast<ActKind>(42))); }));
  EXPECT_REJECTED(with_params<GemmParams>(
      k, [](GemmParams& p) { p.post_ops[1] = PostOp::activation(Activation::leaky_relu(kInf)); }));
  EXPECT_REJECTED(
      with_params<GemmParams>(k, [](GemmParams& p) { p.post_ops[0] = PostOp::binary_op(static_cast<BinaryKind>(9)); }));
  EXPECT_REJECTED(with_params<GemmParams>(k, [](GemmParams& p) {
    p.post_ops[1].kind = static_cast<PostOp::Kind>(7);  // unknown post-op kind
  }));
}

// ---- conv2d ----------------------------------------------------------------------------------
// Sample: x (1,4,7,7), w (6,4,3,3), stride 1, pad 1, bias (6), post-ops bn x4 (6), relu.

TEST(Conv2dErrors, Shapes) {
  const auto k = OpKind::conv2d;
  EXPECT_REJECTED(with(k, [](OpDesc& d) { d.inputs[1] = td({6, 3, 3, 3}); }));  // channels 4 vs 3
  EXPECT_REJECTED(with(k, [](OpDesc& d) { d.inputs[0] = td({4, 7, 7}); }));     // x rank 3
  EXPECT_REJECTED(with(k, [](OpDesc& d) { d.inputs[0] = td({1, 4, 1, 7, 7}); }));
  EXPECT_REJECTED(with(k, [](OpDesc& d) { d.inputs[1] = td({6, 36}); }));  // w rank 2
  EXPECT_REJECTED(with(k, [](OpDesc& d) { d.inputs[2] = td({5}); }));      // bias (5) vs K 6
  EXPECT_REJECTED(with(k, [](OpDesc& d) { d.inputs[2] = td({1, 6}); }));   // bias must be (K)
  EXPECT_REJECTED(with(k, [](OpDesc& d) { d.inputs[3] = td({5}); }));      // bn scale (5)
  EXPECT_REJECTED(with(k, [](OpDesc& d) { d.inputs[6] = td({6, 1}); }));   // bn var (6,1)
  // A 10x10 kernel does not fit the 9x9 padded input: empty output.
  EXPECT_REJECTED(with(k, [](OpDesc& d) { d.inputs[1] = td({6, 4, 10, 10}); }));
}

TEST(Conv2dErrors, Params) {
  const auto k = OpKind::conv2d;
  using P = Conv2dParams;
  EXPECT_REJECTED(with_params<P>(k, [](P& p) { p.stride_h = 0; }));
  EXPECT_REJECTED(with_params<P>(k, [](P& p) { p.stride_w = -1; }));
  EXPECT_REJECTED(with_params<P>(k, [](P& p) { p.dilation_h = 0; }));
  EXPECT_REJECTED(with_params<P>(k, [](P& p) { p.dilation_w = -2; }));
  EXPECT_REJECTED(with_params<P>(k, [](P& p) { p.pad_top = -1; }));
  EXPECT_REJECTED(with_params<P>(k, [](P& p) { p.pad_right = -1; }));
  EXPECT_REJECTED(with_params<P>(k, [](P& p) { p.stride_h = std::int64_t{1} << 40; }));
  EXPECT_REJECTED(with_params<P>(k, [](P& p) { p.pad_left = std::int64_t{1} << 40; }));
  EXPECT_REJECTED(with_params<P>(k, [](P& p) { p.dilation_h = 5; }));    // dilated 11x11 window on 9x9
  EXPECT_REJECTED(with_params<P>(k, [](P& p) { p.has_bias = false; }));  // bias still listed
  EXPECT_REJECTED(with_params<P>(k, [](P& p) { p.post_ops[0].epsilon = 0.f; }));
  EXPECT_REJECTED(with_params<P>(k, [](P& p) { p.post_ops[0].epsilon = -1.f; }));
  EXPECT_REJECTED(with_params<P>(k, [](P& p) { p.post_ops[1] = PostOp::activation(Activation::clip(1.f, -1.f)); }));
}

TEST(Conv2dErrors, Groups) {
  const auto k = OpKind::conv2d;
  using P = Conv2dParams;
  EXPECT_REJECTED(with_params<P>(k, [](P& p) { p.groups = 0; }));
  EXPECT_REJECTED(with_params<P>(k, [](P& p) { p.groups = -2; }));
  // 3 does not divide C = 4 (w's C/groups would not be an integer).
  EXPECT_REJECTED(with(k, [](OpDesc& d) {
    std::get<P>(d.params).groups = 3;
    d.inputs[1] = td({6, 1, 3, 3});
  }));
  // 4 divides C = 4 but not K = 6.
  EXPECT_REJECTED(with(k, [](OpDesc& d) {
    std::get<P>(d.params).groups = 4;
    d.inputs[1] = td({6, 1, 3, 3});
  }));
  // groups 2 is valid only with w (K, 2, R, S).
  const OpDesc g2 = with(k, [](OpDesc& d) {
    std::get<P>(d.params).groups = 2;
    d.inputs[1] = td({6, 2, 3, 3});
  });
  EXPECT_TRUE(validate(g2)) << validate(g2).to_string();
  EXPECT_REJECTED(with_params<P>(k, [](P& p) { p.groups = 2; }));  // w still (6,4,3,3)
}

// ---- conv2d's pool post-op ---------------------------------------------------------------------
// The sample's chain (bn, relu) with a max pool appended: conv output (1,6,7,7) -> y (1,6,4,4).

OpDesc conv_pool(PostOps post) {
  OpDesc d = sample_desc(OpKind::conv2d);
  std::get<Conv2dParams>(d.params).post_ops = std::move(post);
  return d;
}
const PostOp kBn = PostOp::batchnorm();
const PostOp kRelu = PostOp::activation(Activation::relu());
PostOp pool_window(std::int64_t kh, std::int64_t kw, std::int64_t sh, std::int64_t sw, std::int64_t pt, std::int64_t pl,
                   std::int64_t pb, std::int64_t pr) {
  return PostOp::maxpool(PostOp::Window{kh, kw, sh, sw, pt, pl, pb, pr});
}

// Rejected by every entry point (code, "<op>:" prefix, outputs untouched), and validate's
// message names the parameter and its value.
void expect_rejected_saying(const OpDesc& bad, const std::string& words) {
  expect_rejected(bad);
  const Status s = validate(bad);
  EXPECT_NE(s.message().find(words), std::string::npos) << "message: " << s.message() << "\nexpected: " << words;
}
#define EXPECT_REJECTED_SAYING(desc, words) \
  do {                                      \
    SCOPED_TRACE(#desc);                    \
    expect_rejected_saying(desc, words);    \
  } while (0)

TEST(Conv2dPoolPostOp, ValidChainPoolsTheOutput) {
  const OpDesc d = conv_pool({kBn, kRelu, PostOp::maxpool(3, 2, 1)});
  ASSERT_TRUE(validate(d)) << validate(d).to_string();
  auto outs = infer_outputs(d);
  ASSERT_TRUE(outs);
  EXPECT_EQ((*outs)[0].shape, (Shape{1, 6, 4, 4}));                     // (7 + 2 - 3) / 2 + 1
  EXPECT_EQ(input_names(d), input_names(sample_desc(OpKind::conv2d)));  // a pool takes no operand
  EXPECT_EQ(post_op_operands(PostOp::maxpool(3, 2, 1)), 0);
  EXPECT_EQ(case_name(d), "n1_c4_h7_w7_k6_r3_s1_p1+bias+bn+relu+maxpool3s2p1");
  EXPECT_EQ(case_name(conv_pool({kBn, kRelu, pool_window(3, 2, 2, 1, 1, 0, 0, 1)})),
            "n1_c4_h7_w7_k6_r3_s1_p1+bias+bn+relu+maxpool3x2s2x1p1_0_0_1");
  // Every stage runs it (falling back where a kernel declines) and writes every output.
  for (Stage st : {Stage::naive, Stage::simd, Stage::fused}) {
    const Bound b = bind(d);
    auto prim = prepare(b.desc, Context{st, 1, true});
    ASSERT_TRUE(prim) << prim.status().to_string();
    ASSERT_TRUE(prim->execute(b.in_ptrs(), b.out_ptrs()));
    EXPECT_EQ(touched(b.out[0]), 16 * 6);
  }
  // The flops include the conv's and the pool's.
  const OpCost with = op_cost(d), without = op_cost(conv_pool({kBn, kRelu}));
  EXPECT_EQ(with.flops, without.flops + 6 * 16 * 9);
  EXPECT_LT(with.bytes, without.bytes);  // y is 4x smaller
}

TEST(Conv2dPoolPostOp, PoolMustBeLast) {
  EXPECT_REJECTED_SAYING(conv_pool({kBn, PostOp::maxpool(3, 2, 1), kRelu}),
                         "post-op 1 is a pool but not the last of the 3 post-ops");
  EXPECT_REJECTED_SAYING(conv_pool({kBn, kRelu, PostOp::maxpool(2, 1, 0), PostOp::maxpool(3, 2, 1)}),
                         "post-op 2 is a pool but not the last of the 4 post-ops");
}

TEST(Conv2dPoolPostOp, Window) {
  EXPECT_REJECTED_SAYING(conv_pool({kBn, kRelu, PostOp::maxpool(0, 2, 0)}), "post-op 2 pool kernel_h 0 must be >= 1");
  EXPECT_REJECTED_SAYING(conv_pool({kBn, kRelu, pool_window(3, -1, 2, 2, 1, 0, 1, 0)}),
                         "post-op 2 pool kernel_w -1 must be >= 1");
  EXPECT_REJECTED_SAYING(conv_pool({kBn, kRelu, PostOp::maxpool(3, 0, 1)}), "post-op 2 pool stride_h 0 must be >= 1");
  EXPECT_REJECTED_SAYING(conv_pool({kBn, kRelu, pool_window(3, 3, 2, -2, 1, 1, 1, 1)}),
                         "post-op 2 pool stride_w -2 must be >= 1");
  EXPECT_REJECTED_SAYING(conv_pool({kBn, kRelu, pool_window(3, 3, 2, 2, -1, 1, 1, 1)}),
                         "post-op 2 pool padding along h (-1, 1) must be >= 0");
  // Padding >= kernel, and padding over half the window (a window could miss the conv output).
  EXPECT_REJECTED_SAYING(conv_pool({kBn, kRelu, PostOp::maxpool(2, 2, 2)}),
                         "post-op 2 pool padding (top 2, left 2, bottom 2, right 2) exceeds half the 2x2 window");
  EXPECT_REJECTED_SAYING(conv_pool({kBn, kRelu, pool_window(3, 3, 2, 2, 1, 2, 1, 1)}),
                         "post-op 2 pool padding (top 1, left 2, bottom 1, right 1) exceeds half the 3x3 window");
  // The 9x9 window does not fit the 7x7 conv output.
  EXPECT_REJECTED_SAYING(conv_pool({kBn, kRelu, PostOp::maxpool(9, 1, 0)}),
                         "post-op 2 pool output size 0x0 is empty: the 9x9 window does not fit the padded 7x7 conv "
                         "output");
  EXPECT_REJECTED_SAYING(conv_pool({kBn, kRelu, PostOp::maxpool(std::int64_t{1} << 30, 1, 0)}),
                         "post-op 2 pool window parameters along h exceed 16777216");
}

TEST(Conv2dPoolPostOp, GemmRejectsPool) {
  EXPECT_REJECTED_SAYING(
      with_params<GemmParams>(OpKind::gemm, [](GemmParams& p) { p.post_ops.push_back(PostOp::maxpool(2, 2, 0)); }),
      "post-op 2 is a pool, which only conv2d takes");
  EXPECT_REJECTED_SAYING(
      with_params<GemmParams>(
          OpKind::gemm, [](GemmParams& p) { p.post_ops.insert(p.post_ops.begin() + 1, PostOp::maxpool(1, 1, 0)); }),
      "post-op 1 is a pool, which only conv2d takes");
}

TEST(Conv2dPoolPostOp, OperandsBeforeThePoolHaveTheConvOutputShape) {
  // A residual add before the pool takes the pre-pool (1,6,7,7); the pooled (1,6,4,4) is wrong.
  OpDesc good = conv_pool({kBn, PostOp::add(), kRelu, PostOp::maxpool(3, 2, 1)});
  good.inputs.push_back(td({1, 6, 7, 7}));
  EXPECT_TRUE(validate(good)) << validate(good).to_string();
  OpDesc bad = good;
  bad.inputs.back() = td({1, 6, 4, 4});
  EXPECT_REJECTED_SAYING(bad,
                         "input 'post1.add' has shape 1x6x4x4 which does not broadcast to the output shape 1x6x7x7");
}

TEST(Conv2dPoolPostOp, ExecuteChecksThePooledOutputShape) {
  // y with the conv's own shape (1,6,7,7) instead of the pooled (1,6,4,4): refused, nothing written.
  const Bound b = bind(conv_pool({kBn, kRelu, PostOp::maxpool(3, 2, 1)}));
  Tensor wrong = Tensor::create(Shape{1, 6, 7, 7}).value();
  fill(wrong, kSentinel);
  expect_execute_fails(b, b.in_ptrs(), {&wrong});
}

// ---- batchnorm -------------------------------------------------------------------------------
// Sample: x (2,3,4,5), scale/bias/mean/var (3).

TEST(BatchnormErrors, Shapes) {
  const auto k = OpKind::batchnorm;
  for (std::size_t i = 1; i < 5; ++i) {
    SCOPED_TRACE("operand " + std::to_string(i));
    EXPECT_REJECTED(with(k, [&](OpDesc& d) { d.inputs[i] = td({4}); }));
    EXPECT_REJECTED(with(k, [&](OpDesc& d) { d.inputs[i] = td({1, 3}); }));
  }
  EXPECT_REJECTED(with(k, [](OpDesc& d) { d.inputs[0] = td({3}); }));  // no channel dim
}

TEST(BatchnormErrors, Epsilon) {
  for (float eps : {0.f, -1e-5f, kNaN, kInf, -kInf}) {
    SCOPED_TRACE("eps " + std::to_string(eps));
    EXPECT_REJECTED(with_params<BatchnormParams>(OpKind::batchnorm, [&](BatchnormParams& p) { p.epsilon = eps; }));
  }
}

// ---- unary -----------------------------------------------------------------------------------

class UnaryErrors : public ::testing::TestWithParam<OpKind> {};

bool act_fits(OpKind op, ActKind a) {
  switch (op) {
    case OpKind::relu: return a == ActKind::relu;
    case OpKind::clip: return a == ActKind::clip;
    case OpKind::leaky_relu: return a == ActKind::leaky_relu;
    case OpKind::sigmoid: return a == ActKind::sigmoid;
    case OpKind::tanh: return a == ActKind::tanh;
    case OpKind::gelu: return a == ActKind::gelu_erf || a == ActKind::gelu_tanh;
    case OpKind::silu: return a == ActKind::silu;
    case OpKind::hardswish: return a == ActKind::hardswish;
    default: return false;
  }
}

TEST_P(UnaryErrors, ActivationKindMustMatchTheOp) {
  const OpKind op = GetParam();
  for (int a = 0; a <= static_cast<int>(ActKind::linear); ++a) {
    const auto kind = static_cast<ActKind>(a);
    SCOPED_TRACE(std::string(act_name(kind)));
    // Parameters that are valid for the activation itself (clip 0..6, slope 0.1).
    const Activation act{kind, kind == ActKind::leaky_relu ? 0.1f : 0.f, kind == ActKind::clip ? 6.f : 0.f};
    const OpDesc d = with_params<UnaryParams>(op, [&](UnaryParams& p) { p.act = act; });
    if (act_fits(op, kind)) {
      EXPECT_TRUE(validate(d)) << validate(d).to_string();
    } else {
      EXPECT_REJECTED(d);
    }
  }
  EXPECT_REJECTED(
      with_params<UnaryParams>(op, [](UnaryParams& p) { p.act = Activation::of(static_cast<ActKind>(42)); }));
}

INSTANTIATE_TEST_SUITE_P(UnaryOps, UnaryErrors,
                         ::testing::Values(OpKind::relu, OpKind::clip, OpKind::leaky_relu, OpKind::sigmoid,
                                           OpKind::tanh, OpKind::gelu, OpKind::silu, OpKind::hardswish),
                         [](const ::testing::TestParamInfo<OpKind>& i) { return op_str(i.param); });

TEST(ClipErrors, Bounds) {
  using P = UnaryParams;
  EXPECT_REJECTED(with_params<P>(OpKind::clip, [](P& p) { p.act = Activation::clip(6.f, 0.f); }));
  EXPECT_REJECTED(with_params<P>(OpKind::clip, [](P& p) { p.act = Activation::clip(0.f, kNaN); }));
  EXPECT_REJECTED(with_params<P>(OpKind::clip, [](P& p) { p.act = Activation::clip(kNaN, 6.f); }));
  // min == max is a constant, and infinite bounds are one-sided clips: both valid.
  EXPECT_TRUE(validate(with_params<P>(OpKind::clip, [](P& p) { p.act = Activation::clip(2.f, 2.f); })));
  EXPECT_TRUE(validate(with_params<P>(OpKind::clip, [](P& p) { p.act = Activation::clip(-kInf, 1.f); })));
}

TEST(LeakyReluErrors, Slope) {
  using P = UnaryParams;
  EXPECT_REJECTED(with_params<P>(OpKind::leaky_relu, [](P& p) { p.act = Activation::leaky_relu(kNaN); }));
  EXPECT_REJECTED(with_params<P>(OpKind::leaky_relu, [](P& p) { p.act = Activation::leaky_relu(-kInf); }));
}

// ---- binary ----------------------------------------------------------------------------------

class BinaryErrors : public ::testing::TestWithParam<OpKind> {};

TEST_P(BinaryErrors, ShapesMustBroadcast) {
  const OpKind op = GetParam();
  EXPECT_REJECTED(with(op, [](OpDesc& d) { d.inputs[1] = td({2, 3, 4, 6}); }));
  EXPECT_REJECTED(with(op, [](OpDesc& d) { d.inputs[1] = td({7}); }));
  EXPECT_REJECTED(with(op, [](OpDesc& d) { d.inputs[0] = td({3, 2, 5}); }));        // 2 vs 4 in dim -2
  EXPECT_REJECTED(with(op, [](OpDesc& d) { d.inputs[1] = td({2, 3, 3, 4, 5}); }));  // 2 vs 3 in dim -4
  // Broadcasting both ways is fine; then the output has the broadcast shape, and an output
  // with a's shape is refused at execute.
  const OpDesc ok = with(op, [](OpDesc& d) {
    d.inputs[0] = td({2, 1, 4, 5});
    d.inputs[1] = td({3, 1, 1});
  });
  const auto outs = infer_outputs(ok);
  ASSERT_TRUE(outs) << outs.status().to_string();
  EXPECT_EQ((*outs)[0].shape, (Shape{2, 3, 4, 5}));
  const Bound b = bind(ok);
  Tensor wrong = Tensor::create({2, 1, 4, 5}).value();
  fill(wrong, kSentinel);
  expect_execute_fails(b, b.in_ptrs(), {&wrong});
}

INSTANTIATE_TEST_SUITE_P(BinaryOps, BinaryErrors, ::testing::Values(OpKind::add, OpKind::sub, OpKind::mul, OpKind::div),
                         [](const ::testing::TestParamInfo<OpKind>& i) { return op_str(i.param); });

// ---- pooling ---------------------------------------------------------------------------------
// Sample: x (1,3,8,8), kernel 3, stride 2, pad 1.

class PoolErrors : public ::testing::TestWithParam<OpKind> {};

TEST_P(PoolErrors, Window) {
  const OpKind op = GetParam();
  using P = Pool2dParams;
  EXPECT_REJECTED(with_params<P>(op, [](P& p) { p.kernel_h = 0; }));
  EXPECT_REJECTED(with_params<P>(op, [](P& p) { p.kernel_w = -3; }));
  EXPECT_REJECTED(with_params<P>(op, [](P& p) { p.stride_h = 0; }));
  EXPECT_REJECTED(with_params<P>(op, [](P& p) { p.stride_w = -1; }));
  EXPECT_REJECTED(with_params<P>(op, [](P& p) { p.pad_top = -1; }));
  EXPECT_REJECTED(with_params<P>(op, [](P& p) { p.pad_left = -1; }));
  EXPECT_REJECTED(with_params<P>(op, [](P& p) { p.dilation_h = 0; }));
  EXPECT_REJECTED(with_params<P>(op, [](P& p) { p.kernel_h = std::int64_t{1} << 40; }));
  // A window larger than the padded input leaves no output.
  EXPECT_REJECTED(with_params<P>(op, [](P& p) {
    p.kernel_h = p.kernel_w = 11;
    p.pad_top = p.pad_left = p.pad_bottom = p.pad_right = 1;
  }));
}

TEST_P(PoolErrors, PadAtMostHalfTheWindow) {
  const OpKind op = GetParam();
  using P = Pool2dParams;
  EXPECT_REJECTED(with_params<P>(op, [](P& p) { p.pad_top = p.pad_left = p.pad_bottom = p.pad_right = 2; }));
  EXPECT_REJECTED(with_params<P>(op, [](P& p) { p.pad_bottom = 2; }));
  EXPECT_REJECTED(with_params<P>(op, [](P& p) { p.pad_right = 2; }));
  EXPECT_REJECTED(with_params<P>(op, [](P& p) {
    p.kernel_h = p.kernel_w = 2;
    p.pad_top = 2;
  }));
  // pad == half the window is the largest allowed (k 3, pad 1 is the sample; k 5, pad 2).
  EXPECT_TRUE(validate(with_params<P>(op, [](P& p) {
    p.kernel_h = p.kernel_w = 5;
    p.pad_top = p.pad_left = p.pad_bottom = p.pad_right = 2;
  })));
}

TEST_P(PoolErrors, Rank) {
  const OpKind op = GetParam();
  EXPECT_REJECTED(with(op, [](OpDesc& d) { d.inputs[0] = td({3, 8, 8}); }));
  EXPECT_REJECTED(with(op, [](OpDesc& d) { d.inputs[0] = td({1, 3, 1, 8, 8}); }));
}

INSTANTIATE_TEST_SUITE_P(Pools, PoolErrors, ::testing::Values(OpKind::maxpool2d, OpKind::avgpool2d),
                         [](const ::testing::TestParamInfo<OpKind>& i) { return op_str(i.param); });

TEST(AvgPoolErrors, NoDilation) {
  using P = Pool2dParams;
  EXPECT_REJECTED(with_params<P>(OpKind::avgpool2d, [](P& p) { p.dilation_h = 2; }));
  EXPECT_REJECTED(with_params<P>(OpKind::avgpool2d, [](P& p) { p.dilation_w = 2; }));
  EXPECT_TRUE(validate(with_params<P>(OpKind::maxpool2d, [](P& p) { p.dilation_h = p.dilation_w = 2; })));
}

TEST(GlobalAvgPoolErrors, Rank) {
  const auto k = OpKind::global_avgpool;
  EXPECT_REJECTED(with(k, [](OpDesc& d) { d.inputs[0] = td({2, 3, 25}); }));
  EXPECT_REJECTED(with(k, [](OpDesc& d) { d.inputs[0] = td({2, 3}); }));
  EXPECT_REJECTED(with(k, [](OpDesc& d) { d.inputs[0] = td({2, 3, 1, 5, 5}); }));
}

// ---- softmax ---------------------------------------------------------------------------------
// Sample: x (2,3,7), mask (1,3,7).

TEST(SoftmaxErrors, Axis) {
  using P = SoftmaxParams;
  for (int axis : {3, 4, -4, -100, std::numeric_limits<int>::max(), std::numeric_limits<int>::min()}) {
    SCOPED_TRACE("axis " + std::to_string(axis));
    EXPECT_REJECTED(with_params<P>(OpKind::softmax, [&](P& p) { p.axis = axis; }));
  }
  for (int axis : {0, 1, 2, -1, -2, -3})
    EXPECT_TRUE(validate(with_params<P>(OpKind::softmax, [&](P& p) { p.axis = axis; }))) << axis;
}

TEST(SoftmaxErrors, MaskAndScale) {
  using P = SoftmaxParams;
  const auto k = OpKind::softmax;
  EXPECT_REJECTED(with(k, [](OpDesc& d) { d.inputs[1] = td({1, 3, 8}); }));
  EXPECT_REJECTED(with(k, [](OpDesc& d) { d.inputs[1] = td({2, 2, 3, 7}); }));  // more dims than x
  EXPECT_REJECTED(with(k, [](OpDesc& d) { d.inputs[1] = td({3, 3, 7}); }));     // 3 vs batch 2
  EXPECT_REJECTED(with_params<P>(k, [](P& p) { p.has_mask = false; }));         // mask still listed
  EXPECT_REJECTED(with_params<P>(k, [](P& p) { p.scale = kNaN; }));
  EXPECT_REJECTED(with_params<P>(k, [](P& p) { p.scale = kInf; }));
}

// ---- layernorm / rmsnorm ---------------------------------------------------------------------
// Samples: layernorm x (3,8), scale (8), bias (8), residual (3,8), write_sum;
//          rmsnorm x (3,8), scale (8), residual (3,8).

class NormErrors : public ::testing::TestWithParam<OpKind> {};

TEST_P(NormErrors, Axis) {
  const OpKind op = GetParam();
  for (int axis : {2, 3, -3, std::numeric_limits<int>::min()}) {
    SCOPED_TRACE("axis " + std::to_string(axis));
    EXPECT_REJECTED(with_params<NormParams>(op, [&](NormParams& p) { p.axis = axis; }));
  }
  // axis 0 normalizes over (3, 8): a scale of shape (8) no longer fits.
  EXPECT_REJECTED(with_params<NormParams>(op, [](NormParams& p) { p.axis = 0; }));
}

TEST_P(NormErrors, Shapes) {
  const OpKind op = GetParam();
  const std::size_t residual = op == OpKind::layernorm ? 3 : 2;
  EXPECT_REJECTED(with(op, [](OpDesc& d) { d.inputs[1] = td({9}); }));     // scale
  EXPECT_REJECTED(with(op, [](OpDesc& d) { d.inputs[1] = td({1, 8}); }));  // scale must be exactly (8)
  EXPECT_REJECTED(with(op, [&](OpDesc& d) { d.inputs[residual] = td({3, 9}); }));
  EXPECT_REJECTED(with(op, [&](OpDesc& d) { d.inputs[residual] = td({1, 8}); }));  // no broadcasting
  if (op == OpKind::layernorm) {
    EXPECT_REJECTED(with(op, [](OpDesc& d) { d.inputs[2] = td({7}); }));  // bias
  }
}

TEST_P(NormErrors, Epsilon) {
  for (float eps : {0.f, -1e-6f, kNaN, kInf}) {
    SCOPED_TRACE("eps " + std::to_string(eps));
    EXPECT_REJECTED(with_params<NormParams>(GetParam(), [&](NormParams& p) { p.epsilon = eps; }));
  }
}

TEST_P(NormErrors, FlagsAndInputs) {
  const OpKind op = GetParam();
  // write_sum without a residual: no sum to write (inputs adjusted so only that rule fails).
  EXPECT_REJECTED(with(op, [](OpDesc& d) {
    auto& p = std::get<NormParams>(d.params);
    p.has_residual = false;
    p.write_sum = true;
    d.inputs.pop_back();
  }));
  // has_residual off while the residual is still listed.
  EXPECT_REJECTED(with_params<NormParams>(op, [](NormParams& p) {
    p.has_residual = false;
    p.write_sum = false;
  }));
}

INSTANTIATE_TEST_SUITE_P(Norms, NormErrors, ::testing::Values(OpKind::layernorm, OpKind::rmsnorm),
                         [](const ::testing::TestParamInfo<OpKind>& i) { return op_str(i.param); });

TEST(LayernormErrors, BiasFlag) {
  // has_bias off while the bias is listed: the residual lands where nothing is expected.
  EXPECT_REJECTED(with_params<NormParams>(OpKind::layernorm, [](NormParams& p) { p.has_bias = false; }));
}

// ---- attention -------------------------------------------------------------------------------
// Sample: q (1,2,5,4), k (1,2,6,4), v (1,2,6,3), mask (1,1,5,6).

TEST(AttentionErrors, Shapes) {
  const auto k = OpKind::attention;
  EXPECT_REJECTED(with(k, [](OpDesc& d) { d.inputs[0] = td({2, 5, 4}); }));        // q rank 3
  EXPECT_REJECTED(with(k, [](OpDesc& d) { d.inputs[1] = td({1, 1, 2, 6, 4}); }));  // k rank 5
  EXPECT_REJECTED(with(k, [](OpDesc& d) { d.inputs[1] = td({2, 2, 6, 4}); }));     // batch
  EXPECT_REJECTED(with(k, [](OpDesc& d) { d.inputs[2] = td({1, 3, 6, 3}); }));     // heads
  EXPECT_REJECTED(with(k, [](OpDesc& d) { d.inputs[1] = td({1, 2, 6, 5}); }));     // head size D
  EXPECT_REJECTED(with(k, [](OpDesc& d) { d.inputs[2] = td({1, 2, 7, 3}); }));     // v length vs k
  EXPECT_REJECTED(with(k, [](OpDesc& d) { d.inputs[3] = td({1, 1, 5, 7}); }));     // mask Skv
  EXPECT_REJECTED(with(k, [](OpDesc& d) { d.inputs[3] = td({1, 1, 6, 6}); }));     // mask Sq
  EXPECT_REJECTED(with(k, [](OpDesc& d) { d.inputs[3] = td({2, 1, 5, 6}); }));     // mask batch 2 vs 1
}

TEST(AttentionErrors, Params) {
  using P = AttentionParams;
  const auto k = OpKind::attention;
  EXPECT_REJECTED(with_params<P>(k, [](P& p) { p.scale = kNaN; }));
  EXPECT_REJECTED(with_params<P>(k, [](P& p) { p.scale = -kInf; }));
  EXPECT_REJECTED(with_params<P>(k, [](P& p) { p.has_mask = false; }));  // mask still listed
}

// ---- inverted_residual -----------------------------------------------------------------------
// Sample: x (1,4,6,6), w_expand (8,4,1,1), bn1 (8) x4, w_dw (8,1,3,3), bn2 (8) x4,
//         w_project (4,8,1,1), bn3 (4) x4, stride 1, residual.

TEST(InvertedResidualErrors, StrideAndResidual) {
  using P = InvertedResidualParams;
  const auto k = OpKind::inverted_residual;
  for (std::int64_t s : {0, -1, 3, 4}) {
    SCOPED_TRACE("stride " + std::to_string(s));
    EXPECT_REJECTED(with_params<P>(k, [&](P& p) {
      p.stride = s;
      p.residual = false;
    }));
  }
  EXPECT_REJECTED(with_params<P>(k, [](P& p) { p.stride = 2; }));  // residual with stride 2
  EXPECT_TRUE(validate(with_params<P>(k, [](P& p) {
    p.stride = 2;
    p.residual = false;
  })));
  // Residual with Cout 6 != Cin 4.
  EXPECT_REJECTED(with(k, [](OpDesc& d) {
    d.inputs[11] = td({6, 8, 1, 1});
    for (std::size_t i = 12; i < 16; ++i) d.inputs[i] = td({6});
  }));
}

TEST(InvertedResidualErrors, Shapes) {
  const auto k = OpKind::inverted_residual;
  EXPECT_REJECTED(with(k, [](OpDesc& d) { d.inputs[0] = td({4, 6, 6}); }));      // x rank 3
  EXPECT_REJECTED(with(k, [](OpDesc& d) { d.inputs[1] = td({8, 5, 1, 1}); }));   // w_expand Cin
  EXPECT_REJECTED(with(k, [](OpDesc& d) { d.inputs[1] = td({8, 4, 3, 3}); }));   // w_expand not 1x1
  EXPECT_REJECTED(with(k, [](OpDesc& d) { d.inputs[1] = td({9, 4, 1, 1}); }));   // Ce 9 vs w_dw 8
  EXPECT_REJECTED(with(k, [](OpDesc& d) { d.inputs[6] = td({8, 1, 5, 5}); }));   // w_dw not 3x3
  EXPECT_REJECTED(with(k, [](OpDesc& d) { d.inputs[6] = td({8, 2, 3, 3}); }));   // w_dw not depthwise
  EXPECT_REJECTED(with(k, [](OpDesc& d) { d.inputs[11] = td({4, 7, 1, 1}); }));  // w_project Ce
  EXPECT_REJECTED(with(k, [](OpDesc& d) { d.inputs[11] = td({4, 8, 3, 3}); }));  // w_project not 1x1
  for (std::size_t i : {2u, 5u, 7u, 10u, 12u, 15u}) {
    SCOPED_TRACE("bn operand " + std::to_string(i));
    EXPECT_REJECTED(with(k, [&](OpDesc& d) { d.inputs[i] = td({d.inputs[i].shape[0] + 1}); }));
  }
}

TEST(InvertedResidualErrors, NoExpansion) {
  using P = InvertedResidualParams;
  // has_expand off: w_dw must have Cin channels.
  auto no_expand = [](std::int64_t ce) {
    P p;
    p.has_expand = false;
    return inverted_residual_desc(td({1, 4, 6, 6}), ce, 4, p);
  };
  EXPECT_TRUE(validate(no_expand(4))) << validate(no_expand(4)).to_string();
  EXPECT_REJECTED(no_expand(8));
  // The sample's expand inputs with has_expand off: too many inputs.
  EXPECT_REJECTED(with_params<P>(OpKind::inverted_residual, [](P& p) { p.has_expand = false; }));
}

TEST(InvertedResidualErrors, Epsilon) {
  using P = InvertedResidualParams;
  for (float eps : {0.f, -1.f, kNaN}) {
    SCOPED_TRACE("eps " + std::to_string(eps));
    EXPECT_REJECTED(with_params<P>(OpKind::inverted_residual, [&](P& p) { p.epsilon = eps; }));
  }
}

// ---- eltwise_chain ---------------------------------------------------------------------------
// Sample: x (2,3,4); steps add (2,3,4), relu, mul (1,1,4), sigmoid.

TEST(EltwiseChainErrors, Operands) {
  const auto k = OpKind::eltwise_chain;
  EXPECT_REJECTED(with(k, [](OpDesc& d) { d.inputs[1] = td({2, 3, 5}); }));
  EXPECT_REJECTED(with(k, [](OpDesc& d) { d.inputs[2] = td({1, 1, 1, 4}); }));  // more dims than x
  EXPECT_REJECTED(with(k, [](OpDesc& d) { d.inputs[2] = td({2, 1, 3, 4}); }));
  // Operands broadcast to x only, never x to the operand.
  EXPECT_REJECTED(with(k, [](OpDesc& d) {
    d.inputs[0] = td({1, 3, 4});
    d.inputs[1] = td({2, 3, 4});
  }));
}

TEST(EltwiseChainErrors, Steps) {
  const auto k = OpKind::eltwise_chain;
  using P = ChainParams;
  EXPECT_REJECTED(with_params<P>(k, [](P& p) { p.steps[1] = ChainStep::unary_step(Activation::clip(1.f, 0.f)); }));
  EXPECT_REJECTED(
      with_params<P>(k, [](P& p) { p.steps[3] = ChainStep::unary_step(Activation::of(static_cast<ActKind>(42))); }));
  EXPECT_REJECTED(with_params<P>(k, [](P& p) { p.steps[0].binary = static_cast<BinaryKind>(9); }));
  EXPECT_REJECTED(with_params<P>(k, [](P& p) { p.steps[1].kind = static_cast<ChainStep::Kind>(5); }));
  // A binary step removed while its operand stays: one input too many.
  EXPECT_REJECTED(with_params<P>(k, [](P& p) { p.steps.erase(p.steps.begin()); }));
  // A binary step added without its operand.
  EXPECT_REJECTED(with_params<P>(k, [](P& p) { p.steps.push_back(ChainStep::binary_step(BinaryKind::sub)); }));
}

}  // namespace
}  // namespace opfuse
