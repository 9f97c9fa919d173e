// simd/gemm.cpp - general matrix multiply, BLIS-style, written once for every ISA.
//
// The story.
// naive (naive/gemm.cpp): the i-k-j triple loop. Each y row is rewritten K times and every b
//   row is read M times straight from memory; the compiler vectorizes the j loop but one FMA
//   per load and store keeps it memory-bound (measured: reports/REPORT.md, gemm).
// simd (this file, machinery in gemm_kernel.hpp): the BLIS loop nest. op(a) and op(b) are
//   copied ("packed") into contiguous panels in exactly the order the micro-kernel reads them,
//   which also makes trans_a / trans_b free inside the hot loop. The micro-kernel keeps an
//   mr x nr tile of y in vector registers (AVX-512 14x32: 28 zmm accumulators; AVX2 6x16;
//   SSE2 4x8) and per k step loads nr/W vectors of B and broadcasts mr values of A: mr*nr/W
//   FMAs for nr/W + mr loads, versus 1 FMA per 2 loads + 1 store in naive. The row tiles of a
//   block have near-equal heights <= mr, each height with its own micro-kernel variant (no
//   wasted FMAs at the bottom edge); tiles cut at the right edge compute on zero-padded B and
//   store only the valid columns. alpha, beta and the
//   bias are applied when a tile is stored (beta == 0 never reads y); the post-op chain then
//   runs as separate vectorized passes over y, one per step.
// fused (fused/gemm.cpp): moves the post-op chain into that store, so y is written once.
//
// Cache blocking (gemm_kernel.hpp, gemm_blocking()), from the cache sizes read at run time
// (sysfs, then sysconf, then defaults; this VM: L1d 32 KiB, L2 1 MiB, L3 32 MiB):
//   KC: deep. The micro-kernel streams both micro-panels from L2 (the A micro-panel prefetched
//       8 k steps ahead, the kc x nr B micro-panel by the hardware prefetcher): at kc = 256 the
//       B micro-panel alone is the whole 32 KiB L1, so keeping it there was never the real
//       regime. What each k block does cost is per C tile - zeroing, a load and a store of C
//       after the first block, the FMA pipeline's fill and drain - so fewer, deeper blocks win:
//       kc = L2 / 2 / (4 * 128) (half of L2 still holds a 128-row A block), clamped to
//       [256, 1024] -> 1024. At 1024^3, t1 (thread CPU time), the rate rose with each step
//       from kc 256 to 512 to 1024. K is split into ceil(K / KC) near-equal blocks.
//   MC: the packed mc x kc A block stays in half of L2 while every B micro-panel passes it:
//       mc = 0.5 * L2 / (4 * kc), a multiple of mr -> 126. A thread's rows are cut into
//       ceil(rows / mr) near-equal row tiles (1024 rows: 74 tiles of 13 or 14 rows), grouped
//       into near-equal blocks of at most MC rows: exact MC blocks left a 16-row block of two
//       8-row tiles, and near-equal blocks regardless of tiles 12-row tiles; both run at a lower
//       FMA rate (perf).
//   NC: the packed kc x nc B block stays in half of L3: nc = 0.5 * L3 / (4 * kc), a multiple
//       of nr, at most 16384 -> 4096.
// B read in place: when every thread's rows fit in one A block in half of L2 (M <= 128 rows at
//   kc = 1024 here), each element of B is used by that single block, so packing B would copy
//   it once in order to read it once. The micro-kernel then reads b's rows where they are
//   (row step ldb, prefetched 16 k steps ahead), with no B buffer and no barriers; only a
//   right-edge panel narrower than nr is packed (zero-padded). On 128x3072x768+bias+gelu, t1,
//   packing B (9 MiB) had been a sizeable share of the call, and reading in place saved it
//   (run `opfuse-bench --op gemm`). Read in place, the kc rows of
//   a micro-panel sit ldb apart and share few cache sets, so with many row tiles reusing the
//   panel (AVX2's 6-row tiles: 22 of them for 128 rows), or with a transposed B or rows more
//   than a page apart, each micro-panel is instead packed alone into one kc x nr buffer right
//   before its row tiles run (BPanels::each in gemm_kernel.hpp): still no B block, no
//   barriers, and every panel read from L1/L2 by all its tiles.
// Few rows (m <= 4, B not bound at prepare): sgemm_rows instead of the loop nest. A 14-row
//   register tile would run 1 to 4 of its rows, and every B element is used once, so packing B
//   - or reading it in place down 32-column micro-panels, 2048 rows of 128 bytes at a
//   4000-byte step for the 1 x 1000 x 2048 classifier - only slows the one pass over B. B's
//   rows stream in order instead, 8 (4 for 3-4 rows) at a time, into accumulator rows in L1;
//   a transposed B (PyTorch's Linear weight, (n, k)) is read as 8 (4) rows of dot products
//   with A's rows. On a team, row-major B is split into chunks of K (each into its own
//   partial sums, added in chunk order) and B^T into blocks of columns, both taken in turn so
//   that a thread slowed by a neighbour does not hold the others at the barrier (libgomp's
//   spin at that barrier was 16% of a 2-thread profile with one block per thread). The row
//   count is a template parameter: with it
//   at run time the broadcast A values lived on the stack and the pass ran clearly slower.
//   A/B pairs against the loop nest, t1 and t2, showed it faster on both 1x1000x2048+bias
//   (B 8 MiB, in L3) and 1x4096x4096 with B^T (64 MiB, from DRAM: the loop nest packed -
//   transposed - all 64 MiB of B on every call, so the gain there is large); the current
//   figures, with oneDNN and Eigen, are in reports/REPORT.md (gemm).
// A packing on AVX-512: 16 k steps of a tile's rows are loaded as 16 vectors and transposed in
//   registers (unpacks, then 128-bit lane shuffles) instead of moved one float at a time: at
//   1024^3 (perf) A packing's share of the time shrank severalfold, to a small one.
// Threads (OpenMP, args.threads through team_size()): a tm x tn grid over the rows and the
// columns of each nc block minimizing rows/tm + cols/tn, ties splitting the columns. With one
// row of threads (tm == 1) every thread packs exactly the B panels it multiplies and runs with
// no barrier at all (at 1024^3 it scaled to 2 threads visibly better than the shared B block
// with two barriers per k block; thread scaling: reports/REPORT.md); with tm > 1 the team packs
// each B block together between two barriers.
// Found on the way: the A rows (short 1 KiB streams the hardware prefetcher misses) were most
// of the packing time until the next tile's rows were prefetched (1024^3, KC 128, perf);
// a C tile that is read is prefetched into L2, and into L1 only 32 k steps before its store,
// since with ldc = 1024 its 14 rows share two L1 sets; on the last k block the next tile's C
// lines are prefetched one tile ahead with write intent (a fresh C otherwise makes every store
// wait for a read for ownership).
//
// Prepare / execute: if b (the weights) is bound as a constant at prepare, all of op(b) is
// packed once into the prepared state and execute skips B packing and its barriers; otherwise
// B blocks are packed at execute into the workspace (or B is read in place, above). A blocks
// are always packed at execute, into per-thread slices of the workspace. Execute allocates
// nothing.
//
// Measured: opfuse-bench's gemm cases (1024^3, 128x3072x768 +bias+gelu, 128x768x3072 +bias,
// ...) against naive, oneDNN and Eigen at 1 and 2 threads, with the probe's FMA peak, are in
// reports/REPORT.md (gemm; reports/avx2/ for AVX2); b is not bound at prepare there, so B
// packing is included. `opfuse-bench --op gemm` measures them here.
// The micro-kernel alone (L1-resident panels) runs at the FMA peak; at 1024^3 it is nearly all
// of the time, packing A and packing B a few percent each (perf, t1).
#include <cassert>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <new>

#include "simd/activation.hpp"
#include "simd/common.hpp"
#include "simd/gemm_kernel.hpp"
#include "src/threads.hpp"

namespace opfuse::simd {
inline namespace OPFUSE_SIMD_NS {
namespace {

struct GemmShape {
  std::int64_t m, n, k;
};
GemmShape gemm_shape(const OpDesc& desc) {
  const GemmParams& p = desc.p<GemmParams>();
  const Shape& a = desc.inputs[0].shape;
  const Shape& b = desc.inputs[1].shape;
  return {p.trans_a ? a[1] : a[0], p.trans_b ? b[0] : b[1], p.trans_a ? a[0] : a[1]};
}

// Row and column strides that read an operand broadcastable to (m, n) at y's (i, j): the
// operand's last two dims align with (m, n); a dim of size 1 (or missing) broadcasts.
struct RowCol {
  std::int64_t rs, cs;
};
RowCol broadcast_rc(const Shape& s) {
  const std::int64_t cols = s.rank >= 1 ? s[s.rank - 1] : 1;
  const std::int64_t rows = s.rank >= 2 ? s[s.rank - 2] : 1;
  return {rows == 1 ? 0 : cols, cols == 1 ? 0 : 1};
}

// Prepared state: all of op(b) packed for sgemm when b was bound as a constant.
struct GemmState {
  struct Free {
    void operator()(float* p) const { std::free(p); }
  };
  std::unique_ptr<float[], Free> packed_b;
};

// ---- post-op passes over y (m, n), row-major with row step ldy -------------------------------

template <class Arch>
void activation_pass(const Activation& act, float* y, std::int64_t m, std::int64_t n, std::int64_t ldy, int threads) {
  using B = fbatch<Arch>;
  constexpr std::int64_t W = B::size;
  // The kind is fixed once per pass (with_act_kind), so the loop has no per-batch switch.
  with_act_kind(act.kind, [&](auto kind) {
    constexpr ActKind K = decltype(kind)::value;
    parallel_for(m, threads, std::max<std::int64_t>(1, 4096 / n), [&](std::int64_t r0, std::int64_t r1) {
      for (std::int64_t i = r0; i < r1; ++i) {
        float* row = y + i * ldy;
        std::int64_t j = 0;
        for (; j + W <= n; j += W) activate_k<K, Arch>(act, B::load_unaligned(row + j)).store_unaligned(row + j);
        for (; j < n; ++j) row[j] = activate_k<K, Arch>(act, B(row[j])).get(0);  // scalar tail, same code
      }
    });
  });
}

// y = y <op> other, other broadcast to (m, n) through (rs, cs), cs 0 or 1.
template <class Arch>
void binary_pass(BinaryKind kind, float* y, std::int64_t m, std::int64_t n, std::int64_t ldy, const float* other,
                 RowCol o, int threads) {
  using B = fbatch<Arch>;
  constexpr std::int64_t W = B::size;
  parallel_for(m, threads, std::max<std::int64_t>(1, 4096 / n), [&](std::int64_t r0, std::int64_t r1) {
    for (std::int64_t i = r0; i < r1; ++i) {
      float* row = y + i * ldy;
      const float* orow = other + i * o.rs;
      std::int64_t j = 0;
      if (o.cs == 1) {
        for (; j + W <= n; j += W)
          binary_op<Arch>(kind, B::load_unaligned(row + j), B::load_unaligned(orow + j)).store_unaligned(row + j);
      } else {
        const B ov(*orow);
        for (; j + W <= n; j += W) binary_op<Arch>(kind, B::load_unaligned(row + j), ov).store_unaligned(row + j);
      }
      for (; j < n; ++j) row[j] = binary_op<Arch>(kind, B(row[j]), B(orow[j * o.cs])).get(0);
    }
  });
}

// y[:, j] = scale[j] * (y[:, j] - mean[j]) * inv_std[j] + bias[j], the naive formula's order;
// inv_std (n floats of workspace) is computed once per column.
template <class Arch>
void batchnorm_pass(float* y, std::int64_t m, std::int64_t n, std::int64_t ldy, const float* scale, const float* bias,
                    const float* mean, const float* var, float eps, float* inv_std, int threads) {
  using B = fbatch<Arch>;
  constexpr std::int64_t W = B::size;
  for (std::int64_t j = 0; j < n; ++j) inv_std[j] = 1.f / std::sqrt(var[j] + eps);
  parallel_for(m, threads, std::max<std::int64_t>(1, 4096 / n), [&](std::int64_t r0, std::int64_t r1) {
    for (std::int64_t i = r0; i < r1; ++i) {
      float* row = y + i * ldy;
      std::int64_t j = 0;
      for (; j + W <= n; j += W) {
        const B v = B::load_unaligned(row + j);
        const B r = B::load_unaligned(scale + j) * (v - B::load_unaligned(mean + j)) * B::load_unaligned(inv_std + j) +
                    B::load_unaligned(bias + j);
        r.store_unaligned(row + j);
      }
      for (; j < n; ++j) row[j] = scale[j] * (row[j] - mean[j]) * inv_std[j] + bias[j];
    }
  });
}

}  // namespace
}  // namespace OPFUSE_SIMD_NS

template <class Arch>
std::size_t Gemm::workspace(Arch, const OpDesc& desc) {
  const GemmShape s = gemm_shape(desc);
  // sgemm's packed blocks for every hardware thread, then n floats of batchnorm inv_std.
  return sgemm_workspace<Arch>(s.m, s.n, s.k, ::opfuse::detail::hardware_threads()) + static_cast<std::size_t>(s.n) +
         16;
}

template <class Arch>
Status Gemm::prepare(Arch, const OpDesc& desc, const Context&, const Tensor* const* constants,
                     std::shared_ptr<void>& state) {
  if (!constants || !constants[1]) return Status::ok();  // b arrives at execute: packed there
  const GemmParams& p = desc.p<GemmParams>();
  const GemmShape s = gemm_shape(desc);
  const Tensor& b = *constants[1];
  const std::size_t floats = packed_b_size<Arch>(s.n, s.k);
  const std::size_t bytes = (floats * sizeof(float) + 63) / 64 * 64;
  auto st = std::make_shared<GemmState>();
  st->packed_b.reset(static_cast<float*>(std::aligned_alloc(64, bytes)));
  if (!st->packed_b) throw std::bad_alloc();
  pack_b<Arch>(b.data(), b.strides()[0], p.trans_b, s.n, s.k, st->packed_b.get());
  state = std::move(st);
  return Status::ok();
}

template <class Arch>
void Gemm::operator()(Arch, const KernelArgs& args) const {
  assert(args.desc && args.desc->op == OpKind::gemm && args.workspace);
  const GemmParams& p = args.desc->p<GemmParams>();
  const GemmShape s = gemm_shape(*args.desc);
  const Tensor& a = *args.in[0];
  const Tensor& b = *args.in[1];
  const Tensor& y = *args.out[0];
  const auto* st = static_cast<const GemmState*>(args.state);
  const int threads = std::min(args.threads, ::opfuse::detail::hardware_threads());

  // a is (M, K) [or (K, M)]; b is (K, N) [or (N, K)]; y is (M, N); all dense row-major.
  SgemmArgs g;
  g.m = s.m;
  g.n = s.n;
  g.k = s.k;
  g.alpha = p.alpha;
  g.beta = p.beta;
  g.a = a.data();
  g.lda = a.strides()[0];
  g.trans_a = p.trans_a;
  g.b = b.data();
  g.ldb = b.strides()[0];
  g.trans_b = p.trans_b;
  g.packed_b = st ? st->packed_b.get() : nullptr;
  g.c = y.mutable_data();
  g.ldc = y.strides()[0];
  if (p.has_bias) {
    // The bias broadcasts to (M, N): (N), (1, N), (M, 1), (M, N) or (1).
    const RowCol rc = broadcast_rc(args.in[2]->shape());
    g.bias = args.in[2]->data();
    g.bias_rs = rc.rs;
    g.bias_cs = rc.cs;
  }
  g.workspace = args.workspace;
  g.threads = threads;
  sgemm<Arch>(g);

  // The post-op chain: one vectorized pass over y per step. Operands follow a, b, [bias].
  float* inv_std = args.workspace + sgemm_workspace<Arch>(s.m, s.n, s.k, ::opfuse::detail::hardware_threads());
  const Tensor* const* ops = args.in + (p.has_bias ? 3 : 2);
  for (const PostOp& op : p.post_ops) {
    switch (op.kind) {
      case PostOp::Kind::batchnorm:
        batchnorm_pass<Arch>(g.c, s.m, s.n, g.ldc, ops[0]->data(), ops[1]->data(), ops[2]->data(), ops[3]->data(),
                             op.epsilon, inv_std, threads);
        break;
      case PostOp::Kind::binary:
        binary_pass<Arch>(op.binary, g.c, s.m, s.n, g.ldc, ops[0]->data(), broadcast_rc(ops[0]->shape()), threads);
        break;
      case PostOp::Kind::activation: activation_pass<Arch>(op.act, g.c, s.m, s.n, g.ldc, threads); break;
      case PostOp::Kind::pool: break;  // conv2d only: validate() rejects it on gemm
    }
    ops += post_op_operands(op);
  }
}

OPFUSE_SIMD_INSTANTIATE_PREPARED(Gemm);

}  // namespace opfuse::simd
