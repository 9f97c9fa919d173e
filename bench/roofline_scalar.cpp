// bench/roofline_scalar.cpp - the peak probe's scalar loop: one float per instruction, a
// multiply then an add (no FMA: the plain build has none). Compiled without vectorization
// (CMakeLists.txt) so the chains stay scalar.
#include "roofline_fma.hpp"

namespace opfuse::bench {
namespace {
struct Scalar {
  using type = float;
  static constexpr int kLanes = 1;
  static float set1(float x) { return x; }
  static float madd(float acc, float a, float b) { return acc * a + b; }
  static float sum(float x) { return x; }
};
}  // namespace

FmaLoop fma_loop_scalar() { return make_fma_loop<Scalar, 14>(); }

}  // namespace opfuse::bench
