// simd/gemm_kernel.hpp - the reusable BLIS-style sgemm of the simd stage (internal header).
//
// Included only by simd/*.cpp (compiled once per ISA); everything lives in the ISA's inline
// namespace. simd/gemm.cpp explains the design and the measured numbers; this header holds the
// machinery so that other simd kernels (1x1 convolution, attention) can call the same GEMM:
//
//   SgemmArgs g;  g.m = ...;  g.a = ...;  ...  g.workspace = ws;  // sgemm_workspace() floats
//   sgemm<Arch>(g);                       // C (m, n) = alpha * op(A) op(B) + beta * C + bias
//
// Everything is row-major with leading dimensions: op(A) is (m, k), stored (m, k) with row step
// lda, or (k, m) when trans_a; op(B) is (k, n), stored (k, n) with row step ldb, or (n, k) when
// trans_b; C is (m, n) with row step ldc. sgemm allocates nothing. A caller that owns constant
// weights packs them once with pack_b() and passes packed_b; sgemm then never reads b.
#pragma once

#ifndef OPFUSE_SIMD_ISA
#error "simd/gemm_kernel.hpp is for simd/*.cpp, compiled once per ISA with OPFUSE_SIMD_ISA set"
#endif

#include <algorithm>
#include <array>
#include <atomic>
#include <cassert>
#include <cstddef>
#include <cstdint>
#include <tuple>
#include <utility>

#include "simd/common.hpp"
#include "simd/gemm.hpp"
#include "simd/transpose.hpp"

namespace opfuse::simd {
inline namespace OPFUSE_SIMD_NS {

// ---- register tile per ISA ------------------------------------------------------------------
// mr rows x nr columns of C live in vector registers during the k loop: mr * nr / W
// accumulators, nr / W loads of B and one broadcast of A per k step.
//   avx512: 14 x 32 = 28 zmm accumulators + 2 B vectors + 1 broadcast = 31 of 32 registers.
//   avx2:    6 x 16 = 12 ymm accumulators + 2 B + 1 broadcast = 15 of 16.
//   sse2:    4 x  8 =  8 xmm accumulators + 2 B + 1 broadcast + 1 product (no FMA) = 12 of 16.
template <class Arch>
struct GemmTile;
template <>
struct GemmTile<avx512> {
  static constexpr int mr = 14, nr = 32;
};
template <>
struct GemmTile<avx2> {
  static constexpr int mr = 6, nr = 16;
};
template <>
struct GemmTile<sse2> {
  static constexpr int mr = 4, nr = 8;
};

// Vectors per row of a whole register tile (nr / W).
template <class Arch>
inline constexpr int kGemmTileVectors = GemmTile<Arch>::nr / static_cast<int>(fbatch<Arch>::size);

inline std::int64_t gemm_round_up(std::int64_t x, std::int64_t m) { return (x + m - 1) / m * m; }
inline std::int64_t gemm_ceil_div(std::int64_t x, std::int64_t m) { return (x + m - 1) / m; }

// ---- cache blocking ---------------------------------------------------------------------------
// Upper bounds of the three cache blocks, derived once from the cache sizes (see gemm.cpp's
// header for the derivation).
struct GemmBlocking {
  std::int64_t mc, kc, nc;
};

template <class Arch>
GemmBlocking gemm_blocking() {
  constexpr std::int64_t mr = GemmTile<Arch>::mr, nr = GemmTile<Arch>::nr, f = sizeof(float);
  const CacheSizes& cs = cache_sizes();
  // KC: deep. Both micro-panels stream from L2 (the A micro-panel prefetched by the kernel, the
  // B micro-panel, kc x nr, by the hardware), so L1 does not bound kc; every k block costs each
  // C tile a load, a store and a pipeline fill and drain, so fewer, deeper blocks win (1024^3:
  // kc 1024 measured faster than 256). Bound: half of L2 still holds a 128-row A block.
  std::int64_t kc = static_cast<std::int64_t>(cs.l2) / 2 / (128 * f) / 8 * 8;
  kc = std::clamp<std::int64_t>(kc, 256, 1024);
  // MC: the mc x kc packed A block stays in half of L2 while every B micro-panel streams by.
  std::int64_t mc = static_cast<std::int64_t>(cs.l2) / 2 / (kc * f) / mr * mr;
  mc = std::clamp<std::int64_t>(mc, mr, 8192 / mr * mr);
  // NC: the kc x nc packed B block, shared by all threads, stays in half of L3.
  std::int64_t nc = static_cast<std::int64_t>(cs.l3) / 2 / (kc * f) / nr * nr;
  nc = std::clamp<std::int64_t>(nc, nr, 16384 / nr * nr);
  return {mc, kc, nc};
}

// The k blocks of one problem: K split into ceil(K / KC) near-equal blocks (no 1-wide last
// block when K = KC + 1). Block p covers [p * step, min(K, (p + 1) * step)).
template <class Arch>
std::int64_t gemm_k_step(std::int64_t k) {
  const std::int64_t kc = gemm_blocking<Arch>().kc;
  return gemm_round_up(gemm_ceil_div(k, gemm_ceil_div(k, kc)), 4);
}

// Problems too small to repay a team run on one thread: under 4 MFLOP, unless B is large enough
// (1 MiB) that streaming it from memory is the cost - a batch-1 classifier (1280 -> 1000: 2.6
// MFLOP over 5 MB of weights) reads its weights twice as fast on two cores.
inline bool gemm_one_thread(std::int64_t m, std::int64_t n, std::int64_t k) {
  const double flops = 2.0 * static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k);
  return flops < 4e6 && static_cast<double>(n) * static_cast<double>(k) * sizeof(float) < 1048576.0;
}

// ---- the reusable entry ---------------------------------------------------------------------------
// An epilogue: what the micro-kernel does to a finished tile on the last k block, after alpha,
// beta and the bias and before the store (the fused stage's post-op chains). The interface,
// which this do-nothing default spells out:
//   enabled                    false compiles every epilogue branch out of the micro-kernel
//   prefetch<Arch>(i, j, r, l)  the tile at (i, j) of C, r rows, is about to be finished:
//                              prefetch its operands with locality l (2: into L2, 3: into L1)
//   apply_tile<Arch>(t, ldt, r, i, j, cols)
//                              t holds C's rows i .. i + r - 1, columns j .. j + cols - 1, one
//                              row every ldt floats (64-byte aligned, ldt a multiple of the
//                              vector width); maps them in place. Lanes past `cols` up to the
//                              next vector boundary are padding: mapped or not, never stored.
//   apply_tile<Arch>(t, ldt, r, i, j, cols, c, ldc)
//                              the same for a full-width tile (cols == nr), with the result
//                              stored into C (row stride ldc) instead of back into t.
//   apply_registers<Arch, R, NV>(acc, i, j, c, ldc) -> bool
//                              (only called when enabled) a full-width tile still in its
//                              accumulator registers: map and store it to C and return true, or
//                              return false (C untouched) and the tile goes through apply_tile.
struct NoEpilogue {
  static constexpr bool enabled = false;
  template <class Arch>
  void prefetch(std::int64_t, std::int64_t, int, int) const {}
  template <class Arch>
  void apply_tile(float*, std::int64_t, int, std::int64_t, std::int64_t, std::int64_t) const {}
};

struct SgemmArgs {
  std::int64_t m = 0, n = 0, k = 0;
  float alpha = 1.f;
  float beta = 0.f;  // 0: C is never read (may hold NaN)
  const float* a = nullptr;
  std::int64_t lda = 0;
  bool trans_a = false;
  // Optional: row i of op(A) is multiplied by a_scale[i] as it is packed (diag(a_scale) op(A):
  // a per-output-row weight scale, such as a batchnorm folded into a conv's weights, at no cost).
  const float* a_scale = nullptr;
  // Optional: pack_a_all() of this op(A) and a_scale (same m, k), for constant weights in A (an
  // NCHW 1x1 convolution's): sgemm then packs no A block. a and a_scale stay set: the few-row
  // path reads them.
  const float* packed_a = nullptr;
  const float* b = nullptr;
  std::int64_t ldb = 0;
  bool trans_b = false;
  const float* packed_b = nullptr;  // pack_b() of b (same n, k, trans_b), or nullptr
  float* c = nullptr;
  std::int64_t ldc = 0;
  // Optional bias added once: C[i][j] += bias[i * bias_rs + j * bias_cs]; a stride of 0
  // broadcasts, bias_cs is 0 or 1.
  const float* bias = nullptr;
  std::int64_t bias_rs = 0, bias_cs = 0;
  // At most this many columns per packed B block (0: the cache-derived NC). A caller whose B is
  // large, read once and packed per call (an activation) caps it so that each packed block is
  // still in L2 when the micro-kernels read it back.
  std::int64_t nc_cap = 0;
  float* workspace = nullptr;  // sgemm_workspace(m, n, k, threads, nc_cap) floats
  // At most the count sgemm_workspace() was sized for; passed through team_size(), so 1 inside
  // a caller's parallel region.
  int threads = 1;
};

// Floats of a fully packed B (k x n): every k block holds round_up(n, nr) columns in nr-wide
// micro-panels.
template <class Arch>
std::size_t packed_b_size(std::int64_t n, std::int64_t k) {
  return static_cast<std::size_t>(gemm_round_up(n, GemmTile<Arch>::nr) * k);
}

// Floats of a fully packed A (m x k): ceil(m / mr) row tiles of mr x k each (pack_a_all), and
// the slack of one vector that the last tile's single-column reads run into.
template <class Arch>
std::size_t packed_a_size(std::int64_t m, std::int64_t k) {
  constexpr std::int64_t mr = GemmTile<Arch>::mr;
  return static_cast<std::size_t>(gemm_round_up(gemm_ceil_div(m, mr) * mr * k + fbatch<Arch>::size, 16));
}

// Workspace floats of sgemm for up to `threads` threads: one packed B block shared by the team
// and one packed A block per thread, each 64-byte aligned.
// Rows of op(A) whose packed kc-deep block fits in half of L2: a thread with at most this many
// rows packs them as one block and reads B in place (see sgemm).
template <class Arch>
std::int64_t gemm_in_place_rows(std::int64_t kc) {
  return static_cast<std::int64_t>(cache_sizes().l2) / 2 / (static_cast<std::int64_t>(sizeof(float)) * kc);
}

// Floats of one thread's packed A block for an m-row problem with k step kc: MC rows, or all
// rows when they are few enough to be packed as one block (gemm_in_place_rows).
template <class Arch>
std::int64_t gemm_a_block(std::int64_t m, std::int64_t kc) {
  constexpr std::int64_t mr = GemmTile<Arch>::mr;
  const std::int64_t mc = std::min(gemm_blocking<Arch>().mc, gemm_round_up(m, mr));
  const std::int64_t one = std::min(gemm_round_up(m, mr), gemm_round_up(gemm_in_place_rows<Arch>(kc), mr));
  // + W: the slack one vector load of the last k step reads past the last micro-panel
  // (load_a_step).
  return gemm_round_up(kc * std::max(mc, one) + static_cast<std::int64_t>(fbatch<Arch>::size), 16);
}

// Problems of at most this many rows (and B not packed at prepare) take sgemm_rows: a
// register tile of mr rows would be mostly empty, and packing B - used once - is pure extra
// traffic.
inline constexpr std::int64_t kGemvRows = 4;

// sgemm_rows on a team streams B (k, n) in chunks of its rows, each into its own partial sums,
// the threads taking the next chunk when done. Chunks, not one block per thread: a thread
// slowed by a neighbour or the hypervisor would otherwise hold the whole team at the barrier.
// Partials per chunk, added in chunk order, keep the result independent of which thread took
// which chunk. At least 64 rows per chunk (the partials' traffic stays under 1/64 of B's) and
// at most 16 chunks, fewer where 16 partials of m rows would pass 4 MiB.
// Never fewer chunks than threads, and never fewer for fewer threads: the workspace is sized
// for the most threads, and the team may be smaller.
inline std::int64_t gemv_k_chunks(std::int64_t m, std::int64_t n, std::int64_t k, int threads) {
  if (threads <= 1) return 1;
  const std::int64_t row = std::max<std::int64_t>(m, 1) * gemm_round_up(n, 16);
  const std::int64_t by_mem = (std::int64_t{1} << 20) / row;
  return std::max<std::int64_t>(std::min({std::int64_t{16}, k / 64, by_mem}), threads);
}

template <class Arch>
std::size_t sgemm_workspace(std::int64_t m, std::int64_t n, std::int64_t k, int threads, std::int64_t nc_cap = 0) {
  constexpr std::int64_t nr = GemmTile<Arch>::nr;
  const GemmBlocking bl = gemm_blocking<Arch>();
  const std::int64_t kc = gemm_k_step<Arch>(k);
  std::int64_t nc = std::min(bl.nc, gemm_round_up(n, nr));
  if (nc_cap > 0) nc = std::min(nc, gemm_round_up(nc_cap, nr));
  const std::int64_t b_block = gemm_round_up(kc * nc, 16), a_block = gemm_a_block<Arch>(m, kc);
  const std::int64_t panel = gemm_round_up(kc * nr, 16);  // one B micro-panel (BPanels::direct, each)
  // The row-streaming path of at most kGemvRows rows (sgemm_rows) accumulates in m rows of
  // round_up(n, 16) floats per thread instead.
  const std::int64_t rows = m <= kGemvRows ? gemv_k_chunks(m, n, k, threads) * m * gemm_round_up(n, 16) : 0;
  return static_cast<std::size_t>(16 + std::max(b_block + std::max(threads, 1) * (a_block + panel), rows));
}

namespace gemm_detail {

using std::int64_t;

// ---- packing ----------------------------------------------------------------------------------
// The row tiles of an mc-row block: ceil(mc / mr) tiles of near-equal height (tile q covers
// rows [q * mc / t, (q + 1) * mc / t)), so 128 rows are 8 x 13 + 2 x 12 rows instead of 9 x 14
// + one 2-row tile that would run at a fraction of the FMA rate (measurably slower at M = 128).
// A packed_a (pack_a_all) fixes the tiles of all M rows once; a block is then a run of t of
// them from tile q0, and begin() counts rows from the run's first.
template <class Arch>
struct RowTiles {
  int64_t mc, total, q0 = 0, t;
  explicit RowTiles(int64_t rows) : mc(rows), total(gemm_ceil_div(rows, GemmTile<Arch>::mr)), t(total) {}
  RowTiles(const RowTiles& all, int64_t first, int64_t count)
      : mc(all.mc), total(all.total), q0(all.q0 + first), t(count) {}
  int64_t row(int64_t q) const { return q * mc / total; }  // first row of tile q of all
  int64_t begin(int64_t q) const { return row(q0 + q) - row(q0); }
};

// The W x W register transpose of the ISA (transpose.hpp), on xsimd's register type.
#ifdef __AVX512F__
inline void transpose_regs(__m512 (&r)[16]) { transpose16(r); }
#endif
#ifdef __AVX2__
inline void transpose_regs(__m256 (&r)[8]) { transpose8(r); }
#endif

// One row tile of an untransposed A (rows a0 .. a0 + rows - 1, rows <= mr <= W) into its kc x
// mr micro-panel, W k steps at a time through a W x W register transpose (AVX-512 and AVX2;
// one float at a time, packing A was a visible share of 1024^3 at AVX-512 and about a fifth of
// the 1x1 320 -> 1280 @7 convolution at AVX2, perf). The vectors past the tile's rows load row
// a0 again. Each transposed vector holds one k step: AVX-512 stores its mr lanes masked; AVX2
// stores it whole (the lanes past mr land on the next k step's first floats, which the next
// store rewrites) and the last of the W partially, so nothing past the block is written. While
// a tile is packed, the same number of rows after it is prefetched (`ahead`).
template <class Arch>
void pack_a_tile_transposed(const SgemmArgs& g, int64_t a0, int64_t rows, bool ahead, int64_t k0, int64_t kc,
                            const float* sc, float* dst) {
  using B = fbatch<Arch>;
  using R = typename B::register_type;
  constexpr int W = static_cast<int>(B::size);
  constexpr int64_t mr = GemmTile<Arch>::mr;
  static_assert(mr <= W);
  const float* src[W];
  for (int64_t i = 0; i < W; ++i) src[i] = g.a + (a0 + (i < rows ? i : 0)) * g.lda + k0;
  int64_t k = 0;
  for (; k + W <= kc; k += W) {
    if (ahead)
      for (int64_t i = 0; i < rows; ++i) __builtin_prefetch(src[i] + rows * g.lda + k, 0, 3);
    R r[W];
    for (int i = 0; i < W; ++i) r[i] = B::load_unaligned(src[i] + k);
    if (sc)
      for (int64_t i = 0; i < rows; ++i) r[i] = B(r[i]) * B(sc[i]);
    transpose_regs(r);
    for (int l = 0; l < W; ++l) {
      float* d = dst + (k + l) * mr;
      if constexpr (std::is_same_v<Arch, xsimd::avx512f>)
        _mm512_mask_storeu_ps(d, (1u << mr) - 1, r[l]);
      else if (l + 1 < W)
        B(r[l]).store_unaligned(d);
      else
        store_partial<Arch>(d, B(r[l]), mr);
    }
  }
  for (; k < kc; ++k)
    for (int64_t i = 0; i < rows; ++i) dst[k * mr + i] = sc ? src[i][k] * sc[i] : src[i][k];
}

// A block: rows [i0, i0 + mc) x k [k0, k0 + kc) of op(A) into one micro-panel per row tile,
// each kc x mr (k-major: the values the micro-kernel broadcasts at one k step are adjacent).
// Rows past a tile's height are not written: the micro-kernel has a variant per row count, and
// the single-column edge tiles (load_a_step) read them only into lanes they discard. The W
// floats after the last micro-panel, which those read too, are zeroed.
template <class Arch>
void pack_a(const SgemmArgs& g, int64_t i0, int64_t mc, int64_t k0, int64_t kc, float* dst) {
  constexpr int64_t mr = GemmTile<Arch>::mr;
  const RowTiles<Arch> tiles(mc);
  std::fill_n(dst + tiles.t * mr * kc, fbatch<Arch>::size, 0.f);
  const float* sc = g.a_scale ? g.a_scale + i0 : nullptr;  // the block's row scales
  if (g.trans_a) {
    // A is (k, m): row k of the block is mc contiguous floats; walk it once per k.
    for (int64_t k = 0; k < kc; ++k) {
      const float* src = g.a + (k0 + k) * g.lda + i0;
      for (int64_t q = 0; q < tiles.t; ++q) {
        const int64_t r0 = tiles.begin(q), rows = tiles.begin(q + 1) - r0;
        float* d = dst + q * mr * kc + k * mr;
        if (sc)
          for (int64_t i = 0; i < rows; ++i) d[i] = src[r0 + i] * sc[r0 + i];
        else
          for (int64_t i = 0; i < rows; ++i) d[i] = src[r0 + i];
      }
    }
    return;
  }
  // A is (m, k): each row is a short sequential stream of kc floats, too short for the hardware
  // prefetcher (measured: the loads of these rows were most of the packing time), so while one
  // tile is packed the same number of rows after it is prefetched.
  for (int64_t q = 0; q < tiles.t; ++q, dst += mr * kc) {
    const int64_t r0 = tiles.begin(q), rows = tiles.begin(q + 1) - r0;
    if constexpr (std::is_same_v<Arch, xsimd::avx512f> || std::is_same_v<Arch, xsimd::fma3<xsimd::avx2>>) {
      pack_a_tile_transposed<Arch>(g, i0 + r0, rows, r0 + 2 * rows <= mc, k0, kc, sc ? sc + r0 : nullptr, dst);
      continue;
    }
    for (int64_t i = 0; i < rows; ++i) {
      const float* src = g.a + (i0 + r0 + i) * g.lda + k0;
      if (r0 + rows + i < mc)
        for (int64_t k = 0; k < kc; k += 16) __builtin_prefetch(src + rows * g.lda + k, 0, 3);
      if (sc) {
        const float f = sc[r0 + i];
        for (int64_t k = 0; k < kc; ++k) dst[k * mr + i] = src[k] * f;
      } else {
        for (int64_t k = 0; k < kc; ++k) dst[k * mr + i] = src[k];
      }
    }
  }
}

// One B micro-panel: k [k0, k0 + kc) x columns [j0, j0 + cols) of op(B), cols <= nr, into
// kc x nr (row k holds the nr values of one k step), zero-padded to nr columns.
template <class Arch>
void pack_b_panel(const float* b, int64_t ldb, bool trans_b, int64_t k0, int64_t kc, int64_t j0, int64_t cols,
                  float* dst, bool prefetch_next = false) {
  using B = fbatch<Arch>;
  constexpr int64_t nr = GemmTile<Arch>::nr, W = B::size;
  if (!trans_b && cols == nr) {
    // B is (k, n): each k row of the panel is nr contiguous floats.
    const float* src = b + k0 * ldb + j0;
    for (int64_t k = 0; k < kc; ++k)
      for (int64_t v = 0; v < nr; v += W) B::load_unaligned(src + k * ldb + v).store_aligned(dst + k * nr + v);
    return;
  }
  if (cols < nr)
    for (int64_t k = 0; k < kc; ++k)
      for (int64_t j = cols; j < nr; ++j) dst[k * nr + j] = 0.f;
  if (trans_b) {
    // B is (n, k): column j of op(B) is row j of b, contiguous along k. As in pack_a, the
    // same rows of the next panel are prefetched while this one is packed. W rows x W k steps
    // at a time go through a register transpose (one float at a time, every store was W
    // floats from the last: a PyTorch-layout weight, packed on every call, paid that for each
    // of its elements); the k tail and the rows past the last whole W one float at a time.
    if (prefetch_next)
      for (int64_t j = 0; j < cols; ++j)
        for (int64_t k = 0; k < kc; k += 16) __builtin_prefetch(b + (j0 + j) * ldb + k0 + nr * ldb + k, 0, 3);
    const int64_t jw = cols / W * W, kw = kc / W * W;
    for (int64_t j = 0; j < jw; j += W)
      for (int64_t k = 0; k < kw; k += W) transpose_block<Arch>(b + (j0 + j) * ldb + k0 + k, ldb, dst + k * nr + j, nr);
    for (int64_t j = 0; j < cols; ++j) {
      const float* src = b + (j0 + j) * ldb + k0;
      for (int64_t k = j < jw ? kw : 0; k < kc; ++k) dst[k * nr + j] = src[k];
    }
  } else {
    const float* src = b + k0 * ldb + j0;
    for (int64_t k = 0; k < kc; ++k)
      for (int64_t j = 0; j < cols; ++j) dst[k * nr + j] = src[k * ldb + j];
  }
}

// Consecutive B micro-panels: columns [j0, j0 + cols) (j0 a multiple of nr), panel q at
// dst + q * nr * kc. Untransposed, each k row of the range is read once, front to back (one
// long stream instead of 2-line pieces per panel).
template <class Arch>
void pack_b_range(const float* b, int64_t ldb, bool trans_b, int64_t k0, int64_t kc, int64_t j0, int64_t cols,
                  float* dst) {
  using B = fbatch<Arch>;
  constexpr int64_t nr = GemmTile<Arch>::nr, W = B::size;
  const int64_t full = cols / nr * nr;
  if (!trans_b) {
    for (int64_t k = 0; k < kc; ++k) {
      const float* src = b + (k0 + k) * ldb + j0;
      for (int64_t j = 0; j < full; j += nr)
        for (int64_t v = 0; v < nr; v += W) B::load_unaligned(src + j + v).store_aligned(dst + j * kc + k * nr + v);
    }
  } else {
    for (int64_t j = 0; j < full; j += nr)
      pack_b_panel<Arch>(b, ldb, trans_b, k0, kc, j0 + j, nr, dst + j * kc, j + nr < cols);
  }
  if (full < cols) pack_b_panel<Arch>(b, ldb, trans_b, k0, kc, j0 + full, cols - full, dst + full * kc);
}

// ---- the micro-kernel -------------------------------------------------------------------------
// How one tile's result is written: C = alpha * acc (+ beta * C on the first k block, + C on
// the later ones) (+ bias on the last one) (then, on the last one, the caller's epilogue).
struct Store {
  float alpha, beta;
  bool first, last;
  const float* bias;  // already offset to the tile's (row 0, column 0); nullptr: none
  int64_t bias_rs, bias_cs;
  int64_t row0, col0;  // the tile's (row 0, column 0) in C, for the epilogue's operands
  int64_t ldpb;        // B micro-panel row step: nr when packed, ldb when read in place
  // npf requests into L2 along the k loop, one per k step: the line at pf (and the one after
  // it with pf_two), pf moving on by pf_step floats each time.
  const float* pf = nullptr;
  int64_t npf = 0, pf_step = 16;
  bool pf_two = false;
};

// How many k steps ahead the rows of a B read in place are prefetched (each step is ~mr cycles of
// FMAs; an L3 hit takes ~50 ns).
inline constexpr int64_t kBAhead = 16;

// Single columns of a right edge, beside its whole vectors (micro_tile's E): at most this many,
// 0 where the ISA does not take them. One such column costs one FMA per k step (the k step's mr
// A values as one vector times the broadcast B value), a vector of columns costs R, so a narrow
// remainder stops paying for a whole vector: a 49-pixel 1x1 convolution's second 32-column panel
// (17 columns) becomes one vector and one column, 15 FMAs per k step instead of 28 at AVX-512.
template <class Arch>
inline constexpr int kEdgeColumns = std::is_same_v<Arch, sse2> ? 0 : 4;

// The mr floats of one k step of a packed A micro-panel as one vector. A plain load: the lanes
// past mr read the next k step, or past the last k step the block's slack (gemm_a_block,
// zeroed by pack_a), and are discarded. A masked load was no cheaper, and GCC, not seeing which
// memory it reads, kept a copy of every accumulator on the stack, stored at each k step.
template <class Arch>
fbatch<Arch> load_a_step(const float* pa) {
  static_assert(GemmTile<Arch>::mr <= fbatch<Arch>::size, "a k step of A fits one vector");
  return fbatch<Arch>::load_unaligned(pa);
}

template <class Arch, int R, class Epi, int NV>
void store_tile(fbatch<Arch> (&acc)[R][NV], float* __restrict c, int64_t ldc, int64_t cols, const Store& st,
                const Epi& epi);

// R rows (R <= mr) x nr columns of C += A micro-panel (kc x mr) * B micro-panel (kc x nr).
// The accumulators are a fixed-size array indexed only by constants after unrolling, so the
// compiler keeps all of them in registers. `cols` < nr is the right edge: the tile's first NV
// vectors are computed (B is zero-padded) and only `cols` columns are stored. NV is nr / W,
// or 1 for an edge of at most one vector (macro_kernel), fewer for one with single columns:
// E > 0 is a right edge of NV vectors and E more columns (B packed), which accumulate as
// column vectors (lane i = row i, see kEdgeColumns) and become the tile's vector NV before the
// store. On the last k block an enabled epilogue (see NoEpilogue) maps every vector of the
// finished tile before its store (store_tile).
template <class Arch, int R, class Epi, int NV = kGemmTileVectors<Arch>, int E = 0>
void micro_tile(int64_t kc, const float* __restrict pa, const float* __restrict pb, float* __restrict c, int64_t ldc,
                int64_t cols, const Store& st, const Epi& epi) {
  using B = fbatch<Arch>;
  constexpr int mr = GemmTile<Arch>::mr, nr = GemmTile<Arch>::nr, W = static_cast<int>(B::size);
  static_assert(E == 0 || (NV + 1) * W <= nr, "the single columns fill the tile's vector NV");
  B acc[R][NV > 0 ? NV : 1];
  // Single columns alone (NV == 0) run S chains per column on alternate k steps: one FMA chain
  // per column would wait on the FMA latency at every k step.
  constexpr int S = NV > 0 || E == 0 ? 1 : (E == 1 ? 4 : 2);
  B col[S][E > 0 ? E : 1];
#pragma GCC unroll 16
  for (int i = 0; i < R; ++i)
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) acc[i][v] = B(0.f);
#pragma GCC unroll 4
  for (int s = 0; s < S; ++s)
#pragma GCC unroll 4
    for (int e = 0; e < E; ++e) col[s][e] = B(0.f);

  // B is a packed micro-panel (ldpb == nr, aligned, read front to back) or B's own rows read in
  // place (ldpb == ldb, see sgemm): then each row is prefetched kBAhead k steps before use.
  const int64_t ldpb = st.ldpb;
  const float* pf = st.pf;
  int64_t npf = st.npf;
  const auto prefetch_next = [&] {
    if (npf > 0) {
      __builtin_prefetch(pf, 0, 2);
      if (st.pf_two) __builtin_prefetch(pf + 16, 0, 2);
      pf += st.pf_step;
      --npf;
    }
  };
  // The single columns alone (B is then a packed panel).
  const auto columns_loop = [&](int64_t steps) {
    const auto step = [&](int s) {
      prefetch_next();
      __builtin_prefetch(pa + 8 * mr, 0, 3);
      const B a = load_a_step<Arch>(pa);
#pragma GCC unroll 4
      for (int e = 0; e < E; ++e) col[s][e] = xsimd::fma(a, B(pb[e]), col[s][e]);
      pa += mr;
      pb += nr;
    };
    int64_t k = 0;
    for (; k + S <= steps; k += S)
#pragma GCC unroll 4
      for (int s = 0; s < S; ++s) step(s);
    for (; k < steps; ++k) step(0);
  };
  const auto k_loop = [&](int64_t steps, auto in_place) {
#pragma GCC unroll 4
    for (int64_t k = 0; k < steps; ++k) {
      B b[NV > 0 ? NV : 1];
      if constexpr (decltype(in_place)::value) {
#pragma GCC unroll 4
        for (int v = 0; v < NV; ++v) b[v] = B::load_unaligned(pb + v * W);
        __builtin_prefetch(pb + kBAhead * ldpb, 0, 3);
        if constexpr (nr * sizeof(float) > 64) __builtin_prefetch(pb + kBAhead * ldpb + nr - 1, 0, 3);
      } else {
#pragma GCC unroll 4
        for (int v = 0; v < NV; ++v) b[v] = B::load_aligned(pb + v * W);
        prefetch_next();
      }
      __builtin_prefetch(pa + 8 * mr, 0, 3);
      if constexpr (NV > 0) {
#pragma GCC unroll 16
        for (int i = 0; i < R; ++i) {
          const B ai(pa[i]);
#pragma GCC unroll 4
          for (int v = 0; v < NV; ++v) acc[i][v] = xsimd::fma(ai, b[v], acc[i][v]);
        }
      }
      if constexpr (E > 0) {
        const B a = load_a_step<Arch>(pa);
#pragma GCC unroll 4
        for (int e = 0; e < E; ++e) col[0][e] = xsimd::fma(a, B(pb[NV * W + e]), col[0][e]);
      }
      pa += mr;
      pb += decltype(in_place)::value ? ldpb : nr;
    }
  };
  const auto run_k = [&](int64_t steps) {
    if constexpr (NV == 0)
      columns_loop(steps);
    else if (ldpb == nr)
      k_loop(steps, std::false_type{});
    else
      k_loop(steps, std::true_type{});
  };
  // The C tile is fetched into L2 at the start and into L1 only 32 k steps before the end:
  // with ldc a multiple of 1 KiB its rows share a few L1 sets, and held there for the whole loop
  // they would evict each other and the B micro-panel. The epilogue's operands likewise (into L2
  // one tile ahead by macro_kernel, into L1 here).
  const bool reads_c = !st.first || st.beta != 0.f;
  const bool epilogue = Epi::enabled && st.last;
  if (reads_c)
    for (int i = 0; i < R; ++i) {
      __builtin_prefetch(c + i * ldc, 1, 2);
      __builtin_prefetch(c + i * ldc + nr - 1, 1, 2);
    }
  const int64_t late = reads_c || epilogue ? std::min<int64_t>(kc, 32) : 0;
  run_k(kc - late);
  if (late) {
    if (reads_c)
      for (int i = 0; i < R; ++i) {
        __builtin_prefetch(c + i * ldc, 1, 3);
        __builtin_prefetch(c + i * ldc + nr - 1, 1, 3);
      }
    if constexpr (Epi::enabled)
      if (epilogue) epi.template prefetch<Arch>(st.row0, st.col0, R, 3);
    run_k(late);
  }
  if constexpr (E == 0) {
    store_tile<Arch, R, Epi, NV>(acc, c, ldc, cols, st, epi);
  } else {
    // Column vector e holds column NV * W + e of every row: transposed into row vectors.
    alignas(64) float t[E][W];
#pragma GCC unroll 4
    for (int e = 0; e < E; ++e) {
#pragma GCC unroll 4
      for (int s = 1; s < S; ++s) col[0][e] += col[s][e];
      col[0][e].store_aligned(t[e]);
    }
    // Unrolled like the k loop: an accumulator indexed by a variable would live in memory.
    B tile[R][NV + 1];
#pragma GCC unroll 16
    for (int i = 0; i < R; ++i) {
      alignas(64) float row[W] = {};
#pragma GCC unroll 4
      for (int e = 0; e < E; ++e) row[e] = t[e][i];
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) tile[i][v] = acc[i][v];
      tile[i][NV] = B::load_aligned(row);
    }
    store_tile<Arch, R, Epi, NV + 1>(tile, c, ldc, cols, st, epi);
  }
}

// Writes the finished register tile acc (R rows, NV vectors) to C as Store says: whole when
// cols == NV * W, else the right edge's first `cols` columns.
template <class Arch, int R, class Epi, int NV>
void store_tile(fbatch<Arch> (&acc)[R][NV], float* __restrict c, int64_t ldc, int64_t cols, const Store& st,
                const Epi& epi) {
  using B = fbatch<Arch>;
  constexpr int nr = GemmTile<Arch>::nr, W = static_cast<int>(B::size);
  const bool epilogue = Epi::enabled && st.last;
  const B alpha(st.alpha), beta(st.beta);
  // With an epilogue the finished tile goes through an L1 buffer: spilled once, the chain runs
  // over it step by step (each step one tight loop with its kind fixed, so the accumulators are
  // not held live across the activations' code), then copied to C: C is still written once.
  alignas(64) float t[Epi::enabled ? R * nr : 1];
  // A whole tile (NV * W == nr), or an edge of exactly one vector.
  if (cols == NV * W) {
    // All loads of the tile first, then all stores: C's rows are often 4 KiB apart (ldc 1024),
    // and a load behind a store with the same low 12 address bits waits for it (4K aliasing).
    // Each term in a pass of its own, its condition tested once per tile: GCC does not unswitch
    // an unrolled loop, and tested per vector these conditions were a large share of a K = 64
    // GEMM's time (a ResNet 1x1 expand stores a tile every 64 k steps). Same operations, same
    // order: alpha acc, then + C or + beta C, then + bias.
    const auto each = [&](auto&& f) {
#pragma GCC unroll 16
      for (int i = 0; i < R; ++i)
#pragma GCC unroll 4
        for (int v = 0; v < NV; ++v) f(i, v);
    };
    if (st.alpha != 1.f) each([&](int i, int v) { acc[i][v] = alpha * acc[i][v]; });
    if (!st.first)
      each([&](int i, int v) { acc[i][v] += B::load_unaligned(c + i * ldc + v * W); });
    else if (st.beta != 0.f)
      each([&](int i, int v) { acc[i][v] = xsimd::fma(beta, B::load_unaligned(c + i * ldc + v * W), acc[i][v]); });
    if (st.last && st.bias && st.bias_cs)
      each([&](int i, int v) { acc[i][v] += B::load_unaligned(st.bias + i * st.bias_rs + v * W * st.bias_cs); });
    else if (st.last && st.bias)
      each([&](int i, int v) { acc[i][v] += B(st.bias[i * st.bias_rs]); });
    if constexpr (Epi::enabled) {
      if (epilogue) {
        if (epi.template apply_registers<Arch, R, NV>(acc, st.row0, st.col0, c, ldc)) return;
#pragma GCC unroll 16
        for (int i = 0; i < R; ++i)
#pragma GCC unroll 4
          for (int v = 0; v < NV; ++v) acc[i][v].store_aligned(t + i * nr + v * W);
        epi.template apply_tile<Arch>(t, nr, R, st.row0, st.col0, NV * W, c, ldc);  // the last step stores C
        return;
      }
    }
#pragma GCC unroll 16
    for (int i = 0; i < R; ++i)
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) acc[i][v].store_unaligned(c + i * ldc + v * W);
    return;
  }
  // Right edge: the same formulas one row at a time, every load and store of C, the bias or an
  // operand masked to the valid columns (load_partial / store_partial), so nothing past column
  // `cols` is touched. The lanes past it are padding: mapped, never stored. (Gathered into a
  // zeroed stack buffer one float at a time instead, each vector load of that buffer waited
  // for store forwarding to fail: most of the edge's time on a 17-column panel, perf.)
  for (int i = 0; i < R; ++i) {
    float* row = c + i * ldc;
    const float* bias = st.last && st.bias ? st.bias + i * st.bias_rs : nullptr;
    for (int v = 0; v < NV && v * W < cols; ++v) {
      const int64_t j0 = v * W, cnt = std::min<int64_t>(W, cols - j0);
      B x = st.alpha == 1.f ? acc[i][v] : alpha * acc[i][v];
      if (!st.first)
        x += load_partial<Arch>(row + j0, cnt);
      else if (st.beta != 0.f)
        x = xsimd::fma(beta, load_partial<Arch>(row + j0, cnt), x);
      if (bias) x += st.bias_cs ? load_partial<Arch>(bias + j0, cnt) : B(*bias);
      if constexpr (Epi::enabled) {
        if (epilogue) {
          x.store_aligned(t + i * nr + j0);
          continue;
        }
      }
      store_partial<Arch>(row + j0, x, cnt);
    }
  }
  if constexpr (Epi::enabled) {
    if (epilogue) {
      epi.template apply_tile<Arch>(t, nr, R, st.row0, st.col0, cols);
      for (int i = 0; i < R; ++i)
        for (int64_t j0 = 0; j0 < cols; j0 += W)
          store_partial<Arch>(c + i * ldc + j0, B::load_aligned(t + i * nr + j0), cols - j0);
    }
  }
}

template <class Epi>
using TileFn = void (*)(int64_t, const float*, const float*, float*, int64_t, int64_t, const Store&, const Epi&);

// micro_tile<Arch, R, Epi, NV> for R = 1 .. mr, indexed by R - 1: the bottom edge runs only its
// rows. kTiles: whole tiles; kEdgeTiles: one vector of columns (the narrow right edge).
template <class Arch, class Epi, int NV, int... I>
constexpr auto make_tile_table(std::integer_sequence<int, I...>) {
  return std::array<TileFn<Epi>, sizeof...(I)>{&micro_tile<Arch, I + 1, Epi, NV>...};
}
template <class Arch, class Epi>
inline constexpr auto kTiles =
    make_tile_table<Arch, Epi, kGemmTileVectors<Arch>>(std::make_integer_sequence<int, GemmTile<Arch>::mr>{});
template <class Arch, class Epi>
inline constexpr auto kEdgeTiles = make_tile_table<Arch, Epi, 1>(std::make_integer_sequence<int, GemmTile<Arch>::mr>{});

// micro_tile<Arch, R, Epi, V, E> for the right edges of V < nr / W whole vectors and E <=
// kEdgeColumns single columns, for the kColumnHeights heights R = mr - kColumnHeights + 1 ..
// mr: those RowTiles gives any block of more than about mr * mr rows (128 rows: 12 and 13 at
// AVX-512), which keeps the instantiations few. Indexed by column_tile.
inline constexpr int kColumnHeights = 3;
template <class Arch, class Epi, int... I>
constexpr auto make_column_table(std::integer_sequence<int, I...>) {
  constexpr int r0 = GemmTile<Arch>::mr - kColumnHeights + 1, nv = kGemmTileVectors<Arch>, ne = kEdgeColumns<Arch>;
  return std::array<TileFn<Epi>, sizeof...(I)>{&micro_tile<Arch, r0 + I / (nv * ne), Epi, I / ne % nv, I % ne + 1>...};
}
template <class Arch, class Epi>
inline constexpr auto kColumnTiles = make_column_table<Arch, Epi>(
    std::make_integer_sequence<int, kColumnHeights * kGemmTileVectors<Arch> * kEdgeColumns<Arch>>{});

// The kColumnTiles tile of a `rows` x `cols` right edge whose last vector would hold a few
// columns; nullptr where there is none (whole vectors, more columns, a lower tile).
template <class Arch, class Epi>
TileFn<Epi> column_tile(int64_t rows, int64_t cols) {
  constexpr int64_t W = fbatch<Arch>::size, r0 = GemmTile<Arch>::mr - kColumnHeights + 1;
  constexpr int64_t nv = kGemmTileVectors<Arch>, ne = kEdgeColumns<Arch>;
  const int64_t v = cols / W, e = cols % W;
  if (e == 0 || e > ne || v >= nv || rows < r0) return nullptr;
  return kColumnTiles<Arch, Epi>[static_cast<std::size_t>(((rows - r0) * nv + v) * ne + e - 1)];
}

// Where the macro-kernel finds B's micro-panels.
//   block:  in the packed block pb (packed at prepare, or by the team at execute);
//   direct: in b's own rows, read in place by the micro-kernel (a right-edge panel narrower
//           than nr is packed, zero-padded, into `panel`);
//   each:   packed one at a time into `panel` (kc x nr, in L2) just before the row tiles use it.
// direct and each serve a thread whose rows all fit in one A block: every B element is then
// used by one block only, so packing the whole B block would write it out to L3 and read it
// back once.
enum class BPanels { block, direct, each };

// ---- the macro-kernel: one packed A block x one thread's share of B ---------------------------
// C rows from i0 in the row tiles `tiles`, columns jc + [j0, j1) where, in `block` mode, pb is
// the packed block of columns from jc (j0 a multiple of nr); the other modes read b's rows k0 ..
// k0 + kc - 1. Tile q's kc x mr micro-panel of A is at pa + q * a_step.
template <class Arch, class Epi>
void macro_kernel(const SgemmArgs& g, const Epi& epi, const float* pa, int64_t a_step, int64_t i0,
                  const RowTiles<Arch>& tiles, const float* pb, int64_t jc, int64_t j0, int64_t j1, int64_t k0,
                  int64_t kc, bool first, bool last, BPanels mode, float* panel) {
  constexpr int64_t nr = GemmTile<Arch>::nr, W = fbatch<Arch>::size;
  Store st{g.alpha, g.beta, first, last, nullptr, g.bias_rs, g.bias_cs, 0, 0, nr};
  // B packed at prepare (weights) comes from memory on its first use in a run: each tile
  // requests its share of the next micro-panel into L2 (the next k block's first panel after
  // the last one), so only the first panel's first tile waits on memory. Packed per call, B is
  // in cache already.
  const int64_t kc_next = std::min(kc, g.k - k0 - kc);
  const float* next_k =
      g.packed_b && kc_next > 0 ? g.packed_b + (k0 + kc) * gemm_round_up(g.n, nr) + (jc + j0) * kc_next : nullptr;
  // jr outside ir: one kc x nr B micro-panel is reused by every A micro-panel of the block.
  for (int64_t j = j0; j < j1; j += nr) {
    const int64_t cols = std::min(nr, j1 - j);
    const float* pbj = pb + j * kc;
    const bool next_panel = j + nr < j1;
    // What the row tiles request into L2 along their k loops, a share each: B packed at
    // prepare, the next micro-panel's lines; B packed here one panel at a time from its own
    // rows (BPanels::each: kc rows ldb apart, a page or more for wide B, so no hardware
    // prefetcher follows them and every row of the copy waited on L3 or memory), the next
    // panel's source rows, one row (one or two lines) per k step.
    const bool next_rows = mode == BPanels::each && !g.trans_b && next_panel;
    const float* pf = g.packed_b  ? (next_panel ? pbj + nr * kc : next_k)
                      : next_rows ? g.b + k0 * g.ldb + jc + j + nr
                                  : nullptr;
    const int64_t pf_count = !pf ? 0 : g.packed_b ? (next_panel ? kc : kc_next) * nr / 16 : kc;
    const int64_t pf_per_tile = gemm_ceil_div(pf_count, tiles.t);
    st.pf_step = g.packed_b ? 16 : g.ldb;
    st.pf_two = !g.packed_b && nr > 16;
    st.ldpb = nr;
    if (mode == BPanels::direct && cols == nr) {
      pbj = g.b + k0 * g.ldb + jc + j;
      st.ldpb = g.ldb;
    } else if (mode != BPanels::block) {
      pack_b_panel<Arch>(g.b, g.ldb, g.trans_b, k0, kc, jc + j, cols, panel);
      pbj = panel;
    }
    for (int64_t q = 0; q < tiles.t; ++q) {
      const int64_t i = tiles.begin(q), rows = tiles.begin(q + 1) - i;
      st.bias = g.bias ? g.bias + (i0 + i) * g.bias_rs + (jc + j) * g.bias_cs : nullptr;
      st.row0 = i0 + i;
      st.col0 = jc + j;
      st.npf = std::clamp<int64_t>(pf_count - q * pf_per_tile, 0, pf_per_tile);
      st.pf = st.npf > 0 ? pf + q * pf_per_tile * st.pf_step : nullptr;
      if (last && (q + 1 < tiles.t || next_panel)) {
        // One tile ahead, towards L2: the next tile's C lines with write intent (its stores
        // would otherwise each wait for a read for ownership) and its epilogue operands.
        const int64_t ni = q + 1 < tiles.t ? tiles.begin(q + 1) : 0, nj = q + 1 < tiles.t ? j : j + nr;
        const int64_t nrows = (q + 1 < tiles.t ? tiles.begin(q + 2) : tiles.begin(1)) - ni;
        float* nc = g.c + (i0 + ni) * g.ldc + jc + nj;
        for (int64_t r = 0; r < nrows; ++r) {
          __builtin_prefetch(nc + r * g.ldc, 1, 2);
          __builtin_prefetch(nc + r * g.ldc + nr - 1, 1, 2);
        }
        if constexpr (Epi::enabled) epi.template prefetch<Arch>(i0 + ni, jc + nj, static_cast<int>(nrows), 2);
      }
      // A right edge (always a packed panel) whose last vector would hold a few columns takes
      // them as single columns (column_tile).
      TileFn<Epi> tile = column_tile<Arch, Epi>(rows, cols);
      if (!tile) tile = (cols <= W ? kEdgeTiles<Arch, Epi> : kTiles<Arch, Epi>)[static_cast<std::size_t>(rows - 1)];
      tile(kc, pa + q * a_step, pbj, g.c + (i0 + i) * g.ldc + jc + j, g.ldc, cols, st, epi);
    }
  }
}

// Splits `threads` into a tm x tn grid over (rows, columns) minimizing the per-thread
// perimeter rows/tm + cols/tn (the packed data each thread touches). Ties split the columns:
// with tm == 1 every thread packs exactly the B micro-panels it multiplies, so no barrier is
// needed and no panel crosses cores (at 1024^3 it scaled better on 2 threads than a shared B
// block with barriers; see gemm.cpp), at the price of each thread packing all rows of A.
inline std::pair<int, int> thread_grid(int64_t m, int64_t n, int threads) {
  std::pair<int, int> best{threads, 1};
  double best_cost = 1e300;
  for (int tm = 1; tm <= threads; ++tm) {
    if (threads % tm) continue;
    const int tn = threads / tm;
    const double cost = static_cast<double>(m) / tm + static_cast<double>(n) / tn;
    if (cost < best_cost - 1e-9 || (cost <= best_cost + 1e-9 && tm < best.first)) {
      best_cost = cost;
      best = {tm, tn};
    }
  }
  return best;
}

// [begin, end) of part `id` of `parts` near-equal chunks of [0, n) in units of `unit`.
inline std::pair<int64_t, int64_t> split(int64_t n, int parts, int id, int64_t unit) {
  const int64_t units = gemm_ceil_div(n, unit);
  const int64_t b = units * id / parts, e = units * (id + 1) / parts;
  return {std::min(n, b * unit), std::min(n, e * unit)};
}

}  // namespace gemm_detail

// Packs all of op(B) (k x n) for sgemm's packed_b: k block after k block (the blocks of
// gemm_k_step), each round_up(n, nr) columns wide in nr-column micro-panels.
template <class Arch>
void pack_b(const float* b, std::int64_t ldb, bool trans_b, std::int64_t n, std::int64_t k, float* dst) {
  constexpr std::int64_t nr = GemmTile<Arch>::nr;
  const std::int64_t ks = gemm_k_step<Arch>(k), npad = gemm_round_up(n, nr);
  for (std::int64_t k0 = 0; k0 < k; k0 += ks) {
    const std::int64_t kc = std::min(ks, k - k0);
    gemm_detail::pack_b_range<Arch>(b, ldb, trans_b, k0, kc, 0, n, dst + k0 * npad);
  }
}

// Packs all of diag(a_scale) op(A) (m x k) for sgemm's packed_a: the near-equal row tiles of
// all m rows (RowTiles), tile q's micro-panel at q * mr * k, k-major (k x mr), so that any k
// block of it is one contiguous kc x mr micro-panel as pack_a writes per call. The lanes past
// a short tile's rows and the slack are zero. dst holds packed_a_size(m, k) floats.
template <class Arch>
void pack_a_all(const SgemmArgs& g, float* dst) {
  constexpr std::int64_t mr = GemmTile<Arch>::mr;
  std::fill_n(dst, packed_a_size<Arch>(g.m, g.k), 0.f);
  const gemm_detail::RowTiles<Arch> tiles(g.m);
  for (std::int64_t q = 0; q < tiles.t; ++q) {
    const std::int64_t r0 = tiles.row(q);
    // One tile as one whole-k block (its zeroed slack lands on the next tile, packed after).
    gemm_detail::pack_a<Arch>(g, r0, tiles.row(q + 1) - r0, 0, g.k, dst + q * mr * g.k);
  }
}

// The few-row GEMM (m <= kGemvRows, B not packed): the batch-1 classifier, a decoder's single
// token. Nothing to pack and no register tile to fill: B is read once, in order. B (k, n):
// its rows stream kb at a time (8 for 1-2 rows, 4 for 3-4: kb sequential streams the hardware
// prefetcher follows; software prefetch measured no better), each vector of them multiplied
// into the m accumulator rows (acc, round_up(n, 16) floats per row, in L1 / L2). B^T (n, k):
// 8 (4) of its rows at a time as dot products with A's m rows, reduced across lanes into acc.
// The threads split the columns. Then per nr columns: alpha, beta, bias and the epilogue on
// the accumulators, and C stored once. See simd/gemm.cpp for the measurements.
template <class Arch, class Epi>
void sgemm_rows(const SgemmArgs& g, const Epi& epi, float* acc) {
  using B = fbatch<Arch>;
  constexpr int64_t W = B::size, nr = GemmTile<Arch>::nr;
  const int64_t M = g.m, N = g.n, K = g.k, lda = gemm_round_up(N, 16);
  auto a_at = [&](int64_t i, int64_t k) {
    const float v = g.trans_a ? g.a[k * g.lda + i] : g.a[i * g.lda + k];
    return g.a_scale ? v * g.a_scale[i] : v;
  };
  int t = team_size(g.threads);
  if (gemm_one_thread(M, N, K)) t = 1;
  t = static_cast<int>(std::min<int64_t>(t, gemm_ceil_div(N, nr)));
  // The vector at float offset `at` (n of its floats valid) of each of the rows br, in order:
  // the B rows a sweep or a dot product streams together.
  auto rows_at = [](const auto& br, int64_t at, int64_t n) {
    std::array<B, std::tuple_size_v<std::decay_t<decltype(br)>>> v;
    for (std::size_t r = 0; r < v.size(); ++r) v[r] = load_partial<Arch>(br[r] + at, n);
    return v;
  };
  // The next K chunk (split_k) or B^T column block a thread of the team takes.
  std::atomic<int64_t> next{0};
  auto body = [&](int id, int nt) {
    const auto [j0, j1] = gemm_detail::split(N, nt, id, nr);
    // Row-major B on a team: the threads split K, not N. Each streams chunks of B's rows, whole
    // rows, each chunk into its own partial sums (gemv_k_chunks), added up after a barrier.
    // Split by columns, each thread read a 2 KB piece of every 4 KB row of a 1000-wide
    // classifier, too short a run for the prefetchers to get going.
    const bool split_k = !g.trans_b && nt > 1 && K >= 64 * nt;
    const int64_t chunks = split_k ? gemv_k_chunks(M, N, K, nt) : 1;
    // B^T on a team: blocks of columns taken in turn (each column's dot product is its own, so
    // the result does not depend on who took it), about 8 per thread.
    const bool dyn_cols = g.trans_b && nt > 1;
    const int64_t col_block = std::max(nr, gemm_round_up(gemm_ceil_div(N, 8 * int64_t{nt}), nr));
    if (j0 >= j1 && !split_k && !dyn_cols) return;
    // Columns [c0, c1) and rows [k_begin, k_end) of the sweeps (the columns [c0, c1) of the dot
    // products) now under way, into `part`; set per chunk or block on a team.
    int64_t c0 = split_k ? 0 : j0, c1 = split_k ? N : j1, k_begin = 0, k_end = K;
    float* part = acc;
    // The k loop: rows k .. k + kb - 1 of B (kb = 8 or 4, then 1 for the last rows) into the
    // accumulators of columns [c0, c1); the first sweep writes them, the others add. The row
    // count is a template parameter, so the broadcast A values stay in registers.
    auto sweep = [&](int64_t k, auto kb_c, auto m_c, bool first) {
      constexpr int kb = decltype(kb_c)::value, mm = decltype(m_c)::value;
      std::array<const float*, kb> br;
      for (int r = 0; r < kb; ++r) br[static_cast<std::size_t>(r)] = g.b + (k + r) * g.ldb;
      std::array<std::array<B, kb>, mm> av;
      for (int i = 0; i < mm; ++i)
        for (int r = 0; r < kb; ++r) av[static_cast<std::size_t>(i)][static_cast<std::size_t>(r)] = B(a_at(i, k + r));
      // Locals: the captured bounds change per chunk, and read through the capture in the loop
      // they would be reloaded after every store.
      const int64_t lo = c0, hi = c1;
      float* const out = part;
      int64_t j = lo;
      // One row of A: a whole 64-byte line of each B row per step (U vectors), not one vector
      // of it - measured faster at AVX2 and SSE2 in alternating runs (AVX-512's vector is
      // already a line).
      constexpr int U = mm == 1 ? static_cast<int>(std::max<int64_t>(1, 16 / W)) : 1;
      if constexpr (U > 1) {
        for (; j + U * W <= hi; j += U * W) {
          std::array<B, U> s;
          for (int u = 0; u < U; ++u)
            s[static_cast<std::size_t>(u)] = first ? B(0.f) : B::load_aligned(out + j + u * W);
          for (int r = 0; r < kb; ++r)
            for (int u = 0; u < U; ++u)
              s[static_cast<std::size_t>(u)] = xsimd::fma(
                  av[0][static_cast<std::size_t>(r)], B::load_unaligned(br[static_cast<std::size_t>(r)] + j + u * W),
                  s[static_cast<std::size_t>(u)]);
          for (int u = 0; u < U; ++u) s[static_cast<std::size_t>(u)].store_aligned(out + j + u * W);
        }
      }
      for (; j < hi; j += W) {
        const std::array<B, kb> bv = rows_at(br, j, hi - j);
        for (int i = 0; i < mm; ++i) {
          float* c = out + i * lda + j;
          B s = first ? B(0.f) : B::load_aligned(c);
          for (int r = 0; r < kb; ++r)
            s = xsimd::fma(av[static_cast<std::size_t>(i)][static_cast<std::size_t>(r)],
                           bv[static_cast<std::size_t>(r)], s);
          s.store_aligned(c);
        }
      }
    };
    auto k_loop = [&](auto m_c) {
      constexpr int kb = decltype(m_c)::value <= 2 ? 8 : 4;  // m x kb broadcasts + kb B vectors in registers
      int64_t k = k_begin;
      for (; k + kb <= k_end; k += kb) sweep(k, std::integral_constant<int, kb>{}, m_c, k == k_begin);
      for (; k < k_end; ++k) sweep(k, std::integral_constant<int, 1>{}, m_c, k == k_begin);
    };
    // Transposed B (stored n x k, a row per output column: a PyTorch Linear weight): dot
    // products instead. jb rows of B stream at once (8 for 1-2 rows of A, 4 for 3-4; see below), each
    // vector of them multiplied by the same k vector of the m rows of A: jb m accumulators,
    // reduced across lanes at the rows' end.
    auto dot_loop = [&](auto m_c) {
      constexpr int mm = decltype(m_c)::value;
      // Rows of B at once: jb streams, mm x jb accumulators. At AVX-512 one row of A (a
      // decoder's token, B^T read once from DRAM) takes 2 vectors of each of 2 rows per step:
      // fewer streams, longer runs of each, and faster than 8 rows of one vector in alternating
      // runs at 1 and 2 threads. At AVX2 the same shape (4 rows) was faster at one thread but
      // slower at two, so it keeps 8 rows of one vector.
      constexpr int U = mm == 1 && W == 16 ? 2 : 1;
      constexpr int jb = U == 2 ? 2 : mm <= 2 ? 8 : 4;
      std::array<const float*, mm> ar;  // op(A) rows: contiguous unless trans_a
      alignas(64) float at[mm][W];      // trans_a or a_scale: one k vector of the m rows, gathered
      for (int i = 0; i < mm; ++i) ar[static_cast<std::size_t>(i)] = g.a + i * g.lda;
      auto a_vec = [&](int i, int64_t k, int64_t n) {
        if (g.trans_a || g.a_scale) {
          for (int64_t l = 0; l < W; ++l) at[i][l] = l < n ? a_at(i, k + l) : 0.f;
          return B::load_aligned(at[i]);
        }
        const float* p = ar[static_cast<std::size_t>(i)] + k;
        return load_partial<Arch>(p, n);
      };
      for (int64_t j = c0; j < c1; j += jb) {
        const int jn = static_cast<int>(std::min<int64_t>(jb, c1 - j));
        std::array<const float*, jb> br;  // past the last row: the last row again (not stored)
        for (int r = 0; r < jb; ++r) br[static_cast<std::size_t>(r)] = g.b + (j + std::min(r, jn - 1)) * g.ldb;
        std::array<std::array<B, jb>, mm> s;
        for (auto& row : s) row.fill(B(0.f));
        int64_t k = 0;
        if constexpr (U == 2) {
          std::array<B, jb> s1;  // the second vector's sums: two chains per row
          s1.fill(B(0.f));
          for (; k + 2 * W <= K; k += 2 * W) {
            const B a0 = a_vec(0, k, W), a1 = a_vec(0, k + W, W);
            for (int r = 0; r < jb; ++r) {
              const float* b = br[static_cast<std::size_t>(r)] + k;
              s[0][static_cast<std::size_t>(r)] =
                  xsimd::fma(a0, B::load_unaligned(b), s[0][static_cast<std::size_t>(r)]);
              s1[static_cast<std::size_t>(r)] =
                  xsimd::fma(a1, B::load_unaligned(b + W), s1[static_cast<std::size_t>(r)]);
            }
          }
          for (int r = 0; r < jb; ++r) s[0][static_cast<std::size_t>(r)] += s1[static_cast<std::size_t>(r)];
        }
        for (; k < K; k += W) {
          const int64_t n = K - k;
          const std::array<B, jb> bv = rows_at(br, k, n);
          for (int i = 0; i < mm; ++i) {
            const B av = a_vec(i, k, n);
            auto& si = s[static_cast<std::size_t>(i)];
            for (int r = 0; r < jb; ++r)
              si[static_cast<std::size_t>(r)] =
                  xsimd::fma(av, bv[static_cast<std::size_t>(r)], si[static_cast<std::size_t>(r)]);
          }
        }
        for (int i = 0; i < mm; ++i)
          for (int r = 0; r < jn; ++r)
            acc[i * lda + j + r] = xsimd::hadd(s[static_cast<std::size_t>(i)][static_cast<std::size_t>(r)]);
      }
    };
    auto by_rows = [&](auto loop) {
      switch (M) {
        case 1: loop(std::integral_constant<int, 1>{}); break;
        case 2: loop(std::integral_constant<int, 2>{}); break;
        case 3: loop(std::integral_constant<int, 3>{}); break;
        default: loop(std::integral_constant<int, 4>{}); break;
      }
    };
    // Finish columns [f0, f1) nr at a time: C = alpha * acc + beta * C + bias, the epilogue,
    // one store.
    const B va(g.alpha), vb(g.beta);
    auto finish = [&](int64_t f0, int64_t f1) {
      for (int64_t jt = f0; jt < f1; jt += nr) {
        const int64_t cols = std::min(nr, f1 - jt);
        for (int64_t i = 0; i < M; ++i) {
          float* row = acc + i * lda;
          const float* bias = g.bias ? g.bias + i * g.bias_rs : nullptr;
          for (int64_t j = jt; j < jt + cols; j += W) {
            const int64_t n = jt + cols - j;
            B v = B::load_aligned(row + j) * va;
            if (g.beta != 0.f) {
              const float* cp = g.c + i * g.ldc + j;
              v = xsimd::fma(vb, load_partial<Arch>(cp, n), v);
            }
            if (bias) v += g.bias_cs ? load_partial<Arch>(bias + j, n) : B(*bias);
            v.store_aligned(row + j);
          }
        }
        if constexpr (Epi::enabled) epi.template apply_tile<Arch>(acc + jt, lda, static_cast<int>(M), 0, jt, cols);
        for (int64_t i = 0; i < M; ++i)
          for (int64_t j = jt; j < jt + cols; j += W) {
            const int64_t n = jt + cols - j;
            const B v = B::load_aligned(acc + i * lda + j);
            store_partial<Arch>(g.c + i * g.ldc + j, v, n);
          }
      }
    };
    if (split_k) {
      for (int64_t q = next.fetch_add(1); q < chunks; q = next.fetch_add(1)) {
        std::tie(k_begin, k_end) = gemm_detail::split(K, static_cast<int>(chunks), static_cast<int>(q), 8);
        part = acc + q * M * lda;
        by_rows(k_loop);
      }
      // Every partial is complete; each thread adds them up in chunk order over its own
      // columns, into acc (chunk 0's partial).
#pragma omp barrier
      if (j0 >= j1) return;
      for (int64_t q = 1; q < chunks; ++q)
        for (int64_t i = 0; i < M; ++i) {
          float* dst = acc + i * lda;
          const float* src = acc + q * M * lda + i * lda;
          for (int64_t j = j0; j < j1; j += W)
            (B::load_aligned(dst + j) + B::load_aligned(src + j)).store_aligned(dst + j);
        }
      finish(j0, j1);
    } else if (dyn_cols) {
      for (int64_t q = next.fetch_add(1); q * col_block < N; q = next.fetch_add(1)) {
        c0 = q * col_block;
        c1 = std::min(N, c0 + col_block);
        by_rows(dot_loop);
        finish(c0, c1);
      }
    } else {
      if (g.trans_b)
        by_rows(dot_loop);
      else
        by_rows(k_loop);
      finish(j0, j1);
    }
  };
  if (t <= 1) {
    body(0, 1);
    return;
  }
#pragma omp parallel num_threads(t)
  {
    const ::opfuse::detail::DenormalGuard denormals;  // MXCSR is per thread (src/denormal.hpp)
    body(omp_get_thread_num(), omp_get_num_threads());
  }
}

// C = alpha * op(A) op(B) + beta * C + bias, then epi. The BLIS loop nest:
//   jc over n in NC blocks      packed B block (kc x nc) shared by the team, in L3
//    pc over k in KC blocks      (B packed cooperatively, one barrier before and after)
//     ic over this thread's rows in MC blocks    packed A block (mc x kc) per thread, in L2
//      jr over this thread's columns, nr at a time   B micro-panel (kc x nr) in L1
//       ir over the block's rows, mr at a time      A micro-panel streamed; C tile in registers
// Threads form a tm x tn grid over the rows and the columns of each nc block.
template <class Arch, class Epi = NoEpilogue>
void sgemm(const SgemmArgs& g, const Epi& epi = Epi{}) {
  using namespace gemm_detail;
  constexpr int64_t mr = GemmTile<Arch>::mr, nr = GemmTile<Arch>::nr;
  const int64_t M = g.m, N = g.n, K = g.k;
  if (M <= 0 || N <= 0) return;
  if (K <= 0) {
    // Nothing to multiply: C = beta * C + bias (beta == 0 never reads C). alpha == 0 still
    // multiplies, so NaN / Inf in A or B propagate exactly as in naive.
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) {
        float& y = g.c[i * g.ldc + j];
        float x = g.beta == 0.f ? 0.f : g.beta * y;
        if (g.bias) x += g.bias[i * g.bias_rs + j * g.bias_cs];
        if constexpr (Epi::enabled) {
          alignas(64) float t[fbatch<Arch>::size] = {x};
          epi.template apply_tile<Arch>(t, fbatch<Arch>::size, 1, i, j, 1);
          x = t[0];
        }
        y = x;
      }
    return;
  }
  float* ws = align64(g.workspace);
  if (M <= kGemvRows && !g.packed_b) return sgemm_rows<Arch>(g, epi, ws);
  const GemmBlocking bl = gemm_blocking<Arch>();
  const int64_t ks = gemm_k_step<Arch>(K);
  int64_t nc_max = std::min(bl.nc, gemm_round_up(N, nr));
  if (g.nc_cap > 0) nc_max = std::min(nc_max, gemm_round_up(g.nc_cap, nr));
  const int64_t mc_max = std::min(bl.mc, gemm_round_up(M, mr));
  const int64_t b_block = gemm_round_up(ks * nc_max, 16), a_block = gemm_a_block<Arch>(M, ks);
  const int64_t p_block = gemm_round_up(ks * nr, 16);  // one B micro-panel (BPanels::direct, each)
  float* bbuf = ws;
  const int64_t npad = gemm_round_up(N, nr);

  // Threads: never more than the tiles, and one for problems too small to repay a team.
  int t = team_size(g.threads);
  const int64_t tiles = gemm_ceil_div(M, mr) * gemm_ceil_div(N, nr);
  if (gemm_one_thread(M, N, K)) t = 1;
  t = static_cast<int>(std::min<int64_t>(t, tiles));

  // One thread's share; `nt` is the team's real size (OpenMP may grant fewer than asked).
  auto body = [&](int id, int nt) {
    const auto [tm, tn] = thread_grid(M, N, nt);
    float* abuf = ws + b_block + id * (a_block + p_block);
    float* panel = abuf + a_block;
    // This thread's rows: a multiple of mr, or with A packed at prepare, a run of its tiles.
    const RowTiles<Arch> all(M);
    auto rows_of = [&](int r) -> std::pair<int64_t, int64_t> {
      if (!g.packed_a) return split(M, tm, r, mr);
      const auto [q0, q1] = split(all.t, tm, r, 1);
      return {all.row(q0), all.row(q1)};
    };
    const auto [i_begin, i_end] = rows_of(id / tn);
    // B not packed as a block (BPanels): when every thread's rows fit in one L2-resident A
    // block. The same decision on every thread (from the largest row share).
    int64_t most = 0;
    for (int r = 0; r < tm; ++r) {
      const auto [b0, b1] = rows_of(r);
      most = std::max(most, b1 - b0);
    }
    // Read in place only while B's rows are at most a page apart and the row tiles that reuse
    // each micro-panel are few. The kc rows of a panel read in place fall into few cache sets
    // (a 3 KiB row step: 4 of the L1's 64 sets; a 12 KiB step, a multiple of 4 KiB: one) and
    // evict each other, so every row tile reads them again from L2 or L3; one copy into a
    // contiguous panel costs less than that once more than a handful of tiles reuse it (A/B on
    // the BERT-shaped GEMMs: 10 row tiles of AVX-512 prefer direct, 22 of AVX2 prefer each; the
    // commit that introduced BPanels::each has the figures).
    const int64_t most_tiles = gemm_ceil_div(most, mr);
    BPanels mode = BPanels::block;
    if (!g.packed_b && most <= gemm_in_place_rows<Arch>(ks))
      mode = !g.trans_b && g.ldb * static_cast<int64_t>(sizeof(float)) <= 4096 && most_tiles <= 16 ? BPanels::direct
                                                                                                   : BPanels::each;
    const bool own_panels = mode != BPanels::block;
    // This thread's rows as ceil(rows / mr) near-equal row tiles (1024 rows: 74 tiles of 13 or 14
    // rows), grouped into near-equal blocks of at most MC rows (9 blocks of 8 or 9 tiles), or
    // into one block when B is read in place. Blocks of exactly MC rows would leave a 16-row
    // block of two 8-row tiles, and near-equal blocks without regard to tiles 12-row tiles: both
    // run at a lower FMA rate than 13-14 rows (perf, 1024^3).
    // With A packed at prepare the tiles are all's, and a block is a run of them.
    const int64_t rows = i_end - i_begin;
    const auto [own_q0, own_q1] = g.packed_a ? split(all.t, tm, id / tn, 1) : std::pair<int64_t, int64_t>{0, 0};
    const int64_t tile0 = own_q0;
    const int64_t row_tiles = g.packed_a ? own_q1 - own_q0 : gemm_ceil_div(rows, mr);
    const int64_t tiles_per_block = std::max<int64_t>(1, own_panels ? row_tiles : mc_max / mr);
    const int64_t blocks = rows > 0 ? gemm_ceil_div(row_tiles, tiles_per_block) : 0;
    const auto block_row = [&](int64_t b) { return i_begin + (b * row_tiles / blocks) * rows / row_tiles; };
    const auto block_tile = [&](int64_t b) { return b * row_tiles / blocks; };  // packed_a: its first tile
    const int64_t ncb = own_panels ? N : nc_max;
    for (int64_t jc = 0; jc < N; jc += ncb) {
      const int64_t nc = std::min(ncb, N - jc);
      const auto [j0, j1] = split(nc, tn, id % tn, nr);
      for (int64_t k0 = 0; k0 < K; k0 += ks) {
        const int64_t kc = std::min(ks, K - k0);
        const float* pb = bbuf;
        if (g.packed_b) {
          pb = g.packed_b + k0 * npad + jc * kc;
        } else if (!own_panels) {
          // Pack the nc block's micro-panels cooperatively, then wait for all of them. With one
          // row of threads (tm == 1) each thread packs exactly its own columns' panels (p0 * nr
          // == j0) and nobody waits; then a thread's panels start at the fixed offset
          // p0 * nr * ks, so a shorter last k block cannot move them onto a neighbour's panels
          // that are still in use.
          const auto [p0, p1] = split(gemm_ceil_div(nc, nr), nt, id, 1);
          const int64_t own = tm > 1 ? p0 * nr * kc : p0 * nr * ks;
          if (p0 < p1)
            pack_b_range<Arch>(g.b, g.ldb, g.trans_b, k0, kc, jc + p0 * nr, std::min(nc, p1 * nr) - p0 * nr,
                               bbuf + own);
          if (tm > 1) {
#pragma omp barrier
          } else {
            assert(p0 * nr == j0 || j0 >= j1);
            pb = bbuf + own - p0 * nr * kc;  // so that pb + j * kc is panel j for j in [j0, j1)
          }
        }
        if (j0 < j1)
          for (int64_t b = 0; b < blocks; ++b) {
            if (g.packed_a) {
              const int64_t q = tile0 + block_tile(b);
              const RowTiles<Arch> tiles(all, q, tile0 + block_tile(b + 1) - q);
              macro_kernel<Arch>(g, epi, g.packed_a + q * mr * K + k0 * mr, mr * K, all.row(q), tiles, pb, jc, j0, j1,
                                 k0, kc, k0 == 0, k0 + kc == K, mode, panel);
              continue;
            }
            const int64_t i0 = block_row(b), mc = block_row(b + 1) - i0;
            pack_a<Arch>(g, i0, mc, k0, kc, abuf);
            macro_kernel<Arch>(g, epi, abuf, mr * kc, i0, RowTiles<Arch>(mc), pb, jc, j0, j1, k0, kc, k0 == 0,
                               k0 + kc == K, mode, panel);
          }
        if (!g.packed_b && !own_panels && tm > 1) {
#pragma omp barrier  // the B block is overwritten next
        }
      }
    }
  };
  if (t <= 1) {
    body(0, 1);
    return;
  }
#pragma omp parallel num_threads(t)
  {
    const ::opfuse::detail::DenormalGuard denormals;  // MXCSR is per thread (src/denormal.hpp)
    body(omp_get_thread_num(), omp_get_num_threads());
  }
}

}  // namespace OPFUSE_SIMD_NS
}  // namespace opfuse::simd
