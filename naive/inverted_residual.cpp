// naive/inverted_residual.cpp - the MobileNetV2 inverted residual block, the scalar reference.
//
// The story. The block widens, filters spatially, and narrows again:
//   e = relu6(bn1(conv1x1(x, w_expand)))             x (N, Cin, H, W)  -> e (N, Ce, H, W)
//   d = relu6(bn2(depthwise3x3(e, w_dw, stride, pad 1)))                -> d (N, Ce, P, Q)
//   y = bn3(conv1x1(d, w_project))  [+ x if residual]                    -> y (N, Cout, P, Q)
// with P = (H - 1) / stride + 1 (a 3x3 window padded by 1 on every side). Blocks with expansion
// ratio 1 have no expand conv: e is x itself and Ce == Cin. The expanded tensors e and d are
// typically 6x wider than x and y, so they dominate the memory traffic.
//
// The naive kernel runs the block as the sequence of ops it is made of: naive::conv2d for each
// convolution, then batchnorm and ReLU6 as separate full passes, materializing e and d in the
// workspace (plain NCHW floats) and y in the output. Nothing is folded, nothing is skipped.
//
// What the simd stage changes: it folds each batchnorm into its convolution's weights and bias
// at prepare time and runs the three convolutions with its vectorized channels-last kernels,
// still materializing e and d. What the fused stage keeps in registers (and L1): it never
// materializes e or d. It computes the expanded activations for a few rows at a time, runs the
// depthwise 3x3 on that strip while it is hot in cache, and projects each output pixel's
// Ce-vector straight into y, adding the residual before the single store.
#include <cassert>
#include <cstddef>
#include <cstdint>

#include "naive/common.hpp"
#include "naive/naive.hpp"

namespace opfuse::naive {

namespace {

// Input positions: x, [w_expand, bn1 x4], w_dw, bn2 x4, w_project, bn3 x4.
struct BlockInputs {
  std::size_t dw;       // w_dw; bn2 follows at dw + 1 .. dw + 4
  std::size_t project;  // w_project; bn3 follows at project + 1 .. project + 4
};
BlockInputs block_inputs(bool has_expand) {
  const std::size_t dw = has_expand ? 6 : 1;
  return {dw, dw + 5};
}

// y = conv2d(x, w) with the given geometry, no bias, no post-ops.
void conv(const Tensor& x, const Tensor& w, const Tensor& y, std::int64_t stride, std::int64_t pad,
          std::int64_t groups) {
  Conv2dParams cp;
  cp.stride_h = cp.stride_w = stride;
  cp.pad_top = cp.pad_left = cp.pad_bottom = cp.pad_right = pad;
  cp.groups = groups;
  conv2d_pass(x, w, nullptr, y, cp);
}

// t = bn(t) in place, with the four (C) vectors starting at in[first].
void batchnorm_inplace(const Tensor& t, const Tensor* const* in, std::size_t first, float eps) {
  batchnorm_pass(t, t, *in[first], *in[first + 1], *in[first + 2], *in[first + 3], eps);
}

}  // namespace

std::size_t inverted_residual_workspace(const OpDesc& d) {
  const auto& p = d.p<InvertedResidualParams>();
  const BlockInputs ix = block_inputs(p.has_expand);
  const Shape& x = d.inputs[0].shape;
  const std::int64_t N = x[0], H = x[2], W = x[3];
  const std::int64_t Ce = d.inputs[ix.dw].shape[0];
  const std::int64_t P = (H - 1) / p.stride + 1, Q = (W - 1) / p.stride + 1;
  const std::size_t e_floats = p.has_expand ? product_or_max({N, Ce, H, W}) : 0;  // e is x itself otherwise
  const std::size_t d_floats = product_or_max({N, Ce, P, Q});
  return e_floats > SIZE_MAX - d_floats ? SIZE_MAX : e_floats + d_floats;
}

void inverted_residual(const KernelArgs& args) {
  assert(args.desc && args.desc->op == OpKind::inverted_residual);
  const InvertedResidualParams& p = args.desc->p<InvertedResidualParams>();
  const BlockInputs ix = block_inputs(p.has_expand);
  const Tensor* const* in = args.in;
  const Tensor& x = *in[0];
  const Tensor& y = *args.out[0];

  const std::int64_t N = x.dim(0), H = x.dim(2), W = x.dim(3);
  const std::int64_t Ce = in[ix.dw]->dim(0);
  const std::int64_t P = y.dim(2), Q = y.dim(3);
  assert(P == (H - 1) / p.stride + 1 && Q == (W - 1) / p.stride + 1);
  assert(args.workspace);
  const Activation relu6 = Activation::relu6();

  // Carve e (N, Ce, H, W) and d (N, Ce, P, Q) out of the workspace as NCHW views.
  float* ws = args.workspace;
  Tensor e = x;  // no expand conv: the depthwise conv reads x directly
  if (p.has_expand) {
    Result<Tensor> ev = Tensor::view(ws, Shape{N, Ce, H, W});
    assert(ev.is_ok());
    e = *ev;
    ws += N * Ce * H * W;
  }
  Result<Tensor> dv = Tensor::view(ws, Shape{N, Ce, P, Q});
  assert(dv.is_ok());
  const Tensor& d = *dv;

  // 1. Expand: x (N, Cin, H, W), w_expand (Ce, Cin, 1, 1) -> e (N, Ce, H, W); bn1; relu6.
  if (p.has_expand) {
    conv(x, *in[1], e, /*stride=*/1, /*pad=*/0, /*groups=*/1);
    batchnorm_inplace(e, in, 2, p.epsilon);
    activation_pass(relu6, e, e);
  }

  // 2. Depthwise: e (N, Ce, H, W), w_dw (Ce, 1, 3, 3) -> d (N, Ce, P, Q); bn2; relu6.
  conv(e, *in[ix.dw], d, p.stride, /*pad=*/1, /*groups=*/Ce);
  batchnorm_inplace(d, in, ix.dw + 1, p.epsilon);
  activation_pass(relu6, d, d);

  // 3. Project: d (N, Ce, P, Q), w_project (Cout, Ce, 1, 1) -> y (N, Cout, P, Q); bn3.
  conv(d, *in[ix.project], y, /*stride=*/1, /*pad=*/0, /*groups=*/1);
  batchnorm_inplace(y, in, ix.project + 1, p.epsilon);

  // 4. Residual: y (N, Cout, P, Q) += x (N, Cin, H, W); validation guarantees equal shapes.
  if (p.residual) binary_pass(BinaryKind::add, y, x, y);
}

}  // namespace opfuse::naive
