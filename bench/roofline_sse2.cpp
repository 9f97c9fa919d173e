// bench/roofline_sse2.cpp - the peak probe's SSE2 loop: 4 floats, a multiply then an add (SSE2
// has no FMA), which is also what the naive stage's auto-vectorized loops can reach.
#include "roofline_fma.hpp"

#if defined(__SSE2__)
#include <immintrin.h>
#endif

namespace opfuse::bench {

#if defined(__SSE2__)
namespace {
struct Sse2 {
  using type = __m128;
  static constexpr int kLanes = 4;
  static __m128 set1(float x) { return _mm_set1_ps(x); }
  static __m128 madd(__m128 acc, __m128 a, __m128 b) { return _mm_add_ps(_mm_mul_ps(acc, a), b); }
  static float sum(__m128 x) {
    alignas(16) float v[4];
    _mm_store_ps(v, x);
    return v[0] + v[1] + v[2] + v[3];
  }
};
}  // namespace
FmaLoop fma_loop_sse2() { return make_fma_loop<Sse2, 14>(); }
#else
FmaLoop fma_loop_sse2() { return {}; }
#endif

}  // namespace opfuse::bench
