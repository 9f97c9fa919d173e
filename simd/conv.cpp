// simd/conv.cpp - 2-D convolution, vectorized and register-blocked.
//
// naive: the seven-loop nest of naive/conv.cpp, one output element at a time, every tensor read
//        through its logical strides; then one full pass over y per post-op.
// simd:  four kernels, chosen best-first by the registry (simd/rows/conv.inc):
//   * nhwc_direct - the general kernel (any R, S, stride, dilation, asymmetric pads, groups).
//        It works channels-last: x is copied once per call into a zero-padded NHWC buffer (the
//        NCHW -> NHWC transpose and the padding in one pass, so the inner loop has no bounds
//        checks), the weights are packed once at prepare into [group][K block][R][S][C][KB]
//        with KB = NV vectors of output channels, and a register tile of 6 output pixels x NV
//        vectors (NV = 4 on AVX-512: 24 zmm accumulators) accumulates over (r, s, c) with one
//        broadcast of x and NV weight loads per 6*NV FMAs: a GEMM micro-kernel in disguise,
//        whose "A panel" is six pointers into the padded image. The padding costs no FMAs
//        where it can be skipped: a tile computes only the window taps that reach real input
//        for one of its pixels, and the pixels are grouped so that border pixels share tiles
//        (simd/conv_kernel.hpp, DirectTiler): at 3x3 pad 1 a 14 x 14 output computes ~91% of
//        the taps of whole windows, a 7 x 7 one ~84%. For NCHW outputs y is produced in an
//        NHWC workspace and transposed back per block; both transposes are inside the timed
//        call.
//   * 1x1 - a 1x1 stride-1 convolution is a GEMM. In NCHW, y[n] (K x HW) = W (K x C) * x[n]
//        (C x HW) needs no layout change at all: W is packed into 8-row panels, x into per-thread
//        [C][48-pixel] panels (L2-resident, reused by every K panel), and an 8 x 3-vector tile
//        broadcasts W. In NHWC it is the direct kernel with R = S = 1 reading x in place.
//   * dw - depthwise (groups == C == K) has no reduction over channels, so it is memory-bound
//        and must not transpose: in NCHW each (n, c) plane is copied into a per-thread padded
//        buffer split by stride phase (column j of phase f holds padded column j*stride + f), so
//        every tap of every stride is a contiguous vector load along the output width; in NHWC
//        it vectorizes along channels. The copy is vector loads (stride 1) or a register
//        deinterleave (stride 2), a row takes only the vectors it needs, and the chain runs
//        over ~512 outputs at a time with the rows merged; in A/B pairs these made dw 3x3 144
//        @56 +bn+relu6 t1 clearly faster at stride 1 and more so at stride 2 (current figures:
//        reports/REPORT.md, conv2d).
//   * nchw_smallc - few input channels (C <= 4: the RGB stems), groups 1, NCHW in and out. The
//        direct kernel's broadcast of x feeds one FMA per output vector when C is 3, and its two
//        transposes were a large share of the 3-channel stem. Here the depthwise kernel's
//        phase-split planes hold the C input channels (per thread, only the input rows the
//        thread's output rows read), and an 8-output-channel x 1-3-vector register tile along
//        the output row sums the C*R*S taps, each tap's vector loads shared by 8 weight
//        broadcasts (simd/conv_kernel.hpp, smallc_run). The chain runs over ~64 KB of finished
//        rows at a time.
//        It made MobileNet's 3x3/2 3->32 @224 +bn+relu6 stem faster than the direct kernel; how
//        it compares with oneDNN and with the fused stage's version (chain on the registers) is
//        in reports/REPORT.md (conv2d).
//   Bias initializes the accumulators. The post-op chain (batchnorm per channel, binary with a
//   broadcast operand, activation) runs as one vectorized pass per output tile right after the
//   tile is stored, while it is still in L1/L2 (all steps per vector, no extra pass over y).
// fused: keeps the accumulator tile in registers through bias, batchnorm, residual add and
//        activation, storing y once (the chain code below is the per-vector epilogue it reuses).
//
// Threads: nhwc_direct splits every per-call pass - the weight packing (when w is not bound at
// prepare), the padded NHWC copy and the output rows with their NCHW transpose - over the team;
// the rows of all images are split evenly to one row per thread (then into blocks of <= RB rows).
// On 3x3 64->64 @56 t2, packing serially before the parallel passes took far longer than its
// own t1 time and was the main reason t2/t1 fell short of 2.
//
// Measured: each kernel's cases (3x3 64->64 @56, 1x1 256->64 +bn+add+relu, 7x7/2 stem, dw 3x3
// 144, ...) against naive, oneDNN and Eigen at 1 and 2 threads are in reports/REPORT.md
// (conv2d; reports/avx2/ for AVX2), or run `opfuse-bench --op conv2d`.
//   In nhwc_direct nearly all of the 3x3 t1 time is the micro-kernel (perf), which runs close
//   to the FMA peak in its steady state; the two layout transposes are a small share since they
//   go through registers (simd/transpose.hpp). As scalar strided copies they were a sizeable
//   share of the call, and moving to register transposes made 3x3 64->64 @56 measurably faster
//   (A/B pairs).
#include <algorithm>
#include <array>
#include <cassert>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <type_traits>
#include <vector>

#include "simd/activation.hpp"
#include "simd/common.hpp"
#include "simd/conv_kernel.hpp"
#include "simd/transpose.hpp"

namespace opfuse::simd {
inline namespace OPFUSE_SIMD_NS {

// ---- the post-op chain, applied to a contiguous run of y ----------------------------------------

// Per execute: pointers into the operands and a per-channel batchnorm multiplier in workspace.
struct ChainStep {
  PostOp::Kind kind;
  BinaryKind binary;
  Activation act;
  const float* mean = nullptr;   // batchnorm
  const float* mult = nullptr;   // batchnorm: scale / sqrt(var + eps), in workspace
  const float* shift = nullptr;  // batchnorm: bias
  const float* other = nullptr;  // binary operand
  std::array<i64, 4> os{};       // binary operand strides along the output's logical (n, k, p, q)
};
struct Chain {
  int n = 0;
  ChainStep steps[kConvMaxPostOps];
};

// Floats of workspace the chain needs: one multiplier vector per batchnorm.
i64 chain_workspace(const Conv2dParams& p, i64 K) {
  i64 f = 0;
  for (const PostOp& op : p.post_ops)
    if (op.kind == PostOp::Kind::batchnorm) f += round_up(K, 16);
  return f;
}

// Builds the chain from the post-op operands (after x, w, [bias]). `ws` holds chain_workspace().
Chain make_chain(const OpDesc& d, const Tensor* const* in, float* ws) {
  const auto& p = d.p<Conv2dParams>();
  const i64 K = d.inputs[1].shape[0];
  Chain c;
  std::size_t idx = p.has_bias ? 3 : 2;
  for (const PostOp& op : p.post_ops) {
    ChainStep& s = c.steps[c.n++];
    s.kind = op.kind;
    s.binary = op.binary;
    s.act = op.act;
    if (op.kind == PostOp::Kind::batchnorm) {
      const float* scale = in[idx]->data();
      const float* var = in[idx + 3]->data();
      float* mult = ws;
      ws += round_up(K, 16);
      for (i64 k = 0; k < K; ++k) mult[k] = scale[k] * (1.f / std::sqrt(var[k] + op.epsilon));
      s.shift = in[idx + 1]->data();
      s.mean = in[idx + 2]->data();
      s.mult = mult;
    } else if (op.kind == PostOp::Kind::binary) {
      // NumPy broadcasting: the operand's dims align with the output's trailing dims.
      const TensorDesc& od = d.inputs[idx];
      const auto dense = dense_strides(od.shape, od.layout);
      const int shift = 4 - od.shape.rank;
      for (int dd = 0; dd < 4; ++dd) {
        const int k = dd - shift;
        if (k < 0) continue;
        const auto u = static_cast<std::size_t>(k);
        s.os[static_cast<std::size_t>(dd)] = od.shape.dims[u] == 1 ? 0 : dense[u];
      }
      s.other = in[idx]->data();
    }
    idx += static_cast<std::size_t>(post_op_operands(op));
  }
  return c;
}

// Applies the chain to y[0, len): the outputs at logical (n, k + e*kstep, p, q + e*qstep) for
// element e, i.e. kstep = 1, qstep = 0 along the channels of an NHWC pixel and kstep = 0,
// qstep = 1 along an NCHW row. Callers pass a run that was just stored (a tile row, a pixel's
// channels), so it is in L1: each step is one tight loop over it with its kind switched once
// outside the loop. The tail is one partial vector (operands gathered into a zero-filled
// buffer), so it runs the very same formulas.
//
// With npix > 1 (along_k only) the run is npix consecutive NHWC pixels q, q + 1, ... of output
// row p, len channels each, stored back to back: every step's kind is switched once for all of
// them (an activation runs over the whole npix * len floats as one run).
template <class Arch>
void chain_run(const Chain& ch, float* y, i64 len, i64 n, i64 k, i64 p, i64 q, bool along_k, i64 npix = 1) {
  using B = fbatch<Arch>;
  constexpr i64 Wd = B::size;
  const i64 kstep = along_k ? 1 : 0, qstep = along_k ? 0 : 1;
  // cnt elements from src with stride step (cnt == Wd and step 1: one load; step 0: splat).
  const auto load = [](const float* src, i64 step, i64 cnt) {
    if (step == 0) return B(src[0]);
    if (cnt == Wd && step == 1) return B::load_unaligned(src);
    alignas(64) float tmp[Wd] = {};
    for (i64 l = 0; l < cnt; ++l) tmp[l] = src[l * step];
    return B::load_aligned(tmp);
  };
  // Runs f(v, e, cnt) over yy[0, m) in full vectors, then one partial vector.
  const auto each = [&](float* yy, i64 m, auto&& f) {
    i64 e = 0;
    for (; e + Wd <= m; e += Wd) f(B::load_unaligned(yy + e), e, Wd).store_unaligned(yy + e);
    if (e < m) {
      const i64 cnt = m - e;
      alignas(64) float tmp[Wd] = {};
      std::memcpy(tmp, yy + e, static_cast<std::size_t>(cnt) * sizeof(float));
      f(B::load_aligned(tmp), e, cnt).store_aligned(tmp);
      std::memcpy(yy + e, tmp, static_cast<std::size_t>(cnt) * sizeof(float));
    }
  };
  for (int i = 0; i < ch.n; ++i) {
    const ChainStep& s = ch.steps[i];
    switch (s.kind) {
      case PostOp::Kind::batchnorm:
        for (i64 u = 0; u < npix; ++u)
          each(y + u * len, len, [&](B v, i64 e, i64 cnt) {
            const i64 kk = k + e * kstep;
            return xsimd::fma(v - load(s.mean + kk, kstep, cnt), load(s.mult + kk, kstep, cnt),
                              load(s.shift + kk, kstep, cnt));
          });
        break;
      case PostOp::Kind::binary: {
        const i64 step = kstep * s.os[1] + qstep * s.os[3];
        for (i64 u = 0; u < npix; ++u) {
          const float* base = s.other + n * s.os[0] + k * s.os[1] + p * s.os[2] + (q + u) * s.os[3];
          each(y + u * len, len,
               [&](B v, i64 e, i64 cnt) { return binary_op<Arch>(s.binary, v, load(base + e * step, step, cnt)); });
        }
        break;
      }
      case PostOp::Kind::activation:  // elementwise: the npix runs as one
        with_act_kind(s.act.kind, [&](auto kind) {
          each(y, npix * len, [&](B v, i64, i64) { return activate_k<decltype(kind)::value, Arch>(s.act, v); });
        });
        break;
      case PostOp::Kind::pool: break;  // never here: these kernels decline a pool post-op (conv_supports.cpp)
    }
  }
}

// Chain over NCHW pixels [a, b) of channel k of image n (y points at that channel's plane).
// Rows run as one: when no binary operand varies along the rows other than as a dense (p, q)
// plane (row stride Q * column stride, or broadcast over both), pixel a + e of the range is
// element e of one run, so the chain has one tail per range instead of one per row (a 56-wide
// row is 3.5 AVX-512 vectors).
template <class Arch>
void chain_nchw_range(const Chain& ch, float* plane, i64 a, i64 b, i64 n, i64 k, i64 Q) {
  bool merged = true;
  for (int i = 0; i < ch.n; ++i)
    if (ch.steps[i].kind == PostOp::Kind::binary && ch.steps[i].os[2] != Q * ch.steps[i].os[3]) merged = false;
  if (merged && a < b) return chain_run<Arch>(ch, plane + a, b - a, n, k, a / Q, a % Q, false);
  while (a < b) {
    const i64 p = a / Q, q = a % Q;
    const i64 e = std::min(b, (p + 1) * Q);
    chain_run<Arch>(ch, plane + a, e - a, n, k, p, q, false);
    a = e;
  }
}

// Workspace: [weights unless packed at prepare][bias G*nkb*KB][padded x][chain].
template <class Arch>
std::size_t direct_workspace(const OpDesc& d, float* base, float** wsw, float** wsb, float** wsx, float** wsc) {
  const DirectPlan<Arch> pl = direct_plan<Arch>(d);
  const ConvGeom& g = pl.g;
  Carver cv{base};
  *wsw = cv.take(pl.wfloats);
  *wsb = cv.take(g.G * pl.nkb * pl.KB);
  *wsx = pl.copy_x ? cv.take(g.N * pl.Hp * pl.Wp * g.C) : nullptr;
  *wsc = cv.take(chain_workspace(d.p<Conv2dParams>(), g.K));
  return cv.used;
}

// One task: output rows [p0, p1) of image n, all groups and channels. yt is where pixel
// (p0, 0) of the block goes in NHWC order: y itself (NHWC output) or the thread's row-block
// buffer (NCHW output), which is then transposed into y with the chain applied per row.
template <class Arch, int NV>
void direct_block(const DirectPlan<Arch>& pl, const float* xp, const float* wp, const float* bias, float* yt, float* y,
                  const Chain& ch, i64 n, i64 p0, i64 p1, i64 fb0, i64 fb1) {
  constexpr int MR = DirectTile<Arch>::MR;
  const ConvGeom& g = pl.g;
  const i64 C = g.C, K = g.K;
  const i64 a = p0 * g.Q, npix = (p1 - p0) * g.Q;
  const DirectTiler<MR> tiler(g, p0, p1, pl.skip_padding);
  const i64 ntiles = tiler.count();
  const i64 row_step = g.dh * pl.Wp * C, col_step = g.dw * C;
  const i64 wblock = g.R * g.S * g.Cg * pl.KB;
  const float* xn = xp + n * pl.Hp * pl.Wp * C;
  // Channel blocks fb0 .. fb1 - 1 of the G * nkb (group-major): output channels [k_lo, k_hi).
  const auto [k_lo, k_hi] = direct_block_channels(pl, fb0, fb1);
  const bool pointwise = direct_pointwise(pl) && ch.n == 0;  // the chain runs on stored tiles (below)
  for (i64 fb = fb0; fb < fb1; ++fb) {
    const i64 gi = fb / pl.nkb, kb = fb % pl.nkb;
    const float* wk = wp + fb * wblock;
    const float* bk = bias + fb * pl.KB;
    const i64 k0 = gi * g.Kg + kb * pl.KB;
    const i64 valid = std::min(pl.KB, g.Kg - kb * pl.KB);
    const i64 CB = direct_cblock(g, pl.KB);
    if (pointwise) {
      pointwise_run<Arch, MR, NV>(
          xn + a * C, C, C, wk, bk, yt + k0, K, a, npix, valid,
          [&](float* const* ys, const i64*, int m) { prefetch_tile_outputs(ys, m, valid); },
          [](const i64*) { return NoTileEpi{}; });
      continue;
    }
    for (i64 c0 = 0; c0 < g.Cg; c0 += CB) {
      const i64 cn = std::min(CB, g.Cg - c0);
      const bool first = c0 == 0, last = c0 + cn == g.Cg;
      const float* wc = wk + c0 * g.R * g.S * pl.KB;
      const DirectPrefetch pf(wc + cn * g.R * g.S * pl.KB, wp + pl.wfloats, CB * g.R * g.S * pl.KB, ntiles);
      i64 t = 0;
      tiler.each([&](const DirectTileSpec<MR>& tile) {
        const float* xs[MR];
        float* ys[MR];
        for (int i = 0; i < MR; ++i) {
          xs[i] = xn + (tile.p[i] * g.sh * pl.Wp + tile.q[i] * g.sw) * C + gi * g.Cg + c0;
          ys[i] = i < tile.m ? yt + ((tile.p[i] - p0) * g.Q + tile.q[i]) * K + k0 : nullptr;
        }
        if (last && !pl.ybuf) prefetch_tile_outputs(ys, tile.m, valid);
        direct_tile_m<Arch, MR, NV>(tile.m, xs, wc, g.S, cn, tile.win, row_step, col_step, bk, ys, valid, first,
                                    NoTileEpi{}, pf.at(t), pf.count(t));
        ++t;
        if (last && !pl.ybuf && ch.n > 0) {  // NHWC output: the chain on the tile just stored
          for (int i = 0; i < tile.m; ++i) chain_run<Arch>(ch, ys[i], valid, n, k0, tile.p[i], tile.q[i], true);
        }
      });
    }
  }
  if (!pl.ybuf) return;
  // NHWC block (npix x K) -> NCHW rows of y (K x npix, planes PQ apart) through register
  // transposes; then the chain on the block's rows of y (RB*Q*K floats, still in L2).
  const i64 PQ = g.P * g.Q;
  transpose_2d<Arch>(yt + k_lo, K, y + (n * K + k_lo) * PQ + a, PQ, npix, k_hi - k_lo);
  if (ch.n > 0)
    for (i64 k = k_lo; k < k_hi; ++k) chain_nchw_range<Arch>(ch, y + (n * K + k) * PQ, p0 * g.Q, p1 * g.Q, n, k, g.Q);
}

template <class Arch, int NV>
void direct_run(const DirectPlan<Arch>& pl, const float* xp, const float* wp, const float* bias, float* y,
                const Chain& ch, const DirectState* st, int threads) {
  const ConvGeom& g = pl.g;
  const i64 rows = g.N * g.P;  // output rows of all images, split evenly (to one row) over threads
  // Rows [b, e) in blocks of at most RB rows that do not cross an image, equal-sized within
  // each image's part of the range.
  const auto work = [&](i64 b, i64 e, float* ytile, i64 fb0, i64 fb1) {
    while (b < e) {
      const i64 n = b / g.P, p0 = b % g.P, pe = std::min(g.P, p0 + (e - b));
      const i64 nblk = (pe - p0 + pl.RB - 1) / pl.RB;
      for (i64 j = 0; j < nblk; ++j) {
        const i64 q0 = p0 + (pe - p0) * j / nblk, q1 = p0 + (pe - p0) * (j + 1) / nblk;
        float* yt = pl.ybuf ? ytile : y + (n * g.P + q0) * g.Q * g.K;
        direct_block<Arch, NV>(pl, xp, wp, bias, yt, y, ch, n, q0, q1, fb0, fb1);
      }
      b += pe - p0;
    }
  };
  const int t =
      static_cast<int>(std::min<i64>(pl.ybuf ? std::min(team_size(threads), st->slots) : team_size(threads), rows));
  float* tiles = pl.ybuf ? st->ytiles.data : nullptr;
  if (t <= 1) {
    work(0, rows, tiles, 0, g.G * pl.nkb);
    return;
  }
#pragma omp parallel num_threads(t)
  {
    const ::opfuse::detail::DenormalGuard denormals;  // MXCSR is per thread (src/denormal.hpp)
    const i64 nt = omp_get_num_threads(), id = omp_get_thread_num();
    const DirectShare s = direct_share(pl, id, nt);
    if (s.b < s.e) work(s.b, s.e, tiles ? tiles + id * st->ytile_floats : nullptr, s.fb0, s.fb1);
  }
}

template <class Arch>
void direct_execute(const KernelArgs& args, const DirectState* st) {
  const OpDesc& d = *args.desc;
  const auto& p = d.p<Conv2dParams>();
  DirectPlan<Arch> pl = direct_plan<Arch>(d);
  const ConvGeom& g = pl.g;
  float *wsw, *wsb, *wsx, *wsc;
  direct_workspace<Arch>(d, args.workspace, &wsw, &wsb, &wsx, &wsc);
  const int threads = args.threads;

  const float* wp = wsw;
  if (st->packed) {
    wp = st->weights.data;
    pl.skip_padding = st->finite;
  } else {
    pl.skip_padding = pack_direct_weights<Arch>(g, args.in[1]->data(), pl.KB, nullptr, wsw, threads);
  }
  const float* bias = p.has_bias ? args.in[2]->data() : nullptr;
  for (i64 gi = 0; gi < g.G; ++gi)
    for (i64 l = 0; l < pl.nkb * pl.KB; ++l)
      wsb[gi * pl.nkb * pl.KB + l] = bias && l < g.Kg ? bias[gi * g.Kg + l] : 0.f;
  const Chain ch = make_chain(d, args.in, wsc);

  const float* xp = args.in[0]->data();
  if (pl.copy_x) {
    pad_to_nhwc<Arch>(g, xp, wsx, threads);
    xp = wsx;
  }
  float* y = args.out[0]->mutable_data();
  switch (DirectTile<Arch>::nv(g.Kg)) {
    case 1: direct_run<Arch, 1>(pl, xp, wp, wsb, y, ch, st, threads); break;
    case 2: direct_run<Arch, 2>(pl, xp, wp, wsb, y, ch, st, threads); break;
    default:
      if constexpr (std::is_same_v<Arch, avx512>) direct_run<Arch, 4>(pl, xp, wp, wsb, y, ch, st, threads);
      break;
  }
}

// ---- 1x1 as GEMM in NCHW: y[n] (K x HW) = W (K x C) * x[n] (C x HW) -----------------------------

template <class Arch>
struct GemmTile;
template <>
struct GemmTile<avx512> {
  static constexpr int MR = 8, NV = 3;  // 8 output channels x 48 pixels: 24 zmm accumulators
};
template <>
struct GemmTile<avx2> {
  static constexpr int MR = 6, NV = 2;  // 6 x 16: 12 ymm accumulators
};
template <>
struct GemmTile<sse2> {
  static constexpr int MR = 6, NV = 2;  // 6 x 8
};

// W (K, C, 1, 1) -> [K/MR panels][C][MR], zero rows past K.
template <class Arch>
void pack_gemm_weights(const ConvGeom& g, const float* w, float* out) {
  constexpr int MR = GemmTile<Arch>::MR;
  const i64 nkt = (g.K + MR - 1) / MR;
  for (i64 kt = 0; kt < nkt; ++kt)
    for (i64 c = 0; c < g.C; ++c)
      for (int i = 0; i < MR; ++i) {
        const i64 k = kt * MR + i;
        *out++ = k < g.K ? w[k * g.ws[0] + c * g.ws[1]] : 0.f;
      }
}

struct GemmState {
  bool packed = false;
  AlignedFloats weights;
  AlignedFloats panels;  // one [C][PB] x panel per thread
  int slots = 1;
};

template <class Arch>
void gemm_tile(const float* panel, const float* wp, i64 C, const float* bias, i64 k0, i64 K, float* y, i64 PQ, i64 a,
               i64 valid_px) {
  using B = fbatch<Arch>;
  constexpr int MR = GemmTile<Arch>::MR, NV = GemmTile<Arch>::NV;
  constexpr int Wd = static_cast<int>(B::size), PB = NV * Wd;
  B acc[MR][NV];
  for (int i = 0; i < MR; ++i) {
    const B b(bias && k0 + i < K ? bias[k0 + i] : 0.f);
    for (int v = 0; v < NV; ++v) acc[i][v] = b;
  }
  for (i64 c = 0; c < C; ++c) {
    B xv[NV];
    for (int v = 0; v < NV; ++v) xv[v] = B::load_aligned(panel + c * PB + v * Wd);
    for (int i = 0; i < MR; ++i) {
      const B wb(wp[c * MR + i]);
      for (int v = 0; v < NV; ++v) acc[i][v] = xsimd::fma(wb, xv[v], acc[i][v]);
    }
  }
  const int rows = static_cast<int>(std::min<i64>(MR, K - k0));
  for (int i = 0; i < rows; ++i) {
    float* dst = y + (k0 + i) * PQ + a;
    if (valid_px == PB) {
      for (int v = 0; v < NV; ++v) acc[i][v].store_unaligned(dst + v * Wd);
    } else {
      alignas(64) float tmp[PB];
      for (int v = 0; v < NV; ++v) acc[i][v].store_aligned(tmp + v * Wd);
      std::memcpy(dst, tmp, static_cast<std::size_t>(valid_px) * sizeof(float));
    }
  }
}

template <class Arch>
void gemm_execute(const KernelArgs& args, GemmState* st, float* ws) {
  constexpr int MR = GemmTile<Arch>::MR;
  constexpr i64 PB = GemmTile<Arch>::NV * static_cast<i64>(fbatch<Arch>::size);
  const OpDesc& d = *args.desc;
  const ConvGeom g = conv_geom(d);
  const i64 nkt = (g.K + MR - 1) / MR, PQ = g.P * g.Q, C = g.C, K = g.K;
  Carver cv{ws};
  float* wsw = cv.take(nkt * MR * C);
  float* wsc = cv.take(chain_workspace(d.p<Conv2dParams>(), K));
  const float* wp = wsw;
  if (st->packed) {
    wp = st->weights.data;
  } else {
    pack_gemm_weights<Arch>(g, args.in[1]->data(), wsw);
  }
  const float* bias = d.p<Conv2dParams>().has_bias ? args.in[2]->data() : nullptr;
  const Chain ch = make_chain(d, args.in, wsc);
  const float* x = args.in[0]->data();
  float* y = args.out[0]->mutable_data();
  const i64 npb = (PQ + PB - 1) / PB, ntasks = g.N * npb;
  const int t = std::min(team_size(args.threads), st->slots);
  const auto work = [&](i64 b, i64 e, float* panel) {
    for (i64 task = b; task < e; ++task) {
      const i64 n = task / npb, a = (task % npb) * PB, valid = std::min(PB, PQ - a);
      // Pack x[n][:, a : a+PB] into [C][PB], zero past the last pixel.
      const float* xn = x + n * C * PQ + a;
      if (valid == PB) {
        using B = fbatch<Arch>;
        constexpr i64 Wd = B::size;
        for (i64 c = 0; c < C; ++c)
          for (i64 v = 0; v < PB; v += Wd) B::load_unaligned(xn + c * PQ + v).store_aligned(panel + c * PB + v);
      } else {
        for (i64 c = 0; c < C; ++c) {
          std::memcpy(panel + c * PB, xn + c * PQ, static_cast<std::size_t>(valid) * sizeof(float));
          std::memset(panel + c * PB + valid, 0, static_cast<std::size_t>(PB - valid) * sizeof(float));
        }
      }
      float* yn = y + n * K * PQ;
      for (i64 kt = 0; kt < nkt; ++kt) {
        const i64 k0 = kt * MR;
        gemm_tile<Arch>(panel, wp + kt * MR * C, C, bias, k0, K, yn, PQ, a, valid);
        if (ch.n > 0)
          for (i64 k = k0; k < std::min(K, k0 + MR); ++k)
            chain_nchw_range<Arch>(ch, yn + k * PQ, a, a + valid, n, k, g.Q);
      }
    }
  };
  const i64 panel_floats = C * PB;
  parallel_tid(ntasks, t, 1, [&](int id, i64 b, i64 e) { work(b, e, st->panels.data + id * panel_floats); });
}

// ---- depthwise ------------------------------------------------------------------------------------

// NCHW: simd/conv_kernel.hpp's dw_nchw_run with the plane's own taps and bias, and the chain
// over each run of ~512 outputs just stored.
template <class Arch>
void dw_nchw(const KernelArgs& args, DwState* st, const Chain& ch) {
  const OpDesc& d = *args.desc;
  const ConvGeom g = conv_geom(d);
  const float* w = args.in[1]->data();
  const float* bias = d.p<Conv2dParams>().has_bias ? args.in[2]->data() : nullptr;
  const i64 taps = g.R * g.S, S = g.S, Q = g.Q;
  const std::array<i64, kMaxRank> ws = g.ws;
  dw_nchw_run<Arch>(
      g, st, args.in[0]->data(), args.out[0]->mutable_data(), args.threads,
      [=](i64, i64 c, float* wt) {
        for (i64 t = 0; t < taps; ++t) wt[t] = w[c * ws[0] + (t / S) * ws[2] + (t % S) * ws[3]];
        return bias ? bias[c] : 0.f;
      },
      [](i64, i64) { return DwNoEpi{}; },
      [&](i64 n, i64 c, float* plane, i64 a, i64 b) { chain_nchw_range<Arch>(ch, plane, a, b, n, c, Q); });
}

// w (C, 1, R, S) -> [R][S][C]: one vector of channels per tap.
void pack_dw_weights(const ConvGeom& g, const float* w, float* out) {
  for (i64 r = 0; r < g.R; ++r)
    for (i64 s = 0; s < g.S; ++s)
      for (i64 c = 0; c < g.C; ++c) out[(r * g.S + s) * g.C + c] = w[c * g.ws[0] + r * g.ws[2] + s * g.ws[3]];
}

// NHWC: simd/conv_kernel.hpp's dw_nhwc_run (channels in lanes, the in-image taps found once per
// pixel), the chain over each output row's pixels right after they are stored (one call per
// row: per pixel, the calls' setup was a third of the kernel).
template <class Arch>
void dw_nhwc(const KernelArgs& args, const Chain& ch, const float* wpk) {
  const OpDesc& d = *args.desc;
  const ConvGeom g = conv_geom(d);
  const float* bias = d.p<Conv2dParams>().has_bias ? args.in[2]->data() : nullptr;
  const i64 PQ = g.P * g.Q, Q = g.Q, C = g.C;
  dw_nhwc_run<Arch>(g, args.in[0]->data(), wpk, bias, args.out[0]->mutable_data(), args.threads, DwNhwcNoEpi{},
                    [&](i64 pix, float* dst) {  // pix: the row's first pixel; the row's Q pixels at dst
                      if (ch.n > 0) chain_run<Arch>(ch, dst, C, pix / PQ, 0, pix % PQ / Q, 0, true, Q);
                    });
}

}  // namespace OPFUSE_SIMD_NS

// ---- the functors -----------------------------------------------------------------------------------

template <class Arch>
std::size_t ConvDirect::workspace(Arch, const OpDesc& desc) {
  float *a, *b, *c, *d;
  return direct_workspace<Arch>(desc, nullptr, &a, &b, &c, &d);
}

template <class Arch>
Status ConvDirect::prepare(Arch, const OpDesc& desc, const Context& ctx, const Tensor* const* constants,
                           std::shared_ptr<void>& state) {
  auto st = std::make_shared<DirectState>();
  const DirectPlan<Arch> pl = direct_plan<Arch>(desc);
  if (constants && constants[1]) {
    st->weights.resize(static_cast<std::size_t>(pl.wfloats));
    st->finite = pack_direct_weights<Arch>(pl.g, constants[1]->data(), pl.KB, nullptr, st->weights.data, ctx.threads);
    st->packed = true;
  }
  if (pl.ybuf) {
    st->slots = std::max(1, ctx.threads);
    st->ytile_floats = round_up(pl.RB * pl.g.Q * pl.g.K, 16);
    st->ytiles.resize(static_cast<std::size_t>(st->slots * st->ytile_floats));
  }
  state = st;
  return Status::ok();
}

template <class Arch>
void ConvDirect::operator()(Arch, const KernelArgs& args) const {
  direct_execute<Arch>(args, static_cast<const DirectState*>(args.state));
}

// 1x1: NCHW runs the GEMM; NHWC reads x in place through the direct kernel (R = S = 1).
template <class Arch>
std::size_t Conv1x1::workspace(Arch, const OpDesc& desc) {
  const ConvGeom g = conv_geom(desc);
  if (g.x_nhwc) return ConvDirect::workspace(Arch{}, desc);
  constexpr int MR = GemmTile<Arch>::MR;
  Carver cv{nullptr};
  cv.take((g.K + MR - 1) / MR * MR * g.C);
  cv.take(chain_workspace(desc.p<Conv2dParams>(), g.K));
  return cv.used;
}

template <class Arch>
Status Conv1x1::prepare(Arch, const OpDesc& desc, const Context& ctx, const Tensor* const* constants,
                        std::shared_ptr<void>& state) {
  const ConvGeom g = conv_geom(desc);
  if (g.x_nhwc) return ConvDirect::prepare(Arch{}, desc, ctx, constants, state);
  auto st = std::make_shared<GemmState>();
  constexpr int MR = GemmTile<Arch>::MR;
  constexpr i64 PB = GemmTile<Arch>::NV * static_cast<i64>(fbatch<Arch>::size);
  if (constants && constants[1]) {
    st->weights.resize(static_cast<std::size_t>((g.K + MR - 1) / MR * MR * g.C));
    pack_gemm_weights<Arch>(g, constants[1]->data(), st->weights.data);
    st->packed = true;
  }
  st->slots = std::max(1, ctx.threads);
  st->panels.resize(static_cast<std::size_t>(st->slots * g.C * PB));
  state = st;
  return Status::ok();
}

template <class Arch>
void Conv1x1::operator()(Arch, const KernelArgs& args) const {
  const ConvGeom g = conv_geom(*args.desc);
  if (g.x_nhwc) {
    direct_execute<Arch>(args, static_cast<const DirectState*>(args.state));
    return;
  }
  gemm_execute<Arch>(args, static_cast<GemmState*>(args.state), args.workspace);
}

template <class Arch>
std::size_t ConvDepthwise::workspace(Arch, const OpDesc& desc) {
  const ConvGeom g = conv_geom(desc);
  Carver cv{nullptr};
  cv.take(g.R * g.S * g.C);
  cv.take(chain_workspace(desc.p<Conv2dParams>(), g.K));
  return cv.used;
}

template <class Arch>
Status ConvDepthwise::prepare(Arch, const OpDesc& desc, const Context& ctx, const Tensor* const* constants,
                              std::shared_ptr<void>& state) {
  const ConvGeom g = conv_geom(desc);
  auto st = std::make_shared<DwState>();
  if (g.x_nhwc && constants && constants[1]) {
    st->weights.resize(static_cast<std::size_t>(g.R * g.S * g.C));
    pack_dw_weights(g, constants[1]->data(), st->weights.data);
    st->packed = true;
  }
  if (!g.x_nhwc) dw_nchw_prepare<Arch>(g, ctx.threads, st.get());
  state = st;
  return Status::ok();
}

template <class Arch>
void ConvDepthwise::operator()(Arch, const KernelArgs& args) const {
  const ConvGeom g = conv_geom(*args.desc);
  Carver cv{args.workspace};
  float* wpk = cv.take(g.R * g.S * g.C);
  float* wsc = cv.take(chain_workspace(args.desc->p<Conv2dParams>(), g.K));
  const Chain ch = make_chain(*args.desc, args.in, wsc);
  auto* st = static_cast<DwState*>(args.state);
  if (g.x_nhwc) {
    if (!st->packed) pack_dw_weights(g, args.in[1]->data(), wpk);
    dw_nhwc<Arch>(args, ch, st->packed ? st->weights.data : wpk);
  } else {
    dw_nchw<Arch>(args, st, ch);
  }
}

// Few input channels, NCHW: simd/conv_kernel.hpp's smallc_run, the chain over each output row
// of every channel right after the row is stored.
template <class Arch>
std::size_t ConvSmallC::workspace(Arch, const OpDesc& desc) {
  const ConvGeom g = conv_geom(desc);
  const i64 kp = smallc_kpad(g);
  Carver cv{nullptr};
  cv.take(kp * g.C * g.R * g.S);
  cv.take(kp);
  cv.take(chain_workspace(desc.p<Conv2dParams>(), g.K));
  return cv.used;
}

template <class Arch>
Status ConvSmallC::prepare(Arch, const OpDesc& desc, const Context& ctx, const Tensor* const*,
                           std::shared_ptr<void>& state) {
  auto st = std::make_shared<DwState>();
  smallc_prepare<Arch>(conv_geom(desc), ctx.threads, st.get());
  state = st;
  return Status::ok();
}

template <class Arch>
void ConvSmallC::operator()(Arch, const KernelArgs& args) const {
  const OpDesc& d = *args.desc;
  const ConvGeom g = conv_geom(d);
  const i64 kp = smallc_kpad(g);
  Carver cv{args.workspace};
  float* wpk = cv.take(kp * g.C * g.R * g.S);
  float* bpk = cv.take(kp);
  float* wsc = cv.take(chain_workspace(d.p<Conv2dParams>(), g.K));
  const Chain ch = make_chain(d, args.in, wsc);
  smallc_pack(g, args.in[1]->data(), nullptr, d.p<Conv2dParams>().has_bias ? args.in[2]->data() : nullptr, wpk, bpk);
  float* y = args.out[0]->mutable_data();
  const i64 K = g.K, Q = g.Q, PQ = g.P * g.Q;
  smallc_run<Arch>(
      g, static_cast<const DwState*>(args.state), args.in[0]->data(), wpk, bpk, y, args.threads,
      [](i64, i64) { return NoMap{}; },
      [&](i64 n, i64 p0, i64 p1) {
        if (ch.n > 0)
          for (i64 k = 0; k < K; ++k) chain_nchw_range<Arch>(ch, y + (n * K + k) * PQ, p0 * Q, p1 * Q, n, k, Q);
      });
}

OPFUSE_SIMD_INSTANTIATE_PREPARED(ConvDirect);
OPFUSE_SIMD_INSTANTIATE_PREPARED(Conv1x1);
OPFUSE_SIMD_INSTANTIATE_PREPARED(ConvDepthwise);
OPFUSE_SIMD_INSTANTIATE_PREPARED(ConvSmallC);

}  // namespace opfuse::simd
