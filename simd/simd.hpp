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

// ---- which ISAs this build compiled -------------------------------------------------------------
// CMake's OPFUSE_SIMD_ISAS (all three by default) defines OPFUSE_BUILT_<isa> to 1 or 0 for every
// target. A sanitizer or fuzzing build compiles one ISA only, since three ASan copies of every
// kernel family cost most of its build time: the rows of the others drop out of the registry
// (src/registry.cpp filters the table at compile time), and the adapters below compile to
// nothing for them, so no reference to an instantiation that was not built remains.
#ifndef OPFUSE_BUILT_avx512
#define OPFUSE_BUILT_avx512 1
#endif
#ifndef OPFUSE_BUILT_avx2
#define OPFUSE_BUILT_avx2 1
#endif
#ifndef OPFUSE_BUILT_sse2
#define OPFUSE_BUILT_sse2 1
#endif

// Whether this build compiled the kernels of an architecture tag.
template <class Arch>
constexpr bool isa_built() {
  if constexpr (std::is_same_v<Arch, avx512>)
    return OPFUSE_BUILT_avx512 != 0;
  else if constexpr (std::is_same_v<Arch, avx2>)
    return OPFUSE_BUILT_avx2 != 0;
  else
    return OPFUSE_BUILT_sse2 != 0;
}

// ---- registry adapters ----------------------------------------------------------------------
// For an ISA the build left out these are never called (its rows are not in the table); they
// exist only so that the table's initializers compile unchanged.
template <class F, class Arch>
void run(const KernelArgs& args) {
  if constexpr (isa_built<Arch>()) F{}(Arch{}, args);
}
template <class F, class Arch>
std::size_t workspace_of(const OpDesc& desc) {
  if constexpr (isa_built<Arch>())
    return F::workspace(Arch{}, desc);
  else
    return 0;
}
template <class F, class Arch>
Status prepare_of(const OpDesc& desc, const Context& ctx, const Tensor* const* constants,
                  std::shared_ptr<void>& state) {
  if constexpr (isa_built<Arch>())
    return F::prepare(Arch{}, desc, ctx, constants, state);
  else
    return Status(StatusCode::unsupported, "this build has no kernels of this ISA (OPFUSE_SIMD_ISAS)");
}

}  // namespace opfuse::simd

#include "simd/conv.hpp"
#include "simd/eltwise.hpp"
#include "simd/gemm.hpp"
#include "simd/norm.hpp"
