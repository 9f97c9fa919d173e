// src/denormal.hpp - the flush-to-zero policy: how every opfuse call treats denormal floats.
//
// The policy. Inside every opfuse call the SSE control register MXCSR of each thread that runs
// opfuse code reads 0x9FC0: round to nearest, every exception masked, FTZ (bit 15: a denormal
// result is written as a zero of the same sign) and DAZ (bit 6: a denormal input is read as a
// zero of the same sign). Denormals (|x| < 2^-126, FLT_MIN) therefore never reach an arithmetic
// unit, so no kernel pays the microcode assists that make denormal arithmetic slow on many x86
// CPUs, and every stage - naive included, since it runs under the same register - sees the same
// zeros, so stages still agree to the normal tolerance. Data movement (loads, stores, blends,
// copies) is not arithmetic: a denormal that an op only moves may come out unflushed on one
// stage (clip as compare + blend) and as zero on another (clip as min/max instructions, which
// read it under DAZ); the comparator (src/check/compare.cpp) counts a denormal as zero.
// After the call each of those threads gets its own MXCSR control bits back, exactly as they
// were; the status flags (bits 0-5) are sticky as IEEE 754 wants: an exception the call raised
// stays raised, nothing the caller raised is cleared.
//
// Where it is applied, one DenormalGuard per scope:
//   - Primitive::execute (src/primitive.cpp): the calling thread, for every kernel of every
//     stage, naive included;
//   - the top of every OpenMP parallel region of simd/ and fused/ (simd::parallel_tid in
//     simd/common.hpp and each `#pragma omp parallel` block): MXCSR is per thread, and the
//     pool's worker threads keep theirs between regions, so each worker sets the policy on
//     entry and gets its own bits back on exit;
//   - Plan::run (src/runtime/executor.cpp): the whole model, host ops included.
// Guards nest: an inner guard saves the policy register and restores it.
//
// set_flush_denormals(false) switches the policy off for the whole process (guards then leave
// MXCSR alone and denormals are computed IEEE-exactly). Internal: `opfuse denormals` uses it to
// measure what the policy saves; it is not part of the public API.
#pragma once

namespace opfuse::detail {

// The MXCSR control value inside a call (round to nearest, exceptions masked, FTZ | DAZ).
inline constexpr unsigned kPolicyMxcsr = 0x9FC0u;
// MXCSR bits 0-5: the sticky exception flags.
inline constexpr unsigned kMxcsrFlags = 0x3Fu;

// Whether guards apply the policy (default true). Thread-safe; affects guards created after.
void set_flush_denormals(bool on) noexcept;
bool flush_denormals() noexcept;

// This thread's MXCSR (0 where there is none: not x86-64), and setting it.
unsigned read_mxcsr() noexcept;
void write_mxcsr(unsigned value) noexcept;

// Sets the policy on this thread for its lifetime and restores the thread's control bits after
// (see the top of this file). Defined out of line in src/denormal.cpp, compiled with the
// baseline flags: one copy for every simd ISA's translation units.
class DenormalGuard {
 public:
  DenormalGuard() noexcept;
  ~DenormalGuard();
  DenormalGuard(const DenormalGuard&) = delete;
  DenormalGuard& operator=(const DenormalGuard&) = delete;

 private:
  unsigned saved_ = 0;
  bool active_ = false;
};

}  // namespace opfuse::detail
