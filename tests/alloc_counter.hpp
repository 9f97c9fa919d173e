// tests/alloc_counter.hpp - counts the test process's heap allocations (operator new), so that
// "a run allocates nothing" is tested, not assumed. alloc_counter.cpp replaces the global
// operator new / delete once for the whole test binary.
#pragma once

#include <atomic>

namespace opfuse::testing {
// Every operator new call in the process, from any thread.
long allocations() noexcept;
}  // namespace opfuse::testing
