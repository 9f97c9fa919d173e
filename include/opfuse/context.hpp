// opfuse/context.hpp - stages and the execution context.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace opfuse {

// The optimization ladder. naive is the readable scalar reference every other stage is
// checked against; simd adds vectors and threads; fused keeps intermediates in registers;
// cuda runs on an NVIDIA GPU.
enum class Stage : std::uint8_t { naive, simd, fused, cuda };
inline constexpr int kStageCount = 4;
std::string_view stage_name(Stage s) noexcept;
std::optional<Stage> stage_from_name(std::string_view name) noexcept;

struct Context {
  // The highest stage to use. Kernels of this stage are tried best-first; when none accepts
  // the problem the next lower stage is tried (fused -> simd -> naive; cuda -> fused -> ...).
  Stage stage = Stage::fused;
  // Worker threads for kernels that use them; 0 means all cores. Naive ignores it.
  int threads = 0;
  // false: only kernels of exactly `stage` (prepare returns unsupported otherwise).
  bool fallback = true;
};

}  // namespace opfuse
