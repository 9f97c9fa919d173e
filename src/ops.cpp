// src/ops.cpp - op names, input lists, case names and the work/traffic model.
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>

#include "opfuse/ops.hpp"

namespace opfuse {

namespace {
constexpr std::array<std::string_view, kOpCount> kOpNames = {"gemm",
                                                             "conv2d",
                                                             "batchnorm",
                                                             "relu",
                                                             "clip",
                                                             "leaky_relu",
                                                             "sigmoid",
                                                             "tanh",
                                                             "gelu",
                                                             "silu",
                                                             "hardswish",
                                                             "add",
                                                             "sub",
                                                             "mul",
                                                             "div",
                                                             "maxpool2d",
                                                             "avgpool2d",
                                                             "global_avgpool",
                                                             "softmax",
                                                             "layernorm",
                                                             "rmsnorm",
                                                             "attention",
                                                             "inverted_residual",
                                                             "eltwise_chain"};
static_assert(static_cast<int>(OpKind::eltwise_chain) + 1 == kOpCount, "kOpNames must list every OpKind");

double f(std::int64_t v) { return static_cast<double>(v); }
}  // namespace

std::string_view op_name(OpKind op) noexcept {
  const auto i = static_cast<std::size_t>(op);
  return i < kOpNames.size() ? kOpNames[i] : std::string_view("unknown");
}

std::optional<OpKind> op_from_name(std::string_view name) noexcept {
  for (std::size_t i = 0; i < kOpNames.size(); ++i)
    if (kOpNames[i] == name) return static_cast<OpKind>(i);
  return std::nullopt;
}

bool is_unary(OpKind op) noexcept { return op >= OpKind::relu && op <= OpKind::hardswish; }
bool is_binary(OpKind op) noexcept { return op >= OpKind::add && op <= OpKind::div; }

BinaryKind binary_kind_of(OpKind op) noexcept {
  switch (op) {
    case OpKind::sub: return BinaryKind::sub;
    case OpKind::mul: return BinaryKind::mul;
    case OpKind::div: return BinaryKind::div;
    default: return BinaryKind::add;
  }
}

std::string_view act_name(ActKind kind) noexcept {
  switch (kind) {
    case ActKind::relu: return "relu";
    case ActKind::clip: return "clip";
    case ActKind::leaky_relu: return "leaky_relu";
    case ActKind::sigmoid: return "sigmoid";
    case ActKind::tanh: return "tanh";
    case ActKind::gelu_erf: return "gelu_erf";
    case ActKind::gelu_tanh: return "gelu_tanh";
    case ActKind::silu: return "silu";
    case ActKind::hardswish: return "hardswish";
    case ActKind::linear: return "linear";
  }
  return "unknown";
}

std::string_view binary_name(BinaryKind kind) noexcept {
  switch (kind) {
    case BinaryKind::add: return "add";
    case BinaryKind::sub: return "sub";
    case BinaryKind::mul: return "mul";
    case BinaryKind::div: return "div";
  }
  return "unknown";
}

int post_op_operands(const PostOp& p) noexcept {
  switch (p.kind) {
    case PostOp::Kind::batchnorm: return 4;
    case PostOp::Kind::binary: return 1;
    case PostOp::Kind::activation:
    case PostOp::Kind::pool: return 0;
  }
  return 0;
}

Pool2dParams PostOp::pool_params() const {
  Pool2dParams p;
  p.kernel_h = window.kernel_h, p.kernel_w = window.kernel_w;
  p.stride_h = window.stride_h, p.stride_w = window.stride_w;
  p.pad_top = window.pad_top, p.pad_left = window.pad_left;
  p.pad_bottom = window.pad_bottom, p.pad_right = window.pad_right;
  return p;  // dilation 1, floor mode
}

OpParams default_params(OpKind op) {
  switch (op) {
    case OpKind::gemm: return GemmParams{};
    case OpKind::conv2d: return Conv2dParams{};
    case OpKind::batchnorm: return BatchnormParams{};
    case OpKind::relu: return UnaryParams{Activation::relu()};
    case OpKind::clip: return UnaryParams{Activation::relu6()};
    case OpKind::leaky_relu: return UnaryParams{Activation::leaky_relu(0.01f)};
    case OpKind::sigmoid: return UnaryParams{Activation::of(ActKind::sigmoid)};
    case OpKind::tanh: return UnaryParams{Activation::of(ActKind::tanh)};
    case OpKind::gelu: return UnaryParams{Activation::of(ActKind::gelu_erf)};
    case OpKind::silu: return UnaryParams{Activation::of(ActKind::silu)};
    case OpKind::hardswish: return UnaryParams{Activation::of(ActKind::hardswish)};
    case OpKind::add:
    case OpKind::sub:
    case OpKind::mul:
    case OpKind::div: return BinaryParams{};
    case OpKind::maxpool2d:
    case OpKind::avgpool2d: return Pool2dParams{};
    case OpKind::global_avgpool: return GlobalPoolParams{};
    case OpKind::softmax: return SoftmaxParams{};
    case OpKind::layernorm: return NormParams{};
    case OpKind::rmsnorm: {
      NormParams p;
      p.has_bias = false;
      return p;
    }
    case OpKind::attention: return AttentionParams{};
    case OpKind::inverted_residual: return InvertedResidualParams{};
    case OpKind::eltwise_chain: return ChainParams{};
  }
  return UnaryParams{};
}

OpDesc inverted_residual_desc(const TensorDesc& x, std::int64_t ce, std::int64_t cout,
                              const InvertedResidualParams& p) {
  const std::int64_t cin = x.shape.rank >= 2 ? x.shape[1] : 1;
  OpDesc d{OpKind::inverted_residual, p, {x}};
  const auto vectors = [&](std::int64_t c) {  // batchnorm scale, bias, mean, var
    for (int i = 0; i < 4; ++i) d.inputs.push_back({Shape{c}, Layout::nchw});
  };
  if (p.has_expand) {
    d.inputs.push_back({Shape{ce, cin, 1, 1}, Layout::nchw});
    vectors(ce);
  }
  d.inputs.push_back({Shape{ce, 1, 3, 3}, Layout::nchw});
  vectors(ce);
  d.inputs.push_back({Shape{cout, ce, 1, 1}, Layout::nchw});
  vectors(cout);
  return d;
}

static void append_post_op_names(std::vector<std::string>& names, const PostOps& post_ops) {
  for (std::size_t i = 0; i < post_ops.size(); ++i) {
    const PostOp& p = post_ops[i];
    if (p.kind == PostOp::Kind::batchnorm) {
      for (const char* v : {"scale", "bias", "mean", "var"}) names.push_back(fmt::format("post{}.{}", i, v));
    } else if (p.kind == PostOp::Kind::binary) {
      names.push_back(fmt::format("post{}.{}", i, binary_name(p.binary)));
    }
  }
}

std::vector<std::string> input_names(const OpDesc& d) {
  std::vector<std::string> n;
  switch (d.op) {
    case OpKind::gemm: {
      const auto* p = std::get_if<GemmParams>(&d.params);
      n = {"a", "b"};
      if (p && p->has_bias) n.push_back("bias");
      if (p) append_post_op_names(n, p->post_ops);
      break;
    }
    case OpKind::conv2d: {
      const auto* p = std::get_if<Conv2dParams>(&d.params);
      n = {"x", "w"};
      if (p && p->has_bias) n.push_back("bias");
      if (p) append_post_op_names(n, p->post_ops);
      break;
    }
    case OpKind::batchnorm: n = {"x", "scale", "bias", "mean", "var"}; break;
    case OpKind::add:
    case OpKind::sub:
    case OpKind::mul:
    case OpKind::div: n = {"a", "b"}; break;
    case OpKind::softmax: {
      const auto* p = std::get_if<SoftmaxParams>(&d.params);
      n = {"x"};
      if (p && p->has_mask) n.push_back("mask");
      break;
    }
    case OpKind::layernorm:
    case OpKind::rmsnorm: {
      const auto* p = std::get_if<NormParams>(&d.params);
      n = {"x", "scale"};
      if (p && p->has_bias && d.op == OpKind::layernorm) n.push_back("bias");
      if (p && p->has_residual) n.push_back("residual");
      break;
    }
    case OpKind::attention: {
      const auto* p = std::get_if<AttentionParams>(&d.params);
      n = {"q", "k", "v"};
      if (p && p->has_mask) n.push_back("mask");
      break;
    }
    case OpKind::inverted_residual: {
      const auto* p = std::get_if<InvertedResidualParams>(&d.params);
      n = {"x"};
      if (!p || p->has_expand) n.insert(n.end(), {"w_expand", "bn1.scale", "bn1.bias", "bn1.mean", "bn1.var"});
      n.insert(n.end(), {"w_dw", "bn2.scale", "bn2.bias", "bn2.mean", "bn2.var", "w_project", "bn3.scale", "bn3.bias",
                         "bn3.mean", "bn3.var"});
      break;
    }
    case OpKind::eltwise_chain: {
      n = {"x"};
      if (const auto* p = std::get_if<ChainParams>(&d.params))
        for (std::size_t i = 0; i < p->steps.size(); ++i)
          if (p->steps[i].kind == ChainStep::Kind::binary)
            n.push_back(fmt::format("step{}.{}", i, binary_name(p->steps[i].binary)));
      break;
    }
    default: n = {"x"}; break;  // unary ops, pooling
  }
  return n;
}

std::vector<std::string> output_names(const OpDesc& d) {
  if (d.op == OpKind::layernorm || d.op == OpKind::rmsnorm) {
    const auto* p = std::get_if<NormParams>(&d.params);
    if (p && p->has_residual && p->write_sum) return {"y", "sum"};
  }
  return {"y"};
}

bool allows_inplace(const OpDesc& d, int in, int out) noexcept {
  if (out != 0 || in < 0 || static_cast<std::size_t>(in) >= d.inputs.size()) return false;
  // Elementwise ops read each element before writing it; row ops read a whole row first.
  if (is_unary(d.op) || d.op == OpKind::batchnorm || d.op == OpKind::eltwise_chain || d.op == OpKind::softmax ||
      d.op == OpKind::layernorm || d.op == OpKind::rmsnorm)
    return in == 0;
  if (is_binary(d.op)) {
    // Only an operand that already has the output's shape can share its buffer.
    if (d.inputs.size() != 2) return false;
    auto out_desc = infer_outputs(d);
    return out_desc && (*out_desc)[0] == d.inputs[static_cast<std::size_t>(in)];
  }
  return false;
}

// ---- case names ------------------------------------------------------------------------------

static std::string dims_name(const Shape& s) {
  static constexpr const char* kLetters[6][5] = {
      {}, {"n"}, {"n", "c"}, {"n", "c", "w"}, {"n", "c", "h", "w"}, {"n", "c", "d", "h", "w"}};
  if (s.rank < 1 || s.rank > kMaxRank) return s.str();
  std::string r;
  for (int i = 0; i < s.rank; ++i) r += fmt::format("{}{}{}", i ? "_" : "", kLetters[s.rank][i], s[i]);
  return r;
}

static std::string layout_suffix(const TensorDesc& t) {
  return t.layout == Layout::nhwc && t.shape.rank >= 3 ? "_nhwc" : "";
}

static std::string act_suffix(const Activation& a) {
  switch (a.kind) {
    case ActKind::clip:
      if (a.alpha == 0.f && a.beta == 6.f) return "relu6";
      return fmt::format("clip{:g}_{:g}", a.alpha, a.beta);
    case ActKind::leaky_relu: return fmt::format("leaky_relu{:g}", a.alpha);
    case ActKind::gelu_erf: return "gelu";
    case ActKind::gelu_tanh: return "gelu_tanh";
    case ActKind::linear: return fmt::format("linear{:g}_{:g}", a.alpha, a.beta);
    default: return std::string(act_name(a.kind));
  }
}

static std::string pads_name(std::int64_t t, std::int64_t l, std::int64_t b, std::int64_t r) {
  if (t == l && l == b && b == r) return fmt::format("p{}", t);
  return fmt::format("p{}_{}_{}_{}", t, l, b, r);
}

static std::string pair_name(const char* tag, std::int64_t a, std::int64_t b) {
  return a == b ? fmt::format("{}{}", tag, a) : fmt::format("{}{}x{}", tag, a, b);
}

static std::string post_ops_suffix(const PostOps& post_ops) {
  std::string r;
  for (const PostOp& p : post_ops) {
    if (p.kind == PostOp::Kind::batchnorm) {
      r += "+bn";
    } else if (p.kind == PostOp::Kind::binary) {
      r += fmt::format("+{}", binary_name(p.binary));
    } else if (p.kind == PostOp::Kind::pool) {  // "+maxpool3s2p1"
      const PostOp::Window& w = p.window;
      r += fmt::format("+{}{}{}", pair_name("maxpool", w.kernel_h, w.kernel_w), pair_name("s", w.stride_h, w.stride_w),
                       pads_name(w.pad_top, w.pad_left, w.pad_bottom, w.pad_right));
    } else {
      r += fmt::format("+{}", act_suffix(p.act));
    }
  }
  return r;
}

std::string case_name(const OpDesc& d) {
  const auto in = [&](std::size_t i) -> const TensorDesc& {
    static const TensorDesc kEmpty{};
    return i < d.inputs.size() ? d.inputs[i] : kEmpty;
  };
  switch (d.op) {
    case OpKind::gemm: {
      const auto& p = d.p<GemmParams>();
      const Shape& a = in(0).shape;
      const Shape& b = in(1).shape;
      const std::int64_t m = p.trans_a ? a[1] : a[0], k = p.trans_a ? a[0] : a[1];
      const std::int64_t n = p.trans_b ? b[0] : b[1];
      std::string s = fmt::format("{}x{}x{}", m, n, k);
      if (p.trans_a) s += "_ta";
      if (p.trans_b) s += "_tb";
      if (p.alpha != 1.f) s += fmt::format("_alpha{:g}", p.alpha);
      if (p.beta != 0.f) s += fmt::format("_beta{:g}", p.beta);
      if (p.has_bias) s += "+bias";
      return s + post_ops_suffix(p.post_ops);
    }
    case OpKind::conv2d: {
      const auto& p = d.p<Conv2dParams>();
      const Shape& x = in(0).shape;
      const Shape& w = in(1).shape;
      std::string s = fmt::format("n{}_c{}_h{}_w{}_k{}_{}_{}_{}", x[0], x[1], x[2], x[3], w[0],
                                  pair_name("r", w[2], w[3]), pair_name("s", p.stride_h, p.stride_w),
                                  pads_name(p.pad_top, p.pad_left, p.pad_bottom, p.pad_right));
      if (p.dilation_h != 1 || p.dilation_w != 1) s += fmt::format("_{}", pair_name("d", p.dilation_h, p.dilation_w));
      if (p.groups != 1) s += p.groups == x[1] && p.groups == w[0] ? "_dw" : fmt::format("_g{}", p.groups);
      s += layout_suffix(in(0));
      if (p.has_bias) s += "+bias";
      return s + post_ops_suffix(p.post_ops);
    }
    case OpKind::maxpool2d:
    case OpKind::avgpool2d: {
      const auto& p = d.p<Pool2dParams>();
      std::string s = fmt::format("{}_{}_{}_{}", dims_name(in(0).shape), pair_name("k", p.kernel_h, p.kernel_w),
                                  pair_name("s", p.stride_h, p.stride_w),
                                  pads_name(p.pad_top, p.pad_left, p.pad_bottom, p.pad_right));
      if (d.op == OpKind::maxpool2d && (p.dilation_h != 1 || p.dilation_w != 1))
        s += fmt::format("_{}", pair_name("d", p.dilation_h, p.dilation_w));
      s += layout_suffix(in(0));
      if (p.ceil_mode) s += "+ceil";
      if (d.op == OpKind::avgpool2d && p.count_include_pad) s += "+incpad";
      return s;
    }
    case OpKind::softmax: {
      const auto& p = d.p<SoftmaxParams>();
      std::string s = dims_name(in(0).shape) + layout_suffix(in(0));
      if (p.axis != -1) s += fmt::format("_axis{}", p.axis);
      if (p.scale != 1.f) s += fmt::format("+scale{:g}", p.scale);
      if (p.has_mask) s += "+mask";
      return s;
    }
    case OpKind::layernorm:
    case OpKind::rmsnorm: {
      const auto& p = d.p<NormParams>();
      std::string s = dims_name(in(0).shape) + layout_suffix(in(0));
      if (p.axis != -1) s += fmt::format("_axis{}", p.axis);
      if (d.op == OpKind::layernorm && !p.has_bias) s += "_nobias";
      if (p.has_residual) s += "+add";
      if (p.has_residual && p.write_sum) s += "+sum";
      return s;
    }
    case OpKind::attention: {
      const auto& p = d.p<AttentionParams>();
      const Shape& q = in(0).shape;
      const Shape& k = in(1).shape;
      const Shape& v = in(2).shape;
      std::string s = q[2] == k[2] ? fmt::format("b{}_h{}_s{}_d{}", q[0], q[1], q[2], q[3])
                                   : fmt::format("b{}_h{}_sq{}_skv{}_d{}", q[0], q[1], q[2], k[2], q[3]);
      if (v[3] != q[3]) s += fmt::format("_dv{}", v[3]);
      if (p.scale != 0.f) s += fmt::format("_scale{:g}", p.scale);
      if (p.has_mask) s += "+mask";
      if (p.causal) s += "+causal";
      return s;
    }
    case OpKind::inverted_residual: {
      const auto& p = d.p<InvertedResidualParams>();
      const Shape& x = in(0).shape;
      const std::size_t dw = p.has_expand ? 6 : 1, proj = dw + 5;
      const std::int64_t ce = in(dw).shape[0], cout = in(proj).shape[0];
      std::string s = dims_name(x);
      s += ce % x[1] == 0 ? fmt::format("_t{}", ce / x[1]) : fmt::format("_e{}", ce);
      if (cout != x[1]) s += fmt::format("_k{}", cout);
      if (p.stride != 1) s += fmt::format("_s{}", p.stride);
      s += layout_suffix(in(0));
      if (p.residual) s += "+res";
      return s;
    }
    case OpKind::eltwise_chain: {
      const auto& p = d.p<ChainParams>();
      std::string s = dims_name(in(0).shape) + layout_suffix(in(0));
      for (const ChainStep& st : p.steps)
        s += fmt::format("_{}",
                         st.kind == ChainStep::Kind::binary ? std::string(binary_name(st.binary)) : act_suffix(st.act));
      return s;
    }
    default: break;
  }
  if (is_binary(d.op)) {
    if (in(0).shape == in(1).shape) return dims_name(in(0).shape) + layout_suffix(in(0));
    return fmt::format("{}{}_by_{}", dims_name(in(0).shape), layout_suffix(in(0)), in(1).shape.str());
  }
  std::string s = dims_name(in(0).shape) + layout_suffix(in(0));
  if (is_unary(d.op)) {
    const auto& a = d.p<UnaryParams>().act;
    if (a.kind == ActKind::clip && !(a.alpha == 0.f && a.beta == 6.f)) s += fmt::format("_{}", act_suffix(a));
    if (a.kind == ActKind::clip && a.alpha == 0.f && a.beta == 6.f) s += "_relu6";
    if (a.kind == ActKind::leaky_relu) s += fmt::format("_alpha{:g}", a.alpha);
    if (a.kind == ActKind::gelu_tanh) s += "_tanh";
  }
  return s;
}

// ---- work and traffic ------------------------------------------------------------------------

static double operand_bytes(const OpDesc& d, std::size_t first) {
  double b = 0;
  for (std::size_t i = first; i < d.inputs.size(); ++i) b += 4.0 * f(d.inputs[i].shape.numel());
  return b;
}

std::array<std::int64_t, kMaxRank> attention_strides(const OpDesc& d, int which) {
  const bool out = which == 3;
  const TensorDesc& t = d.inputs[static_cast<std::size_t>(out ? 0 : which)];
  const auto* p = std::get_if<AttentionParams>(&d.params);
  if (!p || !p->packed_qkv) {
    if (!out) return dense_strides(t.shape, t.layout);
    const Shape& q = d.inputs[0].shape;
    return dense_strides(Shape{q[0], q[1], q[2], d.inputs[2].shape[3]}, t.layout);
  }
  // Logical (B, H, S, D) over memory (B, S, [3,] H, D).
  const std::int64_t H = t.shape[1], S = t.shape[2], D = t.shape[3], row = (out ? 1 : 3) * H * D;
  return {S * row, D, row, 1, 0};
}

OpCost op_cost(const OpDesc& d) {
  auto outs = infer_outputs(d);
  if (!outs) return {};
  const double out_elems = f((*outs)[0].shape.numel());
  double out_bytes = 0;
  for (const auto& o : *outs) out_bytes += 4.0 * f(o.shape.numel());
  const double in_bytes = operand_bytes(d, 0);
  OpCost c;
  c.bytes = in_bytes + out_bytes;
  switch (d.op) {
    case OpKind::gemm: {
      const auto& p = d.p<GemmParams>();
      const Shape& a = d.inputs[0].shape;
      const double k = f(p.trans_a ? a[0] : a[1]);
      c.flops = 2.0 * out_elems * k + out_elems * static_cast<double>(p.post_ops.size() + (p.has_bias ? 1 : 0));
      if (p.beta != 0.f) c.bytes += out_bytes;  // y is read too
      break;
    }
    case OpKind::conv2d: {
      const auto& p = d.p<Conv2dParams>();
      const Shape& x = d.inputs[0].shape;
      const Shape& w = d.inputs[1].shape;
      // The convolution's own output; a pool post-op (always last) shrinks y to out_elems.
      const double conv_elems = f(x[0] * w[0]) *
                                f((x[2] + p.pad_top + p.pad_bottom - p.dilation_h * (w[2] - 1) - 1) / p.stride_h + 1) *
                                f((x[3] + p.pad_left + p.pad_right - p.dilation_w * (w[3] - 1) - 1) / p.stride_w + 1);
      double steps = p.has_bias ? 1 : 0;
      for (const PostOp& op : p.post_ops) {
        if (op.kind == PostOp::Kind::pool)
          c.flops += out_elems * f(op.window.kernel_h * op.window.kernel_w);  // one max per window position
        else
          steps += 1;
      }
      c.flops += 2.0 * conv_elems * f(w[1] * w[2] * w[3]) + conv_elems * steps;
      break;
    }
    case OpKind::maxpool2d:
    case OpKind::avgpool2d: {
      const auto& p = d.p<Pool2dParams>();
      c.flops = out_elems * f(p.kernel_h * p.kernel_w);
      break;
    }
    case OpKind::softmax: c.flops = 5.0 * out_elems; break;
    case OpKind::layernorm:
    case OpKind::rmsnorm: c.flops = 8.0 * out_elems; break;
    case OpKind::batchnorm: c.flops = 2.0 * out_elems; break;
    case OpKind::global_avgpool: c.flops = f(d.inputs[0].shape.numel()); break;
    case OpKind::attention: {
      const Shape& q = d.inputs[0].shape;
      const Shape& k = d.inputs[1].shape;
      const Shape& v = d.inputs[2].shape;
      // Scores a query can see: all Skv, or under the causal mask (key j hidden from query i
      // when j > i + Skv - Sq) keys [0, i + 1 + Skv - Sq) clamped to [0, Skv] - the half the
      // kernels compute, not the masked half they skip.
      double visible = f(q[2]) * f(k[2]);
      if (d.p<AttentionParams>().causal) {
        visible = 0;
        for (std::int64_t i = 0; i < q[2]; ++i) visible += f(std::clamp<std::int64_t>(i + 1 + k[2] - q[2], 0, k[2]));
      }
      const double scores = f(q[0] * q[1]) * visible;
      c.flops = 2.0 * scores * f(q[3]) + 2.0 * scores * f(v[3]) + 5.0 * scores;
      break;
    }
    case OpKind::inverted_residual: {
      const auto& p = d.p<InvertedResidualParams>();
      const Shape& x = d.inputs[0].shape;
      const std::size_t dw = p.has_expand ? 6 : 1;
      const double ce = f(d.inputs[dw].shape[0]);
      const Shape& y = (*outs)[0].shape;
      const double hw_in = f(x[2] * x[3]), hw_out = f(y[2] * y[3]);
      c.flops = f(x[0]) * ((p.has_expand ? 2.0 * ce * f(x[1]) * hw_in : 0.0) + 2.0 * 9.0 * ce * hw_out +
                           2.0 * f(y[1]) * ce * hw_out);
      break;
    }
    case OpKind::eltwise_chain: c.flops = out_elems * static_cast<double>(d.p<ChainParams>().steps.size()); break;
    default: c.flops = out_elems; break;  // unary, binary
  }
  return c;
}

}  // namespace opfuse
