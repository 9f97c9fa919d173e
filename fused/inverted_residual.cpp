// fused/inverted_residual.cpp - the MobileNetV2 inverted residual block without its intermediates
// in memory: the expanded rows live in a rolling 3-row band per thread (L2), the depthwise output
// in a pixel tile (L1), and y is written once.
//
// naive: expand 1x1, depthwise 3x3 and project 1x1 as naive conv2d calls, each followed by a full
//        batchnorm pass and (expand, depthwise) a ReLU6 pass; e (N, Ce, H, W) and d (N, Ce, P, Q)
//        are materialized in the workspace (naive/inverted_residual.cpp).
// simd:  the same three steps, each the best simd conv2d kernel with its batchnorm / ReLU6 /
//        residual add as a post-op chain; e and d still go through memory (the workspace).
// fused: at prepare the three batchnorms are folded into the weights and biases (scale / sqrt(var
//        + eps) multiplies each output channel's weights, bias - mean * that is the bias) and
//        packed channels-last with Ce padded to the vector width: w_expand as [Cin][Ce], w_dw as
//        [9][Ce], w_project as [Ce][Cout]. (Weights not bound at prepare are folded the same way
//        per call into the workspace.) Execute walks the output rows of each thread's share in
//        order. An output row needs expanded rows p*s - 1 .. p*s + 1; each expanded row is
//        computed once into a ring of 3 channels-last rows of (W + 2) pixels x Ce (zero columns
//        either side, a shared zero row above and below the image) - a 1x1 GEMM whose register
//        tile is 8 pixels x 3 vectors of Ce (AVX-512), x broadcast straight from its NCHW (or NHWC)
//        address, bias and ReLU6 applied before the single store. Then, per tile of at most 6
//        output pixels (balanced: Q = 7 is 4 + 3), the depthwise 3x3 (+ bias, ReLU6) reads the
//        ring and writes a tile of d (pixels x Ce) that stays in L1, and the projection (the
//        tile's pixels x up to 4 vectors of Cout in registers, one broadcast of d per Ce step)
//        adds bias and the residual and stores y. Stride 2 is just a pixel step of 2 in the
//        depthwise loads, so both strides and both layouts share the code. Threads split the
//        N * P output rows; each thread recomputes at most 2 halo rows. Padded Ce lanes never
//        reach y (the projection loops over the real Ce), so NaN in x cannot leak through the
//        zero padding. Blocks whose 1x1 weights outgrow half of L2 run whole images instead
//        (run_image, "whole-image mode" below): each weight read from memory once per image.
// Bytes (per image): the 24-channel block at 56x56, t6 (Ce = 144) would write and read back e =
// 144 * 56 * 56 * 4 = 1.8 MB and d = 1.8 MB; the fused kernel's per-thread buffers are the ring,
// 3 * 58 * 144 * 4 = 100 KB (L2), and the d and y tiles, 6 * (144 + 32) * 4 = 4.2 KB (L1). The
// stride-2 block 16 -> 24 at 112x112 (Ce = 96): e = 4.8 MB and d = 1.2 MB against a 131 KB ring.
// Measured: simd / fused / oneDNN on the MobileNetV2 blocks (c24 @56, the stride-2 c16 @112, c32
// @28, c96 @14, c160 @7) at one and two threads are in reports/REPORT.md (inverted_residual), or
// run `opfuse-bench --op inverted_residual`.
// At two threads the small blocks were held back by the per-call fold_pack on one thread (c160
// @7 barely gained from the second thread); run as jobs over the team (6d1b6fe), fold_pack no
// longer holds c160 @7 and c96 @14 back at t2 (3 A/B pairs).
// perf on the 56x56 block: projection (its 24 output channels fill 2 AVX-512 vectors, 25% of the
// lanes idle), expansion, and depthwise + the NCHW transpose of the y tile take about a third
// of the time each.
#include <algorithm>
#include <cassert>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <type_traits>

#include "fused/inverted_residual.hpp"
#include "simd/common.hpp"
#include "simd/transpose.hpp"

namespace opfuse::fused {
inline namespace OPFUSE_SIMD_NS {

using simd::fbatch;
using i64 = std::int64_t;

namespace {

// Register tiles per ISA: expand = px pixels x nv vectors of Ce; project = q pixels x up to nv
// vectors of Cout.
//   avx512: expand 8 x 3 = 24 zmm accumulators + 3 weights + 1 broadcast; project 6 x 4 = 24.
//   avx2:   expand 6 x 2 = 12 ymm + 2 + 1; project 6 x 2 = 12, or 4 x 3 when Cout is an odd
//           multiple of 3 vectors (MobileNetV2's 24: 6 x 2 then 6 x 1 broadcast each d value
//           twice, the 1-vector pass one FMA per broadcast).
//   sse2:   expand 4 x 2 = 8 xmm + 2 + 1 + 1 product (no FMA); project 4 x 2 = 8.
template <class Arch>
struct IrTile;
template <>
struct IrTile<simd::avx512> {
  static constexpr int ex_px = 8, ex_nv = 3, pj_q = 6, pj_nv = 4, pj_q3 = 0;
};
template <>
struct IrTile<simd::avx2> {
  static constexpr int ex_px = 6, ex_nv = 2, pj_q = 6, pj_nv = 2, pj_q3 = 4;
};
template <>
struct IrTile<simd::sse2> {
  static constexpr int ex_px = 4, ex_nv = 2, pj_q = 4, pj_nv = 2, pj_q3 = 0;
};

constexpr i64 rup(i64 v, i64 m) { return (v + m - 1) / m * m; }

// Where Cout is an odd multiple of 3 vectors (pj_q3), the row's depthwise tiles take up to
// 2 * pj_q3 pixels, so the projection runs whole pj_q3 x 3 blocks (8 pixels: 4 + 4 rather than
// 6 pixels as 3 + 3, whose 9 accumulators barely cover the FMA latency).
template <class Arch>
inline constexpr int kIrTileMax = std::max(IrTile<Arch>::pj_q, 2 * IrTile<Arch>::pj_q3);
template <class Arch>
bool ir_q3(i64 Cop) {
  const i64 ncv = Cop / static_cast<i64>(fbatch<Arch>::size);
  return IrTile<Arch>::pj_q3 > 0 && ncv % 2 == 1 && ncv % 3 == 0;
}

// Calls fn(std::integral_constant<int, K>{}) for the runtime k in [1, Max]: tile sizes that the
// register tiles need at compile time.
template <int Max, class Fn>
inline void with_count(i64 k, Fn&& fn) {
  [&]<int... I>(std::integer_sequence<int, I...>) {
    ((k == I + 1 ? (fn(std::integral_constant<int, I + 1>{}), 0) : 0), ...);
  }
  (std::make_integer_sequence<int, Max>{});
}

// n items in the fewest tiles of at most `most`, their sizes one apart at most (7 in tiles of
// 6: 4 + 3, not 6 + 1, whose 1-wide tile runs at a fraction of the FMA rate).
struct Balanced {
  i64 count, base, extra;
  Balanced(i64 n, i64 most) : count(std::max<i64>(1, (n + most - 1) / most)), base(n / count), extra(n % count) {}
  i64 begin(i64 t) const { return t * base + std::min(t, extra); }
  i64 size(i64 t) const { return base + (t < extra ? 1 : 0); }
};

// Where the folded, packed weights sit in a block of floats (offsets, each 16-float aligned).
struct Packed {
  i64 Cep = 0, Cop = 0;  // Ce and Cout padded to the vector width
  i64 we = 0, b1 = 0, wd = 0, b2 = 0, wp = 0, b3 = 0, total = 0;
};

template <class Arch>
Packed packed_layout(const IrGeometry& g) {
  constexpr i64 Wd = fbatch<Arch>::size;
  Packed L;
  L.Cep = rup(g.Ce, Wd);
  L.Cop = rup(g.Cout, Wd);
  i64 at = 0;
  auto take = [&](i64 n) {
    const i64 o = at;
    at += rup(n, 16);
    return o;
  };
  L.we = take(g.expand ? g.Cin * L.Cep : 0);
  L.b1 = take(L.Cep);
  L.wd = take(9 * L.Cep);
  L.b2 = take(L.Cep);
  L.wp = take(g.Ce * L.Cop);
  L.b3 = take(L.Cop);
  L.total = at;
  return L;
}

// Folds bn into per-channel (a, b): bn(v) = v * a + b.
struct Fold {
  const float *scale, *bias, *mean, *var;
  float eps;
  void at(i64 c, float& a, float& b) const {
    a = scale[c] / std::sqrt(var[c] + eps);
    b = bias[c] - mean[c] * a;
  }
};
Fold fold_of(const Tensor* const* in, std::size_t first, float eps) {
  return {in[first]->data(), in[first + 1]->data(), in[first + 2]->data(), in[first + 3]->data(), eps};
}

// dst (cols rows, row step ldd) = src (rows x cols, row step lds) transposed, and each dst row's
// first `rows` floats times m[0 .. rows): the packed layout's channel lanes times the folded
// batchnorm's multipliers. Through transpose_2d's register blocks: one float at a time, strided
// on one side, the per-call packing of the 160-channel block at 7x7 (Ce = 960) took a sizeable
// share of its time, all of it on one thread.
template <class Arch>
void transpose_scaled(const float* src, i64 lds, i64 rows, i64 cols, const float* m, float* dst, i64 ldd) {
  using B = fbatch<Arch>;
  constexpr i64 Wd = B::size;
  simd::transpose_2d<Arch>(src, lds, dst, ldd, rows, cols);
  for (i64 j = 0; j < cols; ++j) {
    float* d = dst + j * ldd;
    i64 i = 0;
    for (; i + Wd <= rows; i += Wd) (B::load_unaligned(d + i) * B::load_unaligned(m + i)).store_unaligned(d + i);
    for (; i < rows; ++i) d[i] *= m[i];
  }
}

// w_expand (Ce, Cin, 1, 1), w_dw (Ce, 1, 3, 3), w_project (Cout, Ce, 1, 1) (dense: 1-channel and
// 1x1 dims make both layouts the same memory order) -> the packed, folded block. Each bias slot
// holds its step's multipliers while the weights are transposed and scaled, then the biases.
// The three steps are independent jobs over the team: expand and the small depthwise on one
// thread, project on the other (per call, when the weights are not bound, this ran on one thread
// while the other waited: the 160-channel block at 7x7 measured t2/t1 1.10).
template <class Arch>
void fold_pack(const IrGeometry& g, float eps, const Tensor* const* in, const Packed& L, float* out, int threads) {
  // One step: w (rows x cols) transposed into dst (row step ldd; the lanes past rows zero) with
  // its batchnorm (inputs bn ..) folded in, the folded biases at bias (ldd floats).
  const auto step = [&](const float* w, i64 rows, i64 cols, std::size_t bn, float* dst, i64 ldd, float* bias) {
    std::memset(dst, 0, static_cast<std::size_t>(cols * ldd) * sizeof(float));
    std::memset(bias, 0, static_cast<std::size_t>(ldd) * sizeof(float));
    const Fold f = fold_of(in, bn, eps);
    float a = 0, b = 0;
    for (i64 r = 0; r < rows; ++r) f.at(r, bias[r], b);
    transpose_scaled<Arch>(w, cols, rows, cols, bias, dst, ldd);
    for (i64 r = 0; r < rows; ++r) f.at(r, a, bias[r]);
  };
  simd::parallel_for(3, threads, 1, [&](i64 b, i64 e) {
    for (i64 job = b; job < e; ++job) {
      if (job == 0 && g.expand) step(in[1]->data(), g.Ce, g.Cin, 2, out + L.we, L.Cep, out + L.b1);
      if (job == 1) step(in[g.dw]->data(), g.Ce, 9, g.dw + 1, out + L.wd, L.Cep, out + L.b2);
      if (job == 2) step(in[g.project]->data(), g.Cout, g.Ce, g.project + 1, out + L.wp, L.Cop, out + L.b3);
    }
  });
}

struct AlignedBuf {
  float* data = nullptr;
  ~AlignedBuf() { std::free(data); }
  bool alloc(std::size_t floats) {
    const std::size_t bytes = (floats * sizeof(float) + 63) / 64 * 64;
    data = static_cast<float*>(std::aligned_alloc(64, bytes ? bytes : 64));
    if (data) std::memset(data, 0, bytes);
    return data != nullptr;
  }
};

struct IrState {
  IrGeometry g;
  Packed L;
  bool packed = false;
  AlignedBuf weights;   // L.total floats when every weight and bn vector was bound at prepare
  AlignedBuf zero_row;  // (W + 2) * Cep zeros: the depthwise padding above and below the image
  AlignedBuf scratch;   // per thread: ring (3 rows) + d tile + y tile
  std::size_t per_thread = 0;
  int threads = 1;
  // Whole-image mode (ir_image_mode): e of one image with its zero border, (H + 2) x (W + 2)
  // x Cep, and d, P x Q x Cep, shared by the team.
  bool image = false;
  AlignedBuf e_img, d_img;
};

// NaN stays NaN (clamp_nan). The expand tile passes its constants built by local_splat after its
// k loop: hoisted, 0 and 6 took two of AVX2's 16 registers through that loop, and GCC spilled an
// accumulator instead (a store-to-load round trip per step).
template <class Arch>
inline fbatch<Arch> relu6(fbatch<Arch> v, fbatch<Arch> zero = fbatch<Arch>(0.f), fbatch<Arch> six = fbatch<Arch>(6.f)) {
  return simd::clamp_nan<Arch>(v, zero, six);
}

// ---- expand: one row of e = relu6(x_row W_e + b1), channels-last ----------------------------------

// PX pixels x NV vectors of Ce. x: the row's first pixel of this tile at channel 0; CL: x is
// channels-last (channel step 1, pixel step xs_w) else channel step xs_c, pixel step 1.
// The row mode stores pixel p of the tile at e + p * Cep; the image mode (eo non-null) at eo[p].
template <class Arch, int PX, int NV, bool CL>
inline void expand_tile(const float* x, i64 xs_c, i64 xs_w, i64 Cin, const float* w, const float* b1, i64 Cep, float* e,
                        float* const* eo = nullptr) {
  using B = fbatch<Arch>;
  constexpr i64 Wd = B::size;
  B acc[PX][NV];
  for (int v = 0; v < NV; ++v) {
    const B bv = B::load_aligned(b1 + v * Wd);
    for (int p = 0; p < PX; ++p) acc[p][v] = bv;
  }
  for (i64 c = 0; c < Cin; ++c) {
    B wv[NV];
    for (int v = 0; v < NV; ++v) wv[v] = B::load_aligned(w + c * Cep + v * Wd);
    for (int p = 0; p < PX; ++p) {
      const B xb(CL ? x[p * xs_w + c] : x[c * xs_c + p]);
      for (int v = 0; v < NV; ++v) acc[p][v] = xsimd::fma(xb, wv[v], acc[p][v]);
    }
  }
  // AVX-512's 32 registers hold the 8 x 3 tile, its operands and the constants.
  constexpr bool tight = !std::is_same_v<Arch, simd::avx512>;
  const B zero = tight ? simd::local_splat<Arch>(0.f) : B(0.f), six = tight ? simd::local_splat<Arch>(6.f) : B(6.f);
  for (int p = 0; p < PX; ++p) {
    float* ep = eo ? eo[p] : e + p * Cep;
    for (int v = 0; v < NV; ++v) relu6<Arch>(acc[p][v], zero, six).store_aligned(ep + v * Wd);
  }
}

// The row's W pixels in balanced tiles of at most PX (7 on AVX2's 6: 4 + 3; recomputing the
// overlap of a last tile placed at W - PX cost 5 extra pixels of 7 there).
template <class Arch, int NV, bool CL>
void expand_cols(const float* x, i64 xs_c, i64 xs_w, i64 W, i64 Cin, const float* w, const float* b1, i64 Cep,
                 float* e) {
  constexpr int PX = IrTile<Arch>::ex_px;
  const Balanced tiles(W, PX);
  for (i64 t = 0; t < tiles.count; ++t) {
    const i64 q = tiles.begin(t);
    with_count<PX>(tiles.size(t), [&](auto px) {
      expand_tile<Arch, decltype(px)::value, NV, CL>(x + q * xs_w, xs_c, xs_w, Cin, w, b1, Cep, e + q * Cep);
    });
  }
}

template <class Arch, bool CL>
void expand_row(const IrGeometry& g, const Packed& L, const float* wts, const float* x, i64 xs_c, i64 xs_w, float* e) {
  constexpr i64 Wd = fbatch<Arch>::size;
  constexpr int NVmax = IrTile<Arch>::ex_nv;
  const i64 nce = L.Cep / Wd;
  for (i64 cv = 0; cv < nce; cv += NVmax) {
    const i64 nv = std::min<i64>(NVmax, nce - cv);
    const float* w = wts + L.we + cv * Wd;
    const float* b1 = wts + L.b1 + cv * Wd;
    float* ec = e + cv * Wd;
    if (nv == NVmax)
      expand_cols<Arch, NVmax, CL>(x, xs_c, xs_w, g.W, g.Cin, w, b1, L.Cep, ec);
    else if (nv == 1)
      expand_cols<Arch, 1, CL>(x, xs_c, xs_w, g.W, g.Cin, w, b1, L.Cep, ec);
    else if constexpr (NVmax > 2)
      expand_cols<Arch, 2, CL>(x, xs_c, xs_w, g.W, g.Cin, w, b1, L.Cep, ec);
  }
}

// No expand conv: e is x itself, copied channels-last (padded Ce lanes stay zero from prepare).
void copy_row(const IrGeometry& g, const Packed& L, const float* x, i64 xs_c, i64 xs_w, float* e) {
  for (i64 q = 0; q < g.W; ++q)
    for (i64 c = 0; c < g.Cin; ++c) e[q * L.Cep + c] = x[q * xs_w + c * xs_c];
}

// ---- depthwise: a tile of cnt output pixels, d = relu6(dw3x3(e) + b2), channels-last ------------

template <class Arch>
void dw_tile(const float* const* rows, i64 stride, i64 q0, i64 cnt, const float* wd, const float* b2, i64 Cep,
             float* dt) {
  using B = fbatch<Arch>;
  constexpr i64 Wd = B::size;
  for (i64 cv = 0; cv < Cep; cv += Wd) {
    B w[9];
    for (int t = 0; t < 9; ++t) w[t] = B::load_aligned(wd + t * Cep + cv);
    const B bias = B::load_aligned(b2 + cv);
    for (i64 qi = 0; qi < cnt; ++qi) {
      const i64 off = (q0 + qi) * stride * Cep + cv;  // padded pixel (q * s) is the tap s = 0 column
      B acc = bias;
      for (int r = 0; r < 3; ++r)
        for (int s = 0; s < 3; ++s) acc = xsimd::fma(B::load_aligned(rows[r] + off + s * Cep), w[r * 3 + s], acc);
      relu6<Arch>(acc).store_aligned(dt + qi * Cep + cv);
    }
  }
}

// ---- project: TQ pixels x NV vectors of Cout, y_tile = d_tile W_p + b3 ---------------------------

template <class Arch, int TQ, int NV>
inline void project_block(const float* dt, i64 Cep, i64 Ce, const float* wp, i64 Cop, const float* b3, float* yt) {
  using B = fbatch<Arch>;
  constexpr i64 Wd = B::size;
  B acc[TQ][NV];
  for (int v = 0; v < NV; ++v) {
    const B bv = B::load_aligned(b3 + v * Wd);
    for (int q = 0; q < TQ; ++q) acc[q][v] = bv;
  }
  for (i64 ce = 0; ce < Ce; ++ce) {  // the real channels only: padded lanes of d never reach y
    B wv[NV];
    for (int v = 0; v < NV; ++v) wv[v] = B::load_aligned(wp + ce * Cop + v * Wd);
    for (int q = 0; q < TQ; ++q) {
      const B db(dt[q * Cep + ce]);
      for (int v = 0; v < NV; ++v) acc[q][v] = xsimd::fma(db, wv[v], acc[q][v]);
    }
  }
  for (int q = 0; q < TQ; ++q)
    for (int v = 0; v < NV; ++v) acc[q][v].store_aligned(yt + q * Cop + v * Wd);
}

// cnt (1 .. pj_q) pixels of the d tile -> the y tile [cnt][Cop].
template <class Arch>
void project_tile(const Packed& L, i64 Ce, const float* wts, const float* dt, i64 cnt, float* yt) {
  constexpr i64 Wd = fbatch<Arch>::size;
  constexpr int TQ = IrTile<Arch>::pj_q, NVmax = IrTile<Arch>::pj_nv;
  const i64 ncv = L.Cop / Wd;
  if constexpr (IrTile<Arch>::pj_q3 > 0) {
    if (ir_q3<Arch>(L.Cop)) {  // 3 vectors of Cout x balanced blocks of at most pj_q3 pixels
      const Balanced sub(cnt, IrTile<Arch>::pj_q3);
      for (i64 cv = 0; cv < ncv; cv += 3)
        for (i64 t = 0; t < sub.count; ++t) {
          const i64 q = sub.begin(t);
          with_count<IrTile<Arch>::pj_q3>(sub.size(t), [&](auto tq) {
            project_block<Arch, decltype(tq)::value, 3>(dt + q * L.Cep, L.Cep, Ce, wts + L.wp + cv * Wd, L.Cop,
                                                        wts + L.b3 + cv * Wd, yt + q * L.Cop + cv * Wd);
          });
        }
      return;
    }
  }
  for (i64 cv = 0; cv < ncv; cv += NVmax) {
    const i64 nv = std::min<i64>(NVmax, ncv - cv);
    const float* wp = wts + L.wp + cv * Wd;
    const float* b3 = wts + L.b3 + cv * Wd;
    float* y = yt + cv * Wd;
    with_count<TQ>(cnt, [&](auto tq) {
      with_count<NVmax>(nv, [&](auto v) {
        project_block<Arch, decltype(tq)::value, decltype(v)::value>(dt, L.Cep, Ce, wp, L.Cop, b3, y);
      });
    });
  }
}

// ---- one thread's share of output rows ------------------------------------------------------------

struct Io {
  const float* x;
  float* y;
  std::array<i64, kMaxRank> xs, ys;  // logical (n, c, h, w) strides
};

template <class Arch>
void run_rows(const IrState& st, const float* wts, const Io& io, i64 begin, i64 end, float* buf) {
  const IrGeometry& g = st.g;
  const Packed& L = st.L;
  const i64 TQ = ir_q3<Arch>(L.Cop) ? 2 * IrTile<Arch>::pj_q3 : IrTile<Arch>::pj_q;
  const i64 row_floats = (g.W + 2) * L.Cep;
  float* ring = buf;
  float* dt = ring + 3 * row_floats;
  float* yt = dt + kIrTileMax<Arch> * L.Cep;
  i64 tag[3] = {-1, -1, -1};
  i64 cur_n = -1;
  const float* rows[3];
  for (i64 t = begin; t < end; ++t) {
    const i64 n = t / g.P, p = t % g.P;
    if (n != cur_n) tag[0] = tag[1] = tag[2] = -1, cur_n = n;
    const float* xn = io.x + n * io.xs[0];
    for (int r = 0; r < 3; ++r) {
      const i64 h = p * g.stride - 1 + r;
      if (h < 0 || h >= g.H) {
        rows[r] = st.zero_row.data;
        continue;
      }
      const auto slot = static_cast<std::size_t>(h % 3);
      float* e = ring + static_cast<i64>(slot) * row_floats;
      if (tag[slot] != h) {
        const float* xr = xn + h * io.xs[2];
        if (!g.expand)
          copy_row(g, L, xr, io.xs[1], io.xs[3], e + L.Cep);
        else if (g.nhwc)
          expand_row<Arch, true>(g, L, wts, xr, io.xs[1], io.xs[3], e + L.Cep);
        else
          expand_row<Arch, false>(g, L, wts, xr, io.xs[1], io.xs[3], e + L.Cep);
        tag[slot] = h;
      }
      rows[r] = e;
    }
    float* yrow = io.y + n * io.ys[0] + p * io.ys[2];
    const float* xres = xn + p * io.xs[2];  // residual: stride 1, so output row p is input row p
    // Tiles of at most TQ pixels, balanced (Q = 7 is 4 + 3, not 6 + 1).
    const Balanced tiles(g.Q, TQ);
    for (i64 tile = 0; tile < tiles.count; ++tile) {
      const i64 q0 = tiles.begin(tile), cnt = tiles.size(tile);
      dw_tile<Arch>(rows, g.stride, q0, cnt, wts + L.wd, wts + L.b2, L.Cep, dt);
      project_tile<Arch>(L, g.Ce, wts, dt, cnt, yt);
      // y tile [cnt][Cout] -> y (+ x), in y's layout.
      if (g.nhwc) {
        for (i64 qi = 0; qi < cnt; ++qi) {
          float* yq = yrow + (q0 + qi) * io.ys[3];
          const float* src = yt + qi * L.Cop;
          if (g.residual) {
            const float* xq = xres + (q0 + qi) * io.xs[3];
            for (i64 co = 0; co < g.Cout; ++co) yq[co] = src[co] + xq[co];
          } else {
            std::memcpy(yq, src, static_cast<std::size_t>(g.Cout) * sizeof(float));
          }
        }
      } else {
        for (i64 co = 0; co < g.Cout; ++co) {
          float* yc = yrow + co * io.ys[1] + q0;
          const float* src = yt + co;
          if (g.residual) {
            const float* xc = xres + co * io.xs[1] + q0;
            for (i64 qi = 0; qi < cnt; ++qi) yc[qi] = src[qi * L.Cop] + xc[qi];
          } else {
            for (i64 qi = 0; qi < cnt; ++qi) yc[qi] = src[qi * L.Cop];
          }
        }
      }
    }
  }
}

// ---- whole-image mode: small images, large weights ---------------------------------------------
// Row by row, every expanded row reads all of w_expand and every pixel tile all of w_project:
// 14 passes over the weights per image at 7 x 7, from L3 once they outgrow L2 (MobileNetV2's
// last blocks, 1.2 - 1.9 MB). Here one image goes in two phases. A: the team splits Ce into
// blocks of ex_nv vectors; a thread expands every pixel of the image for its block (the block's
// Cin x ex_nv weight vectors stay in L1 for all of them) into e, then runs the depthwise of the
// same columns into d. B: the team splits d's pixels into tiles; each projects its tiles (the
// row mode's register tile, over the pixels of the whole image instead of one row's) and adds
// the residual. Each weight is read from memory once per image; e and d live in L2.

// d columns [cv0, cv0 + nv * Wd) of every output pixel from e (padded rows of (W + 2) pixels).
template <class Arch>
void dw_columns(const IrGeometry& g, const float* e, const float* wd, const float* b2, i64 Cep, i64 cv0, i64 nv,
                float* d) {
  using B = fbatch<Arch>;
  constexpr i64 Wd = B::size;
  const i64 rs = (g.W + 2) * Cep;
  for (i64 v = 0; v < nv; ++v) {
    const i64 cv = cv0 + v * Wd;
    B w[9];
    for (int t = 0; t < 9; ++t) w[t] = B::load_aligned(wd + t * Cep + cv);
    const B bias = B::load_aligned(b2 + cv);
    for (i64 p = 0; p < g.P; ++p) {
      const float* e0 = e + p * g.stride * rs + cv;
      for (i64 q = 0; q < g.Q; ++q) {
        const float* eq = e0 + q * g.stride * Cep;
        B acc = bias;
        for (int r = 0; r < 3; ++r)
          for (int s2 = 0; s2 < 3; ++s2) acc = xsimd::fma(B::load_aligned(eq + r * rs + s2 * Cep), w[r * 3 + s2], acc);
        relu6<Arch>(acc).store_aligned(d + (p * g.Q + q) * Cep + cv);
      }
    }
  }
}

template <class Arch>
void run_image(const IrState& st, const float* wts, const Io& io, int threads) {
  const IrGeometry& g = st.g;
  const Packed& L = st.L;
  constexpr i64 Wd = fbatch<Arch>::size;
  constexpr int NVmax = IrTile<Arch>::ex_nv, TQ = IrTile<Arch>::pj_q, PX = IrTile<Arch>::ex_px;
  const i64 nce = L.Cep / Wd, nblocks = (nce + NVmax - 1) / NVmax, PQ = g.P * g.Q, HW = g.H * g.W;
  // x's rows follow each other (h step = W pixel steps): its pixels can be read as one row.
  const bool x_linear = io.xs[2] == g.W * io.xs[3];
  const Balanced ex_tiles(HW, PX);
  float* e = st.e_img.data;
  float* d = st.d_img.data;
  const i64 rs = (g.W + 2) * L.Cep;
  // Pixel tiles of at most TQ, balanced (49 pixels: 7 x 7, not 8 x 6 + 1).
  const Balanced tiles(PQ, TQ);
  for (i64 n = 0; n < g.N; ++n) {
    const float* xn = io.x + n * io.xs[0];
    simd::parallel_for(nblocks, threads, 1, [&](i64 b0, i64 b1) {
      for (i64 blk = b0; blk < b1; ++blk) {
        const i64 cv = blk * NVmax, nv = std::min<i64>(NVmax, nce - cv);
        const float* w = wts + L.we + cv * Wd;
        const float* bias = wts + L.b1 + cv * Wd;
        if (x_linear) {
          // The image's pixels as one row, in balanced tiles that run across its rows: 7 x 7 on
          // AVX2 is 9 tiles of 5 or 6 pixels, not 7 rows of 4 + 3.
          for (i64 t = 0; t < ex_tiles.count; ++t) {
            const i64 pix = ex_tiles.begin(t), cnt = ex_tiles.size(t);
            float* eo[PX];
            for (i64 i = 0; i < cnt; ++i)
              eo[i] = e + ((pix + i) / g.W + 1) * rs + ((pix + i) % g.W + 1) * L.Cep + cv * Wd;
            const float* xp = xn + pix * io.xs[3];
            with_count<NVmax>(nv, [&](auto nvc) {
              with_count<PX>(cnt, [&](auto px) {
                constexpr int NV = decltype(nvc)::value, T = decltype(px)::value;
                if (g.nhwc)
                  expand_tile<Arch, T, NV, true>(xp, io.xs[1], io.xs[3], g.Cin, w, bias, L.Cep, nullptr, eo);
                else
                  expand_tile<Arch, T, NV, false>(xp, io.xs[1], io.xs[3], g.Cin, w, bias, L.Cep, nullptr, eo);
              });
            });
          }
        } else {
          for (i64 h = 0; h < g.H; ++h) {
            const float* xr = xn + h * io.xs[2];
            float* er = e + (h + 1) * rs + L.Cep + cv * Wd;
            with_count<NVmax>(nv, [&](auto nvc) {
              constexpr int NV = decltype(nvc)::value;
              if (g.nhwc)
                expand_cols<Arch, NV, true>(xr, io.xs[1], io.xs[3], g.W, g.Cin, w, bias, L.Cep, er);
              else
                expand_cols<Arch, NV, false>(xr, io.xs[1], io.xs[3], g.W, g.Cin, w, bias, L.Cep, er);
            });
          }
        }
        dw_columns<Arch>(g, e, wts + L.wd, wts + L.b2, L.Cep, cv * Wd, nv, d);
      }
    });
    // Jobs of one tile x one block of pj_nv vectors of Cout, block-major: a thread's range
    // runs its blocks' weights (Ce x pj_nv vectors, L2-sized) over every tile in turn, so each
    // weight comes from memory once per image; tile-major, the whole w_project (up to 1.2 MB)
    // streamed from L3 for every tile.
    float* yn = io.y + n * io.ys[0];
    constexpr int PNV = IrTile<Arch>::pj_nv;
    const i64 ncv = L.Cop / Wd, ncb = (ncv + PNV - 1) / PNV;
    simd::parallel_tid(ncb * tiles.count, threads, 1, [&](int tid, i64 j0, i64 j1) {
      float* yt = st.scratch.data + static_cast<std::size_t>(tid) * st.per_thread;
      for (i64 j = j0; j < j1; ++j) {
        const i64 cb = j / tiles.count, t = j % tiles.count;
        const i64 q0 = tiles.begin(t), cnt = tiles.size(t);
        const i64 cv = cb * PNV, nv = std::min<i64>(PNV, ncv - cv);
        with_count<TQ>(cnt, [&](auto tq) {
          with_count<PNV>(nv, [&](auto v) {
            project_block<Arch, decltype(tq)::value, decltype(v)::value>(
                d + q0 * L.Cep, L.Cep, g.Ce, wts + L.wp + cv * Wd, L.Cop, wts + L.b3 + cv * Wd, yt + cv * Wd);
          });
        });
        const i64 co0 = cv * Wd, co1 = std::min(g.Cout, (cv + nv) * Wd);
        for (i64 i = 0; i < cnt; ++i) {
          const i64 pix = q0 + i, p = pix / g.Q, q = pix % g.Q;
          float* yq = yn + p * io.ys[2] + q * io.ys[3];
          const float* xq = xn + p * io.xs[2] + q * io.xs[3];  // residual: stride 1, P = H, Q = W
          const float* src = yt + i * L.Cop;
          if (g.residual)
            for (i64 co = co0; co < co1; ++co) yq[co * io.ys[1]] = src[co] + xq[co * io.xs[1]];
          else
            for (i64 co = co0; co < co1; ++co) yq[co * io.ys[1]] = src[co];
        }
      }
    });
  }
}

}  // namespace
}  // namespace OPFUSE_SIMD_NS

template <class Arch>
std::size_t InvertedResidual::workspace(Arch, const OpDesc& desc) {
  // The folded weights, used when they were not bound at prepare.
  return static_cast<std::size_t>(packed_layout<Arch>(ir_geometry(desc)).total);
}

template <class Arch>
Status InvertedResidual::prepare(Arch, const OpDesc& desc, const Context& ctx, const Tensor* const* constants,
                                 std::shared_ptr<void>& state) {
  auto st = std::make_shared<IrState>();
  st->g = ir_geometry(desc);
  st->L = packed_layout<Arch>(st->g);
  const IrGeometry& g = st->g;
  const Packed& L = st->L;
  st->threads = ctx.threads > 0 ? ctx.threads : 1;
  const i64 row_floats = (g.W + 2) * L.Cep;
  const auto ring = static_cast<i64>(ir_band_floats(g, static_cast<i64>(fbatch<Arch>::size)));  // 3 * row_floats
  st->per_thread = static_cast<std::size_t>(rup(ring + kIrTileMax<Arch> * (L.Cep + L.Cop), 16));
  // Zeroed once: the ring's padding columns (and padded Ce lanes without expansion) are never written.
  if (!st->scratch.alloc(st->per_thread * static_cast<std::size_t>(st->threads)) ||
      !st->zero_row.alloc(static_cast<std::size_t>(row_floats)))
    return {StatusCode::out_of_memory, "inverted_residual: cannot allocate the band buffers"};
  st->image = ir_image_mode(g);
  if (st->image && (!st->e_img.alloc(static_cast<std::size_t>((g.H + 2) * row_floats)) ||
                    !st->d_img.alloc(static_cast<std::size_t>(g.P * g.Q * L.Cep))))
    return {StatusCode::out_of_memory, "inverted_residual: cannot allocate the image buffers"};
  bool all_bound = constants != nullptr;
  for (std::size_t i = 1; all_bound && i < desc.inputs.size(); ++i) all_bound = constants[i] != nullptr;
  if (all_bound) {
    if (!st->weights.alloc(static_cast<std::size_t>(L.total)))
      return {StatusCode::out_of_memory, "inverted_residual: cannot allocate the packed weights"};
    fold_pack<Arch>(g, desc.p<InvertedResidualParams>().epsilon, constants, L, st->weights.data, ctx.threads);
    st->packed = true;
  }
  state = std::move(st);
  return Status::ok();
}

template <class Arch>
void InvertedResidual::operator()(Arch, const KernelArgs& args) const {
  const auto& st = *static_cast<const IrState*>(args.state);
  const IrGeometry& g = st.g;
  const float* wts = st.weights.data;
  if (!st.packed) {
    fold_pack<Arch>(g, args.desc->p<InvertedResidualParams>().epsilon, args.in, st.L, args.workspace,
                    std::min(args.threads, st.threads));
    wts = args.workspace;
  }
  const Tensor& x = *args.in[0];
  const Tensor& y = *args.out[0];
  const Io io{x.data(), y.mutable_data(), x.strides(), y.strides()};
  const int threads = std::min(args.threads, st.threads);
  if (st.image) {
    run_image<Arch>(st, wts, io, threads);
    return;
  }
  simd::parallel_tid(g.N * g.P, threads, 1, [&](int tid, i64 b, i64 e) {
    run_rows<Arch>(st, wts, io, b, e, st.scratch.data + static_cast<std::size_t>(tid) * st.per_thread);
  });
}

OPFUSE_SIMD_INSTANTIATE_PREPARED(InvertedResidual);

}  // namespace opfuse::fused
