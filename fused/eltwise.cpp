// fused/eltwise.cpp - eltwise_chain in one pass: every step applied to a block of registers between
// one load of x and one store of y.
//
// naive: one full scalar pass over the tensor per step (naive/eltwise.cpp); a chain of s steps
//        streams the tensor through memory s times.
// simd:  the same s passes, each vectorized (simd/eltwise.cpp): the first reads x and writes y, the
//        others read and write y, binary steps also read their operand. For the bench chain
//        (add, gelu_erf, mul, relu over 64 MiB tensors) that is 10 tensor-sized DRAM streams.
// fused: the chain is compiled at prepare (fused/shared/eltwise_supports.cpp): a program of step
//        records (activation kind + parameters, or binary kind + operand index + load/splat) and
//        ONE loop plan shared by x, y and every operand - y's dims in memory order with every
//        neighbour merged where all of them are contiguous across it, so same-shaped and scalar
//        operands give one flat run, a per-channel operand a constant per NCHW plane or a
//        repeating NHWC row. Execute walks that plan; each run is cut into blocks of U vectors
//        (AVX-512 4, AVX2 / SSE2 2), and per block a switch-dispatched interpreter applies every step to the U
//        registers (binary steps load their operand block or splat its value), so the dispatch
//        is paid once per step per block and the values never leave the registers; y is stored
//        once, non-temporally for outputs >= 16 MiB. Tails shorter than a vector go through the
//        same block code on a one-vector stack copy. The bench chain becomes 4 DRAM streams (x,
//        a, b in; y out): 256 MiB instead of the simd stage's 640 MiB.
//        Threads: flat runs are split in 4096-float chunks, multi-dim plans by outer rows.
//        y may alias x (allows_inplace): each block is loaded before it is stored.
// Measured: simd / fused on the bench chain (n16777216 add,gelu_erf,mul,relu) are in
// reports/REPORT.md (eltwise_chain; its "What bounds the fused targets" section models the
// bound below with the run's own figures), or run `opfuse-bench --op eltwise_chain`. The block
// size U was chosen by A/B runs (see kUnroll below).
// Why not the 2.5x the traffic ratio (640 / 256 MiB) promises: that ratio is only reached when
// both stages run at the same bandwidth, and the chain is not memory-bound on one core. gelu_erf
// (vmath.hpp: ~34 vector operations), timed in cache (gelu/simd/n128_c3072) and scaled to the 16M
// elements, cost about as much as the fused pass's 256 MiB took at the bandwidth this core
// streamed (relu) when this was worked out, and both stages pay it in full; the fused chain's
// other steps add a little arithmetic on top. The fused pass was arithmetic-bound, not
// memory-bound: ~39 vector operations per 16 elements (gelu ~34, add, mul, relu, three loads, a
// store), and its time worked out at about one such operation per cycle - Zen 4 issues one
// 512-bit multiply-add-class operation per cycle, and most of gelu's are - with the DRAM traffic
// hidden underneath. The simd stage pays the same gelu plus three memory-bound passes (add, mul,
// relu). A software prefetch of the input streams (256 - 2048 floats ahead) measured slower than
// the hardware prefetcher alone.
#include <cassert>
#include <cstring>
#include <type_traits>
#include <utility>

#include "fused/eltwise.hpp"
#include "simd/activation.hpp"
#include "simd/common.hpp"

namespace opfuse::fused {
inline namespace OPFUSE_SIMD_NS {

using simd::fbatch;
using i64 = std::int64_t;

namespace {

constexpr int kMaxOperands = kChainMaxOperands;  // declined above it by chain_supports
// Elements per parallel chunk (a multiple of every vector width, so chunk seams stay aligned).
constexpr i64 kGrain = 4096;
// Outputs of at least this many floats (16 MiB) are stored non-temporally (no read for
// ownership of y's lines; they cannot stay in cache anyway). Smaller ones stay in cache.
constexpr i64 kStreamMin = i64{1} << 22;

// Flat opcodes of the interpreter: the ActKind values, then the binary kinds, then the splatted
// binary kinds.
constexpr int kActCodes = static_cast<int>(ActKind::linear) + 1;
enum : int {
  kAdd = kActCodes,
  kSub,
  kMul,
  kDiv,
  kAddS,
  kSubS,
  kMulS,
  kDivS,
};

struct Inst {
  int code = 0;
  int operand = -1;
  Activation act;
};

struct ChainState {
  ChainPlan plan;
  std::vector<Inst> prog;
};

template <class Arch>
using B = fbatch<Arch>;

// Applies f to each of the U registers (unrolled at compile time so v[] stays in registers).
template <int U, class F>
[[gnu::always_inline]] inline void each(F&& f) {
  [&]<int... I>(std::integer_sequence<int, I...>) { (f(I), ...); }
  (std::make_integer_sequence<int, U>{});
}

// One block of U vectors at offset i of the current run: load x, run the program, return in v.
// opnd[k] points at operand k's element for run offset 0 (splat operands: their one value).
// Always inlined into the block loop so that v[] lives in registers across the whole program.
template <class Arch, int U>
[[gnu::always_inline]] inline void run_program(const Inst* prog, const Inst* end, const float* const* opnd, i64 i,
                                               B<Arch> (&v)[U]) {
  using V = B<Arch>;
  constexpr i64 W = V::size;
  for (const Inst* p = prog; p != end; ++p) {
    const float* o = p->operand >= 0 ? opnd[p->operand] : nullptr;
    const Activation& a = p->act;
    switch (p->code) {
#define OPFUSE_CHAIN_ACT(K) \
  case static_cast<int>(ActKind::K): each<U>([&](int u) { v[u] = simd::activate_k<ActKind::K, Arch>(a, v[u]); }); break;
      OPFUSE_CHAIN_ACT(relu)
      OPFUSE_CHAIN_ACT(clip)
      OPFUSE_CHAIN_ACT(leaky_relu)
      OPFUSE_CHAIN_ACT(sigmoid)
      OPFUSE_CHAIN_ACT(tanh)
      OPFUSE_CHAIN_ACT(gelu_erf)
      OPFUSE_CHAIN_ACT(gelu_tanh)
      OPFUSE_CHAIN_ACT(silu)
      OPFUSE_CHAIN_ACT(hardswish)
      OPFUSE_CHAIN_ACT(linear)
#undef OPFUSE_CHAIN_ACT
      case kAdd: each<U>([&](int u) { v[u] = v[u] + V::load_unaligned(o + i + u * W); }); break;
      case kSub: each<U>([&](int u) { v[u] = v[u] - V::load_unaligned(o + i + u * W); }); break;
      case kMul: each<U>([&](int u) { v[u] = v[u] * V::load_unaligned(o + i + u * W); }); break;
      case kDiv: each<U>([&](int u) { v[u] = v[u] / V::load_unaligned(o + i + u * W); }); break;
      case kAddS: {
        const V s(*o);
        each<U>([&](int u) { v[u] = v[u] + s; });
        break;
      }
      case kSubS: {
        const V s(*o);
        each<U>([&](int u) { v[u] = v[u] - s; });
        break;
      }
      case kMulS: {
        const V s(*o);
        each<U>([&](int u) { v[u] = v[u] * s; });
        break;
      }
      case kDivS: {
        const V s(*o);
        each<U>([&](int u) { v[u] = v[u] / s; });
        break;
      }
      default: assert(false && "unknown chain opcode"); break;
    }
  }
}

// Vectors per block: U independent dependency chains through the polynomial steps, as in the
// simd unary loop. AVX-512: 4 (out of cache, on the bench chain U = 4 measured faster than U = 2
// - more loads in flight per block - and U = 8 spills and was slowest); AVX2 / SSE2: 2 (four
// blocks of temporaries spill on their 16 registers).
template <class Arch>
constexpr int kUnroll = std::is_same_v<Arch, simd::avx512> ? 4 : 2;

// One contiguous run of n elements: y[i] = chain(x[i], operands at i). Stream: y is batch-aligned,
// store non-temporally.
template <class Arch, bool Stream>
void run_span(const ChainState& st, const float* x, float* y, const float* const* opnd, i64 n) {
  using V = B<Arch>;
  constexpr i64 W = V::size;
  constexpr int U = kUnroll<Arch>;
  const Inst* prog = st.prog.data();
  const Inst* end = prog + st.prog.size();
  auto store = [](float* p, V v) {
    if constexpr (Stream)
      simd::store_stream<Arch>(p, v);
    else
      v.store_unaligned(p);
  };
  i64 i = 0;
  for (; i + U * W <= n; i += U * W) {
    V v[U];
    each<U>([&](int u) { v[u] = V::load_unaligned(x + i + u * W); });
    run_program<Arch, U>(prog, end, opnd, i, v);
    each<U>([&](int u) { store(y + i + u * W, v[u]); });
  }
  for (; i + W <= n; i += W) {
    V v[1] = {V::load_unaligned(x + i)};
    run_program<Arch, 1>(prog, end, opnd, i, v);
    store(y + i, v[0]);
  }
  if (i == n) return;
  // Tail of r < W elements: copy x and every loaded operand's slice into zero-padded vectors and
  // run the same block code on them (splat operands keep their pointer).
  const i64 r = n - i;
  const std::size_t bytes = static_cast<std::size_t>(r) * sizeof(float);
  alignas(64) float xt[W] = {};
  alignas(64) float ot[kMaxOperands][W];
  const float* tp[kMaxOperands];
  std::memcpy(xt, x + i, bytes);
  for (const Inst& in : st.prog) {
    if (in.operand < 0) continue;
    const auto k = static_cast<std::size_t>(in.operand);
    if (in.code >= kAddS) {
      tp[k] = opnd[k];
    } else {
      std::memset(ot[k], 0, sizeof(ot[k]));
      std::memcpy(ot[k], opnd[k] + i, bytes);
      tp[k] = ot[k];
    }
  }
  V v[1] = {V::load_aligned(xt)};
  run_program<Arch, 1>(prog, end, tp, 0, v);
  v[0].store_aligned(xt);
  std::memcpy(y + i, xt, bytes);
}

// A run, streamed when asked: a plain head up to the first batch-aligned address of y, the rest
// with non-temporal stores.
template <class Arch>
void run_any(bool stream, const ChainState& st, const float* x, float* y, const float* const* opnd, i64 n) {
  if (!stream) return run_span<Arch, false>(st, x, y, opnd, n);
  constexpr std::size_t bytes = sizeof(float) * B<Arch>::size;
  const auto misalign = reinterpret_cast<std::uintptr_t>(y) % bytes;
  if (misalign % sizeof(float)) return run_span<Arch, false>(st, x, y, opnd, n);  // not float-aligned
  i64 head = misalign ? static_cast<i64>((bytes - misalign) / sizeof(float)) : 0;
  head = head < n ? head : n;
  if (head > 0) run_span<Arch, false>(st, x, y, opnd, head);
  const float* shifted[kMaxOperands];
  for (const Inst& in : st.prog)
    if (in.operand >= 0) {
      const auto k = static_cast<std::size_t>(in.operand);
      shifted[k] = in.code >= kAddS ? opnd[k] : opnd[k] + head;
    }
  run_span<Arch, true>(st, x + head, y + head, shifted, n - head);
}

}  // namespace
}  // namespace OPFUSE_SIMD_NS

// Compiles the step records into flat opcodes (fused/shared/eltwise_supports.cpp made the plan).
template <class Arch>
Status EltwiseChain::prepare(Arch, const OpDesc& desc, const Context&, const Tensor* const*,
                             std::shared_ptr<void>& state) {
  auto st = std::make_shared<ChainState>();
  st->plan = plan_chain(desc);
  if (!st->plan.vectorizable || st->plan.operand.size() > static_cast<std::size_t>(kMaxOperands))
    return {StatusCode::unsupported, "eltwise_chain: fused kernel does not take this chain (see chain_supports)"};
  for (const ChainOp& op : st->plan.ops) {
    Inst in;
    in.operand = op.operand;
    in.act = op.act;
    in.code = op.code == ChainOp::activation ? static_cast<int>(op.act.kind) : kAdd + (op.code - ChainOp::add);
    st->prog.push_back(in);
  }
  state = std::move(st);
  return Status::ok();
}

template <class Arch>
std::size_t EltwiseChain::workspace(Arch, const OpDesc&) {
  return 0;
}

template <class Arch>
void EltwiseChain::operator()(Arch, const KernelArgs& args) const {
  const auto& st = *static_cast<const ChainState*>(args.state);
  const ChainPlan& pl = st.plan;
  const float* x = args.in[0]->data();
  float* y = args.out[0]->mutable_data();
  const std::size_t nops = pl.operand.size();
  const float* base[kMaxOperands];
  for (std::size_t k = 0; k < nops; ++k) base[k] = args.in[k + 1]->data();
  const i64 n = args.in[0]->numel();
  const i64 inner = pl.inner();
  const bool stream = n >= kStreamMin && inner >= 64 * static_cast<i64>(B<Arch>::size);
  const int r = pl.rank;

  if (r == 1) {  // one flat run: split it across threads in aligned chunks
    simd::parallel_for(inner, args.threads, kGrain, [&](i64 b, i64 e) {
      const float* p[kMaxOperands];
      for (std::size_t k = 0; k < nops; ++k) p[k] = base[k] + b * pl.operand[k][0];
      run_any<Arch>(stream, st, x + b, y + b, p, e - b);
      if (stream) _mm_sfence();
    });
  } else {
    // Rows of `inner` elements; the outer dims are walked with an odometer from each chunk's start.
    i64 outer = 1;
    for (int d = 0; d + 1 < r; ++d) outer *= pl.dims[static_cast<std::size_t>(d)];
    const i64 grain = inner >= kGrain ? 1 : kGrain / inner;
    simd::parallel_for(outer, args.threads, grain, [&](i64 s, i64 e) {
      std::array<i64, kMaxRank> idx{};
      i64 ox = 0;
      i64 oo[kMaxOperands] = {};
      i64 rem = s;
      for (int d = r - 2; d >= 0; --d) {
        const auto du = static_cast<std::size_t>(d);
        idx[du] = rem % pl.dims[du];
        rem /= pl.dims[du];
        ox += idx[du] * pl.x[du];
        for (std::size_t k = 0; k < nops; ++k) oo[k] += idx[du] * pl.operand[k][du];
      }
      const float* p[kMaxOperands];
      for (i64 row = s; row < e; ++row) {
        for (std::size_t k = 0; k < nops; ++k) p[k] = base[k] + oo[k];
        run_any<Arch>(stream, st, x + ox, y + ox, p, inner);
        for (int d = r - 2; d >= 0; --d) {  // odometer step
          const auto du = static_cast<std::size_t>(d);
          ox += pl.x[du];
          for (std::size_t k = 0; k < nops; ++k) oo[k] += pl.operand[k][du];
          if (++idx[du] < pl.dims[du]) break;
          ox -= pl.x[du] * pl.dims[du];
          for (std::size_t k = 0; k < nops; ++k) oo[k] -= pl.operand[k][du] * pl.dims[du];
          idx[du] = 0;
        }
      }
      if (stream) _mm_sfence();
    });
  }
}

OPFUSE_SIMD_INSTANTIATE_PREPARED(EltwiseChain);

}  // namespace opfuse::fused
