// bench/roofline.hpp - this machine's roofline, measured at the start of every opfuse-bench run.
//
// The roofline model (Williams, Waterman, Patterson, CACM 2009) bounds a kernel's rate by
// min(peak, intensity x bandwidth): peak is the fp32 multiply-add rate of the instructions it
// may use, bandwidth the rate DRAM streams at, intensity the kernel's flops per byte moved
// (op_cost). The probe measures both on this machine instead of trusting a datasheet:
//
//   peak        independent multiply-add chains in registers, one function per ISA compiled
//               with only that ISA's flags (roofline_<isa>.cpp), on 1 thread and on all cores
//               (OpenMP), each after warming the clocks on that loop and as the best of
//               several runs; an ISA the CPU lacks is skipped (0)
//   bandwidth   STREAM copy (a = b) and triad (a = b + s*c) over arrays 4x the last-level
//               cache (at least 64 MiB each), on 1 thread and on all cores
//
// Every benchmark is then measured against the roof of its kernel's ISA at its thread count
// (roof_isa): simd and fused rows their own ISA, peers the best ISA the CPU runs under the
// process's cap (oneDNN and Eigen dispatch at run time; opfuse-bench --isa caps them with
// opfuse), naive the baseline the compiler may auto-vectorize it for.
#pragma once

#include <array>
#include <cstddef>
#include <string>

#include "opfuse/context.hpp"
#include "opfuse/registry.hpp"

namespace opfuse::bench {

struct Roofline {
  // fp32 GFLOP/s indexed by Isa (scalar, sse2, avx2, avx512), at 1 thread [0] and at `threads`
  // threads [1]; 0 where the CPU lacks the ISA.
  std::array<std::array<double, 2>, 4> peak{};
  std::array<double, 2> copy{}, triad{};  // GB/s (10^9 bytes/s) at 1 and at `threads` threads
  int threads = 1;                        // "all cores"
  double array_mib = 0;                   // size of each stream array
  double seconds = 0;                     // how long the probe took

  // Peak and triad bandwidth at t threads: measured at 1 and at `threads`, linear in between.
  double peak_gflops(Isa isa, int t) const;
  double bandwidth_gbs(int t) const;
  // The roof at arithmetic intensity `ai` (flop/byte): min(peak, ai x bandwidth).
  double bound_gflops(Isa isa, int t, double ai) const;
};

// Runs the probe (about 10 s; `quick` about 2 s with shorter timings and smaller arrays, still
// beyond the last-level cache of `llc_bytes`).
Roofline probe_roofline(bool quick, std::size_t llc_bytes);

// The ISA whose roof a kernel is measured against (see the file comment).
Isa roof_isa(const KernelDef& k);
// The ISA this build lets the compiler auto-vectorize plain C++ (the naive stage) for: the
// baseline of the compile flags, sse2 on a default x86-64 build.
Isa baseline_isa();

}  // namespace opfuse::bench
