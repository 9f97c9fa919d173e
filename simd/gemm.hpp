// simd/gemm.hpp - declarations of the simd gemm kernels (see simd/simd.hpp for the pattern).
#pragma once

#include "simd/simd.hpp"

namespace opfuse::simd {}  // namespace opfuse::simd
