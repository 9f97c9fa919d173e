// tests/test_numerics.cpp - NaN and Inf propagate the same way in every stage (issue 19, point 5).
//
// The contract is the naive kernel (naive/*.cpp documents each op's rules); every other kernel
// of the registry that this CPU (and OPFUSE_ISA) can run must agree with it element by element:
// NaN exactly where naive has NaN, +Inf / -Inf exactly where naive has them, and the normal
// tolerance of `opfuse check` (check::compare, check::tolerance) everywhere else. "The same way"
// means, per op (IEEE 754 arithmetic on the formula naive writes down, plus these rules):
//   gemm, conv2d      a NaN term makes its dot product NaN; Inf * 0 is NaN; +Inf + -Inf is NaN.
//                     conv2d padding is an input of value 0 multiplied in like any other (ONNX:
//                     pad with zeros, then convolve), so a NaN or Inf weight tap that meets
//                     padding makes that output NaN (0 * NaN, 0 * Inf), as it does inside.
//                     beta == 0 never reads y.
//   batchnorm         scale * (x - mean) / sqrt(var + eps) + bias, elementwise IEEE; NaN in any
//                     channel vector makes that channel NaN.
//   relu, clip, leaky_relu, hardswish
//                     NaN in, NaN out (never the bound of a max/min); relu(+-Inf) = +Inf / 0,
//                     clip(+-Inf) = its bounds, leaky_relu(-Inf) = -Inf (slope > 0).
//   sigmoid, tanh, gelu, silu
//                     NaN in, NaN out; the limits at +-Inf: sigmoid 1 / 0, tanh +-1,
//                     gelu(+Inf) = +Inf and gelu(-Inf) = -Inf * 0 = NaN (the formula's
//                     0.5 x (1 + erf(x / sqrt 2))), silu(+Inf) = +Inf, silu(-Inf) = NaN.
//   add sub mul div   plain IEEE: Inf - Inf, 0 * Inf, Inf / Inf, 0 / 0 are NaN.
//   maxpool2d         NaN in the window wins; padding is ignored (never a 0 or a -Inf term);
//                     +Inf wins over every finite value.
//   avgpool2d, global_avgpool
//                     a sum: NaN or both Infs in the window give NaN, one Inf sign gives that Inf.
//   softmax           a row with NaN (in x, the mask, or scale * Inf) is all NaN; a row with +Inf
//                     is all NaN (+Inf - +Inf); -Inf elements get weight 0; a row whose every
//                     element is -Inf (fully masked) is all 0.
//   layernorm, rmsnorm
//                     a NaN or Inf in a row's s = x + residual makes that whole row NaN (the mean
//                     or mean square is Inf or NaN, and Inf - Inf / Inf / Inf follow); the sum
//                     output is the elementwise IEEE sum. NaN in scale or bias reaches only
//                     its column.
//   attention         like softmax per query row over the visible keys: NaN in a visible score
//                     (from q, k or the mask) makes that query's output row NaN; a +Inf score
//                     too; -Inf mask entries get weight 0 (and, as naive multiplies them in,
//                     0 * NaN in V is NaN); a query whose visible scores are all -Inf outputs 0;
//                     causally hidden keys are never read.
//   inverted_residual, eltwise_chain
//                     the composition of the rules above, step by step.
// Outside the contract (not planted here): Inf in a batchnorm's scale, bias, mean or var, the
// standalone op's and the post-op's alike. Every fast kernel folds a batchnorm into
// a = scale / sqrt(var + eps) and b = bias - mean * a (and conv2d folds `a` into its weights), so
// x * a + b is Inf - Inf = NaN where naive's scale * (x - mean) is Inf. NaN in those vectors is
// planted (NaN propagates through any algebra).
//
// How: for every op, every case of the check engine (check::make_cases: tails, tiles, layouts,
// post-op chains, masks, causal, packed QKV), the case's normal inputs with values planted into
// one input at a time, at a few positions (first, middle, last element): NaN, +Inf, -Inf, and a
// +Inf / -Inf pair. Softmax and attention also get a fully masked row (a row of -Inf in x or the
// mask). Naive's output is the expectation.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <limits>
#include <string>
#include <vector>

#include "check/check.hpp"
#include "op_samples.hpp"
#include "opfuse/opfuse.hpp"
#include "sanitized.hpp"
#include "src/denormal.hpp"

namespace opfuse {
namespace {

using check::Case;

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

// One way of planting special values into the inputs of a case.
struct Plant {
  std::string what;  // "NaN in w", for the failure message
  std::vector<std::vector<float>> inputs;
};

bool ends_with(const std::string& s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// Inputs of folded batchnorms: Inf there is outside the contract (see the top of this file).
bool is_bn_vector(const OpDesc& d, const std::string& name) {
  if (d.op == OpKind::batchnorm) return name != "x";
  return ends_with(name, ".scale") || ends_with(name, ".bias") || ends_with(name, ".mean") || ends_with(name, ".var") ||
         name.rfind("bn", 0) == 0;
}

// The last-dim rows of a logical (row-major) tensor: sets row r (of length shape[rank-1]) to v.
void fill_row(std::vector<float>& t, const Shape& s, std::int64_t r, float v) {
  const std::int64_t n = s[s.rank - 1];
  if ((r + 1) * n > static_cast<std::int64_t>(t.size())) return;
  for (std::int64_t j = 0; j < n; ++j) t[static_cast<std::size_t>(r * n + j)] = v;
}

// OPFUSE_LONG_TESTS=1: every value into every input. Otherwise (the default, a minute on two
// cores) x gets all four plantings, the other inputs NaN and +Inf (-Inf takes the same paths
// through a kernel as +Inf), and of each batchnorm only var.
std::vector<Plant> plantings(const Case& c, const std::vector<std::vector<float>>& base) {
  std::vector<Plant> r;
  const bool all = opfuse::testing::long_tests();
  const OpDesc& d = c.desc;
  const auto names = input_names(d);
  for (std::size_t i = 0; i < base.size(); ++i) {
    const std::size_t n = base[i].size();
    if (n == 0) continue;
    // x: first, middle and last; other inputs: middle and last (one position per vector-sized
    // chunk is enough: the first element of x is kept positive by make_inputs for rectifiers).
    std::vector<std::size_t> at = i == 0 ? std::vector<std::size_t>{0, n / 2, n - 1} : std::vector<std::size_t>{n / 2};
    if (i > 0 && n > 1) at.push_back(n - 1);
    const bool inf_ok = !is_bn_vector(d, names[i]);
    // Quick mode: of a batchnorm's four vectors only var (all four fold into the same a and b).
    if (!all && !inf_ok && !ends_with(names[i], "var")) continue;
    auto add = [&](const std::string& what, auto&& set) {
      Plant p{what + " in " + names[i], base};
      set(p.inputs[i]);
      r.push_back(std::move(p));
    };
    add("NaN", [&](std::vector<float>& t) {
      for (std::size_t k : at) t[k] = kNaN;
    });
    if (!inf_ok) continue;
    add("+Inf", [&](std::vector<float>& t) {
      for (std::size_t k : at) t[k] = kInf;
    });
    if (!all && i > 0) continue;
    add("-Inf", [&](std::vector<float>& t) {
      for (std::size_t k : at) t[k] = -kInf;
    });
    if (n > 2)
      add("+Inf/-Inf pair", [&](std::vector<float>& t) {
        t[n / 3] = kInf;
        t[n - 1] = -kInf;
      });
  }
  // Fully masked rows: softmax over the last axis (a row of x, or of the mask), attention (a
  // query row of the mask).
  const bool softmax_last = d.op == OpKind::softmax && (d.p<SoftmaxParams>().axis == -1 ||
                                                        d.p<SoftmaxParams>().axis == d.inputs[0].shape.rank - 1);
  if (softmax_last) {
    Plant p{"a row of -Inf in x", base};
    fill_row(p.inputs[0], d.inputs[0].shape, 0, -kInf);
    r.push_back(std::move(p));
  }
  const bool has_mask = (d.op == OpKind::softmax && d.p<SoftmaxParams>().has_mask) ||
                        (d.op == OpKind::attention && d.p<AttentionParams>().has_mask);
  if (has_mask && (d.op == OpKind::attention || softmax_last)) {
    const std::size_t m = d.op == OpKind::softmax ? 1 : 3;
    Plant p{"a fully masked row (-Inf) in the mask", base};
    fill_row(p.inputs[m], d.inputs[m].shape, 0, -kInf);
    r.push_back(std::move(p));
  }
  return r;
}

const KernelDef* naive_of(OpKind op) {
  for (const KernelDef& k : kernels())
    if (k.op == op && k.impl == Impl::naive) return &k;
  return nullptr;
}

bool runnable(const KernelDef& k, const OpDesc& d) {
  if (k.impl == Impl::naive || !is_stage(k.impl) || k.impl == Impl::cuda) return false;
  if (kernel_isa(k) > effective_isa(Context{})) return false;
  return !k.supports || k.supports(d);
}

std::string describe(const check::CompareResult& cr) {
  std::string s = cr.reason;
  for (const check::Mismatch& m : cr.first) s += fmt::format(" [{}] out {} ref {};", m.index, m.out, m.ref);
  return s;
}

class NanInf : public ::testing::TestWithParam<OpKind> {};

TEST_P(NanInf, EveryKernelFollowsNaive) {
  const OpKind op = GetParam();
  const KernelDef* naive = naive_of(op);
  ASSERT_NE(naive, nullptr);
  int compared = 0, failed = 0;
  for (Case c : check::make_cases(op, 1)) {
    std::vector<const KernelDef*> ks;
    for (const KernelDef& k : kernels())
      if (k.op == op && runnable(k, c.desc)) ks.push_back(&k);
    if (ks.empty()) continue;
    // Plant into the case's normal data; the engine's own +nan/+inf planting is replaced.
    c.variants &= ~(check::kNan | check::kInf | check::kUnaligned | check::kInplace);
    c.expected.clear();
    const auto base = check::make_inputs(c, 1);
    const check::Tolerance tol = check::tolerance(c.desc);
    for (const Plant& p : plantings(c, base)) {
      Case pc = c;
      pc.inputs = p.inputs;
      auto ref = check::run_case(*naive, pc, 1, false);
      ASSERT_TRUE(ref.is_ok()) << ref.status().to_string();
      for (const KernelDef* k : ks) {
        auto got = check::run_case(*k, pc, 1, /*with_variants=*/true);  // +const: bound at prepare
        ASSERT_TRUE(got.is_ok()) << k->name << ": " << got.status().to_string();
        ++compared;
        for (std::size_t o = 0; o < ref->size(); ++o) {
          const check::CompareResult cr = check::compare((*got)[o], (*ref)[o], tol);
          if (cr.mismatches == 0 && cr.count == static_cast<std::int64_t>((*ref)[o].size())) continue;
          ++failed;
          ADD_FAILURE() << k->name << " on " << c.id() << " with " << p.what << ", output " << o << ": "
                        << describe(cr);
          break;
        }
      }
    }
  }
  RecordProperty("compared", compared);
  if (compared == 0) GTEST_SKIP() << "no kernel of " << op_name(op) << " beyond naive runs here";
  EXPECT_EQ(failed, 0) << failed << " of " << compared << " runs disagree with naive";
}

INSTANTIATE_TEST_SUITE_P(Numerics, NanInf, ::testing::ValuesIn(testing::all_ops()),
                         [](const ::testing::TestParamInfo<OpKind>& i) { return std::string(op_name(i.param)); });

// ---- denormals: the flush-to-zero policy of src/denormal.hpp ----------------------------------

constexpr float kTiny = 0x1p-130f;  // |x| * kTiny is denormal for |x| <= 1

// Inputs that carry data (scaled into the denormal range), not weights or multiplicative
// parameters (which stay normal, so products and sums of the data are denormal too).
bool carries_data(const OpDesc& d, std::size_t i, const std::string& name) {
  if (i == 0) return true;
  if (d.op == OpKind::attention) return name == "v";
  if (ends_with(name, "var") || ends_with(name, "scale")) return false;
  return ends_with(name, "bias") || ends_with(name, "mean") || ends_with(name, "add") || ends_with(name, "sub") ||
         name == "residual" || (is_binary(d.op) && i == 1 && (d.op == OpKind::add || d.op == OpKind::sub));
}

// Under the policy (the default) every stage reads denormal inputs as zeros and flushes
// denormal results, naive included, so the stages agree with the normal tolerance - on every
// thread of a team (a worker that missed the policy would compute the denormals).
TEST_P(NanInf, DenormalInputsAgreeAcrossStages) {
  ASSERT_TRUE(detail::flush_denormals());
  const OpKind op = GetParam();
  const KernelDef* naive = naive_of(op);
  int compared = 0, failed = 0;
  for (Case c : check::make_cases(op, 1)) {
    std::vector<const KernelDef*> ks;
    for (const KernelDef& k : kernels())
      if (k.op == op && runnable(k, c.desc)) ks.push_back(&k);
    if (ks.empty()) continue;
    c.variants &= ~(check::kNan | check::kInf | check::kUnaligned | check::kInplace);
    c.expected.clear();
    auto in = check::make_inputs(c, 1);
    const auto names = input_names(c.desc);
    for (std::size_t i = 0; i < in.size(); ++i)
      if (carries_data(c.desc, i, names[i]))
        for (float& v : in[i]) v *= kTiny;
    c.inputs = in;
    auto ref = check::run_case(*naive, c, 1, false);
    ASSERT_TRUE(ref.is_ok()) << ref.status().to_string();
    for (const KernelDef* k : ks) {
      auto got = check::run_case(*k, c, 1, false);
      ASSERT_TRUE(got.is_ok()) << k->name << ": " << got.status().to_string();
      ++compared;
      for (std::size_t o = 0; o < ref->size(); ++o) {
        const check::CompareResult cr = check::compare((*got)[o], (*ref)[o], check::tolerance(c.desc));
        if (cr.mismatches == 0 && cr.count == static_cast<std::int64_t>((*ref)[o].size())) continue;
        ++failed;
        ADD_FAILURE() << k->name << " on " << c.id() << " with denormal data, output " << o << ": " << describe(cr);
        break;
      }
    }
  }
  if (compared == 0) GTEST_SKIP() << "no kernel of " << op_name(op) << " beyond naive runs here";
  EXPECT_EQ(failed, 0) << failed << " of " << compared << " runs disagree with naive";
}

// A gemm big enough to run on a team of threads: a (M, K) denormal, b (K, N) normal, so every
// product is denormal; each thread computes some rows of y.
struct ThreadedGemm {
  static constexpr std::int64_t M = 192, N = 192, K = 64;
  OpDesc desc{OpKind::gemm, GemmParams{}, {{Shape{M, K}}, {Shape{K, N}}}};
  Tensor a = Tensor::create(Shape{M, K}).value(), b = Tensor::create(Shape{K, N}).value(),
         y = Tensor::create(Shape{M, N}).value();
  ThreadedGemm() {
    for (std::int64_t i = 0; i < M * K; ++i) a.mutable_data()[i] = (1.f + static_cast<float>(i % 7)) * kTiny;
    for (std::int64_t i = 0; i < K * N; ++i) b.mutable_data()[i] = i % 5 == 0 ? 0.25f : 0.f;
  }
  // Rows of y holding any non-zero element.
  std::int64_t nonzero_rows() const {
    std::int64_t rows = 0;
    for (std::int64_t i = 0; i < M; ++i) {
      bool any = false;
      for (std::int64_t j = 0; j < N; ++j) any |= y.data()[i * N + j] != 0.f;
      rows += any;
    }
    return rows;
  }
};

Context two_threads(Stage s) {
  Context ctx;
  ctx.stage = s;
  ctx.threads = 2;
  return ctx;
}

// The caller's MXCSR control bits (rounding mode, exception masks, FTZ, DAZ) come back exactly
// after every execute; the policy is on inside, on the caller's thread and the workers'.
TEST(NumericsDenormal, CallerMxcsrIsRestoredAndWorkersFlush) {
#if defined(__x86_64__) || defined(_M_X64)
  ThreadedGemm g;
  const unsigned saved = detail::read_mxcsr();
  // Round toward +inf (bits 13-14 = 10), FTZ and DAZ off, all exceptions masked, flags clear.
  const unsigned known = 0x1F80u | 0x4000u;
  for (Stage s : {Stage::naive, Stage::simd, Stage::fused}) {
    SCOPED_TRACE(std::string(stage_name(s)));
    auto prim = prepare(g.desc, two_threads(s));
    ASSERT_TRUE(prim.is_ok()) << prim.status().to_string();
    detail::write_mxcsr(known);
    const Status st = prim->execute({&g.a, &g.b}, {&g.y});
    const unsigned after = detail::read_mxcsr();
    detail::write_mxcsr(saved);
    ASSERT_TRUE(st.is_ok()) << st.to_string();
    EXPECT_EQ(after & ~detail::kMxcsrFlags, known & ~detail::kMxcsrFlags) << std::hex << after;
    // DAZ inside: the denormal a reads as zero on every thread, so y is all zero.
    EXPECT_EQ(g.nonzero_rows(), 0) << prim->kernel().name << " computed denormals on some thread";
  }
#else
  GTEST_SKIP() << "MXCSR is x86-64 only";
#endif
}

// With the policy switched off (what `opfuse denormals` measures as IEEE) no thread flushes:
// the workers got their own MXCSR back after the previous calls' parallel regions.
TEST(NumericsDenormal, WorkersGetTheirMxcsrBack) {
#if defined(__x86_64__) || defined(_M_X64)
  ThreadedGemm g;
  for (Stage s : {Stage::simd, Stage::fused}) {
    SCOPED_TRACE(std::string(stage_name(s)));
    auto prim = prepare(g.desc, two_threads(s));
    ASSERT_TRUE(prim.is_ok()) << prim.status().to_string();
    ASSERT_TRUE(prim->execute({&g.a, &g.b}, {&g.y}).is_ok());  // policy on: workers flush
    EXPECT_EQ(g.nonzero_rows(), 0);
    detail::set_flush_denormals(false);
    const Status st = prim->execute({&g.a, &g.b}, {&g.y});
    detail::set_flush_denormals(true);
    ASSERT_TRUE(st.is_ok()) << st.to_string();
    EXPECT_EQ(g.nonzero_rows(), ThreadedGemm::M) << prim->kernel().name << ": a thread still flushes denormals";
  }
#else
  GTEST_SKIP() << "MXCSR is x86-64 only";
#endif
}

}  // namespace
}  // namespace opfuse
