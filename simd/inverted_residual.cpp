// simd/inverted_residual.cpp - the MobileNetV2 inverted residual block as a sequence of simd
// kernels.
//
// naive: naive::conv2d for each convolution, batchnorm and ReLU6 as separate full passes, e and
//        d materialized in the workspace (naive/inverted_residual.cpp).
// simd:  the same three steps, each one registry conv2d with its batchnorm / ReLU6 / residual
//        add as a post-op chain: expand 1x1 {bn1, relu6}, depthwise 3x3 stride s pad 1
//        {bn2, relu6}, project 1x1 {bn3 [, add x]}. Each step is the best simd conv2d kernel for
//        its shape (capped at this row's ISA; naive where none accepts), prepared once at prepare
//        with the block's bound weights forwarded as its constants. e and d still go through
//        memory (the workspace). The composition itself is ISA-independent and lives in
//        simd/shared/norm_supports.cpp; this functor only names the ISA cap.
// fused: never materializes e or d - expand a strip of rows, depthwise it while hot in L1,
//        project each pixel's Ce-vector straight into y with the residual added before the store.

#include "simd/common.hpp"

namespace opfuse::simd {

template <class Arch>
std::size_t InvertedResidual::workspace(Arch, const OpDesc& desc) {
  return inverted_residual_workspace(desc);  // e (N, Ce, H, W) and d (N, Ce, P, Q)
}

template <class Arch>
Status InvertedResidual::prepare(Arch, const OpDesc& desc, const Context& ctx, const Tensor* const* constants,
                                 std::shared_ptr<void>& state) {
  return inverted_residual_prepare(desc, ctx, isa_of<Arch>(), constants, state);
}

template <class Arch>
void InvertedResidual::operator()(Arch, const KernelArgs& args) const {
  inverted_residual_execute(args);
}

OPFUSE_SIMD_INSTANTIATE_PREPARED(InvertedResidual);

}  // namespace opfuse::simd
