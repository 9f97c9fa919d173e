// fused/fused.hpp - the fused stage's kernels: functors templated on the xsimd architecture,
// declared and instantiated exactly like the simd stage's (see simd/simd.hpp), in namespace
// opfuse::fused. Each fused/<family>.cpp is compiled once per ISA into the same object library
// as simd/<family>.cpp, so a fused kernel reuses the simd stage's building blocks (the packed
// GEMM micro-kernels, vector exp/erf/tanh, the thread helpers) and differs only in what it keeps
// in registers: the post-op chain runs on the accumulators before the store instead of as
// separate passes over memory.
//
// Registry rows: fused/rows/<family>.inc, included in src/registry.cpp, written with
// OPFUSE_FUSED_ROWS / OPFUSE_FUSED_ROWS_PREPARED (names `<op>__fused_<isa>[_tile]`).
#pragma once

#include "simd/simd.hpp"

namespace opfuse::fused {

using simd::avx2;
using simd::avx512;
using simd::sse2;

}  // namespace opfuse::fused

#include "fused/attention.hpp"
#include "fused/conv.hpp"
#include "fused/eltwise.hpp"
#include "fused/gemm.hpp"
#include "fused/inverted_residual.hpp"
#include "fused/norm.hpp"
#include "fused/conv_pool.hpp"
