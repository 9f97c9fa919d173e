// simd/conv.hpp - declarations of the simd conv kernels (see simd/simd.hpp for the pattern).
#pragma once

#include "simd/simd.hpp"

namespace opfuse::simd {

// conv.cpp. Best first in simd/rows/conv.inc: depthwise, 1x1 as GEMM, general direct conv.
OPFUSE_SIMD_FUNCTOR_PREPARED(ConvDepthwise);  // groups == C == K, any R, S, stride, dilation, pads
OPFUSE_SIMD_FUNCTOR_PREPARED(Conv1x1);        // R = S = 1, stride 1, no padding, groups == 1
OPFUSE_SIMD_FUNCTOR_PREPARED(ConvSmallC);     // groups 1, <= 4 input channels, NCHW: no layout change
OPFUSE_SIMD_FUNCTOR_PREPARED(ConvDirect);     // anything else (any groups), NHWC register-blocked
// conv_pool.cpp: a pool post-op (which the three above decline) as the best simd conv2d kernel
// without it, into the workspace, then the simd maxpool2d kernel into y.
OPFUSE_SIMD_FUNCTOR_PREPARED(ConvPool);

// ISA-independent supports() predicates, in simd/shared/conv_supports.cpp.
inline constexpr std::size_t kConvMaxPostOps = 8;  // post-op chains longer than this are declined
bool conv_post_ops_supported(const Conv2dParams& p);
bool conv_depthwise_supports(const OpDesc& desc);
bool conv_1x1_supports(const OpDesc& desc);
bool conv_smallc_supports(const OpDesc& desc);
bool conv_direct_supports(const OpDesc& desc);

// conv2d + pool post-op as two registry kernels, in simd/shared/conv_pool_supports.cpp (the
// composition is ISA-independent; the per-ISA functor only caps the nested kernels' ISA).
bool conv_pool_supports(const OpDesc& desc);   // the chain ends with a pool step
TensorDesc conv_pool_mid(const OpDesc& desc);  // the conv output before the pool (N, K, P, Q)
std::size_t conv_pool_workspace(const OpDesc& desc);
Status conv_pool_prepare(const OpDesc& desc, const Context& ctx, Isa isa, const Tensor* const* constants,
                         std::shared_ptr<void>& state);
void conv_pool_execute(const KernelArgs& args);

}  // namespace opfuse::simd
