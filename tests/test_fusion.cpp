// tests/test_fusion.cpp - the graph fusions: each one's graph before and after, a near miss
// that must stay unfused, and the fused graph against the unfused one with the model comparator.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "check/check.hpp"
#include "model_builder.hpp"
#include "opfuse/model.hpp"
#include "opfuse/primitive.hpp"
#include "opfuse/registry.hpp"

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

namespace {

void attr_ints(::onnx::NodeProto* n, const std::string& name, std::vector<std::int64_t> v) {
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
void attr_float(::onnx::NodeProto* n, const std::string& name, float v) {
  auto* a = n->add_attribute();
  a->set_name(name);
  a->set_type(::onnx::AttributeProto::FLOAT);
  a->set_f(v);
}
void i64_weight(ModelBuilder& b, const std::string& name, std::vector<std::int64_t> dims, std::vector<std::int64_t> v) {
  auto* t = b.m.mutable_graph()->add_initializer();
  t->set_name(name);
  t->set_data_type(::onnx::TensorProto::INT64);
  for (auto d : dims) t->add_dims(d);
  for (auto x : v) t->add_int64_data(x);
}

// Runs `bytes` unfused and at `level` on every stage; the outputs must agree. Returns the run
// at `level` on the fused stage (for its fusion counts).
Ran agree_at(const std::string& bytes, FusionLevel level, std::uint64_t seed, const std::string& what) {
  const auto in = inputs_for(bytes, seed);
  Ran last;
  for (Stage s : {Stage::naive, Stage::simd, Stage::fused}) {
    const Ran none = run_at(bytes, FusionLevel::none, s, in);
    last = run_at(bytes, level, s, in);
    expect_same(last.out, none.out, fmt::format("{} {}", what, stage_name(s)));
  }
  return last;
}

// BERT's decompositions: the GELU (Div/Erf/Add/Mul/Mul), both LayerNorms (nine nodes each) with
// the residual Adds before them, and at full the attention subgraph.
TEST(FusionAdvanced, BertDecompositionsAreRecognized) {
  auto bytes = Model::builtin_bytes("bert_layer");
  ASSERT_TRUE(bytes);
  std::vector<TensorData> in(2);
  in[0].name = "hidden_states";
  in[0].dims = {1, 16, 768};
  in[0].f32 = rand_vec(16 * 768, 61, -1.f, 1.f);
  in[1].name = "attention_mask";
  in[1].dims = {1, 1, 1, 16};
  in[1].f32.assign(16, 0.f);
  in[1].f32[15] = -10000.f;  // the last key hidden, as padding would
  for (Stage s : {Stage::naive, Stage::simd, Stage::fused}) {
    const Ran none = run_at(*bytes, FusionLevel::none, s, in);
    for (FusionLevel l : {FusionLevel::advanced, FusionLevel::full}) {
      const Ran r = run_at(*bytes, l, s, in);
      EXPECT_EQ(groups(r, "gelu_from_erf"), 1);
      EXPECT_EQ(groups(r, "layernorm_from_reductions"), 2);
      EXPECT_EQ(groups(r, "skip_layernorm"), 2);
      EXPECT_EQ(groups(r, "attention_subgraph"), l == FusionLevel::full ? 1 : 0);
      // full: Q, K and V as one gemm, read in place by the attention.
      EXPECT_EQ(groups(r, "qkv_packed_attention"), l == FusionLevel::full ? 1 : 0);
      EXPECT_LT(r.nodes, none.nodes);
      ASSERT_EQ(r.out.size(), 1u);
      const check::OutputCheck c = opfuse::testing::compare_deep(r.out[0], none.out[0]);
      EXPECT_TRUE(c.ok) << fusion_level_name(l) << " " << stage_name(s) << ": " << c.reason;
    }
  }
}

// MobileNetV2's 17 blocks become inverted_residual nodes; ResNet-50's stem pool joins its conv.
TEST(FusionFull, CnnBlocksBecomeOneNode) {
  struct Want {
    const char* model;
    const char* fusion;
    int groups;
  };
  for (const Want w : {Want{"mobilenet_v2", "inverted_residual_block", 17}, Want{"resnet50", "conv_maxpool", 1}}) {
    auto bytes = Model::builtin_bytes(w.model);
    ASSERT_TRUE(bytes);
    const auto in = inputs_for(*bytes, 71);
    for (Stage s : {Stage::simd, Stage::fused}) {
      const Ran none = run_at(*bytes, FusionLevel::none, s, in);
      const Ran full = run_at(*bytes, FusionLevel::full, s, in);
      EXPECT_EQ(groups(full, w.fusion), w.groups) << w.model;
      ASSERT_EQ(full.out.size(), 1u);
      const check::OutputCheck c = opfuse::testing::compare_deep(full.out[0], none.out[0]);
      EXPECT_TRUE(c.ok) << w.model << " " << stage_name(s) << ": " << c.reason;
    }
  }
}

// x (2, 6, 10) -> the exported GELU, with the Div constant `divisor`; with `erf_out` the Erf
// output is a graph output too.
std::string gelu_graph(float divisor, bool erf_out) {
  ModelBuilder b;
  b.input("x", {2, 6, 10});
  b.weight("c", {}, divisor);
  b.weight("one", {}, 1.f);
  b.weight("half", {}, 0.5f);
  b.node("Div", {"x", "c"}, {"d"});
  b.node("Erf", {"d"}, {"e"});
  b.node("Add", {"e", "one"}, {"a"});
  b.node("Mul", {"x", "a"}, {"m"});
  b.node("Mul", {"m", "half"}, {"y"});
  b.output("y", {2, 6, 10});
  if (erf_out) b.output("e", {2, 6, 10});
  return b.bytes();
}

TEST(FusionAdvanced, GeluNearMisses) {
  EXPECT_EQ(groups(agree_at(gelu_graph(std::sqrt(2.f), false), FusionLevel::advanced, 81, "gelu"), "gelu_from_erf"), 1);
  // Not sqrt 2: some other function.
  EXPECT_EQ(groups(agree_at(gelu_graph(1.5f, false), FusionLevel::advanced, 82, "div 1.5"), "gelu_from_erf"), 0);
  // An intermediate is read outside the pattern.
  EXPECT_EQ(groups(agree_at(gelu_graph(std::sqrt(2.f), true), FusionLevel::advanced, 83, "erf out"), "gelu_from_erf"),
            0);
}

// The opset-9 LayerNorm over `axis` of x (2, 5, 6).
std::string layernorm_graph(std::int64_t axis) {
  ModelBuilder b;
  b.input("x", {2, 5, 6});
  const std::int64_t c = axis == 1 ? 5 : 6;
  b.weight("gamma", {c}, rand_vec(static_cast<std::size_t>(c), 91, 0.5f, 1.5f));
  b.weight("beta", {c}, rand_vec(static_cast<std::size_t>(c), 92, -0.5f, 0.5f));
  if (axis == 1) {  // broadcast along dim 1 needs (5, 1)
    b.m.mutable_graph()->mutable_initializer(0)->add_dims(1);
    b.m.mutable_graph()->mutable_initializer(1)->add_dims(1);
  }
  b.weight("two", {}, 2.f);
  b.weight("eps", {}, 1e-5f);
  i64_weight(b, "axes", {1}, {axis});
  b.node("ReduceMean", {"x", "axes"}, {"mean"});  // opset 18 takes axes as an input; 17: attribute
  b.m.mutable_graph()->mutable_node(0)->clear_input();
  b.m.mutable_graph()->mutable_node(0)->add_input("x");
  attr_ints(b.m.mutable_graph()->mutable_node(0), "axes", {axis});
  b.node("Sub", {"x", "mean"}, {"d"});
  b.node("Pow", {"d", "two"}, {"p"});
  attr_ints(b.node("ReduceMean", {"p"}, {"var"}), "axes", {axis});
  b.node("Add", {"var", "eps"}, {"ve"});
  b.node("Sqrt", {"ve"}, {"sd"});
  b.node("Div", {"d", "sd"}, {"n"});
  b.node("Mul", {"n", "gamma"}, {"s"});
  b.node("Add", {"s", "beta"}, {"y"});
  b.output("y", {2, 5, 6});
  return b.bytes();
}

TEST(FusionAdvanced, LayerNormOnlyOverTheLastAxis) {
  EXPECT_EQ(groups(agree_at(layernorm_graph(-1), FusionLevel::advanced, 93, "ln last"), "layernorm_from_reductions"),
            1);
  EXPECT_EQ(groups(agree_at(layernorm_graph(1), FusionLevel::advanced, 94, "ln axis 1"), "layernorm_from_reductions"),
            0);
}

// Add(a, b) -> LayerNormalization; with `sum_out` the sum is a graph output too, so the fused
// layernorm must also write it.
std::string skip_ln_graph(bool sum_out) {
  ModelBuilder b;
  b.input("a", {3, 16});
  b.input("b", {3, 16});
  b.weight("gamma", {16}, rand_vec(16, 101, 0.5f, 1.5f));
  b.weight("beta", {16}, rand_vec(16, 102, -0.5f, 0.5f));
  b.node("Add", {"a", "b"}, {"s"});
  attr_float(b.node("LayerNormalization", {"s", "gamma", "beta"}, {"y"}), "epsilon", 1e-5f);
  b.output("y", {3, 16});
  if (sum_out) b.output("s", {3, 16});
  return b.bytes();
}

TEST(FusionAdvanced, SkipLayerNormWritesTheSumWhenItIsRead) {
  for (bool sum_out : {false, true}) {
    const Ran r = agree_at(skip_ln_graph(sum_out), FusionLevel::advanced, 103, sum_out ? "sum read" : "sum unread");
    EXPECT_EQ(groups(r, "skip_layernorm"), 1);
    EXPECT_EQ(r.out.size(), sum_out ? 2u : 1u);
  }
}

// Scaled dot-product attention on q, k, v (1, 2, 8, 4): MatMul(q, Transpose(k)) -> Div(., scale)
// -> Add(., mask) -> Softmax -> MatMul(., v). Variants: the scale a graph input (not a
// constant), the scores a graph output too, a mask whose batch 2 broadcasts the scores up.
enum class AttnVariant { plain, scale_input, scores_out, mask_grows };
std::string attention_graph(AttnVariant v) {
  ModelBuilder b;
  for (const char* n : {"q", "k", "v"}) b.input(n, {1, 2, 8, 4});
  if (v == AttnVariant::scale_input)
    b.input("scale", {});
  else
    b.weight("scale", {}, 2.f);
  b.input("mask", {v == AttnVariant::mask_grows ? 2 : 1, 1, 1, 8});
  attr_ints(b.node("Transpose", {"k"}, {"kt"}), "perm", {0, 1, 3, 2});
  b.node("MatMul", {"q", "kt"}, {"s"});
  b.node("Div", {"s", "scale"}, {"ss"});
  b.node("Add", {"ss", "mask"}, {"sm"});
  attr_int(b.node("Softmax", {"sm"}, {"p"}), "axis", -1);
  b.node("MatMul", {"p", "v"}, {"y"});
  b.output("y", {v == AttnVariant::mask_grows ? 2 : 1, 2, 8, 4});
  if (v == AttnVariant::scores_out) b.output("p", {1, 2, 8, 8});
  return b.bytes();
}

TEST(FusionFull, AttentionNearMisses) {
  EXPECT_EQ(
      groups(agree_at(attention_graph(AttnVariant::plain), FusionLevel::full, 111, "attention"), "attention_subgraph"),
      1);
  for (AttnVariant v : {AttnVariant::scale_input, AttnVariant::scores_out, AttnVariant::mask_grows})
    EXPECT_EQ(groups(agree_at(attention_graph(v), FusionLevel::full, 112, "attention near miss"), "attention_subgraph"),
              0)
        << static_cast<int>(v);
}

// One MobileNetV2 block, 8 -> 48 -> 8 channels at 6x6 with the residual; with `expanded_out`
// the expanded activation is also a graph output.
std::string block_graph(bool expanded_out) {
  ModelBuilder b;
  b.input("x", {1, 8, 6, 6});
  b.weight("lo", {}, 0.f);
  b.weight("hi", {}, 6.f);
  std::uint64_t seed = 121;
  const auto bn = [&](const std::string& p, std::int64_t c, const std::string& in, const std::string& out) {
    b.weight(p + ".s", {c}, rand_vec(static_cast<std::size_t>(c), seed++, 0.5f, 1.5f));
    b.weight(p + ".b", {c}, rand_vec(static_cast<std::size_t>(c), seed++, -0.2f, 0.2f));
    b.weight(p + ".m", {c}, rand_vec(static_cast<std::size_t>(c), seed++, -0.2f, 0.2f));
    b.weight(p + ".v", {c}, rand_vec(static_cast<std::size_t>(c), seed++, 0.5f, 1.5f));
    b.node("BatchNormalization", {in, p + ".s", p + ".b", p + ".m", p + ".v"}, {out});
  };
  b.weight("we", {48, 8, 1, 1}, rand_vec(48 * 8, seed++, -0.5f, 0.5f));
  b.weight("wd", {48, 1, 3, 3}, rand_vec(48 * 9, seed++, -0.5f, 0.5f));
  b.weight("wp", {8, 48, 1, 1}, rand_vec(8 * 48, seed++, -0.2f, 0.2f));
  b.node("Conv", {"x", "we"}, {"e"});
  bn("bn1", 48, "e", "e1");
  b.node("Clip", {"e1", "lo", "hi"}, {"e2"});
  auto* dw = b.node("Conv", {"e2", "wd"}, {"d"});
  attr_ints(dw, "pads", {1, 1, 1, 1});
  attr_int(dw, "group", 48);
  bn("bn2", 48, "d", "d1");
  b.node("Clip", {"d1", "lo", "hi"}, {"d2"});
  b.node("Conv", {"d2", "wp"}, {"p"});
  bn("bn3", 8, "p", "p1");
  b.node("Add", {"p1", "x"}, {"y"});
  b.output("y", {1, 8, 6, 6});
  if (expanded_out) b.output("e2", {1, 48, 6, 6});
  return b.bytes();
}

TEST(FusionFull, InvertedResidualBlockNearMiss) {
  EXPECT_EQ(groups(agree_at(block_graph(false), FusionLevel::full, 131, "block"), "inverted_residual_block"), 1);
  // The expanded activation is read outside the block: the expand conv stays apart (its BN
  // folds), and only the rest - depthwise to projection, a block without expansion whose input
  // is that activation - becomes one node; the residual Add reads x, not the block's input, so
  // it stays.
  const Ran r = agree_at(block_graph(true), FusionLevel::full, 132, "block, expanded read");
  EXPECT_EQ(groups(r, "inverted_residual_block"), 1);
  EXPECT_EQ(groups(r, "fold_batchnorm_into_conv"), 1);
}

// Conv -> MaxPool 3x3/2 (pad 1), in floor or ceil mode (ceil cannot be a pool step).
std::string conv_pool_graph(bool ceil) {
  ModelBuilder b;
  b.input("x", {1, 3, 9, 9});
  b.weight("w", {4, 3, 3, 3}, rand_vec(4 * 27, 141, -0.5f, 0.5f));
  attr_ints(b.node("Conv", {"x", "w"}, {"c"}), "pads", {1, 1, 1, 1});
  b.node("Relu", {"c"}, {"r"});
  auto* p = b.node("MaxPool", {"r"}, {"y"});
  attr_ints(p, "kernel_shape", {3, 3});
  attr_ints(p, "strides", {2, 2});
  attr_ints(p, "pads", {1, 1, 1, 1});
  if (ceil) attr_int(p, "ceil_mode", 1);
  b.output("y", {1, 4, 5, 5});
  return b.bytes();
}

TEST(FusionAdvanced, ConvMaxpoolOnlyInFloorMode) {
  EXPECT_EQ(groups(agree_at(conv_pool_graph(false), FusionLevel::advanced, 151, "conv pool"), "conv_maxpool"), 1);
  EXPECT_EQ(groups(agree_at(conv_pool_graph(true), FusionLevel::advanced, 152, "ceil"), "conv_maxpool"), 0);
}

// Transpose(0,2,1) then Transpose(0,2,1) cancel; Reshape to (6, 5) then back to (2, 3, 5) too;
// what is left is the Relu and the chain Sub(., c) -> Mul(., c2), grouped.
TEST(FusionAdvanced, PairsCancelAndChainsGroup) {
  ModelBuilder b;
  b.input("x", {2, 3, 5});
  i64_weight(b, "flat", {2}, {6, 5});
  i64_weight(b, "back", {3}, {2, 3, 5});
  b.weight("c", {5}, rand_vec(5, 161, -1.f, 1.f));
  b.weight("c2", {1, 5}, rand_vec(5, 162, 0.5f, 2.f));
  attr_ints(b.node("Transpose", {"x"}, {"t1"}), "perm", {0, 2, 1});
  attr_ints(b.node("Transpose", {"t1"}, {"t2"}), "perm", {0, 2, 1});
  b.node("Reshape", {"t2", "flat"}, {"r1"});
  b.node("Reshape", {"r1", "back"}, {"r2"});
  b.node("Relu", {"r2"}, {"a"});
  b.node("Sub", {"a", "c"}, {"s"});
  b.node("Mul", {"s", "c2"}, {"y"});
  b.output("y", {2, 3, 5});
  const Ran r = agree_at(b.bytes(), FusionLevel::advanced, 163, "pairs");
  EXPECT_EQ(groups(r, "cancel_reshape_transpose"), 2);
  EXPECT_EQ(groups(r, "eltwise_chain"), 2);  // relu + sub, then + mul
  EXPECT_EQ(r.nodes, 1);
}

}  // namespace

namespace {

// Every inverted_residual kernel above naive excluded: at the fused stage the fused block would
// only run naive, so the fusion falls back and the block runs as folded convs; at the naive
// stage there is nothing to fall back from.
TEST(FusionFallback, BlockWithOnlyANaiveKernelRunsUnfused) {
  const std::string bytes = block_graph(false);
  const auto in = inputs_for(bytes, 171);
  std::vector<TensorRef> refs;
  for (const auto& t : in) refs.push_back(t.ref());
  auto m = Model::load_memory(bytes.data(), bytes.size());
  ASSERT_TRUE(m);
  CompileOptions unfused;
  unfused.fusion = FusionLevel::none;
  auto ref = Plan::compile(*m, unfused)->run(refs);
  ASSERT_TRUE(ref);
  for (Stage s : {Stage::fused, Stage::naive}) {
    CompileOptions co;
    co.stage = s;
    for (const KernelDef& k : kernels())
      if (k.op == OpKind::inverted_residual && (k.impl == Impl::simd || k.impl == Impl::fused))
        co.excluded_kernels.emplace_back(k.name);
    auto plan = Plan::compile(*m, co);
    ASSERT_TRUE(plan) << plan.status().to_string();
    auto out = plan->run(refs);
    ASSERT_TRUE(out) << out.status().to_string();
    expect_same(*out, *ref, fmt::format("fallback {}", stage_name(s)));
    const auto fb = plan->fallbacks();
    if (s == Stage::naive) {
      EXPECT_TRUE(fb.empty());
      EXPECT_EQ(groups(Ran{{}, plan->fusions_applied(), 0}, "inverted_residual_block"), 1);
      continue;
    }
    ASSERT_EQ(fb.size(), 1u);
    EXPECT_EQ(fb[0].pattern, "inverted_residual_block");
    EXPECT_EQ(fb[0].replaced.size(), 9u);  // 3 convs, 3 batch norms, 2 clips, the add
    EXPECT_NE(fb[0].reason.find("inverted_residual__naive"), std::string::npos) << fb[0].reason;
    const Ran r{{}, plan->fusions_applied(), 0};
    EXPECT_EQ(groups(r, "inverted_residual_block"), 0);
    EXPECT_EQ(groups(r, "fold_batchnorm_into_conv"), 3);
  }
}

std::vector<TensorData> model_inputs(const std::string& model, std::uint64_t seed) {
  if (model != "bert_layer") {
    auto bytes = Model::builtin_bytes(model);
    return inputs_for(*bytes, seed);
  }
  std::vector<TensorData> in(2);
  in[0].name = "hidden_states";
  in[0].dims = {1, 16, 768};
  in[0].f32 = rand_vec(16 * 768, seed, -1.f, 1.f);
  in[1].name = "attention_mask";
  in[1].dims = {1, 1, 1, 16};
  in[1].f32.assign(16, 0.f);
  return in;
}

// --verify-fusion on the three built-in models at every level: each fused group, run on the
// values its unfused nodes read in an unfused run, matches what they produced.
TEST(FusionVerify, BuiltinModelsAtEveryLevel) {
  for (const char* model : {"resnet50", "mobilenet_v2", "bert_layer"}) {
    auto m = Model::load_builtin(model);
    ASSERT_TRUE(m);
    const auto in = model_inputs(model, 181);
    std::vector<TensorRef> refs;
    for (const auto& t : in) refs.push_back(t.ref());
    for (FusionLevel l : {FusionLevel::basic, FusionLevel::advanced, FusionLevel::full}) {
      CompileOptions co;
      co.fusion = l;
      auto plan = Plan::compile(*m, co);
      ASSERT_TRUE(plan);
      auto checks = plan->verify_fusion(refs);
      ASSERT_TRUE(checks) << checks.status().to_string();
      EXPECT_FALSE(checks->empty()) << model;
      EXPECT_EQ(checks->size(), plan->fused_groups().size());
      for (const GroupCheck& c : *checks)
        EXPECT_TRUE(c.ok) << model << " " << fusion_level_name(l) << " " << c.group.pattern << ": " << c.reason;
      // (BERT at basic is the exception: each linear becomes reshape, gemm, reshape - views that
      // run no kernel - and only the advanced level's pair cancellation removes them.)
      if (std::string(model) != "bert_layer" || l != FusionLevel::basic) {
        EXPECT_LT(plan->nodes_after_fusion(), plan->nodes_before_fusion()) << model << " " << fusion_level_name(l);
      }
    }
  }
}

// The fused graph written out: as ONNX (the fused nodes in the opfuse domain, one ONNX node per
// graph node) and as DOT (one cluster per fused group).
TEST(FusionOutputs, OptimizedModelAndDot) {
  auto m = Model::load_builtin("mobilenet_v2");
  ASSERT_TRUE(m);
  auto plan = Plan::compile(*m, {});
  ASSERT_TRUE(plan);
  auto bytes = plan->optimized_model();
  ASSERT_TRUE(bytes) << bytes.status().to_string();
  ::onnx::ModelProto proto;
  ASSERT_TRUE(proto.ParseFromString(*bytes));
  EXPECT_EQ(proto.graph().node_size(), plan->nodes_after_fusion());
  int blocks = 0;
  for (const auto& n : proto.graph().node()) blocks += n.domain() == "opfuse" && n.op_type() == "inverted_residual";
  EXPECT_EQ(blocks, 17);
  EXPECT_GT(proto.graph().initializer_size(), 17 * 3);
  const std::string dot = plan->fused_graph_dot();
  std::size_t clusters = 0;
  for (std::size_t at = dot.find("subgraph cluster_"); at != std::string::npos;
       at = dot.find("subgraph cluster_", at + 1))
    ++clusters;
  EXPECT_EQ(clusters, plan->fused_groups().size());
  EXPECT_EQ(dot.rfind("digraph", 0), 0u);
}

}  // namespace

namespace {

// Packed attention at the op level: q, k and v as views of one (B, S, 3, H, D) buffer give the
// same output (written as (B, S, H, D)) as dense copies of them at every stage; views that are
// not at +H*D and +2*H*D of q are refused.
TEST(FusionFull, PackedAttentionReadsTheProjectionInPlace) {
  const std::int64_t B = 2, S = 9, H = 3, D = 8, E = H * D;
  const auto qkv = rand_vec(static_cast<std::size_t>(B * S * 3 * E), 191, -1.f, 1.f);
  // Dense (B, H, S, D) copies of q, k, v.
  std::vector<std::vector<float>> dense(3, std::vector<float>(static_cast<std::size_t>(B * H * S * D)));
  for (int w = 0; w < 3; ++w)
    for (std::int64_t b = 0; b < B; ++b)
      for (std::int64_t h = 0; h < H; ++h)
        for (std::int64_t s = 0; s < S; ++s)
          for (std::int64_t d = 0; d < D; ++d)
            dense[w][static_cast<std::size_t>(((b * H + h) * S + s) * D + d)] =
                qkv[static_cast<std::size_t>(((b * S + s) * 3 + w) * E + h * D + d)];
  OpDesc ref;
  ref.op = OpKind::attention;
  ref.params = AttentionParams{};
  ref.inputs.assign(3, TensorDesc{Shape{B, H, S, D}});
  OpDesc packed = ref;
  std::get<AttentionParams>(packed.params).packed_qkv = true;
  for (Stage st : {Stage::naive, Stage::simd, Stage::fused}) {
    Context ctx;
    ctx.stage = st;
    auto rq = Tensor::view(dense[0].data(), Shape{B, H, S, D});
    auto rk = Tensor::view(dense[1].data(), Shape{B, H, S, D});
    auto rv = Tensor::view(dense[2].data(), Shape{B, H, S, D});
    auto ro = Tensor::create(Shape{B, H, S, D});
    auto rp = prepare(ref, ctx);
    ASSERT_TRUE(rp && rq && rk && rv && ro);
    ASSERT_TRUE(rp->execute({&*rq, &*rk, &*rv}, {&*ro}));
    std::vector<float> out(static_cast<std::size_t>(B * S * E));
    auto pq = Tensor::view(qkv.data(), Shape{B, H, S, D});
    auto pk = Tensor::view(qkv.data() + E, Shape{B, H, S, D});
    auto pv = Tensor::view(qkv.data() + 2 * E, Shape{B, H, S, D});
    auto po = Tensor::view(out.data(), Shape{B, H, S, D});
    auto pp = prepare(packed, ctx);
    ASSERT_TRUE(pp && pq && pk && pv && po) << stage_name(st);
    ASSERT_TRUE(pp->execute({&*pq, &*pk, &*pv}, {&*po}));
    // out is (B, S, H, D): compare element by element with the dense (B, H, S, D) result.
    std::vector<float> want(out.size());
    for (std::int64_t b = 0; b < B; ++b)
      for (std::int64_t h = 0; h < H; ++h)
        for (std::int64_t s = 0; s < S; ++s)
          for (std::int64_t d = 0; d < D; ++d)
            want[static_cast<std::size_t>(((b * S + s) * H + h) * D + d)] = ro->data()[((b * H + h) * S + s) * D + d];
    const auto c = check::compare(out, want, check::tolerance(ref));
    EXPECT_TRUE(c.ok) << stage_name(st) << ": " << c.reason;
    // k not where the packed layout puts it.
    auto bad = Tensor::view(qkv.data() + E + 1, Shape{B, H, S, D});
    const Status s = pp->execute({&*pq, &*bad, &*pv}, {&*po});
    EXPECT_EQ(s.code(), StatusCode::invalid_argument);
    EXPECT_NE(s.message().find("packed_qkv"), std::string::npos) << s.message();
  }
}

}  // namespace
