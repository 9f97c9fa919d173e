// simd/eltwise.hpp - declarations of the simd eltwise kernels (see simd/simd.hpp for the pattern).
#pragma once

#include "simd/simd.hpp"

namespace opfuse::simd {

OPFUSE_SIMD_FUNCTOR(Unary);  // eltwise.cpp: relu .. hardswish

// ISA-independent supports() predicates, in simd/shared/eltwise_supports.cpp.
bool unary_supports(const OpDesc& desc);

}  // namespace opfuse::simd
