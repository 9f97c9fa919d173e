/// @file
/// opfuse/context.hpp - stages and the execution context.
#pragma once

#include "opfuse/export.h"

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

// OPFUSE_API on the namespace: everything this header declares is part of the exported API.
namespace opfuse OPFUSE_API {

/// The optimization ladder. naive is the readable scalar reference every other stage is
/// checked against; simd adds vectors and threads; fused keeps intermediates in registers;
/// cuda runs on an NVIDIA GPU.
enum class Stage : std::uint8_t {
  naive,  ///< plain scalar C++: the reference and the contract
  simd,   ///< xsimd vectors and OpenMP threads, the ISA chosen at run time
  fused,  ///< simd kernels with the post-ops run in registers, and the fused ops
  cuda,   ///< an NVIDIA GPU (not part of this version)
};
/// The number of Stage values.
inline constexpr int kStageCount = 4;
/// @param s A stage.
/// @return Its name: "naive", "simd", "fused" or "cuda".
std::string_view stage_name(Stage s) noexcept;
/// @param name A stage's name, as stage_name() spells it.
/// @return The stage, or nothing for an unknown name.
std::optional<Stage> stage_from_name(std::string_view name) noexcept;

/// Instruction-set levels of the simd stage, lowest first. Kernels name the level they need
/// (`gemm__simd_avx512_14x32`); selection takes the best kernel the CPU, the environment
/// variable OPFUSE_ISA=avx512|avx2|sse2 and Context::max_isa all allow.
enum class Isa : std::uint8_t {
  scalar,  ///< no vector instructions (the naive stage)
  sse2,    ///< SSE2, the x86-64 baseline
  avx2,    ///< AVX2 with FMA
  avx512,  ///< AVX-512 F, BW, DQ and VL with FMA
};
/// @param isa A level.
/// @return Its name: "scalar", "sse2", "avx2" or "avx512".
std::string_view isa_name(Isa isa) noexcept;
/// @param name A level's name, as isa_name() spells it.
/// @return The level, or nothing for an unknown name.
std::optional<Isa> isa_from_name(std::string_view name) noexcept;
/// The best level this CPU runs (avx2 means AVX2 + FMA; avx512 means AVX-512 F/BW/DQ/VL).
/// @return That level.
Isa cpu_isa() noexcept;
/// The level OPFUSE_ISA caps to (read once per process); avx512 when unset. An unknown value
/// is ignored (and reported by `opfuse ops`).
/// @return That level.
Isa env_isa_cap() noexcept;

/// How a single op is prepared and run: the stage, threads, ISA cap and kernel choice.
struct Context {
  /// The highest stage to use. Kernels of this stage are tried best-first; when none accepts
  /// the problem the next lower stage is tried (fused -> simd -> naive; cuda -> fused -> ...).
  Stage stage = Stage::fused;
  /// Worker threads for kernels that use them; 0 means all cores. Naive ignores it.
  int threads = 0;
  /// false: only kernels of exactly `stage` (prepare returns unsupported otherwise).
  bool fallback = true;
  /// Highest ISA level kernels may use; the effective level is the minimum of this, the CPU's
  /// and OPFUSE_ISA's.
  Isa max_isa = Isa::avx512;
  /// false: prepare allocates no kernel workspace, and execute must be given one
  /// (Primitive::execute with a workspace), so that a caller running many primitives in turn
  /// can share one buffer among them.
  bool own_workspace = true;
  /// Kernels never to select, by name ("inverted_residual__fused_avx512"): for A/B runs, for
  /// working around a kernel, and for testing what happens when one declines.
  std::vector<std::string> excluded_kernels{};
  /// Bytes prepare may allocate for one primitive, checked before it allocates anything: the
  /// kernel workspace (when own_workspace) plus, for a kernel with a prepare step, the bound
  /// constants it packs (counted at their own size). Over it prepare returns out_of_memory
  /// naming the op, the bytes and the budget. The default is CompileOptions::memory_budget's;
  /// UINT64_MAX means no limit.
  std::uint64_t memory_budget = 16ull << 30;
};

/// The ISA level kernels may use under a context.
/// @param ctx The context.
/// @return min(cpu_isa(), env_isa_cap(), ctx.max_isa).
Isa effective_isa(const Context& ctx) noexcept;

}  // namespace OPFUSE_API
