// fused/conv.hpp - declarations of the fused conv kernels (see fused/fused.hpp for the pattern):
// OPFUSE_SIMD_FUNCTOR(Name) / OPFUSE_SIMD_FUNCTOR_PREPARED(Name) inside namespace opfuse::fused,
// ISA-independent supports() predicates in fused/shared/.
#pragma once

#include "fused/fused.hpp"

namespace opfuse::fused {}  // namespace opfuse::fused
