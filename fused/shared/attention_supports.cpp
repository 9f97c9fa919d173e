// fused/shared/attention_supports.cpp - ISA-independent parts of the fused attention kernel:
// its supports() predicate and the layout of its per-thread scratch (compiled once, no ISA
// flags), so that the extra memory of a problem is computable without running it.
#include <cstdint>

#include "fused/attention.hpp"

namespace opfuse::fused {

// The flash kernel reads a query, key or value row as D (or Dv) contiguous floats, exactly like
// the simd kernel; the mask is gathered through its broadcast strides, so any mask shape works.
bool attention_supports(const OpDesc& desc) { return simd::attention_supports(desc); }

FlashScratch attention_scratch(const OpDesc& desc, Isa isa) {
  const FlashTile t = flash_tile(isa);
  const std::int64_t D = desc.inputs[0].shape[3], Dv = desc.inputs[2].shape[3], bq = t.bq();
  FlashScratch s;
  std::int64_t at = 0;
  bool overflow = false;
  // Appends a region of rows x bq floats (rounded up to 16) and returns its offset.
  const auto region = [&](std::int64_t rows) -> std::size_t {
    std::int64_t n = 0;
    if (__builtin_mul_overflow(rows, bq, &n) || n > (std::int64_t{1} << 56)) overflow = true;
    const std::int64_t off = at;
    at += overflow ? 0 : (n + 15) / 16 * 16;
    return static_cast<std::size_t>(off);
  };
  s.qt = region(D);
  s.st = region(t.bk);
  s.ot = region(Dv);
  s.m = region(1);
  s.l = region(1);
  s.corr = region(1);
  s.floats = overflow ? 0 : static_cast<std::size_t>(at);
  return s;
}

std::size_t attention_extra_bytes(const OpDesc& desc, Isa isa, int threads) {
  return attention_scratch(desc, isa).floats * sizeof(float) * static_cast<std::size_t>(threads > 0 ? threads : 1);
}

}  // namespace opfuse::fused
