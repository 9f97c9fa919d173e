// tests/test_check.cpp - the cross-check engine: the comparator, the case generators, the
// registry-driven cross-check of every kernel, and kernels broken on purpose to prove the
// checks can fail (CONVENTIONS rule 12).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <map>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "check/check.hpp"
#include "opfuse/opfuse.hpp"
#include "peers/peers.hpp"

namespace opfuse::check {
namespace {

constexpr float kFloatNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kFloatInf = std::numeric_limits<float>::infinity();

std::vector<OpKind> all_ops() {
  std::vector<OpKind> r;
  for (int i = 0; i < kOpCount; ++i) r.push_back(static_cast<OpKind>(i));
  return r;
}

std::string failures_text(const Summary& s) {
  std::string t;
  for (const CaseResult& r : s.failures) t += r.name + " [" + r.kernel + " vs " + r.reference + "]: " + r.reason + "\n";
  return t;
}

// ---- the comparator ---------------------------------------------------------------------------

TEST(Compare, WithinTolerancePasses) {
  const std::vector<float> ref = {1.f, -2.f, 3.f, 0.f, 0.5f};
  const Tolerance tol{1e-6, 1e-5};
  std::vector<float> out = ref;
  for (std::size_t i = 0; i < out.size(); ++i)
    out[i] += static_cast<float>(0.5 * (tol.atol + tol.rtol * std::fabs(ref[i])));
  const CompareResult r = compare(out, ref, tol);
  EXPECT_TRUE(r.ok) << r.reason;
  EXPECT_EQ(r.mismatches, 0);
  EXPECT_EQ(r.count, 5);
  EXPECT_GT(r.worst_ratio, 0.3);
  EXPECT_LT(r.worst_ratio, 0.7);
}

TEST(Compare, ExactlyAtTheBoundPasses) {
  const CompareResult r = compare(std::vector<float>{1.5f}, std::vector<float>{1.f}, {0.25, 0.25});
  EXPECT_TRUE(r.ok) << r.reason;
  EXPECT_DOUBLE_EQ(r.worst_ratio, 1.0);
}

TEST(Compare, RelativeErrorOf1e3Fails) {
  std::vector<float> ref(64), out(64);
  for (std::size_t i = 0; i < ref.size(); ++i) ref[i] = std::sin(static_cast<float>(i)) * 3.f;
  for (std::size_t i = 0; i < ref.size(); ++i) out[i] = ref[i] * (1.f + 1e-3f);
  // The tolerance of a mid-sized GEMM (K = 64).
  OpDesc d{OpKind::gemm, GemmParams{}, {{Shape{64, 64}}, {Shape{64, 64}}}};
  const CompareResult r = compare(out, ref, tolerance(d));
  EXPECT_FALSE(r.ok);
  EXPECT_GT(r.mismatches, 32);
  EXPECT_NE(r.reason.find("elements differ"), std::string::npos) << r.reason;
}

TEST(Compare, NanMustMeetNan) {
  const Tolerance tol{1, 1};  // generous: NaN handling does not depend on it
  EXPECT_FALSE(compare(std::vector<float>{1.f, kFloatNaN}, std::vector<float>{1.f, 2.f}, tol).ok);
  EXPECT_FALSE(compare(std::vector<float>{1.f, 2.f}, std::vector<float>{1.f, kFloatNaN}, tol).ok);
  const CompareResult both = compare(std::vector<float>{1.f, kFloatNaN}, std::vector<float>{1.f, kFloatNaN}, tol);
  EXPECT_TRUE(both.ok) << both.reason;
  const CompareResult r = compare(std::vector<float>{kFloatNaN}, std::vector<float>{2.f}, tol);
  EXPECT_TRUE(std::isinf(r.worst_ratio));
  EXPECT_EQ(r.worst.index, 0);
}

TEST(Compare, InfMustMatchExactly) {
  const Tolerance tol{1e30, 1};  // even an absurd tolerance does not excuse a wrong Inf
  EXPECT_FALSE(compare(std::vector<float>{1.f, -kFloatInf}, std::vector<float>{1.f, kFloatInf}, tol).ok);
  EXPECT_FALSE(compare(std::vector<float>{1.f, 3e38f}, std::vector<float>{1.f, kFloatInf}, tol).ok);
  EXPECT_FALSE(compare(std::vector<float>{1.f, kFloatInf}, std::vector<float>{1.f, 3e38f}, tol).ok);
  EXPECT_TRUE(compare(std::vector<float>{1.f, -kFloatInf}, std::vector<float>{1.f, -kFloatInf}, tol).ok);
}

TEST(Compare, AllZeroReferenceIsRejected) {
  const CompareResult r = compare(std::vector<float>{0.f, 0.f, 0.f}, std::vector<float>{0.f, 0.f, 0.f}, {1, 1});
  EXPECT_FALSE(r.ok);
  EXPECT_EQ(r.reason, "degenerate: reference is all zero");
}

TEST(Compare, AllZeroOutputFailsEvenWithinTolerance) {
  const CompareResult r = compare(std::vector<float>{0.f, 0.f}, std::vector<float>{1e-9f, 0.f}, {1e-6, 0});
  EXPECT_FALSE(r.ok);
  EXPECT_NE(r.reason.find("output is all zero"), std::string::npos) << r.reason;
}

TEST(Compare, SizeMismatchFails) {
  EXPECT_FALSE(compare(std::vector<float>{1.f}, std::vector<float>{1.f, 2.f}, {1, 1}).ok);
}

TEST(Compare, ReportsFirstFewAndTheWorst) {
  std::vector<float> ref(100, 1.f), out(100, 1.f);
  for (std::size_t i = 10; i < 30; ++i) out[i] = 1.1f;
  out[77] = 5.f;  // the worst
  const CompareResult r = compare(out, ref, {1e-6, 1e-6});
  EXPECT_FALSE(r.ok);
  EXPECT_EQ(r.mismatches, 21);
  ASSERT_EQ(r.first.size(), kReportedMismatches);
  EXPECT_EQ(r.first[0].index, 10);
  EXPECT_EQ(r.worst.index, 77);
  EXPECT_FLOAT_EQ(r.worst.out, 5.f);
  EXPECT_FLOAT_EQ(r.worst.ref, 1.f);
  EXPECT_NEAR(r.worst.err, 4.0, 1e-6);
  EXPECT_EQ(r.reason, "21 of 100 elements differ");
}

// ---- the case generators -----------------------------------------------------------------------

class Cases : public ::testing::TestWithParam<OpKind> {};

TEST_P(Cases, ValidUniqueAndDeterministic) {
  const OpKind op = GetParam();
  const auto cases = make_cases(op, 1);
  ASSERT_GE(cases.size(), 10u);
  std::set<std::string> ids;
  for (const Case& c : cases) {
    EXPECT_EQ(c.desc.op, op);
    EXPECT_TRUE(validate(c.desc).is_ok()) << c.id() << ": " << validate(c.desc).to_string();
    EXPECT_TRUE(ids.insert(c.id()).second) << "duplicate case name " << c.id();
    if (c.variants & kInplace) {
      EXPECT_TRUE(allows_inplace(c.desc, 0, 0)) << c.id();
    }
  }
  const auto again = make_cases(op, 1);
  ASSERT_EQ(again.size(), cases.size());
  for (std::size_t i = 0; i < cases.size(); ++i) {
    EXPECT_EQ(again[i].id(), cases[i].id());
    const auto a = make_inputs(cases[i], 1), b = make_inputs(again[i], 1);
    ASSERT_EQ(a.size(), b.size());
    for (std::size_t k = 0; k < a.size(); ++k)
      EXPECT_EQ(0, std::memcmp(a[k].data(), b[k].data(), a[k].size() * sizeof(float))) << cases[i].id();
  }
}

TEST_P(Cases, HitTheEdges) {
  const OpKind op = GetParam();
  const auto cases = make_cases(op, 1);
  unsigned variants = 0;
  bool odd = false, can_inplace = false;
  for (const Case& c : cases) {
    variants |= c.variants;
    odd |= c.desc.inputs[0].shape.numel() % 16 != 0;
    can_inplace |= allows_inplace(c.desc, 0, 0);
  }
  EXPECT_TRUE(variants & kUnaligned) << op_name(op) << " has no +unaligned case";
  EXPECT_TRUE(variants & kNan) << op_name(op) << " has no +nan case";
  EXPECT_TRUE(variants & kInf) << op_name(op) << " has no +inf case";
  if (can_inplace) {
    EXPECT_TRUE(variants & kInplace) << op_name(op) << " allows in-place but has no +inplace case";
  }
  EXPECT_TRUE(odd) << op_name(op) << " has no size that is a non-multiple of the vector width";
}

TEST_P(Cases, SeedChangesTheData) {
  const auto cases = make_cases(GetParam(), 1);
  for (const Case& c : cases) {
    if (c.closed_form()) continue;
    const auto a = make_inputs(c, 1), b = make_inputs(c, 2);
    EXPECT_NE(a[0], b[0]) << c.id();
    break;
  }
}

TEST_P(Cases, RelativeErrorOf1e3FailsOnEveryCase) {
  // The tolerance of every case is tight enough to catch a 1e-3 relative error in its outputs.
  const OpKind op = GetParam();
  const KernelDef* naive = nullptr;
  for (const KernelDef& k : kernels())
    if (k.op == op && k.impl == Impl::naive) naive = &k;
  ASSERT_NE(naive, nullptr);
  int checked = 0;
  for (const Case& c : make_cases(op, 1)) {
    if (c.variants & (kNan | kInf)) continue;
    std::vector<std::vector<float>> ref;
    if (c.closed_form()) {
      ref = c.expected;
    } else {
      auto r = run_case(*naive, c, 1, /*with_variants=*/false);
      ASSERT_TRUE(r.is_ok()) << c.id() << ": " << r.status().to_string();
      ref = *r;
    }
    const Tolerance tol = tolerance(c.desc);
    bool any_fails = false;
    for (const auto& y : ref) {
      ASSERT_TRUE(compare(y, y, tol).ok) << c.id() << ": " << compare(y, y, tol).reason;
      std::vector<float> out = y;
      for (float& v : out) v *= 1.f + 1e-3f;
      any_fails |= !compare(out, y, tol).ok;
    }
    EXPECT_TRUE(any_fails) << c.id() << ": a 1e-3 relative error passes (atol " << tol.atol << ", rtol " << tol.rtol
                           << ")";
    ++checked;
  }
  EXPECT_GT(checked, 5);
}

INSTANTIATE_TEST_SUITE_P(AllOps, Cases, ::testing::ValuesIn(all_ops()),
                         [](const ::testing::TestParamInfo<OpKind>& i) { return std::string(op_name(i.param)); });

TEST(CaseNames, AreReproducers) {
  bool found = false;
  for (const Case& c : make_cases(OpKind::conv2d, 1))
    found |= c.name("simd") == "conv2d/simd/n1_c3_h7_w7_k5_r3_s2_p1+unaligned";
  EXPECT_TRUE(found);
  Options o;
  o.op = "conv2d";
  o.case_filter = "n1_c3_h7_w7_k5_r3_s2_p1+unaligned";
  auto names = list_cases(o);
  ASSERT_TRUE(names.is_ok());
  ASSERT_EQ(names->size(), 1u);
  EXPECT_EQ((*names)[0], "conv2d/naive/n1_c3_h7_w7_k5_r3_s2_p1+unaligned");
  auto s = run_checks(o);
  ASSERT_TRUE(s.is_ok());
  EXPECT_EQ(s->cases, 1);
  EXPECT_EQ(s->passed, 1) << failures_text(*s);
}

TEST(CaseData, DomainsRespectTheContract) {
  for (OpKind op : {OpKind::batchnorm, OpKind::div, OpKind::softmax, OpKind::attention}) {
    for (const Case& c : make_cases(op, 7)) {
      if (c.closed_form()) continue;
      const auto in = make_inputs(c, 7);
      const auto names = input_names(c.desc);
      for (std::size_t i = 0; i < in.size(); ++i)
        for (float v : in[i]) {
          if (names[i] == "var") {
            EXPECT_GT(v, 0.f);
          }
          if (op == OpKind::div && i == 1) {
            EXPECT_GE(std::fabs(v), 0.5f);
          }
          if (names[i] == "mask") {
            EXPECT_TRUE(v >= -2.f && v <= 0.f);
          }
        }
    }
  }
}

TEST(CaseData, ClosedFormsExistWhereNoPeerCovers) {
  for (OpKind op : {OpKind::rmsnorm, OpKind::attention, OpKind::eltwise_chain, OpKind::inverted_residual,
                    OpKind::global_avgpool, OpKind::gemm, OpKind::softmax, OpKind::layernorm}) {
    const auto cf = make_closed_form_cases(op);
    EXPECT_GE(cf.size(), 3u) << op_name(op);
    for (const Case& c : cf) {
      EXPECT_TRUE(c.closed_form());
      EXPECT_EQ(c.inputs.size(), c.desc.inputs.size()) << c.id();
      auto outs = infer_outputs(c.desc);
      ASSERT_TRUE(outs.is_ok()) << c.id() << ": " << outs.status().to_string();
      ASSERT_EQ(c.expected.size(), outs->size()) << c.id();
      for (std::size_t i = 0; i < outs->size(); ++i)
        EXPECT_EQ(static_cast<std::int64_t>(c.expected[i].size()), (*outs)[i].shape.numel()) << c.id();
    }
  }
}

// ---- the registry-driven cross-check -------------------------------------------------------

std::vector<std::string> registry_kernel_names() {
  std::vector<std::string> r;
  for (const KernelDef& k : kernels()) r.emplace_back(k.name);
  return r;
}

class CrossCheck : public ::testing::TestWithParam<std::string> {};

// Every registry kernel against its reference: stage kernels against naive, naive kernels
// against oneDNN / Eigen and the closed forms.
TEST_P(CrossCheck, Kernel) {
  // A kernel above the ISA this CPU runs (or OPFUSE_ISA allows) cannot run here: a skip with
  // the reason, as `opfuse check` reports it, never a failure or a silent pass.
  const KernelDef* k = find_kernel(GetParam());
  ASSERT_NE(k, nullptr);
  if (kernel_isa(*k) > effective_isa(Context{}))
    GTEST_SKIP() << GetParam() << " needs " << k->isa << "; this CPU runs " << isa_name(cpu_isa()) << ", capped to "
                 << isa_name(effective_isa(Context{}));
  Options o;
  o.kernel = GetParam();
  o.seed = 1;
  auto s = run_checks(o);
  ASSERT_TRUE(s.is_ok()) << s.status().to_string();
  ASSERT_EQ(s->kernels.size(), 1u);
  EXPECT_GT(s->cases, 0);
  EXPECT_EQ(s->failed, 0) << failures_text(*s);
  EXPECT_GT(s->passed, 0) << "no case of " << GetParam() << " was compared against anything";
}

INSTANTIATE_TEST_SUITE_P(Registry, CrossCheck, ::testing::ValuesIn(registry_kernel_names()),
                         [](const ::testing::TestParamInfo<std::string>& i) { return i.param; });

TEST(NaiveStage, PassesAgainstPeersAndClosedForms) {
  Options o;
  o.stage = Stage::naive;
  o.seed = 2;  // the per-kernel test above runs seed 1
  auto s = run_checks(o, /*keep_results=*/true);
  ASSERT_TRUE(s.is_ok()) << s.status().to_string();
  EXPECT_EQ(s->failed, 0) << failures_text(*s);
  EXPECT_EQ(s->kernels.size(), static_cast<std::size_t>(kOpCount));
  // Every op is validated against something independent: a peer or a closed form.
  std::map<std::string, int> peer_passes, closed_passes;
  for (const CaseResult& r : s->results) {
    if (r.outcome != Outcome::passed) continue;
    const std::string op = r.name.substr(0, r.name.find('/'));
    if (r.reference.rfind("closed form", 0) == 0)
      ++closed_passes[op];
    else if (r.reference.find("__onednn") != std::string::npos || r.reference.find("__eigen") != std::string::npos)
      ++peer_passes[op];
    else
      ADD_FAILURE() << r.name << " was compared against " << r.reference;
  }
  for (OpKind op : all_ops()) {
    const std::string n(op_name(op));
    EXPECT_GT(peer_passes[n] + closed_passes[n], 3) << n << " is barely validated";
  }
  for (const char* n : {"rmsnorm", "attention", "eltwise_chain", "inverted_residual", "global_avgpool"})
    EXPECT_GE(closed_passes[n], 3) << n;
  EXPECT_LT(s->seconds, 60.0);
}

TEST(NaiveStage, NanInfVariantsAreSkippedAgainstPeersWithAReason) {
  Options o;
  o.op = "gemm";
  o.case_filter = "+nan";
  auto s = run_checks(o);
  ASSERT_TRUE(s.is_ok());
  EXPECT_GT(s->skipped, 0);
  EXPECT_EQ(s->failed, 0);
  EXPECT_EQ(s->skip_reasons.count("NaN/Inf semantics differ between libraries"), 1u);
}

TEST(RunChecks, UnknownOpOrKernelIsAnError) {
  Options o;
  o.op = "no_such_op";
  auto s = run_checks(o);
  ASSERT_FALSE(s.is_ok());
  EXPECT_EQ(s.status().code(), StatusCode::invalid_argument);
  EXPECT_NE(s.status().message().find("no_such_op"), std::string::npos);
  Options k;
  k.kernel = "gemm__nope";
  EXPECT_FALSE(run_checks(k).is_ok());
}

TEST(RunChecks, StageWithoutKernelsReportsZeroCasesWithANote) {
  Options o;
  o.stage = Stage::cuda;  // no CUDA kernels in this build (see Registry.NoCudaKernelsInThisBuild)
  auto s = run_checks(o);
  ASSERT_TRUE(s.is_ok());
  EXPECT_EQ(s->cases, 0);
  EXPECT_EQ(s->failed, 0);
  EXPECT_NE(s->note.find("no kernels"), std::string::npos) << s->note;
}

TEST(RunChecks, JsonHasTheSummaryKeys) {
  Options o;
  o.op = "relu";
  auto s = run_checks(o);
  ASSERT_TRUE(s.is_ok());
  const nlohmann::json j = to_json(*s);
  for (const char* key : {"cases", "passed", "failed", "skipped", "kernels", "worst"})
    EXPECT_TRUE(j.contains(key)) << key;
  EXPECT_EQ(j["cases"].get<int>(), s->cases);
  EXPECT_EQ(j["passed"].get<int>() + j["failed"].get<int>() + j["skipped"].get<int>(), s->cases);
  EXPECT_TRUE(j["kernels"].is_array());
  EXPECT_NE(to_text(*s).find("relu__naive"), std::string::npos);
}

// ---- kernels broken on purpose: the checks must go red -----------------------------------------

const KernelDef& naive_of(OpKind op) {
  for (const KernelDef& k : kernels())
    if (k.op == op && k.impl == Impl::naive) return k;
  throw std::logic_error("no naive kernel");
}

// A "simd" kernel that runs the naive one, then breaks its result in some way.
template <void (*Break)(const KernelArgs&)>
KernelDef broken(OpKind op, std::string_view name) {
  KernelDef k = naive_of(op);
  k.impl = Impl::simd;
  k.name = name;
  k.execute = [](const KernelArgs& a) {
    naive_of(a.desc->op).execute(a);
    Break(a);
  };
  return k;
}

void flip_largest_sign(const KernelArgs& a) {
  // The element of largest magnitude: never zero, so the flip always changes the output.
  float* y = a.out[0]->mutable_data();
  std::int64_t at = 0;
  for (std::int64_t i = 1; i < a.out[0]->numel(); ++i)
    if (std::fabs(y[i]) > std::fabs(y[at]) || std::isnan(y[at])) at = i;
  y[at] = -y[at];
}
void scale_1e3(const KernelArgs& a) {
  float* y = a.out[0]->mutable_data();
  for (std::int64_t i = 0; i < a.out[0]->numel(); ++i) y[i] *= 1.f + 1e-3f;
}
void write_past_end(const KernelArgs& a) {
  // Only where the engine put guard floats after the buffer (the +unaligned views), so the
  // test itself stays memory-safe.
  float* y = a.out[0]->mutable_data();
  if (reinterpret_cast<std::uintptr_t>(y) % kAlignment != 0) y[a.out[0]->numel()] = 1.f;
}
void clobber_input(const KernelArgs& a) {
  if (a.in[0]->data() != a.out[0]->data()) const_cast<float*>(a.in[0]->data())[0] = 42.f;
}
void forget_last(const KernelArgs& a) { a.out[0]->mutable_data()[a.out[0]->numel() - 1] = kFloatNaN; }

Summary check_one_kernel(const KernelDef& k) {
  const KernelDef* list[] = {&k};
  Options o;
  o.stage = Stage::simd;
  return check_kernels(list, o);
}

TEST(BrokenKernels, SignFlipIsCaught) {
  const KernelDef k = broken<flip_largest_sign>(OpKind::gemm, "gemm__broken_sign");
  const Summary s = check_one_kernel(k);
  EXPECT_GT(s.cases, 20);
  EXPECT_EQ(s.failed, s.cases) << "every gemm case must catch a sign flip of its largest element";
  ASSERT_FALSE(s.failures.empty());
  EXPECT_FALSE(s.failures[0].cmp.first.empty());
}

TEST(BrokenKernels, RelativeError1e3IsCaughtForEveryOp) {
  for (OpKind op : all_ops()) {
    const KernelDef k = broken<scale_1e3>(op, "broken_scale");
    const Summary s = check_one_kernel(k);
    EXPECT_GT(s.failed, s.cases / 2) << op_name(op) << ": " << s.failed << " of " << s.cases << " cases caught";
  }
}

TEST(BrokenKernels, OutOfBoundsWriteIsCaught) {
  const KernelDef k = broken<write_past_end>(OpKind::relu, "relu__broken_oob");
  const Summary s = check_one_kernel(k);
  ASSERT_GT(s.failed, 0);
  for (const CaseResult& r : s.failures) {
    EXPECT_NE(r.name.find("+unaligned"), std::string::npos) << r.name;
    EXPECT_NE(r.reason.find("wrote outside"), std::string::npos) << r.reason;
  }
}

TEST(BrokenKernels, ModifiedInputIsCaught) {
  const KernelDef k = broken<clobber_input>(OpKind::sigmoid, "sigmoid__broken_input");
  const Summary s = check_one_kernel(k);
  ASSERT_GT(s.failed, 0);
  EXPECT_NE(s.failures[0].reason.find("modified input"), std::string::npos) << s.failures[0].reason;
}

TEST(BrokenKernels, UnwrittenOutputIsCaught) {
  const KernelDef k = broken<forget_last>(OpKind::softmax, "softmax__broken_unwritten");
  const Summary s = check_one_kernel(k);
  // Every case with a finite last element fails; the +nan cases whose last element is NaN anyway may pass.
  EXPECT_GE(s.failed, s.cases - 2);
}

TEST(BrokenKernels, CorrectCopyPassesAndDecliningKernelIsSkipped) {
  KernelDef same = naive_of(OpKind::conv2d);
  same.impl = Impl::simd;
  same.name = "conv2d__same_as_naive";
  Summary s = check_one_kernel(same);
  EXPECT_EQ(s.failed, 0) << failures_text(s);
  EXPECT_EQ(s.passed, s.cases);

  KernelDef none = same;
  none.supports = [](const OpDesc&) { return false; };
  s = check_one_kernel(none);
  EXPECT_EQ(s.failed, 0);
  EXPECT_EQ(s.skipped, s.cases);
  EXPECT_EQ(s.skip_reasons.begin()->first, "kernel declines (supports() is false)");
}

// ---- the Eigen peer, once per ISA -----------------------------------------------------------
// The Eigen rows run the best copy of src/peers/eigen.cpp the CPU allows; every copy it can run
// is checked here against naive through the same engine (the rows' entry points swapped for the
// copy's), so an AVX-512 machine also proves the AVX2 and SSE2 peers it would hand to other CPUs.
struct EigenCopy {
  const char* name;
  const peers::eigen::Variant* v;
};
class EigenPerIsa : public ::testing::TestWithParam<EigenCopy> {};

TEST_P(EigenPerIsa, GemmAndConvMatchNaive) {
  const peers::eigen::Variant& v = *GetParam().v;
  if (v.isa > cpu_isa())
    GTEST_SKIP() << "Eigen " << GetParam().name << " cannot run here: this CPU runs " << isa_name(cpu_isa());
  KernelDef gemm = *peers::find("gemm__eigen"), conv = *peers::find("conv2d__eigen");
  gemm.supports = v.supports_gemm, gemm.workspace = v.gemm_workspace, gemm.execute = v.gemm;
  conv.supports = v.supports_conv2d, conv.workspace = v.conv2d_workspace, conv.execute = v.conv2d;
  const KernelDef* ks[] = {&gemm, &conv};
  Options o;
  o.seed = 3;
  const Summary s = check_kernels(ks, o);
  EXPECT_EQ(s.failed, 0) << failures_text(s);
  ASSERT_EQ(s.kernels.size(), 2u);
  for (const KernelSummary& k : s.kernels) EXPECT_GT(k.passed, 10) << k.kernel << " was barely compared";
}

// The copies this build compiled: the kernels' ISAs (OPFUSE_SIMD_ISAS) and SSE2.
const EigenCopy kEigenCopies[] = {
#if OPFUSE_BUILT_avx512
    EigenCopy{"avx512", &peers::eigen::isa_avx512::variant},
#endif
#if OPFUSE_BUILT_avx2
    EigenCopy{"avx2", &peers::eigen::isa_avx2::variant},
#endif
    EigenCopy{"sse2", &peers::eigen::isa_sse2::variant}};
INSTANTIATE_TEST_SUITE_P(Peers, EigenPerIsa, ::testing::ValuesIn(kEigenCopies),
                         [](const ::testing::TestParamInfo<EigenCopy>& i) { return std::string(i.param.name); });

}  // namespace
}  // namespace opfuse::check
