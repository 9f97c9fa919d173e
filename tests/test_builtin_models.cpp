// tests/test_builtin_models.cpp - the built-in models are valid ONNX and are the networks they claim to be.
//
// Validity is ONNX's own word: the bytes parse, onnx::checker accepts the model and strict
// shape inference (with data propagation, which is what carries BERT's symbolic batch and seq
// through its Shape/Gather/Concat/Reshape arithmetic) arrives at the declared output shape.
// Identity is checked against numbers that do not come from builtin.cpp: node counts by op
// type worked out here from each architecture's description, and parameter counts worked out
// here layer by layer and compared with the published figures (torchvision's 25,557,032 for
// ResNet-50 and 3,504,872 for MobileNetV2, which count BN's gamma and beta but not its running
// statistics; 7,087,872 for a BERT-base layer). A model missing one bottleneck, one residual
// Add or one bias fails at least one of them.
#include <gtest/gtest.h>
#include <onnx/checker.h>
#include <onnx/onnx_pb.h>
#include <onnx/shape_inference/implementation.h>

#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "src/onnx/builtin.hpp"

namespace opfuse::onnx {
namespace {

using OpCounts = std::map<std::string, int>;

// The model's bytes, built once per test binary: ResNet-50 alone is ~100 MB.
const std::string& bytes_of(const std::string& name) {
  static std::map<std::string, std::string> cache;
  auto it = cache.find(name);
  if (it == cache.end()) {
    Result<std::string> r = builtin_model_bytes(name);
    EXPECT_TRUE(r.is_ok()) << name << ": " << r.status().message();
    it = cache.emplace(name, r ? std::move(r).value() : std::string()).first;
  }
  return it->second;
}

::onnx::ModelProto parse(const std::string& name) {
  ::onnx::ModelProto m;
  EXPECT_TRUE(m.ParseFromString(bytes_of(name))) << name << ": bytes do not parse as a ModelProto";
  return m;
}

std::string meta(const ::onnx::ModelProto& m, const std::string& key) {
  for (const auto& p : m.metadata_props())
    if (p.key() == key) return p.value();
  return "<missing>";
}

OpCounts op_counts(const ::onnx::ModelProto& m) {
  OpCounts c;
  for (const auto& n : m.graph().node()) ++c[n.op_type()];
  return c;
}

int64_t elements(const ::onnx::TensorProto& t) {
  int64_t n = 1;
  for (const int64_t d : t.dims()) n *= d;
  return n;
}

// Trainable parameters as PyTorch counts them: every float tensor of rank >= 1, less BN's
// running mean and variance (inputs 3 and 4), which are buffers. Rank-0 floats are the
// export's constants (Clip bounds, epsilon, the attention scale), and int64 tensors are shape
// arithmetic.
int64_t parameter_count(const ::onnx::ModelProto& m) {
  std::set<std::string> buffers;
  for (const auto& n : m.graph().node())
    if (n.op_type() == "BatchNormalization" && n.input_size() == 5) {
      buffers.insert(n.input(3));
      buffers.insert(n.input(4));
    }
  int64_t total = 0;
  for (const auto& t : m.graph().initializer())
    if (t.data_type() == ::onnx::TensorProto::FLOAT && t.dims_size() >= 1 && !buffers.count(t.name()))
      total += elements(t);
  return total;
}

std::vector<std::string> dims_of(const ::onnx::ValueInfoProto& v) {
  std::vector<std::string> out;
  for (const auto& d : v.type().tensor_type().shape().dim())
    out.push_back(d.has_dim_value() ? std::to_string(d.dim_value()) : d.has_dim_param() ? d.dim_param() : "?");
  return out;
}

// ---- every model -----------------------------------------------------------------------------

TEST(BuiltinModels, ListsResnet50MobilenetV2AndBertLayer) {
  const auto models = builtin_models();
  ASSERT_EQ(models.size(), 3u);
  EXPECT_EQ(models[0].name, "resnet50");
  EXPECT_EQ(models[1].name, "mobilenet_v2");
  EXPECT_EQ(models[2].name, "bert_layer");
  for (const BuiltinModel& m : models) EXPECT_FALSE(m.summary.empty()) << m.name;
}

TEST(BuiltinModels, UnknownNameIsInvalidArgumentListingTheKnownOnes) {
  for (const char* bad : {"resnet18", "", "ResNet50"}) {
    const Result<std::string> r = builtin_model_bytes(bad);
    ASSERT_FALSE(r.is_ok()) << "'" << bad << "' was accepted";
    EXPECT_EQ(r.status().code(), StatusCode::invalid_argument);
    const std::string msg = r.status().message();  // status() returns a copy
    EXPECT_NE(msg.find(std::string("'") + bad + "'"), std::string::npos) << msg;
    for (const BuiltinModel& m : builtin_models()) EXPECT_NE(msg.find(m.name), std::string::npos) << msg;
  }
}

class EachBuiltinModel : public ::testing::TestWithParam<std::string> {};

TEST_P(EachBuiltinModel, SameBytesOnEveryCall) {
  const Result<std::string> again = builtin_model_bytes(GetParam());
  ASSERT_TRUE(again.is_ok()) << again.status().message();
  EXPECT_FALSE(again->empty());
  EXPECT_TRUE(*again == bytes_of(GetParam())) << "two calls gave different bytes";
}

TEST_P(EachBuiltinModel, HeaderAndMetadata) {
  const ::onnx::ModelProto m = parse(GetParam());
  EXPECT_EQ(m.ir_version(), 8);
  EXPECT_EQ(m.producer_name(), "opfuse");
  ASSERT_EQ(m.opset_import_size(), 1);
  EXPECT_EQ(m.opset_import(0).domain(), "");
  EXPECT_EQ(m.opset_import(0).version(), 17);
  EXPECT_EQ(meta(m, "opfuse.model"), GetParam());
  EXPECT_NE(meta(m, "opfuse.description"), "<missing>");
  EXPECT_EQ(meta(m, "opfuse.default_dims"), GetParam() == "bert_layer" ? "batch=1,seq=128" : "<missing>");
}

TEST_P(EachBuiltinModel, PassesTheOnnxChecker) {
  const ::onnx::ModelProto m = parse(GetParam());
  try {
    ::onnx::checker::check_model(m);
  } catch (const std::exception& e) {
    FAIL() << GetParam() << ": " << e.what();
  }
}

// The declared output shape is erased first, so what is compared is what inference derived.
TEST_P(EachBuiltinModel, ShapeInferenceDerivesTheOutputShape) {
  ::onnx::ModelProto m = parse(GetParam());
  ASSERT_EQ(m.graph().output_size(), 1);
  const std::vector<std::string> declared = dims_of(m.graph().output(0));
  m.mutable_graph()->mutable_output(0)->mutable_type()->mutable_tensor_type()->clear_shape();
  try {
    ::onnx::shape_inference::InferShapes(m, ::onnx::OpSchemaRegistry::Instance(),
                                         ::onnx::ShapeInferenceOptions(/*check_type=*/true, /*strict=*/1,
                                                                       /*data_prop=*/true));
  } catch (const std::exception& e) {
    FAIL() << GetParam() << ": " << e.what();
  }
  const std::vector<std::string> want = GetParam() == "bert_layer" ? std::vector<std::string>{"batch", "seq", "768"}
                                                                   : std::vector<std::string>{"1", "1000"};
  EXPECT_EQ(declared, want);
  EXPECT_EQ(dims_of(m.graph().output(0)), want);
  EXPECT_GT(m.graph().value_info_size(), 0) << "inference typed no intermediate value";
}

// Names as an exporter gives them: unique node names, every initializer used, and weights
// stored compactly (raw little-endian data of exactly the right size), finite and not all equal.
TEST_P(EachBuiltinModel, NamesAndInitializersAreWellFormed) {
  const ::onnx::ModelProto m = parse(GetParam());
  std::set<std::string> node_names, used;
  for (const auto& n : m.graph().node()) {
    EXPECT_FALSE(n.name().empty()) << n.op_type();
    EXPECT_TRUE(node_names.insert(n.name()).second) << "duplicate node name " << n.name();
    EXPECT_EQ(n.name().front(), '/') << n.name();
    for (const std::string& in : n.input()) used.insert(in);
  }
  for (const auto& t : m.graph().initializer()) {
    EXPECT_TRUE(used.count(t.name())) << "unused initializer " << t.name();
    const size_t width = t.data_type() == ::onnx::TensorProto::FLOAT ? 4 : 8;
    ASSERT_EQ(t.raw_data().size(), static_cast<size_t>(elements(t)) * width) << t.name();
    if (t.data_type() != ::onnx::TensorProto::FLOAT) continue;
    std::vector<float> v(static_cast<size_t>(elements(t)));
    std::memcpy(v.data(), t.raw_data().data(), t.raw_data().size());  // the test host is little-endian
    bool varies = false;
    for (const float x : v) {
      ASSERT_TRUE(std::isfinite(x)) << t.name();
      varies = varies || x != v[0];
    }
    // Tensors that are constant by design: LayerNorm's gamma 1 and beta 0, and scalars.
    const bool constant_by_design = t.name().find("LayerNorm") != std::string::npos || v.size() == 1;
    if (!constant_by_design) {
      EXPECT_TRUE(varies) << t.name() << " holds one value repeated";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Builtin, EachBuiltinModel, ::testing::Values("resnet50", "mobilenet_v2", "bert_layer"),
                         [](const ::testing::TestParamInfo<std::string>& info) { return info.param; });

// ---- ResNet-50 -------------------------------------------------------------------------------

TEST(BuiltinResnet50, NodeCountsByOpType) {
  constexpr std::array<int, 4> kBlocks = {3, 4, 6, 3};
  int blocks = 0;
  for (const int n : kBlocks) blocks += n;  // 16 bottlenecks
  // Stem conv, three per bottleneck, one downsample per stage; each conv has its own BN.
  const int convs = 1 + 3 * blocks + 4;
  const OpCounts want = {{"Conv", convs},
                         {"BatchNormalization", convs},
                         {"Relu", 1 + 3 * blocks},  // stem, two inside each bottleneck and one after its Add
                         {"Add", blocks},
                         {"MaxPool", 1},
                         {"GlobalAveragePool", 1},
                         {"Flatten", 1},
                         {"Gemm", 1}};
  EXPECT_EQ(convs, 53);
  EXPECT_EQ(op_counts(parse("resnet50")), want);
}

TEST(BuiltinResnet50, ParameterCountIsTorchvisions) {
  // Conv weights plus BN gamma and beta for each conv-BN pair; the fc's weight and bias.
  auto conv_bn = [](int64_t cin, int64_t cout, int64_t k) { return cin * cout * k * k + 2 * cout; };
  int64_t want = conv_bn(3, 64, 7);
  constexpr std::array<int, 4> kBlocks = {3, 4, 6, 3};
  int64_t cin = 64;
  for (int stage = 0; stage < 4; ++stage) {
    const int64_t w = int64_t{64} << stage;
    for (int i = 0; i < kBlocks[stage]; ++i) {
      want += conv_bn(cin, w, 1) + conv_bn(w, w, 3) + conv_bn(w, 4 * w, 1);
      if (i == 0) want += conv_bn(cin, 4 * w, 1);
      cin = 4 * w;
    }
  }
  want += 2048 * 1000 + 1000;
  EXPECT_EQ(want, 25'557'032);  // sum(p.numel() for p in torchvision.models.resnet50().parameters())
  EXPECT_EQ(parameter_count(parse("resnet50")), want);
}

TEST(BuiltinResnet50, StemAndFirstBottleneckAreShapedAsExported) {
  const ::onnx::ModelProto m = parse("resnet50");
  const auto& g = m.graph();
  ASSERT_GE(g.node_size(), 12);
  EXPECT_EQ(g.node(0).name(), "/conv1/Conv");
  EXPECT_EQ(g.node(0).input(0), "input");
  EXPECT_EQ(g.node(0).input_size(), 2) << "torchvision's convs have no bias";
  EXPECT_EQ(g.node(1).name(), "/bn1/BatchNormalization");
  EXPECT_EQ(g.node(1).input(0), g.node(0).output(0));
  EXPECT_EQ(g.node(2).op_type(), "Relu");
  EXPECT_EQ(g.node(3).name(), "/maxpool/MaxPool");
  EXPECT_EQ(g.node(4).name(), "/layer1/layer1.0/conv1/Conv");
  EXPECT_EQ(g.node(4).input(1), "layer1.0.conv1.weight");
  // v1.5: in the first bottleneck of layer2 the stride sits on conv2, the 3x3.
  std::map<std::string, int64_t> stride;
  for (const auto& n : g.node())
    for (const auto& a : n.attribute())
      if (a.name() == "strides") stride[n.name()] = a.ints(0);
  EXPECT_EQ(stride["/layer2/layer2.0/conv1/Conv"], 1);
  EXPECT_EQ(stride["/layer2/layer2.0/conv2/Conv"], 2);
  EXPECT_EQ(stride["/layer2/layer2.0/downsample/downsample.0/Conv"], 2);
  EXPECT_EQ(g.node(g.node_size() - 1).name(), "/fc/Gemm");
  EXPECT_EQ(g.node(g.node_size() - 1).output(0), "output");
}

// ---- MobileNetV2 -----------------------------------------------------------------------------

struct InvertedResidualSetting {
  int t, c, n, s;
};
constexpr std::array<InvertedResidualSetting, 7> kMobilenetSettings = {
    {{1, 16, 1, 1}, {6, 24, 2, 2}, {6, 32, 3, 2}, {6, 64, 4, 2}, {6, 96, 3, 1}, {6, 160, 3, 2}, {6, 320, 1, 1}}};

TEST(BuiltinMobilenetV2, NodeCountsByOpType) {
  int convs = 2, clips = 2, adds = 0;  // the stem and the final 1x1 to 1280 are conv-BN-ReLU6
  int cin = 32;
  for (const auto& st : kMobilenetSettings) {
    for (int i = 0; i < st.n; ++i) {
      const int stride = i == 0 ? st.s : 1;
      convs += st.t == 1 ? 2 : 3;  // [expand,] depthwise, project
      clips += st.t == 1 ? 1 : 2;  // the project conv is linear
      if (stride == 1 && cin == st.c) ++adds;
      cin = st.c;
    }
  }
  EXPECT_EQ(convs, 52);
  EXPECT_EQ(adds, 10);
  const OpCounts want = {{"Conv", convs}, {"BatchNormalization", convs}, {"Clip", clips},
                         {"Add", adds},   {"GlobalAveragePool", 1},      {"Flatten", 1},
                         {"Gemm", 1}};
  EXPECT_EQ(op_counts(parse("mobilenet_v2")), want);
}

TEST(BuiltinMobilenetV2, ParameterCountIsTorchvisions) {
  auto conv_bn = [](int64_t cin, int64_t cout, int64_t k, int64_t groups) {
    return cout * (cin / groups) * k * k + 2 * cout;
  };
  int64_t want = conv_bn(3, 32, 3, 1);
  int64_t cin = 32;
  for (const auto& st : kMobilenetSettings) {
    for (int i = 0; i < st.n; ++i) {
      const int64_t hidden = cin * st.t;
      if (st.t != 1) want += conv_bn(cin, hidden, 1, 1);
      want += conv_bn(hidden, hidden, 3, hidden) + conv_bn(hidden, st.c, 1, 1);
      cin = st.c;
    }
  }
  want += conv_bn(320, 1280, 1, 1) + 1280 * 1000 + 1000;
  EXPECT_EQ(want, 3'504'872);  // sum(p.numel() for p in torchvision.models.mobilenet_v2().parameters())
  EXPECT_EQ(parameter_count(parse("mobilenet_v2")), want);
}

TEST(BuiltinMobilenetV2, Relu6IsClipWithInitializerBoundsAndDepthwiseIsGrouped) {
  const ::onnx::ModelProto m = parse("mobilenet_v2");
  std::map<std::string, float> scalars;
  for (const auto& t : m.graph().initializer())
    if (t.data_type() == ::onnx::TensorProto::FLOAT && t.dims_size() == 0) {
      float v;
      std::memcpy(&v, t.raw_data().data(), 4);
      scalars[t.name()] = v;
    }
  int depthwise = 0;
  for (const auto& n : m.graph().node()) {
    if (n.op_type() == "Clip") {
      ASSERT_EQ(n.input_size(), 3) << n.name();
      ASSERT_TRUE(scalars.count(n.input(1)) && scalars.count(n.input(2))) << n.name();
      EXPECT_EQ(scalars[n.input(1)], 0.0f);
      EXPECT_EQ(scalars[n.input(2)], 6.0f);
    }
    if (n.op_type() == "Conv")
      for (const auto& a : n.attribute())
        if (a.name() == "group" && a.i() > 1) ++depthwise;
  }
  EXPECT_EQ(depthwise, 17);  // one per inverted residual block
}

// ---- BERT layer ------------------------------------------------------------------------------

TEST(BuiltinBertLayer, NodeCountsByOpType) {
  constexpr int kLinears = 6;  // query, key, value, attention output, intermediate, output
  constexpr int kViews = 4;    // Q, K and V split into heads, the context merged back
  const OpCounts want = {
      {"MatMul", kLinears + 2},  // + Q K^T and probs V
      // a bias per linear, the mask, two residuals, LayerNorm's epsilon and beta twice, GELU's 1 + erf
      {"Add", kLinears + 1 + 2 + 2 * 2 + 1},
      {"Shape", 2 * kViews},  // x.size(0) and x.size(1) for each view
      {"Gather", 2 * kViews},
      {"Unsqueeze", 2 * kViews},
      {"Concat", kViews},
      {"Reshape", kViews},
      {"Transpose", kViews},  // three head permutes (K's folds in its transpose) and the merge
      {"Div", 1 + 2 + 1},     // the 1/sqrt(64) scale, LayerNorm's division twice, GELU's x / sqrt(2)
      {"Softmax", 1},
      {"ReduceMean", 2 * 2},
      {"Sub", 2},
      {"Pow", 2},
      {"Sqrt", 2},
      {"Mul", 2 + 2},  // LayerNorm's gamma twice, GELU's x * and * 0.5
      {"Erf", 1},
  };
  EXPECT_EQ(op_counts(parse("bert_layer")), want);
}

TEST(BuiltinBertLayer, ParameterCountIsBertBases) {
  constexpr int64_t h = 768, ff = 3072;
  const int64_t want = 4 * (h * h + h) + (h * ff + ff) + (ff * h + h) + 2 * (2 * h);
  EXPECT_EQ(want, 7'087'872);  // one BertLayer of bert-base-uncased
  EXPECT_EQ(parameter_count(parse("bert_layer")), want);
}

TEST(BuiltinBertLayer, InputsAreDynamicAndAttentionIsShapedAsExported) {
  const ::onnx::ModelProto m = parse("bert_layer");
  const auto& g = m.graph();
  ASSERT_EQ(g.input_size(), 2);
  EXPECT_EQ(g.input(0).name(), "hidden_states");
  EXPECT_EQ(dims_of(g.input(0)), (std::vector<std::string>{"batch", "seq", "768"}));
  EXPECT_EQ(g.input(1).name(), "attention_mask");
  EXPECT_EQ(dims_of(g.input(1)), (std::vector<std::string>{"batch", "1", "1", "seq"}));
  std::map<std::string, const ::onnx::NodeProto*> by_name;
  for (const auto& n : g.node()) by_name[n.name()] = &n;
  ASSERT_TRUE(by_name.count("/attention/self/query/MatMul"));
  EXPECT_EQ(by_name["/attention/self/query/MatMul"]->input(0), "hidden_states");
  ASSERT_TRUE(by_name.count("/attention/self/Softmax"));
  const auto& softmax = *by_name["/attention/self/Softmax"];
  ASSERT_EQ(softmax.attribute_size(), 1);
  EXPECT_EQ(softmax.attribute(0).i(), -1);
  // Softmax reads Add(Div(MatMul(Q, K^T), 8), mask).
  ASSERT_TRUE(by_name.count("/attention/self/Add") && by_name.count("/attention/self/Div"));
  EXPECT_EQ(softmax.input(0), by_name["/attention/self/Add"]->output(0));
  EXPECT_EQ(by_name["/attention/self/Add"]->input(1), "attention_mask");
  EXPECT_EQ(by_name["/attention/self/Add"]->input(0), by_name["/attention/self/Div"]->output(0));
  // nn.Linear is MatMul(x, W^T) then Add(bias, .), bias first, as torch's linear symbolic writes it.
  std::set<std::string> initializers;
  for (const auto& t : g.initializer()) initializers.insert(t.name());
  int linears = 0;
  for (const auto& n : g.node()) {
    if (n.op_type() != "MatMul" || !initializers.count(n.input(1))) continue;
    const std::string scope = n.name().substr(0, n.name().rfind('/'));  // "/attention/self/query"
    ASSERT_TRUE(by_name.count(scope + "/Add")) << n.name();
    const auto& add = *by_name[scope + "/Add"];
    EXPECT_TRUE(initializers.count(add.input(0)) && add.input(0).ends_with(".bias")) << add.name();
    EXPECT_EQ(add.input(1), n.output(0)) << add.name();
    ++linears;
  }
  EXPECT_EQ(linears, 6);
  ASSERT_TRUE(by_name.count("/output/LayerNorm/Add_1"));
  EXPECT_EQ(by_name["/output/LayerNorm/Add_1"]->output(0), "output");
}

}  // namespace
}  // namespace opfuse::onnx
