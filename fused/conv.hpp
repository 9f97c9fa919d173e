// fused/conv.hpp - declarations of the fused conv kernels (see fused/fused.hpp for the pattern).
#pragma once

#include <cstdint>

#include "fused/fused.hpp"

namespace opfuse::fused {

// conv.cpp. Best first in fused/rows/conv.inc.
// 1x1, stride 1, no padding, groups 1, as the simd GEMM with the post-op chain in its epilogue:
// NCHW per image y (K x PQ) = w (K x C) x (C x PQ), NHWC y (NPQ x K) = x (NPQ x C) w^T.
OPFUSE_SIMD_FUNCTOR_PREPARED(Conv1x1);
// Any other geometry and groups: the NHWC register-blocked direct convolution with the chain on
// the accumulator tile (NHWC output) or on the transpose to NCHW (NCHW output).
OPFUSE_SIMD_FUNCTOR_PREPARED(ConvDirect);
OPFUSE_SIMD_FUNCTOR_PREPARED(ConvDepthwise);  // groups == C == K
// conv_dw.cpp too: groups 1, at most 4 input channels (RGB stems), NCHW in and out.
OPFUSE_SIMD_FUNCTOR_PREPARED(ConvSmallC);

// ---- ISA-independent parts, in fused/shared/conv_supports.cpp --------------------------------

inline constexpr int kConvMaxSteps = 8;  // epilogue steps (kEpiMaxSteps)

// A binary operand's element strides along the output's logical (n, k, p, q); 0 where it
// broadcasts (NumPy rules: its dims align with the output's trailing dims).
struct OperandStrides {
  std::int64_t n, k, p, q;
};
OperandStrides conv_operand_strides(const TensorDesc& operand);

// The operand as (row, column) strides of a kernel's 2-D view of the output:
//   channel_rows  NCHW 1x1 GEMM and NCHW direct, per image: rows are output channels, columns
//                 the P*Q pixels
//   pixel_rows    NHWC 1x1 GEMM, all images: rows are the N*P*Q pixels, columns the channels
//   image_pixels  NHWC direct kernel, per image: rows are the P*Q pixels, columns the channels,
//                 any column stride (an NCHW operand is gathered)
// A per-image view offsets the operand by n * OperandStrides::n. False when the operand's
// broadcast cannot be expressed that way (e.g. one that varies along q but not p), or in the
// GEMM views when a column stride is not 0 or 1: the kernel declines.
enum class ConvView { channel_rows, pixel_rows, image_pixels };
struct GemmRowCol {
  std::int64_t rs, cs;
};
bool conv_operand_rowcol(const OperandStrides& os, std::int64_t N, std::int64_t K, std::int64_t P, std::int64_t Q,
                         ConvView view, GemmRowCol* out);

// Leading batchnorm steps of the chain (before any other kind): folded into the weights and bias.
int conv_folded_batchnorms(const Conv2dParams& p);

bool conv_1x1_supports(const OpDesc& desc);
bool conv_direct_supports(const OpDesc& desc);
bool conv_depthwise_supports(const OpDesc& desc);
bool conv_smallc_supports(const OpDesc& desc);

}  // namespace opfuse::fused
