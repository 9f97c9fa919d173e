// tests/sanitized.hpp - how much work a run of the suite asks for: whether this test binary runs
// under a sanitizer (scripts/sanitize.sh, CI's ASan run), which does the same work several times
// slower, and whether OPFUSE_LONG_TESTS=1 asks for the exhaustive versions of the long tests.
// Time bounds that guard against hangs scale with kSanitizerSlowdown; tests that repeat whole
// models repeat them less.
#pragma once

#include <cstdlib>
#include <cstring>

namespace opfuse::testing {

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
inline constexpr bool kSanitized = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
inline constexpr bool kSanitized = true;
#else
inline constexpr bool kSanitized = false;
#endif
#else
inline constexpr bool kSanitized = false;
#endif

inline constexpr double kSanitizerSlowdown = kSanitized ? 10.0 : 1.0;

// OPFUSE_LONG_TESTS=1: run the long tests whole (scripts/hardening.sh sets it).
inline bool long_tests() {
  const char* on = std::getenv("OPFUSE_LONG_TESTS");
  return on != nullptr && std::strcmp(on, "1") == 0;
}

}  // namespace opfuse::testing
