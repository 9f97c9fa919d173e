// src/isa.cpp - which instruction sets this CPU runs, and the caps on them.
#include <cstdlib>

#include <xsimd/xsimd.hpp>

#include "opfuse/context.hpp"
#include "opfuse/registry.hpp"

namespace opfuse {

std::string_view isa_name(Isa isa) noexcept {
  switch (isa) {
    case Isa::scalar: return "scalar";
    case Isa::sse2: return "sse2";
    case Isa::avx2: return "avx2";
    case Isa::avx512: return "avx512";
  }
  return "unknown";
}

std::optional<Isa> isa_from_name(std::string_view name) noexcept {
  for (Isa i : {Isa::scalar, Isa::sse2, Isa::avx2, Isa::avx512})
    if (isa_name(i) == name) return i;
  return std::nullopt;
}

#if defined(__x86_64__) || defined(_M_X64)
namespace {
// The Isa of an xsimd architecture tag (the simd stage's three: simd/simd.hpp).
struct IsaOfArch {
  Isa operator()(xsimd::avx512bw) const { return Isa::avx512; }
  Isa operator()(xsimd::fma3<xsimd::avx2>) const { return Isa::avx2; }
  Isa operator()(xsimd::sse2) const { return Isa::sse2; }
};
}  // namespace
#endif

// The simd stage's ISA is chosen by xsimd::dispatch over the architectures it is compiled for
// (best first; CPUID), then capped by __builtin_cpu_supports, which also checks that the OS
// saves the wider registers (XGETBV: xsimd 8 does not) and the AVX-512 subsets the avx512 TUs
// are compiled with (F, BW, DQ, VL). The registry then runs the rows of that ISA or below.
Isa cpu_isa() noexcept {
#if defined(__x86_64__) || defined(_M_X64)
  static const Isa level = [] {
    const Isa chosen =
        xsimd::dispatch<xsimd::arch_list<xsimd::avx512bw, xsimd::fma3<xsimd::avx2>, xsimd::sse2>>(IsaOfArch{})();
    __builtin_cpu_init();
    Isa os = Isa::sse2;  // the x86-64 baseline
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq") &&
        __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("fma"))
      os = Isa::avx512;
    else if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
      os = Isa::avx2;
    return chosen < os ? chosen : os;
  }();
  return level;
#else
  return Isa::scalar;
#endif
}

Isa env_isa_cap() noexcept {
  static const Isa cap = [] {
    const char* v = std::getenv("OPFUSE_ISA");
    if (!v || !*v) return Isa::avx512;
    return isa_from_name(v).value_or(Isa::avx512);
  }();
  return cap;
}

Isa effective_isa(const Context& ctx) noexcept {
  Isa e = cpu_isa();
  if (env_isa_cap() < e) e = env_isa_cap();
  if (ctx.max_isa < e) e = ctx.max_isa;
  return e;
}

Isa kernel_isa(const KernelDef& k) noexcept { return isa_from_name(k.isa).value_or(Isa::scalar); }

}  // namespace opfuse
