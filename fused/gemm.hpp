// fused/gemm.hpp - declarations of the fused gemm kernels (see fused/fused.hpp for the pattern).
#pragma once

#include "fused/fused.hpp"

namespace opfuse::fused {

// gemm.cpp: the simd stage's packed BLIS loops and micro-kernels with the bias and the whole
// post-op chain applied to the accumulators of each tile before its only store.
OPFUSE_SIMD_FUNCTOR_PREPARED(Gemm);

// ISA-independent supports() predicate, in fused/shared/gemm_supports.cpp: every GEMM whose
// chain has at most 8 steps of the kinds batchnorm, binary and activation (any other kind,
// such as conv2d's pool, is declined and served by the simd stage).
bool gemm_supports(const OpDesc& desc);
// The post-op kinds the GEMM epilogue runs (batchnorm, binary, a vectorized activation).
bool epilogue_post_op_supported(const PostOp& op);

}  // namespace opfuse::fused
