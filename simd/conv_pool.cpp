// simd/conv_pool.cpp - conv2d with a pool post-op (conv + bn + relu + maxpool, the ResNet
// stem) as a sequence of two simd kernels.
//
// naive: the seven-loop conv into the workspace, the chain as passes over it, then the window
//        loop of naive maxpool2d from it into y (naive/conv.cpp).
// simd:  the same two steps, each handed to the registry: the best simd conv2d kernel for the
//        desc without its pool step (bn/relu ride along as its post-op chain) writes the full
//        conv output into the workspace, then the simd maxpool2d kernel pools it into y. The
//        composition is ISA-independent and lives in simd/shared/conv_pool_supports.cpp; this
//        functor only names the ISA cap of the nested kernels.
// fused: fused/conv_pool.cpp never writes the conv output: conv rows go into a per-thread
//        rolling buffer of pool-window rows that is pooled into y while it is still in cache.

#include "simd/common.hpp"

namespace opfuse::simd {

template <class Arch>
std::size_t ConvPool::workspace(Arch, const OpDesc& desc) {
  return conv_pool_workspace(desc);  // the conv output (N, K, P, Q)
}

template <class Arch>
Status ConvPool::prepare(Arch, const OpDesc& desc, const Context& ctx, const Tensor* const* constants,
                         std::shared_ptr<void>& state) {
  return conv_pool_prepare(desc, ctx, isa_of<Arch>(), constants, state);
}

template <class Arch>
void ConvPool::operator()(Arch, const KernelArgs& args) const {
  conv_pool_execute(args);
}

OPFUSE_SIMD_INSTANTIATE_PREPARED(ConvPool);

}  // namespace opfuse::simd
