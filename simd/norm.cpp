// simd/norm.cpp - softmax, layernorm and rmsnorm: row reductions, vectorized.
//
// naive: one logical index at a time through strides, reductions in double, one full pass
//        over the tensor per step (naive/softmax.cpp, naive/norm.cpp tell the story).
// simd:  rows are split across OpenMP threads and every pass is an xsimd loop with a scalar
//        tail, accumulating in float vectors (the tolerance allows the reassociation).
//        softmax: when the axis is the contiguous memory dim, a row is a vector stream and gets
//          three passes - max, exp(z - max) stored into y (an L1 row buffer when y streams)
//          while summing, scale by 1/sum - with
//          z = scale * x + mask formed in registers in passes 1 and 2. Passes 2 and 3 of a row
//          of a few thousand floats hit L1, so DRAM sees x read once and y written once. A NaN
//          or +inf anywhere turns the sum into NaN (checked once per row instead of a NaN flag
//          per vector); a max of -inf is a fully masked row (zeros). The exp is
//          vmath::exp_nonpositive (simd/vmath.hpp): the argument z - max is never positive.
//          When the axis is strided (softmax over the channels of NCHW), the contiguous dim is
//          another one: W neighbouring rows are processed at once, one lane per row, so every
//          load is still a full vector.
//        layernorm / rmsnorm: the residual add (has_residual) is its own vectorized pass over
//          the whole tensor, s = x + residual into the sum output (write_sum) or into y, as in
//          naive (fusion is data: the unfused stages run it as a separate pass; fused/norm.cpp
//          does it inside the row). Then per contiguous row: one statistics pass and one
//          normalize pass (stats_pass and normalize_row of simd/norm_kernel.hpp, shared with
//          the fused stage, which calls them with the residual). layernorm's statistics pass sums d = s - s[0] and d^2
//          together (shifted data: the shift is a sample of the row, so the cancellation in sum(d^2) - sum(d)^2 / n is
//          small for any mean); where it would still lose more than 2 bits (the first element far out in the row's
//          distribution) the variance is recomputed around the mean from L1, so |mean| >> std stays as exact as
//          two-pass.
//        Large tensors (y >= 16 MiB) stream: y is written with non-temporal stores (no
//          read-for-ownership, no eviction of the row being worked on) and the next row is
//          prefetched into L2 (prefetcht1: into L1 it evicted the row being worked on and
//          measured slower) during the passes that run from L1, so DRAM stays busy while
//          they compute. Streaming softmax rows are also pipelined (PendingRow in
//          simd/norm_kernel.hpp): a row's pass 3 - its non-temporal stores - does not run on its
//          own but inside the next row's pass 2, the exp pass, so the stores drain while exp
//          computes (two row buffers alternate). On 4096 x 4096 (64 MiB), one thread, pipelined
//          rows measured clearly faster than per-row passes, though still slower than a relu over
//          the same 64 MiB (the streaming floor); softmax 4096 x 4096: reports/REPORT.md (softmax).
//          Both stages do it; fused/norm.cpp has the rest.
//          Streaming layernorm / rmsnorm rows pace their prefetch (RowPrefetch in
//          simd/norm_kernel.hpp): the rows ahead are requested a line every other vector through
//          both passes, statistics and normalize, instead of all during the normalize pass,
//          which left DRAM idle while the statistics pass ran from L2 (layernorm 4096 x 4096
//          measured clearly faster, 6 A/B pairs in one session).
//          (Tried and dropped: the next row's max or statistics pass merged into this row's
//          store pass - slower than per-row passes on this Zen 4, the max pass being a read
//          stream itself; and softmax without its exp at all ran only a little faster before the
//          pipelining, so the stores, not exp, were what stood alone.)
// fused: (fused/norm.cpp) keeps the row in L1/registers: scale and mask applied in the max and
//        exp passes with one read of x and mask; add & norm with one read of x and residual.

#include <array>
#include <cassert>
#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>

#include "simd/common.hpp"
#include "simd/norm_kernel.hpp"
#include "simd/vmath.hpp"

namespace opfuse::simd {

namespace {

using Index = std::array<std::int64_t, kMaxRank>;
constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

constexpr std::size_t u(int d) { return static_cast<std::size_t>(d); }

// Tensors larger than this (bytes of y) go through the streaming variants: y is written with
// non-temporal stores (no read-for-ownership of y, no eviction of useful lines) and the next
// row is prefetched while the current one is computed in L1, so DRAM stays busy during the
// compute passes. Below it, y is likely to be consumed from the cache and is stored normally.
constexpr std::int64_t kStreamBytes = 16 << 20;
constexpr std::int64_t kStreamRow = 4096;  // row scratch on the stack (floats), streaming softmax

// One softmax row with any strides, scalar: the rare rows (fully masked, NaN with max -inf)
// and the column-path tail. x, y are (n) with steps xa, ya; m (mask) is (n) with step ma or null.
void softmax_row_scalar(const float* x, std::int64_t xa, float* y, std::int64_t ya, const float* m, std::int64_t ma,
                        std::int64_t n, float scale) {
  auto z = [&](std::int64_t j) { return scale * x[j * xa] + (m ? m[j * ma] : 0.f); };
  float mx = -kInf;
  bool has_nan = false;
  for (std::int64_t j = 0; j < n; ++j) {
    const float v = z(j);
    if (std::isnan(v)) has_nan = true;
    if (v > mx) mx = v;
  }
  if (has_nan || mx == -kInf || mx == kInf) {
    const float fill = mx == -kInf && !has_nan ? 0.f : kNaN;
    for (std::int64_t j = 0; j < n; ++j) y[j * ya] = fill;
    return;
  }
  float sum = 0.f;
  for (std::int64_t j = 0; j < n; ++j) {
    const float e = std::exp(z(j) - mx);
    y[j * ya] = e;
    sum += e;
  }
  const float inv = 1.f / sum;
  for (std::int64_t j = 0; j < n; ++j) y[j * ya] *= inv;
}

// One contiguous softmax row: x, y are (n) with unit step (y may be x); m is (n) with step ms
// (1, 0 for a broadcast mask, anything else is gathered) or null. kScaled / kMasked drop the
// multiply and the mask load from z = scale * x + mask where they are no-ops.
// Streaming variant (large tensors, n <= kStreamRow): the exps go to `buf` (L1) instead of y,
// `next` (the next row of x, or null) is prefetched during pass 2, and pass 3 writes y once
// with non-temporal stores - or, with `pend` (row pipelining), pass 2 also stores the pending
// previous row and this row becomes the pending one (`buf` must then outlive the call).
template <class Arch, bool kScaled, bool kMasked>
void softmax_row(const float* x, float* y, const float* m, std::int64_t ms, std::int64_t n, float scale, float* buf,
                 const float* next, PendingRow* pend) {
  using B = fbatch<Arch>;
  constexpr std::int64_t W = B::size;
  const B vscale(scale);
  auto z = [&](std::int64_t j) {
    B v = B::load_unaligned(x + j);
    if constexpr (kScaled) v *= vscale;
    if constexpr (kMasked) v += load_strided<Arch>(m + j * ms, ms);
    return v;
  };
  auto zs = [&](std::int64_t j) { return (kScaled ? scale * x[j] : x[j]) + (kMasked ? m[j * ms] : 0.f); };

  // Pass 1 - the row max. NaNs may or may not survive max(); pass 2 catches them.
  B m0(-kInf), m1(-kInf);
  std::int64_t j = 0;
  for (; j + 2 * W <= n; j += 2 * W) {
    m0 = vmax<Arch>(m0, z(j));
    m1 = vmax<Arch>(m1, z(j + W));
  }
  if (j + W <= n) m0 = vmax<Arch>(m0, z(j)), j += W;
  float mx = hmax<Arch>(vmax<Arch>(m0, m1));
  for (; j < n; ++j) {  // scalar tail
    const float v = zs(j);
    if (v > mx) mx = v;
  }
  // A max of -inf: every z is -inf (fully masked: zeros) or NaN - the rare row goes scalar.
  if (mx == -kInf) {
    if (pend) flush_pending<Arch>(*pend, n);
    softmax_row_scalar(x, 1, y, 1, kMasked ? m : nullptr, ms, n, kScaled ? scale : 1.f);
    return;
  }
  // The pending row rides along when its y is vector-aligned and n a multiple of 2W.
  const bool carry = pend && pend->y && reinterpret_cast<std::uintptr_t>(pend->y) % sizeof(B) == 0 && n % (2 * W) == 0;
  if (pend && !carry) flush_pending<Arch>(*pend, n);
  const float* pb = carry ? pend->buf : nullptr;
  float* py = carry ? pend->y : nullptr;
  const B pinv(carry ? pend->inv : 0.f);

  // Pass 2 - e_j = exp(z_j - max) into y (or buf), and their sum. z_j - max is in [-inf, 0]
  // unless z_j is NaN or max is +inf (inf - inf): then e_j and the sum are NaN.
  const B vm(mx);
  B s0(0.f), s1(0.f);
  float* ex = buf ? buf : y;
  for (j = 0; j + 2 * W <= n; j += 2 * W) {
    prefetch_line<Arch>(next, j);
    prefetch_line<Arch>(next, j + W);
    const B e0 = vmath::exp_nonpositive<Arch>(z(j) - vm);
    const B e1 = vmath::exp_nonpositive<Arch>(z(j + W) - vm);
    e0.store_unaligned(ex + j);
    e1.store_unaligned(ex + j + W);
    s0 += e0;
    s1 += e1;
    if (carry) {
      store_stream<Arch>(py + j, B::load_aligned(pb + j) * pinv);
      store_stream<Arch>(py + j + W, B::load_aligned(pb + j + W) * pinv);
    }
  }
  if (carry) *pend = {};
  if (j + W <= n) {
    const B e = vmath::exp_nonpositive<Arch>(z(j) - vm);
    e.store_unaligned(ex + j);
    s0 += e;
    j += W;
  }
  float sum = xsimd::hadd(s0 + s1);
  for (; j < n; ++j) {
    const float e = vmath::exp_nonpositive<Arch>(B(zs(j) - mx)).get(0);  // the same exp as the vector body
    ex[j] = e;
    sum += e;
  }
  if (std::isnan(sum)) {  // a NaN in the row, or a +inf max: naive's inf - inf is NaN too
    for (j = 0; j < n; ++j) y[j] = kNaN;
    return;
  }

  // Pass 3 - scale by 1/sum (>= 1: the max element contributes exp(0)); pipelined: later.
  const float inv = 1.f / sum;
  if (pend) {
    *pend = {ex, y, inv};
    return;
  }
  const B vinv(inv);
  write_row<Arch>(
      y, n, buf != nullptr, [&](std::int64_t k) { return B::load_unaligned(ex + k) * vinv; },
      [&](std::int64_t k) { return ex[k] * inv; }, [](std::int64_t) {});
}

template <class Arch>
void softmax_row_any(const float* x, float* y, const float* m, std::int64_t ms, std::int64_t n, float scale,
                     float* buf = nullptr, const float* next = nullptr, PendingRow* pend = nullptr) {
  if (m)
    scale != 1.f ? softmax_row<Arch, true, true>(x, y, m, ms, n, scale, buf, next, pend)
                 : softmax_row<Arch, false, true>(x, y, m, ms, n, scale, buf, next, pend);
  else
    scale != 1.f ? softmax_row<Arch, true, false>(x, y, m, ms, n, scale, buf, next, pend)
                 : softmax_row<Arch, false, false>(x, y, m, ms, n, scale, buf, next, pend);
}

// W softmax rows at once, one per lane: x + l, y + l (l = 0..W-1) are the rows, each (n) with
// steps xa, ya; the mask of lane l is at m + l * mc with axis step ma (or null).
template <class Arch>
void softmax_columns(const float* x, std::int64_t xa, float* y, std::int64_t ya, const float* m, std::int64_t ma,
                     std::int64_t mc, std::int64_t n, float scale) {
  using B = fbatch<Arch>;
  const B vscale(scale);
  auto z = [&](std::int64_t j) {
    B v = B::load_unaligned(x + j * xa) * vscale;
    return m ? v + load_strided<Arch>(m + j * ma, mc) : v;
  };
  B mxv(-kInf);
  auto nan = xsimd::isnan(mxv);           // all false (xsimd 8: != is an ordered compare on AVX, never true for NaN)
  for (std::int64_t j = 0; j < n; ++j) {  // pass 1: per-lane max and NaN flag
    const B v = z(j);
    nan = nan | xsimd::isnan(v);
    mxv = vmax<Arch>(mxv, v);
  }
  B vsum(0.f);
  for (std::int64_t j = 0; j < n; ++j) {                   // pass 2: exp into y, per-lane sums
    const B e = vmath::exp_nonpositive<Arch>(z(j) - mxv);  // NaN for dead lanes, which pass 3 overwrites
    e.store_unaligned(y + j * ya);
    vsum += e;
  }
  // Pass 3: scale; lanes that are NaN rows or fully masked rows get NaN / 0 instead.
  const B inv = B(1.f) / vsum;
  const auto masked = mxv == B(-kInf);
  const auto dead = nan | masked;
  const B fill = xsimd::select(nan, B(kNaN), B(0.f));
  for (std::int64_t j = 0; j < n; ++j) {
    const B r = B::load_unaligned(y + j * ya) * inv;
    xsimd::select(dead, fill, r).store_unaligned(y + j * ya);
  }
}

}  // namespace

template <class Arch>
void Softmax::operator()(Arch, const KernelArgs& args) const {
  using B = fbatch<Arch>;
  constexpr std::int64_t W = B::size;
  const SoftmaxParams& p = args.desc->p<SoftmaxParams>();
  const Tensor& x = *args.in[0];
  const Tensor* mask = p.has_mask ? args.in[1] : nullptr;
  const Tensor& y = *args.out[0];
  const Shape& shape = x.shape();
  const int rank = shape.rank;
  const int a = p.axis < 0 ? p.axis + rank : p.axis;
  const std::int64_t n = shape.dims[u(a)];
  const Index xs = x.strides(), ys = y.strides();
  const Index ms = mask ? broadcast_strides(mask->desc(), shape) : Index{};
  assert(xs == ys);  // y is like x: same shape and layout
  const float* xp = x.data();
  const float* mp = mask ? mask->data() : nullptr;
  float* yp = y.mutable_data();
  const float scale = p.scale;

  Walker base;
  base.shape = shape;
  base.strides = {xs, ys, ms};

  if (n == 1 || xs[u(a)] == 1) {
    // Contiguous rows: x is (rows..., n at axis); a row is n consecutive floats.
    base.shape.dims[u(a)] = 1;
    const std::int64_t rows = shape.numel() / n;
    const std::int64_t grain = n >= 2048 ? 1 : 2048 / n;
    const bool stream = y.bytes() >= static_cast<std::size_t>(kStreamBytes) && n <= kStreamRow;
    parallel_for(rows, args.threads, grain, [&](std::int64_t b, std::int64_t e) {
      Walker w = base;
      w.seek(b);
      if (!stream) {
        for (std::int64_t r = b; r < e; ++r, w.next())
          softmax_row_any<Arch>(xp + w.off[0], yp + w.off[1], mp ? mp + w.off[2] : nullptr, ms[u(a)], n, scale);
        return;
      }
      // Two row buffers: one row's exps wait in one while the next row fills the other.
      alignas(64) float buf[2][kStreamRow];
      PendingRow pend;
      int cur = 0;
      for (std::int64_t r = b; r < e; ++r, cur ^= 1) {
        const std::int64_t xo = w.off[0], yo = w.off[1], mo = w.off[2];
        w.next();
        softmax_row_any<Arch>(xp + xo, yp + yo, mp ? mp + mo : nullptr, ms[u(a)], n, scale, buf[cur],
                              r + 1 < e ? xp + w.off[0] : nullptr, &pend);
      }
      flush_pending<Arch>(pend, n);
      _mm_sfence();  // order the non-temporal stores before the threads join
    });
    return;
  }

  // Strided axis: the contiguous dim c (unit stride, size > 1) holds neighbouring rows. Panels
  // are x's index over every dim but a and c; each panel is (n, L) with row step xs[a] and unit
  // column step, cut into blocks of CB columns for the threads.
  int c = -1;
  for (int d = 0; d < rank; ++d)
    if (d != a && xs[u(d)] == 1 && shape.dims[u(d)] > 1) c = d;
  assert(c >= 0);
  const std::int64_t L = shape.dims[u(c)];
  constexpr std::int64_t CB = 8 * W;
  const std::int64_t blocks = (L + CB - 1) / CB;
  base.shape.dims[u(a)] = 1;
  base.shape.dims[u(c)] = 1;
  const std::int64_t panels = base.shape.numel();
  const std::int64_t xa = xs[u(a)], ya = ys[u(a)], ma = ms[u(a)], mc = ms[u(c)];
  parallel_for(panels * blocks, args.threads, 1, [&](std::int64_t b, std::int64_t e) {
    Walker w = base;
    for (std::int64_t item = b; item < e; ++item) {
      w.seek(item / blocks);
      const std::int64_t l0 = item % blocks * CB, l1 = l0 + CB < L ? l0 + CB : L;
      const float* xb = xp + w.off[0];
      float* yb = yp + w.off[1];
      const float* mb = mp ? mp + w.off[2] : nullptr;
      std::int64_t l = l0;
      for (; l + W <= l1; l += W)
        softmax_columns<Arch>(xb + l, xa, yb + l, ya, mb ? mb + l * mc : nullptr, ma, mc, n, scale);
      for (; l < l1; ++l)  // scalar tail: the last L % W columns, one row each
        softmax_row_scalar(xb + l, xa, yb + l, ya, mb ? mb + l * mc : nullptr, ma, n, scale);
    }
  });
}

// ---- layernorm / rmsnorm ------------------------------------------------------------------

namespace {

// Pass 0 with a residual: s = x + residual over all `count` floats (threads split the range).
template <class Arch>
void add_pass(const float* x, const float* res, float* s, std::int64_t count, int threads) {
  using B = fbatch<Arch>;
  constexpr std::int64_t W = B::size;
  parallel_for(count, threads, 4096, [&](std::int64_t b, std::int64_t e) {
    std::int64_t j = b;
    for (; j + W <= e; j += W) (B::load_unaligned(x + j) + B::load_unaligned(res + j)).store_unaligned(s + j);
    for (; j < e; ++j) s[j] = x[j] + res[j];  // scalar tail
  });
}

}  // namespace

template <class Arch>
void Norm::operator()(Arch, const KernelArgs& args) const {
  const NormParams& p = args.desc->p<NormParams>();
  const bool layer = args.desc->op == OpKind::layernorm;
  const bool has_bias = layer && p.has_bias;
  // Inputs: x, scale, [bias], [residual]. Outputs: y, [sum].
  const float* xp = args.in[0]->data();
  const float* gp = args.in[1]->data();
  const float* bp = has_bias ? args.in[2]->data() : nullptr;
  const float* rp = p.has_residual ? args.in[has_bias ? 3 : 2]->data() : nullptr;
  float* yp = args.out[0]->mutable_data();
  float* sp = p.has_residual && p.write_sum ? args.out[1]->mutable_data() : nullptr;

  const Shape& shape = args.in[0]->shape();
  const int axis = p.axis < 0 ? p.axis + shape.rank : p.axis;
  std::int64_t n = 1;
  for (int d = axis; d < shape.rank; ++d) n *= shape.dims[u(d)];
  // norm_supports(): memory is R contiguous rows of n floats, in the same row order in x, y,
  // residual and sum, and a row's element order matches scale's and bias's (dense row-major).
  const std::int64_t rows = shape.numel() / n;

  // Pass 0 - the residual add as its own pass over the tensor (naive's order): s = x + residual
  // into the sum output, or into y, which the row passes then read back.
  const float* s = xp;
  if (rp) {
    float* st = sp ? sp : yp;
    add_pass<Arch>(xp, rp, st, shape.numel(), args.threads);
    s = st;
  }

  // Streaming when y is large. (Not by the operands' total, as fused does: with a residual, y
  // holds s from pass 0, and non-temporal stores over those dirty cached lines measured slower.)
  const bool stream = args.out[0]->bytes() >= static_cast<std::size_t>(kStreamBytes);
  const std::int64_t pfr = (2048 + n - 1) / n;  // prefetch the rows >= 2048 floats ahead
  auto run_rows = [&](std::int64_t rb, std::int64_t re, auto tick) {
    for (std::int64_t r = rb; r < re; ++r) {
      const float* row = s + r * n;
      // Pass 1 - the row statistics (layernorm: mean and variance; rmsnorm: mean square).
      const RowStats st = stats_pass<Arch>(layer, row, nullptr, nullptr, nullptr, false, n, p.epsilon, tick);
      // Pass 2 - normalize from L1. Streaming: non-temporal stores.
      normalize_row<Arch>(layer, row, gp, bp, yp + r * n, n, st, stream, [&](std::int64_t) { tick(); });
    }
  };
  parallel_for(rows, args.threads, n >= 4096 ? 1 : 4096 / n, [&](std::int64_t rb, std::int64_t re) {
    if (!stream) return run_rows(rb, re, [] {});  // in cache: no prefetch bookkeeping at all
    // Streaming: the rows pfr ahead flow into L2 through both passes of each row.
    RowPrefetch<Arch> ahead(s, (rb + pfr) * n, re * n, 2);
    run_rows(rb, re, [&] { ahead.tick(); });
    _mm_sfence();  // order the non-temporal stores before the threads join
  });
}

// ---- test entry point --------------------------------------------------------------------------

inline namespace OPFUSE_SIMD_NS {
namespace {
template <class F>
void eval_each(F f, const float* x, float* y, std::int64_t n) {
  using B = fbatch<OPFUSE_SIMD_ARCH>;
  constexpr std::int64_t W = B::size;
  std::int64_t i = 0;
  for (; i + W <= n; i += W) f(B::load_unaligned(x + i)).store_unaligned(y + i);
  for (; i < n; ++i) y[i] = f(B(x[i])).get(0);
}
}  // namespace

void exp_nonpositive_eval(const float* x, float* y, std::int64_t n) {
  eval_each([](auto v) { return vmath::exp_nonpositive<OPFUSE_SIMD_ARCH>(v); }, x, y, n);
}
void exp2_nonpositive_eval(const float* x, float* y, std::int64_t n) {
  eval_each([](auto v) { return vmath::exp2_nonpositive<OPFUSE_SIMD_ARCH>(v); }, x, y, n);
}
}  // namespace OPFUSE_SIMD_NS

OPFUSE_SIMD_INSTANTIATE(Softmax);
OPFUSE_SIMD_INSTANTIATE(Norm);

}  // namespace opfuse::simd
