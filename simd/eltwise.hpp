// simd/eltwise.hpp - declarations of the simd eltwise kernels (see simd/simd.hpp for the pattern).
#pragma once

#include <array>
#include <cstdint>

#include "simd/simd.hpp"

namespace opfuse::simd {

OPFUSE_SIMD_FUNCTOR(Unary);               // eltwise.cpp: relu .. hardswish, flat loop
OPFUSE_SIMD_FUNCTOR(Binary);              // eltwise.cpp: add sub mul div, broadcasting
OPFUSE_SIMD_FUNCTOR_PREPARED(Batchnorm);  // eltwise.cpp: per-call a, b folding (workspace 2C)
OPFUSE_SIMD_FUNCTOR(EltwiseChain);        // eltwise.cpp: one vector pass per step

// ---- ISA-independent code, in simd/shared/eltwise_supports.cpp -------------------------------

// Is this activation vectorized by simd/activation.hpp? (All kinds are.) Post-op chains of
// other simd kernels ask before accepting a problem.
bool act_supported(ActKind kind) noexcept;

bool unary_supports(const OpDesc& desc);
bool binary_supports(const OpDesc& desc);  // plan_broadcast(...).vectorizable
bool chain_supports(const OpDesc& desc);   // every binary step's plan is vectorizable

// How a broadcasting elementwise op walks memory: the output's dims in memory order (outermost
// first), size-1 dims dropped, neighbours merged wherever all three tensors are contiguous across
// them. The innermost dim is the vector loop; an operand's stride there is 1 (load), 0 (splat) or
// anything else (then the plan is not vectorizable and the kernel declines).
//   same shape and layout           -> rank 1, strides 1/1/1: one flat loop
//   scalar operand                  -> rank 1, b stride 0
//   (1,C,1,1) over NCHW (N,C,H,W)   -> dims (N, C, H*W), b strides (0, 1, 0): a constant per plane
//   (1,C,1,1) over NHWC             -> dims (N*H*W, C), b strides (0, 1): a repeating row
struct BroadcastPlan {
  int rank = 1;
  std::array<std::int64_t, kMaxRank> dims{};
  std::array<std::int64_t, kMaxRank> y{}, a{}, b{};  // strides per plan dim
  bool vectorizable = false;
  std::int64_t inner() const { return dims[static_cast<std::size_t>(rank - 1)]; }
};
// y is the output (dense in its layout); a and b broadcast to y's shape (NumPy rules).
BroadcastPlan plan_broadcast(const TensorDesc& y, const TensorDesc& a, const TensorDesc& b);

// ---- vector math entry points for tests/test_vmath.cpp ------------------------------------
// y[i] = f(x[i]) with simd/vmath.hpp compiled for one ISA (call only where cpu_isa() allows).
enum class VmathFn : int { exp, tanh, erf, sigmoid, gelu_erf, gelu_tanh, silu };
inline constexpr int kVmathFnCount = 7;
// Documented maximum errors of vmath::exp, tanh, erf, sigmoid, gelu_erf in ulp of the exact result, for
// results >= FLT_MIN (smaller ones: absolute error <= kVmathMaxTinyAbs), measured exhaustively
// (see simd/vmath.hpp and reports/vmath_accuracy.md) and asserted by tests/test_vmath.cpp.
// Indexed by VmathFn; the other compositions (gelu_tanh, silu) are judged by the check's abs/rel
// tolerance.
// Indexed by VmathFn: exp, tanh, erf, sigmoid, gelu_erf.
inline constexpr double kVmathMaxUlp[5] = {2, 2, 2, 3, 9};
// gelu_erf's results below FLT_MIN (x < -13.15) are flushed to 0 on every ISA (vmath::gelu_erf):
// an absolute error below FLT_MIN = 2^-126.
inline constexpr double kVmathMaxTinyAbs[5] = {0x1p-149, 0x1p-149, 0x1p-149, 0x1p-149, 0x1p-126};

}  // namespace opfuse::simd

// In a per-ISA translation unit this ISA's namespace is inline (simd/common.hpp), and C++ wants
// the first declaration of an inline namespace to say so.
#ifdef OPFUSE_SIMD_ISA
#define OPFUSE_ELTWISE_CAT2(a, b) a##b
#define OPFUSE_ELTWISE_CAT(a, b) OPFUSE_ELTWISE_CAT2(a, b)
namespace opfuse::simd {
inline namespace OPFUSE_ELTWISE_CAT(isa_, OPFUSE_SIMD_ISA) {}
}  // namespace opfuse::simd
#undef OPFUSE_ELTWISE_CAT
#undef OPFUSE_ELTWISE_CAT2
#endif

namespace opfuse::simd::isa_avx512 {
void vmath_eval(VmathFn fn, const float* x, float* y, std::int64_t n);
}
namespace opfuse::simd::isa_avx2 {
void vmath_eval(VmathFn fn, const float* x, float* y, std::int64_t n);
}
namespace opfuse::simd::isa_sse2 {
void vmath_eval(VmathFn fn, const float* x, float* y, std::int64_t n);
}
