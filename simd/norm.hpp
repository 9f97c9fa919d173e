// simd/norm.hpp - declarations of the simd row-reduction kernels: softmax, layernorm/rmsnorm,
// pooling, attention and the inverted residual block (see simd/simd.hpp for the pattern).
#pragma once

#include <array>
#include <cstdint>
#include <memory>

#include "simd/simd.hpp"

namespace opfuse::simd {

OPFUSE_SIMD_FUNCTOR(Softmax);                    // norm.cpp: any axis, scale, broadcast mask
OPFUSE_SIMD_FUNCTOR(Norm);                       // norm.cpp: layernorm and rmsnorm (+ residual, sum)
OPFUSE_SIMD_FUNCTOR_PREPARED(Pool2d);            // pool.cpp: maxpool2d, avgpool2d (per-thread row scratch)
OPFUSE_SIMD_FUNCTOR(GlobalAvgPool);              // pool.cpp
OPFUSE_SIMD_FUNCTOR_PREPARED(Attention);         // attention.cpp: per-thread score rows
OPFUSE_SIMD_FUNCTOR_PREPARED(InvertedResidual);  // inverted_residual.cpp: three registry convs

// ISA-independent code, in simd/shared/norm_supports.cpp (compiled once, without ISA flags).
bool norm_supports(const OpDesc& desc);       // normalized dims dense in logical order
bool attention_supports(const OpDesc& desc);  // q, k, v rows contiguous along D / Dv

// Element strides that read `operand` at the logical index of a tensor of shape `out`
// (NumPy broadcasting: trailing dims aligned, 0 where the operand repeats).
std::array<std::int64_t, kMaxRank> broadcast_strides(const TensorDesc& operand, const Shape& out);

// inverted_residual as a sequence of registry kernels. The composition (sub-descs, nested
// prepare, sub-workspaces) is ISA-independent and uses std containers, so it lives in the shared
// TU; the per-ISA functor only caps the nested kernels at its own ISA.
std::size_t inverted_residual_workspace(const OpDesc& desc);
Status inverted_residual_prepare(const OpDesc& desc, const Context& ctx, Isa isa, const Tensor* const* constants,
                                 std::shared_ptr<void>& state);
void inverted_residual_execute(const KernelArgs& args);

// ---- softmax's exp, for tests/test_vmath.cpp -------------------------------------------------
// y[i] = vmath::exp_nonpositive(x[i]) compiled for one ISA (call only where cpu_isa() allows).
// Its documented maximum error over x in [-104, 0], in ulp of the exact result for results
// >= FLT_MIN; smaller results: absolute error <= kExpNonpositiveMaxTinyAbs (AVX-512 rounds
// denormals correctly, AVX2 / SSE2 flush results below FLT_MIN to 0).
inline constexpr double kExpNonpositiveMaxUlp = 2.5;  // exhaustive: AVX-512/AVX2 1.95, SSE2 (no FMA) 2.12
inline constexpr double kExpNonpositiveMaxTinyAbs = 0x1p-126;
// exp2_nonpositive_eval: y[i] = vmath::exp2_nonpositive(x[i]) (flash attention's base-2 exp), on
// x in [-150, 0]; the same bounds.
namespace isa_avx512 {
void exp_nonpositive_eval(const float* x, float* y, std::int64_t n);
void exp2_nonpositive_eval(const float* x, float* y, std::int64_t n);
}  // namespace isa_avx512
namespace isa_avx2 {
void exp_nonpositive_eval(const float* x, float* y, std::int64_t n);
void exp2_nonpositive_eval(const float* x, float* y, std::int64_t n);
}  // namespace isa_avx2
namespace isa_sse2 {
void exp_nonpositive_eval(const float* x, float* y, std::int64_t n);
void exp2_nonpositive_eval(const float* x, float* y, std::int64_t n);
}  // namespace isa_sse2

}  // namespace opfuse::simd
