// fused/conv_pool.hpp - the fused conv2d + pool post-op kernel (conv + bn + relu + maxpool, the
// ResNet stem) - see fused/conv_pool.cpp. Declared apart from fused/conv.hpp (the epilogue
// kernels) so that each file has one owner.
#pragma once

#include <cstddef>
#include <cstdint>

#include "fused/fused.hpp"
#include "simd/conv_geom.hpp"

namespace opfuse::fused {

// Conv rows into a per-thread rolling buffer of pool-window rows, max-pooled into y while in
// cache: the conv output is never written.
OPFUSE_SIMD_FUNCTOR_PREPARED(ConvPool);

// ---- ISA-independent plan, in fused/shared/conv_pool_supports.cpp ----------------------------

inline constexpr int kConvPoolMaxSteps = 8;  // epilogue steps between the conv and the pool

// Accepts conv2d whose chain ends with a pool step, groups == 1, and whose steps before the
// pool are batchnorms and activations only (no binary operand: it would need the full
// pre-pool tensor, which this kernel never materializes).
bool conv_pool_supports(const OpDesc& desc);

// The geometry of one call and how its chain splits: leading batchnorms fold into the weights
// and bias; the rest (activations, later batchnorms as per-channel mean/mult/shift) run on the
// accumulators.
struct ConvPoolGeom : simd::ConvGeom {              // the conv: simd::conv_geom()
  std::int64_t kh, kw, psh, psw, ppt, ppl, PP, PQ;  // pool window, stride, top/left pads; y (N,K,PP,PQ)
  std::int64_t Hp, Wp;                              // the padded NHWC copy of x
  bool copy_x;                                      // x goes through the padded NHWC copy
  int nfold;                                        // leading batchnorms folded into w and bias
  int nsteps;                                       // epilogue steps: chain[nfold .. pool)
};
ConvPoolGeom conv_pool_geom(const OpDesc& desc);

// Folds and packs the constants: w (K, C, R, S) -> [K block][R][S][C][KB] scaled by the folded
// batchnorms, the folded bias (Kp), then mean/mult/shift (3 x Kp) per later batchnorm step.
// `in` holds the desc's inputs (x unused). Kp = K rounded up to KB; channels past K get zeros.
std::size_t conv_pool_params_floats(const ConvPoolGeom& g, std::int64_t KB);
void conv_pool_fold_pack(const OpDesc& desc, const ConvPoolGeom& g, std::int64_t KB, const Tensor* const* in,
                         float* out);

}  // namespace opfuse::fused
