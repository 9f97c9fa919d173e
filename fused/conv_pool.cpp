// fused/conv_pool.cpp - conv2d with a pool post-op (conv + bn + relu + maxpool 3x3/2, the ResNet
// stem) without ever writing the convolution's output.
//
// naive: the seven-loop conv into a workspace tensor (N, K, P, Q), batchnorm and relu as full
//        passes over it, then naive maxpool2d's window loop from it into y (naive/conv.cpp).
// simd:  the best simd conv2d kernel (bn/relu as its per-tile post-op chain) writes the whole
//        conv output to the workspace - 3.2 MB for the stem, NCHW, so transposed from its
//        NHWC tiles first - then the simd maxpool2d kernel reads it all back
//        (simd/conv_pool.cpp).
// fused: one pass. Threads split the pooled output rows. Each thread computes the conv rows
//        its pooled rows need, one at a time, with the leading batchnorms already folded into
//        the weights and bias at prepare and the rest of the chain (relu, ...) on the
//        accumulators, into a rolling ring of kernel_h rows; as soon as a pooled row's window
//        of conv rows is in the ring, its max goes to y. So the per-thread working set is
//        ~100 KB (L2) and the conv output never reaches memory: y (0.8 MB) is the only store
//        stream. Conv rows two pooled rows share are computed once (the ring keeps them); with
//        stride > kernel the rows no window reads are never computed. Two ways to a conv row:
//        - small-C (x with at most 4 channels, the RGB stems, and a 3-wide stride-2 pool
//          width window; smallc_run): simd's small-C tile (pixels in lanes, from phase-split
//          copies of x's planes; NHWC rows split by channel first) writes the row NCHW (K x Q);
//          the pooled row is the max over the ring rows, split into even and odd columns so
//          that every stride-2 window is three contiguous loads, stored straight into NCHW y
//          (NHWC y: transposed from the L1-resident pooled row).
//        - any other (run): a register tile of MR pixels x NV vectors of output channels
//          (channels in lanes, like simd's nhwc_direct) over a zero-padded NHWC copy of x
//          lands in a one-row NHWC buffer, which is max-pooled along its width straight away
//          into the ring; the column max over the window's ring rows goes to y (through a
//          register transpose, simd/transpose.hpp, for NCHW y). On AVX-512 the 7 pixels x 4
//          zmm tile is inline assembly with embedded-broadcast FMAs (see tile_avx512_7x4: the
//          one place this file leaves xsimd, and why).
//        Max is NaN-propagating, naive's rule (nan_max).
//
// Measured: the ResNet-50 stem, the opfuse-bench case
// conv2d/<impl>/n1_c3_h224_w224_k64_r7_s2_p3+bn+relu+maxpool3s2p1 (x 1x3x224x224 NCHW, w 64x3x7x7
// stride 2 pad 3, + bn + relu + maxpool 3x3/2 pad 1 -> y 1x64x56x56; weights not bound at
// prepare), fused / simd / oneDNN at one and two threads, is in reports/REPORT.md (conv2d, and
// reports/avx2/ at AVX2), next to the same convolution without the pool (..._p3+bn+relu); or
// run `opfuse-bench --op conv2d [--isa avx2]`. The difference between the two cases is what
// the pool costs: simd's pool pass reads the 3.2 MB conv output back, oneDNN's is cheap (it
// pools in its blocked layout), and this kernel has no such pass. Most of the time is the FMA
// loop; the pool and the copy of x into the planes take a few percent (perf).
#include <algorithm>
#include <cassert>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <type_traits>
#include <vector>

#include "fused/conv_pool.hpp"
#include "simd/activation.hpp"
#include "simd/common.hpp"
#include "simd/conv_kernel.hpp"
#include "simd/transpose.hpp"

namespace opfuse::fused {
inline namespace OPFUSE_SIMD_NS {

using simd::fbatch;
using i64 = std::int64_t;

constexpr i64 round_up(i64 v, i64 m) { return (v + m - 1) / m * m; }

// Register tiles: MR output pixels x NV vectors of output channels.
template <class Arch>
struct Tile;
template <>
struct Tile<avx512> {  // 32 zmm: 7 x 4 = 28 accumulators, 4 weight vectors; x broadcast from memory
  static int nv(i64 K) { return K > 32 ? 4 : (K > 16 ? 2 : 1); }
  template <int NV>
  static constexpr int mr() {
    return NV == 4 ? 7 : (NV == 2 ? 12 : 14);
  }
};
template <>
struct Tile<avx2> {  // 16 ymm: 6 x 2 = 12 accumulators
  static int nv(i64 K) { return K > 8 ? 2 : 1; }
  template <int NV>
  static constexpr int mr() {
    return NV == 2 ? 6 : 8;
  }
};
template <>
struct Tile<sse2> {
  static int nv(i64 K) { return K > 4 ? 2 : 1; }
  template <int NV>
  static constexpr int mr() {
    return NV == 2 ? 6 : 8;
  }
};

template <class Arch>
i64 block_of(const ConvPoolGeom& g) {
  return Tile<Arch>::nv(g.K) * static_cast<i64>(fbatch<Arch>::size);
}

// A stem (few input channels, NCHW or NHWC) with the ResNet pool's width window (3 wide,
// stride 2, left pad 0 or 1) takes the small-C path (smallc_run, below) at every ISA: its
// pixels-in-lanes tile keeps the FMA pipes busier than the channels-in-lanes tiles of the other
// path (the AVX2 6 x 2 xsimd tile, and even the AVX-512 7 x 4 assembly one), and its NCHW rows
// pool into NCHW y without a transpose (A/B in the commits that added it and its NHWC form).
template <class Arch>
bool smallc_path(const ConvPoolGeom& g) {
  return g.C <= simd::kSmallC && g.kw == 3 && g.psw == 2 && (g.ppl == 0 || g.ppl == 1);
}

// Output channels per packed weight block: the small-C kernel's, or the register tile's.
template <class Arch>
i64 pack_block(const ConvPoolGeom& g) {
  return smallc_path<Arch>(g) ? simd::kSmallKC : block_of<Arch>(g);
}

// Per-thread scratch: one conv row (Q x Kp, NHWC), the ring of kernel_h width-pooled rows
// (PQ x Kp each), one pooled row for the NCHW transpose (PQ x Kp).
struct RowBuffers {
  i64 crow, ring_row, prow, total;
};
inline RowBuffers scratch_layout(const ConvPoolGeom& g, i64 Kp) {
  RowBuffers l{};
  l.crow = round_up(g.Q * Kp, 16);
  l.ring_row = round_up(g.PQ * Kp, 16);
  l.prow = round_up(g.PQ * Kp, 16);
  l.total = l.crow + g.kh * l.ring_row + l.prow;
  return l;
}

struct State {
  bool packed = false;  // weights, bias and epilogue vectors folded at prepare
  std::unique_ptr<float, decltype(&std::free)> params{nullptr, &std::free};
  std::unique_ptr<float, decltype(&std::free)> scratch{nullptr, &std::free};
  i64 per_thread = 0;
  int slots = 1;
  simd::DwState dw;  // the small-C path: tap offsets and C phase-split planes per thread
};

// The epilogue steps after the folded batchnorms: activation, or a per-channel batchnorm
// (y - mean) * mult + shift with its vectors in the params block.
struct Epilogue {
  int n = 0;
  bool bn[kConvPoolMaxSteps] = {};
  Activation act[kConvPoolMaxSteps];
  const float* vec[kConvPoolMaxSteps] = {};  // mean; mult at +Kp, shift at +2 Kp
  i64 Kp = 0;
};

// naive: if (v > max || isnan(v)) max = v. MAXPS(v, m) (xsimd::max) returns its second operand
// when either is NaN and on equal values, so it keeps a NaN m and gives naive's lane everywhere
// but a NaN v, which the select then takes: three instructions where the compare-or-select
// form took four. xsimd::isnan, not v != v: xsimd 8 compiles != to an ordered compare on
// AVX/AVX-512 (false for NaN).
template <class Arch>
inline fbatch<Arch> nan_max(fbatch<Arch> m, fbatch<Arch> v) {
  return xsimd::select(xsimd::isnan(v), v, xsimd::max(v, m));
}

// The epilogue steps on one vector of output channels [k, k + W): by value, so that the
// accumulator array never has its address taken and stays in registers.
template <class Arch>
inline fbatch<Arch> epilogue(const Epilogue& ep, fbatch<Arch> v, i64 k) {
  using B = fbatch<Arch>;
  for (int st = 0; st < ep.n; ++st) {
    if (ep.bn[st]) {
      const float* mean = ep.vec[st] + k;
      v = xsimd::fma(v - B::load_aligned(mean), B::load_aligned(mean + ep.Kp), B::load_aligned(mean + 2 * ep.Kp));
    } else {
      v = simd::activate<Arch>(ep.act[st], v);
    }
  }
  return v;
}

#if defined(__AVX512F__)
// The AVX-512 7 x 4 tile (7 pixels x 64 output channels, 28 zmm accumulators + 4 zmm weights =
// all 32 registers) in inline assembly, because GCC cannot be made to emit it from intrinsics
// or xsimd: it materializes every input broadcast in a register (vbroadcastss, which competes
// with the FMAs for the vector pipes and leaves no room for a 7th pixel) and spills the
// accumulator array as soon as an FMA is an asm statement. Here each FMA takes its input as an
// embedded {1to16} broadcast memory operand, as oneDNN's JIT emits it. Measured on the stem's
// tile loop alone (112 rows x 16 tiles x 147 taps = 7.4M FMAs, 1 thread), it issues about one
// zmm FMA per cycle, the peak, where the xsimd 6 x 4 tile took markedly longer.
// Loops: window rows (R, pointers advance by row_adv bytes after the last tap column), tap
// columns (taps, advance by col_step bytes), contiguous channels (chans, 4 bytes apart). The
// accumulators start from `bias` (64 floats) and end in `out` (28 x 16 floats, pixel-major).
inline void tile_avx512_7x4(const float* const* xs, const float* w, const float* bias, std::int64_t R,
                            std::int64_t taps, std::int64_t chans, std::int64_t col_step_bytes,
                            std::int64_t row_adv_bytes, float* out) {
  const float *p0 = xs[0], *p1 = xs[1], *p2 = xs[2], *p3 = xs[3], *p4 = xs[4], *p5 = xs[5], *p6 = xs[6];
  const std::int64_t chans_bytes = chans * 4;
  std::int64_t rcnt = R, scnt = 0, idx = 0;
  asm volatile(
      "vmovaps 0(%[b]), %%zmm0\n\t"
      "vmovaps 64(%[b]), %%zmm1\n\t"
      "vmovaps 128(%[b]), %%zmm2\n\t"
      "vmovaps 192(%[b]), %%zmm3\n\t"
#define OPFUSE_COPY4(a, b, c, d)                                                           \
  "vmovaps %%zmm0, %%zmm" #a "\n\tvmovaps %%zmm1, %%zmm" #b "\n\tvmovaps %%zmm2, %%zmm" #c \
  "\n\tvmovaps %%zmm3, %%zmm" #d "\n\t"
      OPFUSE_COPY4(4, 5, 6, 7) OPFUSE_COPY4(8, 9, 10, 11) OPFUSE_COPY4(12, 13, 14, 15) OPFUSE_COPY4(16, 17, 18, 19)
      OPFUSE_COPY4(20, 21, 22, 23) OPFUSE_COPY4(24, 25, 26, 27)
#undef OPFUSE_COPY4
      "1:\n\t"  // window row
      "mov %[taps], %[scnt]\n\t"
      "2:\n\t"  // tap column
      "xor %[idx], %[idx]\n\t"
      "3:\n\t"  // channel
      "vmovaps 0(%[w]), %%zmm28\n\t"
      "vmovaps 64(%[w]), %%zmm29\n\t"
      "vmovaps 128(%[w]), %%zmm30\n\t"
      "vmovaps 192(%[w]), %%zmm31\n\t"
#define OPFUSE_FMA4(p, a, b, c, d)                             \
  "vfmadd231ps (%[" #p "],%[idx])%{1to16%}, %%zmm28, %%zmm" #a \
  "\n\t"                                                       \
  "vfmadd231ps (%[" #p "],%[idx])%{1to16%}, %%zmm29, %%zmm" #b \
  "\n\t"                                                       \
  "vfmadd231ps (%[" #p "],%[idx])%{1to16%}, %%zmm30, %%zmm" #c \
  "\n\t"                                                       \
  "vfmadd231ps (%[" #p "],%[idx])%{1to16%}, %%zmm31, %%zmm" #d "\n\t"
      OPFUSE_FMA4(p0, 0, 1, 2, 3) OPFUSE_FMA4(p1, 4, 5, 6, 7) OPFUSE_FMA4(p2, 8, 9, 10, 11)
      OPFUSE_FMA4(p3, 12, 13, 14, 15) OPFUSE_FMA4(p4, 16, 17, 18, 19) OPFUSE_FMA4(p5, 20, 21, 22, 23)
      OPFUSE_FMA4(p6, 24, 25, 26, 27)
#undef OPFUSE_FMA4
      "add $256, %[w]\n\t"
      "add $4, %[idx]\n\t"
      "cmp %[cb], %[idx]\n\t"
      "jl 3b\n\t"
#define OPFUSE_ADV(step)                                                                                  \
  "add " step ", %[p0]\n\tadd " step ", %[p1]\n\tadd " step ", %[p2]\n\tadd " step ", %[p3]\n\tadd " step \
  ", %[p4]\n\tadd " step ", %[p5]\n\tadd " step ", %[p6]\n\t"
      OPFUSE_ADV("%[cs]")
      "dec %[scnt]\n\t"
      "jnz 2b\n\t"
      OPFUSE_ADV("%[ra]")
#undef OPFUSE_ADV
      "dec %[rcnt]\n\t"
      "jnz 1b\n\t"
#define OPFUSE_STORE4(a, b, c, d, off)                                                                          \
  "vmovaps %%zmm" #a ", " #off "(%[o])\n\tvmovaps %%zmm" #b ", " #off "+64(%[o])\n\tvmovaps %%zmm" #c ", " #off \
  "+128(%[o])\n\tvmovaps %%zmm" #d ", " #off "+192(%[o])\n\t"
      OPFUSE_STORE4(0, 1, 2, 3, 0) OPFUSE_STORE4(4, 5, 6, 7, 256) OPFUSE_STORE4(8, 9, 10, 11, 512)
      OPFUSE_STORE4(12, 13, 14, 15, 768) OPFUSE_STORE4(16, 17, 18, 19, 1024) OPFUSE_STORE4(20, 21, 22, 23, 1280)
      OPFUSE_STORE4(24, 25, 26, 27, 1536)
#undef OPFUSE_STORE4
      : [w] "+r"(w), [p0] "+r"(p0), [p1] "+r"(p1), [p2] "+r"(p2), [p3] "+r"(p3), [p4] "+r"(p4), [p5] "+r"(p5),
        [p6] "+r"(p6), [rcnt] "+r"(rcnt), [scnt] "+r"(scnt), [idx] "+r"(idx)
      : [b] "r"(bias), [o] "r"(out), [taps] "m"(taps), [cb] "m"(chans_bytes), [cs] "m"(col_step_bytes),
        [ra] "m"(row_adv_bytes)
      : "memory", "cc", "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9", "xmm10",
        "xmm11", "xmm12", "xmm13", "xmm14", "xmm15", "xmm16", "xmm17", "xmm18", "xmm19", "xmm20", "xmm21", "xmm22",
        "xmm23", "xmm24", "xmm25", "xmm26", "xmm27", "xmm28", "xmm29", "xmm30", "xmm31");
}
#endif

// One register tile of one conv row: MR pixels (window corners xs[i] in the padded NHWC image)
// x NV vectors of output channels, over the whole window; then the epilogue on the
// accumulators; stored to ys[i] (nullptr: a tail pixel recomputed only to fill the tile).
template <class Arch, int MR, int NV>
void conv_tile(const float* const* xs, const float* w, const float* bias, const ConvPoolGeom& g, i64 row_step,
               i64 col_step, const Epilogue& ep, i64 k0, float* const* ys) {
  using B = fbatch<Arch>;
  constexpr int Wd = static_cast<int>(B::size);
  // With dilation 1 a window row's (s, c) taps are contiguous in the padded image, so they are
  // one reduction of S*C (the stem: 21 instead of 7 loops of 3).
  i64 taps = g.S, chans = g.C;
  if (col_step == g.C) taps = 1, chans = g.S * g.C;
#if defined(__AVX512F__)
  if constexpr (std::is_same_v<Arch, avx512> && MR == 7 && NV == 4) {
    alignas(64) float out[MR * NV * Wd];
    tile_avx512_7x4(xs, w, bias, g.R, taps, chans, col_step * 4, (row_step - taps * col_step) * 4, out);
    for (int i = 0; i < MR; ++i)
      if (ys[i])
        for (int v = 0; v < NV; ++v)
          epilogue<Arch>(ep, B::load_aligned(out + (i * NV + v) * Wd), k0 + v * Wd).store_aligned(ys[i] + v * Wd);
    return;
  }
#endif
  B acc[MR][NV];
  for (int v = 0; v < NV; ++v) {
    const B b = B::load_aligned(bias + v * Wd);
    for (int i = 0; i < MR; ++i) acc[i][v] = b;
  }
  for (i64 r = 0; r < g.R; ++r) {
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
  // The rest of the chain on the accumulators, then one store per vector.
  for (int i = 0; i < MR; ++i)
    if (ys[i])
      for (int v = 0; v < NV; ++v) epilogue<Arch>(ep, acc[i][v], k0 + v * Wd).store_aligned(ys[i] + v * Wd);
}

// Conv row p of image n (all output channels, after the epilogue) into crow (Q x Kp, NHWC).
template <class Arch, int NV>
void conv_row(const ConvPoolGeom& g, const float* xp, const float* wp, const float* bias, const Epilogue& ep, i64 n,
              i64 p, float* crow) {
  constexpr int MR = Tile<Arch>::template mr<NV>();
  const i64 KB = NV * static_cast<i64>(fbatch<Arch>::size), Kp = ep.Kp, nkb = Kp / KB;
  const i64 C = g.C, row_step = g.dh * g.Wp * C, col_step = g.dw * C;
  const i64 wblock = g.R * g.S * C * KB;
  const float* xrow = xp + (n * g.Hp + p * g.sh) * g.Wp * C;
  const i64 ntiles = (g.Q + MR - 1) / MR;
  for (i64 kb = 0; kb < nkb; ++kb) {
    const float* wk = wp + kb * wblock;
    for (i64 t = 0; t < ntiles; ++t) {
      const float* xs[MR];
      float* ys[MR];
      for (int i = 0; i < MR; ++i) {
        i64 q = t * MR + i;
        const bool real = q < g.Q;
        if (!real) q = g.Q - 1;
        xs[i] = xrow + q * g.sw * C;
        ys[i] = real ? crow + q * Kp + kb * KB : nullptr;
      }
      conv_tile<Arch, MR, NV>(xs, wk, bias + kb * KB, g, row_step, col_step, ep, kb * KB, ys);
    }
  }
}

// Width pooling of one conv row: ring row qo = max over conv columns of window qo.
template <class Arch>
void pool_width(const ConvPoolGeom& g, i64 Kp, const float* crow, float* out) {
  using B = fbatch<Arch>;
  constexpr i64 Wd = B::size;
  for (i64 qo = 0; qo < g.PQ; ++qo) {
    const i64 c0 = qo * g.psw - g.ppl, a = std::max<i64>(c0, 0), e = std::min(g.Q, c0 + g.kw);
    for (i64 v = 0; v < Kp; v += Wd) {
      B m = B::load_aligned(crow + a * Kp + v);
      for (i64 c = a + 1; c < e; ++c) m = nan_max<Arch>(m, B::load_aligned(crow + c * Kp + v));
      m.store_aligned(out + qo * Kp + v);
    }
  }
}

// Height pooling: pixel qo of out (ldo floats apart, its first kw channels written) = the max
// over pixel qo of the window's nr ring rows src[0 .. nr), vector by vector. A function of
// values: written inline in run's row loop, the ring slot p % kh was a 64-bit division per
// vector and the captured sizes were reloaded after every store, and this pass took several
// percent of the ResNet stem at AVX2 (perf).
template <class Arch>
void pool_height(const float* const* src, i64 nr, i64 PQ, i64 Kp, i64 kw, float* out, i64 ldo) {
  using B = fbatch<Arch>;
  constexpr i64 Wd = B::size;
  for (i64 qo = 0; qo < PQ; ++qo) {
    const i64 at = qo * Kp;
    float* dst = out + qo * ldo;
    for (i64 v = 0; v < kw; v += Wd) {
      B m = B::load_aligned(src[0] + at + v);
      for (i64 i = 1; i < nr; ++i) m = nan_max<Arch>(m, B::load_aligned(src[i] + at + v));
      simd::store_partial<Arch>(dst + v, m, kw - v);
    }
  }
}

// The epilogue steps of a call: the chain between the folded batchnorms and the pool, later
// batchnorms' vectors after the bias (conv_pool_fold_pack).
inline Epilogue epilogue_of(const KernelArgs& args, const ConvPoolGeom& g, const float* bias, i64 Kp) {
  Epilogue ep;
  ep.Kp = Kp;
  const auto& post = args.desc->p<Conv2dParams>().post_ops;
  ep.n = g.nsteps;
  for (int i = 0; i < g.nsteps; ++i) {
    const PostOp& op = post[static_cast<std::size_t>(g.nfold + i)];
    ep.bn[i] = op.kind == PostOp::Kind::batchnorm;
    ep.act[i] = op.act;
    ep.vec[i] = bias + Kp + 3 * Kp * i;
  }
  return ep;
}

// Pooled rows [b, e) of all images, in order, over a ring of kernel_h conv rows ring_row floats
// apart: conv_row(n, p, slot) computes conv row p of image n into a ring slot unless the ring
// already holds it (shared with the previous pooled row), then pool(n, po, src, nr) reduces the
// window's nr ring rows src[]. The window's conv rows are consecutive, so their slots p % kh are
// distinct.
template <class ConvRow, class Pool>
void walk_pooled_rows(const ConvPoolGeom& g, i64 b, i64 e, float* ring, i64 ring_row, ConvRow&& conv_row, Pool&& pool) {
  i64 tag[64];  // conv row (n * P + p) held by each ring slot; kh <= 64 (see supports)
  for (i64 s = 0; s < g.kh; ++s) tag[s] = -1;
  for (i64 row = b; row < e; ++row) {
    const i64 n = row / g.PP, po = row % g.PP;
    const i64 r0 = po * g.psh - g.ppt, ra = std::max<i64>(r0, 0), re = std::min(g.P, r0 + g.kh);
    for (i64 p = ra; p < re; ++p) {
      const i64 slot = p % g.kh;
      if (tag[slot] == n * g.P + p) continue;
      conv_row(n, p, ring + slot * ring_row);
      tag[slot] = n * g.P + p;
    }
    const float* src[64];  // one per window row; kh <= 64 (see supports)
    for (i64 p = ra; p < re; ++p) src[p - ra] = ring + (p % g.kh) * ring_row;
    pool(n, po, src, re - ra);
  }
}

template <class Arch, int NV>
void run(const KernelArgs& args, const ConvPoolGeom& g, const float* xp, const float* params, const State& st) {
  using B = fbatch<Arch>;
  constexpr i64 Wd = B::size;
  const i64 KB = NV * Wd, Kp = round_up(g.K, KB);
  const float* wp = params;
  const float* bias = wp + Kp * g.R * g.S * g.C;
  const Epilogue ep = epilogue_of(args, g, bias, Kp);
  const RowBuffers sl = scratch_layout(g, Kp);
  float* y = args.out[0]->mutable_data();
  const i64 rows = g.N * g.PP;  // pooled rows of all images
  const auto work = [&](i64 b, i64 e, float* scratch) {
    float* crow = scratch;
    float* ring = crow + sl.crow;
    float* prow = ring + g.kh * sl.ring_row;
    const auto conv = [&](i64 n, i64 p, float* slot_row) {
      conv_row<Arch, NV>(g, xp, wp, bias, ep, n, p, crow);
      pool_width<Arch>(g, Kp, crow, slot_row);
    };
    // Height pooling over the window's ring rows, straight into y (NHWC) or into the pooled row
    // buffer (NCHW).
    const auto pool = [&](i64 n, i64 po, const float* const* src, i64 nr) {
      if (g.x_nhwc) {
        pool_height<Arch>(src, nr, g.PQ, Kp, g.K, y + (n * g.PP + po) * g.PQ * g.K, g.K);
      } else {
        pool_height<Arch>(src, nr, g.PQ, Kp, round_up(g.K, Wd), prow, Kp);
        // (PQ x Kp) -> y[n][k][po][:], out of the L1-resident pooled row.
        const i64 plane = g.PP * g.PQ;
        float* yrow = y + n * g.K * plane + po * g.PQ;
        simd::transpose_2d<Arch>(prow, Kp, yrow, plane, g.PQ, g.K);  // W x W blocks through registers
      }
    };
    walk_pooled_rows(g, b, e, ring, sl.ring_row, conv, pool);
  };
  simd::parallel_tid(rows, std::min(simd::team_size(args.threads), st.slots), 1,
                     [&](int id, i64 b, i64 e) { work(b, e, st.scratch.get() + id * st.per_thread); });
}

// ---- the small-C path (smallc_path) -----------------------------------------------------------
// simd's small-C tile (simd/conv_kernel.hpp: x copied into phase-split padded planes, a tile of
// KT output channels x up to 3 vectors of an output row) computes each conv row into a ring slot
// laid out NCHW (K rows of Qr floats); the epilogue steps run on the tile's accumulators. A
// pooled row then takes, per channel, the max over its window's ring rows vector by vector
// (pixels in lanes), splits it into even and odd conv columns (simd::even_odd), and the
// stride-2 width window is three contiguous loads: columns 2q-1, 2q, 2q+1 are O[q-1], E[q],
// O[q] (left pad 1; E[q], O[q], E[q+1] with no pad). Columns past Q, and O[-1], hold -inf,
// which no max ever picks over a real value, so clipped windows need no bounds.

// The common chain after the folded batchnorms, one activation, runs as simd::ActMap: its kind
// fixed for the call (simd::activate switches per vector in an out-of-line call, around which
// the tile's accumulators were spilled).

// Any other chain, on a small-C tile whose rows are output channels k0 .. k0 + KT - 1.
template <class Arch>
struct SmallcEpi {
  const Epilogue* ep;
  i64 k0;
  template <class B, int KT, int NV>
  void operator()(B (&acc)[KT][NV], i64, i64) const {
    for (int st = 0; st < ep->n; ++st) {
      if (ep->bn[st]) {
        const float* mean = ep->vec[st] + k0;
        for (int u = 0; u < KT; ++u) {
          const B m(mean[u]), mult(mean[ep->Kp + u]), shift(mean[2 * ep->Kp + u]);
          for (int v = 0; v < NV; ++v) acc[u][v] = xsimd::fma(acc[u][v] - m, mult, shift);
        }
      } else {
        for (int u = 0; u < KT; ++u)
          for (int v = 0; v < NV; ++v) acc[u][v] = simd::activate<Arch>(ep->act[st], acc[u][v]);
      }
    }
  }
};

// Per-thread scratch of the small-C path: kh ring rows of K x Qr floats, E and O, and for NHWC
// the pooled row (K x PQr, transposed into y) and one input row split by channel
// (simd::SmallcRows).
struct SmallcBuffers {
  i64 Qr, ring_row, eo, PQr, total;
};
template <class Arch>
SmallcBuffers smallc_layout(const ConvPoolGeom& g) {
  constexpr i64 Wd = fbatch<Arch>::size;
  SmallcBuffers l{};
  l.Qr = round_up(g.Q, 2 * Wd);
  l.ring_row = round_up(g.K * l.Qr, 16);
  // E[0 .. L) and O[-Wd .. L): the width pass reads up to index PQ rounded up to Wd.
  l.eo = round_up(std::max(l.Qr / 2, round_up(g.PQ, Wd) + 1) + Wd, 16);
  l.PQr = round_up(g.PQ, 16);
  l.total = g.kh * l.ring_row + 2 * l.eo + (g.x_nhwc ? g.K * l.PQr + simd::smallc_rows(g).total : 0);
  return l;
}

// Weights packed [kb][r][s][c][KB] (conv_pool_fold_pack) -> [kb][c][r][s][KB], the small-C
// tile's order; the bias and epilogue vectors after them copied as they are.
inline void smallc_reorder(const ConvPoolGeom& g, const float* src, float* dst) {
  const i64 KB = simd::kSmallKC, Kp = round_up(g.K, KB), taps = g.R * g.S;
  for (i64 kb = 0; kb < Kp / KB; ++kb)
    for (i64 t = 0; t < taps; ++t)
      for (i64 c = 0; c < g.C; ++c)
        std::memcpy(dst + ((kb * g.C + c) * taps + t) * KB, src + ((kb * taps + t) * g.C + c) * KB,
                    static_cast<std::size_t>(KB) * sizeof(float));
  const i64 wfloats = Kp * taps * g.C;
  std::memcpy(dst + wfloats, src + wfloats,
              (conv_pool_params_floats(g, KB) - static_cast<std::size_t>(wfloats)) * sizeof(float));
}

// One pooled row: the height max over the window's nr ring rows src[], then the stride-2 width
// window from the even / odd split; channel k's PQ outputs go to dst + k * ld_k.
template <class Arch>
void smallc_pool(const ConvPoolGeom& g, const SmallcBuffers& sl, const float* const* src, i64 nr, float* e_buf,
                 float* o_buf, float* dst, i64 ld_k) {
  using B = fbatch<Arch>;
  constexpr i64 Wd = B::size;
  float* odd = o_buf + Wd;  // odd[-1] stays -inf
  for (i64 k = 0; k < g.K; ++k) {
    const i64 at = k * sl.Qr;
    for (i64 j = 0; j < sl.Qr; j += 2 * Wd) {
      B lo = B::load_aligned(src[0] + at + j), hi = B::load_aligned(src[0] + at + j + Wd);
      for (i64 i = 1; i < nr; ++i) {
        lo = nan_max<Arch>(lo, B::load_aligned(src[i] + at + j));
        hi = nan_max<Arch>(hi, B::load_aligned(src[i] + at + j + Wd));
      }
      B ev, od;
      simd::even_odd<Arch>(lo, hi, ev, od);
      ev.store_aligned(e_buf + j / 2);
      od.store_aligned(odd + j / 2);
    }
    float* yrow = dst + k * ld_k;
    for (i64 q = 0; q < g.PQ; q += Wd) {
      B m = nan_max<Arch>(B::load_aligned(e_buf + q), B::load_aligned(odd + q));
      m = nan_max<Arch>(m, g.ppl ? B::load_unaligned(odd + q - 1) : B::load_unaligned(e_buf + q + 1));
      simd::store_partial<Arch>(yrow + q, m, g.PQ - q);
    }
  }
}

template <class Arch, class EpiOf>
void smallc_run(const KernelArgs& args, const ConvPoolGeom& g, const float* wp, const float* bias, const State& st,
                const EpiOf& epi_of) {
  const SmallcBuffers sl = smallc_layout<Arch>(g);
  const simd::DwPlane pl = simd::dw_plane<Arch>(g);
  const float* x = args.in[0]->data();
  float* y = args.out[0]->mutable_data();
  const i64 rows = g.N * g.PP, pf = st.dw.plane_floats;
  const auto work = [&](i64 b, i64 e, float* scratch, float* planes) {
    float* ring = scratch;
    float* e_buf = ring + g.kh * sl.ring_row;
    float* o_buf = e_buf + sl.eo;
    float* prow = o_buf + sl.eo;        // NHWC only
    float* xrow = prow + g.K * sl.PQr;  // NHWC only
    i64 filled_n = -1, filled_hi = 0;   // the planes hold image filled_n's rows [.., filled_hi)
    const auto conv = [&](i64 n, i64 p, float* slot_row) {
      // The input rows conv row p reads, inside the image; a thread's rows come in order.
      const i64 h0 = std::max<i64>(0, p * g.sh - g.pt);
      const i64 h1 = std::min(g.H, p * g.sh - g.pt + (g.R - 1) * g.dh + 1);
      const i64 from = filled_n == n ? std::max(h0, filled_hi) : h0;
      if (from < h1) {  // NHWC rows are split by channel first, into xrow
        simd::smallc_fill<Arch>(g, pl, x, n, from, h1, planes, pf, xrow);
        filled_n = n, filled_hi = h1;
      }
      // Conv row p, all K channels after the epilogue, into the ring slot (K x Qr).
      simd::smallc_row<Arch>(planes + p * g.sh * pl.rows_stride, pf, g.C, st.dw.tap_offset.data(), g.R * g.S, wp, bias,
                             g.K, slot_row, sl.Qr, g.Q, 0, epi_of);
    };
    const auto pool = [&](i64 n, i64 po, const float* const* src, i64 nr) {
      if (!g.x_nhwc) {
        smallc_pool<Arch>(g, sl, src, nr, e_buf, o_buf, y + n * g.K * g.PP * g.PQ + po * g.PQ, g.PP * g.PQ);
        return;
      }
      // (K x PQ) -> y[n][po][:][:], out of the L1-resident pooled row.
      smallc_pool<Arch>(g, sl, src, nr, e_buf, o_buf, prow, sl.PQr);
      simd::transpose_2d<Arch>(prow, sl.PQr, y + (n * g.PP + po) * g.PQ * g.K, g.K, g.K, g.PQ);
    };
    walk_pooled_rows(g, b, e, ring, sl.ring_row, conv, pool);
  };
  float* planes = st.dw.planes.data;  // per-thread scratch, like st.scratch
  simd::parallel_tid(rows, std::min(simd::team_size(args.threads), st.slots), 1, [&](int id, i64 b, i64 e) {
    work(b, e, st.scratch.get() + id * st.per_thread, planes + id * g.C * pf);
  });
}

// Workspace: [params unless folded at prepare][padded NHWC x]; the small-C path needs no copy
// of x but a second params block, for the fold before the reorder.
template <class Arch>
std::size_t workspace_floats(const ConvPoolGeom& g, bool with_params) {
  const std::size_t params =
      with_params ? round_up(static_cast<i64>(conv_pool_params_floats(g, pack_block<Arch>(g))), 16) : 0;
  if (smallc_path<Arch>(g)) return 2 * params;
  const std::size_t xcopy = g.copy_x ? static_cast<std::size_t>(g.N * g.Hp * g.Wp * g.C) : 0;
  return params + xcopy;
}

}  // namespace OPFUSE_SIMD_NS

template <class Arch>
std::size_t ConvPool::workspace(Arch, const OpDesc& desc) {
  return workspace_floats<Arch>(conv_pool_geom(desc), true);
}

template <class Arch>
Status ConvPool::prepare(Arch, const OpDesc& desc, const Context& ctx, const Tensor* const* constants,
                         std::shared_ptr<void>& state) {
  const ConvPoolGeom g = conv_pool_geom(desc);
  const bool smallc = smallc_path<Arch>(g);
  const i64 KB = pack_block<Arch>(g), Kp = round_up(g.K, KB);
  auto st = std::make_shared<State>();
  // Fold and pack once when every input but x (weights, bias, batchnorm vectors) is bound.
  bool bound = constants != nullptr;
  for (std::size_t i = 1; bound && i < desc.inputs.size(); ++i) bound = constants[i] != nullptr;
  if (bound) {
    const std::size_t floats = round_up(static_cast<i64>(conv_pool_params_floats(g, KB)), 16);
    st->params.reset(static_cast<float*>(std::aligned_alloc(64, floats * sizeof(float))));
    if (!st->params) return {StatusCode::out_of_memory, "conv2d: cannot allocate the folded weights"};
    if (smallc) {
      std::vector<float> folded(floats);
      conv_pool_fold_pack(desc, g, KB, constants, folded.data());
      smallc_reorder(g, folded.data(), st->params.get());
    } else {
      conv_pool_fold_pack(desc, g, KB, constants, st->params.get());
    }
    st->packed = true;
  }
  st->slots = std::max(1, ctx.threads);
  st->per_thread = smallc ? smallc_layout<Arch>(g).total : scratch_layout(g, Kp).total;
  const std::size_t scratch = static_cast<std::size_t>(st->per_thread * st->slots);
  st->scratch.reset(static_cast<float*>(std::aligned_alloc(64, scratch * sizeof(float))));
  if (!st->scratch) return {StatusCode::out_of_memory, "conv2d: cannot allocate the per-thread row buffers"};
  if (smallc) {  // the ring's columns past Q and odd[-1] must read -inf (smallc_pool)
    std::fill(st->scratch.get(), st->scratch.get() + scratch, -std::numeric_limits<float>::infinity());
    simd::smallc_prepare<Arch>(g, st->slots, &st->dw);
  }
  state = std::move(st);
  return Status::ok();
}

template <class Arch>
void ConvPool::operator()(Arch, const KernelArgs& args) const {
  const OpDesc& d = *args.desc;
  const ConvPoolGeom g = conv_pool_geom(d);
  const auto& st = *static_cast<const State*>(args.state);
  const i64 KB = pack_block<Arch>(g);
  float* ws = args.workspace;
  const float* params = st.params.get();
  if (smallc_path<Arch>(g)) {
    if (!st.packed) {  // folded into the second params block, reordered into the first
      float* folded = ws + round_up(static_cast<i64>(conv_pool_params_floats(g, KB)), 16);
      conv_pool_fold_pack(d, g, KB, args.in, folded);
      smallc_reorder(g, folded, ws);
      params = ws;
    }
    const i64 Kp = round_up(g.K, KB);
    const float* bias = params + Kp * g.R * g.S * g.C;
    const Epilogue ep = epilogue_of(args, g, bias, Kp);
    if (ep.n == 1 && !ep.bn[0]) {
      const Activation act = ep.act[0];
      simd::with_act_kind(act.kind, [&](auto kind) {
        smallc_run<Arch>(args, g, params, bias, st,
                         [act](i64) { return simd::ActMap<Arch, decltype(kind)::value>{act}; });
      });
    } else {
      smallc_run<Arch>(args, g, params, bias, st, [&ep](i64 k0) { return SmallcEpi<Arch>{&ep, k0}; });
    }
    return;
  }
  if (!st.packed) {
    conv_pool_fold_pack(d, g, KB, args.in, ws);
    params = ws;
    ws += round_up(static_cast<i64>(conv_pool_params_floats(g, KB)), 16);
  }
  const float* xp = args.in[0]->data();
  if (g.copy_x) {  // the simd direct conv's zero-padded NHWC copy (simd/conv_kernel.hpp)
    simd::pad_to_nhwc<Arch>(g, xp, ws, args.threads);
    xp = ws;
  }
  switch (Tile<Arch>::nv(g.K)) {
    case 1: run<Arch, 1>(args, g, xp, params, st); break;
    case 2: run<Arch, 2>(args, g, xp, params, st); break;
    default:
      if constexpr (std::is_same_v<Arch, avx512>) run<Arch, 4>(args, g, xp, params, st);
      break;
  }
}

OPFUSE_SIMD_INSTANTIATE_PREPARED(ConvPool);

}  // namespace opfuse::fused
