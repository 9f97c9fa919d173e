// src/isa.cpp - which instruction sets this CPU runs, and the caps on them.
#include <cstdlib>

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

Isa cpu_isa() noexcept {
#if defined(__x86_64__) || defined(_M_X64)
  // __builtin_cpu_supports also checks that the OS saves the wider registers (XGETBV).
  static const Isa level = [] {
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq") &&
        __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("fma"))
      return Isa::avx512;
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return Isa::avx2;
    return Isa::sse2;  // the x86-64 baseline
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
