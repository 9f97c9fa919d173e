// simd/transpose.hpp - float matrix transposes and strided copies through registers (internal
// header).
//
// Layout changes at an op's boundary (NCHW <-> NHWC around the direct convolution, packing A
// for the GEMM) are transposes. Done one float at a time they are strided scalar loads and
// stores: measured on the 3x3 64->64 @56 convolution, the two NCHW <-> NHWC copies took a
// sizeable share of the call at a small fraction of the memory bandwidth. Here a W x W block
// (W = the ISA's lanes: 16, 8 or 4) is loaded as W vectors, transposed with log2(W) + 1 shuffle
// stages and stored as W vectors.
//
// Included only by the per-ISA translation units; everything lives in the ISA's namespace.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <type_traits>

#include "simd/common.hpp"

namespace opfuse::simd {
inline namespace OPFUSE_SIMD_NS {

#ifdef __AVX512F__
// The 16 x 16 transpose of AVX-512 registers: r[i] lane j -> r[j] lane i (unpacks within 128-bit
// lanes, then two rounds of 128-bit lane shuffles). The full-mask forms of the intrinsics compile
// to the same instructions; the plain ones start from _mm512_undefined_ps(), which GCC 12 flags
// as -Wuninitialized (GCC bug 105593).
inline void transpose16(__m512 r[16]) {
  __m512 t[16];
  for (int p = 0; p < 8; ++p) {
    t[2 * p] = _mm512_mask_unpacklo_ps(r[2 * p], 0xFFFF, r[2 * p], r[2 * p + 1]);
    t[2 * p + 1] = _mm512_mask_unpackhi_ps(r[2 * p], 0xFFFF, r[2 * p], r[2 * p + 1]);
  }
  // r[4q + e], 128-bit lane L: rows 4q .. 4q + 3 of column 4L + e.
  for (int q = 0; q < 4; ++q) {
    const __m512d a = _mm512_castps_pd(t[4 * q]), b = _mm512_castps_pd(t[4 * q + 2]);
    const __m512d c = _mm512_castps_pd(t[4 * q + 1]), d = _mm512_castps_pd(t[4 * q + 3]);
    r[4 * q] = _mm512_castpd_ps(_mm512_mask_unpacklo_pd(a, 0xFF, a, b));
    r[4 * q + 1] = _mm512_castpd_ps(_mm512_mask_unpackhi_pd(a, 0xFF, a, b));
    r[4 * q + 2] = _mm512_castpd_ps(_mm512_mask_unpacklo_pd(c, 0xFF, c, d));
    r[4 * q + 3] = _mm512_castpd_ps(_mm512_mask_unpackhi_pd(c, 0xFF, c, d));
  }
  for (int e = 0; e < 4; ++e) {
    const __m512 v1 = _mm512_mask_shuffle_f32x4(r[e], 0xFFFF, r[e], r[4 + e], 0x44),
                 v2 = _mm512_mask_shuffle_f32x4(r[e], 0xFFFF, r[e], r[4 + e], 0xEE);
    const __m512 w1 = _mm512_mask_shuffle_f32x4(r[8 + e], 0xFFFF, r[8 + e], r[12 + e], 0x44);
    const __m512 w2 = _mm512_mask_shuffle_f32x4(r[8 + e], 0xFFFF, r[8 + e], r[12 + e], 0xEE);
    t[e] = _mm512_mask_shuffle_f32x4(v1, 0xFFFF, v1, w1, 0x88);
    t[4 + e] = _mm512_mask_shuffle_f32x4(v1, 0xFFFF, v1, w1, 0xDD);
    t[8 + e] = _mm512_mask_shuffle_f32x4(v2, 0xFFFF, v2, w2, 0x88);
    t[12 + e] = _mm512_mask_shuffle_f32x4(v2, 0xFFFF, v2, w2, 0xDD);
  }
  for (int i = 0; i < 16; ++i) r[i] = t[i];
}
#endif

#ifdef __AVX2__
// The 8 x 8 transpose of AVX registers: 32-bit and 64-bit unpacks within 128-bit lanes, then one
// 128-bit lane permute.
inline void transpose8(__m256 r[8]) {
  __m256 t[8];
  for (int p = 0; p < 4; ++p) {
    t[2 * p] = _mm256_unpacklo_ps(r[2 * p], r[2 * p + 1]);
    t[2 * p + 1] = _mm256_unpackhi_ps(r[2 * p], r[2 * p + 1]);
  }
  for (int q = 0; q < 2; ++q) {
    const __m256d a = _mm256_castps_pd(t[4 * q]), b = _mm256_castps_pd(t[4 * q + 2]);
    const __m256d c = _mm256_castps_pd(t[4 * q + 1]), d = _mm256_castps_pd(t[4 * q + 3]);
    r[4 * q] = _mm256_castpd_ps(_mm256_unpacklo_pd(a, b));
    r[4 * q + 1] = _mm256_castpd_ps(_mm256_unpackhi_pd(a, b));
    r[4 * q + 2] = _mm256_castpd_ps(_mm256_unpacklo_pd(c, d));
    r[4 * q + 3] = _mm256_castpd_ps(_mm256_unpackhi_pd(c, d));
  }
  // r[4q + e], 128-bit lane L: rows 4q .. 4q + 3 of column 4L + e.
  for (int e = 0; e < 4; ++e) {
    t[e] = _mm256_permute2f128_ps(r[e], r[4 + e], 0x20);
    t[4 + e] = _mm256_permute2f128_ps(r[e], r[4 + e], 0x31);
  }
  for (int i = 0; i < 8; ++i) r[i] = t[i];
}
#endif

// dst[j * ld_dst + i] = src[i * ld_src + j] for one W x W block, W = fbatch<Arch>::size.
template <class Arch>
inline void transpose_block(const float* src, std::int64_t ld_src, float* dst, std::int64_t ld_dst) {
  constexpr int W = static_cast<int>(fbatch<Arch>::size);
#ifdef __AVX512F__
  if constexpr (W == 16) {
    __m512 r[16];
    for (int i = 0; i < 16; ++i) r[i] = _mm512_loadu_ps(src + i * ld_src);
    transpose16(r);
    for (int i = 0; i < 16; ++i) _mm512_storeu_ps(dst + i * ld_dst, r[i]);
    return;
  }
#endif
#ifdef __AVX2__
  if constexpr (W == 8) {
    __m256 r[8];
    for (int i = 0; i < 8; ++i) r[i] = _mm256_loadu_ps(src + i * ld_src);
    transpose8(r);
    for (int i = 0; i < 8; ++i) _mm256_storeu_ps(dst + i * ld_dst, r[i]);
    return;
  }
#endif
  if constexpr (W == 4) {
    __m128 r0 = _mm_loadu_ps(src), r1 = _mm_loadu_ps(src + ld_src), r2 = _mm_loadu_ps(src + 2 * ld_src),
           r3 = _mm_loadu_ps(src + 3 * ld_src);
    _MM_TRANSPOSE4_PS(r0, r1, r2, r3);
    _mm_storeu_ps(dst, r0);
    _mm_storeu_ps(dst + ld_dst, r1);
    _mm_storeu_ps(dst + 2 * ld_dst, r2);
    _mm_storeu_ps(dst + 3 * ld_dst, r3);
  } else {
    for (int i = 0; i < W; ++i)
      for (int j = 0; j < W; ++j) dst[j * ld_dst + i] = src[i * ld_src + j];
  }
}

// d[3 j + r] = the three rows' float j, j < W: one vector of each row in, three out (the
// pixels of an RGB image in NHWC). AVX-512: two two-source permutes per output vector; AVX2:
// the three rows permuted alike, then two blends per output vector. Not for SSE2.
template <class Arch>
inline void interleave3(fbatch<Arch> a, fbatch<Arch> b, fbatch<Arch> c, float* d) {
  constexpr int W = static_cast<int>(fbatch<Arch>::size);
#ifdef __AVX512F__
  if constexpr (W == 16) {
    // Output lane l of vector v holds element e = 16 v + l: row e % 3, float e / 3. First a and
    // b into t (c's lanes arbitrary), then t and c. The indices are constants in memory (built
    // on the stack per call, their vector loads waited on the scalar stores).
    alignas(64) static constexpr auto idx = [] {
      std::array<std::int32_t, 96> t{};
      for (int v = 0; v < 3; ++v)
        for (int l = 0; l < 16; ++l) {
          const int e = 16 * v + l, r = e % 3, j = e / 3;
          t[32 * v + l] = r == 1 ? 16 + j : j;
          t[32 * v + 16 + l] = r == 2 ? 16 + j : l;
        }
      return t;
    }();
    for (int v = 0; v < 3; ++v) {
      const __m512 t = _mm512_permutex2var_ps(a, _mm512_load_si512(idx.data() + 32 * v), b);
      _mm512_storeu_ps(d + 16 * v, _mm512_permutex2var_ps(t, _mm512_load_si512(idx.data() + 32 * v + 16), c));
    }
  }
#endif
#ifdef __AVX2__
  if constexpr (W == 8) {
    const auto one = [&](auto vc) {
      constexpr int v = decltype(vc)::value;
      // Lane l: element e = 8 v + l, row e % 3, float e / 3; blend masks by row.
      constexpr auto rows_of = [](int r) {
        int m = 0;
        for (int l = 0; l < 8; ++l) m |= ((8 * v + l) % 3 == r) << l;
        return m;
      };
      constexpr int mb = rows_of(1), mc = rows_of(2);
      const __m256i idx = _mm256_setr_epi32((8 * v + 0) / 3, (8 * v + 1) / 3, (8 * v + 2) / 3, (8 * v + 3) / 3,
                                            (8 * v + 4) / 3, (8 * v + 5) / 3, (8 * v + 6) / 3, (8 * v + 7) / 3);
      const __m256 pa = _mm256_permutevar8x32_ps(a, idx), pb = _mm256_permutevar8x32_ps(b, idx),
                   pc = _mm256_permutevar8x32_ps(c, idx);
      _mm256_storeu_ps(d + 8 * v, _mm256_blend_ps(_mm256_blend_ps(pa, pb, mb), pc, mc));
    };
    one(std::integral_constant<int, 0>{});
    one(std::integral_constant<int, 1>{});
    one(std::integral_constant<int, 2>{});
  }
#endif
  static_assert(W > 4, "interleave3: AVX2 or AVX-512");
}

// The inverse of interleave3: a, b, c = floats 3 j, 3 j + 1, 3 j + 2 of s[0 .. 3 W) (NHWC
// pixels of three channels into the channels' rows). AVX-512: two two-source permutes per
// output vector; AVX2: each input vector permuted per output, then two blends.
template <class Arch>
inline void deinterleave3(const float* s, fbatch<Arch>& a, fbatch<Arch>& b, fbatch<Arch>& c) {
  constexpr int W = static_cast<int>(fbatch<Arch>::size);
  fbatch<Arch>* out[3] = {&a, &b, &c};
#ifdef __AVX512F__
  if constexpr (W == 16) {
    // Output r lane j takes element e = 3 j + r of the 48: first from the first two vectors
    // (e < 32; other lanes arbitrary), then the lanes with e >= 32 from the third.
    alignas(64) static constexpr auto idx = [] {
      std::array<std::int32_t, 96> t{};
      for (int r = 0; r < 3; ++r)
        for (int j = 0; j < 16; ++j) {
          const int e = 3 * j + r;
          t[32 * r + j] = e < 32 ? e : 0;
          t[32 * r + 16 + j] = e < 32 ? j : 16 + (e - 32);
        }
      return t;
    }();
    const __m512 v0 = _mm512_loadu_ps(s), v1 = _mm512_loadu_ps(s + 16), v2 = _mm512_loadu_ps(s + 32);
    for (int r = 0; r < 3; ++r) {
      const __m512 t = _mm512_permutex2var_ps(v0, _mm512_load_si512(idx.data() + 32 * r), v1);
      *out[r] = _mm512_permutex2var_ps(t, _mm512_load_si512(idx.data() + 32 * r + 16), v2);
    }
  }
#endif
#ifdef __AVX2__
  if constexpr (W == 8) {
    const __m256 v[3] = {_mm256_loadu_ps(s), _mm256_loadu_ps(s + 8), _mm256_loadu_ps(s + 16)};
    const auto one = [&](auto rc) {
      constexpr int r = decltype(rc)::value;
      // Lane j: element e = 3 j + r, in input vector e / 8 at lane e % 8; blend masks by vector.
      constexpr auto from = [](int vec) {
        int m = 0;
        for (int j = 0; j < 8; ++j) m |= ((3 * j + r) / 8 == vec) << j;
        return m;
      };
      const __m256i idx = _mm256_setr_epi32(r % 8, (3 + r) % 8, (6 + r) % 8, (9 + r) % 8, (12 + r) % 8, (15 + r) % 8,
                                            (18 + r) % 8, (21 + r) % 8);
      const __m256 p0 = _mm256_permutevar8x32_ps(v[0], idx), p1 = _mm256_permutevar8x32_ps(v[1], idx),
                   p2 = _mm256_permutevar8x32_ps(v[2], idx);
      *out[r] = _mm256_blend_ps(_mm256_blend_ps(p0, p1, from(1)), p2, from(2));
    };
    one(std::integral_constant<int, 0>{});
    one(std::integral_constant<int, 1>{});
    one(std::integral_constant<int, 2>{});
  }
#endif
  static_assert(W > 4, "deinterleave3: AVX2 or AVX-512");
}

// dst[j * ld_dst + i] = src[i * ld_src + j] for i < rows, j < cols: W x W blocks through
// registers, the edges one float at a time. Row-block outer, so a block row of src (W rows)
// stays in L1 while its columns are written out. Three rows into dst rows of three (an RGB
// image's planes into NHWC pixels, the stems' input): interleave3 per W columns - as edges
// of a W x W block they were all scalar moves; and back (an NHWC row split by channel, the
// small-C stems' input): deinterleave3.
template <class Arch>
void transpose_2d(const float* src, std::int64_t ld_src, float* dst, std::int64_t ld_dst, std::int64_t rows,
                  std::int64_t cols) {
  constexpr std::int64_t W = fbatch<Arch>::size;
  if constexpr (W > 4)
    if (rows == 3 && ld_dst == 3) {
      using B = fbatch<Arch>;
      std::int64_t j = 0;
      for (; j + W <= cols; j += W)
        interleave3<Arch>(B::load_unaligned(src + j), B::load_unaligned(src + ld_src + j),
                          B::load_unaligned(src + 2 * ld_src + j), dst + 3 * j);
      for (; j < cols; ++j)
        for (std::int64_t r = 0; r < 3; ++r) dst[3 * j + r] = src[r * ld_src + j];
      return;
    }
  if constexpr (W > 4)
    if (cols == 3 && ld_src == 3) {
      using B = fbatch<Arch>;
      std::int64_t i = 0;
      for (; i + W <= rows; i += W) {
        B a, b, c;
        deinterleave3<Arch>(src + 3 * i, a, b, c);
        a.store_unaligned(dst + i);
        b.store_unaligned(dst + ld_dst + i);
        c.store_unaligned(dst + 2 * ld_dst + i);
      }
      for (; i < rows; ++i)
        for (std::int64_t r = 0; r < 3; ++r) dst[r * ld_dst + i] = src[3 * i + r];
      return;
    }
  std::int64_t i = 0;
  for (; i + W <= rows; i += W) {
    std::int64_t j = 0;
    for (; j + W <= cols; j += W) transpose_block<Arch>(src + i * ld_src + j, ld_src, dst + j * ld_dst + i, ld_dst);
    for (; j < cols; ++j)
      for (std::int64_t u = i; u < i + W; ++u) dst[j * ld_dst + u] = src[u * ld_src + j];
  }
#if defined(__AVX512F__) && defined(__AVX2__)
  // AVX-512: a remainder of 8 or more rows as 8 x 8 blocks of AVX registers (56 rows: the last
  // 8 were all scalar moves).
  if constexpr (W == 16)
    if (i + 8 <= rows) {
      std::int64_t j = 0;
      for (; j + 8 <= cols; j += 8)
        transpose_block<xsimd::fma3<xsimd::avx2>>(src + i * ld_src + j, ld_src, dst + j * ld_dst + i, ld_dst);
      for (; j < cols; ++j)
        for (std::int64_t u = i; u < i + 8; ++u) dst[j * ld_dst + u] = src[u * ld_src + j];
      i += 8;
    }
#endif
  for (; i < rows; ++i)
    for (std::int64_t j = 0; j < cols; ++j) dst[j * ld_dst + i] = src[i * ld_src + j];
}

// e = the even-indexed floats of the 2W floats lo:hi (lo first), o = the odd ones: a two-source
// permute each (AVX-512), in-lane shuffles plus a 64-bit permute (AVX2), one shuffle (SSE2).
template <class Arch>
inline void even_odd(fbatch<Arch> lo, fbatch<Arch> hi, fbatch<Arch>& e, fbatch<Arch>& o) {
  constexpr std::int64_t W = fbatch<Arch>::size;
#ifdef __AVX512F__
  if constexpr (W == 16) {
    const __m512i ie = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    e = _mm512_permutex2var_ps(lo, ie, hi);
    o = _mm512_permutex2var_ps(lo, _mm512_add_epi32(ie, _mm512_set1_epi32(1)), hi);
  }
#endif
#ifdef __AVX2__
  if constexpr (W == 8) {
    e = _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(_mm256_shuffle_ps(lo, hi, 0x88)), 0xD8));
    o = _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(_mm256_shuffle_ps(lo, hi, 0xDD)), 0xD8));
  }
#endif
  if constexpr (W == 4) {
    e = _mm_shuffle_ps(lo, hi, 0x88);
    o = _mm_shuffle_ps(lo, hi, 0xDD);
  }
}

// Lanes D .. D + W - 1 of the 2W floats lo:hi (lo first), 0 < D < W: a row's window shifted by
// D columns, built from the two aligned vectors around it. One VALIGND (AVX-512), a 128-bit
// lane swap and one or two in-lane byte aligns (AVX2), two byte shifts and an OR (SSE2). For
// the taps of a sliding window over vectors just computed in registers: loading them back from
// a buffer at an offset of D floats straddles two recent vector stores, which the CPU cannot
// forward, and stalls until both reach the cache.
template <int D, class Arch>
inline fbatch<Arch> shift_concat(fbatch<Arch> lo, fbatch<Arch> hi) {
  constexpr int W = static_cast<int>(fbatch<Arch>::size);
  static_assert(D > 0 && D < W, "shift_concat: 0 < D < W");
#ifdef __AVX512F__
  if constexpr (W == 16)
    return _mm512_castsi512_ps(_mm512_alignr_epi32(_mm512_castps_si512(hi), _mm512_castps_si512(lo), D));
  else
#endif
#ifdef __AVX2__
      if constexpr (W == 8) {
    const __m256i l = _mm256_castps_si256(lo), h = _mm256_castps_si256(hi);
    const __m256i mid = _mm256_permute2x128_si256(l, h, 0x21);  // lo's upper half, hi's lower half
    if constexpr (D < 4)
      return _mm256_castsi256_ps(_mm256_alignr_epi8(mid, l, 4 * D));
    else if constexpr (D == 4)
      return _mm256_castsi256_ps(mid);
    else
      return _mm256_castsi256_ps(_mm256_alignr_epi8(h, mid, 4 * (D - 4)));
  } else
#endif
  {
    static_assert(W == 4, "shift_concat: SSE2 lanes");
    const __m128i l = _mm_castps_si128(lo), h = _mm_castps_si128(hi);
    return _mm_castsi128_ps(_mm_or_si128(_mm_srli_si128(l, 4 * D), _mm_slli_si128(h, 16 - 4 * D)));
  }
}

// ev[t] = src[2 t] for t < (n + 1) / 2 and od[t] = src[2 t + 1] for t < n / 2: a row split into
// its two column phases in one pass, two vectors in, two out, a masked last step (src[0 .. n)
// is all that is read). Inline: the stride-2 depthwise convolution and pooling call it for
// every row; as two calls per row of a one-phase copy (each reading the row, its tail one float
// at a time) the calls and the tails were most of the depthwise kernel's time.
template <class Arch>
inline void split_phases2(const float* src, std::int64_t n, float* ev, float* od) {
  using B = fbatch<Arch>;
  constexpr std::int64_t W = B::size;
  const std::int64_t ne = (n + 1) / 2, no = n / 2;
  std::int64_t t = 0;
  B e, o;
  for (; 2 * (t + W) <= n; t += W) {
    even_odd<Arch>(B::load_unaligned(src + 2 * t), B::load_unaligned(src + 2 * t + W), e, o);
    e.store_unaligned(ev + t);
    o.store_unaligned(od + t);
  }
  if constexpr (W > 4)
    if (t < ne) {  // less than 2 W floats left: masked loads and stores
      const std::int64_t a = n - 2 * t;
      even_odd<Arch>(load_partial<Arch>(src + 2 * t, std::min(a, W)),
                     a > W ? load_partial<Arch>(src + 2 * t + W, a - W) : B(0.f), e, o);
      store_partial<Arch>(ev + t, e, ne - t);
      if (no > t) store_partial<Arch>(od + t, o, no - t);
      return;
    }
  for (std::int64_t u = t; u < ne; ++u) ev[u] = src[2 * u];
  for (std::int64_t u = t; u < no; ++u) od[u] = src[2 * u + 1];
}

}  // namespace OPFUSE_SIMD_NS
}  // namespace opfuse::simd
