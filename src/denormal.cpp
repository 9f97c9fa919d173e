// src/denormal.cpp - DenormalGuard: the flush-to-zero policy of src/denormal.hpp.
#include "src/denormal.hpp"

#include <atomic>

#if defined(__x86_64__) || defined(_M_X64)
#include <xmmintrin.h>
#define OPFUSE_HAVE_MXCSR 1
#endif

namespace opfuse::detail {

namespace {
std::atomic<bool> g_flush{true};
}  // namespace

void set_flush_denormals(bool on) noexcept { g_flush.store(on, std::memory_order_relaxed); }
bool flush_denormals() noexcept { return g_flush.load(std::memory_order_relaxed); }

unsigned read_mxcsr() noexcept {
#ifdef OPFUSE_HAVE_MXCSR
  return _mm_getcsr();
#else
  return 0;
#endif
}

void write_mxcsr([[maybe_unused]] unsigned value) noexcept {
#ifdef OPFUSE_HAVE_MXCSR
  _mm_setcsr(value);
#endif
}

DenormalGuard::DenormalGuard() noexcept {
#ifdef OPFUSE_HAVE_MXCSR
  if (!flush_denormals()) return;
  saved_ = _mm_getcsr();
  active_ = true;
  // Keep the caller's sticky flags; replace every control bit.
  const unsigned want = kPolicyMxcsr | (saved_ & kMxcsrFlags);
  if (want != saved_) _mm_setcsr(want);
#endif
}

DenormalGuard::~DenormalGuard() {
#ifdef OPFUSE_HAVE_MXCSR
  if (!active_) return;
  // The caller's control bits; the flags as they are now (the call's exceptions stay raised).
  const unsigned now = _mm_getcsr();
  const unsigned back = (saved_ & ~kMxcsrFlags) | (now & kMxcsrFlags);
  if (back != now) _mm_setcsr(back);
#endif
}

}  // namespace opfuse::detail
