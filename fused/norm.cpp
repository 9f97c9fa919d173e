// fused/norm.cpp - softmax with its scale and mask, and add & norm (layernorm / rmsnorm with a
// residual input): each row read once from memory, y written once.
//
// naive: (naive/softmax.cpp, naive/norm.cpp) one scalar pass over the whole tensor per step, in
//        double; the residual add is its own pass s = x + residual, materialized in memory.
// simd:  (simd/norm.cpp) the same steps, vectorized. softmax: per row max, exp into y (or an L1
//        buffer for big tensors) + sum, scale; scale * x + mask is formed in registers in the
//        max and exp passes. A strided axis (softmax over NCHW channels) writes y, reads it back
//        and writes it again. layernorm / rmsnorm: the residual add is a separate pass over the
//        whole tensor (s into the sum output or y), then per row a statistics pass and a
//        normalize pass that read s back - from memory when the tensors exceed the caches.
// fused: the row stays in L1 or registers between one read of the inputs and one write of y.
//        layernorm / rmsnorm + residual: s = x + residual is formed in registers on the only
//          read of x and residual; the statistics (layernorm: sum and sum of squares of s - s[0];
//          rmsnorm: sum of squares) accumulate from the same registers; s is stored to the sum
//          output when write_sum asks for it (the next block's residual stream) and kept for the
//          normalize pass in L1: in y's row itself, or, when the operands exceed the last-level
//          cache (32 MiB: the BERT-base 4096 x 768 add & norm moves 36 MiB), in a 16 KB stack
//          row buffer, so that y and sum can be stored non-temporally (the rows 8 KB ahead are
//          prefetched into L2 meanwhile). y is normalized from L1. DRAM traffic per element:
//          x, residual in; y [, sum] out - against simd's x, residual in, s out (plus the read
//          for ownership of s); s in, y out. Without a residual: the simd stage's row passes
//          (stats_pass, normalize_row in simd/norm_kernel.hpp, shared by both stages).
//        softmax: rows up to 4096 floats: max of z, exp(z - max) + sum into an L1 row buffer,
//          y = e / sum written once from it (non-temporally for tensors >= 16 MiB, the next row
//          prefetched meanwhile, and that store pipelined into the next row's exp pass as in
//          simd/norm.cpp); z = scale * x + mask lives in registers - with a mask it is
//          also kept in the buffer, so the mask is read once. Longer rows and strided axes (W
//          rows at once, one per lane) use online softmax: one read computes the running max m
//          and the rescaled sum s = s e^(m_old - m) + e^(z - m) (per lane; contiguous rows in
//          blocks of 4 vectors per rescale), a second read writes e^(z - m) / s, so y is never
//          written twice. Fully masked rows give 0, a NaN (or +inf: inf - inf) makes the row NaN
//          (naive's rules), decided from the sum alone.
// Measured: simd / fused / oneDNN for layernorm 4096 x 768 + residual (BERT-base, over the L3,
// where fusing the residual pays most) and rmsnorm 512 x 4096 + residual (everything fits the
// 32 MiB L3 there, so simd's extra pass over s is cheap and fusion gains less), and for the
// 64 MiB softmax / layernorm / rmsnorm 4096 x 4096 without residual or mask, are in
// reports/REPORT.md (softmax, layernorm, rmsnorm) with the run's STREAM triad to compare
// against; or run `opfuse-bench --op layernorm` (softmax, rmsnorm). Without a residual or mask
// fused equals simd (the same row kernel; nothing to fuse).
#include <array>
#include <cassert>
#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>

#include "fused/norm.hpp"
#include "simd/common.hpp"
#include "simd/norm_kernel.hpp"
#include "simd/vmath.hpp"

namespace opfuse::fused {
inline namespace OPFUSE_SIMD_NS {

using simd::fbatch;
using simd::finish_layer;
using simd::flush_pending;
using simd::normalize_row;
using simd::PendingRow;
using simd::prefetch_line;
using simd::RowPrefetch;
using simd::RowStats;
using simd::stats_pass;
using simd::vmax;
using simd::Walker;
using simd::write_row;
using i64 = std::int64_t;

namespace {

using Index = std::array<i64, kMaxRank>;
constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kLowest = std::numeric_limits<float>::lowest();

constexpr std::size_t u(int d) { return static_cast<std::size_t>(d); }

// Outputs of at least this many bytes are stored non-temporally (they cannot stay in cache).
constexpr i64 kStreamBytes = 16 << 20;
// Operands moving this much in total do not fit the last-level cache (32 MiB on the Zen 4 this
// was tuned on): the norms stream then too.
constexpr i64 kLlcBytes = 32 << 20;
// Row buffer on the stack (floats): a row this long stays in L1 between the passes.
constexpr i64 kRowBuf = 4096;

template <class Arch>
inline fbatch<Arch> expn(fbatch<Arch> x) {
  return simd::vmath::exp_nonpositive<Arch>(x);
}

// ---- softmax ------------------------------------------------------------------------------------

// z = scale * x + mask for a row: the batch at j and one element. kScaled / kMasked drop the
// multiply and the mask load where they are no-ops. The mask step ms is 1, 0 (broadcast) or
// anything else (gathered).
template <class Arch, bool kScaled, bool kMasked>
struct Z {
  const float* x;
  const float* m;
  i64 ms;
  float scale;
  fbatch<Arch> operator()(i64 j) const {
    fbatch<Arch> v = fbatch<Arch>::load_unaligned(x + j);
    if constexpr (kScaled) v *= fbatch<Arch>(scale);
    if constexpr (kMasked) v += simd::load_strided<Arch>(m + j * ms, ms);
    return v;
  }
  float at(i64 j) const { return (kScaled ? scale * x[j] : x[j]) + (kMasked ? m[j * ms] : 0.f); }
};

// Per-lane online softmax state: running max m (kLowest until a finite or +inf z arrives, so
// m - m_new is never -inf - -inf) and sum s of e^(z - m). A -inf z adds e^-inf = 0; a NaN z,
// or a +inf z (e^(inf - inf)), makes s NaN for good.
template <class Arch>
struct Online {
  fbatch<Arch> m = fbatch<Arch>(kLowest), s = fbatch<Arch>(0.f);
  void add(fbatch<Arch> v) {
    const fbatch<Arch> mn = vmax<Arch>(m, v);
    s = xsimd::fma(s, expn<Arch>(m - mn), expn<Arch>(v - mn));
    m = mn;
  }
  // Four vectors at once: one rescale of s per block.
  void add4(fbatch<Arch> v0, fbatch<Arch> v1, fbatch<Arch> v2, fbatch<Arch> v3) {
    const fbatch<Arch> mn = vmax<Arch>(m, vmax<Arch>(vmax<Arch>(v0, v1), vmax<Arch>(v2, v3)));
    s = s * expn<Arch>(m - mn) +
        ((expn<Arch>(v0 - mn) + expn<Arch>(v1 - mn)) + (expn<Arch>(v2 - mn) + expn<Arch>(v3 - mn)));
    m = mn;
  }
};

// The scalar step of the same recurrence (row tails), on the lanes' combined (m, s).
template <class Arch>
void online_scalar(float& m, float& s, float v) {
  using B = fbatch<Arch>;
  const float mn = v > m ? v : (std::isnan(v) ? kNaN : m);
  s = s * expn<Arch>(B(m - mn)).get(0) + expn<Arch>(B(v - mn)).get(0);
  m = mn;
}

// Lanes -> one (m, s): M = max m_l, S = sum s_l e^(m_l - M).
template <class Arch>
void combine(const Online<Arch>& o, float& m, float& s) {
  using B = fbatch<Arch>;
  m = simd::hmax<Arch>(o.m);
  s = xsimd::hadd(o.s * expn<Arch>(o.m - B(m)));  // a lane that saw NaN has s NaN: so has the sum
}

// y = fill for a row whose sum says NaN (NaN) or fully masked (0).
template <class Arch>
void fill_row(float* y, i64 n, float fill) {
  using B = fbatch<Arch>;
  constexpr i64 W = B::size;
  i64 j = 0;
  for (; j + W <= n; j += W) B(fill).store_unaligned(y + j);
  for (; j < n; ++j) y[j] = fill;
}

// One contiguous row of up to kRowBuf floats, three passes over L1: the max of z; e = exp(z -
// max) into buf and the sum; y = e / sum, y's only write (non-temporal with `stream`; `next`
// and `next_m`, the next row's x and mask or null, prefetched meanwhile). With a mask, pass 1
// also keeps z in buf, so the mask is read once; without one, pass 2 forms z again from x in
// L1 (one multiply, cheaper than a store pass).
template <class Arch, bool kScaled, bool kMasked>
void row_buffered(const Z<Arch, kScaled, kMasked>& z, float* y, i64 n, float* buf, bool stream, const float* next,
                  const float* next_m, PendingRow* pend) {
  using B = fbatch<Arch>;
  constexpr i64 W = B::size;
  // Pass 1 - the max (and z into buf with a mask). NaN may or may not survive vmax; the sum
  // catches it.
  B m0(-kInf), m1(-kInf);
  i64 j = 0;
  for (; j + 2 * W <= n; j += 2 * W) {
    const B v0 = z(j), v1 = z(j + W);
    if constexpr (kMasked) {
      v0.store_aligned(buf + j);
      v1.store_aligned(buf + j + W);
    }
    m0 = vmax<Arch>(m0, v0);
    m1 = vmax<Arch>(m1, v1);
  }
  if (j + W <= n) {
    const B v = z(j);
    if constexpr (kMasked) v.store_aligned(buf + j);
    m0 = vmax<Arch>(m0, v);
    j += W;
  }
  float mx = simd::hmax<Arch>(vmax<Arch>(m0, m1));
  for (; j < n; ++j) {
    const float v = z.at(j);
    if constexpr (kMasked) buf[j] = v;
    if (v > mx) mx = v;
  }
  auto zb = [&](i64 k) {
    if constexpr (kMasked)
      return B::load_aligned(buf + k);
    else
      return z(k);
  };
  auto zbs = [&](i64 k) { return kMasked ? buf[k] : z.at(k); };
  // Every z is -inf (fully masked: 0) or NaN (NaN).
  if (mx == -kInf) {
    if (pend) flush_pending<Arch>(*pend, n);
    bool nan = false;
    for (j = 0; j < n; ++j) nan = nan || std::isnan(zbs(j));
    fill_row<Arch>(y, n, nan ? kNaN : 0.f);
    return;
  }
  // Row pipelining (see simd::PendingRow): the pending previous row's store rides along pass 2
  // when its y is vector-aligned and n a multiple of 2W; otherwise it is stored first.
  const bool carry = pend && pend->y && reinterpret_cast<std::uintptr_t>(pend->y) % sizeof(B) == 0 && n % (2 * W) == 0;
  if (pend && !carry) flush_pending<Arch>(*pend, n);
  const float* pb = carry ? pend->buf : nullptr;
  float* py = carry ? pend->y : nullptr;
  const B pinv(carry ? pend->inv : 0.f);
  // Pass 2 - e = exp(z - max) into buf, and the sum (NaN for a NaN z or a +inf max).
  const B vm(mx);
  B s0(0.f), s1(0.f);
  for (j = 0; j + 2 * W <= n; j += 2 * W) {
    prefetch_line<Arch>(next, j);
    prefetch_line<Arch>(next, j + W);
    prefetch_line<Arch>(next_m, j);
    prefetch_line<Arch>(next_m, j + W);
    const B e0 = expn<Arch>(zb(j) - vm), e1 = expn<Arch>(zb(j + W) - vm);
    e0.store_aligned(buf + j);
    e1.store_aligned(buf + j + W);
    s0 += e0;
    s1 += e1;
    if (carry) {
      simd::store_stream<Arch>(py + j, B::load_aligned(pb + j) * pinv);
      simd::store_stream<Arch>(py + j + W, B::load_aligned(pb + j + W) * pinv);
    }
  }
  if (carry) *pend = {};
  if (j + W <= n) {
    const B e = expn<Arch>(zb(j) - vm);
    e.store_aligned(buf + j);
    s0 += e;
    j += W;
  }
  float sum = xsimd::hadd(s0 + s1);
  for (; j < n; ++j) {
    buf[j] = expn<Arch>(B(zbs(j) - mx)).get(0);
    sum += buf[j];
  }
  if (std::isnan(sum)) {
    fill_row<Arch>(y, n, kNaN);
    return;
  }
  // Pass 3 - y = e / sum, y's only write (pipelined: during the next row's pass 2).
  const float inv = 1.f / sum;
  if (pend) {
    *pend = {buf, y, inv};
    return;
  }
  const B vinv(inv);
  write_row<Arch>(
      y, n, stream, [&](i64 k) { return B::load_unaligned(buf + k) * vinv; }, [&](i64 k) { return buf[k] * inv; },
      [](i64) {});
}

// One contiguous row of any length, online: read 1 - running max and rescaled sum; read 2 - y.
template <class Arch, bool kScaled, bool kMasked>
void row_online(const Z<Arch, kScaled, kMasked>& z, float* y, i64 n, bool stream) {
  using B = fbatch<Arch>;
  constexpr i64 W = B::size;
  Online<Arch> o;
  i64 j = 0;
  for (; j + 4 * W <= n; j += 4 * W) o.add4(z(j), z(j + W), z(j + 2 * W), z(j + 3 * W));
  for (; j + W <= n; j += W) o.add(z(j));
  float m, s;
  combine<Arch>(o, m, s);
  for (; j < n; ++j) online_scalar<Arch>(m, s, z.at(j));
  if (std::isnan(s) || s == 0.f) {  // NaN / +inf in the row; or every z is -inf
    fill_row<Arch>(y, n, std::isnan(s) ? kNaN : 0.f);
    return;
  }
  const float inv = 1.f / s;
  const B vm(m), vinv(inv);
  write_row<Arch>(
      y, n, stream, [&](i64 k) { return expn<Arch>(z(k) - vm) * vinv; },
      [&](i64 k) { return expn<Arch>(B(z.at(k) - m)).get(0) * inv; }, [](i64) {});
}

// W rows at once along a strided axis, one lane each: x + l, y + l (l < W) are rows of n
// elements with steps xa, ya; lane l's mask is at m + l * mc with axis step ma (or null).
// Online: read 1 - per-lane running max and sum; read 2 - y. y is written once.
template <class Arch>
void columns_online(const float* x, i64 xa, float* y, i64 ya, const float* m, i64 ma, i64 mc, i64 n, float scale,
                    int lanes) {
  using B = fbatch<Arch>;
  constexpr i64 W = B::size;
  const B vscale(scale);
  auto z = [&](i64 j) {
    B v;
    if (lanes == W) {
      v = B::load_unaligned(x + j * xa);
    } else {
      alignas(64) float t[W] = {};
      for (int l = 0; l < lanes; ++l) t[l] = x[j * xa + l];
      v = B::load_aligned(t);
    }
    v *= vscale;
    if (m) {
      if (lanes == W) {
        v += simd::load_strided<Arch>(m + j * ma, mc);
      } else {
        alignas(64) float t[W] = {};
        for (int l = 0; l < lanes; ++l) t[l] = m[j * ma + l * mc];
        v += B::load_aligned(t);
      }
    }
    return v;
  };
  Online<Arch> o;
  for (i64 j = 0; j < n; ++j) o.add(z(j));
  // Lanes whose sum is NaN get NaN, lanes whose sum is 0 (fully masked) get 0.
  const auto nan = xsimd::isnan(o.s);
  const auto dead = nan | (o.s == B(0.f));
  const B fill = xsimd::select(nan, B(kNaN), B(0.f));
  const B inv = B(1.f) / o.s;
  for (i64 j = 0; j < n; ++j) {
    const B r = xsimd::select(dead, fill, expn<Arch>(z(j) - o.m) * inv);
    if (lanes == W) {
      r.store_unaligned(y + j * ya);
    } else {
      alignas(64) float t[W];
      r.store_aligned(t);
      for (int l = 0; l < lanes; ++l) y[j * ya + l] = t[l];
    }
  }
}

template <class Arch, bool kScaled, bool kMasked>
void softmax_rows(const Walker& base, i64 b, i64 e, const float* xp, float* yp, const float* mp, i64 ms, i64 n,
                  float scale, bool stream) {
  Walker w = base;
  w.seek(b);
  if (n > kRowBuf) {
    for (i64 r = b; r < e; ++r, w.next())
      row_online<Arch>(Z<Arch, kScaled, kMasked>{xp + w.off[0], mp ? mp + w.off[2] : nullptr, ms, scale}, yp + w.off[1],
                       n, stream);
    return;
  }
  // Streaming: two row buffers, one row's exps waiting in one while the next fills the other.
  alignas(64) float buf[2][kRowBuf];
  PendingRow pend;
  int cur = 0;
  for (i64 r = b; r < e; ++r, cur ^= 1) {
    const i64 xo = w.off[0], yo = w.off[1], mo = w.off[2];
    w.next();
    const bool more = r + 1 < e;
    const float* next = stream && more ? xp + w.off[0] : nullptr;
    const float* next_m = stream && more && mp && ms != 0 && w.off[2] != mo ? mp + w.off[2] : nullptr;
    row_buffered<Arch>(Z<Arch, kScaled, kMasked>{xp + xo, mp ? mp + mo : nullptr, ms, scale}, yp + yo, n, buf[cur],
                       stream, next, next_m, stream ? &pend : nullptr);
  }
  flush_pending<Arch>(pend, n);
}

// ---- layernorm / rmsnorm --------------------------------------------------------------------------

}  // namespace
}  // namespace OPFUSE_SIMD_NS

template <class Arch>
void Softmax::operator()(Arch, const KernelArgs& args) const {
  using B = fbatch<Arch>;
  constexpr i64 W = B::size;
  const SoftmaxParams& p = args.desc->p<SoftmaxParams>();
  const Tensor& x = *args.in[0];
  const Tensor* mask = p.has_mask ? args.in[1] : nullptr;
  const Tensor& y = *args.out[0];
  const Shape& shape = x.shape();
  const int rank = shape.rank;
  const int a = p.axis < 0 ? p.axis + rank : p.axis;
  const i64 n = shape.dims[u(a)];
  const Index xs = x.strides(), ys = y.strides();
  const Index ms = mask ? simd::broadcast_strides(mask->desc(), shape) : Index{};
  assert(xs == ys);
  const float* xp = x.data();
  const float* mp = mask ? mask->data() : nullptr;
  float* yp = y.mutable_data();
  const float scale = p.scale;
  const bool stream = y.bytes() >= static_cast<std::size_t>(kStreamBytes);

  Walker base;
  base.shape = shape;
  base.strides = {xs, ys, ms};

  if (n == 1 || xs[u(a)] == 1) {
    // Contiguous rows of n floats.
    base.shape.dims[u(a)] = 1;
    const i64 rows = shape.numel() / n;
    const i64 msa = ms[u(a)];
    simd::parallel_for(rows, args.threads, n >= 2048 ? 1 : 2048 / n, [&](i64 b, i64 e) {
      if (mp)
        scale != 1.f ? softmax_rows<Arch, true, true>(base, b, e, xp, yp, mp, msa, n, scale, stream)
                     : softmax_rows<Arch, false, true>(base, b, e, xp, yp, mp, msa, n, scale, stream);
      else
        scale != 1.f ? softmax_rows<Arch, true, false>(base, b, e, xp, yp, mp, msa, n, scale, stream)
                     : softmax_rows<Arch, false, false>(base, b, e, xp, yp, mp, msa, n, scale, stream);
      if (stream) _mm_sfence();  // order the non-temporal stores before the threads join
    });
    return;
  }

  // Strided axis: the contiguous dim c holds neighbouring rows, W of them per vector (the last
  // group of a panel may be partial). Panels are every index but a and c.
  int c = -1;
  for (int d = 0; d < rank; ++d)
    if (d != a && xs[u(d)] == 1 && shape.dims[u(d)] > 1) c = d;
  assert(c >= 0);
  const i64 L = shape.dims[u(c)];
  constexpr i64 CB = 8 * W;
  const i64 blocks = (L + CB - 1) / CB;
  base.shape.dims[u(a)] = 1;
  base.shape.dims[u(c)] = 1;
  const i64 panels = base.shape.numel();
  const i64 xa = xs[u(a)], ya = ys[u(a)], ma = ms[u(a)], mc = ms[u(c)];
  simd::parallel_for(panels * blocks, args.threads, 1, [&](i64 b, i64 e) {
    Walker w = base;
    for (i64 item = b; item < e; ++item) {
      w.seek(item / blocks);
      const i64 l0 = item % blocks * CB, l1 = l0 + CB < L ? l0 + CB : L;
      const float* xb = xp + w.off[0];
      float* yb = yp + w.off[1];
      const float* mb = mp ? mp + w.off[2] : nullptr;
      for (i64 l = l0; l < l1; l += W) {
        const int lanes = static_cast<int>(l + W <= l1 ? W : l1 - l);
        columns_online<Arch>(xb + l, xa, yb + l, ya, mb ? mb + l * mc : nullptr, ma, mc, n, scale, lanes);
      }
    }
  });
}

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
  i64 n = 1;
  for (int d = axis; d < shape.rank; ++d) n *= shape.dims[u(d)];
  // simd::norm_supports(): R contiguous rows of n floats, the same row order in x, y, residual
  // and sum, a row's element order that of scale and bias.
  const i64 rows = shape.numel() / n;
  // Streaming (non-temporal y and sum, next rows prefetched) when y alone is large or when the
  // op's operands together exceed the last-level cache: then y cannot stay cached for a consumer.
  std::size_t moved = args.in[0]->bytes() + args.out[0]->bytes();
  if (rp) moved += args.in[has_bias ? 3 : 2]->bytes() + (sp ? args.out[1]->bytes() : 0);
  const bool stream =
      args.out[0]->bytes() >= static_cast<std::size_t>(kStreamBytes) || moved >= static_cast<std::size_t>(kLlcBytes);
  // Prefetch distance: the row 2048 floats (8 KB) ahead, at least the next one, so short rows
  // still give DRAM enough lead.
  const i64 pfr = (2048 + n - 1) / n;
  // Where s = x + residual lives between the passes: the stack row buffer (streaming, so y
  // and sum can be written non-temporally), else the sum output or y itself (plain stores; the
  // normalize pass reads it back from L1 and overwrites y in place).
  const bool use_buf = rp && stream && n <= kRowBuf;

  // Rows rb .. re - 1: pass 1 - s in registers, statistics, s kept for pass 2 (buf, sum or y);
  // pass 2 - normalize from L1. tick() once per vector of both passes (prefetching when
  // streaming).
  auto run_rows = [&](i64 rb, i64 re, float* buf, auto tick) {
    for (i64 r = rb; r < re; ++r) {
      const float* x = xp + r * n;
      const float* res = rp ? rp + r * n : nullptr;
      float* y = yp + r * n;
      float* sum = sp ? sp + r * n : nullptr;
      float* keep = !rp ? nullptr : use_buf ? buf : sum ? sum : y;
      const RowStats st =
          stats_pass<Arch>(layer, x, res, keep, keep == sum ? nullptr : sum, stream, n, p.epsilon, tick);
      normalize_row<Arch>(layer, keep ? keep : x, gp, bp, y, n, st, stream, [&](i64) { tick(); });
    }
  };
  simd::parallel_for(rows, args.threads, n >= 4096 ? 1 : 4096 / n, [&](i64 rb, i64 re) {
    alignas(64) float buf[kRowBuf];                    // used only with use_buf
    if (!stream) return run_rows(rb, re, buf, [] {});  // in cache: no prefetch bookkeeping at all
    // Streaming: the rows of x (and residual) pfr ahead flow into L2 through both passes of
    // each row, as in simd. With a residual, pacing both streams through the statistics pass
    // too (before: during the normalize pass only) measured faster and steadier on BERT's
    // 4096 x 768 add & norm (9 A/B pairs, most of them faster; with 4 KiB pages it had
    // measured slower).
    RowPrefetch<Arch> ax(xp, (rb + pfr) * n, re * n, 2);
    if (rp) {
      RowPrefetch<Arch> ar(rp, (rb + pfr) * n, re * n, 2);
      run_rows(rb, re, buf, [&] {
        ax.tick();
        ar.tick();
      });
    } else {
      run_rows(rb, re, buf, [&] { ax.tick(); });
    }
    _mm_sfence();  // order the non-temporal stores before the threads join
  });
}

OPFUSE_SIMD_INSTANTIATE(Softmax);
OPFUSE_SIMD_INSTANTIATE(Norm);

}  // namespace opfuse::fused
