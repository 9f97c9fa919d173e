// fused/inverted_residual.hpp - declarations of the fused inverted_residual kernels (see fused/fused.hpp for the
// pattern): OPFUSE_SIMD_FUNCTOR(Name) / OPFUSE_SIMD_FUNCTOR_PREPARED(Name) inside namespace opfuse::fused,
// ISA-independent supports() predicates in fused/shared/.
#pragma once

#include <cstddef>
#include <cstdint>

#include "fused/fused.hpp"

namespace opfuse::fused {

// inverted_residual.cpp: rolling band of 3 expanded rows per thread (L2), depthwise + project per
// pixel tile (L1); e and d are never written to memory in full. Blocks with large weights run
// whole images instead (e and d of one image in L2, each weight read once per image).
OPFUSE_SIMD_FUNCTOR_PREPARED(InvertedResidual);

// ---- ISA-independent code, in fused/shared/inverted_residual_supports.cpp --------------------

// The block's geometry, read from a validated desc.
struct IrGeometry {
  std::size_t dw = 0, project = 0;  // input positions of w_dw and w_project (bn vectors follow each)
  std::int64_t N = 0, Cin = 0, H = 0, W = 0, Ce = 0, Cout = 0, P = 0, Q = 0, stride = 1;
  bool expand = true, residual = false, nhwc = false;
};
IrGeometry ir_geometry(const OpDesc& desc);

// Floats of one thread's band buffers for vector width `lanes`: 3 expanded rows of (W + 2)
// channels-last pixels (zero columns either side) with Ce padded to a multiple of `lanes`.
std::size_t ir_band_floats(const IrGeometry& g, std::int64_t lanes);

// Declines blocks whose per-thread band would not fit in any cache (W * Ce beyond 2^20 floats
// per expanded row); everything else valid (NCHW or NHWC, stride 1 or 2, with or without
// expansion and residual) is taken.
bool inverted_residual_supports(const OpDesc& desc);

// Whether the block runs in whole-image mode (inverted_residual.cpp): with an expansion whose
// weights exceed half of L2, and an image whose e and d fit in it.
bool ir_image_mode(const IrGeometry& g);

}  // namespace opfuse::fused
