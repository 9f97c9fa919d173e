// src/check/compare.hpp - the one comparator and the tolerance model (CONVENTIONS rule 10):
//
//   pass  iff  |out - ref| <= atol + rtol * |ref|   for every element,
//
// NaN in the reference needs NaN in the output (and the other way round), +-Inf must match
// exactly, a denormal equals zero (the flush-to-zero policy, src/denormal.hpp), and an all-zero
// reference is a broken case, never a pass. tolerance() holds every op's thresholds, each
// explained and scaled with the op's reduction length (compare.cpp).
// compare.cpp is compiled into the core library: `opfuse check` (check.hpp) and the runtime's
// --verify-fusion share it, and the library alone needs none of the check engine's
// dependencies.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "opfuse/model.hpp"
#include "opfuse/ops.hpp"

namespace opfuse::check {

// ---- the comparator -------------------------------------------------------------------------

struct Tolerance {
  double atol = 0;
  double rtol = 0;
};

struct Mismatch {
  std::int64_t index = -1;  // flat index in logical (row-major, NCHW-order) element order
  float out = 0;
  float ref = 0;
  double err = 0;      // |out - ref|; +inf when exactly one side is NaN/Inf or the Infs differ
  double allowed = 0;  // atol + rtol * |ref|
};

struct CompareResult {
  bool ok = false;
  std::string reason;      // empty when ok; else "3 of 64 elements differ", "degenerate: ..."
  std::int64_t count = 0;  // elements compared
  std::int64_t mismatches = 0;
  std::vector<Mismatch> first;  // the first few mismatches, in index order
  Mismatch worst;               // the element with the largest err/allowed (index -1 if none)
  double worst_ratio = 0;       // that ratio; +inf for a NaN/Inf mismatch or err > 0 == allowed
};

inline constexpr std::size_t kReportedMismatches = 5;

// The one comparator. `out` and `ref` hold the same elements in the same order.
CompareResult compare(std::span<const float> out, std::span<const float> ref, const Tolerance& tol);

// The thresholds for one op and problem (see the table in compare.cpp).
Tolerance tolerance(const OpDesc& desc);

// ---- whole-model outputs ----------------------------------------------------------------------

// A model output against a reference from outside (ONNX test data, another stage's output).
// f32 goes through compare() with kModelTolerance: ONNX's backend-test rtol, and an atol for
// outputs whose terms cancel to near zero (errors then scale with the terms, not the result).
// An all-zero reference is legitimate here and must be matched; i64 and boolean match exactly.
inline constexpr Tolerance kModelTolerance{1e-5, 1e-3};
struct OutputCheck {
  std::string name;
  bool ok = false;
  std::string reason;   // empty when ok
  double max_abs = 0;   // max |out - ref| over finite differences
  double max_norm = 0;  // max |out - ref| / (atol + rtol |ref|); <= 1 passes
};
OutputCheck compare_output(const TensorData& out, const TensorData& ref, const Tolerance& tol = kModelTolerance);

}  // namespace opfuse::check
