// tests/test_primitive.cpp - prepare/execute contracts: constant inputs bound at prepare,
// ISA caps, thread counts, and outputs left untouched on error.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "op_samples.hpp"
#include "opfuse/opfuse.hpp"

namespace opfuse::testing {
namespace {

// The gemm sample with deterministic, non-trivial data (op_samples.hpp's bind()).
Bound gemm_case() { return bind(sample_desc(OpKind::gemm)); }

std::vector<float> values(const Tensor& t) { return std::vector<float>(t.data(), t.data() + t.numel()); }

TEST(Constants, BoundWeightsGiveTheSameResultAsRuntimeWeights) {
  Bound ref = gemm_case(), bound = gemm_case();
  auto p1 = prepare(ref.desc, Context{Stage::naive});
  ASSERT_TRUE(p1) << p1.status().to_string();
  ASSERT_TRUE(p1->execute(ref.in_ptrs(), ref.out_ptrs()));

  std::vector<const Tensor*> constants(bound.in.size(), nullptr);
  constants[1] = &bound.in[1];  // b is the weights
  auto p2 = prepare(bound.desc, Context{}, constants);
  ASSERT_TRUE(p2) << p2.status().to_string();
  auto in = bound.in_ptrs();
  in[1] = nullptr;  // bound at prepare: pass nullptr ...
  ASSERT_TRUE(p2->execute(in, bound.out_ptrs()));
  const auto first = values(bound.out[0]);
  in[1] = &bound.in[1];  // ... or the very same tensor
  ASSERT_TRUE(p2->execute(in, bound.out_ptrs()));
  const auto second = values(bound.out[0]);
  const auto want = values(ref.out[0]);
  ASSERT_EQ(first.size(), want.size());
  for (std::size_t i = 0; i < want.size(); ++i) {
    EXPECT_NEAR(first[i], want[i], 1e-4f * (1.f + std::fabs(want[i]))) << i;
    EXPECT_EQ(first[i], second[i]) << i;
  }
}

TEST(Constants, ADifferentTensorForABoundInputIsRejectedAndOutputUntouched) {
  Bound b = gemm_case();
  std::vector<const Tensor*> constants(b.in.size(), nullptr);
  constants[1] = &b.in[1];
  auto p = prepare(b.desc, Context{}, constants);
  ASSERT_TRUE(p);
  Tensor other = b.in[1].clone().value();
  auto in = b.in_ptrs();
  in[1] = &other;
  Status s = p->execute(in, b.out_ptrs());
  EXPECT_EQ(s.code(), StatusCode::invalid_argument);
  EXPECT_NE(s.message().find("gemm: input 'b' was bound as a constant"), std::string::npos) << s.message();
  EXPECT_EQ(touched(b.out[0]), 0);
}

TEST(Constants, NullptrForAnUnboundInputIsRejected) {
  Bound b = gemm_case();
  auto p = prepare(b.desc);
  ASSERT_TRUE(p);
  auto in = b.in_ptrs();
  in[1] = nullptr;
  Status s = p->execute(in, b.out_ptrs());
  EXPECT_EQ(s.code(), StatusCode::invalid_argument);
  EXPECT_NE(s.message().find("input 'b' is a null pointer"), std::string::npos) << s.message();
}

TEST(Constants, WrongCountOrShapeIsRejectedAtPrepare) {
  Bound b = gemm_case();
  std::vector<const Tensor*> too_few = {&b.in[0]};
  auto p = prepare(b.desc, Context{}, too_few);
  ASSERT_FALSE(p);
  EXPECT_EQ(p.status().code(), StatusCode::invalid_argument);
  EXPECT_NE(p.status().message().find("constants has 1 entries"), std::string::npos) << p.status().message();

  Tensor wrong = Tensor::create({3, 3}).value();
  std::vector<const Tensor*> constants(b.in.size(), nullptr);
  constants[1] = &wrong;
  auto q = prepare(b.desc, Context{}, constants);
  ASSERT_FALSE(q);
  EXPECT_EQ(q.status().code(), StatusCode::invalid_argument);
  EXPECT_NE(q.status().message().find("constant input 'b' is 3x3"), std::string::npos) << q.status().message();
}

TEST(Isa, NamesRoundTripAndTheCpuLevelIsKnown) {
  for (Isa i : {Isa::scalar, Isa::sse2, Isa::avx2, Isa::avx512}) EXPECT_EQ(isa_from_name(isa_name(i)), i);
  EXPECT_FALSE(isa_from_name("avx1024"));
#if defined(__x86_64__)
  EXPECT_GE(cpu_isa(), Isa::sse2);
#endif
}

// The emulated-CPU runs (CMakeLists.txt: qemu-x86_64 -cpu Haswell / Nehalem) set
// OPFUSE_EXPECT_CPU_ISA to the level that CPU has, so a run that silently went native (or an
// emulator that exposes more than asked) fails here instead of proving nothing.
TEST(Isa, CpuLevelIsTheOneThisRunExpects) {
  const char* want = std::getenv("OPFUSE_EXPECT_CPU_ISA");
  if (!want || !*want) GTEST_SKIP() << "OPFUSE_EXPECT_CPU_ISA not set: this CPU runs " << isa_name(cpu_isa());
  const auto isa = isa_from_name(want);
  ASSERT_TRUE(isa.has_value()) << "OPFUSE_EXPECT_CPU_ISA=" << want;
  EXPECT_EQ(cpu_isa(), *isa) << "cpu_isa() is " << isa_name(cpu_isa()) << ", the run expects " << want;
}

TEST(Isa, ContextCapLimitsSelectionForEveryOp) {
  for (OpKind op : all_ops()) {
    const OpDesc d = sample_desc(op);
    for (Isa cap : {Isa::scalar, Isa::sse2, Isa::avx2, Isa::avx512}) {
      Context ctx;
      ctx.max_isa = cap;
      const KernelDef* k = select_kernel(d, ctx);
      ASSERT_NE(k, nullptr) << op_name(op);  // naive always remains
      EXPECT_LE(kernel_isa(*k), effective_isa(ctx)) << k->name;
    }
    Context scalar_only;
    scalar_only.max_isa = Isa::scalar;
    EXPECT_EQ(select_kernel(d, scalar_only)->impl, Impl::naive) << op_name(op);
  }
}

TEST(Isa, PrepareKernelRefusesAKernelAboveTheCap) {
  for (const KernelDef& k : kernels()) {
    if (kernel_isa(k) <= Isa::sse2) continue;
    Context ctx;
    ctx.max_isa = Isa::sse2;
    auto p = prepare_kernel(sample_desc(k.op), k, ctx);
    ASSERT_FALSE(p) << k.name;
    EXPECT_EQ(p.status().code(), StatusCode::unsupported) << k.name;
    EXPECT_NE(p.status().message().find("needs"), std::string::npos) << p.status().message();
    return;  // one is enough; every row goes through the same check
  }
  GTEST_SKIP() << "no kernel above sse2 registered";
}

TEST(ContextErrors, BadFieldsAreInvalidArguments) {
  const OpDesc d = sample_desc(OpKind::relu);
  Context neg;
  neg.threads = -1;
  auto a = prepare(d, neg);
  ASSERT_FALSE(a);
  EXPECT_EQ(a.status().code(), StatusCode::invalid_argument);
  EXPECT_NE(a.status().message().find("relu: context threads -1"), std::string::npos) << a.status().message();
  Context isa;
  isa.max_isa = static_cast<Isa>(42);
  auto b = prepare(d, isa);
  ASSERT_FALSE(b);
  EXPECT_EQ(b.status().code(), StatusCode::invalid_argument);
}

// Every kernel gives the same answer with 1 and 2 threads (threading must not change results
// beyond reassociation; for these small samples it must not change them at all for naive).
TEST(Threads, ResultsDoNotDependOnTheThreadCount) {
  for (const KernelDef& k : kernels()) {
    if (kernel_isa(k) > effective_isa(Context{})) continue;
    OpDesc d = sample_desc(k.op);
    if (k.supports && !k.supports(d)) continue;
    std::vector<float> results[2];
    for (int t = 1; t <= 2; ++t) {
      Bound b = bind(d);
      Context ctx;
      ctx.threads = t;
      auto p = prepare_kernel(d, k, ctx);
      ASSERT_TRUE(p) << k.name << ": " << p.status().to_string();
      ASSERT_TRUE(p->execute(b.in_ptrs(), b.out_ptrs())) << k.name;
      results[t - 1] = values(b.out[0]);
    }
    ASSERT_EQ(results[0].size(), results[1].size());
    for (std::size_t i = 0; i < results[0].size(); ++i)
      ASSERT_NEAR(results[0][i], results[1][i], 1e-5f * (1.f + std::fabs(results[0][i]))) << k.name << " at " << i;
  }
}

// The attention cost counts the scores the kernels compute: under a causal mask a query sees
// keys [0, i + 1 + Skv - Sq), so Sq == Skv == S sees S (S + 1) / 2 of the S^2, and a query suffix
// (Sq = 2 of Skv = 5) sees 4 + 5.
TEST(OpCost, CausalAttentionCountsTheVisibleScores) {
  auto desc = [](std::int64_t sq, std::int64_t skv, bool causal) {
    AttentionParams p;
    p.causal = causal;
    return OpDesc{OpKind::attention,
                  p,
                  {TensorDesc{Shape{1, 2, sq, 8}}, TensorDesc{Shape{1, 2, skv, 8}}, TensorDesc{Shape{1, 2, skv, 8}}}};
  };
  const auto per_score = [&](std::int64_t sq, std::int64_t skv) {
    return op_cost(desc(sq, skv, false)).flops / (2.0 * sq * skv);
  };
  const double unit = per_score(6, 6);
  EXPECT_DOUBLE_EQ(per_score(3, 7), unit);
  EXPECT_DOUBLE_EQ(op_cost(desc(6, 6, true)).flops, unit * 2 * 21);
  EXPECT_DOUBLE_EQ(op_cost(desc(2, 5, true)).flops, unit * 2 * 9);
}

}  // namespace
}  // namespace opfuse::testing
