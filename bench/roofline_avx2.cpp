// bench/roofline_avx2.cpp - the peak probe's AVX2 loop: 8-float FMAs. Compiled with -mavx2
// -mfma (CMakeLists.txt); called only when the CPU has both.
#include "roofline_fma.hpp"

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#endif

namespace opfuse::bench {

#if defined(__AVX2__) && defined(__FMA__)
namespace {
struct Avx2 {
  using type = __m256;
  static constexpr int kLanes = 8;
  static __m256 set1(float x) { return _mm256_set1_ps(x); }
  static __m256 madd(__m256 acc, __m256 a, __m256 b) { return _mm256_fmadd_ps(acc, a, b); }
  static float sum(__m256 x) {
    alignas(32) float v[8];
    _mm256_store_ps(v, x);
    float s = 0.f;
    for (float f : v) s += f;
    return s;
  }
};
}  // namespace
FmaLoop fma_loop_avx2() { return make_fma_loop<Avx2, 12>(); }
#else
FmaLoop fma_loop_avx2() { return {}; }
#endif

}  // namespace opfuse::bench
