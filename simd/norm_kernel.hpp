// simd/norm_kernel.hpp - the row pieces shared by the simd and fused softmax / layernorm /
// rmsnorm kernels (simd/norm.cpp, fused/norm.cpp): the walker over rows of any layout, the row
// writer with its non-temporal path, the NaN-propagating vector max, the L2 prefetch of the
// next row, the pending row of softmax's row pipelining, layernorm's statistics from shifted
// sums, and the two passes of a layernorm / rmsnorm row (statistics, normalize) that both
// stages run. Internal header of the per-ISA TUs; everything lives in the ISA's inline
// namespace.
#pragma once

#ifndef OPFUSE_SIMD_ISA
#error "simd/norm_kernel.hpp is for simd/*.cpp and fused/*.cpp, compiled once per ISA with OPFUSE_SIMD_ISA set"
#endif

#include <array>
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "opfuse/tensor.hpp"
#include "simd/common.hpp"

namespace opfuse::simd {
inline namespace OPFUSE_SIMD_NS {

// A logical index walking `shape` in row-major order, carrying the element offset of three
// tensors (x, y, mask) so that stepping costs one add per tensor.
struct Walker {
  Shape shape;
  std::array<std::array<std::int64_t, kMaxRank>, 3> strides{};
  std::array<std::int64_t, kMaxRank> idx{};
  std::array<std::int64_t, 3> off{};

  void seek(std::int64_t flat) {
    for (int d = shape.rank - 1; d >= 0; --d) {
      idx[static_cast<std::size_t>(d)] = flat % shape.dims[static_cast<std::size_t>(d)];
      flat /= shape.dims[static_cast<std::size_t>(d)];
    }
    for (std::size_t t = 0; t < 3; ++t) {
      off[t] = 0;
      for (int d = 0; d < shape.rank; ++d)
        off[t] += idx[static_cast<std::size_t>(d)] * strides[t][static_cast<std::size_t>(d)];
    }
  }
  void next() {
    for (int d = shape.rank - 1; d >= 0; --d) {
      const std::size_t k = static_cast<std::size_t>(d);
      if (++idx[k] < shape.dims[k]) {
        for (std::size_t t = 0; t < 3; ++t) off[t] += strides[t][k];
        return;
      }
      for (std::size_t t = 0; t < 3; ++t) off[t] -= strides[t][k] * (shape.dims[k] - 1);
      idx[k] = 0;
    }
  }
};

// y[j] = f(j) for j < n, where f(j) returns the batch of elements j .. j + W - 1 and fs(j) one
// element (the scalar head and tail). With `stream`, the vector-aligned body of y is written
// with non-temporal stores; pf(j) runs once per vector of the body (prefetches).
template <class Arch, class F, class FS, class PF>
void write_row(float* y, std::int64_t n, bool stream, F f, FS fs, PF pf) {
  using B = fbatch<Arch>;
  constexpr std::int64_t W = B::size;
  std::int64_t j = 0;
  if (stream) {
    if (reinterpret_cast<std::uintptr_t>(y) % sizeof(float) == 0)
      for (; j < n && reinterpret_cast<std::uintptr_t>(y + j) % sizeof(B) != 0; ++j) y[j] = fs(j);
    if (reinterpret_cast<std::uintptr_t>(y + j) % sizeof(B) == 0)
      for (; j + W <= n; j += W) {
        pf(j);
        store_stream<Arch>(y + j, f(j));
      }
  }
  for (; j + W <= n; j += W) {
    pf(j);
    f(j).store_unaligned(y + j);
  }
  for (; j < n; ++j) y[j] = fs(j);  // scalar tail
}

// One prefetch per cache line of `p` (or nothing for null), for vector offset j: prefetcht1,
// into L2 only. The row being computed stays in L1 (a 16 KB row plus its buffer already fill
// Zen 4's 32 KB L1; prefetcht0 of the next row measured slower on the 64 MiB cases).
template <class Arch>
inline void prefetch_line(const float* p, std::int64_t j) {
  constexpr std::int64_t W = fbatch<Arch>::size;
  if (p && (W >= 16 || j % 16 == 0)) __builtin_prefetch(p + j, 0, 2);
}

// The rows ahead of a streaming norm, prefetched into L2 (prefetcht1) at the pace the kernel
// consumes them: tick() runs once per vector of every pass over a row and requests the next
// 64-byte line every `every` = passes x 16 / W ticks, so a row's n floats are requested while
// its own passes run and the DRAM read stream never idles. Prefetching the next row only
// during the last (normalize) pass left it idle through the statistics pass: pacing made
// layernorm and rmsnorm 4096 x 4096 (simd) clearly faster (6 A/B pairs; current figures:
// reports/REPORT.md, layernorm and rmsnorm).
template <class Arch>
struct RowPrefetch {
  const float* base;
  std::int64_t at, end;  // the next line to request and the end, in floats from base
  int every, count = 0;

  RowPrefetch(const float* base_, std::int64_t from, std::int64_t to, int passes)
      : base(base_), at(from), end(to), every(passes * 16 / static_cast<int>(fbatch<Arch>::size)) {}

  void tick() {
    if (++count < every) return;
    count = 0;
    if (at < end) __builtin_prefetch(base + at, 0, 2);
    at += 16;
  }
};

// One prefetch into L1 (prefetcht0) per cache line of p + d, for vector offset j: the scale
// and bias of a long row, read again for every row, which with the row itself overflow the L1
// and came from L2 at the moment of use. d = 64 floats (4 lines) ahead: layernorm 4096 x 4096
// measured faster and steadier (3 A/B rounds; 32 and 96 measured no better).
template <class Arch>
inline void prefetch_l1(const float* p, std::int64_t j) {
  constexpr std::int64_t W = fbatch<Arch>::size;
  if (p && (W >= 16 || j % 16 == 0)) __builtin_prefetch(p + j + 64, 0, 3);
}

// A row's statistics: layernorm keeps the shift k (a sample of the row, s[0]), the mean of
// d = s - k and 1/sqrt(var + eps); rmsnorm 1/sqrt(mean(s^2) + eps) in rstd.
struct RowStats {
  float shift = 0.f;   // k (layernorm)
  float mean_d = 0.f;  // mean(s) - k (layernorm)
  float rstd = 0.f;
};

// layernorm's statistics from s1 = sum(d), s2 = sum(d^2), d = s - k over the row s; the
// variance is recomputed around the mean (a pass over s, in cache) when ill-conditioned.
template <class Arch>
RowStats finish_layer(const float* s, std::int64_t n, float k, float s1, float s2, float eps) {
  using B = fbatch<Arch>;
  constexpr std::int64_t W = B::size;
  const float fn = static_cast<float>(n);
  const float md = s1 / fn;
  float var = (s2 - s1 * md) / fn;
  if (!(var >= 0.25f * (s2 / fn))) {  // ill-conditioned (or NaN: recomputing keeps it NaN)
    const B vk(k), vmd(md);
    B v0(0.f), v1(0.f);
    std::int64_t j = 0;
    for (; j + 2 * W <= n; j += 2 * W) {
      const B d0 = (B::load_unaligned(s + j) - vk) - vmd, d1 = (B::load_unaligned(s + j + W) - vk) - vmd;
      v0 = xsimd::fma(d0, d0, v0);
      v1 = xsimd::fma(d1, d1, v1);
    }
    for (; j + W <= n; j += W) {
      const B d = (B::load_unaligned(s + j) - vk) - vmd;
      v0 = xsimd::fma(d, d, v0);
    }
    float q = xsimd::hadd(v0 + v1);
    for (; j < n; ++j) q += ((s[j] - k) - md) * ((s[j] - k) - md);
    var = q / fn;
  }
  return {k, md, 1.f / std::sqrt(var + eps)};
}

// A streamed softmax row whose exps sit in `buf` and whose store y = buf * inv is still to do:
// the next row's exp pass does it on the way (row pipelining), so the non-temporal stores of
// one row overlap the arithmetic of the next instead of running as a store-only pass.
struct PendingRow {
  const float* buf = nullptr;
  float* y = nullptr;
  float inv = 0.f;
};

// The pending row's store on its own (before a row that cannot take it, and after the last).
template <class Arch>
void flush_pending(PendingRow& p, std::int64_t n) {
  if (!p.y) return;
  using B = fbatch<Arch>;
  const B vinv(p.inv);
  const float* e = p.buf;
  const float inv = p.inv;
  write_row<Arch>(
      p.y, n, true, [&](std::int64_t k) { return B::load_unaligned(e + k) * vinv; },
      [&](std::int64_t k) { return e[k] * inv; }, [](std::int64_t) {});
  p = {};
}

// The two passes of a layernorm / rmsnorm row, one definition for both stages: simd calls them
// with s = x (its residual add ran as a pass of its own), fused with x and the residual. They
// were the fused stage's own until simd adopted them in place of its row_stats and
// normalize_row, which made simd's layernorm and rmsnorm 4096 x 4096 faster (6 A/B pairs, one
// thread; 768-wide rows unchanged). They sit in an anonymous namespace, as
// they did in fused/norm.cpp, so every TU keeps its own copies and GCC's inlining of them (and
// of the lambdas they take) stays what it was: declared `static` or given external linkage
// they inlined differently and fused's add & norm measured slower, by a wide, case-dependent
// margin.
namespace {

// Pass 1 of a row: s = x [+ res] in registers, stored to buf (when s is not x itself) and to
// sum (when asked; non-temporally with `stream_sum`), statistics accumulated on the way.
template <class Arch, class Tick>
RowStats stats_pass(bool layer, const float* x, const float* res, float* buf, float* sum, bool stream_sum,
                    std::int64_t n, float eps, Tick tick) {
  using B = fbatch<Arch>;
  constexpr std::int64_t W = B::size;
  auto ld = [&](std::int64_t j) {
    return res ? B::load_unaligned(x + j) + B::load_unaligned(res + j) : B::load_unaligned(x + j);
  };
  auto lds = [&](std::int64_t j) { return res ? x[j] + res[j] : x[j]; };
  const float k = layer ? lds(0) : 0.f;
  const B vk(k);
  B a0(0.f), a1(0.f), q0(0.f), q1(0.f);
  float s1 = 0.f, s2 = 0.f;
  auto scalar = [&](std::int64_t j) {
    const float v = lds(j);
    if (buf) buf[j] = v;
    if (sum) sum[j] = v;
    const float d = v - k;
    s1 += d;
    s2 += d * d;
  };
  std::int64_t j = 0;
  bool nt = false;  // the sum body is vector-aligned and streamed
  if (sum && stream_sum && reinterpret_cast<std::uintptr_t>(sum) % sizeof(float) == 0) {
    for (; j < n && reinterpret_cast<std::uintptr_t>(sum + j) % sizeof(B) != 0; ++j) scalar(j);
    nt = true;
  }
  auto put = [&](std::int64_t at, B v) {
    if (buf) v.store_unaligned(buf + at);
    if (sum) {
      if (nt)
        simd::store_stream<Arch>(sum + at, v);
      else
        v.store_unaligned(sum + at);
    }
  };
  for (; j + 2 * W <= n; j += 2 * W) {
    tick(), tick();
    const B v0 = ld(j), v1 = ld(j + W);
    put(j, v0);
    put(j + W, v1);
    const B d0 = v0 - vk, d1 = v1 - vk;
    if (layer) a0 += d0, a1 += d1;
    q0 = xsimd::fma(d0, d0, q0);
    q1 = xsimd::fma(d1, d1, q1);
  }
  for (; j + W <= n; j += W) {
    tick();
    const B v = ld(j);
    put(j, v);
    const B d = v - vk;
    if (layer) a0 += d;
    q0 = xsimd::fma(d, d, q0);
  }
  s1 += xsimd::hadd(a0 + a1);
  s2 += xsimd::hadd(q0 + q1);
  for (; j < n; ++j) scalar(j);  // scalar tail
  const float fn = static_cast<float>(n);
  if (!layer) return {0.f, 0.f, 1.f / std::sqrt(s2 / fn + eps)};
  return finish_layer<Arch>(buf ? buf : x, n, k, s1, s2, eps);
}

// Pass 2: y = ((s - k) - mean_d) * rstd * g [+ b] (layernorm), s * rstd * g (rmsnorm); pf(j)
// once per vector (prefetches).
template <class Arch, class PF>
void normalize_row(bool layer, const float* s, const float* g, const float* b, float* y, std::int64_t n,
                   const RowStats& st, bool stream, PF pf_next) {
  using B = fbatch<Arch>;
  const B vk(st.shift), vmd(st.mean_d), vr(st.rstd);
  const float k = st.shift, md = st.mean_d, r = st.rstd;
  // Rows whose scale and bias, with the row, overflow L1: those prefetched into L1 ahead.
  const bool far = layer && n >= 2048;
  const float* gl1 = far ? g : nullptr;
  const float* bl1 = far ? b : nullptr;
  auto pf = [&](std::int64_t j) {
    pf_next(j);
    simd::prefetch_l1<Arch>(gl1, j);
    simd::prefetch_l1<Arch>(bl1, j);
  };
  if (!layer) {
    write_row<Arch>(
        y, n, stream, [&](std::int64_t j) { return B::load_unaligned(s + j) * vr * B::load_unaligned(g + j); },
        [&](std::int64_t j) { return s[j] * r * g[j]; }, pf);
  } else if (b) {
    write_row<Arch>(
        y, n, stream,
        [&](std::int64_t j) {
          const B d = (B::load_unaligned(s + j) - vk) - vmd;
          return xsimd::fma(d * vr, B::load_unaligned(g + j), B::load_unaligned(b + j));
        },
        [&](std::int64_t j) { return ((s[j] - k) - md) * r * g[j] + b[j]; }, pf);
  } else {
    write_row<Arch>(
        y, n, stream,
        [&](std::int64_t j) { return ((B::load_unaligned(s + j) - vk) - vmd) * vr * B::load_unaligned(g + j); },
        [&](std::int64_t j) { return ((s[j] - k) - md) * r * g[j]; }, pf);
  }
}

}  // namespace

}  // namespace OPFUSE_SIMD_NS
}  // namespace opfuse::simd
