// bench/roofline_fma.hpp - the multiply-add loop the peak probe runs, one instantiation per ISA.
//
// Each ISA file (roofline_<isa>.cpp, compiled with only that ISA's flags) supplies a vector
// type V with set1 / madd / sum and instantiates fma_chains for it. kChains independent
// accumulators hide the multiply-add latency (4-6 cycles on current cores, 2 pipes: 8-12
// chains in flight are enough; more would spill registers). The values converge to 1
// (acc * a + b with a = 1 - b), so no chain ever reaches a denormal, an Inf or a NaN.
#pragma once

#include <cstdint>

namespace opfuse::bench {

// One probe loop: runs `iters` steps and returns a value that depends on every chain.
struct FmaLoop {
  float (*run)(std::int64_t iters, float a, float b) = nullptr;  // nullptr: not built for this target
  double flops_per_iter = 0;                                     // 2 per lane per chain
};

FmaLoop fma_loop_scalar();
FmaLoop fma_loop_sse2();
FmaLoop fma_loop_avx2();
FmaLoop fma_loop_avx512();

template <class V, int kChains>
float fma_chains(std::int64_t iters, float a, float b) {
  typename V::type acc[kChains];
  for (int c = 0; c < kChains; ++c) acc[c] = V::set1(1.0f + 0.001f * static_cast<float>(c));
  const typename V::type va = V::set1(a), vb = V::set1(b);
  for (std::int64_t i = 0; i < iters; ++i) {
#pragma GCC unroll 32
    for (int c = 0; c < kChains; ++c) acc[c] = V::madd(acc[c], va, vb);
  }
  float s = 0.f;
  for (int c = 0; c < kChains; ++c) s += V::sum(acc[c]);
  return s;
}

template <class V, int kChains>
FmaLoop make_fma_loop() {
  return {fma_chains<V, kChains>, 2.0 * V::kLanes * kChains};
}

}  // namespace opfuse::bench
