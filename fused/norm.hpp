// fused/norm.hpp - declarations of the fused norm kernels (see fused/fused.hpp for the pattern):
// softmax with scale and mask applied on the one read of x, and layernorm / rmsnorm with the
// residual add, the statistics and the optional sum output in the same pass over a row.
#pragma once

#include "fused/fused.hpp"

namespace opfuse::fused {

OPFUSE_SIMD_FUNCTOR(Softmax);  // norm.cpp: any axis, scale, broadcast mask
OPFUSE_SIMD_FUNCTOR(Norm);     // norm.cpp: layernorm and rmsnorm, + residual and sum (simd::norm_supports)

}  // namespace opfuse::fused
