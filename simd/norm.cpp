// simd/norm.cpp - softmax, layernorm and rmsnorm: row reductions, vectorized.
//
// naive: one logical index at a time through strides, reductions in double, one full pass
//        over the tensor per step (naive/softmax.cpp, naive/norm.cpp tell the story).
// simd:  rows are split across OpenMP threads and every pass is an xsimd loop with a scalar
//        tail, accumulating in float vectors (the tolerance allows the reassociation).
//        softmax: when the axis is the contiguous memory dim, a row is a vector stream and gets
//          three passes - max (and a NaN flag), exp(z - max) stored into y while summing, scale
//          by 1/sum; passes 2 and 3 of a row of a few thousand floats hit L1, so DRAM sees x
//          read once and y written once. When the axis is strided (softmax over the channels of
//          NCHW), the contiguous dim is another one: W neighbouring rows are processed at once,
//          one lane per row, so every load is still a full vector. The exp is vmath::exp (simd/vmath.hpp).
//        layernorm / rmsnorm: the normalized dims are one contiguous block per row (the
//          supports() rule), the residual add is done inside the mean pass (s is stored into
//          the sum output, or y, and re-read from L1), then the variance pass (layernorm) and
//          the normalize pass. Two-pass variance, as in naive, so |mean| >> std stays exact.
// fused: keeps a row in registers: online max/sum softmax in two reads, add & norm with one
//        read of x and residual and one write of y (and sum).
// GCC 12's AVX-512 headers build min/max/roundscale from _mm512_undefined_ps(), which
// -Wmaybe-uninitialized flags at every inlining site (GCC bug 105593, fixed in GCC 13).

#include <array>
#include <cassert>
#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>

#include "simd/common.hpp"
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

// y[j] = src[j] * f for j < n: non-temporal vector stores on the vector-aligned part of y,
// plain stores on the unaligned head and the tail.
template <class Arch>
void scale_store_stream(const float* src, float* y, std::int64_t n, float f) {
  using B = fbatch<Arch>;
  constexpr std::int64_t W = B::size;
  const B vf(f);
  std::int64_t j = 0;
  if (reinterpret_cast<std::uintptr_t>(y) % sizeof(float) == 0)
    while (j < n && reinterpret_cast<std::uintptr_t>(y + j) % sizeof(B) != 0) y[j] = src[j] * f, ++j;
  if (reinterpret_cast<std::uintptr_t>(y + j) % sizeof(B) == 0)
    for (; j + W <= n; j += W) store_stream<Arch>(y + j, B::load_unaligned(src + j) * vf);
  for (; j + W <= n; j += W) (B::load_unaligned(src + j) * vf).store_unaligned(y + j);
  for (; j < n; ++j) y[j] = src[j] * f;  // scalar tail
}

// e^x for the softmax arguments z - max, which lie in [-inf, 0] once NaN rows and +inf maxima
// are handled: vmath::exp's reduction and polynomial (Cody-Waite, Cephes degree 5, <= 2 ulp)
// without the parts that domain never needs - no upper clamp, no NaN select, and one 2^n factor
// (x is clamped to -87, so n >= -126 and 2^n stays normal; results below e^-87 ~ 1.6e-38 are
// flushed to 0, far below any softmax tolerance). ~15 vector ops instead of ~24.
template <class Arch>
fbatch<Arch> exp_nonpositive(fbatch<Arch> x) {
  using B = fbatch<Arch>;
  using I = xsimd::batch<std::int32_t, Arch>;
  const B magic(12582912.f);       // 1.5 * 2^23: adding it rounds to an integer
  const auto tiny = x < B(-87.f);  // e^x < 1.7e-38: returned as 0 (so masked z = -inf gives 0)
  const B xc = xsimd::select(tiny, B(-87.f), x);
  const B t = xsimd::fma(xc, B(1.44269504088896341f), magic);
  const B n = t - magic;
  B r = xsimd::fnma(n, B(0.693359375f), xc);
  r = xsimd::fnma(n, B(-2.12194440e-4f), r);
  B p(1.9875691500e-4f);
  p = xsimd::fma(p, r, B(1.3981999507e-3f));
  p = xsimd::fma(p, r, B(8.3334519073e-3f));
  p = xsimd::fma(p, r, B(4.1665795894e-2f));
  p = xsimd::fma(p, r, B(1.6666665459e-1f));
  p = xsimd::fma(p, r, B(5.0000001201e-1f));
  p = xsimd::fma(p, r * r, r + B(1.f));
  // 2^n from t's low mantissa bits: bits(t) - bits(magic) = n.
  const I e = (xsimd::bitwise_cast<I>(t) - I(0x4B400000 - 127)) << 23;
  return xsimd::select(tiny, B(0.f), p * xsimd::bitwise_cast<B>(e));
}

// A logical index walking `shape` in row-major order, carrying the element offset of three
// tensors (x, y, mask) so that stepping costs one add per tensor.
struct Walker {
  Shape shape;
  std::array<Index, 3> strides{};
  Index idx{};
  std::array<std::int64_t, 3> off{};

  void seek(std::int64_t flat) {
    for (int d = shape.rank - 1; d >= 0; --d) {
      idx[u(d)] = flat % shape.dims[u(d)];
      flat /= shape.dims[u(d)];
    }
    for (std::size_t t = 0; t < 3; ++t) {
      off[t] = 0;
      for (int d = 0; d < shape.rank; ++d) off[t] += idx[u(d)] * strides[t][u(d)];
    }
  }
  void next() {
    for (int d = shape.rank - 1; d >= 0; --d) {
      const std::size_t k = u(d);
      if (++idx[k] < shape.dims[k]) {
        for (std::size_t t = 0; t < 3; ++t) off[t] += strides[t][k];
        return;
      }
      for (std::size_t t = 0; t < 3; ++t) off[t] -= strides[t][k] * (shape.dims[k] - 1);
      idx[k] = 0;
    }
  }
};

// One softmax row with any strides, scalar: the column-path tail (fewer than W columns left).
// x, y are (n) with steps xa, ya; m (mask) is (n) with step ma or null.
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
  if (has_nan || mx == -kInf) {
    const float fill = has_nan ? kNaN : 0.f;
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
// (1, 0 for a broadcast mask, anything else is gathered) or null.
// Streaming variant (large tensors, n <= kStreamRow): the exps go to `buf` (L1) instead of y,
// `next` (the next row of x, or null) is prefetched during pass 2, and pass 3 writes y once
// with non-temporal stores.
template <class Arch>
void softmax_row(const float* x, float* y, const float* m, std::int64_t ms, std::int64_t n, float scale,
                 float* buf = nullptr, const float* next = nullptr) {
  using B = fbatch<Arch>;
  constexpr std::int64_t W = B::size;
  const B vscale(scale);
  auto z = [&](std::int64_t j) {
    B v = B::load_unaligned(x + j) * vscale;
    return m ? v + load_strided<Arch>(m + j * ms, ms) : v;
  };
  auto zs = [&](std::int64_t j) { return scale * x[j] + (m ? m[j * ms] : 0.f); };

  // Pass 1 - the row max, and whether any z is NaN (max() alone would drop NaNs).
  B vmax(-kInf);
  auto nan = vmax != vmax;  // all false
  std::int64_t j = 0;
  for (; j + W <= n; j += W) {
    const B v = z(j);
    nan = nan | (v != v);
    vmax = xsimd::max(vmax, v);
  }
  float mx = hmax<Arch>(vmax);
  bool has_nan = xsimd::any(nan);
  for (; j < n; ++j) {  // scalar tail
    const float v = zs(j);
    if (std::isnan(v)) has_nan = true;
    if (v > mx) mx = v;
  }
  // NaN row -> NaN; fully masked row -> 0 (naive's rules); a +inf max gives inf - inf = NaN
  // in naive, so the row is NaN too.
  if (has_nan || mx == -kInf || mx == kInf) {
    const float fill = mx == -kInf && !has_nan ? 0.f : kNaN;
    for (j = 0; j + W <= n; j += W) B(fill).store_unaligned(y + j);
    for (; j < n; ++j) y[j] = fill;
    return;
  }

  // Pass 2 - e_j = exp(z_j - max) into y (or buf), and their sum; z_j - max is in [-inf, 0].
  const B vm(mx);
  B vsum(0.f);
  float* ex = buf ? buf : y;
  for (j = 0; j + W <= n; j += W) {
    if (next) __builtin_prefetch(next + j);
    const B e = exp_nonpositive<Arch>(z(j) - vm);
    e.store_unaligned(ex + j);
    vsum += e;
  }
  float sum = xsimd::hadd(vsum);
  for (; j < n; ++j) {
    const float e = exp_nonpositive<Arch>(B(zs(j) - mx)).get(0);  // the same exp as the vector body
    ex[j] = e;
    sum += e;
  }

  // Pass 3 - scale by 1/sum (>= 1: the max element contributes exp(0)).
  const float inv = 1.f / sum;
  if (buf) {
    scale_store_stream<Arch>(buf, y, n, inv);
    return;
  }
  const B vinv(inv);
  for (j = 0; j + W <= n; j += W) (B::load_unaligned(y + j) * vinv).store_unaligned(y + j);
  for (; j < n; ++j) y[j] *= inv;
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
  B vmax(-kInf);
  auto nan = vmax != vmax;
  for (std::int64_t j = 0; j < n; ++j) {  // pass 1: per-lane max and NaN flag
    const B v = z(j);
    nan = nan | (v != v);
    vmax = xsimd::max(vmax, v);
  }
  B vsum(0.f);
  for (std::int64_t j = 0; j < n; ++j) {  // pass 2: exp into y, per-lane sums
    const B e = vmath::exp<Arch>(z(j) - vmax);
    e.store_unaligned(y + j * ya);
    vsum += e;
  }
  // Pass 3: scale; lanes that are NaN rows or fully masked rows get NaN / 0 instead.
  const B inv = B(1.f) / vsum;
  const auto masked = vmax == B(-kInf);
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
          softmax_row<Arch>(xp + w.off[0], yp + w.off[1], mp ? mp + w.off[2] : nullptr, ms[u(a)], n, scale);
        return;
      }
      alignas(64) float buf[kStreamRow];
      for (std::int64_t r = b; r < e; ++r) {
        const std::int64_t xo = w.off[0], yo = w.off[1], mo = w.off[2];
        w.next();
        softmax_row<Arch>(xp + xo, yp + yo, mp ? mp + mo : nullptr, ms[u(a)], n, scale, buf,
                          r + 1 < e ? xp + w.off[0] : nullptr);
      }
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

// sum of f(v) over a contiguous row, 4 vector accumulators, scalar tail.
// `next` / `next2` (or null): rows prefetched along the way (the next row of x, residual).
template <class Arch, class F>
float row_sum(const float* s, std::int64_t n, F f, const float* next = nullptr, const float* next2 = nullptr) {
  using B = fbatch<Arch>;
  constexpr std::int64_t W = B::size;
  B a0(0.f), a1(0.f), a2(0.f), a3(0.f);
  std::int64_t j = 0;
  for (; j + 4 * W <= n; j += 4 * W) {
    if (next)
      for (std::int64_t k = 0; k < 4 * W; k += 16) __builtin_prefetch(next + j + k);
    if (next2)
      for (std::int64_t k = 0; k < 4 * W; k += 16) __builtin_prefetch(next2 + j + k);
    a0 += f(B::load_unaligned(s + j));
    a1 += f(B::load_unaligned(s + j + W));
    a2 += f(B::load_unaligned(s + j + 2 * W));
    a3 += f(B::load_unaligned(s + j + 3 * W));
  }
  for (; j + W <= n; j += W) a0 += f(B::load_unaligned(s + j));
  float acc = xsimd::hadd((a0 + a1) + (a2 + a3));
  for (; j < n; ++j) acc += f(B(s[j])).get(0);  // scalar tail, same arithmetic
  return acc;
}

}  // namespace

template <class Arch>
void Norm::operator()(Arch, const KernelArgs& args) const {
  using B = fbatch<Arch>;
  constexpr std::int64_t W = B::size;
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
  const float fn = static_cast<float>(n), eps = p.epsilon;

  const bool stream = args.out[0]->bytes() >= static_cast<std::size_t>(kStreamBytes);
  parallel_for(rows, args.threads, n >= 4096 ? 1 : 4096 / n, [&](std::int64_t rb, std::int64_t re) {
    for (std::int64_t r = rb; r < re; ++r) {
      const float* x = xp + r * n;
      float* y = yp + r * n;
      // Streaming: the next row of x (and residual) is prefetched during the passes that run
      // in L1, and y is written with non-temporal stores.
      const float* next = stream && r + 1 < re ? x + n : nullptr;
      const float* next_res = next && rp ? rp + (r + 1) * n : nullptr;
      // Pass 1 - the mean (rmsnorm: mean square) of s; with a residual, s = x + residual is
      // formed here and stored into the sum output (or y), where passes 2-3 re-read it from L1.
      const float* s = x;
      float acc = 0.f;
      if (rp) {
        const float* res = rp + r * n;
        float* st = sp ? sp + r * n : y;
        B a0(0.f), a1(0.f);
        std::int64_t j = 0;
        for (; j + 2 * W <= n; j += 2 * W) {
          const B v0 = B::load_unaligned(x + j) + B::load_unaligned(res + j);
          const B v1 = B::load_unaligned(x + j + W) + B::load_unaligned(res + j + W);
          v0.store_unaligned(st + j);
          v1.store_unaligned(st + j + W);
          a0 += layer ? v0 : v0 * v0;
          a1 += layer ? v1 : v1 * v1;
        }
        for (; j + W <= n; j += W) {
          const B v = B::load_unaligned(x + j) + B::load_unaligned(res + j);
          v.store_unaligned(st + j);
          a0 += layer ? v : v * v;
        }
        acc = xsimd::hadd(a0 + a1);
        for (; j < n; ++j) {  // scalar tail
          const float v = x[j] + res[j];
          st[j] = v;
          acc += layer ? v : v * v;
        }
        s = st;
      } else if (layer) {
        acc = row_sum<Arch>(x, n, [](B v) { return v; });
      } else {
        acc = row_sum<Arch>(x, n, [](B v) { return v * v; });
      }
      const float mean = acc / fn;  // rmsnorm: the mean square

      // Pass 2 - layernorm's variance around the mean (two-pass, no cancellation).
      float inv_std;
      if (layer) {
        const B vm(mean);
        const float var = row_sum<Arch>(
            s, n,
            [&](B v) {
              const B d = v - vm;
              return d * d;
            },
            next, next_res);
        inv_std = 1.f / std::sqrt(var / fn + eps);
      } else {
        inv_std = 1.f / std::sqrt(mean + eps);
      }

      // Pass 3 - normalize: y = (s - mean) * inv_std * scale [+ bias]; rmsnorm: s * inv_std * scale.
      const B vm(layer ? mean : 0.f), vr(inv_std);
      std::int64_t j = 0;
      if (stream) {
        // Head up to a vector-aligned y with plain stores, then non-temporal stores.
        if (reinterpret_cast<std::uintptr_t>(y) % sizeof(float) == 0)
          for (; j < n && reinterpret_cast<std::uintptr_t>(y + j) % sizeof(B) != 0; ++j)
            y[j] = (s[j] - (layer ? mean : 0.f)) * inv_std * gp[j] + (bp ? bp[j] : 0.f);
        if (reinterpret_cast<std::uintptr_t>(y + j) % sizeof(B) == 0) {
          for (; j + W <= n; j += W) {
            if (!layer && next) {  // rmsnorm has no variance pass: prefetch here
              __builtin_prefetch(next + j);
              if (next_res) __builtin_prefetch(next_res + j);
            }
            B v = (B::load_unaligned(s + j) - vm) * vr * B::load_unaligned(gp + j);
            if (bp) v += B::load_unaligned(bp + j);
            store_stream<Arch>(y + j, v);
          }
        }
      }
      if (bp) {
        for (; j + W <= n; j += W)
          xsimd::fma((B::load_unaligned(s + j) - vm) * vr, B::load_unaligned(gp + j), B::load_unaligned(bp + j))
              .store_unaligned(y + j);
        for (; j < n; ++j) y[j] = (s[j] - mean) * inv_std * gp[j] + bp[j];
      } else {
        for (; j + W <= n; j += W)
          ((B::load_unaligned(s + j) - vm) * vr * B::load_unaligned(gp + j)).store_unaligned(y + j);
        const float m0 = layer ? mean : 0.f;
        for (; j < n; ++j) y[j] = (s[j] - m0) * inv_std * gp[j];
      }
    }
    if (stream) _mm_sfence();  // order the non-temporal stores before the threads join
  });
}

OPFUSE_SIMD_INSTANTIATE(Softmax);
OPFUSE_SIMD_INSTANTIATE(Norm);

}  // namespace opfuse::simd
