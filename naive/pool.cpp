// naive/pool.cpp - max / average pooling over 2-D windows and global average pooling, the
// scalar reference.
//
// The story. Pooling slides a kernel_h x kernel_w window over each channel independently:
// output pixel (p, q) sees the input rows p*stride_h - pad_top + i*dilation_h and columns
// q*stride_w - pad_left + j*dilation_w. The output size P, Q comes from the output tensor (the
// validator derived it with floor or ceil mode, PyTorch's rule that a window must start inside
// the input or the top/left padding). The two reductions differ in how they treat padding:
//   maxpool2d  padding is -infinity, i.e. ignored. Any NaN in the window makes the output NaN
//              (like PyTorch; a plain `v > m` comparison would silently drop NaNs). A window
//              with no input element at all gives -infinity.
//   avgpool2d  the sum of the in-input elements divided by
//              - count_include_pad == false: the number of in-input elements (0 if none), or
//              - count_include_pad == true: the number of window positions inside the *padded*
//                input [-pad_top, H + pad_bottom) x [-pad_left, W + pad_right); positions a
//                ceil-mode window overhangs beyond the padding are not counted (PyTorch).
//              Average pooling has no dilation.
// global_avgpool is the mean over all H*W pixels of each (n, c) plane.
// The naive kernels loop over every output element and every window position, testing each
// position against the bounds, reading tensors through their logical strides.
//
// What the simd stage changes: it works channels-last and vectorizes across channels, so one
// window walk produces a vector of outputs, and splits the output into a border (bounds
// checks) and an interior (none). Pooling is a standalone memory-bound op; the fused stage has
// nothing to keep in registers beyond what simd does except when it follows a convolution:
// conv2d's pool post-op (the ResNet stem's conv + bn + relu + maxpool) runs pool2d_pass on the
// materialized conv output here, and fused/conv_pool.cpp never writes that output at all.
#include <cassert>
#include <cmath>
#include <cstdint>
#include <limits>

#include "naive/common.hpp"
#include "naive/naive.hpp"

namespace opfuse::naive {

void pool2d_pass(const Tensor& x, const Tensor& y, const Pool2dParams& p, bool is_max) {
  const std::int64_t N = x.dim(0), C = x.dim(1), H = x.dim(2), W = x.dim(3);
  const std::int64_t P = y.dim(2), Q = y.dim(3);  // already floor/ceil-derived by validation
  assert(y.dim(0) == N && y.dim(1) == C);
  // Dilation is a maxpool2d parameter only; average pooling windows are dense.
  const std::int64_t dil_h = is_max ? p.dilation_h : 1, dil_w = is_max ? p.dilation_w : 1;
  // The padded input, for count_include_pad: rows [-pad_top, H + pad_bottom), same for columns.
  const std::int64_t pad_h_end = H + p.pad_bottom, pad_w_end = W + p.pad_right;

  const Index xs = x.strides(), ys = y.strides();
  const float* xp = x.data();
  float* yp = y.mutable_data();
  assert(xp && yp);

  // x is (N, C, H, W); y is (N, C, P, Q); the window is (kernel_h, kernel_w).
  for (std::int64_t n = 0; n < N; ++n) {
    for (std::int64_t c = 0; c < C; ++c) {
      const float* xplane = xp + n * xs[0] + c * xs[1];
      for (std::int64_t oh = 0; oh < P; ++oh) {
        for (std::int64_t ow = 0; ow < Q; ++ow) {
          const std::int64_t ih0 = oh * p.stride_h - p.pad_top;
          const std::int64_t iw0 = ow * p.stride_w - p.pad_left;
          float max = -std::numeric_limits<float>::infinity();
          float sum = 0.f;
          std::int64_t n_valid = 0;   // window positions inside the input
          std::int64_t n_padded = 0;  // window positions inside the padded input
          for (std::int64_t i = 0; i < p.kernel_h; ++i) {
            const std::int64_t ih = ih0 + i * dil_h;
            for (std::int64_t j = 0; j < p.kernel_w; ++j) {
              const std::int64_t iw = iw0 + j * dil_w;
              if (ih >= -p.pad_top && ih < pad_h_end && iw >= -p.pad_left && iw < pad_w_end) ++n_padded;
              if (ih < 0 || ih >= H || iw < 0 || iw >= W) continue;  // padding or overhang
              const float v = xplane[ih * xs[2] + iw * xs[3]];
              ++n_valid;
              sum += v;
              // Once max is NaN no comparison is true, so the NaN sticks.
              if (v > max || std::isnan(v)) max = v;
            }
          }
          float out;
          if (is_max) {
            out = max;
          } else {
            const std::int64_t divisor = p.count_include_pad ? n_padded : n_valid;
            out = divisor > 0 ? sum / static_cast<float>(divisor) : 0.f;
          }
          yp[n * ys[0] + c * ys[1] + oh * ys[2] + ow * ys[3]] = out;
        }
      }
    }
  }
}

void pool2d(const KernelArgs& args) {
  assert(args.desc && (args.desc->op == OpKind::maxpool2d || args.desc->op == OpKind::avgpool2d));
  pool2d_pass(*args.in[0], *args.out[0], args.desc->p<Pool2dParams>(), args.desc->op == OpKind::maxpool2d);
}

void global_avgpool(const KernelArgs& args) {
  assert(args.desc && args.desc->op == OpKind::global_avgpool);
  const Tensor& x = *args.in[0];
  const Tensor& y = *args.out[0];
  const std::int64_t N = x.dim(0), C = x.dim(1), H = x.dim(2), W = x.dim(3);
  assert(y.dim(0) == N && y.dim(1) == C && y.dim(2) == 1 && y.dim(3) == 1);

  const Index xs = x.strides(), ys = y.strides();
  const float* xp = x.data();
  float* yp = y.mutable_data();
  assert(xp && yp);

  // x is (N, C, H, W); y is (N, C, 1, 1).
  for (std::int64_t n = 0; n < N; ++n) {
    for (std::int64_t c = 0; c < C; ++c) {
      float sum = 0.f;
      for (std::int64_t h = 0; h < H; ++h)
        for (std::int64_t w = 0; w < W; ++w) sum += xp[n * xs[0] + c * xs[1] + h * xs[2] + w * xs[3]];
      yp[n * ys[0] + c * ys[1]] = sum / static_cast<float>(H * W);
    }
  }
}

}  // namespace opfuse::naive
