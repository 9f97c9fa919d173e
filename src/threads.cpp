// src/threads.cpp - see src/threads.hpp.
#include "src/threads.hpp"

#include <thread>

namespace opfuse::detail {

int hardware_threads() noexcept {
  static const int n = [] {
    const unsigned hc = std::thread::hardware_concurrency();
    return hc > 0 ? static_cast<int>(hc) : 1;
  }();
  return n;
}

int resolve_threads(int requested) noexcept { return requested > 0 ? requested : hardware_threads(); }

}  // namespace opfuse::detail
