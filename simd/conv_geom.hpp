// simd/conv_geom.hpp - the geometry of one 2-D convolution call, from its OpDesc: the shapes,
// strides, dilations, pads and groups every convolution kernel indexes with. Not per ISA (no
// vector code), so the shared supports() and packing code (fused/shared/*.cpp) and the per-ISA
// kernels (simd/conv_kernel.hpp) compute the output size the same way, once.
#pragma once

#include <array>
#include <cstdint>

#include "opfuse/ops.hpp"
#include "opfuse/tensor.hpp"

namespace opfuse::simd {

struct ConvGeom {
  std::int64_t N, C, H, W, K, R, S, P, Q, G, Cg, Kg;  // x (N,C,H,W), w (K,C/G,R,S), y (N,K,P,Q)
  std::int64_t sh, sw, dh, dw, pt, pl, pb, pr;        // stride, dilation, pads
  bool x_nhwc, y_nhwc;
  std::array<std::int64_t, kMaxRank> ws;  // weight strides, logical (K, C/G, R, S)
};

inline ConvGeom conv_geom(const OpDesc& d) {
  const auto& p = d.p<Conv2dParams>();
  const Shape& x = d.inputs[0].shape;
  const Shape& w = d.inputs[1].shape;
  ConvGeom g{};
  g.N = x[0], g.C = x[1], g.H = x[2], g.W = x[3];
  g.K = w[0], g.R = w[2], g.S = w[3];
  g.sh = p.stride_h, g.sw = p.stride_w, g.dh = p.dilation_h, g.dw = p.dilation_w;
  g.pt = p.pad_top, g.pl = p.pad_left, g.pb = p.pad_bottom, g.pr = p.pad_right;
  g.P = (g.H + g.pt + g.pb - g.dh * (g.R - 1) - 1) / g.sh + 1;
  g.Q = (g.W + g.pl + g.pr - g.dw * (g.S - 1) - 1) / g.sw + 1;
  g.G = p.groups, g.Cg = g.C / g.G, g.Kg = g.K / g.G;
  g.x_nhwc = d.inputs[0].layout == Layout::nhwc;
  g.y_nhwc = g.x_nhwc;  // the output takes x's layout
  g.ws = dense_strides(w, d.inputs[1].layout);
  return g;
}

}  // namespace opfuse::simd
