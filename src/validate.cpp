// src/validate.cpp - validation and shape inference for every op: the library's boundary.
//
// Status codes: invalid_argument for anything that violates the op's contract (shapes,
// ranks, parameter values, parameter/op mismatch); unsupported is reserved for valid requests
// no kernel can serve (see primitive.cpp). Messages name the op, the parameter and the value.
#include <fmt/format.h>

#include <cmath>

#include "opfuse/ops.hpp"

namespace opfuse {

namespace {

Status bad(const OpDesc& d, const std::string& msg) {
  return {StatusCode::invalid_argument, fmt::format("{}: {}", op_name(d.op), msg)};
}

std::string input_label(const std::vector<std::string>& names, std::size_t i) {
  return fmt::format("input '{}'", i < names.size() ? names[i] : std::to_string(i));
}

// Unidirectional NumPy broadcasting: can `operand` be broadcast to exactly `target`?
bool broadcasts_to(const Shape& operand, const Shape& target) {
  if (operand.rank > target.rank) return false;
  const int shift = target.rank - operand.rank;
  for (int i = 0; i < operand.rank; ++i)
    if (operand[i] != 1 && operand[i] != target[i + shift]) return false;
  return true;
}

// Bidirectional NumPy broadcasting of a and b; false when incompatible.
bool broadcast_shape(const Shape& a, const Shape& b, Shape& out) {
  out = Shape();
  out.rank = a.rank > b.rank ? a.rank : b.rank;
  for (int i = 0; i < out.rank; ++i) {
    const int ia = i - (out.rank - a.rank), ib = i - (out.rank - b.rank);
    const std::int64_t da = ia >= 0 ? a[ia] : 1, db = ib >= 0 ? b[ib] : 1;
    if (da != db && da != 1 && db != 1) return false;
    out[i] = da == 1 ? db : da;
  }
  return true;
}

Status check_rank(const OpDesc& d, const std::vector<std::string>& names, std::size_t i, int lo, int hi) {
  const int r = d.inputs[i].shape.rank;
  if (r < lo || r > hi) {
    if (lo == hi) return bad(d, fmt::format("{} has rank {} (expected {})", input_label(names, i), r, lo));
    return bad(d, fmt::format("{} has rank {} (expected {} to {})", input_label(names, i), r, lo, hi));
  }
  return Status::ok();
}

Status check_vector(const OpDesc& d, const std::vector<std::string>& names, std::size_t i, std::int64_t len,
                    const char* what) {
  const Shape& s = d.inputs[i].shape;
  if (s.rank != 1 || s[0] != len)
    return bad(d, fmt::format("{} has shape {} (expected ({}) = {})", input_label(names, i), s.str(), len, what));
  return Status::ok();
}

Status check_finite(const OpDesc& d, const char* param, float v) {
  if (!std::isfinite(v)) return bad(d, fmt::format("{} {} is not finite", param, v));
  return Status::ok();
}

Status check_epsilon(const OpDesc& d, const char* param, float eps) {
  if (!(eps > 0.f) || !std::isfinite(eps)) return bad(d, fmt::format("{} {} must be a finite value > 0", param, eps));
  return Status::ok();
}

Status check_activation(const OpDesc& d, const std::string& where, const Activation& a) {
  if (static_cast<int>(a.kind) > static_cast<int>(ActKind::linear))
    return bad(d, fmt::format("{} activation kind {} is unknown", where, static_cast<int>(a.kind)));
  switch (a.kind) {
    case ActKind::clip:
      if (std::isnan(a.alpha) || std::isnan(a.beta) || a.alpha > a.beta)
        return bad(d, fmt::format("{} clip bounds [{}, {}] must satisfy min <= max", where, a.alpha, a.beta));
      break;
    case ActKind::leaky_relu:
      if (!std::isfinite(a.alpha)) return bad(d, fmt::format("{} leaky_relu alpha {} is not finite", where, a.alpha));
      break;
    case ActKind::linear:
      if (!std::isfinite(a.alpha) || !std::isfinite(a.beta))
        return bad(d, fmt::format("{} linear alpha {} / beta {} must be finite", where, a.alpha, a.beta));
      break;
    default: break;
  }
  return Status::ok();
}

Status check_window(const OpDesc& d, const char* axis, std::int64_t k, std::int64_t stride, std::int64_t dil,
                    std::int64_t pad_lo, std::int64_t pad_hi, const std::string& what = "");
std::int64_t window_out(std::int64_t in, std::int64_t pad_lo, std::int64_t pad_hi, std::int64_t k, std::int64_t dil,
                        std::int64_t stride, bool ceil_mode);

// A pool post-op's window on the conv output `out` (N, K, P, Q), with maxpool2d's rules
// (dilation 1, floor mode); `pooled` gets the pooled shape.
Status check_pool_step(const OpDesc& d, const std::string& where, const PostOp::Window& w, const Shape& out,
                       Shape& pooled) {
  const std::string what = where + " pool ";
  if (Status s = check_window(d, "h", w.kernel_h, w.stride_h, 1, w.pad_top, w.pad_bottom, what); !s) return s;
  if (Status s = check_window(d, "w", w.kernel_w, w.stride_w, 1, w.pad_left, w.pad_right, what); !s) return s;
  // As for maxpool2d: every window must see at least one conv output, so padding is at most
  // half the window (which also rules out padding >= kernel).
  if (w.pad_top > w.kernel_h / 2 || w.pad_bottom > w.kernel_h / 2 || w.pad_left > w.kernel_w / 2 ||
      w.pad_right > w.kernel_w / 2)
    return bad(d, fmt::format("{}padding (top {}, left {}, bottom {}, right {}) exceeds half the {}x{} window", what,
                              w.pad_top, w.pad_left, w.pad_bottom, w.pad_right, w.kernel_h, w.kernel_w));
  const std::int64_t ph = window_out(out[2], w.pad_top, w.pad_bottom, w.kernel_h, 1, w.stride_h, false);
  const std::int64_t pw = window_out(out[3], w.pad_left, w.pad_right, w.kernel_w, 1, w.stride_w, false);
  if (ph < 1 || pw < 1)
    return bad(
        d, fmt::format("{}output size {}x{} is empty: the {}x{} window does not fit the padded {}x{} conv output", what,
                       ph, pw, w.kernel_h, w.kernel_w, out[2], out[3]));
  pooled = Shape{out[0], out[1], ph, pw};
  return Status::ok();
}

// Post-op chain of conv2d / gemm: operands start at input `first`; channels = out dim 1.
// `final_out` gets the output shape after the chain (a conv2d pool step changes it).
Status check_post_ops(const OpDesc& d, const std::vector<std::string>& names, const PostOps& post_ops,
                      std::size_t first, const Shape& out, Shape& final_out) {
  final_out = out;
  std::size_t idx = first;
  for (std::size_t i = 0; i < post_ops.size(); ++i) {
    const PostOp& p = post_ops[i];
    const std::string where = fmt::format("post-op {}", i);
    switch (p.kind) {
      case PostOp::Kind::batchnorm:
        if (Status s = check_epsilon(d, (where + " batchnorm epsilon").c_str(), p.epsilon); !s) return s;
        for (int j = 0; j < 4; ++j)
          if (Status s = check_vector(d, names, idx + static_cast<std::size_t>(j), out[1], "output channels"); !s)
            return s;
        break;
      case PostOp::Kind::binary:
        if (static_cast<int>(p.binary) > static_cast<int>(BinaryKind::div))
          return bad(d, fmt::format("{} binary kind {} is unknown", where, static_cast<int>(p.binary)));
        if (!broadcasts_to(d.inputs[idx].shape, out))
          return bad(d, fmt::format("{} has shape {} which does not broadcast to the output shape {}",
                                    input_label(names, idx), d.inputs[idx].shape.str(), out.str()));
        break;
      case PostOp::Kind::activation:
        if (Status s = check_activation(d, where, p.act); !s) return s;
        break;
      case PostOp::Kind::pool:
        if (d.op != OpKind::conv2d)
          return bad(d, fmt::format("{} is a pool, which only conv2d takes (its output has no spatial dims)", where));
        if (i + 1 != post_ops.size())
          return bad(d, fmt::format("{} is a pool but not the last of the {} post-ops (a pool must end the chain)",
                                    where, post_ops.size()));
        if (Status s = check_pool_step(d, where, p.window, out, final_out); !s) return s;
        break;
      default: return bad(d, fmt::format("{} kind {} is unknown", where, static_cast<int>(p.kind)));
    }
    idx += static_cast<std::size_t>(post_op_operands(p));
  }
  return Status::ok();
}

bool params_match(const OpDesc& d) {
  switch (d.op) {
    case OpKind::gemm: return std::holds_alternative<GemmParams>(d.params);
    case OpKind::conv2d: return std::holds_alternative<Conv2dParams>(d.params);
    case OpKind::batchnorm: return std::holds_alternative<BatchnormParams>(d.params);
    case OpKind::maxpool2d:
    case OpKind::avgpool2d: return std::holds_alternative<Pool2dParams>(d.params);
    case OpKind::global_avgpool: return std::holds_alternative<GlobalPoolParams>(d.params);
    case OpKind::softmax: return std::holds_alternative<SoftmaxParams>(d.params);
    case OpKind::layernorm:
    case OpKind::rmsnorm: return std::holds_alternative<NormParams>(d.params);
    case OpKind::attention: return std::holds_alternative<AttentionParams>(d.params);
    case OpKind::inverted_residual: return std::holds_alternative<InvertedResidualParams>(d.params);
    case OpKind::eltwise_chain: return std::holds_alternative<ChainParams>(d.params);
    default: break;
  }
  if (is_unary(d.op)) return std::holds_alternative<UnaryParams>(d.params);
  if (is_binary(d.op)) return std::holds_alternative<BinaryParams>(d.params);
  return false;
}

// Output size of a sliding window (conv / pool); < 1 means the window does not fit.
std::int64_t window_out(std::int64_t in, std::int64_t pad_lo, std::int64_t pad_hi, std::int64_t k, std::int64_t dil,
                        std::int64_t stride, bool ceil_mode) {
  const std::int64_t span = in + pad_lo + pad_hi - dil * (k - 1) - 1;
  if (span < 0) return 0;
  std::int64_t out = (ceil_mode ? (span + stride - 1) / stride : span / stride) + 1;
  // In ceil mode the last window must start inside the input or the leading padding.
  if (ceil_mode && (out - 1) * stride >= in + pad_lo) --out;
  return out;
}

// `what` prefixes the parameter names in messages ("post-op 2 pool kernel_h 0 ...").
Status check_window(const OpDesc& d, const char* axis, std::int64_t k, std::int64_t stride, std::int64_t dil,
                    std::int64_t pad_lo, std::int64_t pad_hi, const std::string& what) {
  if (k < 1) return bad(d, fmt::format("{}kernel_{} {} must be >= 1", what, axis, k));
  if (stride < 1) return bad(d, fmt::format("{}stride_{} {} must be >= 1", what, axis, stride));
  if (dil < 1) return bad(d, fmt::format("{}dilation_{} {} must be >= 1", what, axis, dil));
  if (pad_lo < 0 || pad_hi < 0)
    return bad(d, fmt::format("{}padding along {} ({}, {}) must be >= 0", what, axis, pad_lo, pad_hi));
  // Keep every index computation far from overflow: windows are tiny in practice.
  constexpr std::int64_t kLimit = std::int64_t{1} << 24;
  if (k > kLimit || stride > kLimit || dil > kLimit || pad_lo > kLimit || pad_hi > kLimit)
    return bad(d, fmt::format("{}window parameters along {} exceed {}: kernel {}, stride {}, dilation {}, padding "
                              "({}, {})",
                              what, axis, kLimit, k, stride, dil, pad_lo, pad_hi));
  return Status::ok();
}

std::vector<TensorDesc> single(const Shape& s, Layout l) { return {TensorDesc{s, l}}; }

// Validates and computes the outputs. The single implementation behind validate() and
// infer_outputs().
Status check_and_infer(const OpDesc& d, std::vector<TensorDesc>& outs) {
  if (static_cast<int>(d.op) >= kOpCount)
    return {StatusCode::invalid_argument, fmt::format("op kind {} is unknown", static_cast<int>(d.op))};
  if (!params_match(d)) return bad(d, "params hold another op's parameter struct");
  const std::vector<std::string> names = input_names(d);
  if (d.inputs.size() != names.size())
    return bad(d, fmt::format("expected {} inputs, got {}", names.size(), d.inputs.size()));
  for (std::size_t i = 0; i < d.inputs.size(); ++i) {
    if (Status s = d.inputs[i].shape.validate(fmt::format("{}: {}", op_name(d.op), input_label(names, i))); !s)
      return s;
    if (d.inputs[i].layout != Layout::nchw && d.inputs[i].layout != Layout::nhwc)
      return bad(d,
                 fmt::format("{} layout {} is unknown", input_label(names, i), static_cast<int>(d.inputs[i].layout)));
  }
  const TensorDesc& x = d.inputs[0];

  if (is_unary(d.op)) {
    const Activation& a = d.p<UnaryParams>().act;
    bool ok = false;
    switch (d.op) {
      case OpKind::relu: ok = a.kind == ActKind::relu; break;
      case OpKind::clip: ok = a.kind == ActKind::clip; break;
      case OpKind::leaky_relu: ok = a.kind == ActKind::leaky_relu; break;
      case OpKind::sigmoid: ok = a.kind == ActKind::sigmoid; break;
      case OpKind::tanh: ok = a.kind == ActKind::tanh; break;
      case OpKind::gelu: ok = a.kind == ActKind::gelu_erf || a.kind == ActKind::gelu_tanh; break;
      case OpKind::silu: ok = a.kind == ActKind::silu; break;
      case OpKind::hardswish: ok = a.kind == ActKind::hardswish; break;
      default: break;
    }
    if (!ok) return bad(d, fmt::format("activation kind {} does not match the op", act_name(a.kind)));
    if (Status s = check_activation(d, "act", a); !s) return s;
    outs = {x};
    return Status::ok();
  }
  if (is_binary(d.op)) {
    Shape out;
    if (!broadcast_shape(x.shape, d.inputs[1].shape, out))
      return bad(d, fmt::format("shapes {} and {} do not broadcast", x.shape.str(), d.inputs[1].shape.str()));
    const Layout l = out == x.shape ? x.layout : (out == d.inputs[1].shape ? d.inputs[1].layout : Layout::nchw);
    outs = single(out, l);
    return Status::ok();
  }

  switch (d.op) {
    case OpKind::gemm: {
      const auto& p = d.p<GemmParams>();
      if (Status s = check_rank(d, names, 0, 2, 2); !s) return s;
      if (Status s = check_rank(d, names, 1, 2, 2); !s) return s;
      if (Status s = check_finite(d, "alpha", p.alpha); !s) return s;
      if (Status s = check_finite(d, "beta", p.beta); !s) return s;
      const Shape& a = x.shape;
      const Shape& b = d.inputs[1].shape;
      const std::int64_t m = p.trans_a ? a[1] : a[0], k = p.trans_a ? a[0] : a[1];
      const std::int64_t kb = p.trans_b ? b[1] : b[0], n = p.trans_b ? b[0] : b[1];
      if (k != kb)
        return bad(d, fmt::format("inner dimensions differ: a gives K = {}, b gives K = {} (trans_a {}, trans_b {})", k,
                                  kb, p.trans_a, p.trans_b));
      const Shape out{m, n};
      std::size_t next = 2;
      if (p.has_bias) {
        if (!broadcasts_to(d.inputs[2].shape, out))
          return bad(d, fmt::format("input 'bias' has shape {} which does not broadcast to ({}, {})",
                                    d.inputs[2].shape.str(), m, n));
        next = 3;
      }
      Shape final_out;
      if (Status s = check_post_ops(d, names, p.post_ops, next, out, final_out); !s) return s;
      outs = single(final_out, Layout::nchw);
      return Status::ok();
    }
    case OpKind::conv2d: {
      const auto& p = d.p<Conv2dParams>();
      if (Status s = check_rank(d, names, 0, 4, 4); !s) return s;
      if (Status s = check_rank(d, names, 1, 4, 4); !s) return s;
      const Shape& xs = x.shape;
      const Shape& w = d.inputs[1].shape;
      if (p.groups < 1) return bad(d, fmt::format("groups {} must be >= 1", p.groups));
      if (xs[1] % p.groups != 0)
        return bad(d, fmt::format("input channels {} are not divisible by groups {}", xs[1], p.groups));
      if (w[0] % p.groups != 0)
        return bad(d,
                   fmt::format("output channels {} (input 'w' dim 0) are not divisible by groups {}", w[0], p.groups));
      if (w[1] != xs[1] / p.groups)
        return bad(d,
                   fmt::format("input channels {} / groups {} = {} do not match weight channels {} (input 'w', dim 1)",
                               xs[1], p.groups, xs[1] / p.groups, w[1]));
      if (Status s = check_window(d, "h", w[2], p.stride_h, p.dilation_h, p.pad_top, p.pad_bottom); !s) return s;
      if (Status s = check_window(d, "w", w[3], p.stride_w, p.dilation_w, p.pad_left, p.pad_right); !s) return s;
      const std::int64_t ph = window_out(xs[2], p.pad_top, p.pad_bottom, w[2], p.dilation_h, p.stride_h, false);
      const std::int64_t pw = window_out(xs[3], p.pad_left, p.pad_right, w[3], p.dilation_w, p.stride_w, false);
      if (ph < 1 || pw < 1)
        return bad(
            d, fmt::format("output size {}x{} is empty: the {}x{} (dilated) kernel does not fit the padded {}x{} input",
                           ph, pw, w[2], w[3], xs[2], xs[3]));
      const Shape out{xs[0], w[0], ph, pw};
      std::size_t next = 2;
      if (p.has_bias) {
        if (Status s = check_vector(d, names, 2, w[0], "output channels"); !s) return s;
        next = 3;
      }
      Shape final_out;  // pooled by a pool post-op
      if (Status s = check_post_ops(d, names, p.post_ops, next, out, final_out); !s) return s;
      outs = single(final_out, x.layout);
      return Status::ok();
    }
    case OpKind::batchnorm: {
      if (Status s = check_rank(d, names, 0, 2, 5); !s) return s;
      if (Status s = check_epsilon(d, "epsilon", d.p<BatchnormParams>().epsilon); !s) return s;
      for (std::size_t i = 1; i < 5; ++i)
        if (Status s = check_vector(d, names, i, x.shape[1], "channels"); !s) return s;
      outs = {x};
      return Status::ok();
    }
    case OpKind::maxpool2d:
    case OpKind::avgpool2d: {
      const auto& p = d.p<Pool2dParams>();
      if (Status s = check_rank(d, names, 0, 4, 4); !s) return s;
      if (Status s = check_window(d, "h", p.kernel_h, p.stride_h, p.dilation_h, p.pad_top, p.pad_bottom); !s) return s;
      if (Status s = check_window(d, "w", p.kernel_w, p.stride_w, p.dilation_w, p.pad_left, p.pad_right); !s) return s;
      if (d.op == OpKind::avgpool2d && (p.dilation_h != 1 || p.dilation_w != 1))
        return bad(d, fmt::format("dilation {}x{} is not defined for average pooling (must be 1x1)", p.dilation_h,
                                  p.dilation_w));
      // Every window must see at least one real element: padding at most half the window.
      const std::int64_t eh = p.dilation_h * (p.kernel_h - 1) + 1, ew = p.dilation_w * (p.kernel_w - 1) + 1;
      if (p.pad_top > eh / 2 || p.pad_bottom > eh / 2 || p.pad_left > ew / 2 || p.pad_right > ew / 2)
        return bad(d, fmt::format("padding (top {}, left {}, bottom {}, right {}) exceeds half the {}x{} window",
                                  p.pad_top, p.pad_left, p.pad_bottom, p.pad_right, eh, ew));
      const std::int64_t ph =
          window_out(x.shape[2], p.pad_top, p.pad_bottom, p.kernel_h, p.dilation_h, p.stride_h, p.ceil_mode);
      const std::int64_t pw =
          window_out(x.shape[3], p.pad_left, p.pad_right, p.kernel_w, p.dilation_w, p.stride_w, p.ceil_mode);
      if (ph < 1 || pw < 1)
        return bad(d, fmt::format("output size {}x{} is empty: the {}x{} window does not fit the padded {}x{} input",
                                  ph, pw, eh, ew, x.shape[2], x.shape[3]));
      outs = single(Shape{x.shape[0], x.shape[1], ph, pw}, x.layout);
      return Status::ok();
    }
    case OpKind::global_avgpool: {
      if (Status s = check_rank(d, names, 0, 4, 4); !s) return s;
      outs = single(Shape{x.shape[0], x.shape[1], 1, 1}, x.layout);
      return Status::ok();
    }
    case OpKind::softmax: {
      const auto& p = d.p<SoftmaxParams>();
      const int r = x.shape.rank;
      if (p.axis < -r || p.axis >= r) return bad(d, fmt::format("axis {} is out of range for rank {}", p.axis, r));
      if (Status s = check_finite(d, "scale", p.scale); !s) return s;
      if (p.has_mask && !broadcasts_to(d.inputs[1].shape, x.shape))
        return bad(d, fmt::format("input 'mask' has shape {} which does not broadcast to {}", d.inputs[1].shape.str(),
                                  x.shape.str()));
      outs = {x};
      return Status::ok();
    }
    case OpKind::layernorm:
    case OpKind::rmsnorm: {
      const auto& p = d.p<NormParams>();
      const int r = x.shape.rank;
      if (p.axis < -r || p.axis >= r) return bad(d, fmt::format("axis {} is out of range for rank {}", p.axis, r));
      if (Status s = check_epsilon(d, "epsilon", p.epsilon); !s) return s;
      if (p.write_sum && !p.has_residual) return bad(d, "write_sum true needs has_residual (there is no sum to write)");
      const int axis = p.axis < 0 ? p.axis + r : p.axis;
      const Shape norm = Shape::of(x.shape.dims.data() + axis, r - axis);
      std::size_t i = 1;
      const bool bias = d.op == OpKind::layernorm && p.has_bias;
      for (int j = 0; j < (bias ? 2 : 1); ++j, ++i)
        if (d.inputs[i].shape != norm)
          return bad(d, fmt::format("{} has shape {} (expected the normalized shape {}, dims {}..{} of x)",
                                    input_label(names, i), d.inputs[i].shape.str(), norm.str(), axis, r - 1));
      if (p.has_residual && d.inputs[i].shape != x.shape)
        return bad(d, fmt::format("input 'residual' has shape {} (expected x's shape {})", d.inputs[i].shape.str(),
                                  x.shape.str()));
      outs = {x};
      if (p.has_residual && p.write_sum) outs.push_back(x);
      return Status::ok();
    }
    case OpKind::attention: {
      const auto& p = d.p<AttentionParams>();
      for (std::size_t i = 0; i < 3; ++i)
        if (Status s = check_rank(d, names, i, 4, 4); !s) return s;
      const Shape& q = x.shape;
      const Shape& k = d.inputs[1].shape;
      const Shape& v = d.inputs[2].shape;
      if (k[0] != q[0] || v[0] != q[0] || k[1] != q[1] || v[1] != q[1])
        return bad(d, fmt::format("batch and head dims of q {}, k {}, v {} differ", q.str(), k.str(), v.str()));
      if (k[3] != q[3]) return bad(d, fmt::format("head size of k ({}) does not match q ({})", k[3], q[3]));
      if (p.packed_qkv && (!(k == q) || !(v == q) || d.inputs[0].layout != Layout::nchw))
        return bad(
            d, fmt::format("packed_qkv needs q, k and v of one shape (q {}, k {}, v {})", q.str(), k.str(), v.str()));
      if (v[2] != k[2]) return bad(d, fmt::format("sequence length of v ({}) does not match k ({})", v[2], k[2]));
      if (Status s = check_finite(d, "scale", p.scale); !s) return s;
      if (p.has_mask && !broadcasts_to(d.inputs[3].shape, Shape{q[0], q[1], q[2], k[2]}))
        return bad(d, fmt::format("input 'mask' has shape {} which does not broadcast to the scores ({}, {}, {}, {})",
                                  d.inputs[3].shape.str(), q[0], q[1], q[2], k[2]));
      outs = single(Shape{q[0], q[1], q[2], v[3]}, x.layout);
      return Status::ok();
    }
    case OpKind::inverted_residual: {
      const auto& p = d.p<InvertedResidualParams>();
      if (Status s = check_rank(d, names, 0, 4, 4); !s) return s;
      if (p.stride != 1 && p.stride != 2)
        return bad(d, fmt::format("stride {} is not a MobileNetV2 block stride (1 or 2)", p.stride));
      if (Status s = check_epsilon(d, "epsilon", p.epsilon); !s) return s;
      const std::int64_t cin = x.shape[1];
      const std::size_t dw = p.has_expand ? 6 : 1, proj = dw + 5;
      const std::int64_t ce = d.inputs[dw].shape[0];
      if (p.has_expand) {
        const Shape& we = d.inputs[1].shape;
        if (we.rank != 4 || we[1] != cin || we[2] != 1 || we[3] != 1)
          return bad(d, fmt::format("input 'w_expand' has shape {} (expected (Ce, {}, 1, 1))", we.str(), cin));
        if (we[0] != ce)
          return bad(d, fmt::format("expanded channels differ: w_expand gives {}, w_dw gives {}", we[0], ce));
        for (std::size_t i = 2; i < 6; ++i)
          if (Status s = check_vector(d, names, i, ce, "expanded channels"); !s) return s;
      } else if (ce != cin) {
        return bad(d, fmt::format("without expansion w_dw must have {} channels (= Cin), got {}", cin, ce));
      }
      const Shape& wdw = d.inputs[dw].shape;
      if (wdw.rank != 4 || wdw[1] != 1 || wdw[2] != 3 || wdw[3] != 3)
        return bad(d, fmt::format("input 'w_dw' has shape {} (expected ({}, 1, 3, 3))", wdw.str(), ce));
      for (std::size_t i = dw + 1; i < dw + 5; ++i)
        if (Status s = check_vector(d, names, i, ce, "expanded channels"); !s) return s;
      const Shape& wp = d.inputs[proj].shape;
      if (wp.rank != 4 || wp[1] != ce || wp[2] != 1 || wp[3] != 1)
        return bad(d, fmt::format("input 'w_project' has shape {} (expected (Cout, {}, 1, 1))", wp.str(), ce));
      const std::int64_t cout = wp[0];
      for (std::size_t i = proj + 1; i < proj + 5; ++i)
        if (Status s = check_vector(d, names, i, cout, "output channels"); !s) return s;
      if (p.residual && (p.stride != 1 || cout != cin))
        return bad(d, fmt::format("residual needs stride 1 and Cin == Cout (stride {}, Cin {}, Cout {})", p.stride, cin,
                                  cout));
      const std::int64_t ph = (x.shape[2] - 1) / p.stride + 1, pw = (x.shape[3] - 1) / p.stride + 1;
      outs = single(Shape{x.shape[0], cout, ph, pw}, x.layout);
      return Status::ok();
    }
    case OpKind::eltwise_chain: {
      const auto& p = d.p<ChainParams>();
      std::size_t idx = 1;
      for (std::size_t i = 0; i < p.steps.size(); ++i) {
        const ChainStep& st = p.steps[i];
        const std::string where = fmt::format("step {}", i);
        if (st.kind == ChainStep::Kind::unary) {
          if (Status s = check_activation(d, where, st.act); !s) return s;
        } else if (st.kind == ChainStep::Kind::binary) {
          if (static_cast<int>(st.binary) > static_cast<int>(BinaryKind::div))
            return bad(d, fmt::format("{} binary kind {} is unknown", where, static_cast<int>(st.binary)));
          if (!broadcasts_to(d.inputs[idx].shape, x.shape))
            return bad(d, fmt::format("{} has shape {} which does not broadcast to x's shape {}",
                                      input_label(names, idx), d.inputs[idx].shape.str(), x.shape.str()));
          ++idx;
        } else {
          return bad(d, fmt::format("{} kind {} is unknown", where, static_cast<int>(st.kind)));
        }
      }
      outs = {x};
      return Status::ok();
    }
    default: break;
  }
  return {StatusCode::internal, fmt::format("{}: no validation rule", op_name(d.op))};
}

// Inputs were checked one by one; an output can still be too large to address (a broadcast,
// a huge gemm N times a huge M).
Status check_outputs(const OpDesc& d, const std::vector<TensorDesc>& outs) {
  const std::vector<std::string> names = output_names(d);
  for (std::size_t i = 0; i < outs.size(); ++i)
    if (Status s =
            outs[i].shape.validate(fmt::format("{}: output '{}'", op_name(d.op), i < names.size() ? names[i] : "?"));
        !s)
      return s;
  return Status::ok();
}

}  // namespace

Status validate(const OpDesc& desc) {
  std::vector<TensorDesc> outs;
  try {
    if (Status s = check_and_infer(desc, outs); !s) return s;
    return check_outputs(desc, outs);
  } catch (const std::bad_alloc&) {
    return {StatusCode::out_of_memory, fmt::format("{}: out of memory while validating", op_name(desc.op))};
  }
}

Result<std::vector<TensorDesc>> infer_outputs(const OpDesc& desc) {
  std::vector<TensorDesc> outs;
  try {
    if (Status s = check_and_infer(desc, outs); !s) return s;
    if (Status s = check_outputs(desc, outs); !s) return s;
  } catch (const std::bad_alloc&) {
    return Status(StatusCode::out_of_memory, fmt::format("{}: out of memory while validating", op_name(desc.op)));
  }
  return outs;
}

}  // namespace opfuse
