// src/explain.cpp - the bytes-moved model (see opfuse/explain.hpp).
//
// Every figure is compulsory traffic: each tensor a step touches counted once, in fp32. The
// unfused sequence is what the naive and simd stages do - the op's main loop writes its
// output, then every post-op, residual, scale/mask or chain step is a pass that reads the
// intermediate back and writes it again. The fused pipeline reads the op's real inputs once
// and writes its outputs once; its in-register stages move nothing.
#include "opfuse/explain.hpp"

#include <fmt/format.h>

#include <cstddef>
#include <new>
#include <string>
#include <utility>

namespace opfuse {

namespace {

double f(std::int64_t v) { return static_cast<double>(v); }
double bytes_of(const TensorDesc& t) { return 4.0 * f(t.shape.numel()); }
double bytes_of(const Shape& s) { return 4.0 * f(s.numel()); }
std::string mb(double b) { return fmt::format("{:.2f} MB", b / 1e6); }

TrafficStep step(std::string name, double rd, double wr, std::string detail) {
  return {std::move(name), rd, wr, std::move(detail)};
}

// conv2d's output shape before any post-op (a pool post-op changes the op's final shape).
Shape conv_shape(const OpDesc& d) {
  const auto& p = d.p<Conv2dParams>();
  const Shape& x = d.inputs[0].shape;
  const Shape& w = d.inputs[1].shape;
  const std::int64_t eh = p.dilation_h * (w[2] - 1) + 1, ew = p.dilation_w * (w[3] - 1) + 1;
  return {x[0], w[0], (x[2] + p.pad_top + p.pad_bottom - eh) / p.stride_h + 1,
          (x[3] + p.pad_left + p.pad_right - ew) / p.stride_w + 1};
}

// The post-op chain of gemm / conv2d on an output of `y` bytes whose operands start at input
// `first`. Unfused: one pass per post-op; fused: applied to the accumulators before the store.
// `pooled` is the size of the op's final output (it differs from y only after a pool step).
void post_op_steps(const OpDesc& d, const PostOps& chain, std::size_t first, double y, double pooled, bool bn_folded,
                   FusionModel& m) {
  std::size_t in = first;
  for (const PostOp& po : chain) {
    double operands = 0;
    for (int i = 0; i < post_op_operands(po); ++i) operands += bytes_of(d.inputs[in++]);
    switch (po.kind) {
      case PostOp::Kind::batchnorm:
        m.unfused.push_back(step("batchnorm pass", y + operands, y, "reads y and scale/bias/mean/var, writes y"));
        if (bn_folded)
          m.fused.push_back(step("batchnorm (folded)", 0, 0, "folded into the weights and bias at prepare time"));
        else
          m.fused.push_back(step("batchnorm (epilogue)", operands / 2, 0,
                                 "per-channel scale and shift (prepared) applied to the accumulators"));
        break;
      case PostOp::Kind::binary:
        m.unfused.push_back(
            step(fmt::format("{} pass", binary_name(po.binary)), y + operands, y, "reads y and the operand, writes y"));
        m.fused.push_back(step(fmt::format("{} (epilogue)", binary_name(po.binary)), operands, 0,
                               "operand tile loaded and combined with the accumulators in registers"));
        break;
      case PostOp::Kind::activation:
        m.unfused.push_back(step(fmt::format("{} pass", act_name(po.act.kind)), y, y, "reads y, writes y"));
        m.fused.push_back(step(fmt::format("{} (epilogue)", act_name(po.act.kind)), 0, 0,
                               "applied to the accumulators in registers"));
        break;
      case PostOp::Kind::pool: {
        const PostOp::Window& w = po.window;
        m.unfused.push_back(step(fmt::format("maxpool {}x{}/{} pass", w.kernel_h, w.kernel_w, w.stride_h), y, pooled,
                                 "reads the conv output, writes the pooled output"));
        m.unfused_intermediate_bytes = y;  // the full conv output is materialized before pooling
        m.fused.push_back(step("maxpool (rolling rows)", 0, 0,
                               "conv output rows kept in a small rolling buffer in L1/L2 and pooled as soon as a "
                               "window is complete; the full conv output is never written"));
        break;
      }
    }
  }
}

void model_gemm(const OpDesc& d, const std::vector<TensorDesc>& outs, FusionModel& m) {
  const auto& p = d.p<GemmParams>();
  const double y = bytes_of(outs[0]);
  double rd = bytes_of(d.inputs[0]) + bytes_of(d.inputs[1]) + (p.beta != 0.f ? y : 0.0);
  const double bias = p.has_bias ? bytes_of(d.inputs[2]) : 0.0;
  m.unfused.push_back(step("gemm", rd + bias, y, "packed BLIS loops; reads a, b (and bias), writes y"));
  m.fused.push_back(
      step("gemm main loop", rd, 0, "packed A/B panels; the mr x nr accumulator tile stays in registers"));
  if (p.has_bias) m.fused.push_back(step("bias (epilogue)", bias, 0, "added to the accumulators"));
  post_op_steps(d, p.post_ops, p.has_bias ? 3 : 2, y, y, false, m);
  m.fused.push_back(step("store", 0, y, "y written once"));
}

void model_conv(const OpDesc& d, const std::vector<TensorDesc>& outs, FusionModel& m) {
  const auto& p = d.p<Conv2dParams>();
  const double y = bytes_of(conv_shape(d));
  const double rd = bytes_of(d.inputs[0]) + bytes_of(d.inputs[1]) + (p.has_bias ? bytes_of(d.inputs[2]) : 0.0);
  m.unfused.push_back(step("conv2d", rd, y, "reads x, w (and bias), writes y"));
  const bool depthwise = p.groups > 1 && p.groups == d.inputs[0].shape[1] && d.inputs[1].shape[0] == p.groups;
  m.fused.push_back(step("conv2d main loop", rd, 0,
                         !depthwise ? "output-channel x pixel accumulator tile stays in registers"
                         : d.inputs[0].layout == Layout::nhwc
                             ? "a pixel's channels (up to 8 vectors) accumulate in registers"
                             : "one channel's row of pixels (up to 4 vectors) accumulates in registers"));
  post_op_steps(d, p.post_ops, p.has_bias ? 3 : 2, y, bytes_of(outs[0]), true, m);
  m.fused.push_back(step("store", 0, bytes_of(outs[0]), "y written once"));
}

void model_norm(const OpDesc& d, const std::vector<TensorDesc>& outs, FusionModel& m) {
  const auto& p = d.p<NormParams>();
  const bool ln = d.op == OpKind::layernorm;
  const double x = bytes_of(d.inputs[0]);
  const double params = bytes_of(d.inputs[1]) + (ln && p.has_bias ? bytes_of(d.inputs[2]) : 0.0);
  const std::string name(op_name(d.op));
  if (!p.has_residual) {
    m.unfused.push_back(step(name, x + params, x, "statistics pass, then normalize pass (row in cache)"));
    m.fused.push_back(step(name, x + params, x, "statistics in registers, row in L1 for the normalize pass"));
    return;
  }
  const double r = bytes_of(d.inputs.back());
  m.unfused.push_back(step("residual add pass", x + r, x,
                           p.write_sum ? "writes s = x + r (the sum output)" : "writes s = x + r to a temporary"));
  m.unfused.push_back(step(name, x + params, x, "reads s back, normalizes, writes y"));
  if (!p.write_sum) m.unfused_intermediate_bytes = x;
  m.fused.push_back(step("load x and residual", x + r, 0, "s = x + r formed in registers; the row stays in L1"));
  m.fused.push_back(
      step("statistics", 0, 0, ln ? "mean and variance accumulated in registers" : "mean square in registers"));
  m.fused.push_back(step("normalize", params, x, "from the L1-resident row; y written once"));
  if (p.write_sum) m.fused.push_back(step("sum output", 0, bytes_of(outs[1]), "s streamed out for the next residual"));
}

void model_softmax(const OpDesc& d, FusionModel& m) {
  const auto& p = d.p<SoftmaxParams>();
  const double x = bytes_of(d.inputs[0]);
  const double mask = p.has_mask ? bytes_of(d.inputs[1]) : 0.0;
  if (p.scale != 1.f || p.has_mask) {
    m.unfused.push_back(step("scale + mask pass", x + mask, x, "writes z = scale * x + mask"));
    m.unfused_intermediate_bytes = x;
  }
  m.unfused.push_back(step("softmax", x, x, "max, exp-sum and normalize passes over each row (row in cache)"));
  m.fused.push_back(step("softmax", x + mask, x,
                         "scale and mask applied in registers inside the max and exp passes; y written once"));
}

void model_attention(const OpDesc& d, const std::vector<TensorDesc>& outs, FusionModel& m) {
  const auto& p = d.p<AttentionParams>();
  const Shape& q = d.inputs[0].shape;
  const Shape& k = d.inputs[1].shape;
  const double qb = bytes_of(d.inputs[0]), kb = bytes_of(d.inputs[1]), vb = bytes_of(d.inputs[2]);
  const double mask = p.has_mask ? bytes_of(d.inputs[3]) : 0.0;
  const double s = 4.0 * f(q[0] * q[1] * q[2]) * f(k[2]);
  const double o = bytes_of(outs[0]);
  m.unfused.push_back(step("S = Q K^T", qb + kb, s, fmt::format("materializes the {} score matrix", mb(s))));
  m.unfused.push_back(step("scale + mask + softmax", s + mask, s, "reads S, writes P"));
  m.unfused.push_back(step("O = P V", s + vb, o, "reads P and V, writes O"));
  m.unfused_intermediate_bytes = s;
  m.fused.push_back(step("Q tile", qb, 0, "a block of query rows stays in L1"));
  m.fused.push_back(step("K, V tiles", kb + vb + mask, 0,
                         p.causal ? "streamed per query tile; tiles above the diagonal are skipped"
                                  : "streamed per query tile (re-reads hit L2, not counted)"));
  m.fused.push_back(
      step("scores + online softmax", 0, 0, "the Bq x Bk score tile, running max and sum live in registers / L1"));
  m.fused.push_back(
      step("O accumulate + store", 0, o, "O tile rescaled in registers, divided by the sum, written once"));
}

void model_inverted_residual(const OpDesc& d, const std::vector<TensorDesc>& outs, FusionModel& m) {
  const auto& p = d.p<InvertedResidualParams>();
  const Shape& x = d.inputs[0].shape;
  const std::size_t dw = p.has_expand ? 6 : 1;
  const std::int64_t ce = d.inputs[dw].shape[0];
  const Shape& ys = outs[0].shape;
  const double xb = bytes_of(d.inputs[0]), yb = bytes_of(outs[0]);
  const double e = 4.0 * f(x[0] * ce * x[2] * x[3]);
  const double dwb = 4.0 * f(x[0] * ce * ys[2] * ys[3]);
  double weights = 0;
  for (std::size_t i = 1; i < d.inputs.size(); ++i) weights += bytes_of(d.inputs[i]);
  const double vec = 4.0 * 4.0 * f(ce);  // one BN's 4 vectors over Ce channels
  double src = xb;
  if (p.has_expand) {
    const double w1 = bytes_of(d.inputs[1]);
    m.unfused.push_back(step("expand 1x1 conv", xb + w1, e, "writes the expanded tensor E"));
    m.unfused.push_back(step("batchnorm pass", e + vec, e, "on E"));
    m.unfused.push_back(step("relu6 pass", e, e, "on E"));
    src = e;
  }
  m.unfused.push_back(step("depthwise 3x3 conv", src + bytes_of(d.inputs[dw]), dwb, "writes D"));
  m.unfused.push_back(step("batchnorm pass", dwb + vec, dwb, "on D"));
  m.unfused.push_back(step("relu6 pass", dwb, dwb, "on D"));
  const double wp = bytes_of(d.inputs[dw + 5]);
  m.unfused.push_back(step("project 1x1 conv", dwb + wp, yb, "writes y"));
  m.unfused.push_back(step("batchnorm pass", yb + 4.0 * f(4 * ys[1]), yb, "on y"));
  if (p.residual) m.unfused.push_back(step("residual add pass", yb + xb, yb, "y += x"));
  m.unfused_intermediate_bytes = (p.has_expand ? e : 0.0) + dwb;
  m.fused.push_back(step("weights (BN folded at prepare)", weights, 0, "packed once; counted here as read once"));
  m.fused.push_back(step("load x", xb, 0, "a band of input rows"));
  if (p.has_expand)
    m.fused.push_back(step("expand 1x1 + BN + ReLU6", 0, 0, "a band of expanded rows (+halo) kept in an L2 buffer"));
  m.fused.push_back(step("depthwise 3x3 + BN + ReLU6", 0, 0, "consumes the L2 band, produces depthwise rows in L1"));
  m.fused.push_back(step(p.residual ? "project 1x1 + BN + residual" : "project 1x1 + BN", 0, yb,
                         "accumulators in registers; y written once"));
}

void model_chain(const OpDesc& d, const std::vector<TensorDesc>& outs, FusionModel& m) {
  const auto& c = d.p<ChainParams>();
  const double x = bytes_of(d.inputs[0]), y = bytes_of(outs[0]);
  std::size_t in = 1;
  double operands = 0;
  for (std::size_t i = 0; i < c.steps.size(); ++i) {
    const ChainStep& s = c.steps[i];
    const double src = i == 0 ? x : y;
    if (s.kind == ChainStep::Kind::binary) {
      const double o = bytes_of(d.inputs[in++]);
      operands += o;
      m.unfused.push_back(step(fmt::format("{} pass", binary_name(s.binary)), src + o, y, "reads y and the operand"));
    } else {
      m.unfused.push_back(step(fmt::format("{} pass", act_name(s.act.kind)), src, y, "reads y, writes y"));
    }
  }
  m.fused.push_back(step("load", x + operands, 0, "x and every operand loaded once per vector"));
  m.fused.push_back(step(fmt::format("{} steps in registers", c.steps.size()), 0, 0,
                         "the chain program runs on a block of registers"));
  m.fused.push_back(step("store", 0, y, "y written once"));
}

// Ops with nothing to fuse: the same single pass in both columns.
void model_single(const OpDesc& d, const std::vector<TensorDesc>& outs, FusionModel& m) {
  double rd = 0, wr = 0;
  for (const TensorDesc& t : d.inputs) rd += bytes_of(t);
  for (const TensorDesc& t : outs) wr += bytes_of(t);
  const std::string name(op_name(d.op));
  m.unfused.push_back(step(name, rd, wr, "one pass"));
  m.fused.push_back(step(name, rd, wr, "one pass (nothing to fuse)"));
}

}  // namespace

double FusionModel::unfused_bytes() const {
  double b = 0;
  for (const TrafficStep& s : unfused) b += s.bytes();
  return b;
}

double FusionModel::fused_bytes() const {
  double b = 0;
  for (const TrafficStep& s : fused) b += s.bytes();
  return b;
}

double FusionModel::saved() const {
  const double u = unfused_bytes();
  return u > 0 ? 1.0 - fused_bytes() / u : 0.0;
}

Result<FusionModel> fusion_model(const OpDesc& desc) try {
  auto outs = infer_outputs(desc);
  if (!outs) return outs.status();
  FusionModel m;
  switch (desc.op) {
    case OpKind::gemm: model_gemm(desc, *outs, m); break;
    case OpKind::conv2d: model_conv(desc, *outs, m); break;
    case OpKind::layernorm:
    case OpKind::rmsnorm: model_norm(desc, *outs, m); break;
    case OpKind::softmax: model_softmax(desc, m); break;
    case OpKind::attention: model_attention(desc, *outs, m); break;
    case OpKind::inverted_residual: model_inverted_residual(desc, *outs, m); break;
    case OpKind::eltwise_chain: model_chain(desc, *outs, m); break;
    default: model_single(desc, *outs, m); break;
  }
  return m;
} catch (const std::bad_alloc&) {
  return Status(StatusCode::out_of_memory,
                fmt::format("{}: out of memory building the traffic model", op_name(desc.op)));
}

}  // namespace opfuse
