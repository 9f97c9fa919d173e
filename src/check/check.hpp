// src/check/check.hpp - the cross-check engine behind `opfuse check`, the tests and the bench.
//
// One comparator, one tolerance model (CONVENTIONS rule 10):
//
//   pass  iff  |out - ref| <= atol + rtol * |ref|   for every element,
//
// NaN in the reference needs NaN in the output (and the other way round), +-Inf must match
// exactly, and an all-zero reference is a broken case, never a pass. tolerance() holds every
// op's thresholds, each explained and scaled with the op's reduction length.
//
// Cases come from one generator per op (make_cases), deterministic in (op, seed), with the
// edges of rule 11: sizes 1, primes, tile-1/tile/tile+1, unaligned views, in-place, NaN/Inf.
// A case's full name is its reproducer: `<op>/<stage>/<case_name(desc)><variant suffixes>`,
// e.g. `conv2d/simd/n1_c3_h7_w7_k5_r3_s2_p1+unaligned`; `opfuse check --case SUBSTRING` reruns it.
//
// What each kernel is checked against:
//   stage simd/fused/cuda  the naive kernel of the same op, on every case;
//   stage naive            the oneDNN peer (`<op>__onednn`, else the Eigen peer `<op>__eigen`) on
//                          every random case the peer supports, and closed-form expected values
//                          (computed here by independent formulas) on the closed-form cases.
// Variants (+unaligned, +inplace) apply to the kernel under test; references run on aligned,
// out-of-place buffers. +nan/+inf cases are compared against naive but not against peers
// (libraries differ on NaN semantics): the naive stage counts them skipped, with that reason.
// A case the kernel (or every reference) declines is counted as skipped, with the reason.
#pragma once

#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "check/compare.hpp"
#include "opfuse/context.hpp"
#include "opfuse/model.hpp"
#include "opfuse/ops.hpp"
#include "opfuse/registry.hpp"
#include "opfuse/status.hpp"

namespace opfuse::check {

// The comparator and the tolerance model: compare.hpp (part of the core library, which
// --verify-fusion uses too).

// ---- cases ----------------------------------------------------------------------------------

enum Variant : unsigned {
  kUnaligned = 1u,  // inputs and outputs are views at a +1-float offset into a bigger buffer
  kInplace = 2u,    // output 0 aliases input 0 (only where allows_inplace(desc, 0, 0))
  kNan = 4u,        // NaNs injected into input 0
  kInf = 8u,        // +Inf / -Inf injected into input 0
  kConst = 16u,     // inputs 1.. bound as constants at prepare (weights packed once), nullptr at execute
};

struct Case {
  OpDesc desc;
  std::string tag;        // appended to case_name(desc) to tell closed-form cases apart ("+closed_ramp")
  unsigned variants = 0;  // Variant bits
  // Closed-form cases carry their own inputs and the expected outputs, all in logical order.
  std::vector<std::vector<float>> inputs;
  std::vector<std::vector<float>> expected;
  std::vector<std::vector<float>> initial;  // prior output contents (gemm with beta != 0)
  std::string formula;                      // what the closed form is, for reports

  bool closed_form() const { return !expected.empty(); }
  // "<case_name(desc)><tag><variant suffixes>", the stage-independent part of the name.
  std::string id() const;
  // The reproducer: "<op>/<stage>/<id>".
  std::string name(std::string_view stage) const;
};

std::string variant_suffix(unsigned variants);

// Every case of one op, deterministic in (op, seed): fixed edge shapes plus a few shapes drawn
// from the seed. Includes the closed-form cases.
std::vector<Case> make_cases(OpKind op, std::uint64_t seed);
std::vector<Case> make_closed_form_cases(OpKind op);

// Input data of a case in logical order: the case's own inputs, or uniform random values from
// a generator seeded by hash("<op>/<id>") ^ seed with per-input domains (var > 0, divisors
// away from 0, masks in [-2, 0], ...), with the NaN/Inf variants applied.
std::vector<std::vector<float>> make_inputs(const Case& c, std::uint64_t seed);
// Initial output contents (gemm with beta != 0 reads y); empty vector for "fill with NaN".
std::vector<std::vector<float>> make_initial_outputs(const Case& c, std::uint64_t seed);

// Small deterministic generator (splitmix64), identical on every platform.
class Rng {
 public:
  explicit Rng(std::uint64_t seed) : s_(seed) {}
  std::uint64_t next();
  float uniform(float lo, float hi);                     // [lo, hi)
  std::int64_t range(std::int64_t lo, std::int64_t hi);  // [lo, hi]

 private:
  std::uint64_t s_;
};
std::uint64_t hash_name(std::string_view s);  // FNV-1a, 64 bit

// ---- running checks -------------------------------------------------------------------------

struct Options {
  Stage stage = Stage::naive;
  std::string op;  // op name; empty = every op
  std::uint64_t seed = 1;
  std::string case_filter;  // substring of the full case name; empty = every case
  std::string kernel;       // exact kernel name; empty = every kernel of the stage
  int threads = 0;          // Context::threads for the kernels under test
};

enum class Outcome : std::uint8_t { passed, failed, skipped };
std::string_view outcome_name(Outcome o) noexcept;

struct CaseResult {
  std::string name;       // the reproducer
  std::string kernel;     // the kernel under test
  std::string reference;  // "conv2d__onednn", "gemm__naive", "closed form: ..."
  Outcome outcome = Outcome::skipped;
  std::string reason;  // why it failed or was skipped
  Tolerance tol;
  CompareResult cmp;  // worst output's comparison (when compared)
  std::string where;  // output name and logical coordinates of cmp.worst
  bool compared = false;
};

struct KernelSummary {
  std::string kernel;
  std::string op;
  std::string stage;
  int cases = 0, passed = 0, failed = 0, skipped = 0;
  double worst_ratio = 0;  // max err/allowed over its compared cases
};

struct Summary {
  std::string stage;
  std::uint64_t seed = 1;
  int cases = 0, passed = 0, failed = 0, skipped = 0;
  double seconds = 0;
  std::string note;  // e.g. "stage simd has no kernels yet"
  std::vector<KernelSummary> kernels;
  std::vector<CaseResult> failures;  // every failed case
  std::vector<CaseResult> worst;     // the compared cases with the largest err/allowed
  std::map<std::string, int> skip_reasons;
  std::vector<CaseResult> results;  // every case, only with keep_results
};

inline constexpr std::size_t kWorstReported = 5;

// Runs every selected kernel on every matching case. invalid_argument for an unknown op or
// kernel name. With keep_results, Summary::results holds every case.
Result<Summary> run_checks(const Options& options, bool keep_results = false);

// Checks the given kernels (registry rows or any other KernelDef, e.g. a deliberately broken
// one in a test) exactly as run_checks does; options.stage/op/kernel are not consulted.
Summary check_kernels(std::span<const KernelDef* const> kernels, const Options& options, bool keep_results = false);

// Runs one kernel on one case's data (NaN/Inf data always; +unaligned/+inplace when
// with_variants) and returns its outputs in logical order, or why it could not run.
Result<std::vector<std::vector<float>>> run_case(const KernelDef& kernel, const Case& c, std::uint64_t seed,
                                                 bool with_variants = true, int threads = 0);

// The case list without running anything ("<op>/<stage>/<id>" for every kernel of the stage).
Result<std::vector<std::string>> list_cases(const Options& options);

// {"stage","seed","cases","passed","failed","skipped","seconds","note","kernels":[...],
//  "worst":[...],"failures":[...],"skip_reasons":{...}}
nlohmann::json to_json(const Summary& s);
// Human-readable report: per-kernel table, worst cases, failures with mismatches, skip reasons.
std::string to_text(const Summary& s, bool verbose = false);

}  // namespace opfuse::check
