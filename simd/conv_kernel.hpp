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
#include <atomic>
#include <cstdint>
#include <cstring>
#include <memory>
#include <type_traits>
#include <vector>

#include "simd/common.hpp"
#include "simd/conv_geom.hpp"
#include "simd/transpose.hpp"

namespace opfuse::simd {
inline namespace OPFUSE_SIMD_NS {

using i64 = std::int64_t;

constexpr i64 round_up(i64 v, i64 m) { return (v + m - 1) / m * m; }

// ---- geometry: ConvGeom and conv_geom() (simd/conv_geom.hpp) --------------------------------

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

// direct_tile's default epilogue: nothing between the accumulation and the store.
struct NoTileEpi {
  template <class B, int MR, int NV>
  void operator()(B (&)[MR][NV], float* const*) const {}
};

// The window taps a register tile computes: rows [r0, r1) x columns [s0, s1) of the R x S
// window (DirectTiler: the taps that reach real input for at least one of its pixels).
struct TapWindow {
  i64 r0, r1, s0, s1;
};

// Stores a finished register tile: pixel i's valid_k channels to ys[i] (nullptr: tile padding,
// not stored); a partial vector through a buffer, nothing written past valid_k. Inlined always,
// so that acc stays in the caller's registers.
template <class Arch, int MR, int NV>
[[gnu::always_inline]] inline void store_tile(fbatch<Arch> (&acc)[MR][NV], float* const* ys, i64 valid_k) {
  constexpr int Wd = static_cast<int>(fbatch<Arch>::size);
  if (valid_k == NV * Wd) {
    float* yl[MR];  // a local copy: the stores (may_alias vectors) would make ys[i] reload
#pragma GCC unroll 16
    for (int i = 0; i < MR; ++i) yl[i] = ys[i];
#pragma GCC unroll 16
    for (int i = 0; i < MR; ++i)
      if (yl[i])
#pragma GCC unroll 16
        for (int v = 0; v < NV; ++v) acc[i][v].store_unaligned(yl[i] + v * Wd);
    return;
  }
  alignas(64) float tmp[NV * Wd];
#pragma GCC unroll 16
  for (int i = 0; i < MR; ++i) {
    if (!ys[i]) continue;
#pragma GCC unroll 16
    for (int v = 0; v < NV; ++v) acc[i][v].store_aligned(tmp + v * Wd);
    std::memcpy(ys[i], tmp, static_cast<std::size_t>(valid_k) * sizeof(float));
  }
}

// One register tile: MR output pixels x NV vectors of output channels.
//   xs[i]: the padded-NHWC address of pixel i's window corner (at its group's first channel)
//   w:     the K block's packed weights [R][S][Cg][NV*W]
//   win:   the taps to compute; the others read only zero padding for every pixel of the tile
//   ys[i]: where pixel i's channels of this block go (nullptr: tile padding, not stored)
//   epi:   epi(acc, ys) maps the finished accumulators before the store (the fused stage's
//          post-op chain on the last channel block; NoTileEpi compiles to nothing)
//   pf, npf: npf cache lines from pf to request into L2 along the FMA loop, one per channel
//          step (DirectPrefetch: this tile's share of the next weight block)
template <class Arch, int MR, int NV, class Epi = NoTileEpi>
[[gnu::noinline]] void direct_tile(const float* const* xs, const float* w, i64 S, i64 Cg, const TapWindow& win,
                                   i64 row_step, i64 col_step, const float* bias, float* const* ys, i64 valid_k,
                                   bool first, const Epi& epi = Epi{}, const float* pf = nullptr, i64 npf = 0) {
  using B = fbatch<Arch>;
  constexpr int Wd = static_cast<int>(B::size);
  const float* const w0 = w;
  // Every loop over i and v is unrolled by pragma, early enough for GCC's scalar replacement to
  // keep acc in registers from the bias to the store. Left to the later unroller, acc stayed an
  // array on the stack that every tile stored and reloaded around its FMA loop. Out of line, the
  // tile's register allocation is its own, not its caller's.
  B acc[MR][NV];
#pragma GCC unroll 16
  for (int v = 0; v < NV; ++v) {
    const B b = B::load_aligned(bias + v * Wd);
#pragma GCC unroll 16
    for (int i = 0; i < MR; ++i) acc[i][v] = b;
  }
  if (!first) {  // a later channel block: continue from the partial sums stored in y
#pragma GCC unroll 16
    for (int i = 0; i < MR; ++i) {
      if (!ys[i]) continue;
      if (valid_k == NV * Wd) {
#pragma GCC unroll 16
        for (int v = 0; v < NV; ++v) acc[i][v] = B::load_unaligned(ys[i] + v * Wd);
      } else {
        alignas(64) float tmp[NV * Wd] = {};
        std::memcpy(tmp, ys[i], static_cast<std::size_t>(valid_k) * sizeof(float));
#pragma GCC unroll 16
        for (int v = 0; v < NV; ++v) acc[i][v] = B::load_aligned(tmp + v * Wd);
      }
    }
  }
  // When a window row's (s, c) taps are contiguous in x (dilation 1 and the tile covers all
  // channels), they form one reduction of (s1 - s0) * Cg: the ResNet stem's 7 x 3 taps become
  // one loop of 21 instead of 7 loops of 3. The packed weights are [r][s][c] in that order.
  const i64 sn = win.s1 - win.s0;
  i64 taps = sn, chans = Cg;
  if (col_step == Cg) taps = 1, chans = sn * Cg;
  for (i64 r = win.r0; r < win.r1; ++r) {
    w = w0 + (r * S + win.s0) * Cg * (NV * Wd);
    for (i64 s = 0; s < taps; ++s) {
      const i64 off = r * row_step + (win.s0 + s) * col_step;
      const float* px[MR];
#pragma GCC unroll 16
      for (int i = 0; i < MR; ++i) px[i] = xs[i] + off;
      for (i64 c = 0; c < chans; ++c) {
        B wv[NV];
#pragma GCC unroll 16
        for (int v = 0; v < NV; ++v) wv[v] = B::load_aligned(w + v * Wd);
        w += NV * Wd;
        if (npf > 0) {
          __builtin_prefetch(pf, 0, 2);
          pf += 16;
          --npf;
        }
#pragma GCC unroll 16
        for (int i = 0; i < MR; ++i) {
          const B xb(px[i][c]);
#pragma GCC unroll 16
          for (int v = 0; v < NV; ++v) acc[i][v] = xsimd::fma(xb, wv[v], acc[i][v]);
        }
      }
    }
  }
  epi(acc, ys);
  store_tile<Arch>(acc, ys, valid_k);
}

// The y lines of a tile's m pixels (valid channels each), towards L2, before the FMAs of the
// block that stores them: they arrive during the FMAs instead of stalling the stores (a bare
// 1x1 64 -> 256 @56 writes 3.2 MB, beyond L2, whose lines a whole model finds in L3 at best).
// A read prefetch serves the store too: a line no other core holds arrives exclusive. Out of
// line: inlined, the loops changed the register allocation of direct_tile's FMA loop.
[[gnu::noinline]] inline void prefetch_tile_outputs(float* const* ys, int m, i64 valid) {
  for (int i = 0; i < m; ++i)
    for (i64 c = 0; c < valid; c += 16) prefetch_line<2>(ys[i] + c);
}

// direct_tile for a tile of m real pixels (DirectTiler): the tile of m rows for MR / 2 <= m <=
// MR, of MR / 2 rows below that (xs and ys hold MR entries, padded past m by the caller).
template <class Arch, int MR, int NV, int M = MR, class Epi>
void direct_tile_m(int m, const float* const* xs, const float* w, i64 S, i64 Cg, const TapWindow& win, i64 row_step,
                   i64 col_step, const float* bias, float* const* ys, i64 valid_k, bool first, const Epi& epi,
                   const float* pf, i64 npf) {
  if constexpr (2 * (M - 1) >= MR) {
    if (m < M)
      return direct_tile_m<Arch, MR, NV, M - 1>(m, xs, w, S, Cg, win, row_step, col_step, bias, ys, valid_k, first, epi,
                                                pf, npf);
  }
  direct_tile<Arch, M, NV>(xs, w, S, Cg, win, row_step, col_step, bias, ys, valid_k, first, epi, pf, npf);
}

// The tiles of a pointwise convolution (1x1, stride 1, unpadded NHWC x, all input channels in
// one block): n consecutive output pixels, pixel j's chans channels at x + j * C, its block of
// output channels at y + j * K. The same register tile as direct_tile, MR pixels at a time, but
// the tiles' pointers are stepped rather than built per tile by a DirectTiler and the tile loop
// runs here, in one function: with a reduction as short as 64 channels, a ResNet layer1 1x1
// spends a fifth of its time outside the FMA loop of direct_tile's per-tile calls. Per tile,
// before(ys, pix, MR) runs ahead of the FMAs (the fused stage's output prefetch) and
// epi_at(pix)(acc, ys) maps the accumulators before the store (DirectTileEpi); pix[i] = j0 + j
// + i is the tile's pixel index in its image. A last partial tile goes to direct_tile_m.
template <class Arch, int MR, int NV, class Before, class EpiAt>
[[gnu::noinline]] void pointwise_run(const float* x, i64 C, i64 chans, const float* w, const float* bias, float* y,
                                     i64 K, i64 j0, i64 n, i64 valid_k, const Before& before, const EpiAt& epi_at) {
  using B = fbatch<Arch>;
  constexpr int Wd = static_cast<int>(B::size);
  i64 j = 0;
  for (; j + MR <= n; j += MR) {
    float* ys[MR];
    i64 pix[MR];
    const float* px[MR];
#pragma GCC unroll 16
    for (int i = 0; i < MR; ++i) {
      ys[i] = y + (j + i) * K;
      pix[i] = j0 + j + i;
      px[i] = x + (j + i) * C;
    }
    before(static_cast<float* const*>(ys), static_cast<const i64*>(pix), MR);
    B acc[MR][NV];  // in registers throughout: see direct_tile
#pragma GCC unroll 16
    for (int v = 0; v < NV; ++v) {
      const B b = B::load_aligned(bias + v * Wd);
#pragma GCC unroll 16
      for (int i = 0; i < MR; ++i) acc[i][v] = b;
    }
    const float* wq = w;
    for (i64 c = 0; c < chans; ++c) {
      B wv[NV];
#pragma GCC unroll 16
      for (int v = 0; v < NV; ++v) wv[v] = B::load_aligned(wq + v * Wd);
      wq += NV * Wd;
#pragma GCC unroll 16
      for (int i = 0; i < MR; ++i) {
        const B xb(px[i][c]);
#pragma GCC unroll 16
        for (int v = 0; v < NV; ++v) acc[i][v] = xsimd::fma(xb, wv[v], acc[i][v]);
      }
    }
    epi_at(static_cast<const i64*>(pix))(acc, static_cast<float* const*>(ys));
    store_tile<Arch>(acc, ys, valid_k);
  }
  if (j == n) return;
  const int m = static_cast<int>(n - j);
  const float* xs[MR];
  float* ys[MR];
  i64 pix[MR];
  for (int i = 0; i < MR; ++i) {
    const i64 jj = j + std::min(i, m - 1);
    xs[i] = x + jj * C;
    ys[i] = i < m ? y + jj * K : nullptr;
    pix[i] = j0 + jj;
  }
  before(static_cast<float* const*>(ys), static_cast<const i64*>(pix), m);
  direct_tile_m<Arch, MR, NV>(m, xs, w, 1, chans, TapWindow{0, 1, 0, 1}, 0, chans, bias, ys, valid_k, true,
                              epi_at(static_cast<const i64*>(pix)), nullptr, 0);
}

// Input channels per block: the block's weights (R*S*CB*KB floats, up to 144 KB) stay in L2
// while every tile of a row block runs over them; the weight stream is sequential, so the L2
// prefetcher keeps it ahead of the FMAs. Blocks of ~36 KB (to fit L1) measured slower on
// 3x3 64->64 @56 and 128->128 @28 (4 A/B pairs): every block beyond the first reloads and
// re-stores the tile's partial sums, and the c loop is shorter.
inline i64 direct_cblock(const ConvGeom& g, i64 KB) { return std::clamp<i64>(36864 / (g.R * g.S * KB), 4, g.Cg); }

// The next weight block, requested into L2 while this block's tiles run: tile t of ntiles asks
// for its share of the lines. A block is read from memory once per row block (the whole weight
// array streams through every row block), and its first tile alone would run at the speed of
// that stream; the L2 stream prefetcher does not run far enough ahead to hide it when the
// weights are large and the pixels few (ResNet-50's layer4: 9.4 MB over 49 pixels).
struct DirectPrefetch {
  const float* next = nullptr;  // the next block's first float (null: none)
  i64 lines = 0, per_tile = 0;
  DirectPrefetch(const float* next_block, const float* wend, i64 block_floats, i64 ntiles) {
    if (next_block >= wend) return;
    next = next_block;
    lines = (std::min<i64>(block_floats, wend - next_block) + 15) / 16;
    per_tile = (lines + ntiles - 1) / ntiles;
  }
  const float* at(i64 t) const { return next ? next + t * per_tile * 16 : nullptr; }
  i64 count(i64 t) const { return next ? std::clamp<i64>(lines - t * per_tile, 0, per_tile) : 0; }
};

// Packs w (K, Cg, R, S) into [g][kb][c block][R][S][c in block][KB], zero-filling output
// channels past Kg, each output channel k's taps times sc[k] when sc is given (the fused stage's
// folded batchnorm). Split over threads by (group, K block, channel block): when w is not bound
// at prepare this runs inside every call, so it must not be a serial prologue.
// The packing is a transpose: w's rows (one per output channel, C*R*S contiguous floats) become
// KB-wide columns. With dense rows, W rows x W taps go through registers (transpose_block into
// an L1 tile) and come out as W vectors, each one tap of W output channels; one float at a time,
// strided on both sides, the 3x3 512 -> 512 convolution at 7 x 7 spent more time packing its
// 9.4 MB of weights than convolving (perf: 20.5% vs 17.7% of the run).
// Returns whether every packed weight is finite: only then may a tile skip the taps that read
// the zero padding (DirectPlan::skip_padding), since 0 x Inf and 0 x NaN are NaN, which the
// padding contributes by definition (naive/conv.cpp). The check is a subtraction per packed
// vector (v - v is 0, or NaN for Inf and NaN), folded into the pack rather than a pass of its own.
template <class Arch>
bool pack_direct_weights(const ConvGeom& g, const float* w, i64 KB, const float* sc, float* out, int threads) {
  using B = fbatch<Arch>;
  constexpr i64 W = B::size;
  const i64 nkb = (g.Kg + KB - 1) / KB, CB = direct_cblock(g, KB), ncb = (g.Cg + CB - 1) / CB;
  const i64 RS = g.R * g.S, wblock = RS * g.Cg * KB;
  const bool dense = g.ws[3] == 1 && g.ws[2] == g.S && g.ws[1] == RS && KB % W == 0;
  // Output channels l0 .. l0 + lw of the unit's block, tap t (c, r, s) of its channel block,
  // one float at a time: W's strided reads, the packed block's contiguous writes.
  const auto taps_scalar = [&](float* o, i64 gi, i64 kb, i64 c0, i64 cn, i64 l0, i64 lw, i64 t, float& zero) {
    const i64 c = t / RS, r = t % RS / g.S, s = t % g.S;
    float* d = o + (c0 * g.R + r * cn) * g.S * KB + (s * cn + c) * KB;
    for (i64 l = l0; l < l0 + lw; ++l) {
      const i64 kg = kb * KB + l, k = gi * g.Kg + kg;
      const float v = kg < g.Kg ? w[k * g.ws[0] + (c0 + c) * g.ws[1] + r * g.ws[2] + s * g.ws[3]] : 0.f;
      d[l] = sc && kg < g.Kg ? v * sc[k] : v;
      zero += d[l] - d[l];
    }
  };
  std::atomic<bool> nonfinite{false};
  parallel_for(g.G * nkb * ncb, threads, 1, [&](i64 b, i64 e) {
    alignas(64) float tile[W * W];
    B vzero(0.f);  // the sum of v - v over the packed vectors: NaN after any Inf or NaN
    float zero = 0.f;
    for (i64 u = b; u < e; ++u) {
      const i64 cb = u % ncb, kb = (u / ncb) % nkb, gi = u / (ncb * nkb);
      const i64 c0 = cb * CB, cn = std::min(CB, g.Cg - c0), taps = cn * RS;
      float* o = out + (gi * nkb + kb) * wblock;
      for (i64 l0 = 0; l0 < KB; l0 += dense ? W : KB) {
        const i64 kg0 = kb * KB + l0;
        i64 q = 0;  // taps done, in w's row order: c, then r, then s
        if (dense && kg0 + W <= g.Kg) {
          const float* src = w + (gi * g.Kg + kg0) * g.ws[0] + c0 * RS;
          const B scale = sc ? B::load_unaligned(sc + gi * g.Kg + kg0) : B(1.f);
          i64 c = 0, r = 0, s = 0;  // tap q
          for (; q + W <= taps; q += W) {
            // The W rows are W streams 4 * C * R * S bytes apart: each is fetched 4 lines ahead.
            for (i64 i = 0; i < W; ++i) __builtin_prefetch(src + i * g.ws[0] + q + 64, 0, 3);
            transpose_block<Arch>(src + q, g.ws[0], tile, W);  // tile[t] = tap q + t of the W channels
            for (i64 t = 0; t < W; ++t) {
              const B v = B::load_aligned(tile + t * W) * scale;
              vzero += v - v;
              v.store_unaligned(o + (c0 * g.R + r * cn) * g.S * KB + (s * cn + c) * KB + l0);
              if (++s < g.S) continue;
              s = 0;
              if (++r < g.R) continue;
              r = 0;
              ++c;
            }
          }
        } else if (dense && kg0 >= g.Kg) {
          for (i64 c = 0; c < cn; ++c)
            for (i64 r = 0; r < g.R; ++r)
              for (i64 s = 0; s < g.S; ++s)
                B(0.f).store_unaligned(o + (c0 * g.R + r * cn) * g.S * KB + (s * cn + c) * KB + l0);
          continue;
        }
        // The rest one float at a time: taps past the last whole W, a block straddling Kg,
        // strided weights.
        for (i64 t = q; t < taps; ++t) taps_scalar(o, gi, kb, c0, cn, l0, dense ? W : KB, t, zero);
      }
    }
    alignas(64) float lanes[W];
    vzero.store_aligned(lanes);
    for (i64 l = 0; l < W; ++l) zero += lanes[l];
    if (zero != 0.f) nonfinite.store(true, std::memory_order_relaxed);
  });
  return !nonfinite.load(std::memory_order_relaxed);
}

// ---- depthwise, NCHW ---------------------------------------------------------------------------
// (simd/conv.cpp's depthwise kernel runs its chain after each run of rows; the fused stage's
// maps the accumulators before the store.) Each (n, c) plane is copied into a per-thread
// zero-padded buffer split by stride phase (column j of phase f holds padded column
// j*stride + f), so every tap of every stride is a contiguous vector load along the output row.

struct DwState {
  std::vector<i64> tap_offset;  // NCHW: where tap (r, s) starts in the phase-split plane
  AlignedFloats weights;        // NHWC: [R][S][C], packed at prepare when w is bound
  bool packed = false;
  AlignedFloats planes;  // one phase-split padded plane per thread (NCHW)
  i64 plane_floats = 0;
  int slots = 1;
  AlignedFloats patch;  // small-C with NHWC x and y: per thread, a border tile's patch
  i64 patch_floats = 0;
};

struct DwPlane {
  i64 Hp, rows_stride, Wj;  // padded rows; floats per phase row; columns per phase
};

template <class Arch>
DwPlane dw_plane(const ConvGeom& g) {
  constexpr i64 Wd = fbatch<Arch>::size;
  DwPlane pl{};
  pl.Hp = g.H + g.pt + g.pb;
  const i64 Wp = g.W + g.pl + g.pr;
  pl.Wj = (Wp + g.sw - 1) / g.sw;
  // Vector loads (four at a time) run up to 4*Wd - 1 columns past the last output: pad rows.
  pl.rows_stride = round_up(std::max(pl.Wj, g.Q + (g.dw * (g.S - 1)) / g.sw) + 4 * Wd, 16);
  return pl;
}

// 3x3 stride 2 with left padding 1 (MobileNet's stride 2): dw_nchw_run computes it from x's rows
// (dw3s2_row), so its per-thread buffer holds only the plane's taps.
inline bool dw_from_rows(const ConvGeom& g) {
  return g.R == 3 && g.S == 3 && g.dh == 1 && g.dw == 1 && g.sh == 2 && g.sw == 2 && g.pl == 1;
}

// Prepare: the taps' offsets in the phase-split plane and `per_slot` planes per thread; with
// taps_only (dw_nchw_prepare where dw_from_rows), no plane, only the taps.
template <class Arch>
void dw_prepare_planes(const ConvGeom& g, int threads, DwState* st, i64 per_slot = 1, bool taps_only = false) {
  const DwPlane pl = dw_plane<Arch>(g);
  // The phases, then 4 vectors of slack for the last row's over-reads, then the taps.
  st->plane_floats =
      (taps_only ? 0 : round_up(g.sw * pl.Hp * pl.rows_stride + 4 * fbatch<Arch>::size, 16)) + round_up(g.R * g.S, 16);
  st->tap_offset.clear();
  for (i64 r = 0; r < g.R; ++r)
    for (i64 s = 0; s < g.S; ++s) {
      const i64 off = s * g.dw;
      st->tap_offset.push_back((off % g.sw) * pl.Hp * pl.rows_stride + r * g.dh * pl.rows_stride + off / g.sw);
    }
  st->slots = std::max(1, threads);
  st->planes.resize(static_cast<std::size_t>(st->slots * per_slot * st->plane_floats));
}

// Prepare of dw_nchw_run: one plane per thread, or only the taps where it reads x's rows.
template <class Arch>
void dw_nchw_prepare(const ConvGeom& g, int threads, DwState* st) {
  dw_prepare_planes<Arch>(g, threads, st, 1, dw_from_rows(g));
}

// dst[0, n) = src[0, n), inline: n is a register here (as a lambda capture it was reloaded
// after every vector store, which may alias anything).
template <class Arch>
inline void copy_floats(const float* src, float* dst, i64 n) {
  using B = fbatch<Arch>;
  constexpr i64 Wd = B::size;
  i64 j = 0;
  for (; j + Wd <= n; j += Wd) B::load_unaligned(src + j).store_unaligned(dst + j);
  for (; j < n; ++j) dst[j] = src[j];
}

// The window taps of output row (or column) o that reach real input: [lo, hi) of the R taps
// (stride, pad and dilation along that axis, H real input rows). The others read zero padding.
struct TapRange {
  i64 lo, hi;
};
inline TapRange real_taps(i64 o, i64 stride, i64 pad, i64 dil, i64 R, i64 H) {
  const i64 i0 = o * stride - pad;
  const i64 lo = i0 >= 0 ? 0 : std::min(R, (dil - 1 - i0) / dil);
  const i64 hi = i0 > H - 1 ? 0 : std::min(R, (H - 1 - i0) / dil + 1);
  return {lo, std::max(lo, hi)};
}

// One register tile of a direct-convolution row block: m output pixels and the taps they need.
template <int MR>
struct DirectTileSpec {
  int m = 0;         // real pixels; the rest of the MR repeat the last one (computed, not stored)
  i64 p[MR], q[MR];  // output row and column of each pixel
  TapWindow win{};   // the taps computed: those that reach real input for any of the pixels
  bool consecutive;  // p * Q + q steps by one along the real pixels
};

// The register tiles of a row block (output rows [p0, p1), all columns) in the order they run.
// A tile's pixels share its FMAs, so it can skip a tap only when the tap reads padding for all
// of them. So the pixels are grouped by the taps they need (a border pixel's window reaches
// into the padding):
//   - the interior columns (every column tap real), row by row, a run of rows with the same
//     row taps as one group: at 3x3 pad 1 the top and the bottom row skip a third of the taps;
//   - then the left and the right edge columns, each column down the rows: they skip their
//     column taps (and the row taps that no pixel of the tile needs).
// A group splits into tiles of equal size, at most MR (and at least MR / 2 where the group has
// that many pixels; direct_tile_m pads smaller ones). For 3x3 pad 1 at 14 x 14 this computes
// ~91% of the taps of whole windows, at 7 x 7 ~84%.
template <int MR>
class DirectTiler {
 public:
  // skip: compute only the taps that reach real input (else every tile computes whole windows).
  DirectTiler(const ConvGeom& g, i64 p0, i64 p1, bool skip) : g_(g), skip_(skip) {
    // Interior columns [qa, qb): real_taps is monotonic in q, so they are one range.
    qa_ = 0;
    while (qa_ < g.Q && real_taps(qa_, g.sw, g.pl, g.dw, g.S, g.W).lo > 0) ++qa_;
    qb_ = g.Q;
    while (qb_ > qa_ && real_taps(qb_ - 1, g.sw, g.pl, g.dw, g.S, g.W).hi < g.S) --qb_;
    if (qa_ == qb_) qa_ = qb_ = g.Q;  // no interior column: every column goes to the left group
    if (qa_ < qb_) {
      for (i64 p = p0; p < p1;) {
        const TapRange t = row_taps(p);
        i64 e = p + 1;
        while (e < p1 && (ngroups_ == kRuns - 1 || same(row_taps(e), t))) ++e;  // the last run takes the rest
        add({p, e, qa_, qb_, false});
        p = e;
      }
    }
    if (qa_ > 0) add({p0, p1, 0, qa_, true});
    if (qb_ < g.Q) add({p0, p1, qb_, g.Q, true});
  }

  i64 count() const {
    i64 n = 0;
    for (int k = 0; k < ngroups_; ++k) n += tiles(groups_[k]);
    return n;
  }

  // f(tile) for every tile in order.
  template <class F>
  void each(F&& f) const {
    DirectTileSpec<MR> t;
    for (int k = 0; k < ngroups_; ++k) {
      const Group& gr = groups_[k];
      const i64 n = size(gr), nt = tiles(gr), base = n / nt, extra = n % nt;
      // A group whose first and last pixels need the same taps needs them for every pixel
      // (real_taps is monotonic): one window for all its tiles - the interior groups, and
      // every group of a convolution without padding.
      const TapWindow whole{0, g_.R, 0, g_.S};
      const bool uniform =
          !skip_ || (same(row_taps(gr.pa), row_taps(gr.pb - 1)) && same(col_taps(gr.qa), col_taps(gr.qb - 1)));
      const TapWindow gwin = !skip_ ? whole : window(gr.pa, gr.pb - 1, gr.qa, gr.qb - 1);
      i64 p = gr.pa, q = gr.qa;  // the next pixel of the group, stepped without divisions
      for (i64 j = 0; j < nt; ++j) {
        t.m = static_cast<int>(base + (j < extra));
        for (int i = 0; i < t.m; ++i) {
          t.p[i] = p, t.q[i] = q;
          if (gr.by_column) {
            if (++p == gr.pb) p = gr.pa, ++q;
          } else if (++q == gr.qb) {
            q = gr.qa, ++p;
          }
        }
        for (int i = t.m; i < MR; ++i) t.p[i] = t.p[t.m - 1], t.q[i] = t.q[t.m - 1];
        i64 pmin = t.p[0], pmax = t.p[0], qmin = t.q[0], qmax = t.q[0];
        t.consecutive = true;
        for (int i = 1; i < t.m; ++i) {
          pmin = std::min(pmin, t.p[i]), pmax = std::max(pmax, t.p[i]);
          qmin = std::min(qmin, t.q[i]), qmax = std::max(qmax, t.q[i]);
          t.consecutive = t.consecutive && t.p[i] * g_.Q + t.q[i] == t.p[i - 1] * g_.Q + t.q[i - 1] + 1;
        }
        t.win = uniform ? gwin : window(pmin, pmax, qmin, qmax);
        f(static_cast<const DirectTileSpec<MR>&>(t));
      }
    }
  }

 private:
  static constexpr int kRuns = 8;  // row runs kept apart (pads of up to 3 rows on each side)
  struct Group {
    i64 pa, pb, qa, qb;  // rows [pa, pb) x columns [qa, qb)
    bool by_column;      // pixel order: down each column (edge columns) or along each row
  };
  TapRange row_taps(i64 p) const { return real_taps(p, g_.sh, g_.pt, g_.dh, g_.R, g_.H); }
  TapRange col_taps(i64 q) const { return real_taps(q, g_.sw, g_.pl, g_.dw, g_.S, g_.W); }
  static bool same(TapRange a, TapRange b) { return a.lo == b.lo && a.hi == b.hi; }
  // The taps of pixels in rows [pmin, pmax] x columns [qmin, qmax]: real_taps is non-increasing
  // in both bounds, so their union is [lo(last row), hi(first row)), and the same for columns.
  TapWindow window(i64 pmin, i64 pmax, i64 qmin, i64 qmax) const {
    const TapRange rlo = row_taps(pmax), rhi = row_taps(pmin);
    const TapRange slo = col_taps(qmax), shi = col_taps(qmin);
    return {rlo.lo, std::max(rlo.lo, rhi.hi), slo.lo, std::max(slo.lo, shi.hi)};
  }
  static i64 size(const Group& gr) { return (gr.pb - gr.pa) * (gr.qb - gr.qa); }
  static i64 tiles(const Group& gr) { return (size(gr) + MR - 1) / MR; }
  void add(const Group& gr) {
    if (size(gr) > 0) groups_[ngroups_++] = gr;
  }
  const ConvGeom& g_;
  bool skip_;
  i64 qa_ = 0, qb_ = 0;
  Group groups_[kRuns + 2];
  int ngroups_ = 0;
};

// Input row h of a plane, its W floats at srow, into the plane's phase-split padded copy buf
// (dw_plane): padded column j*sw + f goes to phase f, column j. Only real columns are written,
// so the padding keeps the zeros the buffer started with.
template <class Arch>
inline void dw_fill_row(const ConvGeom& g, const DwPlane& pl, const float* srow, float* buf, i64 h) {
  const i64 phase_floats = pl.Hp * pl.rows_stride, rs = pl.rows_stride;
  const i64 Win = g.W, padl = g.pl, sw = g.sw;
  float* row = buf + (h + g.pt) * rs;
  if (sw == 1) {  // inline: a libc memcpy call per 56-float row was ~18% of the kernel
    copy_floats<Arch>(srow, row + padl, Win);
    return;
  }
  if (sw == 2) {  // both phases in one pass: padded column col + padl, phase (col + padl) % 2
    float* ph = row + (padl % 2) * phase_floats + padl / 2;              // where column 0 goes
    float* pn = row + ((padl + 1) % 2) * phase_floats + (padl + 1) / 2;  // column 1
    split_phases2<Arch>(srow, Win, ph, pn);
    return;
  }
  for (i64 f = 0; f < sw; ++f) {
    // Padded columns f, f + sw, ... that hold real data: col = j*sw + f - pl in [0, W).
    const i64 j0 = f >= padl ? 0 : (padl - f + sw - 1) / sw;
    const i64 col0 = j0 * sw + f - padl;
    if (col0 >= Win) continue;
    float* dst = row + f * phase_floats;
    for (i64 j = j0, col = col0; col < Win; ++j, col += sw) dst[j] = srow[col];
  }
}

// Input rows [h0, h1) of an (H x W) plane src into its phase-split padded plane buf.
template <class Arch>
inline void dw_fill_rows(const ConvGeom& g, const DwPlane& pl, const float* src, float* buf, i64 h0, i64 h1) {
  for (i64 h = h0; h < h1; ++h) dw_fill_row<Arch>(g, pl, src + h * g.W, buf, h);
}

// A map that maps nothing, for any kernel's epilogue slot (the simd stage's: its chain runs after
// the store).
struct NoMap {
  template <class... A>
  void operator()(A&&...) const {}
};

// The accumulator map of a plane that has none (the simd stage: its chain runs after the store).
struct DwNoEpi {
  template <class B, int NV>
  void operator()(B (&)[NV], i64, i64) const {}
};

// acc[0 .. NV) to out[0, valid); with `whole`, the last vector in full even past `valid`.
template <class Arch, int NV>
inline void dw_store(const fbatch<Arch> (&acc)[NV], float* out, i64 valid, bool whole) {
  constexpr i64 Wd = fbatch<Arch>::size;
#pragma GCC unroll 4
  for (int v = 0; v < NV - 1; ++v) acc[v].store_unaligned(out + v * Wd);
  if (whole || valid == NV * Wd) {
    acc[NV - 1].store_unaligned(out + (NV - 1) * Wd);
  } else {
    alignas(64) float tmp[Wd];
    acc[NV - 1].store_aligned(tmp);
    for (i64 l = 0; l < valid - (NV - 1) * Wd; ++l) out[(NV - 1) * Wd + l] = tmp[l];
  }
}

// NV vectors of one output row of a depthwise plane: out[0, valid) = wb + sum over taps t of
// wt[t] * in[toff[t] + q], mapped by epi(acc, pix, valid) before the store (pix: the
// plane index of out[0]). With `whole`, the last vector is stored in full even past `valid`.
template <class Arch, int NV, class Epi>
inline void dw_chunk(const float* in, const i64* toff, const float* wt, i64 taps, float wb, float* out, i64 valid,
                     bool whole, const Epi& epi, i64 pix) {
  using B = fbatch<Arch>;
  constexpr i64 Wd = B::size;
  B acc[NV];
  for (int v = 0; v < NV; ++v) acc[v] = B(wb);
  for (i64 t = 0; t < taps; ++t) {
    const B wv(wt[t]);
    const float* xr = in + toff[t];
    for (int v = 0; v < NV; ++v) acc[v] = xsimd::fma(wv, B::load_unaligned(xr + v * Wd), acc[v]);
  }
  epi(acc, pix, valid);
  dw_store<Arch, NV>(acc, out, valid, whole);
}

// Two output rows of a 3x3 depthwise plane with row stride and dilation 1: out0 from input
// rows 0 .. 2 of `in` (rs floats apart), out1 from rows 1 .. 3; soff[s] is column tap s's
// offset in the row. The two rows the outputs share are loaded once, each load feeding both
// rows' FMAs, and the nine weights stay in registers. One row at a time (dw_chunk), each tap
// was a loop step of NV FMAs on unaligned loads, most of them split across two cache lines,
// and the row's NV chains of 9 dependent FMAs left the FMA units idle (perf: the tap loop was
// half of the plane's time). Stride 2 shares one input row of five and measured no faster.
template <class Arch, int NV, class Epi>
[[gnu::noinline]] void dw3_pair(const float* in, i64 rs, const i64* soff, const float* wt, float wb, float* out0,
                                float* out1, i64 valid, bool whole0, bool whole1, const Epi& epi, i64 pix0, i64 pix1) {
  using B = fbatch<Arch>;
  constexpr i64 Wd = B::size;
  B a0[NV], a1[NV], w[9];
#pragma GCC unroll 4
  for (int v = 0; v < NV; ++v) a0[v] = a1[v] = B(wb);
#pragma GCC unroll 9
  for (int t = 0; t < 9; ++t) w[t] = B(wt[t]);
  const i64 s0 = soff[0], s1 = soff[1], s2 = soff[2];
  // One vector column at a time: its two accumulators, the nine weights and one input vector
  // in registers (all columns' loads at once spilled to the stack); the columns' chains are
  // independent, so out-of-order execution overlaps them.
#pragma GCC unroll 4
  for (int v = 0; v < NV; ++v) {
    const float* xv = in + v * Wd;
#pragma GCC unroll 4
    for (int h = 0; h < 4; ++h)
#pragma GCC unroll 3
      for (int s = 0; s < 3; ++s) {
        // Opaque to the compiler, so that both rows' FMAs use the one loaded register (GCC
        // otherwise folds the load into each FMA: two loads of every shared vector).
        typename B::register_type r = B::load_unaligned(xv + h * rs + (s == 0 ? s0 : s == 1 ? s1 : s2));
        asm("" : "+v"(r));
        const B x(r);
        if (h < 3) a0[v] = xsimd::fma(w[h * 3 + s], x, a0[v]);
        if (h >= 1) a1[v] = xsimd::fma(w[(h - 1) * 3 + s], x, a1[v]);
      }
  }
  epi(a0, pix0, valid);
  dw_store<Arch, NV>(a0, out0, valid, whole0);
  epi(a1, pix1, valid);
  dw_store<Arch, NV>(a1, out1, valid, whole1);
}

// One output row of a 3x3 stride-2 depthwise plane with left padding 1, straight from the
// plane's input rows (rows[r]: input row 2p + r - pad_top, or nullptr where that row is
// padding): output column j reads input columns 2j - 1, 2j and 2j + 1, so each vector of W
// outputs loads 2W input columns of a row and splits them in registers (even_odd) into the
// middle taps (even columns) and the right taps (odd columns); the left taps are the odd
// columns one lane later, the first of them the previous vector's last (shift_concat). Columns
// past the row (masked loads), the padding before it and padding rows are zero vectors,
// multiplied in like real input (0 * Inf is NaN, as in naive). The phase-split copy of the
// plane that the other strides go through (dw_fill_rows) wrote every input float to memory and
// read it back, the larger share of the plane's time at stride 2 (perf).
template <class Arch, class Epi>
[[gnu::noinline]] void dw3s2_row(const float* const (&rows)[3], i64 W_in, const float* wt, float wb, float* out, i64 Q,
                                 i64 pix, i64 PQ, const Epi& epi) {
  using B = fbatch<Arch>;
  constexpr i64 Wd = B::size;
  B w[9];
#pragma GCC unroll 9
  for (int t = 0; t < 9; ++t) w[t] = B(wt[t]);
  B prev[3] = {B(0.f), B(0.f), B(0.f)};  // each row's odd columns of the previous vector
  for (i64 j0 = 0; j0 < Q; j0 += Wd) {
    const i64 c0 = 2 * j0, left = W_in - c0;  // input columns from the vector's first middle tap
    B acc[1] = {B(wb)};
#pragma GCC unroll 3
    for (int r = 0; r < 3; ++r) {
      // A padding row is zeros multiplied in, not skipped: 0 * Inf is NaN, as in naive.
      B lo(0.f), hi(0.f);
      if (const float* x = rows[r] ? rows[r] + c0 : nullptr; x && left >= 2 * Wd) {
        lo = B::load_unaligned(x);
        hi = B::load_unaligned(x + Wd);
      } else if (x) {
        if (left > 0) lo = load_partial<Arch>(x, std::min(left, Wd));
        if (left > Wd) hi = load_partial<Arch>(x + Wd, left - Wd);
      }
      B ev, od;
      even_odd<Arch>(lo, hi, ev, od);
      const B lt = shift_concat<static_cast<int>(Wd) - 1, Arch>(prev[r], od);
      prev[r] = od;
      acc[0] = xsimd::fma(w[r * 3], lt, acc[0]);
      acc[0] = xsimd::fma(w[r * 3 + 1], ev, acc[0]);
      acc[0] = xsimd::fma(w[r * 3 + 2], od, acc[0]);
    }
    const i64 valid = std::min(Wd, Q - j0);
    epi(acc, pix + j0, valid);
    dw_store<Arch, 1>(acc, out + j0, valid, pix + j0 + Wd <= PQ);
  }
}

// The depthwise convolution of NCHW x into NCHW y, (n, c) planes split over the threads.
//   setup(n, c, wt) writes the plane's R*S taps to wt and returns its bias;
//   epi_of(n, c) returns the plane's accumulator map (see dw_chunk);
//   rows_done(n, c, plane, a, b) runs once outputs [a, b) of the plane (whole rows, ~512
//   outputs: still in L1) are stored.
// Rows take as many vectors as they need (a 28-wide row is two AVX-512 vectors, not four), and
// a row's last vector is stored whole when that stays inside the plane (it spills into the
// next rows, which are written after it).
template <class Arch, class Setup, class EpiOf, class RowsDone>
void dw_nchw_run(const ConvGeom& g, const DwState* st, const float* x, float* y, int threads, Setup setup, EpiOf epi_of,
                 RowsDone rows_done) {
  constexpr i64 Wd = fbatch<Arch>::size;
  const DwPlane pl = dw_plane<Arch>(g);
  const i64 HW = g.H * g.W, PQ = g.P * g.Q, C = g.C;
  const i64 P = g.P, Q = g.Q, H = g.H, sh = g.sh, rs = pl.rows_stride;
  const i64 taps = g.R * g.S;
  const i64* toff = st->tap_offset.data();
  // 3x3 with row stride and dilation 1 (MobileNet's stride 1): output rows in pairs
  // (dw3_pair), a last odd row alone.
  const bool pairs = g.R == 3 && g.S == 3 && g.dh == 1 && sh == 1;
  // 3x3 stride 2 with left padding 1 (MobileNet's stride 2): from x's rows (dw3s2_row); the
  // thread's buffer is then only the taps (dw_nchw_prepare).
  const bool s2 = dw_from_rows(g);
  // rows_done every `crows` rows: per whole plane it measured slower once the stride-2 input
  // plane had evicted the outputs from L1. Even when pairing, so a run ends on a pair's end.
  const i64 crows = pairs ? std::max<i64>(2, 512 / Q / 2 * 2) : std::max<i64>(1, 512 / Q);
  const auto work = [&](i64 b, i64 e, float* buf) {
    std::memset(buf, 0, static_cast<std::size_t>(st->plane_floats) * sizeof(float));
    float* wt = buf + st->plane_floats - round_up(taps, 16);  // this plane's taps
    for (i64 task = b; task < e; ++task) {
      const i64 n = task / C, c = task % C;
      const float* src = x + (n * C + c) * HW;
      if (!s2) dw_fill_rows<Arch>(g, pl, src, buf, 0, H);
      const float wb = setup(n, c, wt);
      const auto epi = epi_of(n, c);
      float* dst = y + (n * C + c) * PQ;
      // The next plane of x, a share of its lines per output row: requested while this plane
      // computes, it is in L1 / L2 when its copy (or at stride 2, its first row) is read (those
      // loads otherwise waited on memory: a stride-2 plane's copy was half of the kernel's time).
      const float* ahead = task + 1 < e ? src + HW : nullptr;
      const i64 lines = (HW + 15) / 16, per_row = (lines + P - 1) / P;
      for (i64 p = 0; p < P;) {
        const i64 np = pairs && p + 1 < P ? 2 : 1;
        if (ahead)
          for (i64 l = p * per_row; l < std::min(lines, (p + np) * per_row); ++l)
            __builtin_prefetch(ahead + l * 16, 0, 3);
        float* out = dst + p * Q;
        if (s2) {
          const float* rows[3];
          for (i64 r = 0; r < 3; ++r) {
            const i64 h = 2 * p + r - g.pt;
            rows[r] = h >= 0 && h < H ? src + h * g.W : nullptr;
          }
          dw3s2_row<Arch>(rows, g.W, wt, wb, out, Q, p * Q, PQ, epi);
        } else {
          const float* in_row = buf + p * sh * rs;
          for (i64 q0 = 0; q0 < Q; q0 += 4 * Wd) {
            const i64 valid = std::min(4 * Wd, Q - q0), pix = p * Q + q0;
            const bool whole = pix + 4 * Wd <= PQ;
            // The first row's last vector of a pair may spill into the second row only when that
            // row's only chunk is stored after it (in dw3_pair); the second row's spills into a
            // later pair's rows.
            const bool whole0 = whole && Q <= 4 * Wd, whole1 = pix + Q + 4 * Wd <= PQ;
            const auto chunk = [&](auto nvc) {
              constexpr int NV = decltype(nvc)::value;
              if (np == 2)
                dw3_pair<Arch, NV>(in_row + q0, rs, toff, wt, wb, out + q0, out + Q + q0, valid, whole0, whole1, epi,
                                   pix, pix + Q);
              else
                dw_chunk<Arch, NV>(in_row + q0, toff, wt, taps, wb, out + q0, valid, whole, epi, pix);
            };
            switch ((valid + Wd - 1) / Wd) {
              case 1: chunk(std::integral_constant<int, 1>{}); break;
              case 2: chunk(std::integral_constant<int, 2>{}); break;
              case 3: chunk(std::integral_constant<int, 3>{}); break;
              default: chunk(std::integral_constant<int, 4>{}); break;
            }
          }
        }
        p += np;
        if (p % crows == 0 || p == P) rows_done(n, c, dst, (p - (p % crows == 0 ? crows : p % crows)) * Q, p * Q);
      }
      // The padding stays zero for the next plane: only real columns are ever written.
    }
  };
  const i64 ntasks = g.N * C;
  const int t = std::min(team_size(threads), st->slots);
  parallel_tid(ntasks, t, 1, [&](int id, i64 b, i64 e) { work(b, e, st->planes.data + id * st->plane_floats); });
}

// ---- few input channels, NCHW ---------------------------------------------------------------
// A dense convolution (groups 1) of at most kSmallC input channels - the RGB stems - straight
// from NCHW to NCHW. The channels-in-lanes direct kernel needs x in NHWC and y back in NCHW (two
// transposes, ~20% of the 3-channel stem) and its broadcast of x feeds one FMA per output
// vector. Here each input channel is copied into a phase-split padded plane, as a depthwise
// plane is (dw_plane, dw_fill_rows), so every tap is a contiguous vector load along an output
// row; a register tile of KT output channels x NV <= 3 vectors of that row (AVX-512: 8 x 3,
// 24 zmm accumulators; see kSmallKT) sums the C * R * S taps, each tap's NV loads shared by the KT channels' weight
// broadcasts (4 x 4 measured slower on the 3-channel stem), and is stored once per row of y. The planes stay per
// thread (C of them, zeroed at prepare: only real columns are ever written), each thread copying just the input rows
// its output rows read.
inline constexpr i64 kSmallC = 4;
inline constexpr int kSmallKC = 8;  // output channels per register tile (x NV <= 3 vectors)

// Output channels rounded up to whole tiles: the packed weights' and biases' channel count.
inline i64 smallc_kpad(const ConvGeom& g) { return round_up(g.K, kSmallKC); }

// NHWC x: the input row being split by channel (C rows of Wr floats, which the phase split
// then copies like an NCHW row), per thread.
struct SmallcRows {
  i64 Wr, total;
};
inline SmallcRows smallc_rows(const ConvGeom& g) {
  SmallcRows r{};
  r.Wr = round_up(g.W, 16);
  r.total = g.C * r.Wr;
  return r;
}

// Prepare (NCHW x): the taps' offsets (dw_prepare_planes) and C zeroed planes per thread.
template <class Arch>
void smallc_prepare(const ConvGeom& g, int threads, DwState* st) {
  dw_prepare_planes<Arch>(g, threads, st, g.C);
  std::memset(st->planes.data, 0, static_cast<std::size_t>(st->slots * g.C * st->plane_floats) * sizeof(float));
}

// Weights (K, C, R, S) times sc[k] (null: 1) into blocks of KC output channels, [block][c][r][s]
// [KC] (the last block's missing channels 0); bias (null: 0) plus b into bias[K rounded up].
inline void smallc_pack(const ConvGeom& g, const float* w, const float* sc, const float* bias, float* wpk, float* bpk) {
  const i64 taps = g.R * g.S, nb = smallc_kpad(g) / kSmallKC;
  for (i64 b = 0; b < nb; ++b)
    for (i64 c = 0; c < g.C; ++c)
      for (i64 t = 0; t < taps; ++t)
        for (i64 u = 0; u < kSmallKC; ++u) {
          const i64 k = b * kSmallKC + u;
          float v = 0.f;
          if (k < g.K)
            v = w[k * g.ws[0] + c * g.ws[1] + (t / g.S) * g.ws[2] + (t % g.S) * g.ws[3]] * (sc ? sc[k] : 1.f);
          wpk[((b * g.C + c) * taps + t) * kSmallKC + u] = v;
        }
  // Two loops, not `bpk[k] = k < K && bias ? bias[k] : 0`: GCC vectorizes that into masked
  // loads from bias even when it is null - legal on hardware (masked-off lanes never fault) but
  // a fault under QEMU 7.2's AVX2 emulation, which the tests run on (CMakeLists.txt).
  for (i64 k = 0; k < nb * kSmallKC; ++k) bpk[k] = 0.f;
  if (bias)
    for (i64 k = 0; k < g.K; ++k) bpk[k] = bias[k];
}

// Output channels per register tile: the whole block of kSmallKC where 32 vector registers
// hold 8 x 3 accumulators, half a block on AVX2 and SSE2, whose 16 registers hold 4 x 3 (8 x 3
// there spilled every accumulator once per tap).
template <class Arch>
inline constexpr int kSmallKT = isa_of<Arch>() == Isa::avx512 ? kSmallKC : kSmallKC / 2;

// One tile: output channels k0 .. k0 + KT - 1 (rows of y at out[u * PQ]; only the first kv
// stored), NV vectors of the row starting at plane row `in` (the C input planes plane_floats
// apart), `valid` outputs of them. w: the packed block's weights from channel k0 on (kSmallKC
// per tap, the first KT read). epi(acc, pix, valid) maps the accumulators before the store
// (pix: the image pixel of lane 0).
// Out of line: inlined into smallc_run with the fused stage's epilogue, its FMA loop measured
// clearly slower (the 3-channel stem's tiles, perf).
template <class Arch, int KT, int NV, class Epi>
[[gnu::noinline]] void smallc_tile(const float* in, i64 plane_floats, i64 C, const i64* toff, i64 taps, const float* w,
                                   const float* bias, float* out, i64 PQ, i64 kv, i64 valid, const Epi& epi, i64 pix) {
  using B = fbatch<Arch>;
  constexpr i64 Wd = B::size;
  B acc[KT][NV];
  for (int u = 0; u < KT; ++u)
    for (int v = 0; v < NV; ++v) acc[u][v] = B(bias[u]);
  for (i64 c = 0; c < C; ++c) {
    const float* xc = in + c * plane_floats;
    for (i64 t = 0; t < taps; ++t) {
      const float* xt = xc + toff[t];
      B xv[NV];
      for (int v = 0; v < NV; ++v) xv[v] = B::load_unaligned(xt + v * Wd);
      for (int u = 0; u < KT; ++u) {
        const B wu(w[u]);
        for (int v = 0; v < NV; ++v) acc[u][v] = xsimd::fma(wu, xv[v], acc[u][v]);
      }
      w += kSmallKC;
    }
  }
  epi(acc, pix, valid);
  for (int u = 0; u < KT; ++u) {
    if (u >= kv) break;
    float* o = out + u * PQ;
    for (int v = 0; v < NV - 1; ++v) acc[u][v].store_unaligned(o + v * Wd);
    store_partial<Arch>(o + (NV - 1) * Wd, acc[u][NV - 1], valid - (NV - 1) * Wd);
  }
}

// One output row of all K channels: per block of KT channels (weights wpk and biases bpk from
// smallc_pack, rows of out ld floats apart), the tiles of up to 3 vectors along the Q outputs
// (see smallc_tile); epi_at(k0) gives the block's map, pix0 the image pixel of the row's first
// output.
template <class Arch, class EpiAt>
inline void smallc_row(const float* in_row, i64 plane_floats, i64 C, const i64* toff, i64 taps, const float* wpk,
                       const float* bpk, i64 K, float* out, i64 ld, i64 Q, i64 pix0, const EpiAt& epi_at) {
  constexpr i64 Wd = fbatch<Arch>::size;
  constexpr int KT = kSmallKT<Arch>;
  for (i64 k0 = 0; k0 < K; k0 += KT) {
    const i64 kv = std::min<i64>(KT, K - k0);
    const float* w = wpk + (k0 / kSmallKC) * C * taps * kSmallKC + k0 % kSmallKC;
    const auto epi = epi_at(k0);
    for (i64 q0 = 0; q0 < Q; q0 += 3 * Wd) {
      const i64 valid = std::min(3 * Wd, Q - q0);
      const auto tile = [&](auto nv) {
        smallc_tile<Arch, KT, decltype(nv)::value>(in_row + q0, plane_floats, C, toff, taps, w, bpk + k0,
                                                   out + k0 * ld + q0, ld, kv, valid, epi, pix0 + q0);
      };
      if (valid <= Wd)
        tile(std::integral_constant<int, 1>{});
      else if (valid <= 2 * Wd)
        tile(std::integral_constant<int, 2>{});
      else
        tile(std::integral_constant<int, 3>{});
    }
  }
}

// Input rows [h0, h1) of image n into the C phase-split planes of this thread: from NCHW
// planes, or from NHWC rows split by channel first (xrow: SmallcRows).
template <class Arch>
inline void smallc_fill(const ConvGeom& g, const DwPlane& pl, const float* x, i64 n, i64 h0, i64 h1, float* planes,
                        i64 pf, float* xrow) {
  const i64 C = g.C;
  if (!g.x_nhwc) {
    for (i64 c = 0; c < C; ++c) dw_fill_rows<Arch>(g, pl, x + (n * C + c) * g.H * g.W, planes + c * pf, h0, h1);
    return;
  }
  const i64 Wr = smallc_rows(g).Wr;
  for (i64 h = h0; h < h1; ++h) {
    transpose_2d<Arch>(x + (n * g.H + h) * g.W * C, C, xrow, Wr, g.W, C);
    for (i64 c = 0; c < C; ++c) dw_fill_row<Arch>(g, pl, xrow + c * Wr, planes + c * pf, h);
  }
}

// The output rows of all images (row index n * P + p) split over the threads; each thread
// fills its planes with the input rows output row p reads, just before row(n, p, planes, last,
// mark) runs it, so the rows it reads are in L1 (filling a whole share first left the ~700 KB
// of planes of a 224 x 224 stem in L2 for the tiles' loads). last: the thread's last row of
// image n; mark: the thread's own i64, -1 at the first row of each image it takes. NCHW x
// (smallc_run; the NHWC tile reads x in place).
template <class Arch, class Row>
void smallc_rows_run(const ConvGeom& g, const DwState* st, const float* x, int threads, const Row& row) {
  const DwPlane pl = dw_plane<Arch>(g);
  const i64 pf = st->plane_floats, P = g.P;
  const auto work = [&](i64 b, i64 e, float* planes) {
    i64 filled_n = -1, filled_hi = 0;  // the planes hold image filled_n's rows [.., filled_hi)
    i64 mark = -1;
    for (i64 r = b; r < e; ++r) {
      const i64 n = r / P, p = r % P;
      if (n != filled_n) mark = -1;
      // The input rows output row p reads, inside the image; a thread's rows come in order.
      const i64 h0 = std::max<i64>(0, p * g.sh - g.pt);
      const i64 h1 = std::min(g.H, p * g.sh - g.pt + (g.R - 1) * g.dh + 1);
      const i64 from = filled_n == n ? std::max(h0, filled_hi) : h0;
      if (from < h1) {
        smallc_fill<Arch>(g, pl, x, n, from, h1, planes, pf, nullptr);
        filled_n = n, filled_hi = h1;
      }
      row(n, p, planes, r + 1 == e || p + 1 == P, mark);
    }
  };
  const int t = std::min(team_size(threads), st->slots);
  parallel_tid(g.N * P, t, 1, [&](int id, i64 b, i64 e) { work(b, e, st->planes.data + id * g.C * pf); });
}

// The small-C convolution of NCHW x into NCHW y, output rows of all images split over the
// threads. wpk / bpk from smallc_pack. epi_of(n, k0) returns the map of image n's tiles at
// output channel k0 (see smallc_tile); rows_done(n, p0, p1) runs once output rows [p0, p1) of
// image n are stored in every channel - ~64 KB of y, still in L2 (per row, the simd stage's
// chain calls were a quarter of the 3-channel stem).
template <class Arch, class EpiOf, class RowsDone>
void smallc_run(const ConvGeom& g, const DwState* st, const float* x, const float* wpk, const float* bpk, float* y,
                int threads, EpiOf epi_of, RowsDone rows_done) {
  const DwPlane pl = dw_plane<Arch>(g);
  const i64 C = g.C, K = g.K, Q = g.Q, PQ = g.P * g.Q, taps = g.R * g.S;
  const i64 pf = st->plane_floats;
  const i64* toff = st->tap_offset.data();
  const i64 crows = std::max<i64>(1, 16384 / (Q * K));
  // pd (the thread's mark): the first row of image n not yet passed to rows_done.
  smallc_rows_run<Arch>(g, st, x, threads, [&](i64 n, i64 p, const float* planes, bool last, i64& pd) {
    if (pd < 0) pd = p;
    const float* in_row = planes + p * g.sh * pl.rows_stride;
    smallc_row<Arch>(in_row, pf, C, toff, taps, wpk, bpk, K, y + n * K * PQ + p * Q, PQ, Q, p * Q,
                     [&](i64 k0) { return epi_of(n, k0); });
    if (p + 1 - pd == crows || last) {
      rows_done(n, pd, p + 1);
      pd = p + 1;
    }
  });
}

// ---- few input channels, NHWC ------------------------------------------------------------------
// A tile of MR output pixels x NV vectors of output channels (channels in lanes, as the NHWC
// direct kernel), each tap's NV weight vectors shared by the MR pixels, each pixel's x value of
// each channel broadcast straight from x: a broadcast reads any address, so unlike the NCHW
// tile's vector loads it needs no phase-split copy of the input, and y is stored as it lies.
// MR x NV fills the accumulator registers (AVX-512 24: 12 x 2 for the 32 channels of
// MobileNet's stem). A tile whose windows reach into the padding or past the image reads a
// zero-padded copy of its window instead (the patch: the R rows it reads, x's layout). The
// phase-split planes this replaced (filled from rows split by channel) cost about a fifth of
// the call in the fill, the transposes and the row loop around them; a 4-pixel tile ends a row
// instead of a 12-pixel one mostly computing nothing.
// Weights packed [c][r][s][Kp] (Kp: K rounded up to the vector width, zeros past K), bias [Kp].
inline i64 smallc_nhwc_kpad(const ConvGeom& g, i64 width) { return round_up(g.K, width); }
inline void smallc_pack_nhwc(const ConvGeom& g, i64 Kp, const float* w, const float* sc, const float* bias, float* wpk,
                             float* bpk) {
  const i64 taps = g.R * g.S;
  for (i64 c = 0; c < g.C; ++c)
    for (i64 t = 0; t < taps; ++t)
      for (i64 k = 0; k < Kp; ++k)
        wpk[(c * taps + t) * Kp + k] =
            k < g.K ? w[k * g.ws[0] + c * g.ws[1] + (t / g.S) * g.ws[2] + (t % g.S) * g.ws[3]] * (sc ? sc[k] : 1.f)
                    : 0.f;
  for (i64 k = 0; k < Kp; ++k) bpk[k] = 0.f;  // two loops: see smallc_pack
  if (bias)
    for (i64 k = 0; k < g.K; ++k) bpk[k] = bias[k];
}

// Accumulator registers of the NHWC tile (MR = kSmallNhwcAcc / NV): 24 of AVX-512's 32, 12 of
// AVX2's 16, 8 of SSE2's 16 (no FMA there: each product needs a register too).
template <class Arch>
inline constexpr int kSmallNhwcAcc = isa_of<Arch>() == Isa::avx512 ? 24
                                     : isa_of<Arch>() == Isa::avx2 ? 12
                                                                   : 8;

// The patch of a tile of up to kSmallNhwcAcc pixels: R rows of PW pixels of C floats.
inline i64 smallc_patch_width(const ConvGeom& g, int max_mr) { return (max_mr - 1) * g.sw + (g.S - 1) * g.dw + 1; }

// Prepare: tap (r, s)'s offset in x from a window's corner ([0, taps)) and in the patch
// ([taps, 2 taps)), and a patch per thread (DwState::patch).
template <class Arch>
void smallc_nhwc_prepare(const ConvGeom& g, int threads, DwState* st) {
  const i64 pw = smallc_patch_width(g, kSmallNhwcAcc<Arch>);
  st->tap_offset.clear();
  for (int patch = 0; patch < 2; ++patch)
    for (i64 r = 0; r < g.R; ++r)
      for (i64 s = 0; s < g.S; ++s) st->tap_offset.push_back(((patch ? r * pw : r * g.dh * g.W) + s * g.dw) * g.C);
  st->slots = std::max(1, threads);
  st->patch_floats = round_up(g.R * pw * g.C, 16);
  st->patch.resize(static_cast<std::size_t>(st->slots * st->patch_floats));
}

// One NHWC tile: output pixels 0 .. MR - 1 of a window row whose pixel i's tap t of channel c
// is in[toff[t] + i * ps + c] (the first m pixels stored, the others computed and dropped),
// channels k0 .. k0 + NV W - 1 (those below K stored) at y (pixel 0's channel 0; pixels K
// floats apart).
template <class Arch, int MR, int NV, class Epi>
[[gnu::noinline]] void smallc_nhwc_tile(const float* in, i64 ps, const i64* toff, i64 C, i64 taps, const float* w,
                                        i64 Kp, const float* bias, float* y, i64 K, i64 k0, i64 m, const Epi& epi) {
  using B = fbatch<Arch>;
  constexpr i64 Wd = B::size;
  B acc[MR][NV];
#pragma GCC unroll 16
  for (int v = 0; v < NV; ++v) {
    const B b = B::load_unaligned(bias + k0 + v * Wd);
#pragma GCC unroll 16
    for (int i = 0; i < MR; ++i) acc[i][v] = b;
  }
  i64 c = 0;  // C and taps are at least 1
  do {
    const float* wc = w + c * taps * Kp + k0;
    i64 t = 0;
    do {
      const float* xt = in + toff[t] + c;
      B wv[NV];
#pragma GCC unroll 16
      for (int v = 0; v < NV; ++v) wv[v] = B::load_unaligned(wc + t * Kp + v * Wd);
#pragma GCC unroll 16
      for (int i = 0; i < MR; ++i) {
        const B xb(xt[i * ps]);
#pragma GCC unroll 16
        for (int v = 0; v < NV; ++v) acc[i][v] = xsimd::fma(xb, wv[v], acc[i][v]);
      }
    } while (++t < taps);
  } while (++c < C);
  epi(acc, 0, 0);
  const i64 kv = K - k0;  // channels of this block that exist
  // Pixel indices known at compile time, so the accumulators stay registers (indexed by a run
  // time i, the whole array lived on the stack).
#pragma GCC unroll 32
  for (int i = 0; i < MR; ++i) {
    if (i >= m) break;
    float* o = y + i * K + k0;
#pragma GCC unroll 16
    for (int v = 0; v < NV; ++v) {
      if ((v + 1) * Wd <= kv)
        acc[i][v].store_unaligned(o + v * Wd);
      else if (v * Wd < kv)
        store_partial<Arch>(o + v * Wd, acc[i][v], kv - v * Wd);
    }
  }
}

// The small-C convolution of NHWC x into NHWC y, output rows of all images split over the
// threads. st from smallc_nhwc_prepare; wpk / bpk from smallc_pack_nhwc; epi maps every tile's
// accumulators (elementwise: the fused stage's lone activation).
template <class Arch, class Epi>
void smallc_nhwc_run(const ConvGeom& g, const DwState* st, const float* x, const float* wpk, const float* bpk, float* y,
                     int threads, const Epi& epi) {
  constexpr i64 Wd = fbatch<Arch>::size;
  constexpr int ACC = kSmallNhwcAcc<Arch>;
  const i64 C = g.C, K = g.K, Q = g.Q, Kp = smallc_nhwc_kpad(g, Wd), nvec = Kp / Wd, taps = g.R * g.S;
  const i64 pw = smallc_patch_width(g, ACC), ps = g.sw * C;
  const i64* toff = st->tap_offset.data();
  const i64 rows_in = (g.R - 1) * g.dh, cols_in = (g.S - 1) * g.dw;  // a window's extent - 1
  const int t = std::min(team_size(threads), st->slots);
  parallel_tid(g.N * g.P, t, 1, [&](int id, i64 b, i64 e) {
    float* patch = st->patch.data + id * st->patch_floats;
    for (i64 r = b; r < e; ++r) {
      const i64 n = r / g.P, p = r % g.P, ih0 = p * g.sh - g.pt;
      const float* xn = x + n * g.H * g.W * C;
      float* yrow = y + r * Q * K;
      const bool rows_inside = ih0 >= 0 && ih0 + rows_in < g.H;
      // Tiles of MR pixels while they fill, then of MR / 3 (the rest of a row).
      const auto tiles = [&](auto mr_c, auto nv_c, i64 k0, i64 q_begin, i64 q_end) {
        constexpr int MR = decltype(mr_c)::value, NV = decltype(nv_c)::value;
        for (i64 q0 = q_begin; q0 < q_end; q0 += MR) {
          const i64 m = std::min<i64>(MR, q_end - q0), iw0 = q0 * g.sw - g.pl;
          // The tile's y lines towards L2 before its FMAs, as the direct kernel does
          // (prefetch_tile_outputs): in a model y is a cold arena buffer, and stalled stores
          // took the tile's gain back.
          if (k0 == 0)
            for (i64 o = 0; o < m * K; o += 16) prefetch_line<2>(yrow + q0 * K + o);
          float* yt = yrow + q0 * K;
          if (rows_inside && iw0 >= 0 && iw0 + (MR - 1) * g.sw + cols_in < g.W) {
            smallc_nhwc_tile<Arch, MR, NV>(xn + (ih0 * g.W + iw0) * C, ps, toff, C, taps, wpk, Kp, bpk, yt, K, k0, m,
                                           epi);
            continue;
          }
          // The patch: the window's R rows, (MR - 1) sw + cols_in + 1 pixels each, 0 outside x.
          const i64 used = (MR - 1) * g.sw + cols_in + 1;
          for (i64 rr = 0; rr < g.R; ++rr) {
            const i64 ih = ih0 + rr * g.dh;
            float* dst = patch + rr * pw * C;
            const bool row_in = ih >= 0 && ih < g.H;
            const i64 jlo = row_in ? std::clamp<i64>(-iw0, 0, used) : used;
            const i64 jhi = row_in ? std::clamp<i64>(g.W - iw0, jlo, used) : used;
            std::fill(dst, dst + jlo * C, 0.f);
            if (jhi > jlo) std::copy(xn + (ih * g.W + iw0 + jlo) * C, xn + (ih * g.W + iw0 + jhi) * C, dst + jlo * C);
            std::fill(dst + jhi * C, dst + used * C, 0.f);
          }
          smallc_nhwc_tile<Arch, MR, NV>(patch, ps, toff + taps, C, taps, wpk, Kp, bpk, yt, K, k0, m, epi);
        }
      };
      for (i64 k0 = 0; k0 < Kp; k0 += 4 * Wd) {
        const auto block = [&](auto nv) {
          constexpr int NV = decltype(nv)::value, MR = ACC / NV, MR3 = MR >= 3 ? MR / 3 : 1;
          const i64 full = Q / MR * MR;
          tiles(std::integral_constant<int, MR>{}, nv, k0, 0, full);
          tiles(std::integral_constant<int, MR3>{}, nv, k0, full, Q);
        };
        switch (std::min<i64>(4, nvec - k0 / Wd)) {
          case 1: block(std::integral_constant<int, 1>{}); break;
          case 2: block(std::integral_constant<int, 2>{}); break;
          case 3: block(std::integral_constant<int, 3>{}); break;
          default: block(std::integral_constant<int, 4>{}); break;
        }
      }
    }
  });
}

// ---- depthwise, NHWC -----------------------------------------------------------------------------
// Channels in vector lanes. Per output pixel the taps inside the image are found once; the
// channels then go in chunks of vectors, a partial last vector through small buffers (nothing
// past C is read); 3x3 windows inside the image keep their weights in registers. epi(acc, pix, c, cnt) maps
// each vector of channels c .. c + cnt - 1 of pixel pix before its store (the fused stage's
// chain; the identity for the simd stage, which runs row_done(pix0, y_row) once an output row's
// pixels, from pixel index pix0 on, are all stored). w: the taps packed [R][S][C]; bias may be null.

// The taps of a window that fall into the padding, [0, R) x [0, S) minus [r0, r1) x [s0, s1):
// f(r, s) for each. They read an input of 0 (naive/conv.cpp), so a border pixel adds 0 * w for
// each of them: nothing for finite weights, NaN for a NaN or Inf weight, as naive does.
template <class F>
inline void dw_padding_taps(i64 R, i64 S, i64 r0, i64 r1, i64 s0, i64 s1, F&& f) {
  if (r1 - r0 == R && s1 - s0 == S) return;
  for (i64 r = 0; r < R; ++r)
    for (i64 s = 0; s < S; ++s)
      if (r < r0 || r >= r1 || s < s0 || s >= s1) f(r, s);
}

// One vector of channels (c) of `npx` consecutive interior pixels of a 3x3 NHWC output row,
// undilated at stride SW: the 9 taps' weights in registers, U pixels per step, each input
// column of a step's three rows loaded once and fed to every (pixel, tap) pair that reads it
// (column j feeds pixel u's tap s where u * SW + s == j): at stride 1, 3 (U + 2) loads for 9 U
// FMAs. x points at the window corner of the first pixel, y at its output, both at channel c;
// xr is an input row's step, C a pixel's. Every size and pointer arrives by value and lives in
// a local: the vector stores (GCC's _mm256_storeu_ps is a may_alias store) would otherwise
// make the compiler reload each value reached through a lambda's by-reference captures after
// every store - as many integer instructions as FMAs in the loop before this one.
template <class Arch, int U, int SW, class Epi>
inline void dw3_interior_row(const float* x, i64 xr, i64 C, const float* w, i64 wr, const float* bias, float* y,
                             i64 npx, i64 pix0, i64 c, const Epi& epi) {
  using B = fbatch<Arch>;
  constexpr i64 W = B::size;
  B wv[9];
  for (int t = 0; t < 9; ++t) wv[t] = B::load_unaligned(w + (t / 3) * wr + (t % 3) * C);
  // The bias is loaded again for every step (the opaque pointer keeps it from being hoisted):
  // held in a register through the loop, it was one more than AVX2's 16 and cost spills.
  alignas(64) const float zeros[W] = {};
  const float* bias_at = bias ? bias : zeros;
  const auto step = [&](auto npx_c, i64 q) {
    constexpr int V = decltype(npx_c)::value, J = (V - 1) * SW + 3;
    const float* bp = bias_at;
    asm("" : "+r"(bp));
    const B bv = B::load_unaligned(bp);
    B acc[V];
    for (int u = 0; u < V; ++u) acc[u] = bv;
    const float* xq = x + q * SW * C;
    for (int r = 0; r < 3; ++r) {
      const float* xp = xq + r * xr;
#pragma GCC unroll 32
      for (int j = 0; j < J; ++j) {
        const B xv = B::load_unaligned(xp);
        xp += C;
        asm("" : "+r"(xp));  // stepped, not 3 (U + 2) precomputed pointers spilled to the stack
#pragma GCC unroll 3
        for (int s2 = 0; s2 < 3; ++s2)
          if ((j - s2) % SW == 0 && j - s2 >= 0 && (j - s2) / SW < V)
            acc[(j - s2) / SW] = xsimd::fma(xv, wv[r * 3 + s2], acc[(j - s2) / SW]);
      }
    }
    float* yq = y + q * C;
    for (int u = 0; u < V; ++u) epi(acc[u], pix0 + q + u, c, W).store_unaligned(yq + u * C);
  };
  i64 q = 0;
  for (; q + U <= npx; q += U) step(std::integral_constant<int, U>{}, q);
  for (; q + 2 <= npx; q += 2) step(std::integral_constant<int, 2>{}, q);
  for (; q < npx; ++q) step(std::integral_constant<int, 1>{}, q);
}

template <class Arch, int NV, class Epi>
inline void dw_nhwc_vectors(const float* x, i64 x0, const float* w, const float* bi, float* dst, const Epi& epi,
                            i64 pix, i64 c, i64 r0, i64 r1, i64 s0, i64 s1, i64 xr, i64 xs, i64 wr, i64 ws, i64 R,
                            i64 S) {
  using B = fbatch<Arch>;
  constexpr i64 W = B::size;
  B acc[NV];
  for (int v = 0; v < NV; ++v) acc[v] = bi ? B::load_unaligned(bi + v * W) : B(0.f);
  for (i64 r = r0; r < r1; ++r)
    for (i64 s = s0; s < s1; ++s) {
      const float* xt = x + (x0 + r * xr + s * xs);
      const float* wt = w + r * wr + s * ws;
      for (int v = 0; v < NV; ++v)
        acc[v] = xsimd::fma(B::load_unaligned(xt + v * W), B::load_unaligned(wt + v * W), acc[v]);
    }
  dw_padding_taps(R, S, r0, r1, s0, s1, [&](i64 r, i64 s) {
    const float* wt = w + r * wr + s * ws;
    for (int v = 0; v < NV; ++v) acc[v] = xsimd::fma(B(0.f), B::load_unaligned(wt + v * W), acc[v]);
  });
  for (int v = 0; v < NV; ++v) epi(acc[v], pix, c + v * W, W).store_unaligned(dst + v * W);
}

// The identity accumulator map.
struct DwNhwcNoEpi {
  template <class B>
  B operator()(B acc, i64, i64, i64) const {
    return acc;
  }
};

template <class Arch, class Epi, class RowDone>
void dw_nhwc_run(const ConvGeom& g, const float* x, const float* w, const float* bias, float* y, int threads,
                 const Epi& epi, RowDone row_done) {
  using B = fbatch<Arch>;
  constexpr i64 W = B::size;
  // Interior pixels per step of the 3x3 rows (below): 9 weight registers, kDwPix accumulators
  // and an input vector - on AVX2 all 16 registers, the bias reloaded per step
  // (dw3_interior_row).
  constexpr int kDwPix = isa_of<Arch>() == Isa::avx512 ? 8 : 6;
  const i64 C = g.C, R = g.R, S = g.S, H = g.H, Win = g.W, dh = g.dh, dw = g.dw, sw = g.sw;
  const i64 xr = dh * Win * C, xs = dw * C, wr = S * C, nvec = C / W;
  // 3x3 windows wholly inside the image: q in [qa, qb) of the rows whose window rows all are.
  const bool k3 = R == 3 && S == 3;
  const i64 qa = std::min(g.Q, (g.pl + sw - 1) / sw);
  const i64 last = Win - 1 - 2 * dw + g.pl;  // the largest q * sw whose window fits (< 0: none)
  const i64 qb = last < 0 ? qa : std::max(qa, std::min(g.Q, last / sw + 1));
  parallel_for(g.N * g.P, threads, 1, [&](i64 b, i64 e) {
    for (i64 row = b; row < e; ++row) {
      const i64 n = row / g.P, ih0 = (row % g.P) * g.sh - g.pt;
      // Window rows inside the image: r in [r0, r1).
      i64 r0 = 0, r1 = R;
      while (r0 < R && ih0 + r0 * dh < 0) ++r0;
      while (r1 > r0 && ih0 + (r1 - 1) * dh >= H) --r1;
      // The window corner's offset in x for output column q (may lie outside x).
      const auto corner = [&](i64 q) { return ((n * H + ih0) * Win + q * sw - g.pl) * C; };
      // The last, partial vector of channels of pixel q: through buffers, nothing past C read.
      const auto tail = [&](i64 q, i64 s0, i64 s1) {
        const i64 c = nvec * W, cnt = C - c, x0 = corner(q), pix = row * g.Q + q;
        alignas(64) float xa[W] = {}, wa[W] = {}, t[W];
        for (i64 l = 0; l < cnt; ++l) xa[l] = bias ? bias[c + l] : 0.f;
        B acc = B::load_aligned(xa);
        for (i64 r = r0; r < r1; ++r)
          for (i64 s = s0; s < s1; ++s) {
            const float* xt = x + (x0 + r * xr + s * xs + c);
            const float* wt = w + r * wr + s * C + c;
            for (i64 l = 0; l < cnt; ++l) xa[l] = xt[l], wa[l] = wt[l];
            acc = xsimd::fma(B::load_aligned(xa), B::load_aligned(wa), acc);
          }
        dw_padding_taps(R, S, r0, r1, s0, s1, [&](i64 r, i64 s) {
          const float* wt = w + r * wr + s * C + c;
          for (i64 l = 0; l < cnt; ++l) wa[l] = wt[l];
          acc = xsimd::fma(B(0.f), B::load_aligned(wa), acc);
        });
        epi(acc, pix, c, cnt).store_aligned(t);
        for (i64 l = 0; l < cnt; ++l) y[pix * C + c + l] = t[l];
      };
      // Any pixel: its in-image taps, the channels in even chunks of at most 10 vectors (each
      // tap's addresses computed once for all of them; 144 channels are one chunk of 9, not 8
      // and a latency-bound 1), then the partial vector.
      const auto pixel = [&](i64 q) {
        const i64 pix = row * g.Q + q, iw0 = q * sw - g.pl;
        i64 s0 = 0, s1 = S;
        while (s0 < S && iw0 + s0 * dw < 0) ++s0;
        while (s1 > s0 && iw0 + (s1 - 1) * dw >= Win) --s1;
        const i64 x0 = corner(q);
        float* dst = y + pix * C;
        i64 c = 0;
        const i64 nchunk = (nvec + 9) / 10;
        for (i64 k = 0; k < nchunk; ++k) {
          const i64 nv = nvec * (k + 1) / nchunk - nvec * k / nchunk;
          const float* bc = bias ? bias + c : nullptr;
          switch (nv) {
#define OPFUSE_DW_NHWC(NV)                                                                                      \
  case NV:                                                                                                      \
    dw_nhwc_vectors<Arch, NV>(x + c, x0, w + c, bc, dst + c, epi, pix, c, r0, r1, s0, s1, xr, xs, wr, C, R, S); \
    break;
            OPFUSE_DW_NHWC(1)
            OPFUSE_DW_NHWC(2)
            OPFUSE_DW_NHWC(3)
            OPFUSE_DW_NHWC(4)
            OPFUSE_DW_NHWC(5)
            OPFUSE_DW_NHWC(6)
            OPFUSE_DW_NHWC(7)
            OPFUSE_DW_NHWC(8)
            OPFUSE_DW_NHWC(9)
            default: OPFUSE_DW_NHWC(10)
#undef OPFUSE_DW_NHWC
          }
          c += nv * W;
        }
        if (c < C) tail(q, s0, s1);
      };
      if (!k3 || r0 != 0 || r1 != 3 || qa >= qb) {
        for (i64 q = 0; q < g.Q; ++q) pixel(q);
        row_done(row * g.Q, y + row * g.Q * C);
        continue;
      }
      // A 3x3 row wholly inside the image vertically: the edge pixels as above; the interior
      // ones a vector of channels at a time with its 9 taps' weights held in registers, kDwPix
      // pixels per step: undilated at stride 1 or 2 in dw3_interior_row, else (below) with one
      // load per FMA.
      for (i64 q = 0; q < qa; ++q) pixel(q);
      for (i64 cv = 0; cv < nvec; ++cv) {
        const i64 c = cv * W;
        if (dw == 1 && (sw == 1 || sw == 2)) {
          const float* xa = x + (corner(qa) + c);
          float* ya = y + ((row * g.Q + qa) * C + c);
          const float* bc = bias ? bias + c : nullptr;
          if (sw == 1)
            dw3_interior_row<Arch, kDwPix, 1>(xa, xr, C, w + c, wr, bc, ya, qb - qa, row * g.Q + qa, c, epi);
          else
            dw3_interior_row<Arch, kDwPix, 2>(xa, xr, C, w + c, wr, bc, ya, qb - qa, row * g.Q + qa, c, epi);
          continue;
        }
        B wv[9];
        for (int t = 0; t < 9; ++t) wv[t] = B::load_unaligned(w + (t / 3) * wr + (t % 3) * C + c);
        const B bv = bias ? B::load_unaligned(bias + c) : B(0.f);
        i64 q = qa;
        const auto run = [&](auto npx) {
          constexpr int U = decltype(npx)::value;
          B acc[U];
          for (int u = 0; u < U; ++u) acc[u] = bv;
          for (int t = 0; t < 9; ++t) {
            const i64 off = (t / 3) * xr + (t % 3) * xs + c;
            for (int u = 0; u < U; ++u)
              acc[u] = xsimd::fma(B::load_unaligned(x + (corner(q + u) + off)), wv[t], acc[u]);
          }
          for (int u = 0; u < U; ++u) {
            const i64 pix = row * g.Q + q + u;
            epi(acc[u], pix, c, W).store_unaligned(y + pix * C + c);
          }
          q += U;
        };
        while (q + kDwPix <= qb) run(std::integral_constant<int, kDwPix>{});
        while (q + 2 <= qb) run(std::integral_constant<int, 2>{});
        while (q < qb) run(std::integral_constant<int, 1>{});
      }
      if (nvec * W < C)
        for (i64 q = qa; q < qb; ++q) tail(q, 0, 3);
      for (i64 q = qb; q < g.Q; ++q) pixel(q);
      row_done(row * g.Q, y + row * g.Q * C);
    }
  });
}

struct DirectState {
  bool packed = false;    // weights packed at prepare
  bool finite = false;    // ... and all finite (DirectPlan::skip_padding)
  AlignedFloats weights;  // [G][nkb][R][S][Cg][KB]
  AlignedFloats ytiles;   // NCHW output: one NHWC row block per thread
  i64 ytile_floats = 0;
  int slots = 1;
};

template <class Arch>
struct DirectPlan {
  ConvGeom g;
  i64 KB, nkb, wfloats, Hp, Wp;
  i64 RB;                     // output rows per task
  bool copy_x, ybuf;          // x goes through the padded NHWC buffer; y through per-thread NHWC row blocks
  bool skip_padding = false;  // tiles skip the taps that read only padding (finite weights only)
};

// How direct_run splits a call over t threads: output rows, or all rows on every thread and a
// share of the `blocks` channel blocks each. Rows make every thread stream all the weights, and
// few rows may not divide evenly (7 rows on 2 threads: 4 + 3, 1.75x at best); channel blocks
// split the weights between the threads. So channel blocks when the rows do not divide, or
// when the weights (`weight_bytes`) exceed half of L2 (3x3 256 -> 256: 2.4 MB).
inline bool direct_split_channels(i64 rows, i64 blocks, i64 t, i64 weight_bytes) {
  const bool uneven = rows % t != 0 && rows < 4 * t;
  return t > 1 && blocks >= 2 * t && (uneven || 2 * weight_bytes > static_cast<i64>(cache_sizes().l2));
}

// Whether direct_block runs pointwise_run: 1x1, stride 1, x read in place (NHWC, unpadded), NHWC
// y, one group and one block of input channels.
template <class Arch>
bool direct_pointwise(const DirectPlan<Arch>& pl) {
  const ConvGeom& g = pl.g;
  return g.R == 1 && g.S == 1 && g.sh == 1 && g.sw == 1 && !pl.copy_x && !pl.ybuf && g.G == 1 &&
         direct_cblock(g, pl.KB) >= g.Cg;
}

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
  // A task is a block of output rows, whose partial sums stay in L2 between channel blocks:
  // ~256 KB, in y itself or (NCHW output) in the thread's NHWC buffer, which the transpose and
  // the chain then read from L2. Every row block streams all the weights once: with 64 KB
  // blocks ResNet-50's layer4 (7 x 7 pixels, 9.4 MB of 3 x 3 weights) read them twice per call,
  // and the NCHW 3x3 256 -> 256 @14 (2.4 MB) four times.
  const i64 tile_floats = 65536;
  pl.RB = std::clamp<i64>(tile_floats / std::max<i64>(1, g.Q * g.K), 1, g.P);
  // A pointwise block has no partial sums (all input channels in one block): its y is stored
  // once, so only x must stay in L2 while the block's channel blocks run over it, and every row
  // block streams all the weights again. Blocks as large as ~256 KB of x: ResNet-50's expanding
  // 1x1 at 14 x 14 (1 MB of weights, beyond L2) read its weights 4 times per call with 64 K
  // floats of y per block, once this way.
  if (direct_pointwise(pl)) pl.RB = std::clamp<i64>(std::max(pl.RB, tile_floats / std::max<i64>(1, g.Q * g.C)), 1, g.P);
  return pl;
}

// Thread id of nt's share of a direct convolution (direct_split_channels): output rows [b, e)
// and channel blocks [fb0, fb1) of the G * nkb, group-major.
struct DirectShare {
  i64 b, e, fb0, fb1;
};
template <class Arch>
DirectShare direct_share(const DirectPlan<Arch>& pl, i64 id, i64 nt) {
  const i64 rows = pl.g.N * pl.g.P, blocks = pl.g.G * pl.nkb;
  if (direct_split_channels(rows, blocks, nt, 4 * pl.wfloats))
    return {0, rows, blocks * id / nt, blocks * (id + 1) / nt};
  return {rows * id / nt, rows * (id + 1) / nt, 0, blocks};
}

// The output channels [lo, hi) of channel blocks fb0 .. fb1 - 1 (KB each, a group's last cut at Kg).
struct ChannelRange {
  i64 lo, hi;
};
template <class Arch>
ChannelRange direct_block_channels(const DirectPlan<Arch>& pl, i64 fb0, i64 fb1) {
  const auto k0 = [&](i64 fb) { return (fb / pl.nkb) * pl.g.Kg + (fb % pl.nkb) * pl.KB; };
  return {k0(fb0), k0(fb1 - 1) + std::min(pl.KB, pl.g.Kg - ((fb1 - 1) % pl.nkb) * pl.KB)};
}

}  // namespace OPFUSE_SIMD_NS
}  // namespace opfuse::simd
