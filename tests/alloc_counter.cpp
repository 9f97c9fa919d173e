// tests/alloc_counter.cpp - the one replacement of the global operator new / delete in the test
// binary (see alloc_counter.hpp).
#include "alloc_counter.hpp"

#include <cstdlib>
#include <new>

namespace {
std::atomic<long> g_allocations{0};
}  // namespace

long opfuse::testing::allocations() noexcept { return g_allocations.load(std::memory_order_relaxed); }

void* operator new(std::size_t n) {
  g_allocations.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::malloc(n == 0 ? 1 : n)) return p;
  throw std::bad_alloc();
}
// Out of line, so that GCC does not pair an inlined free() with the operator new it saw.
[[gnu::noinline]] void operator delete(void* p) noexcept { std::free(p); }
[[gnu::noinline]] void operator delete(void* p, std::size_t) noexcept { std::free(p); }
