// simd/activation.hpp - activations on one xsimd batch, shared by every simd and fused kernel
// (unary ops, post-op passes, epilogues, chains). The formulas mirror naive/common.cpp; NaN
// propagates because every select keeps x when a comparison with NaN is false.
#pragma once

#include <cassert>

#include "simd/common.hpp"

namespace opfuse::simd {
inline namespace OPFUSE_SIMD_NS {

// act(x) for one batch; the formulas mirror naive/common.cpp operation for operation.
template <class Arch>
fbatch<Arch> activate(const Activation& a, fbatch<Arch> x) {
  using B = fbatch<Arch>;
  const B zero(0.f);
  switch (a.kind) {
    case ActKind::relu: return xsimd::select(x < zero, zero, x);
    case ActKind::clip: return xsimd::select(x < B(a.alpha), B(a.alpha), xsimd::select(x > B(a.beta), B(a.beta), x));
    case ActKind::leaky_relu: return xsimd::select(x < zero, B(a.alpha) * x, x);
    case ActKind::hardswish: {
      B r = x + B(3.f);
      r = xsimd::select(r < zero, zero, xsimd::select(r > B(6.f), B(6.f), r));
      return x * r / B(6.f);
    }
    case ActKind::linear: return B(a.alpha) * x + B(a.beta);
    default: assert(false && "unary_supports() lets only these through"); return x;
  }
}

template <class Arch>
inline float activate_scalar(const Activation& a, float v) {
  // The tail uses the same code on a one-lane view: broadcast, compute, take lane 0.
  return activate<Arch>(a, fbatch<Arch>(v)).get(0);
}

}  // namespace OPFUSE_SIMD_NS
}  // namespace opfuse::simd
