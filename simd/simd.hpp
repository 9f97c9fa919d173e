// simd/simd.hpp - the simd stage's kernels as functors templated on the xsimd architecture.
//
// The xsimd way (CONVENTIONS rule 8): each kernel is a functor whose operator() is templated on
// `Arch`, defined out of class in its family's file (simd/<family>.cpp), declared `extern
// template` here for every ISA, and explicitly instantiated once per ISA: CMake compiles every
// simd/*.cpp three times, into object libraries built with only that ISA's flags
// (OPFUSE_SIMD_ISA = avx512 | avx2 | sse2). So the code is written once and one binary carries
// an AVX-512, an AVX2+FMA and an SSE2 version of every kernel.
//
// Choosing at run time: xsimd::dispatch over arch_list<avx512bw, fma3<avx2>, sse2> picks the
// CPU's ISA once (cpu_isa() in src/isa.cpp, capped by the OS-support check xsimd 8 lacks). Each
// ISA's instantiation is its own registry row (`relu__simd_avx512`, `relu__simd_avx2`,
// `relu__simd_sse2`), best first, and the registry skips rows above effective_isa(ctx) =
// min(that ISA, OPFUSE_ISA, Context::max_isa) - so every ISA's kernel is visible in
// `opfuse ops` and in benchmark names, and checkable on one machine in one process.
#pragma once

#include <cstddef>
#include <memory>
#include <type_traits>

#include <xsimd/xsimd.hpp>

#include "opfuse/registry.hpp"

namespace opfuse::simd {

using avx512 = xsimd::avx512f;
using avx2 = xsimd::fma3<xsimd::avx2>;
using sse2 = xsimd::sse2;

// The Isa of an architecture tag (nested kernels' ISA cap, tile tables).
template <class Arch>
constexpr Isa isa_of() {
  if constexpr (std::is_same_v<Arch, avx512>)
    return Isa::avx512;
  else if constexpr (std::is_same_v<Arch, avx2>)
    return Isa::avx2;
  else
    return Isa::sse2;
}

// Declares a kernel functor and its three explicit instantiations.
#define OPFUSE_SIMD_FUNCTOR(F)                                                 \
  struct F {                                                                   \
    template <class Arch>                                                      \
    void operator()(Arch, const KernelArgs& args) const;                       \
  };                                                                           \
  extern template void F::operator()<avx512>(avx512, const KernelArgs&) const; \
  extern template void F::operator()<avx2>(avx2, const KernelArgs&) const;     \
  extern template void F::operator()<sse2>(sse2, const KernelArgs&) const

// A functor that also has a workspace size and a prepare step (packing, BN folding).
#define OPFUSE_SIMD_FUNCTOR_PREPARED(F)                                                                  \
  struct F {                                                                                             \
    template <class Arch>                                                                                \
    void operator()(Arch, const KernelArgs& args) const;                                                 \
    template <class Arch>                                                                                \
    static std::size_t workspace(Arch, const OpDesc& desc);                                              \
    template <class Arch>                                                                                \
    static Status prepare(Arch, const OpDesc& desc, const Context& ctx, const Tensor* const* constants,  \
                          std::shared_ptr<void>& state);                                                 \
  };                                                                                                     \
  extern template void F::operator()<avx512>(avx512, const KernelArgs&) const;                           \
  extern template void F::operator()<avx2>(avx2, const KernelArgs&) const;                               \
  extern template void F::operator()<sse2>(sse2, const KernelArgs&) const;                               \
  extern template std::size_t F::workspace<avx512>(avx512, const OpDesc&);                               \
  extern template std::size_t F::workspace<avx2>(avx2, const OpDesc&);                                   \
  extern template std::size_t F::workspace<sse2>(sse2, const OpDesc&);                                   \
  extern template Status F::prepare<avx512>(avx512, const OpDesc&, const Context&, const Tensor* const*, \
                                            std::shared_ptr<void>&);                                     \
  extern template Status F::prepare<avx2>(avx2, const OpDesc&, const Context&, const Tensor* const*,     \
                                          std::shared_ptr<void>&);                                       \
  extern template Status F::prepare<sse2>(sse2, const OpDesc&, const Context&, const Tensor* const*,     \
                                          std::shared_ptr<void>&)

// ---- registry adapters ----------------------------------------------------------------------
template <class F, class Arch>
void run(const KernelArgs& args) {
  F{}(Arch{}, args);
}
template <class F, class Arch>
std::size_t workspace_of(const OpDesc& desc) {
  return F::workspace(Arch{}, desc);
}
template <class F, class Arch>
Status prepare_of(const OpDesc& desc, const Context& ctx, const Tensor* const* constants,
                  std::shared_ptr<void>& state) {
  return F::prepare(Arch{}, desc, ctx, constants, state);
}

}  // namespace opfuse::simd

#include "simd/conv.hpp"
#include "simd/eltwise.hpp"
#include "simd/gemm.hpp"
#include "simd/norm.hpp"
