// bench/roofline_avx512.cpp - the peak probe's AVX-512 loop: 16-float FMAs. Compiled with
// -mavx512f (CMakeLists.txt); called only when the CPU has AVX-512.
#include "roofline_fma.hpp"

#if defined(__AVX512F__)
#include <immintrin.h>
#endif

namespace opfuse::bench {

#if defined(__AVX512F__)
namespace {
struct Avx512 {
  using type = __m512;
  static constexpr int kLanes = 16;
  static __m512 set1(float x) { return _mm512_set1_ps(x); }
  static __m512 madd(__m512 acc, __m512 a, __m512 b) { return _mm512_fmadd_ps(acc, a, b); }
  static float sum(__m512 x) {
    alignas(64) float v[16];
    _mm512_store_ps(v, x);
    float s = 0.f;
    for (float f : v) s += f;
    return s;
  }
};
}  // namespace
FmaLoop fma_loop_avx512() { return make_fma_loop<Avx512, 16>(); }
#else
FmaLoop fma_loop_avx512() { return {}; }
#endif

}  // namespace opfuse::bench
