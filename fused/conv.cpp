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
//     epilogue (fused/gemm_epilogue.hpp): the finished accumulator tile goes through the steps
//     in an L1 buffer - residual tile loaded (prefetched one tile ahead) and added, activation
//     applied - and is stored once; y is never re-read. NCHW: per image y (K x PQ) =
//     diag(s) w (K x C) x (C x PQ), output channels as rows (per-row bias and batchnorm
//     vectors), x read in place by the micro-kernels (no packing of the activation); NHWC:
//     y (NPQ x K) = x (NPQ x C) w'^T, channels as columns.
//   * other geometries (not depthwise): the simd stage's NHWC direct convolution
//     (simd/conv_kernel.hpp) on the scaled weights; NHWC output runs the chain on the
//     accumulator tile before its store, NCHW output on the 16-channel x 64-pixel block in L1
//     as it is transposed into y (contiguous residual rows), so y is written once either way.
//   * depthwise (NCHW): the simd stage's phase-split plane kernel (simd/conv_kernel.hpp,
//     dw_nchw_run) on taps scaled by the folded batchnorms, with the rest of the chain applied
//     to each row chunk's accumulator vectors before the store. After folding, MobileNet's
//     dw + BN + ReLU6 is one activation, run with its kind fixed for the call. Measured, 3x3
//     144 @56 +bn+relu6 t1 (4 A/B pairs): stride 1 386 (simd) -> 299 us, stride 2 245 -> 200 us.
//   * NHWC depthwise, pool steps and any other post-op kind: declined (the simd kernels serve
//     them).
//
// MEASURED
#include <algorithm>
#include <array>
#include <cassert>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>
#include <thread>
#include <type_traits>
#include <vector>

#include "fused/conv.hpp"
#include "fused/gemm_epilogue.hpp"
#include "simd/activation.hpp"
#include "simd/common.hpp"
#include "simd/conv_kernel.hpp"
#include "simd/gemm_kernel.hpp"
#include "simd/transpose.hpp"

namespace opfuse::fused {
inline namespace OPFUSE_SIMD_NS {

using simd::gemm_round_up;
using simd::pack_b;
using simd::packed_b_size;
using simd::sgemm;
using simd::sgemm_workspace;
using simd::SgemmArgs;

namespace {

using i64 = std::int64_t;

int max_threads() {
  const unsigned hc = std::thread::hardware_concurrency();
  return hc > 0 ? static_cast<int>(hc) : 1;
}

struct Free {
  void operator()(float* p) const { std::free(p); }
};
using Floats = std::unique_ptr<float[], Free>;
Floats alloc_floats(std::size_t n) {
  Floats f(static_cast<float*>(std::aligned_alloc(64, (n * sizeof(float) + 63) / 64 * 64)));
  if (!f) throw std::bad_alloc();
  return f;
}

// Carves 64-byte aligned sections out of the workspace; with a null base it only counts.
struct Carver {
  float* base;
  std::size_t used = 0;
  float* take(i64 n) {
    float* p = base ? base + used : nullptr;
    used += static_cast<std::size_t>(gemm_round_up(n, 16));
    return p;
  }
};

struct Geom {
  i64 N, C, H, W, K, R, S, P, Q, G, Cg, Kg;
  bool nhwc;
  std::array<i64, kMaxRank> ws;  // weight strides, logical (K, C/G, R, S)
};

Geom geom(const OpDesc& d) {
  const auto& p = d.p<Conv2dParams>();
  const Shape& x = d.inputs[0].shape;
  const Shape& w = d.inputs[1].shape;
  Geom g{};
  g.N = x[0], g.C = x[1], g.H = x[2], g.W = x[3];
  g.K = w[0], g.R = w[2], g.S = w[3];
  g.P = (g.H + p.pad_top + p.pad_bottom - p.dilation_h * (g.R - 1) - 1) / p.stride_h + 1;
  g.Q = (g.W + p.pad_left + p.pad_right - p.dilation_w * (g.S - 1) - 1) / p.stride_w + 1;
  g.G = p.groups, g.Cg = g.C / g.G, g.Kg = g.K / g.G;
  g.nhwc = d.inputs[0].layout == Layout::nhwc;
  g.ws = dense_strides(w, d.inputs[1].layout);
  return g;
}

// Index of each post-op step's first operand (after x, w, [bias]).
// A fixed array: execute allocates nothing (supports() caps the chain at kEpiMaxSteps).
using OperandIndex = std::array<std::size_t, kEpiMaxSteps>;
OperandIndex operand_index(const Conv2dParams& p) {
  OperandIndex r{};
  std::size_t idx = p.has_bias ? 3 : 2;
  for (std::size_t s = 0; s < p.post_ops.size() && s < r.size(); ++s) {
    r[s] = idx;
    idx += static_cast<std::size_t>(post_op_operands(p.post_ops[s]));
  }
  return r;
}

// mult[k] = scale[k] / sqrt(var[k] + eps).
void bn_mult(const float* scale, const float* var, float eps, i64 n, float* mult) {
  for (i64 k = 0; k < n; ++k) mult[k] = scale[k] * (1.f / std::sqrt(var[k] + eps));
}

// Are the weights, the bias and the folded batchnorms' operands all bound at prepare?
bool fold_bound(const OpDesc& d, const Tensor* const* constants) {
  if (!constants || !constants[1]) return false;
  const auto& p = d.p<Conv2dParams>();
  if (p.has_bias && !constants[2]) return false;
  const OperandIndex idx = operand_index(p);
  for (int s = 0; s < conv_folded_batchnorms(p); ++s)
    for (std::size_t o = 0; o < 4; ++o)
      if (!constants[idx[static_cast<std::size_t>(s)] + o]) return false;
  return true;
}

// The leading batchnorms as a per-output-channel scale and bias: conv(w) * sc[k] + bi[k] is
// the conv with its bias followed by them (consecutive batchnorms compose). The scale is
// applied where the weights are packed anyway (sgemm's a_scale, the direct packing below), so
// folding costs no pass over the weights. `in` are the desc's inputs (x unused).
void fold_scales(const OpDesc& d, i64 K, const Tensor* const* in, float* sc, float* bi) {
  const auto& p = d.p<Conv2dParams>();
  const OperandIndex idx = operand_index(p);
  const int nfold = conv_folded_batchnorms(p);
  const float* bias = p.has_bias ? in[2]->data() : nullptr;
  for (i64 k = 0; k < K; ++k) {
    float s = 1.f, b = bias ? bias[k] : 0.f;
    for (int f = 0; f < nfold; ++f) {
      const Tensor* const* o = in + idx[static_cast<std::size_t>(f)];
      const float m =
          o[0]->data()[k] * (1.f / std::sqrt(o[3]->data()[k] + p.post_ops[static_cast<std::size_t>(f)].epsilon));
      b = (b - o[2]->data()[k]) * m + o[1]->data()[k];
      s *= m;
    }
    sc[k] = s;
    bi[k] = b;
  }
}

// w' = w * sc[k] as a dense (K, Cg*R*S) matrix (the NHWC 1x1 GEMM's B, packed by pack_b).
void fold_weights(const Geom& g, const float* w, const float* sc, float* wout) {
  const i64 taps = g.Cg * g.R * g.S;
  for (i64 k = 0; k < g.K; ++k) {
    float* dst = wout + k * taps;
    for (i64 c = 0; c < g.Cg; ++c)
      for (i64 r = 0; r < g.R; ++r)
        for (i64 t = 0; t < g.S; ++t) *dst++ = w[k * g.ws[0] + c * g.ws[1] + r * g.ws[2] + t * g.ws[3]] * sc[k];
  }
}

// The chain after the folded batchnorms as an epilogue in the kernel's 2-D `view` of the output
// (see ConvView): batchnorm vectors run along the channel axis, rows or columns; per-image views
// offset binary operands per image (offset_images). Multipliers of unbound batchnorms are
// computed into `ws` (K floats per step) unless `mults` has them from prepare.
ChainEpilogue make_epilogue(const OpDesc& d, const Geom& g, const Tensor* const* in, const std::vector<Floats>* mults,
                            float* ws, ConvView view) {
  const bool channel_rows = view == ConvView::channel_rows;
  const auto& p = d.p<Conv2dParams>();
  const OperandIndex idx = operand_index(p);
  ChainEpilogue epi;
  for (std::size_t s = static_cast<std::size_t>(conv_folded_batchnorms(p)); s < p.post_ops.size(); ++s) {
    const PostOp& op = p.post_ops[s];
    const Tensor* const* o = in + idx[s];
    EpiStep& e = epi.add(op.kind);
    if (op.kind == PostOp::Kind::batchnorm) {
      const float* mult = mults && s < mults->size() ? (*mults)[s].get() : nullptr;
      if (!mult) {
        bn_mult(o[0]->data(), o[3]->data(), op.epsilon, g.K, ws);
        mult = ws;
        ws += gemm_round_up(g.K, 16);
      }
      e.p0 = o[2]->data();
      e.p1 = mult;
      e.p2 = o[1]->data();
      e.rs = channel_rows ? 1 : 0;
      e.cs = channel_rows ? 0 : 1;
    } else if (op.kind == PostOp::Kind::binary) {
      GemmRowCol rc{};
      [[maybe_unused]] const bool ok =
          conv_operand_rowcol(conv_operand_strides(d.inputs[idx[s]]), g.N, g.K, g.P, g.Q, view, &rc);
      assert(ok);  // supports() checked it
      e.binary = op.binary;
      e.p0 = o[0]->data();
      e.rs = rc.rs;
      e.cs = rc.cs;
    } else {
      e.act = op.act;
    }
  }
  return epi;
}

// Each binary step's operand stride between images (kernels that index pixels within an image
// offset the operands per image with it); 0 for the other steps.
void epilogue_image_strides(const OpDesc& d, const ChainEpilogue& epi, i64* image_stride) {
  const auto& p = d.p<Conv2dParams>();
  const OperandIndex idx = operand_index(p);
  const std::size_t f = static_cast<std::size_t>(conv_folded_batchnorms(p));
  for (int s = 0; s < epi.n; ++s)
    if (epi.steps[s].kind == PostOp::Kind::binary)
      image_stride[s] = conv_operand_strides(d.inputs[idx[f + static_cast<std::size_t>(s)]]).n;
}

// Floats of workspace for the epilogue's batchnorm multipliers.
i64 epilogue_ws(const Conv2dParams& p, i64 K) {
  i64 f = 0;
  for (std::size_t s = static_cast<std::size_t>(conv_folded_batchnorms(p)); s < p.post_ops.size(); ++s)
    if (p.post_ops[s].kind == PostOp::Kind::batchnorm) f += gemm_round_up(K, 16);
  return f;
}

// Multipliers of the epilogue's batchnorms whose scale and var are bound (others stay null).
std::vector<Floats> bound_mults(const OpDesc& d, const Tensor* const* constants) {
  const auto& p = d.p<Conv2dParams>();
  std::vector<Floats> r(p.post_ops.size());
  if (!constants) return r;
  const OperandIndex idx = operand_index(p);
  const i64 K = d.inputs[1].shape[0];
  for (std::size_t s = static_cast<std::size_t>(conv_folded_batchnorms(p)); s < p.post_ops.size(); ++s) {
    if (p.post_ops[s].kind != PostOp::Kind::batchnorm || !constants[idx[s]] || !constants[idx[s] + 3]) continue;
    r[s] = alloc_floats(static_cast<std::size_t>(K));
    bn_mult(constants[idx[s]]->data(), constants[idx[s] + 3]->data(), p.post_ops[s].epsilon, K, r[s].get());
  }
  return r;
}

// ---- 1x1 as GEMM ------------------------------------------------------------------------------

// Columns per packed B block of the NCHW GEMM: x's pixels are read once and packed per call, so
// the block (C x nc) is kept L2-sized and read back by the micro-kernels from there.
template <class Arch>
i64 conv1x1_nc_cap(const Geom& g) {
  if (g.nhwc) return 0;
  const i64 l2 = static_cast<i64>(simd::cache_sizes().l2);
  return std::max<i64>(simd::GemmTile<Arch>::nr, l2 / 4 / (4 * std::max<i64>(g.C, 1)));
}

template <class Arch>
std::size_t conv1x1_sgemm_ws(const Geom& g) {
  if (g.nhwc) return sgemm_workspace<Arch>(g.N * g.P * g.Q, g.K, g.C, max_threads());
  return sgemm_workspace<Arch>(g.K, g.P * g.Q, g.C, max_threads(), conv1x1_nc_cap<Arch>(g));
}

struct Conv1x1State {
  bool folded = false;  // scale, bias (and NHWC: packed_b) below were folded at prepare
  Floats scale;         // sc (K): the folded batchnorms' per-channel scale
  Floats bias;          // b' (K)
  Floats packed_b;      // NHWC: w'^T packed for the GEMM
  std::vector<Floats> mults;
};

// ---- direct: the simd NHWC register tile with the chain before the store -----------------------

struct DirectState {
  bool packed = false;          // folded weights and bias packed at prepare
  simd::AlignedFloats weights;  // [G][nkb][c block][R][S][c][KB]
  simd::AlignedFloats bias;     // [G][nkb * KB]
  simd::AlignedFloats ytiles;   // NCHW output: one NHWC row block per thread
  i64 ytile_floats = 0;
  int slots = 1;
  std::vector<Floats> mults;
};

// simd's direct_tile (simd/conv_kernel.hpp), plus: on the last channel block `epi` maps every
// accumulator vector (pixel pix[i] of the image, channels k0 + v * W ...) before the store.
template <class Arch, int MR, int NV>
void direct_tile_epi(const float* const* xs, const float* w, i64 R, i64 S, i64 Cg, i64 row_step, i64 col_step,
                     const float* bias, float* const* ys, i64 valid_k, bool first, const ChainEpilogue* epi,
                     const i64* pix, i64 k0) {
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
  if (epi) {
    // The real pixels are a prefix of the tile (padding repeats the last one): the chain runs
    // on them in an L1 buffer, then they are stored as usual.
    alignas(64) float t[MR * NV * Wd];
    int real = 0;
    for (int i = 0; i < MR; ++i) {
      if (!ys[i]) continue;
      real = i + 1;
      for (int v = 0; v < NV; ++v) acc[i][v].store_aligned(t + i * NV * Wd + v * Wd);
    }
    epi->template apply_tile<Arch>(t, NV * Wd, real, pix[0], k0, valid_k);
    for (int i = 0; i < real; ++i)
      for (int v = 0; v < NV; ++v) acc[i][v] = B::load_aligned(t + i * NV * Wd + v * Wd);
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

// One task: output rows [p0, p1) of image n (simd's direct_block with the chain fused). yt is
// where pixel (p0, 0) of the block goes in NHWC order: y itself (NHWC output: the chain runs on
// the accumulator tile) or the thread's row-block buffer (NCHW output: the chain runs on the
// transpose into y).
template <class Arch, int NV>
void direct_block(const simd::DirectPlan<Arch>& pl, const float* xp, const float* wp, const float* bias, float* yt,
                  float* y, const ChainEpilogue& epi, i64 n, i64 p0, i64 p1) {
  constexpr int MR = simd::DirectTile<Arch>::MR;
  const simd::ConvGeom& g = pl.g;
  const i64 C = g.C, K = g.K;
  const i64 a = p0 * g.Q, npix = (p1 - p0) * g.Q, ntiles = (npix + MR - 1) / MR;
  const i64 row_step = g.dh * pl.Wp * C, col_step = g.dw * C;
  const i64 wblock = g.R * g.S * g.Cg * pl.KB;
  const float* xn = xp + n * pl.Hp * pl.Wp * C;
  for (i64 gi = 0; gi < g.G; ++gi) {
    for (i64 kb = 0; kb < pl.nkb; ++kb) {
      const float* wk = wp + (gi * pl.nkb + kb) * wblock;
      const float* bk = bias + (gi * pl.nkb + kb) * pl.KB;
      const i64 k0 = gi * g.Kg + kb * pl.KB;
      const i64 valid = std::min(pl.KB, g.Kg - kb * pl.KB);
      const i64 CB = simd::direct_cblock(g, pl.KB);
      for (i64 c0 = 0; c0 < g.Cg; c0 += CB) {
        const i64 cn = std::min(CB, g.Cg - c0);
        const bool first = c0 == 0, last = c0 + cn == g.Cg;
        const float* wc = wk + c0 * g.R * g.S * pl.KB;
        for (i64 t = 0; t < ntiles; ++t) {
          const float* xs[MR];
          float* ys[MR];
          i64 pix[MR];
          for (int i = 0; i < MR; ++i) {
            i64 px = t * MR + i;
            const bool real = px < npix;
            if (!real) px = npix - 1;  // tile padding: recompute the last pixel, do not store
            const i64 pq = a + px, p = pq / g.Q, q = pq % g.Q;
            xs[i] = xn + (p * g.sh * pl.Wp + q * g.sw) * C + gi * g.Cg + c0;
            ys[i] = real ? yt + px * K + k0 : nullptr;
            pix[i] = pq;
          }
          direct_tile_epi<Arch, MR, NV>(xs, wc, g.R, g.S, cn, row_step, col_step, bk, ys, valid, first,
                                        last && epi.n > 0 && !pl.ybuf ? &epi : nullptr, pix, k0);
        }
      }
    }
  }
  if (!pl.ybuf) return;
  // NHWC block -> NCHW rows of y through an L1 buffer of 16 channels x 64 pixels: transposed in,
  // the chain applied there (channels as rows: per-row batchnorm, contiguous residual rows),
  // stored to y once.
  constexpr i64 KT = 16, PT = 64;
  alignas(64) float t[KT * PT];
  const i64 PQ = g.P * g.Q;
  for (i64 pb = 0; pb < npix; pb += PT) {
    const i64 cnt = std::min(PT, npix - pb);
    for (i64 kt = 0; kt < K; kt += KT) {
      const i64 kn = std::min(KT, K - kt);
      simd::transpose_2d<Arch>(yt + pb * K + kt, K, t, PT, cnt, kn);
      if (epi.n > 0) epi.template apply_tile<Arch>(t, PT, static_cast<int>(kn), kt, a + pb, cnt);
      for (i64 k = 0; k < kn; ++k)
        std::memcpy(y + (n * K + kt + k) * PQ + a + pb, t + k * PT, static_cast<std::size_t>(cnt) * sizeof(float));
    }
  }
}

// simd's direct_run: the rows of all images split evenly over the team, in blocks of <= RB rows
// within one image; the epilogue's binary operands offset to each block's image.
template <class Arch, int NV>
void direct_run(const simd::DirectPlan<Arch>& pl, const float* xp, const float* wp, const float* bias, float* y,
                const ChainEpilogue& epi, const i64* image_stride, const DirectState* st, int threads) {
  const simd::ConvGeom& g = pl.g;
  const i64 rows = g.N * g.P;
  const auto work = [&](i64 b, i64 e, float* ytile) {
    while (b < e) {
      const i64 n = b / g.P, p0 = b % g.P, pe = std::min(g.P, p0 + (e - b));
      ChainEpilogue en = epi;
      for (int s = 0; s < en.n; ++s)
        if (en.steps[s].kind == PostOp::Kind::binary) en.steps[s].p0 += n * image_stride[s];
      const i64 nblk = (pe - p0 + pl.RB - 1) / pl.RB;
      for (i64 j = 0; j < nblk; ++j) {
        const i64 q0 = p0 + (pe - p0) * j / nblk, q1 = p0 + (pe - p0) * (j + 1) / nblk;
        float* yt = pl.ybuf ? ytile : y + (n * g.P + q0) * g.Q * g.K;
        direct_block<Arch, NV>(pl, xp, wp, bias, yt, y, en, n, q0, q1);
      }
      b += pe - p0;
    }
  };
  const int t = static_cast<int>(
      std::min<i64>(pl.ybuf ? std::min(simd::team_size(threads), st->slots) : simd::team_size(threads), rows));
  float* tiles = pl.ybuf ? st->ytiles.data : nullptr;
  if (t <= 1) {
    work(0, rows, tiles);
    return;
  }
#pragma omp parallel num_threads(t)
  {
    const i64 nt = omp_get_num_threads(), id = omp_get_thread_num();
    const i64 b = rows * id / nt, e = rows * (id + 1) / nt;
    if (b < e) work(b, e, tiles ? tiles + id * st->ytile_floats : nullptr);
  }
}

// simd::pack_direct_weights (simd/conv_kernel.hpp) with the folded batchnorm scale sc[k] applied
// to each output channel's taps as they are packed: [g][kb][c block][R][S][c][KB].
void pack_direct_weights_scaled(const simd::ConvGeom& g, const float* w, i64 KB, const float* sc, float* out,
                                int threads) {
  const i64 nkb = (g.Kg + KB - 1) / KB, CB = simd::direct_cblock(g, KB), ncb = (g.Cg + CB - 1) / CB;
  const i64 wblock = g.R * g.S * g.Cg * KB;
  simd::parallel_for(g.G * nkb * ncb * g.R, threads, 1, [&](i64 b, i64 e) {
    for (i64 u = b; u < e; ++u) {
      const i64 r = u % g.R, cb = (u / g.R) % ncb, kb = (u / (g.R * ncb)) % nkb, gi = u / (g.R * ncb * nkb);
      const i64 c0 = cb * CB, cn = std::min(CB, g.Cg - c0);
      float* o = out + (gi * nkb + kb) * wblock + (c0 * g.R + r * cn) * g.S * KB;
      for (i64 l = 0; l < KB; ++l) {
        const i64 kg = kb * KB + l;
        if (kg >= g.Kg) {
          for (i64 t = 0; t < g.S * cn; ++t) o[t * KB + l] = 0.f;
          continue;
        }
        const float f = sc[gi * g.Kg + kg];
        const float* src = w + (gi * g.Kg + kg) * g.ws[0] + c0 * g.ws[1] + r * g.ws[2];
        for (i64 t = 0; t < g.S; ++t)
          for (i64 c = 0; c < cn; ++c) o[(t * cn + c) * KB + l] = src[c * g.ws[1] + t * g.ws[3]] * f;
      }
    }
  });
}

// Folded bias b' (K) -> the packed per-block bias [G][nkb * KB], zero past Kg.
void pack_direct_bias(const simd::ConvGeom& g, i64 nkb, i64 KB, const float* b, float* out) {
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
  const simd::ConvGeom& g = pl.g;
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
  const Geom g = geom(desc);
  Carver cv{nullptr};
  cv.take(static_cast<i64>(conv1x1_sgemm_ws<Arch>(g)));
  if (g.nhwc) cv.take(g.K * g.C);
  cv.take(g.K);
  cv.take(g.K);
  cv.take(epilogue_ws(desc.p<Conv2dParams>(), g.K));
  return cv.used + 16;
}

template <class Arch>
Status Conv1x1::prepare(Arch, const OpDesc& desc, const Context&, const Tensor* const* constants,
                        std::shared_ptr<void>& state) {
  const Geom g = geom(desc);
  auto st = std::make_shared<Conv1x1State>();
  if (fold_bound(desc, constants)) {
    st->scale = alloc_floats(static_cast<std::size_t>(g.K));
    st->bias = alloc_floats(static_cast<std::size_t>(g.K));
    fold_scales(desc, g.K, constants, st->scale.get(), st->bias.get());
    if (g.nhwc) {
      std::vector<float> w(static_cast<std::size_t>(g.K * g.C));
      fold_weights(g, constants[1]->data(), st->scale.get(), w.data());
      st->packed_b = alloc_floats(packed_b_size<Arch>(g.K, g.C));
      pack_b<Arch>(w.data(), g.C, true, g.K, g.C, st->packed_b.get());
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
  const Geom g = geom(d);
  const auto* st = static_cast<const Conv1x1State*>(args.state);
  float* ws0 = args.workspace + (16 - reinterpret_cast<std::uintptr_t>(args.workspace) / sizeof(float) % 16) % 16;
  Carver cv{ws0};
  float* wsg = cv.take(static_cast<i64>(conv1x1_sgemm_ws<Arch>(g)));
  float* wsw = g.nhwc ? cv.take(g.K * g.C) : nullptr;
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
  const bool scaled = conv_folded_batchnorms(d.p<Conv2dParams>()) > 0;
  const ChainEpilogue epi =
      make_epilogue(d, g, args.in, &st->mults, wse, g.nhwc ? ConvView::pixel_rows : ConvView::channel_rows);
  const float* x = args.in[0]->data();
  float* y = args.out[0]->mutable_data();

  SgemmArgs sg;
  sg.workspace = wsg;
  sg.threads = std::min(args.threads, max_threads());
  if (g.nhwc) {
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
  sg.m = g.K;
  sg.n = PQ;
  sg.k = g.C;
  sg.a = args.in[1]->data();
  sg.lda = g.ws[0];
  sg.a_scale = scaled ? scale : nullptr;
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
  const simd::ConvGeom& g = pl.g;
  if (fold_bound(desc, constants)) {
    std::vector<float> sc(static_cast<std::size_t>(g.K)), bi(static_cast<std::size_t>(g.K));
    fold_scales(desc, g.K, constants, sc.data(), bi.data());
    st->weights.resize(static_cast<std::size_t>(pl.wfloats));
    pack_direct_weights_scaled(g, constants[1]->data(), pl.KB, sc.data(), st->weights.data, ctx.threads);
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
  const simd::DirectPlan<Arch> pl = simd::direct_plan<Arch>(d);
  const simd::ConvGeom& g = pl.g;
  DirectWs ws;
  direct_ws<Arch>(d, args.workspace, &ws);
  const int threads = args.threads;

  const float* wp = st->weights.data;
  const float* bias = st->bias.data;
  if (!st->packed) {
    fold_scales(d, g.K, args.in, ws.sc, ws.bi);
    pack_direct_weights_scaled(g, args.in[1]->data(), pl.KB, ws.sc, ws.w, threads);
    pack_direct_bias(g, pl.nkb, pl.KB, ws.bi, ws.b);
    wp = ws.w;
    bias = ws.b;
  }
  // NHWC output: the chain on the accumulator tile (pixels as rows); NCHW output: on the
  // transposed block in L1 (channels as rows, see direct_block).
  const ChainEpilogue epi = make_epilogue(d, geom(d), args.in, &st->mults, ws.epi,
                                          g.y_nhwc ? ConvView::image_pixels : ConvView::channel_rows);
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

// ---- depthwise: simd's NCHW depthwise on folded taps, the chain on the accumulators -------------

// The chain after the folded batchnorms for one (n, c) plane, applied to the accumulators of a
// row chunk before the store (simd::dw_chunk): batchnorm with this channel's scalars, a binary
// operand read along the plane (or broadcast), an activation on the registers.
template <class Arch>
struct DwPlaneEpi {
  struct Step {
    PostOp::Kind kind = PostOp::Kind::activation;
    BinaryKind binary = BinaryKind::add;
    Activation act;
    const float* p = nullptr;                   // binary: the operand at this plane's pixel 0
    i64 cs = 0;                                 // binary: 1 along the plane's pixels, 0 one value for the plane
    float mean = 0.f, mult = 0.f, shift = 0.f;  // batchnorm, this channel's
  };
  int n = 0;
  Step steps[kEpiMaxSteps];

  DwPlaneEpi(const ChainEpilogue& epi, const i64* image_stride, i64 img, i64 c) {
    for (int s = 0; s < epi.n; ++s) {
      const EpiStep& e = epi.steps[s];
      Step& st = steps[n++];
      st.kind = e.kind;
      st.binary = e.binary;
      st.act = e.act;
      if (e.kind == PostOp::Kind::batchnorm) {  // channel_rows view: one value per row (channel)
        st.mean = e.p0[c * e.rs], st.mult = e.p1[c * e.rs], st.shift = e.p2[c * e.rs];
      } else if (e.kind == PostOp::Kind::binary) {
        st.p = e.p0 + c * e.rs + img * image_stride[s];
        st.cs = e.cs;
      }
    }
  }

  // acc holds outputs pix .. pix + valid - 1 of the plane; with `whole` all NV vectors lie inside
  // the plane, so an operand along the plane may be read in full vectors too.
  template <class B, int NV>
  void operator()(B (&acc)[NV], i64 pix, i64 valid, bool whole) const {
    constexpr i64 W = B::size;
    for (int s = 0; s < n; ++s) {
      const Step& st = steps[s];
      if (st.kind == PostOp::Kind::batchnorm) {
        const B m(st.mean), k(st.mult), h(st.shift);
        for (int v = 0; v < NV; ++v) acc[v] = xsimd::fma(acc[v] - m, k, h);
      } else if (st.kind == PostOp::Kind::binary) {
        for (int v = 0; v < NV; ++v) {
          B o;
          if (st.cs == 0) {
            o = B(st.p[0]);
          } else if (whole || (v + 1) * W <= valid) {
            o = B::load_unaligned(st.p + pix + v * W);
          } else {  // the row's last vector at the plane's end: nothing past `valid` is read
            alignas(64) float t[W] = {};
            for (i64 l = 0; l < valid - v * W; ++l) t[l] = st.p[pix + v * W + l];
            o = B::load_aligned(t);
          }
          acc[v] = simd::binary_op<Arch>(st.binary, acc[v], o);
        }
      } else {
        simd::with_act_kind(st.act.kind, [&](auto kind) {
          constexpr ActKind K = decltype(kind)::value;
          for (int v = 0; v < NV; ++v) acc[v] = simd::activate_k<K, Arch>(st.act, acc[v]);
        });
      }
    }
  }
};

// The common case, MobileNet's dw + BN + ReLU6: after folding, the chain is one activation,
// applied with its kind fixed for the whole call (the general map above dispatches on the kind
// per row chunk, and its accumulators went through the stack).
template <class Arch, ActKind K>
struct DwActEpi {
  Activation act;
  template <class B, int NV>
  void operator()(B (&acc)[NV], i64, i64, bool) const {
    for (int v = 0; v < NV; ++v) acc[v] = simd::activate_k<K, Arch>(act, acc[v]);
  }
};

struct DepthwiseState {
  simd::DwState dw;     // tap offsets and one phase-split plane per thread
  bool folded = false;  // sc and bi from bound weights, bias and batchnorms
  Floats sc, bi;        // per channel: the folded batchnorm scale and bias (bias included)
  std::vector<Floats> mults;
};

template <class Arch>
std::size_t ConvDepthwise::workspace(Arch, const OpDesc& desc) {
  const i64 K = desc.inputs[1].shape[0];
  return static_cast<std::size_t>(16 + 2 * gemm_round_up(K, 16) + epilogue_ws(desc.p<Conv2dParams>(), K));
}

template <class Arch>
Status ConvDepthwise::prepare(Arch, const OpDesc& desc, const Context& ctx, const Tensor* const* constants,
                              std::shared_ptr<void>& state) {
  auto st = std::make_shared<DepthwiseState>();
  const simd::ConvGeom g = simd::conv_geom(desc);
  simd::dw_prepare_planes<Arch>(g, ctx.threads, &st->dw);
  if (fold_bound(desc, constants)) {
    st->sc = alloc_floats(static_cast<std::size_t>(g.K));
    st->bi = alloc_floats(static_cast<std::size_t>(g.K));
    fold_scales(desc, g.K, constants, st->sc.get(), st->bi.get());
    st->folded = true;
  }
  st->mults = bound_mults(desc, constants);
  state = std::move(st);
  return Status::ok();
}

template <class Arch>
void ConvDepthwise::operator()(Arch, const KernelArgs& args) const {
  const OpDesc& d = *args.desc;
  auto* st = static_cast<DepthwiseState*>(args.state);
  const simd::ConvGeom g = simd::conv_geom(d);
  float* ws0 = args.workspace + (16 - reinterpret_cast<std::uintptr_t>(args.workspace) / sizeof(float) % 16) % 16;
  Carver cv{ws0};
  float* wss = cv.take(g.K);
  float* wsb = cv.take(g.K);
  float* wse = cv.take(epilogue_ws(d.p<Conv2dParams>(), g.K));
  const float* sc = st->sc.get();
  const float* bi = st->bi.get();
  if (!st->folded) {
    fold_scales(d, g.K, args.in, wss, wsb);
    sc = wss;
    bi = wsb;
  }
  const ChainEpilogue epi = make_epilogue(d, geom(d), args.in, &st->mults, wse, ConvView::channel_rows);
  i64 image_stride[kEpiMaxSteps] = {};
  epilogue_image_strides(d, epi, image_stride);
  const float* w = args.in[1]->data();
  const i64 taps = g.R * g.S, S = g.S;
  const std::array<i64, kMaxRank> ws = g.ws;
  const auto setup = [=](i64, i64 c, float* wt) {  // the folded taps w * sc[c] and bias bi[c]
    for (i64 t = 0; t < taps; ++t) wt[t] = w[c * ws[0] + (t / S) * ws[2] + (t % S) * ws[3]] * sc[c];
    return bi[c];
  };
  const auto run = [&](auto epi_of) {
    simd::dw_nchw_run<Arch>(g, &st->dw, args.in[0]->data(), args.out[0]->mutable_data(), args.threads, setup, epi_of,
                            [](i64, i64, float*, i64, i64) {});
  };
  if (epi.n == 1 && epi.steps[0].kind == PostOp::Kind::activation) {
    const Activation act = epi.steps[0].act;
    simd::with_act_kind(
        act.kind, [&](auto kind) { run([act](i64, i64) { return DwActEpi<Arch, decltype(kind)::value>{act}; }); });
  } else {
    run([&](i64 n, i64 c) { return DwPlaneEpi<Arch>(epi, image_stride, n, c); });
  }
}

OPFUSE_SIMD_INSTANTIATE_PREPARED(ConvDepthwise);

}  // namespace opfuse::fused
