// tests/test_host_ops.cpp - the runtime's host ops: each op on small cases whose expected values
// are worked out by hand from the ONNX operator definitions (opset 13-18), the edges of each
// op's contract (negative axes and steps, -1 and 0 in reshape, broadcasting against size-1 dims
// and scalars, clamped slices, ceil-mode pooling, ...) and its error paths, whose messages must
// name the node.
//
// Every case goes through eval(): infer() on the input infos (constants carry their payload,
// D() inputs do not), outputs sized from what infer() derived, then run(), which must not touch
// the heap (a successful run is checked to make no allocation). f32 results go
// through the check engine's one comparator; data movement compares exactly (tolerance 0),
// compute uses the tolerance each test states.
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <map>
#include <new>
#include <optional>
#include <string>
#include <vector>

#include "src/check/check.hpp"
#include "src/runtime/host_ops.hpp"

#include "alloc_counter.hpp"

namespace opfuse::runtime {
namespace {

using graph::Attr;
using graph::DType;
using graph::Node;
using graph::NodeOp;
using I64s = std::vector<std::int64_t>;
using F32s = std::vector<float>;

constexpr std::int64_t kI64Max = std::numeric_limits<std::int64_t>::max();
constexpr std::int64_t kI64Min = std::numeric_limits<std::int64_t>::min();
const float kNan = std::numeric_limits<float>::quiet_NaN();
constexpr const char* kNode = "Node_7";  // every test node's name

// ---- tensors and calls -------------------------------------------------------------------------

// A tensor that owns its elements: f for f32, i for i64 and boolean.
struct Tensor {
  DType dtype = DType::f32;
  I64s dims;
  F32s f;
  I64s i;

  HostTensor view() {
    return {dtype, dims, dtype == DType::f32 ? static_cast<void*>(f.data()) : static_cast<void*>(i.data())};
  }
};

Tensor F(I64s dims, F32s v) { return {DType::f32, std::move(dims), std::move(v), {}}; }
Tensor I(I64s dims, I64s v) { return {DType::i64, std::move(dims), {}, std::move(v)}; }
Tensor B(I64s dims, I64s v) { return {DType::boolean, std::move(dims), {}, std::move(v)}; }
// 0, 1, 2, ... in the given dims.
Tensor Ramp(I64s dims, float first = 0.f) {
  std::int64_t n = 1;
  for (std::int64_t d : dims) n *= d;
  F32s v(static_cast<std::size_t>(n));
  for (std::size_t k = 0; k < v.size(); ++k) v[k] = first + static_cast<float>(k);
  return F(std::move(dims), std::move(v));
}

// An input as a test passes it: a constant (infer() sees its payload), a run-time value, or omitted.
struct Arg {
  std::optional<Tensor> t;
  bool constant = true;
};
Arg C(Tensor t) { return {std::move(t), true}; }
Arg D(Tensor t) { return {std::move(t), false}; }
Arg None() { return {}; }

using Attrs = std::map<std::string, Attr>;

Node make_node(NodeOp op, const Attrs& attrs, const std::vector<Arg>& in, int n_out) {
  Node node;
  node.id = 7;
  node.name = kNode;
  node.op = op;
  node.attrs = attrs;
  for (std::size_t k = 0; k < in.size(); ++k) node.inputs.push_back(in[k].t ? static_cast<int>(k) : -1);
  for (int k = 0; k < n_out; ++k) node.outputs.push_back(100 + k);
  return node;
}

struct Eval {
  Status status;                 // the first error, of infer() or run()
  bool failed_in_infer = false;  // which one gave it
  std::vector<Tensor> out;
};

// infer(), then run() on outputs sized from infer().
Eval eval(NodeOp op, const Attrs& attrs, std::vector<Arg> in, int n_out = 1) {
  const Node node = make_node(op, attrs, in, n_out);
  std::vector<TensorInfo> infos(in.size());
  std::vector<HostTensor> views(in.size());
  std::vector<const TensorInfo*> info_ptrs(in.size(), nullptr);
  std::vector<const HostTensor*> const_ptrs(in.size(), nullptr);
  for (std::size_t k = 0; k < in.size(); ++k) {
    if (!in[k].t) continue;
    infos[k] = {in[k].t->dtype, in[k].t->dims};
    views[k] = in[k].t->view();
    info_ptrs[k] = &infos[k];
    if (in[k].constant) const_ptrs[k] = &views[k];
  }
  Eval e;
  std::vector<TensorInfo> out_infos;
  e.status = infer(node, info_ptrs, const_ptrs, out_infos);
  if (!e.status) {
    e.failed_in_infer = true;
    return e;
  }
  EXPECT_EQ(out_infos.size(), static_cast<std::size_t>(n_out));
  std::vector<HostTensor> out_views;
  for (const TensorInfo& info : out_infos) {
    Tensor t{info.dtype, info.dims, {}, {}};
    const auto n = static_cast<std::size_t>(info.numel());
    if (info.dtype == DType::f32) {
      t.f.assign(n, -777.f);  // poison: every element must be written
    } else {
      t.i.assign(n, -777);
    }
    e.out.push_back(std::move(t));
  }
  for (Tensor& t : e.out) out_views.push_back(t.view());
  const long before = opfuse::testing::allocations();
  e.status = run(node, views, out_views);
  const long allocations = opfuse::testing::allocations() - before;
  if (e.status) {
    EXPECT_EQ(allocations, 0) << "run() allocated; it must not (" << graph::name(op) << ")";
  }
  return e;
}

// ---- expectations --------------------------------------------------------------------------------

// Through the check engine's comparator; tolerance 0 is an exact match (NaN matching NaN).
void expect_f32(const Eval& e, std::size_t k, const I64s& dims, const F32s& want, check::Tolerance tol = {0, 0}) {
  ASSERT_TRUE(e.status.is_ok()) << e.status.to_string();
  ASSERT_LT(k, e.out.size());
  const Tensor& t = e.out[k];
  EXPECT_EQ(t.dtype, DType::f32);
  EXPECT_EQ(t.dims, dims);
  ASSERT_EQ(t.f.size(), want.size());
  const check::CompareResult r = check::compare(t.f, want, tol);
  EXPECT_TRUE(r.ok) << r.reason << "; worst at " << r.worst.index << ": " << r.worst.out << " vs " << r.worst.ref;
}

// For results that are all zero (the comparator rejects an all-zero reference as degenerate).
void expect_f32_exact(const Eval& e, std::size_t k, const I64s& dims, const F32s& want) {
  ASSERT_TRUE(e.status.is_ok()) << e.status.to_string();
  ASSERT_LT(k, e.out.size());
  EXPECT_EQ(e.out[k].dtype, DType::f32);
  EXPECT_EQ(e.out[k].dims, dims);
  EXPECT_EQ(e.out[k].f, want);
}

void expect_i64(const Eval& e, std::size_t k, const I64s& dims, const I64s& want, DType dtype = DType::i64) {
  ASSERT_TRUE(e.status.is_ok()) << e.status.to_string();
  ASSERT_LT(k, e.out.size());
  EXPECT_EQ(e.out[k].dtype, dtype);
  EXPECT_EQ(e.out[k].dims, dims);
  EXPECT_EQ(e.out[k].i, want);
}

void expect_bool(const Eval& e, const I64s& dims, const I64s& want) { expect_i64(e, 0, dims, want, DType::boolean); }

// An invalid_argument naming the node and holding every part.
void expect_error(const Eval& e, const std::vector<std::string>& parts,
                  StatusCode code = StatusCode::invalid_argument) {
  ASSERT_FALSE(e.status.is_ok()) << "expected an error containing \"" << parts.front() << "\"";
  EXPECT_EQ(e.status.code(), code) << e.status.to_string();
  EXPECT_NE(e.status.message().find(std::string("'") + kNode + "'"), std::string::npos) << e.status.message();
  for (const std::string& p : parts) EXPECT_NE(e.status.message().find(p), std::string::npos) << e.status.message();
}

// ---- generic -------------------------------------------------------------------------------------

TEST(HostOps, WhichOpsAreHostOps) {
  EXPECT_TRUE(is_host_op(NodeOp::reshape));
  EXPECT_TRUE(is_host_op(NodeOp::pool_nd));
  EXPECT_TRUE(is_host_op(NodeOp::layernorm_stats));
  EXPECT_TRUE(is_host_op(NodeOp::add));
  EXPECT_TRUE(is_host_op(NodeOp::div));
  EXPECT_FALSE(is_host_op(NodeOp::matmul));
  EXPECT_FALSE(is_host_op(NodeOp::constant));
  EXPECT_FALSE(is_host_op(NodeOp::layout_convert));
  EXPECT_FALSE(is_host_op(NodeOp::conv2d));
  EXPECT_FALSE(is_host_op(NodeOp::relu));
}

TEST(HostOps, NumelOfScalarIsOne) {
  EXPECT_EQ((TensorInfo{DType::f32, {}}).numel(), 1);
  EXPECT_EQ((TensorInfo{DType::f32, {2, 0, 3}}).numel(), 0);
  EXPECT_EQ((HostTensor{DType::i64, {2, 3, 4}, nullptr}).numel(), 24);
}

TEST(HostOps, NonHostOpIsUnsupported) {
  expect_error(eval(NodeOp::matmul, {}, {C(Ramp({2, 2})), C(Ramp({2, 2}))}), {"not a host op"},
               StatusCode::unsupported);
}

TEST(HostOps, WrongInputCountIsAnError) {
  expect_error(eval(NodeOp::add, {}, {C(Ramp({2}))}), {"add 'Node_7': takes 2 inputs, not 1"});
  expect_error(eval(NodeOp::transpose, {}, {C(Ramp({2})), C(Ramp({2}))}), {"takes 1 inputs, not 2"});
  expect_error(eval(NodeOp::sqrt, {}, {C(Ramp({2}))}, 2), {"has 1 output, not 2"});
}

TEST(HostOps, RankAboveTheLimitIsAnError) {
  expect_error(eval(NodeOp::identity, {}, {C(Ramp({1, 1, 1, 1, 1, 1, 1, 1, 2}))}),
               {"input 0 has rank 9, above the host ops' limit of 8"});
  // Rank 8 is fine, on inputs and outputs.
  expect_f32(eval(NodeOp::identity, {}, {C(Ramp({1, 1, 1, 1, 1, 1, 1, 2}, 1.f))}), 0, {1, 1, 1, 1, 1, 1, 1, 2}, {1, 2});
  expect_error(eval(NodeOp::unsqueeze, {}, {C(Ramp({2, 2, 2, 2, 2})), C(I({4}, {0, 1, 2, 3}))}),
               {"output 0 has rank 9"});
}

TEST(HostOps, OutputElementCountOverflowIsAnError) {
  const std::int64_t big = std::int64_t{1} << 40;
  expect_error(eval(NodeOp::expand, {}, {C(F({}, {1.f})), C(I({2}, {big, big}))}), {"too many elements"});
  expect_error(eval(NodeOp::constant_of_shape, {}, {C(I({3}, {big, big, big}))}), {"too many elements"});
}

TEST(HostOps, RunChecksBuffersAgainstTheShapes) {
  // run() re-derives the output from its inputs and refuses a buffer infer() would not have sized.
  Tensor x = Ramp({2, 3});
  Tensor y = Ramp({2, 3});
  const Node node = make_node(NodeOp::transpose, {}, {C(x)}, 1);
  const std::vector<HostTensor> in{x.view()}, out{y.view()};
  const Status s = run(node, in, out);
  ASSERT_FALSE(s.is_ok());
  EXPECT_EQ(s.code(), StatusCode::internal) << s.to_string();
  EXPECT_NE(s.message().find("transpose 'Node_7': output 0 buffer is f32 2x3, the op gives f32 3x2"), std::string::npos)
      << s.message();
  // A missing output buffer.
  const std::vector<HostTensor> none{HostTensor{DType::f32, {3, 2}, nullptr}};
  expect_error(Eval{run(node, in, none), false, {}}, {"output 0 has no buffer"});
}

// ---- reshape -------------------------------------------------------------------------------------

TEST(HostOpsReshape, MinusOneIsInferredAndZeroCopiesTheDim) {
  const Tensor x = Ramp({2, 3, 4});
  expect_f32(eval(NodeOp::reshape, {}, {C(x), C(I({2}, {0, -1}))}), 0, {2, 12}, x.f);
  expect_f32(eval(NodeOp::reshape, {}, {C(x), C(I({1}, {-1}))}), 0, {24}, x.f);
  expect_f32(eval(NodeOp::reshape, {}, {C(x), C(I({3}, {4, 0, -1}))}), 0, {4, 3, 2}, x.f);
  // To a scalar and back.
  expect_f32(eval(NodeOp::reshape, {}, {C(F({1, 1}, {5.f})), C(I({0}, {}))}), 0, {}, {5.f});
  expect_f32(eval(NodeOp::reshape, {}, {C(F({}, {5.f})), C(I({3}, {1, -1, 1}))}), 0, {1, 1, 1}, {5.f});
}

TEST(HostOpsReshape, AllowZeroKeepsZeroAsADim) {
  const Tensor x = F({0, 4}, {});
  const Eval e = eval(NodeOp::reshape, {{"allowzero", std::int64_t{1}}}, {C(x), C(I({2}, {2, 0}))});
  ASSERT_TRUE(e.status.is_ok()) << e.status.to_string();
  EXPECT_EQ(e.out[0].dims, (I64s{2, 0}));
  // Without allowzero the 0 copies dim 1 (4): 8 elements, not 0.
  expect_error(eval(NodeOp::reshape, {}, {C(x), C(I({2}, {2, 0}))}), {"holds 8 elements"});
  expect_error(eval(NodeOp::reshape, {{"allowzero", std::int64_t{1}}}, {C(Ramp({2, 2})), C(I({2}, {0, -1}))}),
               {"both 0 and -1"});
}

TEST(HostOpsReshape, Errors) {
  const Tensor x = Ramp({2, 3});
  expect_error(eval(NodeOp::reshape, {}, {C(x), C(I({2}, {-1, -1}))}), {"shape -1,-1 has more than one -1"});
  expect_error(eval(NodeOp::reshape, {}, {C(x), C(I({2}, {4, 2}))}), {"shape 4,2 holds 8 elements", "2x3 has 6"});
  expect_error(eval(NodeOp::reshape, {}, {C(x), C(I({2}, {4, -1}))}), {"cannot take the 6 elements"});
  expect_error(eval(NodeOp::reshape, {}, {C(x), C(I({2}, {-2, 3}))}), {"negative dim -2"});
  expect_error(eval(NodeOp::reshape, {}, {C(x), C(I({3}, {1, 0, 0}))}), {"copies dim 2"});
  const Eval dyn = eval(NodeOp::reshape, {}, {C(x), D(I({2}, {3, 2}))});
  expect_error(dyn, {"reshape 'Node_7': needs a constant 'shape' input"});
  EXPECT_TRUE(dyn.failed_in_infer);
  expect_error(eval(NodeOp::reshape, {}, {C(x), C(F({2}, {3, 2}))}), {"'shape' input must be i64"});
}

// ---- transpose -----------------------------------------------------------------------------------

TEST(HostOpsTranspose, DefaultReversesTheDims) {
  // [[0 1 2] [3 4 5]] -> [[0 3] [1 4] [2 5]]
  expect_f32(eval(NodeOp::transpose, {}, {C(Ramp({2, 3}))}), 0, {3, 2}, {0, 3, 1, 4, 2, 5});
  // i64 (2,1,2) reversed is (2,1,2): y[k][j][i] = x[i][j][k].
  expect_i64(eval(NodeOp::transpose, {}, {C(I({2, 1, 2}, {1, 2, 3, 4}))}), 0, {2, 1, 2}, {1, 3, 2, 4});
}

TEST(HostOpsTranspose, Perm) {
  // x[j][i][k] = 6j + 2i + k is (2,3,2); perm 1,0,2 gives y (3,2,2) with y[i][j][k] = x[j][i][k].
  expect_f32(eval(NodeOp::transpose, {{"perm", I64s{1, 0, 2}}}, {C(Ramp({2, 3, 2}))}), 0, {3, 2, 2},
             {0, 1, 6, 7, 2, 3, 8, 9, 4, 5, 10, 11});
  // perm 2,0,1: y (2,2,3) with y[k][j][i] = x[j][i][k].
  expect_f32(eval(NodeOp::transpose, {{"perm", I64s{2, 0, 1}}}, {C(Ramp({2, 3, 2}))}), 0, {2, 2, 3},
             {0, 2, 4, 6, 8, 10, 1, 3, 5, 7, 9, 11});
}

TEST(HostOpsTranspose, PermNotAPermutation) {
  const Eval e = eval(NodeOp::transpose, {{"perm", I64s{0, 0, 1}}}, {C(Ramp({2, 3, 4}))});
  ASSERT_FALSE(e.status.is_ok());
  EXPECT_EQ(e.status.message(), "transpose 'Node_7': perm 0,0,1 is not a permutation of 3 dims");
  expect_error(eval(NodeOp::transpose, {{"perm", I64s{0, 1}}}, {C(Ramp({2, 3, 4}))}),
               {"perm 0,1 is not a permutation"});
  expect_error(eval(NodeOp::transpose, {{"perm", I64s{0, 3, 1}}}, {C(Ramp({2, 3, 4}))}), {"perm 0,3,1"});
  expect_error(eval(NodeOp::transpose, {{"perm", I64s{-1, 0, 1}}}, {C(Ramp({2, 3, 4}))}), {"perm -1,0,1"});
}

// ---- concat --------------------------------------------------------------------------------------

TEST(HostOpsConcat, NegativeAxisAndAnyDtype) {
  // [[1] [2]] ++ [[3 4] [5 6]] along the last axis.
  expect_f32(eval(NodeOp::concat, {{"axis", std::int64_t{-1}}}, {C(F({2, 1}, {1, 2})), C(F({2, 2}, {3, 4, 5, 6}))}), 0,
             {2, 3}, {1, 3, 4, 2, 5, 6});
  expect_i64(eval(NodeOp::concat, {{"axis", std::int64_t{0}}},
                  {C(I({1, 2}, {1, 2})), C(I({2, 2}, {3, 4, 5, 6})), C(I({0, 2}, {}))}),
             0, {3, 2}, {1, 2, 3, 4, 5, 6});
  expect_i64(eval(NodeOp::concat, {{"axis", std::int64_t{0}}}, {C(B({1}, {1})), C(B({2}, {0, 1}))}), 0, {3}, {1, 0, 1},
             DType::boolean);
}

TEST(HostOpsConcat, Errors) {
  expect_error(eval(NodeOp::concat, {{"axis", std::int64_t{1}}}, {C(F({2, 1}, {1, 2})), C(F({3, 1}, {1, 2, 3}))}),
               {"input 1 dims 3x1 do not match input 0 dims 2x1 outside axis 1"});
  expect_error(eval(NodeOp::concat, {{"axis", std::int64_t{2}}}, {C(F({2, 1}, {1, 2})), C(F({2, 1}, {1, 2}))}),
               {"axis 2 is out of range for rank 2"});
  expect_error(eval(NodeOp::concat, {{"axis", std::int64_t{0}}}, {C(F({1}, {1})), C(I({1}, {1}))}),
               {"input 1 is i64, input 0 is f32"});
  expect_error(eval(NodeOp::concat, {}, {C(F({1}, {1}))}), {"needs an axis"});
}

// ---- flatten -------------------------------------------------------------------------------------

TEST(HostOpsFlatten, Axes) {
  const Tensor x = Ramp({2, 3, 4});
  expect_f32(eval(NodeOp::flatten, {}, {C(x)}), 0, {2, 12}, x.f);
  expect_f32(eval(NodeOp::flatten, {{"axis", std::int64_t{0}}}, {C(x)}), 0, {1, 24}, x.f);
  expect_f32(eval(NodeOp::flatten, {{"axis", std::int64_t{-1}}}, {C(x)}), 0, {6, 4}, x.f);
  expect_f32(eval(NodeOp::flatten, {{"axis", std::int64_t{3}}}, {C(x)}), 0, {24, 1}, x.f);
  expect_f32(eval(NodeOp::flatten, {{"axis", std::int64_t{-3}}}, {C(x)}), 0, {1, 24}, x.f);
  expect_error(eval(NodeOp::flatten, {{"axis", std::int64_t{4}}}, {C(x)}), {"axis 4 is out of range [-3, 3]"});
}

// ---- slice ---------------------------------------------------------------------------------------

// x[r][c] = 4r + c, (3,4).
Tensor grid() { return Ramp({3, 4}); }

TEST(HostOpsSlice, Basic) {
  // Rows 1..2, cols 0..2.
  expect_f32(eval(NodeOp::slice, {}, {C(grid()), C(I({2}, {1, 0})), C(I({2}, {3, 3}))}), 0, {2, 3},
             {4, 5, 6, 8, 9, 10});
  // Negative start counts from the back: cols 2..3 via axes -1.
  expect_f32(eval(NodeOp::slice, {}, {C(grid()), C(I({1}, {-2})), C(I({1}, {kI64Max})), C(I({1}, {-1}))}), 0, {3, 2},
             {2, 3, 6, 7, 10, 11});
  // Every other column up to INT64_MAX.
  expect_f32(eval(NodeOp::slice, {}, {C(grid()), C(I({1}, {0})), C(I({1}, {kI64Max})), C(I({1}, {1})), C(I({1}, {2}))}),
             0, {3, 2}, {0, 2, 4, 6, 8, 10});
}

TEST(HostOpsSlice, NegativeSteps) {
  // Reverse the columns: start -1 -> 3, end INT64_MIN clamps to -1.
  expect_f32(
      eval(NodeOp::slice, {}, {C(grid()), C(I({1}, {-1})), C(I({1}, {kI64Min})), C(I({1}, {-1})), C(I({1}, {-1}))}), 0,
      {3, 4}, {3, 2, 1, 0, 7, 6, 5, 4, 11, 10, 9, 8});
  // Rows 2 then 0 (step -2, end -10 -> -6 clamps to -1).
  expect_f32(eval(NodeOp::slice, {}, {C(grid()), C(I({1}, {2})), C(I({1}, {-10})), C(I({1}, {0})), C(I({1}, {-2}))}), 0,
             {2, 4}, {8, 9, 10, 11, 0, 1, 2, 3});
  // Start 100 clamps to the last row; end 0 excludes row 0; step -1.
  expect_f32(eval(NodeOp::slice, {}, {C(grid()), C(I({1}, {100})), C(I({1}, {0})), C(I({1}, {0})), C(I({1}, {-1}))}), 0,
             {2, 4}, {8, 9, 10, 11, 4, 5, 6, 7});
  // A step of INT64_MIN takes the start only.
  expect_f32(
      eval(NodeOp::slice, {}, {C(grid()), C(I({1}, {-1})), C(I({1}, {kI64Min})), C(I({1}, {0})), C(I({1}, {kI64Min}))}),
      0, {1, 4}, {8, 9, 10, 11});
}

TEST(HostOpsSlice, EmptyResultsAndOmittedAxes) {
  // Start past the end clamps: no rows.
  const Eval e = eval(NodeOp::slice, {}, {C(grid()), C(I({1}, {10})), C(I({1}, {20}))});
  ASSERT_TRUE(e.status.is_ok()) << e.status.to_string();
  EXPECT_EQ(e.out[0].dims, (I64s{0, 4}));
  // start >= end with a positive step: no columns.
  const Eval e2 = eval(NodeOp::slice, {}, {C(grid()), C(I({1}, {3})), C(I({1}, {1})), C(I({1}, {1}))});
  ASSERT_TRUE(e2.status.is_ok()) << e2.status.to_string();
  EXPECT_EQ(e2.out[0].dims, (I64s{3, 0}));
  // axes omitted but steps given.
  expect_f32(eval(NodeOp::slice, {}, {C(grid()), C(I({1}, {0})), C(I({1}, {3})), None(), C(I({1}, {2}))}), 0, {2, 4},
             {0, 1, 2, 3, 8, 9, 10, 11});
}

TEST(HostOpsSlice, Errors) {
  expect_error(eval(NodeOp::slice, {}, {C(grid()), C(I({1}, {0})), C(I({1}, {1})), C(I({1}, {0})), C(I({1}, {0}))}),
               {"zero step"});
  expect_error(eval(NodeOp::slice, {}, {C(grid()), C(I({2}, {0, 0})), C(I({2}, {1, 1})), C(I({2}, {1, -1}))}),
               {"axes 1,-1 repeats axis -1"});
  expect_error(eval(NodeOp::slice, {}, {C(grid()), C(I({1}, {0})), C(I({1}, {1})), C(I({1}, {2}))}),
               {"axes value 2 is out of range for rank 2"});
  expect_error(eval(NodeOp::slice, {}, {C(grid()), C(I({1}, {0})), C(I({2}, {1, 1}))}), {"differ in length"});
  expect_error(eval(NodeOp::slice, {}, {C(grid()), D(I({1}, {0})), C(I({1}, {1}))}),
               {"needs a constant 'starts' input"});
}

// ---- gather --------------------------------------------------------------------------------------

TEST(HostOpsGather, Axis0WithMatrixIndices) {
  // ONNX's first example: data [[1,2],[3,4],[5,6]], indices [[0,1],[1,2]] -> (2,2,2).
  expect_f32(eval(NodeOp::gather, {}, {C(F({3, 2}, {1, 2, 3, 4, 5, 6})), C(I({2, 2}, {0, 1, 1, 2}))}), 0, {2, 2, 2},
             {1, 2, 3, 4, 3, 4, 5, 6});
}

TEST(HostOpsGather, Axis1WithNegativeIndices) {
  // ONNX's second example, index 2 spelled -1: columns 0 and 2 of each row -> (3,1,2).
  const Tensor data = F({3, 3}, {1.0f, 1.2f, 1.9f, 2.3f, 3.4f, 3.9f, 4.5f, 5.7f, 5.9f});
  expect_f32(eval(NodeOp::gather, {{"axis", std::int64_t{1}}}, {C(data), C(I({1, 2}, {0, -1}))}), 0, {3, 1, 2},
             {1.0f, 1.9f, 2.3f, 3.9f, 4.5f, 5.9f});
  expect_f32(eval(NodeOp::gather, {{"axis", std::int64_t{-1}}}, {C(data), D(I({2}, {-3, 1}))}), 0, {3, 2},
             {1.0f, 1.2f, 2.3f, 3.4f, 4.5f, 5.7f});
}

TEST(HostOpsGather, ScalarIndexDropsTheAxis) {
  expect_f32(eval(NodeOp::gather, {}, {C(F({3, 2}, {1, 2, 3, 4, 5, 6})), C(I({}, {1}))}), 0, {2}, {3, 4});
  expect_i64(eval(NodeOp::gather, {}, {C(I({3}, {10, 20, 30})), D(I({}, {-1}))}), 0, {}, {30});
}

TEST(HostOpsGather, OutOfRangeIndexIsCaughtAtRun) {
  const Tensor data = F({3, 2}, {1, 2, 3, 4, 5, 6});
  const Eval e = eval(NodeOp::gather, {}, {C(data), D(I({2}, {0, 3}))});
  expect_error(e, {"gather 'Node_7': indices value 3 (element 1) is out of range for axis 0 of size 3"});
  EXPECT_FALSE(e.failed_in_infer);  // the indices were not constant: run() found it
  expect_error(eval(NodeOp::gather, {}, {C(data), D(I({1}, {-4}))}), {"indices value -4"});
  // Constant indices are checked by infer() already.
  const Eval c = eval(NodeOp::gather, {}, {C(data), C(I({1}, {3}))});
  expect_error(c, {"indices value 3"});
  EXPECT_TRUE(c.failed_in_infer);
  expect_error(eval(NodeOp::gather, {{"axis", std::int64_t{2}}}, {C(data), C(I({1}, {0}))}),
               {"axis 2 is out of range"});
  expect_error(eval(NodeOp::gather, {}, {C(data), C(F({1}, {0}))}), {"must be i64"});
}

// ---- squeeze / unsqueeze -------------------------------------------------------------------------

TEST(HostOpsSqueeze, WithAndWithoutAxes) {
  const Tensor x = Ramp({1, 3, 1, 2});
  expect_f32(eval(NodeOp::squeeze, {}, {C(x)}), 0, {3, 2}, x.f);
  expect_f32(eval(NodeOp::squeeze, {}, {C(x), C(I({1}, {-2}))}), 0, {1, 3, 2}, x.f);
  expect_f32(eval(NodeOp::squeeze, {}, {C(x), C(I({2}, {2, 0}))}), 0, {3, 2}, x.f);
  expect_error(eval(NodeOp::squeeze, {}, {C(x), C(I({1}, {1}))}), {"selects dim 1 of size 3, not 1"});
  expect_error(eval(NodeOp::squeeze, {}, {C(x), C(I({2}, {0, -4}))}), {"repeats axis -4"});
  expect_error(eval(NodeOp::squeeze, {}, {C(x), D(I({1}, {0}))}), {"needs a constant 'axes' input"});
}

TEST(HostOpsUnsqueeze, NegativeAndUnsortedAxes) {
  const Tensor x = Ramp({3, 4});
  // Output rank 4: -1 is 3, so (1,3,4,1).
  expect_f32(eval(NodeOp::unsqueeze, {}, {C(x), C(I({2}, {-1, 0}))}), 0, {1, 3, 4, 1}, x.f);
  expect_f32(eval(NodeOp::unsqueeze, {}, {C(x), C(I({2}, {2, 0}))}), 0, {1, 3, 1, 4}, x.f);
  expect_f32(eval(NodeOp::unsqueeze, {}, {C(F({}, {2.f})), C(I({1}, {0}))}), 0, {1}, {2.f});
  expect_error(eval(NodeOp::unsqueeze, {}, {C(x), C(I({2}, {0, 0}))}), {"repeats axis 0"});
  expect_error(eval(NodeOp::unsqueeze, {}, {C(x), C(I({1}, {3}))}), {"axes value 3 is out of range for rank 3"});
}

// ---- split ---------------------------------------------------------------------------------------

TEST(HostOpsSplit, GivenSizes) {
  // x (2,5) = 0..9 split along -1 into 2 and 3 columns.
  const Eval e = eval(NodeOp::split, {{"axis", std::int64_t{-1}}}, {C(Ramp({2, 5})), C(I({2}, {2, 3}))}, 2);
  expect_f32(e, 0, {2, 2}, {0, 1, 5, 6});
  expect_f32(e, 1, {2, 3}, {2, 3, 4, 7, 8, 9});
}

TEST(HostOpsSplit, EqualAndUnevenSplits) {
  const Eval e = eval(NodeOp::split, {}, {C(I({4, 2}, {0, 1, 2, 3, 4, 5, 6, 7}))}, 2);
  expect_i64(e, 0, {2, 2}, {0, 1, 2, 3});
  expect_i64(e, 1, {2, 2}, {4, 5, 6, 7});
  // Opset 18: ceil(5 / 2) = 3, the last part gets the rest.
  const Eval u = eval(NodeOp::split, {}, {C(Ramp({5}, 1.f))}, 2);
  expect_f32(u, 0, {3}, {1, 2, 3});
  expect_f32(u, 1, {2}, {4, 5});
}

TEST(HostOpsSplit, Errors) {
  expect_error(eval(NodeOp::split, {}, {C(Ramp({5})), C(I({2}, {2, 2}))}, 2), {"split 2,2 sums to 4", "size 5"});
  expect_error(eval(NodeOp::split, {}, {C(Ramp({5})), C(I({2}, {2, 3}))}, 3), {"2 sizes for 3 outputs"});
  expect_error(eval(NodeOp::split, {}, {C(Ramp({5}))}, 4), {"cannot split into 4 outputs"});
  expect_error(eval(NodeOp::split, {{"axis", std::int64_t{1}}}, {C(Ramp({5}))}, 2), {"axis 1 is out of range"});
}

// ---- identity, constant_of_shape, shape -------------------------------------------------------

TEST(HostOpsIdentity, CopiesAnyDtype) {
  expect_i64(eval(NodeOp::identity, {}, {C(I({2}, {kI64Min, 5}))}), 0, {2}, {kI64Min, 5});
  expect_bool(eval(NodeOp::identity, {}, {D(B({3}, {1, 0, 1}))}), {3}, {1, 0, 1});
}

TEST(HostOpsConstantOfShape, ValueAndDtype) {
  expect_f32_exact(eval(NodeOp::constant_of_shape, {}, {C(I({2}, {2, 3}))}), 0, {2, 3}, F32s(6, 0.f));
  expect_i64(eval(NodeOp::constant_of_shape, {{"value_i64", std::int64_t{7}}}, {C(I({1}, {3}))}), 0, {3}, {7, 7, 7});
  expect_f32(eval(NodeOp::constant_of_shape, {{"value_f32", 1.5f}}, {C(I({0}, {}))}), 0, {}, {1.5f});
  expect_error(eval(NodeOp::constant_of_shape, {{"value_f32", 1.5f}, {"value_i64", std::int64_t{1}}}, {C(I({1}, {3}))}),
               {"both value_f32 and value_i64"});
  expect_error(eval(NodeOp::constant_of_shape, {}, {C(I({2}, {2, -3}))}), {"negative dim -3"});
  expect_error(eval(NodeOp::constant_of_shape, {}, {D(I({1}, {3}))}), {"needs a constant 'shape' input"});
}

TEST(HostOpsShape, StartAndEndClamp) {
  const Tensor x = Ramp({2, 3, 4});
  expect_i64(eval(NodeOp::shape, {}, {D(x)}), 0, {3}, {2, 3, 4});
  expect_i64(eval(NodeOp::shape, {{"start", std::int64_t{-1}}}, {D(x)}), 0, {1}, {4});
  expect_i64(eval(NodeOp::shape, {{"start", std::int64_t{1}}, {"end", std::int64_t{-1}}}, {D(x)}), 0, {1}, {3});
  expect_i64(eval(NodeOp::shape, {{"start", std::int64_t{-10}}, {"end", std::int64_t{10}}}, {D(x)}), 0, {3}, {2, 3, 4});
  expect_i64(eval(NodeOp::shape, {{"start", std::int64_t{5}}}, {D(x)}), 0, {0}, {});
  expect_i64(eval(NodeOp::shape, {}, {D(F({}, {1.f}))}), 0, {0}, {});
}

// ---- expand --------------------------------------------------------------------------------------

TEST(HostOpsExpand, BidirectionalBroadcast) {
  // (3,1) against (2,1,4): each value repeated along the 4, the whole twice.
  const F32s once = {1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3};
  F32s twice = once;
  twice.insert(twice.end(), once.begin(), once.end());
  expect_f32(eval(NodeOp::expand, {}, {C(F({3, 1}, {1, 2, 3})), C(I({3}, {2, 1, 4}))}), 0, {2, 3, 4}, twice);
  // A shape smaller than the data keeps the data's dims.
  expect_f32(eval(NodeOp::expand, {}, {C(Ramp({2, 3}, 1.f)), C(I({1}, {1}))}), 0, {2, 3}, {1, 2, 3, 4, 5, 6});
  expect_i64(eval(NodeOp::expand, {}, {C(I({}, {5})), C(I({1}, {2}))}), 0, {2}, {5, 5});
  expect_i64(eval(NodeOp::expand, {}, {C(I({2}, {1, 2})), C(I({2}, {2, 1}))}), 0, {2, 2}, {1, 2, 1, 2});
}

TEST(HostOpsExpand, Errors) {
  expect_error(eval(NodeOp::expand, {}, {C(Ramp({2, 3})), C(I({1}, {4}))}), {"2x3 and 4 do not broadcast"});
  expect_error(eval(NodeOp::expand, {}, {C(Ramp({2, 3})), C(I({1}, {-1}))}), {"negative dim -1"});
  expect_error(eval(NodeOp::expand, {}, {C(Ramp({2, 3})), D(I({1}, {3}))}), {"needs a constant 'shape' input"});
}

// ---- cast ----------------------------------------------------------------------------------------

TEST(HostOpsCast, F32ToI64TruncatesTowardZero) {
  expect_i64(eval(NodeOp::cast, {{"to", std::string("i64")}}, {C(F({6}, {-2.7f, -0.5f, 0.f, 2.9f, 3.f, -1e30f}))}), 0,
             {6}, {-2, 0, 0, 2, 3, kI64Min});
}

TEST(HostOpsCast, ToAndFromBoolean) {
  expect_bool(eval(NodeOp::cast, {{"to", std::string("boolean")}}, {C(F({4}, {0.f, -0.f, 0.1f, kNan}))}), {4},
              {0, 0, 1, 1});
  expect_bool(eval(NodeOp::cast, {{"to", std::string("boolean")}}, {C(I({3}, {-3, 0, 5}))}), {3}, {1, 0, 1});
  expect_f32(eval(NodeOp::cast, {{"to", std::string("f32")}}, {C(B({2}, {1, 0}))}), 0, {2}, {1, 0});
  expect_i64(eval(NodeOp::cast, {{"to", std::string("i64")}}, {C(B({2}, {0, 1}))}), 0, {2}, {0, 1});
  expect_f32(eval(NodeOp::cast, {{"to", std::string("f32")}}, {C(I({3}, {-3, 0, 5}))}), 0, {3}, {-3, 0, 5});
  expect_error(eval(NodeOp::cast, {{"to", std::string("f16")}}, {C(I({1}, {1}))}),
               {"to 'f16' is not f32, i64 or boolean"});
}

// ---- pow, sqrt, erf ------------------------------------------------------------------------------

// powf and std::pow agree to within a float ulp or two.
constexpr check::Tolerance kPowTol{0, 2.5e-7};

TEST(HostOpsPow, FastPathsMatchStdPow) {
  const F32s x = {-3.5f, 1e-3f, 1234.5f, 0.f, 7.f};
  F32s sq, half;
  for (float v : x) sq.push_back(std::pow(v, 2.f));
  expect_f32(eval(NodeOp::pow, {}, {C(F({5}, x)), C(F({}, {2.f}))}), 0, {5}, sq, kPowTol);
  expect_f32(eval(NodeOp::pow, {}, {C(F({5}, x)), C(I({1}, {2}))}), 0, {5}, sq, kPowTol);
  const F32s xs = {4.f, 2.f, 0.25f, -4.f, INFINITY, -INFINITY};
  for (float v : xs) half.push_back(std::pow(v, 0.5f));
  expect_f32(eval(NodeOp::pow, {}, {C(F({6}, xs)), C(F({1, 1}, {0.5f}))}), 0, {1, 6}, half, kPowTol);
  // pow(-0, 0.5) is +0 (sqrt(-0) would be -0).
  const Eval z = eval(NodeOp::pow, {}, {C(F({1}, {-0.f})), C(F({}, {0.5f}))});
  ASSERT_TRUE(z.status.is_ok()) << z.status.to_string();
  EXPECT_FALSE(std::signbit(z.out[0].f[0]));
}

TEST(HostOpsPow, BroadcastAndIntegerExponents) {
  // base (2,1) [4, 2] ^ exponent (2) [0.5, 3] -> [[2, 64], [1.41421356, 8]].
  expect_f32(eval(NodeOp::pow, {}, {C(F({2, 1}, {4, 2})), C(F({2}, {0.5f, 3.f}))}), 0, {2, 2},
             {2.f, 64.f, 1.41421356f, 8.f}, kPowTol);
  // i64 exponents [3, -1] on (2,2) [1 2; 3 4] -> [1, 0.5, 27, 0.25].
  expect_f32(eval(NodeOp::pow, {}, {C(F({2, 2}, {1, 2, 3, 4})), C(I({2}, {3, -1}))}), 0, {2, 2}, {1, 0.5f, 27, 0.25f},
             kPowTol);
  // An i64 base gives i64 (ONNX: the output has the base's type): [2, -3, 5] ^ [3] and ^ 0.5.
  {
    const Eval e = eval(NodeOp::pow, {}, {C(I({3}, {2, -3, 5})), C(I({1}, {3}))});
    ASSERT_TRUE(e.status.is_ok()) << e.status.to_string();
    EXPECT_EQ(e.out[0].i, (std::vector<std::int64_t>{8, -27, 125}));
    const Eval h = eval(NodeOp::pow, {}, {C(I({2}, {9, 10})), C(F({1}, {0.5f}))});
    ASSERT_TRUE(h.status.is_ok()) << h.status.to_string();
    EXPECT_EQ(h.out[0].i, (std::vector<std::int64_t>{3, 3}));  // sqrt(10) = 3.16 truncates to 3
  }
  expect_error(eval(NodeOp::pow, {}, {C(F({1}, {2})), C(B({1}, {1}))}), {"input 1 (exponent) must be f32 or i64"});
}

TEST(HostOpsUnary, SqrtAndErf) {
  expect_f32(eval(NodeOp::sqrt, {}, {C(F({2, 2}, {0, 1, 4, 2.25f}))}), 0, {2, 2}, {0, 1, 2, 1.5f});
  // erf(0.5) = 0.5204998778, erf(-1) = -0.8427007929, erf(3) = 0.9999779095.
  expect_f32(eval(NodeOp::erf, {}, {C(F({4}, {0, 0.5f, -1, 3}))}), 0, {4},
             {0, 0.5204998778f, -0.8427007929f, 0.9999779095f}, {0, 1e-6});
  expect_f32(eval(NodeOp::sqrt, {}, {C(F({}, {9.f}))}), 0, {}, {3.f});
  expect_error(eval(NodeOp::sqrt, {}, {C(I({1}, {4}))}), {"input 0 (x) must be f32, not i64"});
}

// ---- reduce_mean ---------------------------------------------------------------------------------

// Means of a handful of small integers are exact in float.
TEST(HostOpsReduceMean, AxesAndKeepdims) {
  const Tensor x = Ramp({2, 3}, 1.f);  // [[1 2 3] [4 5 6]]
  expect_f32(eval(NodeOp::reduce_mean, {}, {C(x), C(I({1}, {1}))}), 0, {2, 1}, {2, 5});
  expect_f32(eval(NodeOp::reduce_mean, {{"keepdims", std::int64_t{0}}}, {C(x), C(I({1}, {-2}))}), 0, {3},
             {2.5f, 3.5f, 4.5f});
  expect_f32(eval(NodeOp::reduce_mean, {}, {C(x)}), 0, {1, 1}, {3.5f});
  expect_f32(eval(NodeOp::reduce_mean, {{"keepdims", std::int64_t{0}}}, {C(x), C(I({0}, {}))}), 0, {}, {3.5f});
  // x (2,2,2) = 0..7 over axes 0 and 2: y[j] = mean of x[*][j][*].
  expect_f32(eval(NodeOp::reduce_mean, {}, {C(Ramp({2, 2, 2})), C(I({2}, {2, 0}))}), 0, {1, 2, 1}, {2.5f, 4.5f});
}

TEST(HostOpsReduceMean, NoopWithEmptyAxes) {
  const Tensor x = Ramp({2, 3}, 1.f);
  expect_f32(eval(NodeOp::reduce_mean, {{"noop_with_empty_axes", std::int64_t{1}}}, {C(x)}), 0, {2, 3}, x.f);
  expect_f32(eval(NodeOp::reduce_mean, {{"noop_with_empty_axes", std::int64_t{1}}}, {C(x), C(I({1}, {0}))}), 0, {1, 3},
             {2.5f, 3.5f, 4.5f});
}

TEST(HostOpsReduceMean, Errors) {
  const Tensor x = Ramp({2, 3});
  expect_error(eval(NodeOp::reduce_mean, {}, {C(x), C(I({2}, {0, -2}))}), {"axes 0,-2 repeats axis -2"});
  expect_error(eval(NodeOp::reduce_mean, {}, {C(x), C(I({1}, {2}))}), {"axes value 2 is out of range for rank 2"});
  expect_error(eval(NodeOp::reduce_mean, {}, {C(x), D(I({1}, {0}))}), {"needs a constant 'axes' input"});
}

// ---- where, equal, min, max ----------------------------------------------------------------------

TEST(HostOpsWhere, ThreeWayBroadcast) {
  expect_f32(eval(NodeOp::where, {}, {C(B({2, 2}, {1, 0, 0, 1})), C(F({2, 2}, {1, 2, 3, 4})), C(F({}, {9}))}), 0,
             {2, 2}, {1, 9, 9, 4});
  // cond (2,1), x (1,3), y (2,3): row 0 from x, row 1 from y.
  expect_i64(
      eval(NodeOp::where, {}, {C(B({2, 1}, {1, 0})), C(I({1, 3}, {1, 2, 3})), C(I({2, 3}, {10, 11, 12, 13, 14, 15}))}),
      0, {2, 3}, {1, 2, 3, 13, 14, 15});
  expect_error(eval(NodeOp::where, {}, {C(F({1}, {1})), C(F({1}, {1})), C(F({1}, {2}))}),
               {"input 0 (cond) must be bool"});
  expect_error(eval(NodeOp::where, {}, {C(B({1}, {1})), C(F({1}, {1})), C(I({1}, {2}))}), {"x and y must both be"});
  expect_error(eval(NodeOp::where, {}, {C(B({2}, {1, 0})), C(F({3}, {1, 2, 3})), C(F({1}, {2}))}),
               {"2 and 3 and 1 do not broadcast"});
}

TEST(HostOpsEqual, F32AndI64) {
  expect_bool(eval(NodeOp::equal, {}, {C(F({3}, {1, 2, 3})), C(F({}, {2}))}), {3}, {0, 1, 0});
  expect_bool(eval(NodeOp::equal, {}, {C(I({2, 1}, {1, 2})), C(I({2}, {1, 2}))}), {2, 2}, {1, 0, 0, 1});
  expect_bool(eval(NodeOp::equal, {}, {C(F({1}, {kNan})), C(F({1}, {kNan}))}), {1}, {0});
  expect_error(eval(NodeOp::equal, {}, {C(F({1}, {1})), C(I({1}, {1}))}), {"must both be f32 or both i64"});
}

TEST(HostOpsMinMax, BroadcastAndNaN) {
  const Tensor a = F({2, 2}, {1, 5, kNan, -1});
  const Tensor b = F({2}, {3, 0});
  expect_f32(eval(NodeOp::min, {}, {C(a), C(b)}), 0, {2, 2}, {1, 0, kNan, -1});
  expect_f32(eval(NodeOp::max, {}, {C(a), C(b)}), 0, {2, 2}, {3, 5, kNan, 0});
  expect_f32(eval(NodeOp::max, {}, {C(F({2}, {1, 2})), C(F({}, {kNan}))}), 0, {2}, {kNan, kNan});
  expect_error(eval(NodeOp::min, {}, {C(I({1}, {1})), C(F({1}, {1}))}), {"input 0 (a) must be f32"});
}

// ---- add, sub, mul, div --------------------------------------------------------------------------

TEST(HostOpsBinary, F32Broadcasting) {
  // (2,1) + (3) -> (2,3).
  expect_f32(eval(NodeOp::add, {}, {C(F({2, 1}, {1, 2})), C(F({3}, {10, 20, 30}))}), 0, {2, 3},
             {11, 21, 31, 12, 22, 32});
  // (2,1,2) + (3,1) -> (2,3,2): a = [[0 1]] [[2 3]], b = 10, 20, 30.
  expect_f32(eval(NodeOp::add, {}, {C(Ramp({2, 1, 2})), C(F({3, 1}, {10, 20, 30}))}), 0, {2, 3, 2},
             {10, 11, 20, 21, 30, 31, 12, 13, 22, 23, 32, 33});
  // Rank-0 scalars on either side.
  expect_f32(eval(NodeOp::sub, {}, {C(F({}, {1.5f})), C(F({2}, {1, 2}))}), 0, {2}, {0.5f, -0.5f});
  expect_f32(eval(NodeOp::mul, {}, {C(F({2}, {1, 2})), C(F({}, {-3}))}), 0, {2}, {-3, -6});
  expect_f32(eval(NodeOp::div, {}, {C(F({2}, {1, 3})), C(F({}, {4}))}), 0, {2}, {0.25f, 0.75f});
  expect_f32(eval(NodeOp::add, {}, {C(F({}, {1})), C(F({}, {2}))}), 0, {}, {3});
}

TEST(HostOpsBinary, I64ArithmeticTruncatesAndWraps) {
  expect_i64(eval(NodeOp::div, {}, {C(I({4}, {-7, 7, 7, -7})), C(I({4}, {2, -2, 2, -2}))}), 0, {4}, {-3, -3, 3, 3});
  expect_i64(eval(NodeOp::div, {}, {C(I({1}, {kI64Min})), C(I({1}, {-1}))}), 0, {1}, {kI64Min});
  expect_i64(eval(NodeOp::add, {}, {C(I({1}, {kI64Max})), C(I({1}, {1}))}), 0, {1}, {kI64Min});
  expect_i64(eval(NodeOp::mul, {}, {C(I({2, 1}, {2, 3})), C(I({2}, {4, 5}))}), 0, {2, 2}, {8, 10, 12, 15});
  expect_i64(eval(NodeOp::sub, {}, {C(I({}, {1})), C(I({3}, {1, 2, 3}))}), 0, {3}, {0, -1, -2});
}

TEST(HostOpsBinary, Errors) {
  const Eval z = eval(NodeOp::div, {}, {C(I({2}, {4, 6})), D(I({2}, {2, 0}))});
  expect_error(z, {"div 'Node_7': i64 division by zero"});
  EXPECT_FALSE(z.failed_in_infer);
  expect_error(eval(NodeOp::add, {}, {C(Ramp({2, 3})), C(Ramp({4}))}),
               {"add 'Node_7': input dims 2x3 and 4 do not broadcast"});
  expect_error(eval(NodeOp::mul, {}, {C(Ramp({2})), C(I({2}, {1, 2}))}),
               {"must both be f32 or both i64, not f32 and i64"});
  expect_error(eval(NodeOp::add, {}, {C(B({1}, {1})), C(B({1}, {1}))}), {"not bool and bool"});
}

// ---- conv_nd -------------------------------------------------------------------------------------

// Sums of products of small integers are exact in float.
TEST(HostOpsConvNd, ThreeDHandComputed) {
  // x (1,1,2,2,2) = 1..8, w all ones (1,1,2,2,2), bias 0.5: one output, 36 + 0.5.
  const Tensor x = Ramp({1, 1, 2, 2, 2}, 1.f);
  expect_f32(eval(NodeOp::conv_nd, {}, {C(x), C(F({1, 1, 2, 2, 2}, F32s(8, 1.f))), C(F({1}, {0.5f}))}), 0,
             {1, 1, 1, 1, 1}, {36.5f});
  // Two filters of shape (1,1,2) along W: [1, -1] gives x[d][h][0] - x[d][h][1] = -1; [2, 0]
  // gives 2 x[d][h][0] = 2, 6, 10, 14. y (1,2,2,2,1).
  expect_f32(eval(NodeOp::conv_nd, {}, {C(x), C(F({2, 1, 1, 1, 2}, {1, -1, 2, 0}))}), 0, {1, 2, 2, 2, 1},
             {-1, -1, -1, -1, 2, 6, 10, 14});
  // Padding and stride on W only: x (1,1,1,1,3) = [1 2 3], w [1 10], pads W 1/1 -> [0 1 2 3 0],
  // stride 2: windows at 0 and 2 give 0*1 + 1*10 = 10 and 2*1 + 3*10 = 32.
  expect_f32(eval(NodeOp::conv_nd, {{"strides", I64s{1, 1, 2}}, {"pads", I64s{0, 0, 1, 0, 0, 1}}},
                  {C(F({1, 1, 1, 1, 3}, {1, 2, 3})), C(F({1, 1, 1, 1, 2}, {1, 10}))}),
             0, {1, 1, 1, 1, 2}, {10, 32});
}

TEST(HostOpsConvNd, OneDDilation) {
  // x [1 2 3 4 5], w [1 1] dilated by 2: x[i] + x[i+2].
  expect_f32(eval(NodeOp::conv_nd, {{"dilations", I64s{2}}}, {C(Ramp({1, 1, 5}, 1.f)), C(F({1, 1, 2}, {1, 1}))}), 0,
             {1, 1, 3}, {4, 6, 8});
}

// Small deterministic values in [-1, 1).
F32s pseudo_random(std::size_t n, std::uint64_t seed) {
  check::Rng rng(seed);
  F32s v(n);
  for (float& x : v) x = rng.uniform(-1.f, 1.f);
  return v;
}

// The 2-D convolution straight from the definition, written out for (N, C, H, W) with no
// index helpers: y[n][k][p][q] = b[k] + sum x[n][g*Cg + c][p*sh - pt + r*dh][q*sw - pl + s*dw] * w[k][c][r][s].
F32s conv2d_reference(const F32s& x, const F32s& w, const F32s& b, int N, int C, int H, int W, int K, int R, int S,
                      int sh, int sw, int pt, int pl, int pb, int pr, int dh, int dw, int groups, int& P, int& Q) {
  P = (H + pt + pb - ((R - 1) * dh + 1)) / sh + 1;
  Q = (W + pl + pr - ((S - 1) * dw + 1)) / sw + 1;
  const int Cg = C / groups, Kg = K / groups;
  F32s y(static_cast<std::size_t>(N * K * P * Q));
  for (int n = 0; n < N; ++n)
    for (int k = 0; k < K; ++k)
      for (int p = 0; p < P; ++p)
        for (int q = 0; q < Q; ++q) {
          double acc = b[static_cast<std::size_t>(k)];
          for (int c = 0; c < Cg; ++c)
            for (int r = 0; r < R; ++r)
              for (int s = 0; s < S; ++s) {
                const int h = p * sh - pt + r * dh, ww = q * sw - pl + s * dw;
                if (h < 0 || h >= H || ww < 0 || ww >= W) continue;
                const int ci = (k / Kg) * Cg + c;
                acc += static_cast<double>(x[static_cast<std::size_t>(((n * C + ci) * H + h) * W + ww)]) *
                       w[static_cast<std::size_t>(((k * Cg + c) * R + r) * S + s)];
              }
          y[static_cast<std::size_t>(((n * K + k) * P + p) * Q + q)] = static_cast<float>(acc);
        }
  return y;
}

TEST(HostOpsConvNd, TwoDMatchesAReference) {
  // n2_c4_h5_w6_k6_r3_s2 with groups 2, strides (2,1), pads (1,0,0,1), dilations (1,2), bias.
  const int N = 2, Ch = 4, H = 5, W = 6, K = 6, R = 3, S = 2, G = 2;
  const F32s x = pseudo_random(N * Ch * H * W, 1), w = pseudo_random(K * (Ch / G) * R * S, 2), b = pseudo_random(K, 3);
  int P = 0, Q = 0;
  const F32s want = conv2d_reference(x, w, b, N, Ch, H, W, K, R, S, 2, 1, 1, 0, 0, 1, 1, 2, G, P, Q);
  ASSERT_EQ(P, 2);  // (5 + 1 - 3) / 2 + 1
  ASSERT_EQ(Q, 5);  // (6 + 1 - 3) / 1 + 1
  // 6 products of values in [-1, 1) per output, summed in float vs double.
  expect_f32(
      eval(NodeOp::conv_nd,
           {{"strides", I64s{2, 1}}, {"pads", I64s{1, 0, 0, 1}}, {"dilations", I64s{1, 2}}, {"group", std::int64_t{G}}},
           {C(F({N, Ch, H, W}, x)), C(F({K, Ch / G, R, S}, w)), C(F({K}, b))}),
      0, {N, K, P, Q}, want, {1e-6, 1e-5});
}

TEST(HostOpsConvNd, Errors) {
  const Tensor x = Ramp({1, 4, 3, 3});
  expect_error(eval(NodeOp::conv_nd, {{"group", std::int64_t{3}}}, {C(x), C(Ramp({3, 1, 1, 1}))}),
               {"input channels 4 are not divisible by group 3"});
  expect_error(eval(NodeOp::conv_nd, {{"group", std::int64_t{2}}}, {C(x), C(Ramp({2, 4, 1, 1}))}),
               {"has 4 channels per group"});
  expect_error(eval(NodeOp::conv_nd, {}, {C(x), C(Ramp({1, 4, 4, 1}))}), {"smaller than the dilated kernel 4"});
  expect_error(eval(NodeOp::conv_nd, {{"pads", I64s{1, 1}}}, {C(x), C(Ramp({1, 4, 1, 1}))}),
               {"pads 1,1 has 2 values for 2 spatial dims"});
  expect_error(eval(NodeOp::conv_nd, {}, {C(x), C(Ramp({2, 4, 1, 1})), C(Ramp({3}))}), {"b 3 must be (2)"});
  expect_error(eval(NodeOp::conv_nd, {{"strides", I64s{0, 1}}}, {C(x), C(Ramp({1, 4, 1, 1}))}), {"strides 0,1"});
}

// ---- pool_nd -------------------------------------------------------------------------------------

Attrs pool(const std::string& mode, I64s kernel, Attrs more = {}) {
  more["mode"] = mode;
  more["kernel_shape"] = std::move(kernel);
  return more;
}

TEST(HostOpsPoolNd, MaxWithIndices) {
  // x (1,1,3,3) = 1..9, 2x2 windows at stride 1: maxima at the bottom-right of each.
  const Eval e = eval(NodeOp::pool_nd, pool("max", {2, 2}), {C(Ramp({1, 1, 3, 3}, 1.f))}, 2);
  expect_f32(e, 0, {1, 1, 2, 2}, {5, 6, 8, 9});
  expect_i64(e, 1, {1, 1, 2, 2}, {4, 5, 7, 8});
  // Indices count through N and C: channel 1 of (1,2,3,3) starts at 9.
  const Eval c = eval(NodeOp::pool_nd, pool("max", {3, 3}), {C(Ramp({1, 2, 3, 3}))}, 2);
  expect_i64(c, 1, {1, 2, 1, 1}, {8, 17});
}

TEST(HostOpsPoolNd, CeilModeAndStorageOrder) {
  // x (1,1,4,4), x[h][w] = 4h + w + 1; 3x3 windows, stride 2. Floor mode: (4-3)/2+1 = 1 window per
  // dim; ceil mode: 2, the second starting at 2 (inside the input) and clipped to rows/cols 2..3.
  const Tensor x = Ramp({1, 1, 4, 4}, 1.f);
  const Attrs a = pool("max", {3, 3}, {{"strides", I64s{2, 2}}, {"ceil_mode", std::int64_t{1}}});
  const Eval e = eval(NodeOp::pool_nd, a, {C(x)}, 2);
  expect_f32(e, 0, {1, 1, 2, 2}, {11, 12, 15, 16});
  expect_i64(e, 1, {1, 1, 2, 2}, {10, 11, 14, 15});
  // storage_order 1: index = h + w * H.
  Attrs col = a;
  col["storage_order"] = std::int64_t{1};
  expect_i64(eval(NodeOp::pool_nd, col, {C(x)}, 2), 1, {1, 1, 2, 2}, {10, 14, 11, 15});
  expect_f32(eval(NodeOp::pool_nd, pool("max", {3, 3}, {{"strides", I64s{2, 2}}}), {C(x)}), 0, {1, 1, 1, 1}, {11});
}

TEST(HostOpsPoolNd, CeilModeDropsAWindowStartingInThePadding) {
  // in 5, kernel 2, stride 2, pads 1/1: ceil((7-2)/2)+1 = 4 windows, but the 4th would start at
  // padded 6 = in + pad_begin, past the input: 3 remain. Windows [pad,1] [2,3] [4,5].
  const Attrs a = pool("max", {2}, {{"strides", I64s{2}}, {"pads", I64s{1, 1}}, {"ceil_mode", std::int64_t{1}}});
  expect_f32(eval(NodeOp::pool_nd, a, {C(Ramp({1, 1, 5}, 1.f))}), 0, {1, 1, 3}, {1, 3, 5});
  // in 5, kernel 2, stride 2, no pads: the ceil window starts at 4, inside: [1,2] [3,4] [5].
  const Attrs b = pool("max", {2}, {{"strides", I64s{2}}, {"ceil_mode", std::int64_t{1}}});
  expect_f32(eval(NodeOp::pool_nd, b, {C(Ramp({1, 1, 5}, 1.f))}), 0, {1, 1, 3}, {2, 4, 5});
  Attrs avg = b;
  avg["mode"] = std::string("avg");
  expect_f32(eval(NodeOp::pool_nd, avg, {C(Ramp({1, 1, 5}, 1.f))}), 0, {1, 1, 3}, {1.5f, 3.5f, 5});
}

TEST(HostOpsPoolNd, CountIncludePad) {
  // x [1 2 3 4], kernel 3, pads 1/1: windows [p 1 2] [1 2 3] [2 3 4] [3 4 p].
  const Tensor x = Ramp({1, 1, 4}, 1.f);
  expect_f32(
      eval(NodeOp::pool_nd, pool("avg", {3}, {{"pads", I64s{1, 1}}, {"count_include_pad", std::int64_t{1}}}), {C(x)}),
      0, {1, 1, 4}, {1, 2, 3, 7.f / 3.f}, {0, 1e-6});
  expect_f32(eval(NodeOp::pool_nd, pool("avg", {3}, {{"pads", I64s{1, 1}}}), {C(x)}), 0, {1, 1, 4}, {1.5f, 2, 3, 3.5f},
             {0, 1e-6});
  // Ceil mode past the padded end: in 5, kernel 3, stride 2, pads 0/1. Windows [1 2 3] [3 4 5]
  // and [5 p -]: the last counts 2 positions with count_include_pad (the one past the padded end
  // does not count), 1 without.
  const Attrs c = pool("avg", {3}, {{"strides", I64s{2}}, {"pads", I64s{0, 1}}, {"ceil_mode", std::int64_t{1}}});
  Attrs ci = c;
  ci["count_include_pad"] = std::int64_t{1};
  expect_f32(eval(NodeOp::pool_nd, ci, {C(Ramp({1, 1, 5}, 1.f))}), 0, {1, 1, 3}, {2, 4, 2.5f});
  expect_f32(eval(NodeOp::pool_nd, c, {C(Ramp({1, 1, 5}, 1.f))}), 0, {1, 1, 3}, {2, 4, 5});
}

TEST(HostOpsPoolNd, MaxPropagatesNaN) {
  const Eval e = eval(NodeOp::pool_nd, pool("max", {2}, {{"strides", I64s{2}}}), {C(F({1, 1, 4}, {1, kNan, 3, 2}))}, 2);
  expect_f32(e, 0, {1, 1, 2}, {kNan, 3});
  expect_i64(e, 1, {1, 1, 2}, {1, 2});
}

TEST(HostOpsPoolNd, ThreeD) {
  const Tensor x = Ramp({1, 1, 2, 2, 2}, 1.f);
  const Eval m = eval(NodeOp::pool_nd, pool("max", {2, 2, 2}), {C(x)}, 2);
  expect_f32(m, 0, {1, 1, 1, 1, 1}, {8});
  expect_i64(m, 1, {1, 1, 1, 1, 1}, {7});
  expect_f32(eval(NodeOp::pool_nd, pool("avg", {2, 2, 2}), {C(x)}), 0, {1, 1, 1, 1, 1}, {4.5f});
  // Dilation 2 along W of (1,1,1,1,3): taps 0 and 2.
  expect_f32(
      eval(NodeOp::pool_nd, pool("avg", {1, 1, 2}, {{"dilations", I64s{1, 1, 2}}}), {C(Ramp({1, 1, 1, 1, 3}, 1.f))}), 0,
      {1, 1, 1, 1, 1}, {2});
}

TEST(HostOpsPoolNd, Errors) {
  const Tensor x = Ramp({1, 1, 3, 3});
  expect_error(eval(NodeOp::pool_nd, pool("avg", {2, 2}), {C(x)}, 2), {"mode avg has no indices output"});
  expect_error(eval(NodeOp::pool_nd, pool("min", {2, 2}), {C(x)}), {"mode 'min' is not max or avg"});
  expect_error(eval(NodeOp::pool_nd, {{"mode", std::string("max")}}, {C(x)}), {"needs a kernel_shape"});
  expect_error(eval(NodeOp::pool_nd, pool("max", {2}), {C(x)}), {"kernel_shape 2 has 1 values for 2 spatial dims"});
  expect_error(eval(NodeOp::pool_nd, pool("max", {4, 4}), {C(x)}), {"smaller than the dilated kernel 4"});
  expect_error(eval(NodeOp::pool_nd, pool("max", {2, 2}), {C(Ramp({3, 3}))}), {"needs rank >= 3"});
}

// ---- layernorm_stats -----------------------------------------------------------------------------

TEST(HostOpsLayernormStats, MeanAndInvStdDev) {
  // Rows [1 2 3] and [2 4 6]: means 2 and 4, population variances 2/3 and 8/3; epsilon 0.
  const Tensor x = F({2, 3}, {1, 2, 3, 2, 4, 6});
  const Eval e = eval(NodeOp::layernorm_stats, {{"epsilon", 0.f}}, {C(x)}, 2);
  expect_f32(e, 0, {2, 1}, {2, 4}, {0, 1e-6});
  expect_f32(e, 1, {2, 1}, {1.22474487f, 0.61237244f}, {0, 1e-6});
  // axis 0 covers everything: mean 3, variance 16/6; default epsilon 1e-5.
  const Eval all = eval(NodeOp::layernorm_stats, {{"axis", std::int64_t{0}}}, {C(x)}, 2);
  expect_f32(all, 0, {1, 1}, {3}, {0, 1e-6});
  expect_f32(all, 1, {1, 1}, {static_cast<float>(1.0 / std::sqrt(16.0 / 6.0 + 1e-5))}, {0, 1e-6});
  // Mean only, 3-D with axis -2: (2,2,2) = 0..7 -> means of each 4-element half.
  expect_f32(eval(NodeOp::layernorm_stats, {{"axis", std::int64_t{-2}}}, {C(Ramp({2, 2, 2}))}), 0, {2, 1, 1},
             {1.5f, 5.5f}, {0, 1e-6});
  expect_error(eval(NodeOp::layernorm_stats, {{"axis", std::int64_t{2}}}, {C(x)}), {"axis 2 is out of range"});
}

}  // namespace
}  // namespace opfuse::runtime
