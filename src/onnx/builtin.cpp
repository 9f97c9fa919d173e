// src/onnx/builtin.cpp - writing ResNet-50, MobileNetV2 and a BERT layer as ONNX.
//
// Each model is written by a function that walks the architecture in the order the PyTorch
// module's forward() runs, calling a small Builder that does what torch.onnx.export's tracer
// does: a node takes its name from the module scope it runs in plus its op type, numbered
// within that scope ("/layer1/layer1.0/relu_1/Relu", "/attention/self/Shape_3"), and its output
// is "<node name>_output_0". Parameters keep the module's state_dict names
// ("layer1.0.bn1.running_var"); the few constants an export creates (Clip bounds, the
// Shape/Gather indices, LayerNorm's epsilon) are initializers here, where an export may also
// write Constant nodes: either way an importer sees a constant input. The choices that a
// fusion pattern will care about follow the export exactly:
//   - eval-mode export without BN folding: Conv (no bias) -> BatchNormalization (epsilon 1e-5,
//     momentum 0.9, training_mode 0) -> Relu / Clip, residual Add then Relu;
//   - nn.Linear on a 3-D input becomes MatMul(x, W^T) then Add(bias, x W^T), bias first, as
//     torch's `linear` symbolic writes it; W is stored transposed, [in, out];
//   - view() with a size taken from the tensor becomes Shape -> Gather -> Unsqueeze -> Concat
//     -> Reshape, one Shape per .size(i) call, and K.transpose(-1, -2) after the head permute
//     is the single Transpose(0, 2, 3, 1) the exporter's consecutive-transpose peephole leaves;
//   - LayerNorm and GELU are the opset-9 decompositions (ReduceMean/Sub/Pow/ReduceMean/Add/
//     Sqrt/Div/Mul/Add and Div/Erf/Add/Mul/Mul).
//
// Weights come from splitmix64 seeded by a hash of "<model>:<tensor name>", so a tensor's
// values do not depend on the order it was made in and two calls give the same bytes (the
// serializer runs in deterministic mode too). The scales keep activations O(1): convolutions
// are uniform with He/fan-in variance 2/fan_in when a ReLU follows and 1/fan_in when none does
// (MobileNet's linear projection), BN running variance lies in [0.5, 1.5] so the BN affine is
// close to a unit one, and the last BN of each ResNet residual branch gets gamma ~0.25 (a mild
// form of torchvision's zero_init_residual) so the 16 residual sums grow the signal slowly
// rather than doubling its variance each time. BERT uses std 0.02 like its initializer_range.
// In a NumPy forward pass on N(0, 1) inputs, ResNet-50's block outputs grow from RMS 2.5 to 7.7
// over the four stages and its logits have RMS 4.3; MobileNetV2's activations stay between RMS
// 1 and 3.5 and its logits have RMS 1.0; the BERT layer's output is LayerNorm'd to RMS 1.
#include "builtin.hpp"

#include <fmt/format.h>
#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl_lite.h>
#include <onnx/onnx_pb.h>

#include <array>
#include <bit>
#include <cmath>
#include <cstdint>
#include <exception>
#include <initializer_list>
#include <iterator>
#include <map>
#include <new>
#include <string>
#include <utility>
#include <variant>
#include <vector>

namespace opfuse::onnx {

namespace {

constexpr int64_t kIrVersion = 8;
constexpr int64_t kOpset = 17;

// ---- deterministic numbers -----------------------------------------------------------------

uint64_t fnv1a(std::string_view s) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (const unsigned char c : s) h = (h ^ c) * 0x100000001b3ull;
  return h;
}

// splitmix64: tiny, fast and statistically good enough for initial weights.
class Rng {
 public:
  explicit Rng(uint64_t seed) : s_(seed) {}
  uint64_t next() {
    uint64_t z = (s_ += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  // Uniform in [0, 1), 24 bits so the value is exact in a float.
  float unit() { return static_cast<float>(next() >> 40) * 0x1.0p-24f; }

 private:
  uint64_t s_;
};

// Half-width of a zero-mean uniform distribution with the given standard deviation.
float uniform_half_width(double stddev) { return static_cast<float>(std::sqrt(3.0) * stddev); }

// ---- attributes ----------------------------------------------------------------------------

::onnx::AttributeProto attr_int(const char* name, int64_t v) {
  ::onnx::AttributeProto a;
  a.set_name(name);
  a.set_type(::onnx::AttributeProto::INT);
  a.set_i(v);
  return a;
}

::onnx::AttributeProto attr_float(const char* name, float v) {
  ::onnx::AttributeProto a;
  a.set_name(name);
  a.set_type(::onnx::AttributeProto::FLOAT);
  a.set_f(v);
  return a;
}

::onnx::AttributeProto attr_ints(const char* name, std::initializer_list<int64_t> v) {
  ::onnx::AttributeProto a;
  a.set_name(name);
  a.set_type(::onnx::AttributeProto::INTS);
  for (const int64_t x : v) a.add_ints(x);
  return a;
}

// ---- the builder ---------------------------------------------------------------------------

using Dims = std::vector<int64_t>;
using IoDim = std::variant<int64_t, std::string>;  // a fixed size or a dim_param such as "batch"

class Builder {
 public:
  explicit Builder(std::string_view model) : model_(model) {
    m_.set_ir_version(kIrVersion);
    m_.set_producer_name("opfuse");
    m_.set_producer_version("builtin-1");
    ::onnx::OperatorSetIdProto* op = m_.add_opset_import();
    op->set_domain("");
    op->set_version(kOpset);
    g_ = m_.mutable_graph();
    g_->set_name("main_graph");
    meta("opfuse.model", model_);
  }

  ::onnx::ModelProto& model() { return m_; }

  void meta(std::string_view key, std::string_view value) {
    ::onnx::StringStringEntryProto* p = m_.add_metadata_props();
    p->set_key(std::string(key));
    p->set_value(std::string(value));
  }

  void input(const std::string& name, std::initializer_list<IoDim> dims) { io(g_->add_input(), name, dims); }
  void output(const std::string& name, std::initializer_list<IoDim> dims) { io(g_->add_output(), name, dims); }

  // A float initializer filled with uniform values in [lo, hi).
  std::string uniform(const std::string& name, const Dims& dims, float lo, float hi) {
    ::onnx::TensorProto* t = tensor(name, ::onnx::TensorProto::FLOAT, dims);
    const int64_t n = count(dims);
    std::string& raw = *t->mutable_raw_data();
    raw.resize(static_cast<size_t>(n) * 4);
    Rng rng(fnv1a(model_ + ":" + name));
    for (int64_t i = 0; i < n; ++i) put_le(raw, i, std::bit_cast<uint32_t>(lo + (hi - lo) * rng.unit()), 4);
    return name;
  }
  // Zero-mean uniform with the given standard deviation.
  std::string random(const std::string& name, const Dims& dims, double stddev) {
    const float a = uniform_half_width(stddev);
    return uniform(name, dims, -a, a);
  }
  std::string filled(const std::string& name, const Dims& dims, float v) { return uniform(name, dims, v, v); }
  std::string scalar(const std::string& name, float v) { return filled(name, {}, v); }

  // An int64 initializer: rank 0 when dims is empty, else the given dims.
  std::string ints(const std::string& name, const Dims& dims, std::initializer_list<int64_t> values) {
    ::onnx::TensorProto* t = tensor(name, ::onnx::TensorProto::INT64, dims);
    std::string& raw = *t->mutable_raw_data();
    raw.resize(values.size() * 8);
    int64_t i = 0;
    for (const int64_t v : values) put_le(raw, i++, static_cast<uint64_t>(v), 8);
    return name;
  }

  // Adds a node of op `type` in module scope `scope` ("" for the top level) and returns its
  // output's name: `out` when given (a graph output), else "<node name>_output_0".
  std::string node(const std::string& scope, std::string_view type, const std::vector<std::string>& inputs,
                   std::initializer_list<::onnx::AttributeProto> attrs = {}, std::string out = {}) {
    const std::string base = scope + "/" + std::string(type);
    const int k = counter_[base]++;
    const std::string name = k == 0 ? base : fmt::format("{}_{}", base, k);
    if (out.empty()) out = name + "_output_0";
    ::onnx::NodeProto* n = g_->add_node();
    n->set_name(name);
    n->set_op_type(std::string(type));
    for (const std::string& in : inputs) n->add_input(in);
    n->add_output(out);
    for (const ::onnx::AttributeProto& a : attrs) *n->add_attribute() = a;
    return out;
  }

 private:
  static int64_t count(const Dims& dims) {
    int64_t n = 1;
    for (const int64_t d : dims) n *= d;
    return n;
  }
  // Writes the low `bytes` bytes of v little-endian at element i, whatever the host's order.
  static void put_le(std::string& raw, int64_t i, uint64_t v, int bytes) {
    for (int b = 0; b < bytes; ++b) raw[static_cast<size_t>(i * bytes + b)] = static_cast<char>((v >> (8 * b)) & 0xff);
  }
  ::onnx::TensorProto* tensor(const std::string& name, ::onnx::TensorProto::DataType type, const Dims& dims) {
    ::onnx::TensorProto* t = g_->add_initializer();
    t->set_name(name);
    t->set_data_type(type);
    for (const int64_t d : dims) t->add_dims(d);
    return t;
  }
  static void io(::onnx::ValueInfoProto* v, const std::string& name, std::initializer_list<IoDim> dims) {
    v->set_name(name);
    ::onnx::TypeProto_Tensor* t = v->mutable_type()->mutable_tensor_type();
    t->set_elem_type(::onnx::TensorProto::FLOAT);
    ::onnx::TensorShapeProto* s = t->mutable_shape();
    for (const IoDim& d : dims) {
      ::onnx::TensorShapeProto_Dimension* dim = s->add_dim();
      if (const int64_t* x = std::get_if<int64_t>(&d)) {
        dim->set_dim_value(*x);
      } else {
        dim->set_dim_param(std::get<std::string>(d));
      }
    }
  }

  std::string model_;
  ::onnx::ModelProto m_;
  ::onnx::GraphProto* g_ = nullptr;
  std::map<std::string, int> counter_;  // "<scope>/<op>" -> how many such nodes so far
};

// ---- CNN pieces ----------------------------------------------------------------------------

struct ConvSpec {
  int64_t cin, cout, kernel, stride, pad, groups = 1;
  double gain = 2.0;  // He gain: 2 when a ReLU follows, 1 for a linear output
};

// Conv without bias, as torchvision's conv-BN layers have. w is (cout, cin/groups, k, k).
std::string conv(Builder& b, const std::string& scope, const std::string& weight, const std::string& x,
                 const ConvSpec& c) {
  const int64_t fan_in = c.cin / c.groups * c.kernel * c.kernel;
  b.random(weight, {c.cout, c.cin / c.groups, c.kernel, c.kernel}, std::sqrt(c.gain / static_cast<double>(fan_in)));
  return b.node(
      scope, "Conv", {x, weight},
      {attr_ints("dilations", {1, 1}), attr_int("group", c.groups), attr_ints("kernel_shape", {c.kernel, c.kernel}),
       attr_ints("pads", {c.pad, c.pad, c.pad, c.pad}), attr_ints("strides", {c.stride, c.stride})});
}

// Eval-mode BatchNormalization with module parameters "<prefix>.weight|bias|running_mean|running_var".
std::string batchnorm(Builder& b, const std::string& scope, const std::string& prefix, const std::string& x,
                      int64_t channels, float gamma_center = 1.0f) {
  const std::string scale = b.uniform(prefix + ".weight", {channels}, gamma_center * 0.9f, gamma_center * 1.1f);
  const std::string bias = b.uniform(prefix + ".bias", {channels}, -0.05f, 0.05f);
  const std::string mean = b.uniform(prefix + ".running_mean", {channels}, -0.05f, 0.05f);
  const std::string var = b.uniform(prefix + ".running_var", {channels}, 0.5f, 1.5f);
  return b.node(scope, "BatchNormalization", {x, scale, bias, mean, var},
                {attr_float("epsilon", 1e-5f), attr_float("momentum", 0.9f), attr_int("training_mode", 0)});
}

// nn.Linear on a 2-D input: Gemm(x, W, b) with W as stored, (out, in), and transB=1. PyTorch's
// default init, uniform in +-1/sqrt(in), for both.
std::string linear_gemm(Builder& b, const std::string& scope, const std::string& prefix, const std::string& x,
                        int64_t in, int64_t out, std::string output) {
  const float a = static_cast<float>(1.0 / std::sqrt(static_cast<double>(in)));
  const std::string w = b.uniform(prefix + ".weight", {out, in}, -a, a);
  const std::string bias = b.uniform(prefix + ".bias", {out}, -a, a);
  return b.node(scope, "Gemm", {x, w, bias},
                {attr_float("alpha", 1.0f), attr_float("beta", 1.0f), attr_int("transB", 1)}, std::move(output));
}

// GlobalAveragePool -> Flatten(axis 1) -> Gemm, the classifier head of both CNNs.
void classifier(Builder& b, const std::string& pool_scope, const std::string& fc_scope, const std::string& fc_prefix,
                const std::string& x, int64_t features) {
  const std::string pooled = b.node(pool_scope, "GlobalAveragePool", {x});
  const std::string flat = b.node("", "Flatten", {pooled}, {attr_int("axis", 1)});
  linear_gemm(b, fc_scope, fc_prefix, flat, features, 1000, "output");
}

// ---- ResNet-50 -----------------------------------------------------------------------------

// torchvision Bottleneck (v1.5: the stride sits on the 3x3). Names follow its module tree; the
// one self.relu module runs three times, which the exporter scopes as relu, relu_1, relu_2.
std::string bottleneck(Builder& b, const std::string& scope, const std::string& prefix, const std::string& x,
                       int64_t cin, int64_t width, int64_t stride, bool downsample) {
  const int64_t cout = width * 4;
  std::string y = conv(b, scope + "/conv1", prefix + ".conv1.weight", x, {cin, width, 1, 1, 0});
  y = batchnorm(b, scope + "/bn1", prefix + ".bn1", y, width);
  y = b.node(scope + "/relu", "Relu", {y});
  y = conv(b, scope + "/conv2", prefix + ".conv2.weight", y, {width, width, 3, stride, 1});
  y = batchnorm(b, scope + "/bn2", prefix + ".bn2", y, width);
  y = b.node(scope + "/relu_1", "Relu", {y});
  y = conv(b, scope + "/conv3", prefix + ".conv3.weight", y, {width, cout, 1, 1, 0});
  y = batchnorm(b, scope + "/bn3", prefix + ".bn3", y, cout, 0.25f);
  std::string identity = x;
  if (downsample) {
    identity =
        conv(b, scope + "/downsample/downsample.0", prefix + ".downsample.0.weight", x, {cin, cout, 1, stride, 0});
    identity = batchnorm(b, scope + "/downsample/downsample.1", prefix + ".downsample.1", identity, cout);
  }
  y = b.node(scope, "Add", {y, identity});  // out += identity
  return b.node(scope + "/relu_2", "Relu", {y});
}

void build_resnet50(Builder& b) {
  b.meta("opfuse.description",
         "torchvision ResNet-50 v1.5, eval-mode export with Conv and BatchNormalization kept apart; "
         "deterministic pseudo-random weights");
  b.input("input", {int64_t{1}, int64_t{3}, int64_t{224}, int64_t{224}});
  b.output("output", {int64_t{1}, int64_t{1000}});
  std::string x = conv(b, "/conv1", "conv1.weight", "input", {3, 64, 7, 2, 3});
  x = batchnorm(b, "/bn1", "bn1", x, 64);
  x = b.node("/relu", "Relu", {x});
  x = b.node("/maxpool", "MaxPool", {x},
             {attr_int("ceil_mode", 0), attr_ints("kernel_shape", {3, 3}), attr_ints("pads", {1, 1, 1, 1}),
              attr_ints("strides", {2, 2})});
  constexpr std::array<int, 4> kBlocks = {3, 4, 6, 3};
  int64_t cin = 64;
  for (int stage = 0; stage < 4; ++stage) {
    const int64_t width = int64_t{64} << stage;
    const std::string layer = fmt::format("layer{}", stage + 1);
    for (int i = 0; i < kBlocks[stage]; ++i) {
      const std::string prefix = fmt::format("{}.{}", layer, i);
      const int64_t stride = (stage > 0 && i == 0) ? 2 : 1;
      x = bottleneck(b, "/" + layer + "/" + prefix, prefix, x, cin, width, stride, i == 0);
      cin = width * 4;
    }
  }
  classifier(b, "/avgpool", "/fc", "fc", x, 2048);
}

// ---- MobileNetV2 ---------------------------------------------------------------------------

// Conv2dNormActivation: Conv -> BN -> ReLU6, the ReLU6 exported as Clip(x, 0, 6) with its bounds
// as inputs (opset >= 11). `scope` and `prefix` name the Sequential; its children are .0 .1 .2.
std::string conv_bn_relu6(Builder& b, const std::string& scope, const std::string& prefix, const std::string& x,
                          const ConvSpec& c) {
  const std::string last = scope.substr(scope.rfind('/') + 1);  // "features.0" or "conv.1"
  std::string y = conv(b, fmt::format("{}/{}.0", scope, last), prefix + ".0.weight", x, c);
  y = batchnorm(b, fmt::format("{}/{}.1", scope, last), prefix + ".1", y, c.cout);
  return b.node(fmt::format("{}/{}.2", scope, last), "Clip", {y, "relu6.min", "relu6.max"});
}

void build_mobilenet_v2(Builder& b) {
  b.meta("opfuse.description",
         "torchvision MobileNetV2 (width 1.0), eval-mode export: Conv, BatchNormalization, Clip for ReLU6; "
         "deterministic pseudo-random weights");
  b.input("input", {int64_t{1}, int64_t{3}, int64_t{224}, int64_t{224}});
  b.output("output", {int64_t{1}, int64_t{1000}});
  b.scalar("relu6.min", 0.0f);
  b.scalar("relu6.max", 6.0f);
  std::string x = conv_bn_relu6(b, "/features/features.0", "features.0", "input", {3, 32, 3, 2, 1});
  struct Setting {
    int64_t t, c, n, s;  // expansion, output channels, repeats, first stride
  };
  constexpr std::array<Setting, 7> kSettings = {
      {{1, 16, 1, 1}, {6, 24, 2, 2}, {6, 32, 3, 2}, {6, 64, 4, 2}, {6, 96, 3, 1}, {6, 160, 3, 2}, {6, 320, 1, 1}}};
  int64_t cin = 32;
  int index = 1;
  for (const Setting& st : kSettings) {
    for (int64_t i = 0; i < st.n; ++i, ++index) {
      const int64_t stride = i == 0 ? st.s : 1;
      const int64_t hidden = cin * st.t;
      const std::string block = fmt::format("/features/features.{}", index);
      const std::string prefix = fmt::format("features.{}.conv", index);
      // InvertedResidual.conv is a Sequential: [expand,] depthwise, project conv, project BN.
      int layer = 0;
      std::string y = x;
      if (st.t != 1) {
        y = conv_bn_relu6(b, fmt::format("{}/conv/conv.{}", block, layer), fmt::format("{}.{}", prefix, layer), y,
                          {cin, hidden, 1, 1, 0});
        ++layer;
      }
      y = conv_bn_relu6(b, fmt::format("{}/conv/conv.{}", block, layer), fmt::format("{}.{}", prefix, layer), y,
                        {hidden, hidden, 3, stride, 1, hidden});
      ++layer;
      y = conv(b, fmt::format("{}/conv/conv.{}", block, layer), fmt::format("{}.{}.weight", prefix, layer), y,
               {hidden, st.c, 1, 1, 0, 1, 1.0});
      ++layer;
      y = batchnorm(b, fmt::format("{}/conv/conv.{}", block, layer), fmt::format("{}.{}", prefix, layer), y, st.c);
      if (stride == 1 && cin == st.c) y = b.node(block, "Add", {x, y});  // x + self.conv(x)
      x = y;
      cin = st.c;
    }
  }
  x = conv_bn_relu6(b, fmt::format("/features/features.{}", index), fmt::format("features.{}", index), x,
                    {cin, 1280, 1, 1, 0});
  // forward(): adaptive_avg_pool2d(x, (1, 1)) and torch.flatten at the top level; the
  // classifier's Dropout (classifier.0) vanishes in an eval-mode export.
  classifier(b, "", "/classifier/classifier.1", "classifier.1", x, 1280);
}

// ---- BERT layer ----------------------------------------------------------------------------

constexpr int64_t kHidden = 768;
constexpr int64_t kHeads = 12;
constexpr int64_t kHeadSize = 64;
constexpr int64_t kIntermediate = 3072;
constexpr double kBertStd = 0.02;  // BertConfig.initializer_range

// nn.Linear on [batch, seq, in]: MatMul(x, W^T) then Add(bias, .), W^T stored as [in, out].
std::string linear_matmul(Builder& b, const std::string& scope, const std::string& prefix, const std::string& x,
                          int64_t in, int64_t out) {
  const std::string w = b.random(prefix + ".weight", {in, out}, kBertStd);
  const std::string bias = b.uniform(prefix + ".bias", {out}, -0.02f, 0.02f);
  const std::string y = b.node(scope, "MatMul", {x, w});
  return b.node(scope, "Add", {bias, y});
}

// The shape [x.size(0), x.size(1), tail...] computed in-graph, as a dynamic-axes export writes
// x.size()[:k] + (...): one Shape -> Gather per size() call, each Unsqueezed to [1], then Concat.
std::string leading_dims_and(Builder& b, const std::string& scope, const std::string& x,
                             std::initializer_list<std::string> tail) {
  const std::string s0 = b.node(scope, "Shape", {x});
  const std::string d0 = b.node(scope, "Gather", {s0, "gather.index0"}, {attr_int("axis", 0)});
  const std::string s1 = b.node(scope, "Shape", {x});
  const std::string d1 = b.node(scope, "Gather", {s1, "gather.index1"}, {attr_int("axis", 0)});
  const std::string u0 = b.node(scope, "Unsqueeze", {d0, "unsqueeze.axes0"});
  const std::string u1 = b.node(scope, "Unsqueeze", {d1, "unsqueeze.axes0"});
  std::vector<std::string> parts = {u0, u1};
  parts.insert(parts.end(), tail.begin(), tail.end());
  return b.node(scope, "Concat", parts, {attr_int("axis", 0)});
}

std::string reshape(Builder& b, const std::string& scope, const std::string& x, const std::string& shape) {
  return b.node(scope, "Reshape", {x, shape}, {attr_int("allowzero", 0)});
}

// BertSelfAttention.transpose_for_scores: view to [batch, seq, 12, 64] then permute(0, 2, 1, 3);
// for K the following .transpose(-1, -2) folds into the permutation, giving (0, 2, 3, 1).
std::string split_heads(Builder& b, const std::string& scope, const std::string& x, bool key) {
  const std::string shape = leading_dims_and(b, scope, x, {"heads", "head_size"});
  const std::string r = reshape(b, scope, x, shape);
  return b.node(scope, "Transpose", {r}, {key ? attr_ints("perm", {0, 2, 3, 1}) : attr_ints("perm", {0, 2, 1, 3})});
}

// nn.LayerNorm(768, eps=1e-12) as the opset-9 symbolic decomposes it.
std::string layer_norm(Builder& b, const std::string& scope, const std::string& prefix, const std::string& x,
                       std::string out) {
  const std::string gamma = b.filled(prefix + ".weight", {kHidden}, 1.0f);
  const std::string beta = b.filled(prefix + ".bias", {kHidden}, 0.0f);
  const std::string mean = b.node(scope, "ReduceMean", {x}, {attr_ints("axes", {-1})});
  const std::string centered = b.node(scope, "Sub", {x, mean});
  const std::string squared = b.node(scope, "Pow", {centered, "layernorm.two"});
  const std::string var = b.node(scope, "ReduceMean", {squared}, {attr_ints("axes", {-1})});
  const std::string var_eps = b.node(scope, "Add", {var, "layernorm.epsilon"});
  const std::string stddev = b.node(scope, "Sqrt", {var_eps});
  const std::string normed = b.node(scope, "Div", {centered, stddev});
  const std::string scaled = b.node(scope, "Mul", {normed, gamma});
  return b.node(scope, "Add", {scaled, beta}, {}, std::move(out));
}

// Exact GELU, x * 0.5 * (1 + erf(x / sqrt(2))), as the opset-9 symbolic writes it.
std::string gelu(Builder& b, const std::string& scope, const std::string& x) {
  const std::string scaled = b.node(scope, "Div", {x, "gelu.sqrt2"});
  const std::string erf = b.node(scope, "Erf", {scaled});
  const std::string plus_one = b.node(scope, "Add", {erf, "gelu.one"});
  const std::string times_x = b.node(scope, "Mul", {x, plus_one});
  return b.node(scope, "Mul", {times_x, "gelu.half"});
}

void build_bert_layer(Builder& b) {
  b.meta("opfuse.description",
         "one Hugging Face BertLayer (BERT-base: hidden 768, 12 heads, intermediate 3072), dynamic batch and seq, "
         "LayerNorm and GELU decomposed; deterministic pseudo-random weights");
  b.meta("opfuse.default_dims", "batch=1,seq=128");
  b.input("hidden_states", {std::string("batch"), std::string("seq"), kHidden});
  b.input("attention_mask", {std::string("batch"), int64_t{1}, int64_t{1}, std::string("seq")});
  b.output("output", {std::string("batch"), std::string("seq"), kHidden});
  // The export's constants.
  b.ints("gather.index0", {}, {0});
  b.ints("gather.index1", {}, {1});
  b.ints("unsqueeze.axes0", {1}, {0});
  b.ints("heads", {1}, {kHeads});
  b.ints("head_size", {1}, {kHeadSize});
  b.ints("all_head_size", {1}, {kHeads * kHeadSize});
  b.scalar("attention.scale", 8.0f);  // sqrt(attention_head_size)
  b.scalar("layernorm.two", 2.0f);
  b.scalar("layernorm.epsilon", 1e-12f);
  b.scalar("gelu.sqrt2", 1.4142135f);
  b.scalar("gelu.one", 1.0f);
  b.scalar("gelu.half", 0.5f);

  const std::string h = "hidden_states";
  const std::string self = "/attention/self";
  // BertSelfAttention.forward: query first, then key and value each split into heads, then query.
  const std::string q_lin = linear_matmul(b, self + "/query", "attention.self.query", h, kHidden, kHidden);
  const std::string k_lin = linear_matmul(b, self + "/key", "attention.self.key", h, kHidden, kHidden);
  const std::string k_t = split_heads(b, self, k_lin, true);  // [batch, 12, 64, seq]
  const std::string v_lin = linear_matmul(b, self + "/value", "attention.self.value", h, kHidden, kHidden);
  const std::string v = split_heads(b, self, v_lin, false);  // [batch, 12, seq, 64]
  const std::string q = split_heads(b, self, q_lin, false);  // [batch, 12, seq, 64]
  std::string s = b.node(self, "MatMul", {q, k_t});          // [batch, 12, seq, seq]
  s = b.node(self, "Div", {s, "attention.scale"});
  s = b.node(self, "Add", {s, "attention_mask"});
  s = b.node(self, "Softmax", {s}, {attr_int("axis", -1)});
  std::string ctx = b.node(self, "MatMul", {s, v});  // [batch, 12, seq, 64]
  ctx = b.node(self, "Transpose", {ctx}, {attr_ints("perm", {0, 2, 1, 3})});
  ctx = reshape(b, self, ctx, leading_dims_and(b, self, ctx, {"all_head_size"}));  // [batch, seq, 768]
  // BertSelfOutput: LayerNorm(dense(ctx) + hidden_states).
  std::string a = linear_matmul(b, "/attention/output/dense", "attention.output.dense", ctx, kHidden, kHidden);
  a = b.node("/attention/output", "Add", {a, h});
  a = layer_norm(b, "/attention/output/LayerNorm", "attention.output.LayerNorm", a, {});
  // BertIntermediate and BertOutput: LayerNorm(dense(gelu(dense(a))) + a).
  std::string f = linear_matmul(b, "/intermediate/dense", "intermediate.dense", a, kHidden, kIntermediate);
  f = gelu(b, "/intermediate/intermediate_act_fn", f);
  f = linear_matmul(b, "/output/dense", "output.dense", f, kIntermediate, kHidden);
  f = b.node("/output", "Add", {f, a});
  layer_norm(b, "/output/LayerNorm", "output.LayerNorm", f, "output");
}

// ---- the list ------------------------------------------------------------------------------

constexpr BuiltinModel kModels[] = {
    {"resnet50", "torchvision ResNet-50 v1.5, input [1,3,224,224] -> [1,1000], Conv/BN/Relu unfused"},
    {"mobilenet_v2", "torchvision MobileNetV2 1.0, input [1,3,224,224] -> [1,1000], ReLU6 as Clip"},
    {"bert_layer", "one BERT-base encoder layer, [batch,seq,768] + additive mask -> [batch,seq,768]"},
};
using BuildFn = void (*)(Builder&);
constexpr BuildFn kBuilders[] = {build_resnet50, build_mobilenet_v2, build_bert_layer};
static_assert(std::size(kModels) == std::size(kBuilders), "every built-in model needs a builder");

std::string known_names() {
  std::string s;
  for (const BuiltinModel& m : kModels) {
    if (!s.empty()) s += ", ";
    s += m.name;
  }
  return s;
}

}  // namespace

std::span<const BuiltinModel> builtin_models() noexcept { return kModels; }

Result<std::string> builtin_model_bytes(std::string_view name) noexcept {
  try {
    for (size_t i = 0; i < std::size(kModels); ++i) {
      if (kModels[i].name != name) continue;
      Builder b(name);
      kBuilders[i](b);
      std::string bytes;
      {
        google::protobuf::io::StringOutputStream sink(&bytes);
        google::protobuf::io::CodedOutputStream out(&sink);
        out.SetSerializationDeterministic(true);
        if (!b.model().SerializeToCodedStream(&out) || out.HadError())
          return Status(StatusCode::internal, fmt::format("builtin model '{}': serializing failed", name));
      }  // the stream flushes into `bytes` here
      return bytes;
    }
    return Status(StatusCode::invalid_argument,
                  fmt::format("builtin model '{}' is unknown; known models: {}", name, known_names()));
  } catch (const std::bad_alloc&) {
    return Status(StatusCode::out_of_memory, fmt::format("builtin model '{}': out of memory", name));
  } catch (const std::exception& e) {
    return Status(StatusCode::internal, fmt::format("builtin model '{}': {}", name, e.what()));
  }
}

}  // namespace opfuse::onnx
