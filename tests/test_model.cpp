// tests/test_model.cpp - the model runtime: built-in models at every stage, dynamic shapes,
// layout and memory planning, no allocation per run, and the bad inputs of the Model/Plan API.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <onnx/onnx_pb.h>

#include <atomic>
#include <cstdlib>
#include <new>
#include <random>
#include <set>
#include <string>

#include "alloc_counter.hpp"
#include "check/check.hpp"
#include "model_builder.hpp"
#include "opfuse/model.hpp"
#include "src/graph/ir.hpp"

namespace {

using namespace opfuse;
using opfuse::testing::ModelBuilder;
using opfuse::testing::random_inputs;
using opfuse::testing::refs_of;

Result<std::vector<TensorData>> run_model(const Model& m, Stage stage, const std::vector<TensorData>& in,
                                          int threads = 2) {
  CompileOptions co;
  co.stage = stage;
  co.threads = threads;
  auto plan = Plan::compile(m, co);
  if (!plan) return plan.status();
  return plan->run(refs_of(in));
}

void expect_close(const std::vector<TensorData>& out, const std::vector<TensorData>& ref, const std::string& what) {
  ASSERT_EQ(out.size(), ref.size()) << what;
  for (std::size_t i = 0; i < out.size(); ++i) {
    const check::OutputCheck c = opfuse::testing::compare_deep(out[i], ref[i]);
    EXPECT_TRUE(c.ok) << what << " output " << i << ": " << c.reason << " (max abs " << c.max_abs << ")";
  }
}

class ModelStages : public ::testing::TestWithParam<std::string> {};

TEST_P(ModelStages, EveryStageAgreesWithNaive) {
  auto m = Model::load_builtin(GetParam());
  ASSERT_TRUE(m) << m.status().to_string();
  const auto in = random_inputs(*m, {{"batch", 1}, {"seq", 128}}, 7);
  auto ref = run_model(*m, Stage::naive, in);
  ASSERT_TRUE(ref) << ref.status().to_string();
  for (const TensorData& t : *ref)
    for (float x : t.f32) ASSERT_TRUE(std::isfinite(x)) << GetParam() << " naive output is not finite";
  for (Stage s : {Stage::simd, Stage::fused}) {
    auto out = run_model(*m, s, in);
    ASSERT_TRUE(out) << out.status().to_string();
    expect_close(*out, *ref, fmt::format("{} {}", GetParam(), stage_name(s)));
  }
}

INSTANTIATE_TEST_SUITE_P(Builtin, ModelStages, ::testing::Values("resnet50", "mobilenet_v2", "bert_layer"));

TEST(ModelPlan, ResnetKeepsNhwcBetweenConvolutions) {
  auto m = Model::load_builtin("resnet50");
  ASSERT_TRUE(m);
  CompileOptions co;
  co.stage = Stage::simd;
  co.threads = 1;
  co.fusion = FusionLevel::none;  // the graph as imported: its weights are the model's own
  auto plan = Plan::compile(*m, co);
  ASSERT_TRUE(plan) << plan.status().to_string();
  const std::string g = plan->dump_graph();
  // Exactly two conversions: the input to NHWC before the stem, and the pooled (N, C, 1, 1)
  // back to NCHW for flatten (a view: those bytes are the same in both layouts).
  std::size_t count = 0;
  for (std::size_t p = g.find(" layout_convert "); p != std::string::npos; p = g.find(" layout_convert ", p + 1))
    ++count;
  EXPECT_EQ(count, 2u) << g;
  EXPECT_NE(g.find("input.nhwc"), std::string::npos) << g;
  // The arena is reused: far below the sum of all activations (~110 MB for ResNet-50).
  EXPECT_GT(plan->arena_bytes(), 0u);
  EXPECT_LT(plan->arena_bytes(), 30u << 20) << plan->arena_bytes();
  // Weights: torchvision's 25,557,032 parameters (BN gamma and beta among them: 53,120) plus
  // the BN running means and variances (another 53,120), in f32, each counted once.
  EXPECT_EQ(plan->weight_bytes(), 4u * (25557032u + 53120u));
  EXPECT_EQ(plan->peak_bytes() >= plan->weight_bytes() + plan->arena_bytes(), true);
}

// The layout conversions around a convolution (the NCHW input to NHWC, the NHWC output back)
// split their tiles over the plan's threads: an identity 1x1 convolution over two images of
// 61 x 53 (enough to split, and an HW that is no multiple of the 8 x 8 tiles) returns its input
// bit for bit at 1, 2 and 3 threads.
TEST(ModelPlan, LayoutConversionsAreExactAtAnyThreadCount) {
  ModelBuilder b;
  b.input("x", {2, 3, 61, 53});
  b.weight("w", {3, 3, 1, 1}, std::vector<float>{1, 0, 0, 0, 1, 0, 0, 0, 1});
  b.node("Conv", {"x", "w"}, {"y"});
  b.output("y", {2, 3, 61, 53});
  const std::string bytes = b.bytes();
  auto m = Model::load_memory(bytes.data(), bytes.size());
  ASSERT_TRUE(m) << m.status().to_string();
  const auto in = random_inputs(*m, {}, 7);
  for (int t : {1, 2, 3}) {
    CompileOptions co;
    co.stage = Stage::simd;
    co.threads = t;
    auto plan = Plan::compile(*m, co);
    ASSERT_TRUE(plan) << plan.status().to_string();
    const std::string g = plan->dump_graph();
    EXPECT_NE(g.find("to_nhwc"), std::string::npos) << g;
    EXPECT_NE(g.find("to_nchw"), std::string::npos) << g;
    auto out = plan->run(refs_of(in));
    ASSERT_TRUE(out) << out.status().to_string();
    ASSERT_EQ(out->size(), 1u);
    EXPECT_EQ((*out)[0].f32, in[0].f32) << t << " threads";
  }
}

TEST(ModelPlan, NaiveStageConvertsNothing) {
  auto m = Model::load_builtin("mobilenet_v2");
  ASSERT_TRUE(m);
  CompileOptions co;
  co.stage = Stage::naive;
  auto plan = Plan::compile(*m, co);
  ASSERT_TRUE(plan);
  EXPECT_EQ(plan->dump_graph().find("layout_convert"), std::string::npos);
}

TEST(ModelPlan, RunAllocatesNothingOnceSpecialized) {
  for (const char* name : {"mobilenet_v2", "bert_layer"}) {
    auto m = Model::load_builtin(name);
    ASSERT_TRUE(m);
    CompileOptions co;
    co.stage = Stage::fused;
    co.threads = 2;
    auto plan = Plan::compile(*m, co);
    ASSERT_TRUE(plan);
    const auto in = random_inputs(*m, {{"batch", 1}, {"seq", 32}}, 3);
    auto first = plan->run(refs_of(in));
    ASSERT_TRUE(first) << first.status().to_string();
    std::vector<MutableTensorRef> outs;
    for (auto& t : *first) outs.push_back({t.name, t.type, t.dims, const_cast<void*>(t.data())});
    const auto refs = refs_of(in);
    const long before = opfuse::testing::allocations();
    const Status s = plan->run(refs, outs);
    const long allocs = opfuse::testing::allocations() - before;
    ASSERT_TRUE(s) << s.to_string();
    EXPECT_EQ(allocs, 0) << name << ": heap allocations in one run";
  }
}

TEST(ModelPlan, BertRunsAtSeveralSequenceLengthsFromOneLoad) {
  auto m = Model::load_builtin("bert_layer");
  ASSERT_TRUE(m);
  ASSERT_EQ(m->inputs().size(), 2u);
  EXPECT_EQ(m->inputs()[0].dims[1].symbol, "seq");
  CompileOptions co;
  co.stage = Stage::simd;
  co.threads = 2;
  co.max_cached_shapes = 2;
  auto plan = Plan::compile(*m, co);
  ASSERT_TRUE(plan);
  for (std::int64_t seq : {64, 128, 384, 64}) {
    const auto in = random_inputs(*m, {{"batch", 1}, {"seq", seq}}, static_cast<std::uint64_t>(seq));
    auto out = plan->run(refs_of(in));
    ASSERT_TRUE(out) << seq << ": " << out.status().to_string();
    ASSERT_EQ((*out)[0].dims, (std::vector<std::int64_t>{1, seq, 768}));
    auto ref = run_model(*m, Stage::naive, in);
    ASSERT_TRUE(ref);
    expect_close(*out, *ref, fmt::format("bert seq {}", seq));
  }
  EXPECT_EQ(plan->cached_shapes(), 2);  // bounded: the least recently used one was dropped
}

TEST(ModelPlan, ShapeErrorsNameTheInputAndTheDim) {
  auto m = Model::load_builtin("bert_layer");
  ASSERT_TRUE(m);
  auto plan = Plan::compile(*m, {});
  ASSERT_TRUE(plan);
  auto in = random_inputs(*m, {{"batch", 1}, {"seq", 16}}, 1);
  // hidden dim 767 where the model declares 768
  in[0].dims = {1, 16, 767};
  in[0].f32.resize(16 * 767);
  auto r = plan->run(refs_of(in));
  ASSERT_FALSE(r);
  EXPECT_EQ(r.status().code(), StatusCode::invalid_argument);
  EXPECT_NE(r.status().message().find("input 'hidden_states' dim 2 is 767"), std::string::npos) << r.status().message();
  // seq bound to 16 by one input and 8 by the other
  in = random_inputs(*m, {{"batch", 1}, {"seq", 16}}, 1);
  in[1].dims = {1, 1, 1, 8};
  in[1].f32.resize(8);
  r = plan->run(refs_of(in));
  ASSERT_FALSE(r);
  EXPECT_NE(r.status().message().find("'seq'"), std::string::npos) << r.status().message();
  // wrong rank, wrong type, missing input
  in = random_inputs(*m, {{"batch", 1}, {"seq", 16}}, 1);
  in[0].dims = {16, 768};
  EXPECT_FALSE(plan->run(refs_of(in)));
  in = random_inputs(*m, {{"batch", 1}, {"seq", 16}}, 1);
  in[0].type = ElementType::i64;
  EXPECT_FALSE(plan->run(refs_of(in)));
  in.pop_back();
  r = plan->run(refs_of(in));
  ASSERT_FALSE(r);
  EXPECT_NE(r.status().message().find("takes 2 inputs"), std::string::npos) << r.status().message();
}

TEST(ModelPlan, OutputsUntouchedOnError) {
  auto m = Model::load_builtin("mobilenet_v2");
  ASSERT_TRUE(m);
  auto plan = Plan::compile(*m, {});
  ASSERT_TRUE(plan);
  std::vector<float> x(3 * 224 * 224, 0.5f), y(1000, 42.f);
  TensorRef in{"input", ElementType::f32, {1, 3, 224, 224}, x.data()};
  MutableTensorRef out{"output", ElementType::f32, {1, 999}, y.data()};  // wrong dims
  const Status s = plan->run({&in, 1}, {&out, 1});
  EXPECT_EQ(s.code(), StatusCode::invalid_argument);
  EXPECT_NE(s.message().find("output 'output' has dims 1x1000"), std::string::npos) << s.message();
  for (float v : y) ASSERT_EQ(v, 42.f);
}

TEST(ModelPlan, DeclaredDimsOverTheMemoryBudgetFailBeforeAllocating) {
  auto m = Model::load_builtin("bert_layer");
  ASSERT_TRUE(m);
  CompileOptions co;
  co.memory_budget = 64u << 20;  // 64 MiB: the weights alone are 28 MB, seq 100000 is far over
  auto plan = Plan::compile(*m, co);
  ASSERT_TRUE(plan);
  TensorRef h{"hidden_states", ElementType::f32, {1, 100000, 768}, nullptr};
  TensorRef mask{"attention_mask", ElementType::f32, {1, 1, 1, 100000}, nullptr};
  std::vector<TensorRef> in{h, mask};
  auto r = plan->output_infos(in);  // no data needed: it fails on the dims alone
  ASSERT_FALSE(r);
  EXPECT_EQ(r.status().code(), StatusCode::out_of_memory) << r.status().to_string();
  EXPECT_NE(r.status().message().find("memory budget"), std::string::npos) << r.status().message();
}

// ---- graphs written here, as ONNX bytes --------------------------------------------------------

TEST(ModelErrors, MismatchedShapesNameTheNode) {
  ModelBuilder b;
  b.input("x", {1, 3, 8, 8});
  b.weight("w", {4, 5, 3, 3}, 0.1f);  // 5 input channels for a 3-channel x
  b.node("Conv", {"x", "w"}, {"y"})->set_name("conv_a");
  b.output("y", {1, 4, 6, 6});
  const std::string bytes = b.bytes();
  auto m = Model::load_memory(bytes.data(), bytes.size());
  Status s = m ? Plan::compile(*m, {}).status() : m.status();
  ASSERT_FALSE(s);
  EXPECT_EQ(s.code(), StatusCode::invalid_argument) << s.to_string();
  EXPECT_NE(s.message().find("conv_a"), std::string::npos) << s.message();
}

TEST(ModelErrors, TruncatedAndCorruptFiles) {
  auto bytes = Model::builtin_bytes("mobilenet_v2");
  ASSERT_TRUE(bytes);
  for (std::size_t cut : {std::size_t{0}, std::size_t{7}, bytes->size() / 2, bytes->size() - 3}) {
    auto m = Model::load_memory(bytes->data(), cut);
    EXPECT_FALSE(m) << "cut at " << cut;
    if (!m) {
      EXPECT_EQ(m.status().code(), StatusCode::invalid_argument) << m.status().to_string();
    }
  }
  std::string junk(4096, '\xff');
  EXPECT_FALSE(Model::load_memory(junk.data(), junk.size()));
  // Flipped bytes all through the file: an error or a model, never a crash.
  std::mt19937 rng(5);
  for (int i = 0; i < 20; ++i) {
    std::string b = *bytes;
    for (int k = 0; k < 16; ++k) b[rng() % b.size()] ^= static_cast<char>(1 + rng() % 255);
    auto m = Model::load_memory(b.data(), b.size());
    if (m) (void)Plan::compile(*m, {});
  }
  auto missing = Model::load_file("/nonexistent/model.onnx");
  ASSERT_FALSE(missing);
  EXPECT_NE(missing.status().message().find("/nonexistent/model.onnx"), std::string::npos);
}

TEST(ModelErrors, UnsupportedOpIsUnsupported) {
  ModelBuilder b;
  b.input("x", {2, 3});
  b.node("Abs", {"x"}, {"y"})->set_name("abs_node");
  b.output("y", {2, 3});
  const std::string bytes = b.bytes();
  auto m = Model::load_memory(bytes.data(), bytes.size());
  ASSERT_FALSE(m);
  EXPECT_EQ(m.status().code(), StatusCode::unsupported);
  EXPECT_NE(m.status().message().find("abs_node"), std::string::npos) << m.status().message();
  EXPECT_NE(m.status().message().find("Abs"), std::string::npos) << m.status().message();
}

TEST(ModelErrors, ReshapeToTheWrongSizeNamesTheNode) {
  ModelBuilder b;
  b.input("x", {2, 3});
  auto* t = b.m.mutable_graph()->add_initializer();
  t->set_name("shape");
  t->set_data_type(::onnx::TensorProto::INT64);
  t->add_dims(1);
  t->add_int64_data(7);
  b.node("Reshape", {"x", "shape"}, {"y"})->set_name("reshape_7");
  b.output("y", {7});
  const std::string bytes = b.bytes();
  auto m = Model::load_memory(bytes.data(), bytes.size());
  Status s = m ? Plan::compile(*m, {}).status() : m.status();
  ASSERT_FALSE(s);
  EXPECT_EQ(s.code(), StatusCode::invalid_argument) << s.to_string();
  EXPECT_NE(s.message().find("reshape_7"), std::string::npos) << s.message();
}

TEST(ModelApi, SmallGraphComputesWhatItSays) {
  // y = relu(x * 2 + 1) on a 2x3 input, with the constants as initializers: folded at load,
  // executed at run; checked against values written out here.
  ModelBuilder b;
  b.input("x", {2, 3});
  b.weight("two", {1}, 2.f);
  b.weight("one", {1}, 1.f);
  b.node("Mul", {"x", "two"}, {"a"});
  b.node("Add", {"a", "one"}, {"c"});
  b.node("Relu", {"c"}, {"y"});
  b.output("y", {2, 3});
  const std::string bytes = b.bytes();
  auto m = Model::load_memory(bytes.data(), bytes.size());
  ASSERT_TRUE(m) << m.status().to_string();
  for (Stage s : {Stage::naive, Stage::simd, Stage::fused}) {
    CompileOptions co;
    co.stage = s;
    auto plan = Plan::compile(*m, co);
    ASSERT_TRUE(plan) << plan.status().to_string();
    const float x[6] = {-2, -0.5f, 0, 0.25f, 1, 3};
    float y[6] = {};
    TensorRef in{"x", ElementType::f32, {2, 3}, x};
    MutableTensorRef out{"y", ElementType::f32, {2, 3}, y};
    ASSERT_TRUE(plan->run({&in, 1}, {&out, 1}));
    const float want[6] = {0, 0, 1, 1.5f, 3, 7};
    for (int i = 0; i < 6; ++i) EXPECT_FLOAT_EQ(y[i], want[i]) << stage_name(s) << " element " << i;
  }
}

}  // namespace

namespace {

TEST(ModelApi, InPlaceNeverOverwritesAValueStillRead) {
  // a = relu(x) is read twice: by b = sigmoid(a) and by y = a + b. sigmoid may run in place,
  // but not over a (a is read again); the add may run in place over a or b (their last read).
  ModelBuilder b;
  b.input("x", {1, 4});
  b.node("Relu", {"x"}, {"a"});
  b.node("Sigmoid", {"a"}, {"s"});
  b.node("Add", {"a", "s"}, {"y"});
  b.output("y", {1, 4});
  const std::string bytes = b.bytes();
  auto m = Model::load_memory(bytes.data(), bytes.size());
  ASSERT_TRUE(m) << m.status().to_string();
  const float x[4] = {-1.f, 0.f, 0.5f, 2.f};
  for (Stage s : {Stage::naive, Stage::simd, Stage::fused}) {
    CompileOptions co;
    co.stage = s;
    auto plan = Plan::compile(*m, co);
    ASSERT_TRUE(plan) << plan.status().to_string();
    float y[4] = {};
    TensorRef in{"x", ElementType::f32, {1, 4}, x};
    MutableTensorRef out{"y", ElementType::f32, {1, 4}, y};
    ASSERT_TRUE(plan->run({&in, 1}, {&out, 1}));
    for (int i = 0; i < 4; ++i) {
      const double a = std::max(0.f, x[i]);
      EXPECT_NEAR(y[i], a + 1 / (1 + std::exp(-a)), 1e-6) << stage_name(s) << " element " << i;
    }
  }
}

}  // namespace
