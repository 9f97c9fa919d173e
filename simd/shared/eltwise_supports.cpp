// simd/shared/eltwise_supports.cpp - ISA-independent supports() predicates of the simd kernels
// (compiled once, not per ISA).
#include "simd/simd.hpp"

namespace opfuse::simd {

bool unary_supports(const OpDesc& desc) {
  switch (desc.p<UnaryParams>().act.kind) {
    case ActKind::relu:
    case ActKind::clip:
    case ActKind::leaky_relu:
    case ActKind::hardswish:
    case ActKind::linear: return true;
    default: return false;  // transcendental activations arrive with the vector math (exp, tanh, erf)
  }
}

}  // namespace opfuse::simd
