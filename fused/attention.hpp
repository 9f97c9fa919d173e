// fused/attention.hpp - declarations of the fused attention kernels (see fused/fused.hpp for the
// pattern) and the tile sizes that make the flash kernel's extra memory computable.
#pragma once

#include <cstddef>
#include <cstdint>

#include "fused/fused.hpp"

namespace opfuse::fused {

// attention.cpp: flash attention - per tile of Bq queries, K and V are streamed in tiles of Bk
// keys with an online softmax; the scores of one Bk x Bq tile, the O^T accumulator (Dv x Bq)
// and the running max / sum per query are the only intermediates (per thread, in the prepared
// state).
OPFUSE_SIMD_FUNCTOR_PREPARED(Attention);

// The flash kernel's tiles on one ISA: bq queries (vector lanes: nq vectors of w floats) x bk
// keys; mk keys per QK^T register tile, me rows of O^T (columns of v) per PV register tile.
struct FlashTile {
  int w, nq, mk, me;
  std::int64_t bk;
  constexpr std::int64_t bq() const { return static_cast<std::int64_t>(w) * nq; }
};
constexpr FlashTile flash_tile(Isa isa) {
  switch (isa) {
    case Isa::avx512: return {16, 4, 6, 4, 72};
    case Isa::avx2: return {8, 2, 6, 6, 128};
    default: return {4, 2, 4, 4, 128};
  }
}

// ISA-independent code, in fused/shared/attention_supports.cpp.
// q, k, v rows contiguous along D / Dv (as the simd kernel needs); any mask broadcast.
bool attention_supports(const OpDesc& desc);
// One thread's scratch of the flash kernel on `isa`, offsets in floats from a 64-byte aligned
// base, each region rounded up to 16 floats: the Q^T tile (D x bq), the score tile (bk x bq),
// the O^T accumulator (Dv x bq) and three rows of bq (running max, running sum, correction).
struct FlashScratch {
  std::size_t qt = 0, st = 0, ot = 0, m = 0, l = 0, corr = 0;
  std::size_t floats = 0;  // the whole scratch; 0 when the count overflows
};
FlashScratch attention_scratch(const OpDesc& desc, Isa isa);
// The flash kernel's whole extra memory with `threads` threads, in bytes: what prepare
// allocates. Compare with the unfused score matrix, B * H * Sq * Skv * 4 bytes.
std::size_t attention_extra_bytes(const OpDesc& desc, Isa isa, int threads);

}  // namespace opfuse::fused
