// fused/conv.cpp - 2-D convolution with batchnorm folded into the weights and the rest of the
// post-op chain applied to the accumulators before the store.
//
// The story.
// naive (naive/conv.cpp): the seven-loop nest, then one full pass over y per post-op step.
// simd (simd/conv.cpp): register-blocked kernels (1x1 as GEMM, NHWC direct, depthwise); the
//   chain runs as a vectorized pass over each output tile right after it is stored (in cache).
// fused (this file):
//   * batchnorm steps right after the conv are folded into it: per output channel
//     s[k] = scale[k] / sqrt(var[k] + eps) and b'[k] = (b[k] - mean[k]) * s[k] + shift[k]
//     (consecutive batchnorms compose), and w is scaled by s[k] where it is packed anyway (the
//     GEMM's A packing for NCHW 1x1, the direct kernel's weight packing), so folding costs no
//     pass over the weights: at prepare when w, the bias and the batchnorm operands are bound
//     constants, otherwise per call.
//   * 1x1: the simd GEMM (simd/gemm_kernel.hpp) with the rest of the chain as its micro-kernel
//     epilogue (fused/gemm_epilogue.hpp): the short chains that end most layers (residual add,
//     relu / relu6, both) run on the accumulator registers, any other chain on the finished
//     tile in an L1 buffer - residual tile loaded (prefetched one tile ahead) and added,
//     activation applied - and y is stored once, never re-read. NCHW: per image y (K x PQ) =
//     diag(s) w (K x C) x (C x PQ), output channels as rows (per-row bias and batchnorm
//     vectors), x read in place by the micro-kernels (no packing of the activation); NHWC:
//     y (NPQ x K) = x (NPQ x C) w'^T, channels as columns.
//   * other geometries (not depthwise): the simd stage's NHWC direct convolution
//     (simd/conv_kernel.hpp) on the scaled weights; NHWC output runs the chain on the
//     accumulator tile before its store, NCHW output on the 16-channel x 64-pixel block in L1
//     as it is transposed into y (contiguous residual rows), so y is written once either way.
//   * depthwise: fused/conv_dw.cpp, its own unit (see fused/conv_common.hpp for why).
//   * pool steps and any other post-op kind: declined (the simd kernels serve them).
//
// Measured: fused / simd / oneDNN on the ResNet / MobileNet layers (1x1 256 -> 64 and 64 -> 256
// @56 +bn+add+relu, 1x1 1024 -> 256 @14, 1x1 320 -> 1280 @7 +bn+relu6, 3x3 128 @28, 256 @14 and
// 512 @7 +bn+relu, the stems), one and two threads, are in reports/REPORT.md (conv2d), or run
// `opfuse-bench --op conv2d`. Notes the figures do not show:
//   1x1 320 -> 1280 @7: 49 pixels, so the GEMM's second 32-column panel holds 17 columns: one
//   vector and one single column (simd/gemm_kernel.hpp's kColumnTiles).
//   3x3 512 -> 512 @7: the figures include packing the weights on every call.
//   The 3-channel stems run the smallc kernels (fused/conv_dw.cpp) since e2ab59e; this
//   file's direct kernel had been slower than them on both stems (snapshot of ba8b496).
#include <algorithm>
#include <array>
#include <cassert>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>
#include <type_traits>
#include <vector>

#include "fused/conv.hpp"
#include "fused/conv_common.hpp"
#include "fused/gemm_epilogue.hpp"
#include "simd/activation.hpp"
#include "simd/common.hpp"
#include "simd/conv_kernel.hpp"
#include "simd/gemm_kernel.hpp"
#include "simd/transpose.hpp"
#include "src/threads.hpp"

namespace opfuse::fused {
inline namespace OPFUSE_SIMD_NS {

using simd::gemm_round_up;
using simd::pack_a_all;
using simd::pack_b;
using simd::packed_a_size;
using simd::packed_b_size;
using simd::sgemm;
using simd::sgemm_workspace;
using simd::SgemmArgs;

namespace {

using i64 = std::int64_t;

// w' = w * sc[k] as a dense (K, Cg*R*S) matrix (the NHWC 1x1 GEMM's B, packed by pack_b).
void fold_weights(const ConvGeom& g, const float* w, const float* sc, float* wout) {
  const i64 taps = g.Cg * g.R * g.S;
  for (i64 k = 0; k < g.K; ++k) {
    float* dst = wout + k * taps;
    for (i64 c = 0; c < g.Cg; ++c)
      for (i64 r = 0; r < g.R; ++r)
        for (i64 t = 0; t < g.S; ++t) *dst++ = w[k * g.ws[0] + c * g.ws[1] + r * g.ws[2] + t * g.ws[3]] * sc[k];
  }
}

// ---- 1x1 as GEMM ------------------------------------------------------------------------------

// Columns per packed B block of the NCHW GEMM: x's pixels are read once and packed per call, so
// the block (C x nc) is kept L2-sized and read back by the micro-kernels from there - when the
// image outgrows L2. An image that fits is one block: every extra column block packs all of A
// (the weights, times the folded scale) once more, which for a small image costs more than
// the block saves (c1024 -> k256 at 14 x 14: four blocks of 64 columns packed the 1 MiB of
// weights four times; one block measured faster, 3 A/B pairs).
template <class Arch>
i64 conv1x1_nc_cap(const ConvGeom& g) {
  if (g.x_nhwc) return 0;
  const i64 l2 = static_cast<i64>(simd::cache_sizes().l2);
  if (g.C * g.P * g.Q * 4 <= l2) return 0;
  return std::max<i64>(simd::GemmTile<Arch>::nr, l2 / 4 / (4 * std::max<i64>(g.C, 1)));
}

template <class Arch>
std::size_t conv1x1_sgemm_ws(const ConvGeom& g) {
  if (g.x_nhwc) return sgemm_workspace<Arch>(g.N * g.P * g.Q, g.K, g.C, ::opfuse::detail::hardware_threads());
  return sgemm_workspace<Arch>(g.K, g.P * g.Q, g.C, ::opfuse::detail::hardware_threads(), conv1x1_nc_cap<Arch>(g));
}

// NCHW: sets sg's A to the weights (K x C), the folded batchnorms' scale applied as A is packed
// (a_scale): the A fields of the per-image GEMM, for prepare's pack_a_all and for execute alike.
inline void set_weights_as_a(SgemmArgs& sg, const OpDesc& d, const ConvGeom& g, const float* w, const float* scale) {
  sg.m = g.K;
  sg.k = g.C;
  sg.a = w;
  sg.lda = g.ws[0];
  sg.a_scale = conv_folded_batchnorms(d.p<Conv2dParams>()) > 0 ? scale : nullptr;
}

struct Conv1x1State {
  bool folded = false;  // scale, bias (and NHWC: packed_b) below were folded at prepare
  Floats scale;         // sc (K): the folded batchnorms' per-channel scale
  Floats bias;          // b' (K)
  Floats packed_b;      // NHWC: w'^T packed for the GEMM
  Floats packed_a;      // NCHW: diag(sc) w packed for the GEMM (pack_a_all)
  std::vector<Floats> mults;
};

// ---- direct: the simd NHWC register tile with the chain before the store -----------------------

struct DirectState {
  bool packed = false;          // folded weights and bias packed at prepare
  bool finite = false;          // ... and the weights all finite (simd::DirectPlan::skip_padding)
  simd::AlignedFloats weights;  // [G][nkb][c block][R][S][c][KB]
  simd::AlignedFloats bias;     // [G][nkb * KB]
  simd::AlignedFloats ytiles;   // NCHW output: one NHWC row block per thread
  i64 ytile_floats = 0;
  int slots = 1;
  std::vector<Floats> mults;
};

// simd::direct_tile's epilogue on the last channel block: the chain maps the tile's accumulators
// (pixel pix[i] of the image, channels k0 + v * W ...) before the store. The short chains of a
// full tile run on the registers, inline; any other chain (or a partial tile) on a copy, out of
// line (map). The accumulators themselves are never passed by reference out of direct_tile:
// that would keep them in memory around its FMA loop (loads and stores of all MR x NV vectors
// at every tile, a visible share of a 1x1 convolution with few input channels).
template <class Arch>
struct DirectTileEpi {
  const ChainEpilogue* epi;  // null: not the last channel block, or nothing to map
  const i64* pix;
  i64 k0, valid_k;
  bool consecutive;  // pix[i] == pix[0] + i for the real pixels
  template <int MR, int NV>
  void operator()(fbatch<Arch> (&acc)[MR][NV], float* const* ys) const {
    if (!epi) return;
    constexpr int Wd = static_cast<int>(fbatch<Arch>::size);
    // A full tile (every pixel real - the padding ones are its last - and every lane a channel)
    // of consecutive pixels, or a chain that reads no rows: the short chains in registers.
    if ((consecutive || !epi->reads_rows()) && ys[MR - 1] && valid_k == NV * Wd &&
        epi->template map_registers<Arch, MR, NV>(acc, pix[0], k0))
      return;
    alignas(64) float t[MR * NV * Wd];
#pragma GCC unroll 16
    for (int i = 0; i < MR; ++i)
#pragma GCC unroll 16
      for (int v = 0; v < NV; ++v) acc[i][v].store_aligned(t + i * NV * Wd + v * Wd);
    map<MR, NV>(t, ys);
#pragma GCC unroll 16
    for (int i = 0; i < MR; ++i)
#pragma GCC unroll 16
      for (int v = 0; v < NV; ++v) acc[i][v] = fbatch<Arch>::load_aligned(t + i * NV * Wd + v * Wd);
  }
  // The chain on the tile t (MR rows of NV * W) in L1, one run of consecutive real pixels at a
  // time (simd::DirectTiler's tiles need not be one run). Out of line: the FMA loop's register
  // allocation is direct_tile's alone.
  template <int MR, int NV>
  [[gnu::noinline]] void map(float* t, float* const* ys) const {
    constexpr int Wd = static_cast<int>(fbatch<Arch>::size);
    int real = 0;
    for (int i = 0; i < MR; ++i)
      if (ys[i]) real = i + 1;
    const bool rows = epi->reads_rows();
    for (int i = 0, e; i < real; i = e) {
      for (e = i + 1; e < real && (!rows || pix[e] == pix[e - 1] + 1);) ++e;
      epi->template apply_tile<Arch>(t + i * NV * Wd, NV * Wd, e - i, pix[i], k0, valid_k);
    }
  }
};

// The y lines of a tile's m pixels (simd::prefetch_tile_outputs) and its residual's, towards L2.
// Out of line, for the same reason.
[[gnu::noinline]] inline void prefetch_outputs(const ChainEpilogue& epi, float* const* ys, const i64* pix, int m,
                                               i64 k0, i64 valid) {
  simd::prefetch_tile_outputs(ys, m, valid);
  for (int i = 0; i < m; ++i) epi.prefetch_row(pix[i], k0, valid);
}

// One task: output rows [p0, p1) of image n (simd's direct_block with the chain fused). yt is
// where pixel (p0, 0) of the block goes in NHWC order: y itself (NHWC output: the chain runs on
// the accumulator tile) or the thread's row-block buffer (NCHW output: the chain runs on the
// transpose into y).
template <class Arch, int NV>
void direct_block(const simd::DirectPlan<Arch>& pl, const float* xp, const float* wp, const float* bias, float* yt,
                  float* y, const ChainEpilogue& epi, i64 n, i64 p0, i64 p1, i64 fb0, i64 fb1) {
  constexpr int MR = simd::DirectTile<Arch>::MR;
  const ConvGeom& g = pl.g;
  const i64 C = g.C, K = g.K;
  const i64 a = p0 * g.Q, npix = (p1 - p0) * g.Q;
  const simd::DirectTiler<MR> tiler(g, p0, p1, pl.skip_padding);
  const i64 ntiles = tiler.count();
  const i64 row_step = g.dh * pl.Wp * C, col_step = g.dw * C;
  const i64 wblock = g.R * g.S * g.Cg * pl.KB;
  const float* xn = xp + n * pl.Hp * pl.Wp * C;
  // Channel blocks fb0 .. fb1 - 1 of the G * nkb (group-major): output channels [k_lo, k_hi).
  const auto [k_lo, k_hi] = simd::direct_block_channels(pl, fb0, fb1);
  const bool pointwise = simd::direct_pointwise(pl);
  for (i64 fb = fb0; fb < fb1; ++fb) {
    const i64 gi = fb / pl.nkb, kb = fb % pl.nkb;
    const float* wk = wp + fb * wblock;
    const float* bk = bias + fb * pl.KB;
    const i64 k0 = gi * g.Kg + kb * pl.KB;
    const i64 valid = std::min(pl.KB, g.Kg - kb * pl.KB);
    const i64 CB = simd::direct_cblock(g, pl.KB);
    if (pointwise) {
      const ChainEpilogue* e = epi.n > 0 ? &epi : nullptr;
      simd::pointwise_run<Arch, MR, NV>(
          xn + a * C, C, C, wk, bk, yt + k0, K, a, npix, valid,
          [&](float* const* ys, const i64* pix, int m) { prefetch_outputs(epi, ys, pix, m, k0, valid); },
          [&](const i64* pix) {
            return DirectTileEpi<Arch>{e, pix, k0, valid, true};
          });
      continue;
    }
    for (i64 c0 = 0; c0 < g.Cg; c0 += CB) {
      const i64 cn = std::min(CB, g.Cg - c0);
      const bool first = c0 == 0, last = c0 + cn == g.Cg;
      const float* wc = wk + c0 * g.R * g.S * pl.KB;
      const simd::DirectPrefetch pf(wc + cn * g.R * g.S * pl.KB, wp + pl.wfloats, CB * g.R * g.S * pl.KB, ntiles);
      i64 t = 0;
      tiler.each([&](const simd::DirectTileSpec<MR>& tile) {
        const float* xs[MR];
        float* ys[MR];
        i64 pix[MR];
        for (int i = 0; i < MR; ++i) {
          xs[i] = xn + (tile.p[i] * g.sh * pl.Wp + tile.q[i] * g.sw) * C + gi * g.Cg + c0;
          pix[i] = tile.p[i] * g.Q + tile.q[i];
          ys[i] = i < tile.m ? yt + (pix[i] - a) * K + k0 : nullptr;
        }
        // The last channel block stores y and (NHWC) reads the residual: their lines are
        // requested now, to arrive during the FMAs.
        if (last && !pl.ybuf) prefetch_outputs(epi, ys, pix, tile.m, k0, valid);
        simd::direct_tile_m<Arch, MR, NV>(
            tile.m, xs, wc, g.S, cn, tile.win, row_step, col_step, bk, ys, valid, first,
            DirectTileEpi<Arch>{last && epi.n > 0 && !pl.ybuf ? &epi : nullptr, pix, k0, valid, tile.consecutive},
            pf.at(t), pf.count(t));
        ++t;
      });
    }
  }
  if (!pl.ybuf) return;
  // NHWC block -> NCHW rows of y, 16 channels x 64 pixels at a time, the chain applied on the way
  // (channels as rows: per-row batchnorm, contiguous residual rows) and y stored once. AVX-512:
  // 16 x 16 blocks transposed in registers, each channel's 16 pixels mapped by the chain there
  // and stored straight to y; the rest (and the other ISAs) through an L1 buffer: transposed
  // in, the chain applied step by step, copied out (three passes over the block).
  constexpr i64 KT = 16, PT = 64;
  alignas(64) float t[KT * PT];
  const i64 PQ = g.P * g.Q;
  for (i64 pb = 0; pb < npix; pb += PT) {
    const i64 cnt = std::min(PT, npix - pb);
    for (i64 kt = k_lo; kt < k_hi; kt += KT) {
      const i64 kn = std::min(KT, k_hi - kt);
      i64 done = 0;  // pixels of the block through registers
#ifdef __AVX512F__
      if constexpr (std::is_same_v<Arch, simd::avx512>)
        for (; kn == KT && done + KT <= cnt; done += KT) {
          __m512 r[KT];
          for (i64 i = 0; i < KT; ++i) r[i] = _mm512_loadu_ps(yt + (pb + done + i) * K + kt);
          simd::transpose16(r);  // r[k]: channel kt + k at pixels pb + done ...
          fbatch<Arch> v[KT];
          for (i64 k = 0; k < KT; ++k) v[k] = r[k];
          if (epi.n > 0) epi.template apply_rows<Arch, KT>(v, kt, a + pb + done, KT);
          for (i64 k = 0; k < KT; ++k) v[k].store_unaligned(y + (n * K + kt + k) * PQ + a + pb + done);
        }
#endif
      if (done == cnt) continue;
      const i64 p0 = pb + done, m = cnt - done;
      simd::transpose_2d<Arch>(yt + p0 * K + kt, K, t, PT, m, kn);
      if (epi.n > 0) epi.template apply_tile<Arch>(t, PT, static_cast<int>(kn), kt, a + p0, m);
      for (i64 k = 0; k < kn; ++k) simd::copy_floats<Arch>(t + k * PT, y + (n * K + kt + k) * PQ + a + p0, m);
    }
  }
}

// simd's direct_run: the rows of all images split evenly over the team, in blocks of <= RB rows
// within one image; the epilogue's binary operands offset to each block's image.
template <class Arch, int NV>
void direct_run(const simd::DirectPlan<Arch>& pl, const float* xp, const float* wp, const float* bias, float* y,
                const ChainEpilogue& epi, const i64* image_stride, const DirectState* st, int threads) {
  const ConvGeom& g = pl.g;
  const i64 rows = g.N * g.P;
  const auto work = [&](i64 b, i64 e, float* ytile, i64 fb0, i64 fb1) {
    while (b < e) {
      const i64 n = b / g.P, p0 = b % g.P, pe = std::min(g.P, p0 + (e - b));
      const ChainEpilogue en = epi.for_image(image_stride, n);
      const i64 nblk = (pe - p0 + pl.RB - 1) / pl.RB;
      for (i64 j = 0; j < nblk; ++j) {
        const i64 q0 = p0 + (pe - p0) * j / nblk, q1 = p0 + (pe - p0) * (j + 1) / nblk;
        float* yt = pl.ybuf ? ytile : y + (n * g.P + q0) * g.Q * g.K;
        direct_block<Arch, NV>(pl, xp, wp, bias, yt, y, en, n, q0, q1, fb0, fb1);
      }
      b += pe - p0;
    }
  };
  const int t = static_cast<int>(
      std::min<i64>(pl.ybuf ? std::min(simd::team_size(threads), st->slots) : simd::team_size(threads), rows));
  float* tiles = pl.ybuf ? st->ytiles.data : nullptr;
  if (t <= 1) {
    work(0, rows, tiles, 0, g.G * pl.nkb);
    return;
  }
#pragma omp parallel num_threads(t)
  {
    const ::opfuse::detail::DenormalGuard denormals;  // MXCSR is per thread (src/denormal.hpp)
    const i64 nt = omp_get_num_threads(), id = omp_get_thread_num();
    const simd::DirectShare s = simd::direct_share(pl, id, nt);
    if (s.b < s.e) work(s.b, s.e, tiles ? tiles + id * st->ytile_floats : nullptr, s.fb0, s.fb1);
  }
}

// Folded bias b' (K) -> the packed per-block bias [G][nkb * KB], zero past Kg.
void pack_direct_bias(const ConvGeom& g, i64 nkb, i64 KB, const float* b, float* out) {
  for (i64 gi = 0; gi < g.G; ++gi)
    for (i64 l = 0; l < nkb * KB; ++l) out[gi * nkb * KB + l] = l < g.Kg ? b[gi * g.Kg + l] : 0.f;
}

// Workspace sections of the direct kernel.
struct DirectWs {
  float *sc, *bi, *w, *b, *x, *epi;
};
template <class Arch>
std::size_t direct_ws(const OpDesc& d, float* base, DirectWs* out) {
  const simd::DirectPlan<Arch> pl = simd::direct_plan<Arch>(d);
  const ConvGeom& g = pl.g;
  Carver cv{base};
  out->sc = cv.take(g.K);
  out->bi = cv.take(g.K);
  out->w = cv.take(pl.wfloats);
  out->b = cv.take(g.G * pl.nkb * pl.KB);
  out->x = pl.copy_x ? cv.take(g.N * pl.Hp * pl.Wp * g.C) : nullptr;
  out->epi = cv.take(epilogue_ws(d.p<Conv2dParams>(), g.K));
  return cv.used + 16;
}

}  // namespace
}  // namespace OPFUSE_SIMD_NS

template <class Arch>
std::size_t Conv1x1::workspace(Arch, const OpDesc& desc) {
  const ConvGeom g = conv_geom(desc);
  Carver cv{nullptr};
  cv.take(static_cast<i64>(conv1x1_sgemm_ws<Arch>(g)));
  if (g.x_nhwc) cv.take(g.K * g.C);
  cv.take(g.K);
  cv.take(g.K);
  cv.take(epilogue_ws(desc.p<Conv2dParams>(), g.K));
  return cv.used + 16;
}

template <class Arch>
Status Conv1x1::prepare(Arch, const OpDesc& desc, const Context&, const Tensor* const* constants,
                        std::shared_ptr<void>& state) {
  const ConvGeom g = conv_geom(desc);
  auto st = std::make_shared<Conv1x1State>();
  if (fold_bound(desc, constants)) {
    st->scale = alloc_floats(static_cast<std::size_t>(g.K));
    st->bias = alloc_floats(static_cast<std::size_t>(g.K));
    fold_scales(desc, g.K, constants, st->scale.get(), st->bias.get());
    if (g.x_nhwc) {
      std::vector<float> w(static_cast<std::size_t>(g.K * g.C));
      fold_weights(g, constants[1]->data(), st->scale.get(), w.data());
      st->packed_b = alloc_floats(packed_b_size<Arch>(g.K, g.C));
      pack_b<Arch>(w.data(), g.C, true, g.K, g.C, st->packed_b.get());
    } else {
      // NCHW: the weights are A; packed once here, not as every call's first step (a visible
      // share of the time where the weights outweigh the pixels, as for c320 -> k1280 at 7 x 7:
      // 1.6 MB of weights against 49 pixels).
      SgemmArgs sg;
      set_weights_as_a(sg, desc, g, constants[1]->data(), st->scale.get());
      st->packed_a = alloc_floats(packed_a_size<Arch>(g.K, g.C));
      pack_a_all<Arch>(sg, st->packed_a.get());
    }
    st->folded = true;
  }
  st->mults = bound_mults(desc, constants);
  state = std::move(st);
  return Status::ok();
}

template <class Arch>
void Conv1x1::operator()(Arch, const KernelArgs& args) const {
  const OpDesc& d = *args.desc;
  const ConvGeom g = conv_geom(d);
  const auto* st = static_cast<const Conv1x1State*>(args.state);
  Carver cv{simd::align64(args.workspace)};
  float* wsg = cv.take(static_cast<i64>(conv1x1_sgemm_ws<Arch>(g)));
  float* wsw = g.x_nhwc ? cv.take(g.K * g.C) : nullptr;
  float* wss = cv.take(g.K);
  float* wsb = cv.take(g.K);
  float* wse = cv.take(epilogue_ws(d.p<Conv2dParams>(), g.K));

  const float* scale = st->scale.get();
  const float* bias = st->bias.get();
  if (!st->folded) {
    fold_scales(d, g.K, args.in, wss, wsb);
    scale = wss;
    bias = wsb;
  }
  const ChainEpilogue epi =
      make_epilogue(d, g, args.in, &st->mults, wse, g.x_nhwc ? ConvView::pixel_rows : ConvView::channel_rows);
  const float* x = args.in[0]->data();
  float* y = args.out[0]->mutable_data();

  SgemmArgs sg;
  sg.workspace = wsg;
  sg.threads = std::min(args.threads, ::opfuse::detail::hardware_threads());
  if (g.x_nhwc) {
    // y (NPQ x K) = x (NPQ x C) w'^T: w' is (K x C), i.e. op(B) = w'^T with trans_b; the scale
    // goes into w' (a column scale of op(B)) unless w' was packed at prepare.
    sg.m = g.N * g.P * g.Q;
    sg.n = g.K;
    sg.k = g.C;
    sg.a = x;
    sg.lda = g.C;
    sg.packed_b = st->packed_b.get();
    if (!sg.packed_b) {
      fold_weights(g, args.in[1]->data(), scale, wsw);
      sg.b = wsw;
    }
    sg.ldb = g.C;
    sg.trans_b = true;
    sg.c = y;
    sg.ldc = g.K;
    sg.bias = bias;
    sg.bias_rs = 0;
    sg.bias_cs = 1;
    sgemm<Arch>(sg, epi);
    return;
  }
  // Per image: y[n] (K x PQ) = diag(sc) w (K x C) x[n] (C x PQ); output channels are the rows,
  // and the folded scale is applied as sgemm packs w (a_scale).
  const i64 PQ = g.P * g.Q;
  set_weights_as_a(sg, d, g, args.in[1]->data(), scale);
  sg.n = PQ;
  sg.packed_a = st->packed_a.get();
  sg.ldb = PQ;
  sg.ldc = PQ;
  sg.bias = bias;
  sg.bias_rs = 1;
  sg.bias_cs = 0;
  sg.nc_cap = conv1x1_nc_cap<Arch>(g);
  const auto& p = d.p<Conv2dParams>();
  const OperandIndex idx = operand_index(p);
  for (i64 n = 0; n < g.N; ++n) {
    ChainEpilogue e = epi;
    for (int s = 0; s < e.n; ++s)
      if (e.steps[s].kind == PostOp::Kind::binary) {
        const std::size_t step = static_cast<std::size_t>(conv_folded_batchnorms(p) + s);
        e.steps[s].p0 += n * conv_operand_strides(d.inputs[idx[step]]).n;
      }
    sg.b = x + n * g.C * PQ;
    sg.c = y + n * g.K * PQ;
    sgemm<Arch>(sg, e);
  }
}

OPFUSE_SIMD_INSTANTIATE_PREPARED(Conv1x1);

// ---- direct ------------------------------------------------------------------------------------

template <class Arch>
std::size_t ConvDirect::workspace(Arch, const OpDesc& desc) {
  DirectWs w;
  return direct_ws<Arch>(desc, nullptr, &w);
}

template <class Arch>
Status ConvDirect::prepare(Arch, const OpDesc& desc, const Context& ctx, const Tensor* const* constants,
                           std::shared_ptr<void>& state) {
  auto st = std::make_shared<DirectState>();
  const simd::DirectPlan<Arch> pl = simd::direct_plan<Arch>(desc);
  const ConvGeom& g = pl.g;
  if (fold_bound(desc, constants)) {
    std::vector<float> sc(static_cast<std::size_t>(g.K)), bi(static_cast<std::size_t>(g.K));
    fold_scales(desc, g.K, constants, sc.data(), bi.data());
    st->weights.resize(static_cast<std::size_t>(pl.wfloats));
    st->finite =
        simd::pack_direct_weights<Arch>(g, constants[1]->data(), pl.KB, sc.data(), st->weights.data, ctx.threads);
    st->bias.resize(static_cast<std::size_t>(g.G * pl.nkb * pl.KB));
    pack_direct_bias(g, pl.nkb, pl.KB, bi.data(), st->bias.data);
    st->packed = true;
  }
  if (pl.ybuf) {
    st->slots = std::max(1, ctx.threads);
    st->ytile_floats = gemm_round_up(pl.RB * g.Q * g.K, 16);
    st->ytiles.resize(static_cast<std::size_t>(st->slots * st->ytile_floats));
  }
  st->mults = bound_mults(desc, constants);
  state = std::move(st);
  return Status::ok();
}

template <class Arch>
void ConvDirect::operator()(Arch, const KernelArgs& args) const {
  const OpDesc& d = *args.desc;
  const auto* st = static_cast<const DirectState*>(args.state);
  simd::DirectPlan<Arch> pl = simd::direct_plan<Arch>(d);
  const ConvGeom& g = pl.g;
  DirectWs ws;
  direct_ws<Arch>(d, args.workspace, &ws);
  const int threads = args.threads;

  const float* wp = st->weights.data;
  const float* bias = st->bias.data;
  pl.skip_padding = st->finite;
  if (!st->packed) {
    fold_scales(d, g.K, args.in, ws.sc, ws.bi);
    pl.skip_padding = simd::pack_direct_weights<Arch>(g, args.in[1]->data(), pl.KB, ws.sc, ws.w, threads);
    pack_direct_bias(g, pl.nkb, pl.KB, ws.bi, ws.b);
    wp = ws.w;
    bias = ws.b;
  }
  // NHWC output: the chain on the accumulator tile (pixels as rows); NCHW output: on the
  // transposed block in L1 (channels as rows, see direct_block).
  const ChainEpilogue epi =
      make_epilogue(d, g, args.in, &st->mults, ws.epi, g.y_nhwc ? ConvView::image_pixels : ConvView::channel_rows);
  i64 image_stride[kEpiMaxSteps] = {};
  epilogue_image_strides(d, epi, image_stride);

  const float* xp = args.in[0]->data();
  if (pl.copy_x) {
    simd::pad_to_nhwc<Arch>(g, xp, ws.x, threads);
    xp = ws.x;
  }
  float* y = args.out[0]->mutable_data();
  switch (simd::DirectTile<Arch>::nv(g.Kg)) {
    case 1: direct_run<Arch, 1>(pl, xp, wp, bias, y, epi, image_stride, st, threads); break;
    case 2: direct_run<Arch, 2>(pl, xp, wp, bias, y, epi, image_stride, st, threads); break;
    default:
      if constexpr (std::is_same_v<Arch, avx512>)
        direct_run<Arch, 4>(pl, xp, wp, bias, y, epi, image_stride, st, threads);
      break;
  }
}

OPFUSE_SIMD_INSTANTIATE_PREPARED(ConvDirect);

}  // namespace opfuse::fused
