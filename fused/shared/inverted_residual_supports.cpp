// fused/shared/inverted_residual_supports.cpp - ISA-independent part of the fused inverted_residual
// kernel: the block geometry, the band size and the supports() predicate. Compiled once.
#include "fused/inverted_residual.hpp"
#include "simd/gemm.hpp"

namespace opfuse::fused {

IrGeometry ir_geometry(const OpDesc& desc) {
  const auto& p = desc.p<InvertedResidualParams>();
  IrGeometry g;
  g.expand = p.has_expand;
  g.residual = p.residual;
  g.stride = p.stride;
  g.dw = p.has_expand ? 6 : 1;
  g.project = g.dw + 5;
  const TensorDesc& x = desc.inputs[0];
  g.nhwc = x.layout == Layout::nhwc;
  g.N = x.shape[0], g.Cin = x.shape[1], g.H = x.shape[2], g.W = x.shape[3];
  g.Ce = desc.inputs[g.dw].shape[0];
  g.Cout = desc.inputs[g.project].shape[0];
  g.P = (g.H - 1) / g.stride + 1;
  g.Q = (g.W - 1) / g.stride + 1;
  return g;
}

std::size_t ir_band_floats(const IrGeometry& g, std::int64_t lanes) {
  const std::int64_t cep = (g.Ce + lanes - 1) / lanes * lanes;
  return static_cast<std::size_t>(3 * (g.W + 2) * cep);
}

bool ir_image_mode(const IrGeometry& g) {
  // Row by row, the weights are read again for every expanded row and every pixel tile: from
  // L2 that is cheap, but weights larger than half of it (the band and the tiles need the rest)
  // would stream from L3 over and over (MobileNetV2's 7 x 7 blocks, 1.2 - 1.9 MB: 14 passes
  // per image). The whole image's e and d take their place in L2, where they fit.
  const auto l2 = static_cast<std::int64_t>(simd::cache_sizes().l2);
  const std::int64_t weight_bytes = 4 * (g.Cin * g.Ce + g.Ce * g.Cout);
  const std::int64_t image_bytes = 4 * ((g.H + 2) * (g.W + 2) + g.P * g.Q) * (g.Ce + 16);
  return g.expand && 2 * weight_bytes > l2 && image_bytes <= l2;
}

bool inverted_residual_supports(const OpDesc& desc) {
  const IrGeometry g = ir_geometry(desc);
  if (g.stride != 1 && g.stride != 2) return false;
  return (g.W + 2) * (g.Ce + 16) <= (std::int64_t{1} << 20);
}

}  // namespace opfuse::fused
