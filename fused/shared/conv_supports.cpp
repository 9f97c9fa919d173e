// fused/shared/conv_supports.cpp - ISA-independent parts of the fused conv kernels: supports()
// predicates and the operand geometry (compiled once, not per ISA).
#include "fused/conv.hpp"
#include "fused/gemm.hpp"

namespace opfuse::fused {

namespace {
using i64 = std::int64_t;

// Output geometry (N, K, P, Q) of a conv2d desc.
struct Out {
  i64 N, K, P, Q;
};
Out conv_out(const OpDesc& d) {
  const auto& p = d.p<Conv2dParams>();
  const Shape& x = d.inputs[0].shape;
  const Shape& w = d.inputs[1].shape;
  const i64 P = (x[2] + p.pad_top + p.pad_bottom - p.dilation_h * (w[2] - 1) - 1) / p.stride_h + 1;
  const i64 Q = (x[3] + p.pad_left + p.pad_right - p.dilation_w * (w[3] - 1) - 1) / p.stride_w + 1;
  return {x[0], w[0], P, Q};
}

// The chain: at most kConvMaxSteps steps, each of a kind the epilogue runs (batchnorm,
// binary, a vectorized activation; a pool step or any later kind is declined), at least one
// (a bare conv has nothing to fuse: the simd kernel serves it), and every binary operand
// expressible in the kernel's GEMM view.
bool chain_ok(const OpDesc& d, ConvView view) {
  const auto& p = d.p<Conv2dParams>();
  if (p.post_ops.empty() || p.post_ops.size() > static_cast<std::size_t>(kConvMaxSteps)) return false;
  const Out o = conv_out(d);
  std::size_t idx = p.has_bias ? 3 : 2;
  for (const PostOp& op : p.post_ops) {
    if (!epilogue_post_op_supported(op)) return false;
    if (op.kind == PostOp::Kind::binary) {
      GemmRowCol rc;
      if (!conv_operand_rowcol(conv_operand_strides(d.inputs[idx]), o.N, o.K, o.P, o.Q, view, &rc)) return false;
    }
    idx += static_cast<std::size_t>(post_op_operands(op));
  }
  return true;
}

}  // namespace

OperandStrides conv_operand_strides(const TensorDesc& od) {
  const auto dense = dense_strides(od.shape, od.layout);
  i64 os[4] = {0, 0, 0, 0};
  const int shift = 4 - od.shape.rank;
  for (int dd = 0; dd < 4; ++dd) {
    const int k = dd - shift;
    if (k < 0) continue;
    const auto u = static_cast<std::size_t>(k);
    os[dd] = od.shape.dims[u] == 1 ? 0 : dense[u];
  }
  return {os[0], os[1], os[2], os[3]};
}

bool conv_operand_rowcol(const OperandStrides& os, i64 N, i64 K, i64 P, i64 Q, ConvView view, GemmRowCol* out) {
  // Pixel stride u such that pixel (p, q) [of image n] is at (p * Q + q) * u [+ n * P * Q * u].
  const auto pixel_stride = [&](bool with_n, i64* u) {
    i64 s = 0;
    if (Q > 1)
      s = os.q;
    else if (P > 1)
      s = os.p;
    else if (with_n && N > 1)
      s = os.n;
    if ((Q > 1 && os.q != s) || (P > 1 && os.p != Q * s) || (with_n && N > 1 && os.n != P * Q * s)) return false;
    *u = s;
    return true;
  };
  const i64 ks = K > 1 ? os.k : 0;
  i64 u = 0;
  switch (view) {
    case ConvView::channel_rows:
      if (!pixel_stride(false, &u) || (u != 0 && u != 1)) return false;
      *out = {ks, u};
      return true;
    case ConvView::pixel_rows:
      if (!pixel_stride(true, &u) || (ks != 0 && ks != 1)) return false;
      *out = {u, ks};
      return true;
    case ConvView::image_pixels:
      if (!pixel_stride(false, &u)) return false;
      *out = {u, ks};
      return true;
  }
  return false;
}

int conv_folded_batchnorms(const Conv2dParams& p) {
  int n = 0;
  while (n < static_cast<int>(p.post_ops.size()) &&
         p.post_ops[static_cast<std::size_t>(n)].kind == PostOp::Kind::batchnorm)
    ++n;
  return n;
}

bool conv_1x1_supports(const OpDesc& desc) {
  constexpr i64 kConv1x1DirectPixels = 128;
  const auto& p = desc.p<Conv2dParams>();
  const Shape& w = desc.inputs[1].shape;
  if (p.groups != 1 || w[2] != 1 || w[3] != 1 || p.stride_h != 1 || p.stride_w != 1 || p.pad_top || p.pad_left ||
      p.pad_bottom || p.pad_right)
    return false;
  // NHWC images of many pixels go to the direct kernel (conv_direct_supports), which reads x in
  // place with the chain on its accumulator tile and ran faster than the GEMM on ResNet-50's
  // 1x1 layers from 14 x 14 up; with few pixels (7 x 7) the GEMM's wider column tile wins (see
  // the commit that set this for the A/B figures).
  const Shape& x = desc.inputs[0].shape;
  if (desc.inputs[0].layout == Layout::nhwc && x[0] * x[2] * x[3] >= kConv1x1DirectPixels && conv_direct_supports(desc))
    return false;
  return chain_ok(desc, desc.inputs[0].layout == Layout::nhwc ? ConvView::pixel_rows : ConvView::channel_rows);
}

// Any geometry and groups except depthwise (a direct kernel with one channel per group is slower
// than the depthwise kernels: conv_depthwise_supports, or simd's for NHWC).
bool conv_direct_supports(const OpDesc& desc) {
  const auto& p = desc.p<Conv2dParams>();
  const i64 c = desc.inputs[0].shape[1], k = desc.inputs[1].shape[0];
  if (p.groups > 1 && p.groups == c && k == c) return false;
  return chain_ok(desc, desc.inputs[0].layout == Layout::nhwc ? ConvView::image_pixels : ConvView::channel_rows);
}

// Depthwise (groups == C == K, one input channel per group): simd's depthwise kernels with the
// batchnorms folded into their taps and the rest of the chain before the store.
bool conv_depthwise_supports(const OpDesc& desc) {
  const auto& p = desc.p<Conv2dParams>();
  const i64 c = desc.inputs[0].shape[1], k = desc.inputs[1].shape[0];
  if (!(p.groups > 1 && p.groups == c && k == c)) return false;
  return chain_ok(desc, desc.inputs[0].layout == Layout::nhwc ? ConvView::pixel_rows : ConvView::channel_rows);
}

// Few input channels (the RGB stems), groups 1, NCHW: simd's smallc kernel with the batchnorms
// folded into its weights and the rest of the chain on its accumulators.
bool conv_smallc_supports(const OpDesc& desc) {
  const auto& p = desc.p<Conv2dParams>();
  if (p.groups != 1 || desc.inputs[0].shape[1] > 4) return false;
  // NHWC (channels in lanes): the leading batchnorms, folded, and at most one activation, the
  // stems' chain; anything else runs on the direct kernel.
  if (desc.inputs[0].layout == Layout::nhwc) {
    const auto rest = p.post_ops.size() - static_cast<std::size_t>(conv_folded_batchnorms(p));
    if (rest > 1 || (rest == 1 && p.post_ops.back().kind != PostOp::Kind::activation)) return false;
  }
  return chain_ok(desc, ConvView::channel_rows);
}

}  // namespace opfuse::fused
