// fused/attention.cpp - flash attention: tiled, online softmax, no score matrix.
//
// naive: per (b, h) the whole Sq x Skv score matrix, double dot products, three softmax passes,
//        then P V (naive/attention.cpp).
// simd:  the same pipeline at vector speed: S = scale Q K^T on the packed GEMM into a per-thread
//        Sq x Skv score matrix, a vector softmax pass over it, O = P V on the packed GEMM
//        (simd/attention.cpp). At long sequences that matrix (16 MiB per head at S = 2048) is
//        written by one GEMM, read and written by the softmax and read (and packed) again by
//        the next GEMM: three trips through the caches for every score.
// fused: the scores never leave a tile that stays in L1. Per tile of Bq queries (one work item;
//        threads take items (b, h, query tile) dynamically, heaviest causal tiles first):
//          Q^T   the tile's queries transposed once into D x Bq (16 x 16 register transposes),
//                so every vector lane is one query: all softmax statistics are vertical
//                (lane-wise) and need no horizontal reduction. Q^T is multiplied by
//                scale * log2(e) there, so the scores leave the QK^T tile in base 2 and need
//                no multiply of their own: the softmax below runs on 2^x (exp2).
//          for each tile of Bk keys (causal: only up to the last key the tile's last query
//          sees, so tiles entirely above the diagonal are never loaded):
//            S^T = K Q^T   register tiles of mk keys x Bq queries; each k row element is a
//                          broadcast, Q^T rows are vector loads. In the registers, before the
//                          only store: + log2(e) mask (gathered along the queries), the causal
//                          -inf on the diagonal tile, and the running tile max.
//            online softmax, per query lane: m' = max(m, tile max), c = 2^(m - m'),
//                          P = 2^(S - m') in place, l = c l + sum P.
//            O^T = c O^T + V^T P^T   register tiles of me columns of v x Bq queries, v
//                          elements broadcast, P^T rows vector loads; the Dv x Bq O^T tile
//                          stays in L1 across all key tiles. On the diagonal tile the FMA is
//                          masked per lane, so a causally hidden V row can't reach a query
//                          through 0 * NaN.
//          O = O^T / l, transposed back once per query tile (0 for a query with l = 0: no
//          visible key or only -inf scores; NaN scores propagate through P and l).
//        2^x is vmath::exp2_nonpositive (every argument is <= 0): 9 vector operations where
//        e^x takes 11, with the scale folded into Q^T instead of a multiply per score
//        (b1_h12_s2048_d64: a small gain with the vectorized transposes, 3 A/B pairs).
//        Tiles (flash_tile in fused/attention.hpp): AVX-512 Bq = 64 (4 zmm of query lanes),
//        Bk = 72, register tiles 6 keys x 64 queries (QK^T) and 4 columns of v x 64 queries (PV):
//        D = Dv = 64 and S = 128 / 512 / 2048 leave no tile tails (measured faster than 48 x 64
//        tiles with 8-row register tiles, most at s128). AVX2 16 x 128 (6-row tiles),
//        SSE2 8 x 128 (4-row tiles).
//
// Extra memory: the per-thread scratch and nothing else - attention_extra_bytes(desc, isa,
//   threads) in fused/shared/attention_supports.cpp, (D + Bk + Dv + 3) x Bq floats per thread.
//   b1_h12_s2048_d64 on AVX-512: 51,968 bytes per thread (103,936 at t2), against the
//   201,326,592 bytes (B * H * S * S * 4) of its score matrix: 0.026% (0.052% at t2). (The simd
//   kernel holds one head's Sq x Skv matrix per thread: 16.8 MB per thread here.)
//
// Measured: fused / simd / oneDNN at b1_h12 s128, s512 (+causal) and s2048, one and two
// threads, with the probe's FMA peak, are in reports/REPORT.md (attention; its "What bounds
// the fused targets" section has the s2048 bound), or run `opfuse-bench --op attention`. The
// fused / simd ratio varies from run to run mostly through the simd stage: its score matrix
// makes it the one sensitive to how busy the shared L3 and DRAM are. At s4096 (own harness,
// before base 2) a head's score matrix (64 MiB) no longer fits the 32 MiB L3, and the gap grew.
// Why not more at s2048: the fused kernel runs 13.1 GFLOP close to the FMA peak; perf puts the
// time about evenly in the QK^T and PV tiles (each near the FMA roof), with a small remainder
// in the softmax pass (2^x, the max, the sums), so all FMAs at peak with no exp bound any
// kernel. The unfused simd pays its three trips through L3 (the 16 MiB matrix of a head fits
// the 32 MiB L3) on top of the same FMAs: that, larger or smaller depending on how busy the
// shared L3 is, is all that fusion can win here.
#include <algorithm>
#include <cassert>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <memory>
#include <type_traits>
#include <utility>

#include "fused/attention.hpp"
#include "simd/common.hpp"
#include "simd/transpose.hpp"
#include "simd/vmath.hpp"

namespace opfuse::fused {
inline namespace OPFUSE_SIMD_NS {

using simd::fbatch;
using simd::isa_of;
using std::int64_t;

namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kLog2e = 1.44269504088896341f;

template <class Arch>
struct Tile {
  static constexpr FlashTile t = flash_tile(isa_of<Arch>());
  static constexpr int W = t.w, NQ = t.nq, MK = t.mk, ME = t.me;
  static constexpr int64_t BQ = t.bq(), BK = t.bk;
  static_assert(W == static_cast<int>(fbatch<Arch>::size), "flash_tile's w must be the ISA's vector width");
};

// What the QK^T epilogue applies (all of it per key row of the tile). The scale is not among it:
// Q^T holds scale * log2(e) * q, so the accumulators are already the scores in base 2.
struct Epilogue {
  const float* mask;  // element (query i0 + lane, key j) at mask[lane * mask_i + j * mask_j]; or null
  int64_t mask_i, mask_j;
  int64_t lanes;  // real queries in the tile (lanes past it read no mask)
  bool causal;    // the tile crosses the causal diagonal: hidden (lane, key) pairs get -inf
  int64_t diag;   // key j is hidden from lane l when l < j - diag (diag = i0 + Skv - Sq)
};

// Lanes [l0, l0 + W) of the query tile that see key j: l >= j - diag. The threshold is
// clamped to [-1, BQ] so that the float compare is exact.
template <class Arch>
auto sees(int64_t j, int64_t diag, int64_t l0, fbatch<Arch> iota) {
  using B = fbatch<Arch>;
  int64_t thr = j - diag - l0;
  thr = std::clamp<int64_t>(thr, -1, Tile<Arch>::BQ);
  return iota >= B(static_cast<float>(thr));
}

// The mask along W query lanes starting at lane l0 for key j; lanes past `lanes` get 0.
template <class Arch>
fbatch<Arch> mask_lanes(const Epilogue& ep, int64_t l0, int64_t j) {
  using B = fbatch<Arch>;
  const float* p = ep.mask + l0 * ep.mask_i + j * ep.mask_j;
  if (ep.mask_i == 0) return B(*p);
  if (l0 + static_cast<int64_t>(B::size) <= ep.lanes) return simd::load_strided<Arch>(p, ep.mask_i);
  alignas(64) float t[B::size];
  for (std::size_t l = 0; l < B::size; ++l) t[l] = l0 + static_cast<int64_t>(l) < ep.lanes ? p[l * ep.mask_i] : 0.f;
  return B::load_aligned(t);
}

// S^T rows [0, R) of the tile = keys k[0 .. R) (rows ks apart) times Q^T (D x BQ, aligned);
// epilogue in registers, then stored to st (R x BQ) and folded into the tile max tmax (NQ).
// `j` is the absolute index of key row 0.
template <class Arch, int R, bool kGeneral>
void qk_tile(const float* __restrict k, int64_t ks, int64_t D, const float* __restrict qt, float* __restrict st,
             fbatch<Arch>* tmax, const Epilogue& ep, int64_t j) {
  using B = fbatch<Arch>;
  constexpr int NQ = Tile<Arch>::NQ, W = Tile<Arch>::W;
  constexpr int64_t BQ = Tile<Arch>::BQ;
  B acc[R][NQ];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int v = 0; v < NQ; ++v) acc[r][v] = B(0.f);
#pragma GCC unroll 2
  for (int64_t d = 0; d < D; ++d) {
    B q[NQ];
#pragma GCC unroll 4
    for (int v = 0; v < NQ; ++v) q[v] = B::load_aligned(qt + d * BQ + v * W);
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const B kr(k[r * ks + d]);
#pragma GCC unroll 4
      for (int v = 0; v < NQ; ++v) acc[r][v] = xsimd::fma(kr, q[v], acc[r][v]);
    }
  }
  [[maybe_unused]] const B iota = simd::lane_iota<Arch>();
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int v = 0; v < NQ; ++v) {
      B s = acc[r][v];
      if constexpr (kGeneral) {
        if (ep.mask) s = xsimd::fma(mask_lanes<Arch>(ep, v * W, j + r), B(kLog2e), s);
        if (ep.causal) s = xsimd::select(sees<Arch>(j + r, ep.diag, v * W, iota), s, B(-kInf));
      }
      // A NaN score is left out of the max (it reaches l and O through exp(NaN) instead).
      tmax[v] = simd::vmax<Arch>(s, tmax[v]);
      s.store_aligned(st + r * BQ + v * W);
    }
}

// c + a * b in the lanes of m, c elsewhere (AVX-512: one masked FMA).
template <class Arch>
fbatch<Arch> masked_fma(fbatch<Arch> a, fbatch<Arch> b, fbatch<Arch> c, xsimd::batch_bool<float, Arch> m) {
  if constexpr (std::is_same_v<Arch, simd::avx512>)
    return _mm512_mask3_fmadd_ps(a, b, c, m);
  else
    return xsimd::select(m, xsimd::fma(a, b, c), c);
}

// O^T rows [0, R) (columns e .. e + R of v) = c * O^T + V^T P^T over n keys: v rows vs apart
// starting at key j0 (absolute index), P^T in st (n x BQ), c in corr (null: no rescale, O^T +=).
// kMasked (the causal diagonal's keys): lanes that don't see a key skip its FMA, so a hidden V
// row never meets their zero weight (0 * NaN).
template <class Arch, int R, bool kMasked>
void pv_tile(const float* __restrict v, int64_t vs, int64_t n, const float* __restrict st, const float* __restrict corr,
             float* __restrict ot, int64_t j0, int64_t diag) {
  using B = fbatch<Arch>;
  constexpr int NQ = Tile<Arch>::NQ, W = Tile<Arch>::W;
  constexpr int64_t BQ = Tile<Arch>::BQ;
  B acc[R][NQ];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int q = 0; q < NQ; ++q) acc[r][q] = B(0.f);
  [[maybe_unused]] const B iota = simd::lane_iota<Arch>();
#pragma GCC unroll 2
  for (int64_t j = 0; j < n; ++j) {
    B p[NQ];
#pragma GCC unroll 4
    for (int q = 0; q < NQ; ++q) p[q] = B::load_aligned(st + j * BQ + q * W);
    if constexpr (kMasked) {
      xsimd::batch_bool<float, Arch> vis[NQ];
#pragma GCC unroll 4
      for (int q = 0; q < NQ; ++q) vis[q] = sees<Arch>(j0 + j, diag, q * W, iota);
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) {
        const B vr(v[j * vs + r]);
#pragma GCC unroll 4
        for (int q = 0; q < NQ; ++q) acc[r][q] = masked_fma<Arch>(vr, p[q], acc[r][q], vis[q]);
      }
    } else {
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) {
        const B vr(v[j * vs + r]);
#pragma GCC unroll 4
        for (int q = 0; q < NQ; ++q) acc[r][q] = xsimd::fma(vr, p[q], acc[r][q]);
      }
    }
  }
#pragma GCC unroll 4
  for (int q = 0; q < NQ; ++q) {
    const B c = corr ? B::load_aligned(corr + q * W) : B(1.f);
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      float* o = ot + r * BQ + q * W;
      xsimd::fma(B::load_aligned(o), c, acc[r][q]).store_aligned(o);
    }
  }
}

using QkFn = void (*)(const float*, int64_t, int64_t, const float*, float*, void*, const Epilogue&, int64_t);
using PvFn = void (*)(const float*, int64_t, int64_t, const float*, const float*, float*, int64_t, int64_t);

template <class Arch, int R, bool G>
void qk_entry(const float* k, int64_t ks, int64_t D, const float* qt, float* st, void* tmax, const Epilogue& ep,
              int64_t j) {
  qk_tile<Arch, R, G>(k, ks, D, qt, st, static_cast<fbatch<Arch>*>(tmax), ep, j);
}

template <class Arch, bool G, int... I>
constexpr auto qk_table(std::integer_sequence<int, I...>) {
  return std::array<QkFn, sizeof...(I)>{&qk_entry<Arch, I + 1, G>...};
}
template <class Arch, bool M, int... I>
constexpr auto pv_table(std::integer_sequence<int, I...>) {
  return std::array<PvFn, sizeof...(I)>{&pv_tile<Arch, I + 1, M>...};
}
// [kGeneral / kMasked][rows - 1]
template <class Arch>
inline constexpr std::array<std::array<QkFn, Tile<Arch>::MK>, 2> kQk = {
    qk_table<Arch, false>(std::make_integer_sequence<int, Tile<Arch>::MK>{}),
    qk_table<Arch, true>(std::make_integer_sequence<int, Tile<Arch>::MK>{})};
template <class Arch>
inline constexpr std::array<std::array<PvFn, Tile<Arch>::ME>, 2> kPv = {
    pv_table<Arch, false>(std::make_integer_sequence<int, Tile<Arch>::ME>{}),
    pv_table<Arch, true>(std::make_integer_sequence<int, Tile<Arch>::ME>{})};

// The per-thread scratch and its layout (see attention_scratch).
struct FlashState {
  simd::Scratch scratch;
  FlashScratch layout;
};

}  // namespace
}  // namespace OPFUSE_SIMD_NS

template <class Arch>
std::size_t Attention::workspace(Arch, const OpDesc&) {
  return 0;  // the tiles are per thread, so they live in the prepared state
}

template <class Arch>
Status Attention::prepare(Arch, const OpDesc& desc, const Context& ctx, const Tensor* const*,
                          std::shared_ptr<void>& state) {
  auto s = std::make_shared<FlashState>();
  s->layout = attention_scratch(desc, isa_of<Arch>());
  s->scratch.threads = ctx.threads > 0 ? ctx.threads : 1;
  s->scratch.per_thread = s->layout.floats;
  if (s->layout.floats == 0) return {StatusCode::out_of_memory, "attention: the flash tiles do not fit in memory"};
  s->scratch.data = static_cast<float*>(
      std::aligned_alloc(64, s->layout.floats * sizeof(float) * static_cast<std::size_t>(s->scratch.threads)));
  if (!s->scratch.data) return {StatusCode::out_of_memory, "attention: cannot allocate the flash tiles"};
  state = std::move(s);
  return Status::ok();
}

template <class Arch>
void Attention::operator()(Arch, const KernelArgs& args) const {
  using B = fbatch<Arch>;
  constexpr int W = Tile<Arch>::W, NQ = Tile<Arch>::NQ, MK = Tile<Arch>::MK, ME = Tile<Arch>::ME;
  constexpr int64_t BQ = Tile<Arch>::BQ, BK = Tile<Arch>::BK;
  const AttentionParams& p = args.desc->p<AttentionParams>();
  const Tensor& q = *args.in[0];
  const Tensor& k = *args.in[1];
  const Tensor& v = *args.in[2];
  const Tensor* mask = p.has_mask ? args.in[3] : nullptr;
  const Tensor& o = *args.out[0];
  const int64_t Bn = q.dim(0), H = q.dim(1), Sq = q.dim(2), D = q.dim(3);
  const int64_t Skv = k.dim(2), Dv = v.dim(3);
  const auto qs = attention_strides(*args.desc, 0), ks = attention_strides(*args.desc, 1),
             vs = attention_strides(*args.desc, 2), os = attention_strides(*args.desc, 3);
  assert(qs[3] == 1 && ks[3] == 1 && vs[3] == 1 && os[3] == 1);  // attention_supports
  const auto ms = mask ? simd::broadcast_strides(mask->desc(), Shape{Bn, H, Sq, Skv}) : decltype(qs){};
  const float* qp = q.data();
  const float* kp = k.data();
  const float* vp = v.data();
  const float* mp = mask ? mask->data() : nullptr;
  float* op = o.mutable_data();
  const float scale = p.scale != 0.f ? p.scale : static_cast<float>(1.0 / std::sqrt(static_cast<double>(D)));
  const B qscale(scale * kLog2e);
  const auto* st8 = static_cast<const FlashState*>(args.state);
  const FlashScratch& lay = st8->layout;
  const int threads = simd::team_size(args.threads < st8->scratch.threads ? args.threads : st8->scratch.threads);
  const int64_t off = Skv - Sq;  // key j is hidden from query i when j > i + off (causal)
  const int64_t tiles = (Sq + BQ - 1) / BQ, items = Bn * H * tiles;
  if (items <= 0) return;

  auto run_item = [&](int tid, int64_t item) {
    float* base = st8->scratch.of(tid);
    float* const qt = base + lay.qt;
    float* const st = base + lay.st;
    float* const ot = base + lay.ot;
    float* const mrow = base + lay.m;
    float* const lrow = base + lay.l;
    float* const crow = base + lay.corr;
    // Causal: the heaviest tiles (last queries) first, for the dynamic schedule.
    const int64_t bh = item / tiles, t = p.causal ? tiles - 1 - item % tiles : item % tiles;
    const int64_t bb = bh / H, hh = bh % H;
    const int64_t i0 = t * BQ, lanes = std::min(BQ, Sq - i0);
    const float* qh = qp + bb * qs[0] + hh * qs[1] + i0 * qs[2];
    const float* kh = kp + bb * ks[0] + hh * ks[1];
    const float* vh = vp + bb * vs[0] + hh * vs[1];
    float* oh = op + bb * os[0] + hh * os[1] + i0 * os[2];

    // Q^T (D x BQ) times scale * log2(e): lane l holds query i0 + l; lanes past Sq are 0. The
    // scores come out of the QK^T tile in base 2 (exp2 below), with no multiply per score.
    for (int64_t d = 0; d < D; ++d)
      for (int64_t l = lanes; l < BQ; ++l) qt[d * BQ + l] = 0.f;
    simd::transpose_2d<Arch>(qh, qs[2], qt, BQ, lanes, D);
    for (int64_t e = 0; e < D * BQ; e += W) (B::load_aligned(qt + e) * qscale).store_aligned(qt + e);
    for (int64_t e = 0; e < Dv * BQ; e += W) B(0.f).store_aligned(ot + e);
    for (int64_t l = 0; l < BQ; l += W) {
      B(-kInf).store_aligned(mrow + l);
      B(0.f).store_aligned(lrow + l);
    }

    // Keys [0, kend): the last real query's visible range (all keys without causal).
    int64_t kend = Skv;
    if (p.causal) kend = std::clamp<int64_t>(i0 + lanes - 1 + off + 1, 0, Skv);
    Epilogue ep{nullptr, 0, 0, lanes, false, i0 + off};
    if (mp) {
      ep.mask = mp + bb * ms[0] + hh * ms[1] + i0 * ms[2];
      ep.mask_i = ms[2];
      ep.mask_j = ms[3];
    }
    for (int64_t j0 = 0; j0 < kend; j0 += BK) {
      const int64_t n = std::min(BK, kend - j0);
      // Diagonal tile: some key of it is hidden from the tile's first query (lane 0).
      const bool diag = p.causal && j0 + n - 1 > i0 + off;
      ep.causal = diag;
      const bool general = diag || mp;

      // S^T = scale K Q^T (+ mask, causal -inf), tile max.
      B tmax[NQ];
      for (int u = 0; u < NQ; ++u) tmax[u] = B(-kInf);
      for (int64_t j = 0; j < n; j += MK) {
        const int64_t rows = std::min<int64_t>(MK, n - j);
        kQk<Arch>[general][static_cast<std::size_t>(rows - 1)](kh + (j0 + j) * ks[2], ks[2], D, qt, st + j * BQ, tmax,
                                                               ep, j0 + j);
      }
      // Online softmax per query lane.
      for (int u = 0; u < NQ; ++u) {
        const B m_old = B::load_aligned(mrow + u * W);
        const B m_new = simd::vmax<Arch>(tmax[u], m_old);
        // A lane with no finite score yet subtracts 0: exp(-inf - 0) = 0, never -inf + inf.
        // Every exp argument is <= 0 (or NaN): s <= m' and m <= m'.
        const B m_use = xsimd::select(m_new == B(-kInf), B(0.f), m_new);
        const B c = simd::vmath::exp2_nonpositive<Arch>(m_old - m_use);
        B sum(0.f);
        float* s = st + u * W;
        for (int64_t j = 0; j < n; ++j) {
          const B e = simd::vmath::exp2_nonpositive<Arch>(B::load_aligned(s + j * BQ) - m_use);
          e.store_aligned(s + j * BQ);
          sum += e;
        }
        xsimd::fma(B::load_aligned(lrow + u * W), c, sum).store_aligned(lrow + u * W);
        m_new.store_aligned(mrow + u * W);
        c.store_aligned(crow + u * W);
      }
      // O^T = c O^T + V^T P^T: keys [0, full) are seen by every lane, the rest of a diagonal
      // tile through the masked FMA.
      const int64_t full = diag ? std::clamp<int64_t>(i0 + off + 1 - j0, 0, n) : n;
      for (int64_t e = 0; e < Dv; e += ME) {
        const auto r = static_cast<std::size_t>(std::min<int64_t>(ME, Dv - e) - 1);
        const float* ve = vh + j0 * vs[2] + e;
        kPv<Arch>[false][r](ve, vs[2], full, st, crow, ot + e * BQ, j0, i0 + off);
        if (full < n)
          kPv<Arch>[true][r](ve + full * vs[2], vs[2], n - full, st + full * BQ, nullptr, ot + e * BQ, j0 + full,
                             i0 + off);
      }
    }

    // O = O^T / l, scaled in place per query lane and transposed back. l = 0 (nothing visible,
    // or only -inf scores) writes 0, not O^T * 0: O^T may hold 0 * NaN from a V row behind a
    // -inf mask.
    for (int u = 0; u < NQ; ++u) {
      const B sum = B::load_aligned(lrow + u * W);
      const auto none = sum == B(0.f);
      const B inv = B(1.f) / xsimd::select(none, B(1.f), sum);
      for (int64_t e = 0; e < Dv; ++e) {
        float* o = ot + e * BQ + u * W;
        xsimd::select(none, B(0.f), B::load_aligned(o) * inv).store_aligned(o);
      }
    }
    simd::transpose_2d<Arch>(ot, BQ, oh, os[2], Dv, lanes);
  };

  if (threads <= 1 || items == 1) {
    for (int64_t it = 0; it < items; ++it) run_item(0, it);
    return;
  }
#pragma omp parallel num_threads(threads)
  {
    const ::opfuse::detail::DenormalGuard denormals;  // MXCSR is per thread (src/denormal.hpp)
    const int tid = omp_get_thread_num();
#pragma omp for schedule(dynamic, 1)
    for (int64_t it = 0; it < items; ++it) run_item(tid, it);
  }
}

OPFUSE_SIMD_INSTANTIATE_PREPARED(Attention);

}  // namespace opfuse::fused
