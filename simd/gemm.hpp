// simd/gemm.hpp - declarations of the simd gemm kernels (see simd/simd.hpp for the pattern).
#pragma once

#include <cstddef>

#include "simd/simd.hpp"

namespace opfuse::simd {

OPFUSE_SIMD_FUNCTOR_PREPARED(Gemm);  // gemm.cpp: packed BLIS loops, post-ops as separate passes

// ISA-independent supports() predicate, in simd/shared/gemm_supports.cpp.
bool gemm_supports(const OpDesc& desc);

// Data cache sizes in bytes of one core (L1d, L2) and of the last level (L3), read once from
// sysconf / sysfs, with defaults where the system does not say (simd/shared/gemm_supports.cpp).
// The GEMM cache blocking is derived from them.
struct CacheSizes {
  std::size_t l1 = 32 * 1024;
  std::size_t l2 = 1024 * 1024;
  std::size_t l3 = 32 * 1024 * 1024;
};
const CacheSizes& cache_sizes() noexcept;

}  // namespace opfuse::simd
