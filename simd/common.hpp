// simd/common.hpp - helpers for simd kernels: batches, threads, tails.
//
// Included only by simd/<family>.cpp, which CMake compiles once per ISA. Everything here lives
// in an inline namespace named after the ISA, so the AVX-512 and SSE2 copies of a helper are
// different symbols: the linker can never hand the SSE2 build an AVX-512 body (the one-
// definition-rule trap of compiling the same inline code with different -m flags).
#pragma once

#ifndef OPFUSE_SIMD_ISA
#error "simd/common.hpp is for simd/*.cpp, compiled once per ISA with OPFUSE_SIMD_ISA set"
#endif

// GCC 12's AVX-512 intrinsic headers raise false -Wmaybe-uninitialized warnings on min/max and
// shifts (GCC bug 105593); silenced for the simd translation units only.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

#include <omp.h>

#include <cstdint>
#include <cstdlib>
#include <type_traits>

#include <xsimd/xsimd.hpp>

#include "simd/simd.hpp"
#include "src/denormal.hpp"

#define OPFUSE_SIMD_CAT2(a, b) a##b
#define OPFUSE_SIMD_CAT(a, b) OPFUSE_SIMD_CAT2(a, b)
// This TU's ISA namespace: isa_avx512, isa_avx2 or isa_sse2.
#define OPFUSE_SIMD_NS OPFUSE_SIMD_CAT(isa_, OPFUSE_SIMD_ISA)

namespace opfuse::simd {
inline namespace OPFUSE_SIMD_NS {

template <class Arch>
using fbatch = xsimd::batch<float, Arch>;

// Threads for a kernel: the context's count, or 1 inside a caller's parallel region so that
// opfuse never oversubscribes the cores a caller's own threads already use.
inline int team_size(int requested) {
  if (omp_in_parallel()) return 1;
  return requested > 1 ? requested : 1;
}

// Runs fn(thread_index, begin, end) over [0, n) split into contiguous chunks, one per thread
// (at most `threads`, one inside a caller's parallel region). Chunks are rounded to `grain`
// elements so that threads do not share cache lines at the seams; the thread index selects
// per-thread scratch. Every thread of a team runs fn under the flush-to-zero policy and gets its
// own MXCSR back after (src/denormal.hpp); so does every hand-written `omp parallel` region.
template <class Fn>
void parallel_tid(std::int64_t n, int threads, std::int64_t grain, Fn&& fn) {
  const int t = team_size(threads);
  if (t <= 1 || n <= grain) {
    fn(0, std::int64_t{0}, n);
    return;
  }
#pragma omp parallel num_threads(t)
  {
    const ::opfuse::detail::DenormalGuard denormals;  // MXCSR is per thread (src/denormal.hpp)
    const std::int64_t nt = omp_get_num_threads(), id = omp_get_thread_num();
    std::int64_t chunk = (n + nt - 1) / nt;
    chunk = (chunk + grain - 1) / grain * grain;
    const std::int64_t b = id * chunk, e = b + chunk < n ? b + chunk : n;
    if (b < e) fn(static_cast<int>(id), b, e);
  }
}

// The same without the thread index: fn(begin, end).
template <class Fn>
void parallel_for(std::int64_t n, int threads, std::int64_t grain, Fn&& fn) {
  parallel_tid(n, threads, grain, [&](int, std::int64_t b, std::int64_t e) { fn(b, e); });
}

// Per-thread scratch floats, allocated once at prepare (64-byte aligned slices), kept in a
// kernel's prepared state so execute allocates nothing.
struct Scratch {
  float* data = nullptr;
  std::size_t per_thread = 0;  // floats, a multiple of 16
  int threads = 0;
  ~Scratch() { std::free(data); }
  float* of(int tid) const { return data + static_cast<std::size_t>(tid) * per_thread; }
};

// Loads W floats spaced `stride` apart (1: a plain load, 0: a broadcast, else a scalar gather).
template <class Arch>
fbatch<Arch> load_strided(const float* p, std::int64_t stride) {
  using B = fbatch<Arch>;
  if (stride == 1) return B::load_unaligned(p);
  if (stride == 0) return B(*p);
  alignas(64) float t[B::size];
  for (std::size_t l = 0; l < B::size; ++l) t[l] = p[static_cast<std::int64_t>(l) * stride];
  return B::load_aligned(t);
}

// Largest lane (NaN lanes are the caller's business: track them separately).
template <class Arch>
float hmax(fbatch<Arch> v) {
  alignas(64) float t[fbatch<Arch>::size];
  v.store_aligned(t);
  float m = t[0];
  for (std::size_t l = 1; l < fbatch<Arch>::size; ++l) m = t[l] > m ? t[l] : m;
  return m;
}

// Lane indices 0, 1, ..., W - 1 as floats: lane_iota() < n masks the first n lanes. A constant
// in memory, not stores to the stack read back as a vector.
template <class Arch>
inline fbatch<Arch> lane_iota() {
  alignas(64) static constexpr float kIota[16] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};
  return fbatch<Arch>::load_aligned(kIota);
}

// max(a, b) lane by lane (b where either is NaN: a > b ? a : b, what a select
// on a > b computes, in one instruction). AVX-512: the masked form, because GCC 12's
// plain _mm512_max_ps reads _mm512_undefined_ps() and warns at some inlining sites (PR 105593).
template <class Arch>
inline fbatch<Arch> vmax(fbatch<Arch> a, fbatch<Arch> b) {
  if constexpr (std::is_same_v<Arch, xsimd::avx512f>)
    return _mm512_mask_max_ps(b, 0xFFFF, a, b);
  else
    return xsimd::max(a, b);
}

// min(a, b) lane by lane, b where either is NaN (a < b ? a : b), as vmax.
template <class Arch>
inline fbatch<Arch> vmin(fbatch<Arch> a, fbatch<Arch> b) {
  if constexpr (std::is_same_v<Arch, xsimd::avx512f>)
    return _mm512_mask_min_ps(b, 0xFFFF, a, b);
  else
    return xsimd::min(a, b);
}

// select(x < lo, lo, select(x > hi, hi, x)): lo <= x <= hi, NaN kept. AVX2 and SSE: as min then
// max (MINPS / MAXPS return their second operand when either is NaN, and for equal operands:
// the same result for every x, signed zeros included), two instructions instead of four.
// AVX-512 keeps the selects: compares into mask registers and masked blends, where vmax's
// merge-masked form measured slower in the inverted residual's tiles.
template <class Arch>
inline fbatch<Arch> clamp_nan(fbatch<Arch> x, fbatch<Arch> lo, fbatch<Arch> hi) {
  if constexpr (std::is_same_v<Arch, xsimd::avx512f>)
    return xsimd::select(x < lo, lo, xsimd::select(x > hi, hi, x));
  else
    return vmax<Arch>(lo, vmin<Arch>(hi, x));
}

// A splat of v built where it is used, never hoisted out of the loops around it: the empty
// volatile asm makes v opaque at this point. For the epilogue constants of register tiles that
// take every vector register in their k loop (16 on AVX2): hoisted, GCC keeps them live across
// the loop and spills an accumulator instead, a store-to-load round trip in every iteration.
template <class Arch>
inline fbatch<Arch> local_splat(float v) {
  asm volatile("" : "+m"(v));  // in memory: no vector register holds it before this point
  return fbatch<Arch>(v);
}

// p moved up to the next 64-byte boundary: where a kernel's workspace (sized with 16 floats of
// slack) starts its aligned sections.
inline float* align64(float* p) { return p + (16 - reinterpret_cast<std::uintptr_t>(p) / sizeof(float) % 16) % 16; }

// Non-temporal store of one batch to a batch-aligned address: no read-for-ownership of the
// destination line and no eviction of useful data; for outputs too large to stay in cache.
template <class Arch>
inline void store_stream(float* p, fbatch<Arch> v) {
  if constexpr (std::is_same_v<Arch, xsimd::avx512f>)
    _mm512_stream_ps(p, v);
  else if constexpr (std::is_same_v<Arch, xsimd::fma3<xsimd::avx2>>)
    _mm256_stream_ps(p, v);
  else
    _mm_stream_ps(p, v);
}

// The first min(n, W) floats of p as a batch (n > 0; the other lanes 0), and the first
// min(n, W) lanes of v stored to p: a whole vector, or a row's last partial one without
// reading or writing past its end, so a loop over a row needs no tail of its own. Masked
// moves on AVX-512 and AVX2 loads (masked-off lanes do not fault); AVX2 stores and SSE2 (1 to
// 3 floats) with 128-bit, 64-bit and scalar moves - a stack copy read back as a vector stalled
// on store forwarding.
template <class Arch>
inline fbatch<Arch> load_partial(const float* p, std::int64_t n) {
  if (n >= static_cast<std::int64_t>(fbatch<Arch>::size)) return fbatch<Arch>::load_unaligned(p);
#ifdef __AVX512F__
  if constexpr (fbatch<Arch>::size == 16) return _mm512_maskz_loadu_ps(static_cast<__mmask16>((1u << n) - 1), p);
#endif
#ifdef __AVX2__
  if constexpr (fbatch<Arch>::size == 8)
    return _mm256_maskload_ps(
        p, _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(n)), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7)));
#endif
  if constexpr (fbatch<Arch>::size == 4) {  // 1 to 3 floats: scalar and 64-bit moves
    const __m128 lo = n >= 2 ? _mm_castpd_ps(_mm_load_sd(reinterpret_cast<const double*>(p))) : _mm_load_ss(p);
    return n == 3 ? _mm_movelh_ps(lo, _mm_load_ss(p + 2)) : lo;
  } else {
    alignas(64) float t[fbatch<Arch>::size] = {};
    for (std::int64_t l = 0; l < n; ++l) t[l] = p[l];
    return fbatch<Arch>::load_aligned(t);
  }
}
template <class Arch>
inline void store_partial(float* p, fbatch<Arch> v, std::int64_t n) {
  if (n >= static_cast<std::int64_t>(fbatch<Arch>::size)) return v.store_unaligned(p);
#ifdef __AVX512F__
  if constexpr (fbatch<Arch>::size == 16) return _mm512_mask_storeu_ps(p, static_cast<__mmask16>((1u << n) - 1), v);
#endif
  // 0 to 3 floats of a 128-bit vector: scalar and 64-bit moves.
  const auto store_upto3 = [](float* q, __m128 r, std::int64_t m) {
    if (m >= 2) {
      _mm_store_sd(reinterpret_cast<double*>(q), _mm_castps_pd(r));
      if (m == 3) _mm_store_ss(q + 2, _mm_movehl_ps(r, r));
    } else if (m == 1) {
      _mm_store_ss(q, r);
    }
  };
#ifdef __AVX2__
  // Not VMASKMOVPS: its store form is microcoded on AMD Zen (one per several cycles); a
  // stride-2 depthwise row's two masked phase stores took about a tenth of the kernel there.
  // A 128-bit half and at most two smaller moves instead.
  if constexpr (fbatch<Arch>::size == 8) {
    const __m256 r = v;
    const __m128 lo = _mm256_castps256_ps128(r);
    if (n >= 4) {
      _mm_storeu_ps(p, lo);
      store_upto3(p + 4, _mm256_extractf128_ps(r, 1), n - 4);
    } else {
      store_upto3(p, lo, n);
    }
    return;
  }
#endif
  if constexpr (fbatch<Arch>::size == 4) {
    store_upto3(p, v, n);
  } else {
    alignas(64) float t[fbatch<Arch>::size];
    v.store_aligned(t);
    for (std::int64_t l = 0; l < n; ++l) p[l] = t[l];
  }
}

// A read prefetch into L1 (L = 3) or L2 (L = 2). asm volatile, not __builtin_prefetch: GCC 12 at
// -O3 deleted a whole loop of those as free of side effects (seen in the assembly: the fused GEMM's
// macro_kernel kept only its C prefetches, and the residual loads of the 1x1 conv's epilogue
// missed the caches; the direct convolution's y prefetch vanished the same way).
template <int L>
inline void prefetch_line(const float* p) {
  if constexpr (L == 3)
    asm volatile("prefetcht0 %0" : : "m"(*p));
  else
    asm volatile("prefetcht1 %0" : : "m"(*p));
}

}  // namespace OPFUSE_SIMD_NS
}  // namespace opfuse::simd

// Explicit instantiation of a functor's operator() for this TU's ISA.
#define OPFUSE_SIMD_ARCH_avx512 ::opfuse::simd::avx512
#define OPFUSE_SIMD_ARCH_avx2 ::opfuse::simd::avx2
#define OPFUSE_SIMD_ARCH_sse2 ::opfuse::simd::sse2
#define OPFUSE_SIMD_ARCH OPFUSE_SIMD_CAT(OPFUSE_SIMD_ARCH_, OPFUSE_SIMD_ISA)
#define OPFUSE_SIMD_INSTANTIATE(F) \
  template void F::operator()<OPFUSE_SIMD_ARCH>(OPFUSE_SIMD_ARCH, const KernelArgs&) const
#define OPFUSE_SIMD_INSTANTIATE_PREPARED(F)                                                                           \
  OPFUSE_SIMD_INSTANTIATE(F);                                                                                         \
  template std::size_t F::workspace<OPFUSE_SIMD_ARCH>(OPFUSE_SIMD_ARCH, const OpDesc&);                               \
  template Status F::prepare<OPFUSE_SIMD_ARCH>(OPFUSE_SIMD_ARCH, const OpDesc&, const Context&, const Tensor* const*, \
                                               std::shared_ptr<void>&)
