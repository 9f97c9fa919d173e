// tests/test_fusion.cpp - the graph fusions: each one's graph before and after, a near miss
// that must stay unfused, and the fused graph against the unfused one with the model comparator.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "check/check.hpp"
#include "model_builder.hpp"
#include "opfuse/model.hpp"

namespace {

using namespace opfuse;
using opfuse::testing::ModelBuilder;

std::vector<float> rand_vec(std::size_t n, std::uint64_t seed, float lo, float hi) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> u(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = u(rng);
  return v;
}

// x (1,3,8,8) -> Conv 3x3 (4 out, pad 1, bias) -> BatchNormalization -> Relu -> y. With
// `extra_reader`, the conv output is also a graph output; with `extra_node_reader`, a Sigmoid
// reads it too: nothing may fuse across it either way. With `bn_scale_input`, the BN scale is a graph input, not a
// constant.
std::string conv_bn_relu(bool extra_reader, bool bn_scale_input, bool extra_node_reader = false) {
  ModelBuilder b;
  b.input("x", {1, 3, 8, 8});
  b.weight("w", {4, 3, 3, 3}, rand_vec(4 * 27, 1, -0.5f, 0.5f));
  b.weight("b", {4}, rand_vec(4, 2, -0.2f, 0.2f));
  if (bn_scale_input)
    b.input("scale", {4});
  else
    b.weight("scale", {4}, rand_vec(4, 3, 0.5f, 1.5f));
  b.weight("beta", {4}, rand_vec(4, 4, -0.3f, 0.3f));
  b.weight("mean", {4}, rand_vec(4, 5, -0.3f, 0.3f));
  b.weight("var", {4}, rand_vec(4, 6, 0.5f, 1.5f));
  auto* conv = b.node("Conv", {"x", "w", "b"}, {"c"});
  auto* pads = conv->add_attribute();
  pads->set_name("pads");
  pads->set_type(::onnx::AttributeProto::INTS);
  for (int i = 0; i < 4; ++i) pads->add_ints(1);
  b.node("BatchNormalization", {"c", "scale", "beta", "mean", "var"}, {"n"});
  b.node("Relu", {"n"}, {"y"});
  b.output("y", {1, 4, 8, 8});
  if (extra_reader) b.output("c", {1, 4, 8, 8});
  if (extra_node_reader) {  // a second branch reads the conv output
    b.node("Sigmoid", {"c"}, {"z"});
    b.output("z", {1, 4, 8, 8});
  }
  return b.bytes();
}

struct Ran {
  std::vector<TensorData> out;
  std::vector<std::pair<std::string, int>> fusions;
  int nodes = 0;
};

Ran run_at(const std::string& bytes, FusionLevel level, Stage stage, const std::vector<TensorData>& in) {
  auto m = Model::load_memory(bytes.data(), bytes.size());
  EXPECT_TRUE(m) << m.status().to_string();
  if (!m) return {};
  CompileOptions co;
  co.stage = stage;
  co.fusion = level;
  co.threads = 2;
  auto plan = Plan::compile(*m, co);
  EXPECT_TRUE(plan) << plan.status().to_string();
  if (!plan) return {};
  std::vector<TensorRef> refs;
  for (const auto& t : in) refs.push_back(t.ref());
  auto out = plan->run(refs);
  EXPECT_TRUE(out) << out.status().to_string();
  if (!out) return {};
  return {std::move(*out), plan->fusions_applied(), plan->node_count()};
}

int groups(const Ran& r, const std::string& name) {
  for (const auto& [n, g] : r.fusions)
    if (n == name) return g;
  return 0;
}

std::vector<TensorData> inputs_for(const std::string& bytes, std::uint64_t seed) {
  auto m = Model::load_memory(bytes.data(), bytes.size());
  std::vector<TensorData> v;
  for (const ValueInfo& i : m->inputs()) {
    TensorData t;
    t.name = i.name;
    for (const DimInfo& d : i.dims) t.dims.push_back(d.value >= 0 ? d.value : 1);
    t.f32 = rand_vec(static_cast<std::size_t>(t.numel()), seed++, i.name == "scale" ? 0.5f : -1.f, 1.f);
    v.push_back(std::move(t));
  }
  return v;
}

void expect_same(const std::vector<TensorData>& a, const std::vector<TensorData>& b, const std::string& what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  for (std::size_t i = 0; i < a.size(); ++i) {
    const check::OutputCheck c = check::compare_output(a[i], b[i]);
    EXPECT_TRUE(c.ok) << what << " output " << i << ": " << c.reason;
  }
}

TEST(FusionBasic, ConvBatchnormReluBecomesOneConv) {
  const std::string bytes = conv_bn_relu(false, false);
  const auto in = inputs_for(bytes, 11);
  for (Stage s : {Stage::naive, Stage::simd, Stage::fused}) {
    const Ran none = run_at(bytes, FusionLevel::none, s, in);
    const Ran basic = run_at(bytes, FusionLevel::basic, s, in);
    EXPECT_EQ(none.nodes, s == Stage::naive ? 3 : 5);  // + the two layout conversions at simd / fused
    EXPECT_EQ(basic.nodes, s == Stage::naive ? 1 : 3);
    EXPECT_EQ(groups(basic, "fold_batchnorm_into_conv"), 1);
    EXPECT_EQ(groups(basic, "activation_into_conv_gemm"), 1);
    expect_same(basic.out, none.out, fmt::format("conv+bn+relu {}", stage_name(s)));
  }
}

TEST(FusionBasic, NearMissesStayUnfused) {
  // The conv output has a second reader (it is a graph output too): neither BN nor relu fuse.
  {
    const std::string bytes = conv_bn_relu(true, false);
    const auto in = inputs_for(bytes, 12);
    const Ran none = run_at(bytes, FusionLevel::none, Stage::simd, in);
    const Ran basic = run_at(bytes, FusionLevel::basic, Stage::simd, in);
    EXPECT_EQ(groups(basic, "fold_batchnorm_into_conv"), 0);
    EXPECT_EQ(groups(basic, "activation_into_conv_gemm"), 0);
    expect_same(basic.out, none.out, "extra reader");
  }
  // A second node reads the conv output.
  {
    const std::string bytes = conv_bn_relu(false, false, true);
    const auto in = inputs_for(bytes, 14);
    const Ran none = run_at(bytes, FusionLevel::none, Stage::simd, in);
    const Ran basic = run_at(bytes, FusionLevel::basic, Stage::simd, in);
    EXPECT_EQ(groups(basic, "fold_batchnorm_into_conv"), 0);
    EXPECT_EQ(groups(basic, "activation_into_conv_gemm"), 0);
    expect_same(basic.out, none.out, "second reader node");
  }
  // The BN scale is a graph input, not a constant: it cannot fold; the relu still cannot reach
  // the conv (the BN is between them).
  {
    const std::string bytes = conv_bn_relu(false, true);
    const auto in = inputs_for(bytes, 13);
    const Ran none = run_at(bytes, FusionLevel::none, Stage::simd, in);
    const Ran basic = run_at(bytes, FusionLevel::basic, Stage::simd, in);
    EXPECT_EQ(groups(basic, "fold_batchnorm_into_conv"), 0);
    EXPECT_EQ(groups(basic, "activation_into_conv_gemm"), 0);
    expect_same(basic.out, none.out, "runtime BN scale");
  }
}

// The built-in models: every BatchNormalization follows a conv; ResNet-50's 49 ReLUs are 33
// after a batch norm and 16 after a residual Add (not a conv: the advanced level's epilogue);
// MobileNetV2's 35 ReLU6 all follow a batch norm. Fused and unfused agree.
TEST(FusionBasic, BuiltinModelsFoldEveryBatchnorm) {
  struct Want {
    const char* model;
    int bn, act;
  };
  for (const Want w : {Want{"resnet50", 53, 33}, Want{"mobilenet_v2", 52, 35}}) {
    auto bytes = Model::builtin_bytes(w.model);
    ASSERT_TRUE(bytes);
    const auto in = inputs_for(*bytes, 21);
    const Ran none = run_at(*bytes, FusionLevel::none, Stage::simd, in);
    const Ran basic = run_at(*bytes, FusionLevel::basic, Stage::simd, in);
    EXPECT_EQ(groups(basic, "fold_batchnorm_into_conv"), w.bn) << w.model;
    EXPECT_EQ(groups(basic, "activation_into_conv_gemm"), w.act) << w.model;
    EXPECT_EQ(basic.nodes, none.nodes - w.bn - w.act) << w.model;
    ASSERT_EQ(basic.out.size(), 1u);
    const check::OutputCheck c = opfuse::testing::compare_deep(basic.out[0], none.out[0]);
    EXPECT_TRUE(c.ok) << w.model << ": " << c.reason;
  }
}

}  // namespace

namespace {

// BERT's six linear layers (Q, K, V, attention output, intermediate, output) are MatMul by a
// constant then Add(bias, .): each becomes a gemm with bias. The residual Adds (their other
// operand is an activation, not a constant) are near misses and stay.
TEST(FusionBasic, BertLinearsBecomeGemmsWithBias) {
  auto bytes = Model::builtin_bytes("bert_layer");
  ASSERT_TRUE(bytes);
  std::vector<TensorData> in(2);
  in[0].name = "hidden_states";
  in[0].dims = {1, 16, 768};
  in[0].f32 = rand_vec(16 * 768, 31, -1.f, 1.f);
  in[1].name = "attention_mask";
  in[1].dims = {1, 1, 1, 16};
  in[1].f32.assign(16, 0.f);
  for (Stage s : {Stage::naive, Stage::simd}) {
    const Ran none = run_at(*bytes, FusionLevel::none, s, in);
    const Ran basic = run_at(*bytes, FusionLevel::basic, s, in);
    EXPECT_EQ(groups(basic, "bias_into_matmul"), 6);
    ASSERT_EQ(basic.out.size(), 1u);
    expect_same(basic.out, none.out, fmt::format("bert_layer {}", stage_name(s)));
  }
}

}  // namespace

namespace {

// advanced: ResNet-50's 16 residual Adds join the conv epilogue, and the 16 ReLUs after them
// then join too (49 activations in all); MobileNetV2's 10 residual Adds (no ReLU after them).
TEST(FusionAdvanced, ResidualAddsJoinTheConvEpilogue) {
  struct Want {
    const char* model;
    int residual, act;
  };
  for (const Want w : {Want{"resnet50", 16, 49}, Want{"mobilenet_v2", 10, 35}}) {
    auto bytes = Model::builtin_bytes(w.model);
    ASSERT_TRUE(bytes);
    const auto in = inputs_for(*bytes, 41);
    for (Stage s : {Stage::simd, Stage::fused}) {
      const Ran none = run_at(*bytes, FusionLevel::none, s, in);
      const Ran adv = run_at(*bytes, FusionLevel::advanced, s, in);
      EXPECT_EQ(groups(adv, "residual_add_into_conv"), w.residual) << w.model;
      EXPECT_EQ(groups(adv, "activation_into_conv_gemm"), w.act) << w.model;
      ASSERT_EQ(adv.out.size(), 1u);
      const check::OutputCheck c = opfuse::testing::compare_deep(adv.out[0], none.out[0]);
      EXPECT_TRUE(c.ok) << w.model << " " << stage_name(s) << ": " << c.reason;
    }
  }
}

TEST(FusionAdvanced, BroadcastAddAfterConvStays) {
  // conv -> Add(., per-channel (1,4,1,1) constant): not a same-shaped residual, so no epilogue.
  ModelBuilder b;
  b.input("x", {1, 3, 6, 6});
  b.weight("w", {4, 3, 1, 1}, rand_vec(12, 51, -1.f, 1.f));
  b.weight("shift", {1, 4, 1, 1}, rand_vec(4, 52, -1.f, 1.f));
  b.node("Conv", {"x", "w"}, {"c"});
  b.node("Add", {"c", "shift"}, {"y"});
  b.output("y", {1, 4, 6, 6});
  const std::string bytes = b.bytes();
  const auto in = inputs_for(bytes, 53);
  const Ran none = run_at(bytes, FusionLevel::none, Stage::fused, in);
  const Ran adv = run_at(bytes, FusionLevel::advanced, Stage::fused, in);
  EXPECT_EQ(groups(adv, "residual_add_into_conv"), 0);
  expect_same(adv.out, none.out, "broadcast add");
}

}  // namespace
