// simd/conv_kernel.hpp - the building blocks of the simd NHWC direct convolution (internal
// header), shared by simd/conv.cpp and the fused stage's direct kernel (fused/conv.cpp):
// geometry, workspace carving, the zero-padded NHWC copy of x, the register tile and the weight
// packing. simd/conv.cpp's header comment explains the design. Included only by the per-ISA
// TUs; everything lives in the ISA's inline namespace.
#pragma once

#ifndef OPFUSE_SIMD_ISA
#error "simd/conv_kernel.hpp is for simd/*.cpp and fused/*.cpp, compiled once per ISA with OPFUSE_SIMD_ISA set"
#endif

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <memory>

#include "simd/common.hpp"
#include "simd/transpose.hpp"

namespace opfuse::simd {
inline namespace OPFUSE_SIMD_NS {

using i64 = std::int64_t;

constexpr i64 round_up(i64 v, i64 m) { return (v + m - 1) / m * m; }

// ---- geometry ---------------------------------------------------------------------------------

struct ConvGeom {
  i64 N, C, H, W, K, R, S, P, Q, G, Cg, Kg;
  i64 sh, sw, dh, dw, pt, pl, pb, pr;
  bool x_nhwc, y_nhwc;
  std::array<i64, kMaxRank> ws;  // weight strides, logical (K, C/G, R, S)
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

// Aligned float storage owned by a kernel's prepared state (packed weights, per-thread panels).
struct AlignedFloats {
  std::unique_ptr<float[]> mem;
  float* data = nullptr;
  void resize(std::size_t n) {
    mem.reset(new float[n + 16]);
    auto addr = reinterpret_cast<std::uintptr_t>(mem.get());
    data = mem.get() + ((64 - addr % 64) % 64) / sizeof(float);
  }
};

// Carves 64-byte aligned sections out of the workspace; also used to size it.
struct Carver {
  float* base;
  std::size_t used = 0;
  float* take(i64 n) {
    float* p = base ? base + used : nullptr;
    used += static_cast<std::size_t>(round_up(n, 16));
    return p;
  }
};

// ---- layout transforms at the op boundary --------------------------------------------------------

// x (user layout) -> zero-padded NHWC image(s) xp (N, Hp, Wp, C), rows split over threads.
template <class Arch>
void pad_to_nhwc(const ConvGeom& g, const float* x, float* xp, int threads) {
  const i64 Hp = g.H + g.pt + g.pb, Wp = g.W + g.pl + g.pr, C = g.C;
  parallel_for(g.N * Hp, threads, 1, [&](i64 b, i64 e) {
    for (i64 row = b; row < e; ++row) {
      const i64 n = row / Hp, hp = row % Hp, h = hp - g.pt;
      float* dst = xp + row * Wp * C;
      if (h < 0 || h >= g.H) {
        std::memset(dst, 0, static_cast<std::size_t>(Wp * C) * sizeof(float));
        continue;
      }
      std::memset(dst, 0, static_cast<std::size_t>(g.pl * C) * sizeof(float));
      std::memset(dst + (g.pl + g.W) * C, 0, static_cast<std::size_t>(g.pr * C) * sizeof(float));
      float* d0 = dst + g.pl * C;
      if (g.x_nhwc) {
        std::memcpy(d0, x + (n * g.H + h) * g.W * C, static_cast<std::size_t>(g.W * C) * sizeof(float));
      } else {
        // x is (N, C, H, W): row h of every channel (C x W, rows HW apart) transposed into
        // the padded row's pixels (W x C).
        transpose_2d<Arch>(x + n * C * g.H * g.W + h * g.W, g.H * g.W, d0, C, C, g.W);
      }
    }
  });
}

// ---- direct kernel: NHWC, output channels in lanes ----------------------------------------------

template <class Arch>
struct DirectTile;  // MR and the K-block choices per ISA
template <>
struct DirectTile<avx512> {
  static constexpr int MR = 6;
  static int nv(i64 Kg) { return Kg > 32 ? 4 : (Kg > 16 ? 2 : 1); }
};
template <>
struct DirectTile<avx2> {
  static constexpr int MR = 6;
  static int nv(i64 Kg) { return Kg > 8 ? 2 : 1; }
};
template <>
struct DirectTile<sse2> {
  static constexpr int MR = 6;
  static int nv(i64 Kg) { return Kg > 4 ? 2 : 1; }
};

// One register tile: MR output pixels x NV vectors of output channels.
//   xs[i]: the padded-NHWC address of pixel i's window corner (at its group's first channel)
//   w:     the K block's packed weights [R][S][Cg][NV*W]
//   ys[i]: where pixel i's channels of this block go (nullptr: tile padding, not stored)
template <class Arch, int MR, int NV>
void direct_tile(const float* const* xs, const float* w, i64 R, i64 S, i64 Cg, i64 row_step, i64 col_step,
                 const float* bias, float* const* ys, i64 valid_k, bool first) {
  using B = fbatch<Arch>;
  constexpr int Wd = static_cast<int>(B::size);
  B acc[MR][NV];
  for (int v = 0; v < NV; ++v) {
    const B b = B::load_aligned(bias + v * Wd);
    for (int i = 0; i < MR; ++i) acc[i][v] = b;
  }
  if (!first) {  // a later channel block: continue from the partial sums stored in y
    for (int i = 0; i < MR; ++i) {
      if (!ys[i]) continue;
      if (valid_k == NV * Wd) {
        for (int v = 0; v < NV; ++v) acc[i][v] = B::load_unaligned(ys[i] + v * Wd);
      } else {
        alignas(64) float tmp[NV * Wd] = {};
        std::memcpy(tmp, ys[i], static_cast<std::size_t>(valid_k) * sizeof(float));
        for (int v = 0; v < NV; ++v) acc[i][v] = B::load_aligned(tmp + v * Wd);
      }
    }
  }
  // When a window row's (s, c) taps are contiguous in x (dilation 1 and the tile covers all
  // channels), they form one reduction of S*Cg: the ResNet stem's 7 x 3 taps become one loop of
  // 21 instead of 7 loops of 3. The packed weights are [r][s][c] in that order already.
  i64 taps = S, chans = Cg;
  if (col_step == Cg) taps = 1, chans = S * Cg;
  for (i64 r = 0; r < R; ++r) {
    for (i64 s = 0; s < taps; ++s) {
      const i64 off = r * row_step + s * col_step;
      const float* px[MR];
      for (int i = 0; i < MR; ++i) px[i] = xs[i] + off;
      for (i64 c = 0; c < chans; ++c) {
        B wv[NV];
        for (int v = 0; v < NV; ++v) wv[v] = B::load_aligned(w + v * Wd);
        w += NV * Wd;
        for (int i = 0; i < MR; ++i) {
          const B xb(px[i][c]);
          for (int v = 0; v < NV; ++v) acc[i][v] = xsimd::fma(xb, wv[v], acc[i][v]);
        }
      }
    }
  }
  if (valid_k == NV * Wd) {
    for (int i = 0; i < MR; ++i)
      if (ys[i])
        for (int v = 0; v < NV; ++v) acc[i][v].store_unaligned(ys[i] + v * Wd);
  } else {
    alignas(64) float tmp[NV * Wd];
    for (int i = 0; i < MR; ++i) {
      if (!ys[i]) continue;
      for (int v = 0; v < NV; ++v) acc[i][v].store_aligned(tmp + v * Wd);
      std::memcpy(ys[i], tmp, static_cast<std::size_t>(valid_k) * sizeof(float));
    }
  }
}

// Input channels per block: the block's weights (R*S*CB*KB floats, up to 144 KB) stay in L2
// while every tile of a row block runs over them; the weight stream is sequential, so the L2
// prefetcher keeps it ahead of the FMAs. Blocks of ~36 KB (to fit L1) measured 4-5% slower on
// 3x3 64->64 @56 and 128->128 @28 (4 A/B pairs): every block beyond the first reloads and
// re-stores the tile's partial sums, and the c loop is shorter.
inline i64 direct_cblock(const ConvGeom& g, i64 KB) { return std::clamp<i64>(36864 / (g.R * g.S * KB), 4, g.Cg); }

// Packs w (K, Cg, R, S) into [g][kb][c block][R][S][c in block][KB], zero-filling output
// channels past Kg. Split over threads by (group, K block, channel block, window row): when w is
// not bound at prepare this runs inside every call, so it must not be a serial prologue.
inline void pack_direct_weights(const ConvGeom& g, const float* w, i64 KB, float* out, int threads) {
  const i64 nkb = (g.Kg + KB - 1) / KB, CB = direct_cblock(g, KB), ncb = (g.Cg + CB - 1) / CB;
  const i64 wblock = g.R * g.S * g.Cg * KB;
  parallel_for(g.G * nkb * ncb * g.R, threads, 1, [&](i64 b, i64 e) {
    for (i64 u = b; u < e; ++u) {
      const i64 r = u % g.R, cb = (u / g.R) % ncb, kb = (u / (g.R * ncb)) % nkb, gi = u / (g.R * ncb * nkb);
      const i64 c0 = cb * CB, cn = std::min(CB, g.Cg - c0);
      float* o = out + (gi * nkb + kb) * wblock + (c0 * g.R + r * cn) * g.S * KB;
      // Output channel outermost: each k's taps are read along w's rows (not one cache line per
      // float), and the unit's S*cn*KB outputs stay in L1 while the l column fills in.
      for (i64 l = 0; l < KB; ++l) {
        const i64 kg = kb * KB + l;
        if (kg >= g.Kg) {
          for (i64 sc = 0; sc < g.S * cn; ++sc) o[sc * KB + l] = 0.f;
          continue;
        }
        const float* src = w + (gi * g.Kg + kg) * g.ws[0] + c0 * g.ws[1] + r * g.ws[2];
        for (i64 s = 0; s < g.S; ++s)
          for (i64 c = 0; c < cn; ++c) o[(s * cn + c) * KB + l] = src[c * g.ws[1] + s * g.ws[3]];
      }
    }
  });
}

struct DirectState {
  bool packed = false;    // weights packed at prepare
  AlignedFloats weights;  // [G][nkb][R][S][Cg][KB]
  AlignedFloats ytiles;   // NCHW output: one NHWC row block per thread
  i64 ytile_floats = 0;
  int slots = 1;
};

template <class Arch>
struct DirectPlan {
  ConvGeom g;
  i64 KB, nkb, wfloats, Hp, Wp;
  i64 RB;             // output rows per task
  bool copy_x, ybuf;  // x goes through the padded NHWC buffer; y through per-thread NHWC row blocks
};

template <class Arch>
DirectPlan<Arch> direct_plan(const OpDesc& d) {
  DirectPlan<Arch> pl{};
  pl.g = conv_geom(d);
  const ConvGeom& g = pl.g;
  pl.KB = DirectTile<Arch>::nv(g.Kg) * static_cast<i64>(fbatch<Arch>::size);
  pl.nkb = (g.Kg + pl.KB - 1) / pl.KB;
  pl.wfloats = g.G * pl.nkb * g.R * g.S * g.Cg * pl.KB;
  pl.copy_x = !g.x_nhwc || g.pt || g.pl || g.pb || g.pr;
  pl.Hp = g.H + g.pt + g.pb;
  pl.Wp = g.W + g.pl + g.pr;
  pl.ybuf = !g.y_nhwc;
  // A task is a block of output rows whose NHWC tile (RB*Q*K floats) stays within ~64 KB, so
  // the NCHW transpose and the chain read it from L1/L2 right after the conv wrote it.
  pl.RB = std::clamp<i64>(16384 / std::max<i64>(1, g.Q * g.K), 1, g.P);
  return pl;
}

}  // namespace OPFUSE_SIMD_NS
}  // namespace opfuse::simd
