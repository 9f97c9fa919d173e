// naive/conv.cpp - 2-D convolution (cross-correlation, as in every DL framework), the scalar
// reference.
//
// The story. Each output element y[n][k][p][q] is a dot product between the weights of output
// channel k and the input window it sees:
//   y[n][k][p][q] = bias[k] + sum over c in k's group, r < R, s < S of
//                   x[n][c][p*stride_h - pad_top + r*dilation_h][q*stride_w - pad_left + s*dilation_w]
//                   * w[k][c - first channel of the group][r][s]
// with window positions that fall into the padding reading an input of zero (ONNX's definition:
// the input is padded with zeros, then convolved). That zero is multiplied in like any other
// input, so 0 * w adds nothing for a finite weight and NaN for a NaN or Inf weight: a non-finite
// weight of output channel k reaches every output of channel k whose window holds that tap,
// padding or not, and every stage computes it that way (tests/test_numerics.cpp). Groups split the C input
// and K output channels into `groups` independent slices (depthwise: groups == C == K, one input
// channel per output channel). The naive kernel is the direct seven-loop nest, one output element
// at a time, reading every tensor through its logical strides so NCHW and NHWC activations and
// either weight layout all go through the same code. The post-op chain (batchnorm per channel,
// binary such as a residual add, activation) then runs as separate full passes over y. A pool
// post-op (conv + bn + relu + maxpool, the ResNet stem) needs the whole conv output first: it
// is materialized in the workspace, the chain runs over it, and the pool pass writes y.
//
// What the simd stage changes: it works channels-last, packs the weights so that a vector of
// output channels is contiguous, and accumulates a register tile of (output pixels x output
// channels) with broadcast-FMA, threading over images and rows; depthwise gets its own kernel
// that vectorizes over channels. What the fused stage keeps in registers: that accumulator tile
// through bias, batchnorm, residual add and activation, storing y once.
#include <cassert>
#include <cstdint>

#include "naive/common.hpp"
#include "naive/naive.hpp"

namespace opfuse::naive {

void conv2d_pass(const Tensor& x, const Tensor& w, const Tensor* bias, const Tensor& y, const Conv2dParams& p) {
  const std::int64_t N = x.dim(0), C = x.dim(1), H = x.dim(2), W = x.dim(3);
  const std::int64_t K = w.dim(0), R = w.dim(2), S = w.dim(3);
  const std::int64_t P = y.dim(2), Q = y.dim(3);
  const std::int64_t G = p.groups;
  const std::int64_t Cg = C / G;  // input channels per group (== w's dim 1)
  const std::int64_t Kg = K / G;  // output channels per group
  assert(G >= 1 && C % G == 0 && K % G == 0 && w.dim(1) == Cg);
  assert(y.dim(0) == N && y.dim(1) == K);

  const Index xs = x.strides(), ws = w.strides(), ys = y.strides();
  const float* xp = x.data();
  const float* wp = w.data();
  const float* bp = bias ? bias->data() : nullptr;
  const std::int64_t bias_step = bias ? bias->strides()[0] : 0;
  float* yp = y.mutable_data();
  assert(xp && wp && yp);

  // x is (N, C, H, W); w is (K, C/groups, R, S); y is (N, K, P, Q).
  // Output channel k belongs to group g = k / Kg and reads input channels [g*Cg, (g+1)*Cg).
  for (std::int64_t n = 0; n < N; ++n) {
    for (std::int64_t k = 0; k < K; ++k) {
      const std::int64_t c0 = (k / Kg) * Cg;  // first input channel of k's group
      for (std::int64_t oh = 0; oh < P; ++oh) {
        for (std::int64_t ow = 0; ow < Q; ++ow) {
          // Top-left corner of the window in input coordinates (negative inside the padding).
          const std::int64_t ih0 = oh * p.stride_h - p.pad_top;
          const std::int64_t iw0 = ow * p.stride_w - p.pad_left;
          float acc = 0.f;
          for (std::int64_t c = 0; c < Cg; ++c) {
            for (std::int64_t r = 0; r < R; ++r) {
              const std::int64_t ih = ih0 + r * p.dilation_h;
              for (std::int64_t s = 0; s < S; ++s) {
                const std::int64_t iw = iw0 + s * p.dilation_w;
                // A padding position is an input of value 0, multiplied in like any other: a
                // finite weight adds nothing, a NaN or Inf weight makes the output NaN.
                const bool inside = ih >= 0 && ih < H && iw >= 0 && iw < W;
                const float xv = inside ? xp[n * xs[0] + (c0 + c) * xs[1] + ih * xs[2] + iw * xs[3]] : 0.f;
                const float wv = wp[k * ws[0] + c * ws[1] + r * ws[2] + s * ws[3]];
                acc += xv * wv;
              }
            }
          }
          if (bp) acc += bp[k * bias_step];
          yp[n * ys[0] + k * ys[1] + oh * ys[2] + ow * ys[3]] = acc;
        }
      }
    }
  }
}

// The conv output before a pool post-op, (N, K, P, Q) in x's layout; rank 0 without one.
static TensorDesc conv_output(const OpDesc& d) {
  const Conv2dParams& p = d.p<Conv2dParams>();
  if (p.post_ops.empty() || p.post_ops.back().kind != PostOp::Kind::pool) return {};
  const Shape& x = d.inputs[0].shape;
  const Shape& w = d.inputs[1].shape;
  const std::int64_t P = (x[2] + p.pad_top + p.pad_bottom - p.dilation_h * (w[2] - 1) - 1) / p.stride_h + 1;
  const std::int64_t Q = (x[3] + p.pad_left + p.pad_right - p.dilation_w * (w[3] - 1) - 1) / p.stride_w + 1;
  return {Shape{x[0], w[0], P, Q}, d.inputs[0].layout};
}

std::size_t conv2d_workspace(const OpDesc& d) {
  const TensorDesc t = conv_output(d);
  if (t.shape.rank == 0) return 0;
  return product_or_max({t.shape[0], t.shape[1], t.shape[2], t.shape[3]});
}

void conv2d(const KernelArgs& args) {
  assert(args.desc && args.desc->op == OpKind::conv2d);
  const Conv2dParams& p = args.desc->p<Conv2dParams>();
  const Tensor& y = *args.out[0];
  // Post-op operands come right after the op's own inputs: x, w, [bias].
  const int first_operand = p.has_bias ? 3 : 2;
  // With a pool post-op the conv output is materialized in the workspace (a view: nothing is
  // allocated here), the chain runs over it, and its pool step writes y.
  const TensorDesc t = conv_output(*args.desc);
  if (t.shape.rank == 0) {
    conv2d_pass(*args.in[0], *args.in[1], p.has_bias ? args.in[2] : nullptr, y, p);
    apply_post_ops(p.post_ops, y, args.in + first_operand);
    return;
  }
  Result<Tensor> tv = Tensor::view(args.workspace, t.shape, t.layout);
  assert(tv.is_ok());
  conv2d_pass(*args.in[0], *args.in[1], p.has_bias ? args.in[2] : nullptr, *tv, p);
  apply_post_ops(p.post_ops, *tv, args.in + first_operand, &y);
}

}  // namespace opfuse::naive
