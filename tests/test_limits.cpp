// tests/test_limits.cpp - resource limits: what a hostile, absurd or merely pathological model or
// op costs before it fails, and what its failure says.
//
// opfuse reads ONNX files from strangers. A file of a few hundred bytes can ask for an Expand
// to 2^40 elements, a ConstantOfShape of a trillion floats, dims whose product overflows int64,
// a MaxPool padded by a billion, or a MatMul of two constants that would take minutes to fold
// at load time. Each case here builds such a model in memory and checks three things: the
// status code (out_of_memory past a memory budget, invalid_argument for sizes no budget could
// hold, unsupported for ops opfuse does not run), that the message names the node, the
// parameter and the value, and that the answer comes quickly - every size is checked before
// anything is allocated or computed. The long-chain test is the other half: a valid model of
// 20,000 nodes must load, compile at every fusion level and run without a recursion deep
// enough to overflow the stack and without a pass quadratic in the node count; it prints the
// time of each phase.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <onnx/onnx_pb.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <fstream>
#include <string>
#include <vector>

#include "model_builder.hpp"
#include "opfuse/model.hpp"
#include "opfuse/primitive.hpp"
#include "sanitized.hpp"

namespace {

using namespace opfuse;
using opfuse::testing::ModelBuilder;
using Clock = std::chrono::steady_clock;

using opfuse::testing::kSanitizerSlowdown;

// Every hostile case must fail within this (it should take milliseconds: nothing is allocated
// or computed at the hostile size).
constexpr double kQuickSeconds = 1.0 * kSanitizerSlowdown;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

void i64_init(ModelBuilder& b, const std::string& name, std::vector<std::int64_t> dims, std::vector<std::int64_t> v) {
  auto* t = b.m.mutable_graph()->add_initializer();
  t->set_name(name);
  t->set_data_type(::onnx::TensorProto::INT64);
  for (auto d : dims) t->add_dims(d);
  for (auto x : v) t->add_int64_data(x);
}
void attr_ints(::onnx::NodeProto* n, const std::string& name, const std::vector<std::int64_t>& v) {
  auto* a = n->add_attribute();
  a->set_name(name);
  a->set_type(::onnx::AttributeProto::INTS);
  for (auto x : v) a->add_ints(x);
}
void attr_int(::onnx::NodeProto* n, const std::string& name, std::int64_t v) {
  auto* a = n->add_attribute();
  a->set_name(name);
  a->set_type(::onnx::AttributeProto::INT);
  a->set_i(v);
}
// ConstantOfShape's value: a one-element FLOAT tensor.
void attr_value(::onnx::NodeProto* n, float v) {
  auto* a = n->add_attribute();
  a->set_name("value");
  a->set_type(::onnx::AttributeProto::TENSOR);
  a->mutable_t()->set_data_type(::onnx::TensorProto::FLOAT);
  a->mutable_t()->add_dims(1);
  a->mutable_t()->add_float_data(v);
}
// A graph output with an element type and no shape: ONNX's inference fills it in, so a
// pathological size is opfuse's to refuse, not a mismatch with a declared one.
void output_any(ModelBuilder& b, const std::string& name, int type = ::onnx::TensorProto::FLOAT) {
  auto* v = b.m.mutable_graph()->add_output();
  v->set_name(name);
  v->mutable_type()->mutable_tensor_type()->set_elem_type(type);
}

// Load + compile (a model with static inputs specializes at compile, so its size errors show
// there): the first error, or ok; `secs` is how long it took.
Status load_and_compile(const std::string& bytes, double& secs, const CompileOptions& co = {}) {
  const auto t0 = Clock::now();
  auto m = Model::load_memory(bytes.data(), bytes.size());
  Status s = m ? Plan::compile(*m, co).status() : m.status();
  secs = seconds_since(t0);
  return s;
}

void expect_error(const Status& s, StatusCode code, const std::vector<std::string>& parts) {
  ASSERT_FALSE(s.is_ok()) << "expected " << to_string(code);
  EXPECT_EQ(s.code(), code) << s.to_string();
  for (const std::string& p : parts)
    EXPECT_NE(s.message().find(p), std::string::npos) << "no '" << p << "' in " << s.message();
}

// The model in `b` fails at load or compile with `code` and a message holding `parts`, quickly.
void expect_quick_error(const ModelBuilder& b, StatusCode code, const std::vector<std::string>& parts,
                        const CompileOptions& co = {}) {
  double secs = 0;
  const Status s = load_and_compile(b.bytes(), secs, co);
  expect_error(s, code, parts);
  EXPECT_LT(secs, kQuickSeconds) << s.to_string();
}

// Peak resident memory of this process since the last reset_peak_rss(), in bytes; 0 where
// Linux does not report it.
void reset_peak_rss() { std::ofstream("/proc/self/clear_refs") << "5"; }
std::uint64_t peak_rss() {
  std::ifstream f("/proc/self/status");
  for (std::string line; std::getline(f, line);)
    if (line.rfind("VmHWM:", 0) == 0) return std::stoull(line.substr(6)) * 1024;
  return 0;
}

// ---- sizes past the memory budget ------------------------------------------------------------

// A legal Expand of a one-element input to 2^20 x 2^20 (4 TiB of floats): refused while
// inferring shapes, naming the node, its output and the bytes, before any arena is sized.
TEST(LimitsBudget, ExpandTo2Pow40ElementsIsOutOfMemoryUpFront) {
  ModelBuilder b;
  b.input("x", {1});
  i64_init(b, "shape", {2}, {std::int64_t{1} << 20, std::int64_t{1} << 20});
  b.node("Expand", {"x", "shape"}, {"y"})->set_name("big_expand");
  output_any(b, "y");
  expect_quick_error(b, StatusCode::out_of_memory,
                     {"node 'big_expand' (expand)", "output 'y'", "1048576x1048576", "4398046511104 bytes",
                      "memory budget of 17179869184 bytes"});
}

// ConstantOfShape [1e6, 1e6] has only constant inputs: folding it at load would allocate 4 TB.
// It is too large to fold, so it stays a node, and the plan refuses it by the budget.
TEST(LimitsBudget, ConstantOfShapeOf1e6By1e6IsOutOfMemoryUpFront) {
  ModelBuilder b;
  i64_init(b, "shape", {2}, {1000000, 1000000});
  b.node("ConstantOfShape", {"shape"}, {"y"})->set_name("huge_fill");
  output_any(b, "y");
  expect_quick_error(b, StatusCode::out_of_memory,
                     {"node 'huge_fill' (constant_of_shape)", "1000000x1000000", "4000000000000 bytes"});
}

// The budget is the plan's: a smaller one refuses a smaller value, naming the same things.
TEST(LimitsBudget, TheCompileBudgetIsTheLimit) {
  ModelBuilder b;
  b.input("x", {1});
  i64_init(b, "shape", {2}, {1024, 1024});
  b.node("Expand", {"x", "shape"}, {"y"})->set_name("mid_expand");
  output_any(b, "y");
  CompileOptions co;
  co.memory_budget = 1u << 20;  // 1 MiB; the output alone is 4 MiB
  expect_quick_error(b, StatusCode::out_of_memory,
                     {"node 'mid_expand' (expand)", "1024x1024", "4194304 bytes", "memory budget of 1048576 bytes"},
                     co);
  double secs = 0;
  EXPECT_TRUE(load_and_compile(b.bytes(), secs).is_ok()) << "the default budget holds 4 MiB";
}

// ---- sizes no budget could hold: overflow ----------------------------------------------------

TEST(LimitsOverflow, InputDimsWhoseProductOverflowsInt64) {
  ModelBuilder b;
  b.input("x", {std::int64_t{1} << 32, std::int64_t{1} << 32});
  b.node("Relu", {"x"}, {"y"})->set_name("relu_of_huge");
  output_any(b, "y");
  expect_quick_error(b, StatusCode::invalid_argument, {"relu_of_huge", "input 'x'", "4294967296x4294967296"});
}

TEST(LimitsOverflow, MatMulOutputWhoseByteSizeOverflows) {
  ModelBuilder b;
  b.input("a", {std::int64_t{1} << 31, 1});
  b.input("b", {1, std::int64_t{1} << 31});
  b.node("MatMul", {"a", "b"}, {"y"})->set_name("outer");
  output_any(b, "y");
  expect_quick_error(b, StatusCode::invalid_argument,
                     {"node 'outer' (matmul)", "output 'y'", "2147483648x2147483648", "overflows"});
}

TEST(LimitsOverflow, ReshapeTargetWhoseProductOverflows) {
  ModelBuilder b;
  b.input("x", {2, 3});
  i64_init(b, "shape", {3}, {std::int64_t{1} << 32, std::int64_t{1} << 32, 4});
  b.node("Reshape", {"x", "shape"}, {"y"})->set_name("reshape_big");
  output_any(b, "y");
  expect_quick_error(b, StatusCode::invalid_argument, {"reshape_big", "4294967296,4294967296,4", "overflows int64"});
}

TEST(LimitsOverflow, ExpandShapeWhoseProductOverflows) {
  ModelBuilder b;
  b.input("x", {1});
  i64_init(b, "shape", {2}, {std::int64_t{1} << 40, std::int64_t{1} << 40});
  b.node("Expand", {"x", "shape"}, {"y"})->set_name("expand_overflow");
  output_any(b, "y");
  expect_quick_error(b, StatusCode::invalid_argument, {"expand_overflow", "1099511627776x1099511627776"});
}

// ---- reshape's 0 and -1 ----------------------------------------------------------------------

TEST(LimitsReshape, ZeroCopiesADimAndMinusOneTakesTheRest) {
  ModelBuilder b;
  b.input("x", {2, 3, 4});
  i64_init(b, "shape", {2}, {0, -1});
  b.node("Reshape", {"x", "shape"}, {"y"})->set_name("r");
  output_any(b, "y");
  const std::string bytes = b.bytes();
  auto m = Model::load_memory(bytes.data(), bytes.size());
  ASSERT_TRUE(m) << m.status().to_string();
  auto plan = Plan::compile(*m);
  ASSERT_TRUE(plan) << plan.status().to_string();
  std::vector<float> x(24);
  for (int i = 0; i < 24; ++i) x[static_cast<std::size_t>(i)] = static_cast<float>(i);
  const TensorRef in{"x", ElementType::f32, {2, 3, 4}, x.data()};
  auto out = plan->run({&in, 1});
  ASSERT_TRUE(out) << out.status().to_string();
  EXPECT_EQ((*out)[0].dims, (std::vector<std::int64_t>{2, 12}));
  EXPECT_EQ((*out)[0].f32, x);
}

TEST(LimitsReshape, AmbiguousZeroAndMinusOneMixesAreInvalid) {
  struct Case {
    std::vector<std::int64_t> data, shape;
    bool allowzero;
    std::vector<std::string> parts;
  };
  const std::vector<Case> cases = {
      {{2, 3, 4}, {-1, -1}, false, {"shape -1,-1", "more than one -1"}},
      {{2, 3, 4}, {0, -1}, true, {"shape 0,-1", "both 0 and -1"}},
      {{0, 3}, {0, -1}, false, {"shape 0,-1", "cannot take the 0 elements"}},  // -1 of 0 elements
      {{2, 3}, {2, 0, 0}, false, {"shape 2,0,0", "copies dim 2", "2x3"}},
      {{2, 3}, {-2, 3}, false, {"shape -2,3", "negative dim -2"}},
  };
  for (const Case& c : cases) {
    ModelBuilder b;
    b.input("x", c.data);
    i64_init(b, "shape", {static_cast<std::int64_t>(c.shape.size())}, c.shape);
    auto* n = b.node("Reshape", {"x", "shape"}, {"y"});
    n->set_name("ambiguous");
    if (c.allowzero) attr_int(n, "allowzero", 1);
    output_any(b, "y");
    std::vector<std::string> parts = c.parts;
    parts.emplace_back("ambiguous");
    // ONNX's shape inference may get there first for some; either way the file is invalid.
    double secs = 0;
    const Status s = load_and_compile(b.bytes(), secs);
    ASSERT_FALSE(s.is_ok()) << fmt::format("{}", fmt::join(c.shape, ","));
    EXPECT_EQ(s.code(), StatusCode::invalid_argument) << s.to_string();
    EXPECT_NE(s.message().find("ambiguous"), std::string::npos) << s.message();
    if (s.message().find("onnx:") == std::string::npos) {
      for (const std::string& p : parts) EXPECT_NE(s.message().find(p), std::string::npos) << s.message();
    }
    EXPECT_LT(secs, kQuickSeconds);
  }
}

// ---- windows -----------------------------------------------------------------------------------

TEST(LimitsWindows, ConvKernelFarLargerThanItsInput) {
  ModelBuilder b;
  b.input("x", {1, 1, 4, 4});
  b.weight("w", {1, 1, 100, 100}, 0.5f);
  b.node("Conv", {"x", "w"}, {"y"})->set_name("wide_conv");
  output_any(b, "y");
  expect_quick_error(b, StatusCode::invalid_argument, {"wide_conv", "100"});
}

TEST(LimitsWindows, ConvNdKernelFarLargerThanItsInput) {
  ModelBuilder b;
  b.input("x", {1, 1, 4, 4, 4});
  b.weight("w", {1, 1, 3, 3, 90}, 0.5f);
  b.node("Conv", {"x", "w"}, {"y"})->set_name("wide_conv3d");
  output_any(b, "y");
  expect_quick_error(b, StatusCode::invalid_argument, {"wide_conv3d", "90"});
}

// Pads of 1e9 make a legal window whose output (2e9 x 2e9) no buffer can address.
TEST(LimitsWindows, MaxPoolWithBillionPads) {
  ModelBuilder b;
  b.input("x", {1, 1, 4, 4});
  auto* n = b.node("MaxPool", {"x"}, {"y"});
  n->set_name("padded_pool");
  attr_ints(n, "kernel_shape", {2, 2});
  attr_ints(n, "pads", {1000000000, 1000000000, 1000000000, 1000000000});
  output_any(b, "y");
  expect_quick_error(b, StatusCode::invalid_argument, {"padded_pool", "2000000003"});
}

// ---- ops opfuse does not run ---------------------------------------------------------------------

TEST(LimitsUnsupported, RangeOf1e12IsUnsupportedBeforeAnythingIsSized) {
  ModelBuilder b;
  i64_init(b, "start", {}, {0});
  i64_init(b, "limit", {}, {1000000000000});
  i64_init(b, "delta", {}, {1});
  b.node("Range", {"start", "limit", "delta"}, {"y"})->set_name("long_range");
  output_any(b, "y", ::onnx::TensorProto::INT64);
  expect_quick_error(b, StatusCode::unsupported, {"node 'long_range' (Range"});
}

// Subgraphs (If, Loop) nest through attributes. protobuf refuses a message nested past its
// recursion limit while parsing, so a deep nest cannot reach a recursive walk; a shallow one
// reaches the importer, which does not run control flow.
TEST(LimitsUnsupported, NestedSubgraphsAreRefusedWithoutDeepRecursion) {
  const auto nested = [](int depth) {
    ModelBuilder b;
    b.input("c", {1}, ::onnx::TensorProto::BOOL);
    ::onnx::GraphProto* g = b.m.mutable_graph();
    const std::string cond = "c";
    for (int i = 0; i < depth; ++i) {
      auto* n = g->add_node();
      n->set_op_type("If");
      n->set_name(fmt::format("if{}", i));
      n->add_input(cond);
      n->add_output(fmt::format("o{}", i));
      for (const char* branch : {"then_branch", "else_branch"}) {
        auto* a = n->add_attribute();
        a->set_name(branch);
        a->set_type(::onnx::AttributeProto::GRAPH);
        a->mutable_g()->set_name(fmt::format("{}{}", branch, i));
      }
      if (i == 0) output_any(b, "o0");
      g = n->mutable_attribute(0)->mutable_g();
    }
    return b;
  };
  {
    double secs = 0;
    const Status s = load_and_compile(nested(1000).bytes(), secs);
    expect_error(s, StatusCode::invalid_argument, {"cannot parse"});
    EXPECT_LT(secs, kQuickSeconds);
  }
  {
    double secs = 0;
    const Status s = load_and_compile(nested(3).bytes(), secs);
    expect_error(s, StatusCode::unsupported, {"node 'if0' (If"});
    EXPECT_LT(secs, kQuickSeconds);
  }
}

// ---- constant folding at load time -----------------------------------------------------------

// A MatMul of two ConstantOfShape 1024 x 1024 matrices: 2 GFLOP to fold naively. It stays a node
// (the fold work limit), so loading is quick, and the plan computes it with its gemm kernels.
TEST(LimitsFolding, CostlyConstantMatMulIsNotFoldedAtLoad) {
  ModelBuilder b;
  b.input("x", {1024, 1024});
  i64_init(b, "shape", {2}, {1024, 1024});
  attr_value(b.node("ConstantOfShape", {"shape"}, {"c0"}), 1.f);
  attr_value(b.node("ConstantOfShape", {"shape"}, {"c1"}), 0.5f);
  b.node("MatMul", {"c0", "c1"}, {"m"})->set_name("const_matmul");
  b.node("Add", {"x", "m"}, {"y"});
  output_any(b, "y");
  const std::string bytes = b.bytes();
  const auto t0 = Clock::now();
  auto m = Model::load_memory(bytes.data(), bytes.size());
  const double load_s = seconds_since(t0);
  ASSERT_TRUE(m) << m.status().to_string();
  EXPECT_LT(load_s, kQuickSeconds);
  EXPECT_NE(m->dump_graph().find("const_matmul"), std::string::npos) << "the matmul was folded";
  auto plan = Plan::compile(*m);
  ASSERT_TRUE(plan) << plan.status().to_string();
  std::vector<float> x(1024 * 1024, 1.f);
  const TensorRef in{"x", ElementType::f32, {1024, 1024}, x.data()};
  auto out = plan->run({&in, 1});
  ASSERT_TRUE(out) << out.status().to_string();
  for (float v : (*out)[0].f32) ASSERT_EQ(v, 513.f);  // 1 + 1024 * (1 * 0.5)
}

// A hundred ConstantOfShape + Add pairs of 8M floats each (32 MiB a result): a model of a few
// kilobytes whose folding would hold over 3 GiB of constants. Past the fold budget of one pass
// (256 MiB) the results stay nodes; the load stays fast and small.
TEST(LimitsFolding, ManyLargeFoldsStopAtTheFoldBudget) {
  ModelBuilder b;
  constexpr std::int64_t kN = 8 << 20;
  i64_init(b, "shape", {1}, {kN});
  std::string prev;
  for (int i = 0; i < 100; ++i) {
    const std::string c = fmt::format("c{}", i), s = fmt::format("s{}", i);
    attr_value(b.node("ConstantOfShape", {"shape"}, {c}), 1.f);
    if (prev.empty()) {
      prev = c;
      continue;
    }
    b.node("Add", {prev, c}, {s});
    prev = s;
  }
  b.input("x", {kN});
  b.node("Add", {"x", prev}, {"y"});
  output_any(b, "y");
  const std::string bytes = b.bytes();
  reset_peak_rss();
  const std::uint64_t rss0 = peak_rss();
  const auto t0 = Clock::now();
  auto m = Model::load_memory(bytes.data(), bytes.size());
  const double secs = seconds_since(t0);
  const std::uint64_t rss1 = peak_rss();
  ASSERT_TRUE(m) << m.status().to_string();
  std::printf("[ limits   ] 100 x 32 MiB folds: load %.3f s, peak RSS grew %.0f MiB\n", secs,
              static_cast<double>(rss1 - rss0) / (1 << 20));
  EXPECT_LT(secs, 2.0 * kSanitizerSlowdown);
  if (rss0 > 0) {
    EXPECT_LT(rss1 - rss0, std::uint64_t{512} << 20) << "folding held more than its budget";
  }
}

// ---- the single-op API's memory budget ------------------------------------------------------------

// Naive attention keeps one head's (Sq, Skv) score matrix: at Sq = Skv = 2^17 that is a 64 GiB
// workspace, refused by the context's budget before anything is allocated.
TEST(LimitsContext, WorkspaceOverTheBudgetIsOutOfMemoryNamingTheOpAndBytes) {
  const Shape q{1, 1, std::int64_t{1} << 17, 1};
  OpDesc d{OpKind::attention, AttentionParams{}, {TensorDesc{q}, TensorDesc{q}, TensorDesc{q}}};
  Context ctx;
  ctx.stage = Stage::naive;
  const auto t0 = Clock::now();
  auto prim = prepare(d, ctx);
  EXPECT_LT(seconds_since(t0), kQuickSeconds);
  expect_error(prim.status(), StatusCode::out_of_memory,
               {"attention", "attention__naive", "68719476736 bytes", "memory budget of 17179869184 bytes"});
  // Without its own workspace prepare allocates none: the caller lends one at execute.
  ctx.own_workspace = false;
  auto lent = prepare(d, ctx);
  ASSERT_TRUE(lent) << lent.status().to_string();
  EXPECT_EQ(lent->workspace_size(), std::size_t{1} << 34);
}

// The single-op API bounds window parameters outright: a pad of 1e9 is no real convolution, and
// the index arithmetic of every kernel stays far from overflow.
TEST(LimitsContext, BillionPadsOfASingleConvAreInvalid) {
  Conv2dParams p;
  p.pad_top = p.pad_bottom = 1000000000;
  OpDesc d{OpKind::conv2d, p, {TensorDesc{Shape{1, 1, 4, 4}}, TensorDesc{Shape{1, 1, 2, 2}}}};
  expect_error(prepare(d).status(), StatusCode::invalid_argument,
               {"conv2d", "along h exceed 16777216", "padding (1000000000, 1000000000)"});
}

TEST(LimitsContext, PackedConstantsCountAgainstTheBudget) {
  auto a = Tensor::create({64, 512}).value();
  auto w = Tensor::create({512, 512}).value();  // 1 MiB, packed at prepare by the simd gemm
  OpDesc d{OpKind::gemm, GemmParams{}, {a.desc(), w.desc()}};
  const Tensor* constants[] = {nullptr, &w};
  Context ctx;
  ctx.stage = Stage::simd;
  ctx.memory_budget = 64u << 10;  // 64 KiB
  const KernelDef* k = select_kernel(d, ctx);
  ASSERT_NE(k, nullptr);
  auto prim = prepare(d, ctx, constants);
  if (k->prepare) {
    expect_error(prim.status(), StatusCode::out_of_memory, {"gemm", std::string(k->name), "memory budget of 65536"});
  } else {
    EXPECT_TRUE(prim) << "kernel " << k->name << " packs nothing: " << prim.status().to_string();
  }
  ctx.memory_budget = UINT64_MAX;  // no limit
  auto ok = prepare(d, ctx, constants);
  EXPECT_TRUE(ok) << ok.status().to_string();
}

// ---- a 20,000-node chain ------------------------------------------------------------------

// Relu, Add(+c), Relu, Add(+c), ...: 20,000 nodes deep. A recursive walk anywhere (sort, dead
// code, pattern matching, shape inference, printer, DOT, ONNX export) would overflow the stack;
// a pass quadratic in the node count would take minutes. The output is checked against the
// same steps run in a scalar loop.
TEST(LimitsGraph, ChainOf20000NodesLoadsCompilesAndRunsAtEveryFusionLevel) {
  constexpr int kNodes = 20000;
  constexpr float kC = 1.f / 1024;  // exact in float: every partial sum is exact too
  ModelBuilder b;
  b.input("x", {4, 64});
  b.weight("c", {1}, kC);
  std::string prev = "x";
  for (int i = 0; i < kNodes; ++i) {
    const std::string out = i + 1 == kNodes ? "y" : fmt::format("v{}", i);
    if (i % 2 == 0)
      b.node("Relu", {prev}, {out});
    else
      b.node("Add", {prev, "c"}, {out});
    prev = out;
  }
  b.output("y", {4, 64});
  const std::string bytes = b.bytes();

  std::vector<float> x(256), want(256);
  for (int i = 0; i < 256; ++i) x[static_cast<std::size_t>(i)] = static_cast<float>(i - 128) / 16.f;
  for (int i = 0; i < 256; ++i) {
    float v = x[static_cast<std::size_t>(i)];
    for (int k = 0; k < kNodes; ++k) v = k % 2 == 0 ? std::max(v, 0.f) : v + kC;
    want[static_cast<std::size_t>(i)] = v;
  }

  auto t0 = Clock::now();
  auto m = Model::load_memory(bytes.data(), bytes.size());
  const double load_s = seconds_since(t0);
  ASSERT_TRUE(m) << m.status().to_string();
  EXPECT_EQ(m->node_count(), kNodes);
  std::printf("[ limits   ] %d-node chain: load %.3f s\n", kNodes, load_s);
  EXPECT_LT(load_s, 10.0);
  t0 = Clock::now();
  EXPECT_FALSE(m->dump_graph().empty());
  const double dump_s = seconds_since(t0);
  EXPECT_LT(dump_s, 10.0);

  for (FusionLevel level : {FusionLevel::none, FusionLevel::basic, FusionLevel::advanced, FusionLevel::full}) {
    CompileOptions co;
    co.fusion = level;
    co.threads = 1;
    t0 = Clock::now();
    auto plan = Plan::compile(*m, co);
    const double compile_s = seconds_since(t0);
    ASSERT_TRUE(plan) << fusion_level_name(level) << ": " << plan.status().to_string();
    const TensorRef in{"x", ElementType::f32, {4, 64}, x.data()};
    t0 = Clock::now();
    auto out = plan->run({&in, 1});
    const double run_s = seconds_since(t0);
    ASSERT_TRUE(out) << fusion_level_name(level) << ": " << out.status().to_string();
    for (std::size_t i = 0; i < want.size(); ++i)
      ASSERT_NEAR((*out)[0].f32[i], want[i], 1e-4f * (1 + std::fabs(want[i])))
          << fusion_level_name(level) << " element " << i;
    t0 = Clock::now();
    const std::string dot = plan->fused_graph_dot();
    auto onnx = plan->optimized_model();
    const double export_s = seconds_since(t0);
    EXPECT_FALSE(dot.empty());
    EXPECT_TRUE(onnx) << onnx.status().to_string();
    std::printf("[ limits   ] fusion %-8s compile %.3f s, first run %.3f s, %d nodes after fusion, dot+onnx %.3f s\n",
                std::string(fusion_level_name(level)).c_str(), compile_s, run_s, plan->nodes_after_fusion(), export_s);
    EXPECT_LT(compile_s, 20.0) << fusion_level_name(level);
    EXPECT_LT(export_s, 10.0) << fusion_level_name(level);
  }
}

}  // namespace
