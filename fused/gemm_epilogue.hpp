// fused/gemm_epilogue.hpp - a post-op chain as the epilogue of the simd GEMM micro-kernel
// (internal header of the fused gemm and conv kernels; compiled once per ISA).
//
// simd/gemm_kernel.hpp's sgemm<Arch, Epi> hands every vector of a finished C tile to
// Epi::apply on the last k block, after alpha, beta and the bias and before the store. This
// epilogue runs the chain there, on the accumulator registers:
//   batchnorm   y = (y - mean) * mult + shift, mult = scale / sqrt(var + eps) precomputed
//               once per call (or at prepare), as one vector per column (gemm: the N axis) or
//               one broadcast per row (a conv as GEMM: output channels are the rows)
//   binary      y = y <op> operand, the operand read at (i, j) through (row, column) strides:
//               a residual tile, a per-row or per-column vector, or a scalar
//   activation  y = act(y), the vector activations of simd/activation.hpp
// Nothing is written between the steps: y is stored once, and the operands are the only
// extra reads (prefetched with the tile's C rows, see micro_tile).
#pragma once

#ifndef OPFUSE_SIMD_ISA
#error "fused/gemm_epilogue.hpp is for the per-ISA fused/*.cpp"
#endif

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "opfuse/ops.hpp"
#include "simd/activation.hpp"
#include "simd/common.hpp"
#include "simd/gemm_kernel.hpp"

namespace opfuse::fused {
inline namespace OPFUSE_SIMD_NS {

using simd::fbatch;

inline constexpr int kEpiMaxSteps = 8;  // longer chains are declined by supports()

// Index of each post-op step's first operand, after the op's own inputs (x or a, w or b,
// [bias]); for Conv2dParams and GemmParams alike. A fixed array: execute allocates nothing
// (supports() caps the chain at kEpiMaxSteps).
using OperandIndex = std::array<std::size_t, kEpiMaxSteps>;
template <class Params>
OperandIndex operand_index(const Params& p) {
  OperandIndex r{};
  std::size_t idx = p.has_bias ? 3 : 2;
  for (std::size_t s = 0; s < p.post_ops.size() && s < r.size(); ++s) {
    r[s] = idx;
    idx += static_cast<std::size_t>(post_op_operands(p.post_ops[s]));
  }
  return r;
}

// mult[i] = scale[i] / sqrt(var[i] + eps): a batchnorm's multiplier per output channel (conv)
// or column (gemm).
inline void bn_mult(const float* scale, const float* var, float eps, std::int64_t n, float* mult) {
  for (std::int64_t i = 0; i < n; ++i) mult[i] = scale[i] * (1.f / std::sqrt(var[i] + eps));
}

using simd::prefetch_line;  // asm prefetches (simd/common.hpp)

// One step. Element (i, j) of an operand is at p[i * rs + j * cs]: cs 0 broadcasts along the
// row, 1 is a vector load, anything else a gather (an NCHW operand in a channels-in-lanes tile).
struct EpiStep {
  PostOp::Kind kind = PostOp::Kind::activation;
  BinaryKind binary = BinaryKind::add;
  Activation act;
  const float* p0 = nullptr;  // batchnorm: mean; binary: the operand
  const float* p1 = nullptr;  // batchnorm: mult = scale / sqrt(var + eps)
  const float* p2 = nullptr;  // batchnorm: shift (the batchnorm's bias)
  std::int64_t rs = 0, cs = 0;
};

struct ChainEpilogue {
  static constexpr bool enabled = true;
  int n = 0;
  EpiStep steps[kEpiMaxSteps];

  EpiStep& add(PostOp::Kind kind) {
    EpiStep& s = steps[n++];
    s = EpiStep{};
    s.kind = kind;
    return s;
  }

  // The residual rows of the tile at (i, j), `rows` x nr, towards L2 (l = 2) or L1 (l = 3).
  template <class Arch>
  void prefetch(std::int64_t i, std::int64_t j, int rows, int l) const {
    constexpr std::int64_t nr = simd::GemmTile<Arch>::nr;
    for (int s = 0; s < n; ++s) {
      const EpiStep& st = steps[s];
      if (st.kind != PostOp::Kind::binary || st.cs != 1 || st.rs == 0) continue;
      for (int r = 0; r < rows; ++r) {
        const float* p = st.p0 + (i + r) * st.rs + j;
        if (l == 3) {
          prefetch_line<3>(p);
          prefetch_line<3>(p + nr - 1);
        } else {
          prefetch_line<2>(p);
          prefetch_line<2>(p + nr - 1);
        }
      }
    }
  }

  // Row i's operand floats at columns [j, j + cols) (the residual's; unit column step), towards
  // L2: for a kernel whose tile rows are not a GEMM tile's (the direct convolution's pixels).
  void prefetch_row(std::int64_t i, std::int64_t j, std::int64_t cols) const {
    for (int s = 0; s < n; ++s) {
      const EpiStep& st = steps[s];
      if (st.kind != PostOp::Kind::binary || st.cs != 1 || st.rs == 0) continue;
      const float* p = st.p0 + i * st.rs + j;
      for (std::int64_t c = 0; c < cols; c += 16) prefetch_line<2>(p + c);
    }
  }

  // Whether a step reads an operand that varies along the rows (rs != 0: a residual tile), so
  // that the rows a tile maps must be the consecutive rows i0, i0 + 1, ... it is told about.
  bool reads_rows() const {
    for (int s = 0; s < n; ++s)
      if (steps[s].rs != 0) return true;
    return false;
  }

  // The same chain for the images' n-th: binary operands moved on by n image strides (kernels
  // that index pixels within one image).
  ChainEpilogue for_image(const std::int64_t* image_stride, std::int64_t img) const {
    ChainEpilogue e = *this;
    for (int s = 0; s < n; ++s)
      if (e.steps[s].kind == PostOp::Kind::binary) e.steps[s].p0 += img * image_stride[s];
    return e;
  }

  // Operand vector at (i, j), cnt lanes valid: a broadcast when cs == 0, else cnt floats cs
  // apart (a partial or strided vector goes through a zero-filled buffer: nothing past the
  // valid columns is read).
  template <class Arch>
  static constexpr auto operand =
      [](const float* p, std::int64_t rs, std::int64_t cs, std::int64_t i, std::int64_t j, std::int64_t cnt) {
        using B = fbatch<Arch>;
        constexpr std::int64_t W = B::size;
        const float* q = p + i * rs + j * cs;
        if (cs == 0) return B(*q);
        if (cs == 1 && cnt == W) return B::load_unaligned(q);
        alignas(64) float b[W] = {};
        for (std::int64_t l = 0; l < cnt; ++l) b[l] = q[l * cs];
        return B::load_aligned(b);
      };

  // The chain on one vector in registers: x holds elements (i, j .. j + cnt - 1) of the output,
  // cnt <= the vector width (operand lanes past cnt are not read). For kernels whose finished
  // values are vectors rather than a tile (the depthwise ones); apply_rows on one vector.
  template <class Arch>
  fbatch<Arch> apply_vector(fbatch<Arch> x, std::int64_t i, std::int64_t j, std::int64_t cnt) const {
    fbatch<Arch> v[1] = {x};
    apply_rows<Arch, 1>(v, i, j, cnt);
    return v[0];
  }

  // The chain on N vectors in registers, vector r holding row i0 + r at columns j .. j + cnt - 1
  // (cnt <= the vector width; e.g. a transposed block of a channels-as-rows view: the direct
  // convolution's NCHW store): each step's kind is resolved once for the N vectors, not once per
  // vector - per vector, that dispatch (an indirect jump per activation) was ~15% of the fused
  // 3-channel stem.
  template <class Arch, int N>
  void apply_rows(fbatch<Arch> (&x)[N], std::int64_t i0, std::int64_t j, std::int64_t cnt) const {
    for (int s = 0; s < n; ++s) {
      const EpiStep& st = steps[s];
      if (st.kind == PostOp::Kind::batchnorm) {
        for (int r = 0; r < N; ++r)
          x[r] = xsimd::fma(x[r] - operand<Arch>(st.p0, st.rs, st.cs, i0 + r, j, cnt),
                            operand<Arch>(st.p1, st.rs, st.cs, i0 + r, j, cnt),
                            operand<Arch>(st.p2, st.rs, st.cs, i0 + r, j, cnt));
      } else if (st.kind == PostOp::Kind::binary) {
        for (int r = 0; r < N; ++r)
          x[r] = simd::binary_op<Arch>(st.binary, x[r], operand<Arch>(st.p0, st.rs, st.cs, i0 + r, j, cnt));
      } else {
        simd::with_act_kind(st.act.kind, [&](auto kind) {
          for (int r = 0; r < N; ++r) x[r] = simd::activate_k<decltype(kind)::value, Arch>(st.act, x[r]);
        });
      }
    }
  }

  // The short chains that end most conv and GEMM layers - none, a residual add (a full operand
  // tile: unit column step), an activation of the clip family (relu, clip / relu6), or the add
  // then the activation, as in a ResNet block - on a full-width tile still in its accumulator
  // registers (see simd::NoEpilogue): all residual loads first, then all stores (the 4K
  // aliasing of micro_tile's own loads and stores), and C is written straight from the
  // registers. Any other chain returns false and goes through apply_tile's L1 buffer, which
  // spills the tile, runs each step as a loop of its own and copies the result out: for
  // these chains that round trip, and the per-vector dispatch, cost more than the steps.
  template <class Arch, int R, int NV>
  bool apply_registers(fbatch<Arch> (&acc)[R][NV], std::int64_t i0, std::int64_t j0, float* out,
                       std::int64_t ldo) const {
    using B = fbatch<Arch>;
    constexpr std::int64_t W = B::size;
    if (!map_registers<Arch, R, NV>(acc, i0, j0)) return false;
#pragma GCC unroll 16
    for (int i = 0; i < R; ++i)
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) acc[i][v].store_unaligned(out + i * ldo + v * W);
    return true;
  }

  // apply_registers' mapping without the store: the same short chains on rows i0 .. i0 + R - 1,
  // columns j0 .. j0 + NV * W - 1 (all valid), in place; false (acc untouched) for any other
  // chain. For kernels that store the tile themselves (the NHWC direct convolution's).
  template <class Arch, int R, int NV>
  bool map_registers(fbatch<Arch> (&acc)[R][NV], std::int64_t i0, std::int64_t j0) const {
    using B = fbatch<Arch>;
    constexpr std::int64_t W = B::size;
    int s = 0;
    const EpiStep* res = nullptr;
    if (s < n && steps[s].kind == PostOp::Kind::binary && steps[s].binary == BinaryKind::add && steps[s].cs == 1)
      res = &steps[s++];
    const EpiStep* act = nullptr;
    if (s < n && steps[s].kind == PostOp::Kind::activation &&
        (steps[s].act.kind == ActKind::relu || steps[s].act.kind == ActKind::clip))
      act = &steps[s++];
    if (s != n) return false;
    if (res) {
      const float* r0 = res->p0 + i0 * res->rs + j0;
#pragma GCC unroll 16
      for (int i = 0; i < R; ++i)
#pragma GCC unroll 4
        for (int v = 0; v < NV; ++v) acc[i][v] += B::load_unaligned(r0 + i * res->rs + v * W);
    }
    const auto map = [&](auto kind) {
#pragma GCC unroll 16
      for (int i = 0; i < R; ++i)
#pragma GCC unroll 4
        for (int v = 0; v < NV; ++v)
          acc[i][v] = simd::activate_k<static_cast<ActKind>(decltype(kind)::value), Arch>(act->act, acc[i][v]);
    };
    if (!act) return true;
    if (act->act.kind == ActKind::relu)
      map(std::integral_constant<int, static_cast<int>(ActKind::relu)>{});
    else
      map(std::integral_constant<int, static_cast<int>(ActKind::clip)>{});
    return true;
  }

  // The chain on a finished tile in an L1 buffer (see simd::NoEpilogue::apply_tile): t holds
  // rows i0 .. i0 + rows - 1 and columns j0 .. j0 + cols - 1 of the output, row stride ldt.
  // Step by step, each a tight loop over the tile's vectors: per-column operand vectors are
  // loaded once per column vector, an activation's kind is fixed before its loop (and runs 4
  // vectors at a time: independent polynomial chains). With `out` (cols a multiple of the vector
  // width, n > 0) the last step stores into out (row stride ldo) instead of back into t, so the
  // tile is not copied to C in a pass of its own.
  template <class Arch>
  void apply_tile(float* t, std::int64_t ldt, int rows, std::int64_t i0, std::int64_t j0, std::int64_t cols,
                  float* out = nullptr, std::int64_t ldo = 0) const {
    using B = fbatch<Arch>;
    constexpr std::int64_t W = B::size;
    const std::int64_t nv = (cols + W - 1) / W;
    if (n == 0 && out) {  // nothing to map: the copy to C
      for (int r = 0; r < rows; ++r)
        for (std::int64_t v = 0; v < nv; ++v)
          B::load_aligned(t + r * ldt + v * W).store_unaligned(out + r * ldo + v * W);
      return;
    }
    // Where step s stores vector v of row r.
    const auto dst = [&](int s, int r, std::int64_t v) -> float* {
      return out && s == n - 1 ? out + r * ldo + v * W : t + r * ldt + v * W;
    };
    const auto store = [&](int s, int r, std::int64_t v, B x) {
      if (out && s == n - 1)
        x.store_unaligned(dst(s, r, v));
      else
        x.store_aligned(dst(s, r, v));
    };
    const auto load = operand<Arch>;
    for (int s = 0; s < n; ++s) {
      const EpiStep& st = steps[s];
      if (st.kind == PostOp::Kind::batchnorm) {
        for (std::int64_t v = 0; v < nv; ++v) {
          const std::int64_t j = j0 + v * W, cnt = std::min(W, cols - v * W);
          B mean = load(st.p0, st.rs, st.cs, i0, j, cnt), mult = load(st.p1, st.rs, st.cs, i0, j, cnt),
            shift = load(st.p2, st.rs, st.cs, i0, j, cnt);
          for (int r = 0; r < rows; ++r) {
            if (st.rs != 0 && r > 0) {
              mean = load(st.p0, st.rs, st.cs, i0 + r, j, cnt);
              mult = load(st.p1, st.rs, st.cs, i0 + r, j, cnt);
              shift = load(st.p2, st.rs, st.cs, i0 + r, j, cnt);
            }
            store(s, r, v, xsimd::fma(B::load_aligned(t + r * ldt + v * W) - mean, mult, shift));
          }
        }
      } else if (st.kind == PostOp::Kind::binary) {
        for (int r = 0; r < rows; ++r)
          for (std::int64_t v = 0; v < nv; ++v) {
            const B o = load(st.p0, st.rs, st.cs, i0 + r, j0 + v * W, std::min(W, cols - v * W));
            store(s, r, v, simd::binary_op<Arch>(st.binary, B::load_aligned(t + r * ldt + v * W), o));
          }
      } else {
        simd::with_act_kind(st.act.kind, [&](auto kind) {
          constexpr ActKind K = decltype(kind)::value;
          // 4 vectors at a time, walking (row, vector) with counters (no division per vector).
          constexpr int U = 4;
          int r = 0;
          std::int64_t v = 0;
          const std::int64_t total = rows * nv;
          std::int64_t q = 0;
          for (; q + U <= total; q += U) {
            B x[U];
            int rr[U];
            std::int64_t vv[U];
#pragma GCC unroll 4
            for (int u = 0; u < U; ++u) {
              rr[u] = r, vv[u] = v;
              x[u] = B::load_aligned(t + r * ldt + v * W);
              if (++v == nv) v = 0, ++r;
            }
#pragma GCC unroll 4
            for (int u = 0; u < U; ++u) store(s, rr[u], vv[u], simd::activate_k<K, Arch>(st.act, x[u]));
          }
          for (; q < total; ++q) {
            store(s, r, v, simd::activate_k<K, Arch>(st.act, B::load_aligned(t + r * ldt + v * W)));
            if (++v == nv) v = 0, ++r;
          }
        });
      }
    }
  }
};

}  // namespace OPFUSE_SIMD_NS
}  // namespace opfuse::fused
