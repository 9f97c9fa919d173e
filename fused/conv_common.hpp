// fused/conv_common.hpp - the pieces the fused conv kernels share (internal header of
// fused/conv.cpp and fused/conv_dw.cpp, compiled per ISA): aligned buffers, workspace carving,
// the batchnorm folding and the chain epilogue built from a conv2d desc.
//
// The depthwise kernel lives in its own translation unit: in fused/conv.cpp it changed GCC's
// cloning of the 1x1 GEMM's epilogue (ChainEpilogue::apply_tile lost its constant-propagated
// clones once the unit grew), and the fused 1x1 256->64 @56 +bn+add+relu measured slower.
#pragma once

#ifndef OPFUSE_SIMD_ISA
#error "fused/conv_common.hpp is for the per-ISA fused/*.cpp"
#endif

#include <array>
#include <cassert>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <new>
#include <vector>

#include "fused/conv.hpp"
#include "fused/gemm_epilogue.hpp"
#include "simd/common.hpp"
#include "simd/conv_kernel.hpp"
#include "simd/gemm_kernel.hpp"

namespace opfuse::fused {
inline namespace OPFUSE_SIMD_NS {

using simd::gemm_round_up;

namespace {

using i64 = std::int64_t;

struct Free {
  void operator()(float* p) const { std::free(p); }
};
using Floats = std::unique_ptr<float[], Free>;
Floats alloc_floats(std::size_t n) {
  Floats f(static_cast<float*>(std::aligned_alloc(64, (n * sizeof(float) + 63) / 64 * 64)));
  if (!f) throw std::bad_alloc();
  return f;
}

using simd::Carver;  // workspace sections, 64-byte aligned (simd/conv_kernel.hpp)

// The convolution's geometry: simd's (simd/conv_geom.hpp), one definition for both stages.
using simd::conv_geom;
using simd::ConvGeom;

// Are the weights, the bias and the folded batchnorms' operands all bound at prepare?
bool fold_bound(const OpDesc& d, const Tensor* const* constants) {
  if (!constants || !constants[1]) return false;
  const auto& p = d.p<Conv2dParams>();
  if (p.has_bias && !constants[2]) return false;
  const OperandIndex idx = operand_index(p);
  for (int s = 0; s < conv_folded_batchnorms(p); ++s)
    for (std::size_t o = 0; o < 4; ++o)
      if (!constants[idx[static_cast<std::size_t>(s)] + o]) return false;
  return true;
}

// The leading batchnorms as a per-output-channel scale and bias: conv(w) * sc[k] + bi[k] is
// the conv with its bias followed by them (consecutive batchnorms compose). The scale is
// applied where the weights are packed anyway (sgemm's a_scale, the direct packing below), so
// folding costs no pass over the weights. `in` are the desc's inputs (x unused).
void fold_scales(const OpDesc& d, i64 K, const Tensor* const* in, float* sc, float* bi) {
  const auto& p = d.p<Conv2dParams>();
  const OperandIndex idx = operand_index(p);
  const int nfold = conv_folded_batchnorms(p);
  const float* bias = p.has_bias ? in[2]->data() : nullptr;
  for (i64 k = 0; k < K; ++k) {
    float s = 1.f, b = bias ? bias[k] : 0.f;
    for (int f = 0; f < nfold; ++f) {
      const Tensor* const* o = in + idx[static_cast<std::size_t>(f)];
      const float m =
          o[0]->data()[k] * (1.f / std::sqrt(o[3]->data()[k] + p.post_ops[static_cast<std::size_t>(f)].epsilon));
      b = (b - o[2]->data()[k]) * m + o[1]->data()[k];
      s *= m;
    }
    sc[k] = s;
    bi[k] = b;
  }
}

// The chain after the folded batchnorms as an epilogue in the kernel's 2-D `view` of the output
// (see ConvView): batchnorm vectors run along the channel axis, rows or columns; per-image views
// offset binary operands per image (offset_images). Multipliers of unbound batchnorms are
// computed into `ws` (K floats per step) unless `mults` has them from prepare.
ChainEpilogue make_epilogue(const OpDesc& d, const ConvGeom& g, const Tensor* const* in,
                            const std::vector<Floats>* mults, float* ws, ConvView view) {
  const bool channel_rows = view == ConvView::channel_rows;
  const auto& p = d.p<Conv2dParams>();
  const OperandIndex idx = operand_index(p);
  ChainEpilogue epi;
  for (std::size_t s = static_cast<std::size_t>(conv_folded_batchnorms(p)); s < p.post_ops.size(); ++s) {
    const PostOp& op = p.post_ops[s];
    const Tensor* const* o = in + idx[s];
    EpiStep& e = epi.add(op.kind);
    if (op.kind == PostOp::Kind::batchnorm) {
      const float* mult = mults && s < mults->size() ? (*mults)[s].get() : nullptr;
      if (!mult) {
        bn_mult(o[0]->data(), o[3]->data(), op.epsilon, g.K, ws);
        mult = ws;
        ws += gemm_round_up(g.K, 16);
      }
      e.p0 = o[2]->data();
      e.p1 = mult;
      e.p2 = o[1]->data();
      e.rs = channel_rows ? 1 : 0;
      e.cs = channel_rows ? 0 : 1;
    } else if (op.kind == PostOp::Kind::binary) {
      GemmRowCol rc{};
      [[maybe_unused]] const bool ok =
          conv_operand_rowcol(conv_operand_strides(d.inputs[idx[s]]), g.N, g.K, g.P, g.Q, view, &rc);
      assert(ok);  // supports() checked it
      e.binary = op.binary;
      e.p0 = o[0]->data();
      e.rs = rc.rs;
      e.cs = rc.cs;
    } else {
      e.act = op.act;
    }
  }
  return epi;
}

// Each binary step's operand stride between images (kernels that index pixels within an image
// offset the operands per image with it); 0 for the other steps.
void epilogue_image_strides(const OpDesc& d, const ChainEpilogue& epi, i64* image_stride) {
  const auto& p = d.p<Conv2dParams>();
  const OperandIndex idx = operand_index(p);
  const std::size_t f = static_cast<std::size_t>(conv_folded_batchnorms(p));
  for (int s = 0; s < epi.n; ++s)
    if (epi.steps[s].kind == PostOp::Kind::binary)
      image_stride[s] = conv_operand_strides(d.inputs[idx[f + static_cast<std::size_t>(s)]]).n;
}

// Floats of workspace for the epilogue's batchnorm multipliers.
i64 epilogue_ws(const Conv2dParams& p, i64 K) {
  i64 f = 0;
  for (std::size_t s = static_cast<std::size_t>(conv_folded_batchnorms(p)); s < p.post_ops.size(); ++s)
    if (p.post_ops[s].kind == PostOp::Kind::batchnorm) f += gemm_round_up(K, 16);
  return f;
}

// Multipliers of the epilogue's batchnorms whose scale and var are bound (others stay null).
std::vector<Floats> bound_mults(const OpDesc& d, const Tensor* const* constants) {
  const auto& p = d.p<Conv2dParams>();
  std::vector<Floats> r(p.post_ops.size());
  if (!constants) return r;
  const OperandIndex idx = operand_index(p);
  const i64 K = d.inputs[1].shape[0];
  for (std::size_t s = static_cast<std::size_t>(conv_folded_batchnorms(p)); s < p.post_ops.size(); ++s) {
    if (p.post_ops[s].kind != PostOp::Kind::batchnorm || !constants[idx[s]] || !constants[idx[s] + 3]) continue;
    r[s] = alloc_floats(static_cast<std::size_t>(K));
    bn_mult(constants[idx[s]]->data(), constants[idx[s] + 3]->data(), p.post_ops[s].epsilon, K, r[s].get());
  }
  return r;
}

}  // namespace
}  // namespace OPFUSE_SIMD_NS
}  // namespace opfuse::fused
