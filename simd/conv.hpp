// simd/conv.hpp - declarations of the simd conv kernels (see simd/simd.hpp for the pattern).
#pragma once

#include "simd/simd.hpp"

namespace opfuse::simd {

// conv.cpp. Best first in simd/rows/conv.inc: depthwise, 1x1 as GEMM, general direct conv.
OPFUSE_SIMD_FUNCTOR_PREPARED(ConvDepthwise);  // groups == C == K, any R, S, stride, dilation, pads
OPFUSE_SIMD_FUNCTOR_PREPARED(Conv1x1);        // R = S = 1, stride 1, no padding, groups == 1
OPFUSE_SIMD_FUNCTOR_PREPARED(ConvDirect);     // anything else (any groups), NHWC register-blocked

// ISA-independent supports() predicates, in simd/shared/conv_supports.cpp.
inline constexpr std::size_t kConvMaxPostOps = 8;  // post-op chains longer than this are declined
bool conv_post_ops_supported(const Conv2dParams& p);
bool conv_depthwise_supports(const OpDesc& desc);
bool conv_1x1_supports(const OpDesc& desc);
bool conv_direct_supports(const OpDesc& desc);

}  // namespace opfuse::simd
