// tests/test_registry.cpp - the kernel table: coverage, naming, selection and fallback.
//
// EveryOpHasANaiveKernel is the test that fails when an op is registered (OpKind, op_name)
// without a naive kernel. Selection expectations are computed from the table itself and from
// the ISA this CPU runs (effective_isa: an AVX2 machine selects the avx2 rows, which the table
// lists after the avx512 ones), so they hold on every x86-64 CPU level and on any table.
#include <gtest/gtest.h>

#include <set>
#include <string>

#include "op_samples.hpp"
#include "opfuse/opfuse.hpp"
#include "peers/peers.hpp"

namespace opfuse {
namespace {

using testing::all_ops;
using testing::sample_desc;

std::string op_str(OpKind op) { return std::string(op_name(op)); }

// The first row of `op` and `impl` (best-first order) that this CPU (capped by OPFUSE_ISA and
// ctx.max_isa) can run and whose supports() accepts desc.
const KernelDef* first_row(const OpDesc& desc, Impl impl, const Context& ctx) {
  for (const KernelDef& k : kernels())
    if (k.op == desc.op && k.impl == impl && kernel_isa(k) <= effective_isa(ctx) && (!k.supports || k.supports(desc)))
      return &k;
  return nullptr;
}

bool has_rows(OpKind op, Impl impl) {
  for (const KernelDef& k : kernels())
    if (k.op == op && k.impl == impl) return true;
  return false;
}

// ---- op names ------------------------------------------------------------------------------

TEST(OpNames, RoundTripForAllOps) {
  static_assert(kOpCount == 24, "a new op needs naive, validation, error tests and bench cases");
  std::set<std::string> seen;
  for (OpKind op : all_ops()) {
    const std::string name = op_str(op);
    EXPECT_FALSE(name.empty());
    EXPECT_NE(name, "unknown");
    EXPECT_TRUE(seen.insert(name).second) << "duplicate op name " << name;
    const auto back = op_from_name(name);
    ASSERT_TRUE(back.has_value()) << name;
    EXPECT_EQ(*back, op) << name;
  }
  EXPECT_EQ(seen.size(), 24u);
  EXPECT_FALSE(op_from_name("no_such_op").has_value());
  EXPECT_FALSE(op_from_name("").has_value());
  EXPECT_FALSE(op_from_name("Gemm").has_value());
  EXPECT_EQ(op_name(static_cast<OpKind>(kOpCount)), "unknown");
}

TEST(OpNames, UnaryAndBinaryFamilies) {
  int unary = 0, binary = 0;
  for (OpKind op : all_ops()) {
    unary += is_unary(op);
    binary += is_binary(op);
    EXPECT_FALSE(is_unary(op) && is_binary(op)) << op_str(op);
  }
  EXPECT_EQ(unary, 8);
  EXPECT_EQ(binary, 4);
  EXPECT_TRUE(is_unary(OpKind::relu) && is_unary(OpKind::hardswish));
  EXPECT_TRUE(is_binary(OpKind::add) && is_binary(OpKind::div));
}

TEST(StageNames, RoundTrip) {
  for (int i = 0; i < kStageCount; ++i) {
    const auto s = static_cast<Stage>(i);
    const auto back = stage_from_name(stage_name(s));
    ASSERT_TRUE(back.has_value()) << stage_name(s);
    EXPECT_EQ(*back, s);
    EXPECT_EQ(stage_name(s), impl_name(impl_of(s)));
    EXPECT_TRUE(is_stage(impl_of(s)));
  }
  EXPECT_EQ(stage_name(Stage::naive), "naive");
  EXPECT_EQ(stage_name(Stage::simd), "simd");
  EXPECT_EQ(stage_name(Stage::fused), "fused");
  EXPECT_EQ(stage_name(Stage::cuda), "cuda");
  EXPECT_EQ(impl_name(Impl::onednn), "onednn");
  EXPECT_EQ(impl_name(Impl::eigen), "eigen");
  EXPECT_FALSE(is_stage(Impl::onednn));
  EXPECT_FALSE(is_stage(Impl::eigen));
  EXPECT_FALSE(stage_from_name("onednn").has_value());
  EXPECT_FALSE(stage_from_name("").has_value());
}

// ---- the table -----------------------------------------------------------------------------

TEST(Registry, EveryOpHasANaiveKernel) {
  for (OpKind op : all_ops()) {
    int naive = 0;
    for (const KernelDef& k : kernels()) {
      if (k.op != op || k.impl != Impl::naive) continue;
      ++naive;
      // The naive kernel is the contract: it accepts every valid problem.
      EXPECT_EQ(k.supports, nullptr) << k.name << " must accept every valid desc";
      EXPECT_NE(k.execute, nullptr) << k.name;
      EXPECT_EQ(k.name, op_str(op) + "__naive");
      EXPECT_EQ(k.isa, "scalar") << k.name;
    }
    EXPECT_EQ(naive, 1) << "op " << op_str(op) << " needs exactly one naive kernel, has " << naive;
  }
}

// Checks one row: `<op>__<impl>` then nothing or `_<isa/tile...>`, with matching fields.
void expect_well_formed(const KernelDef& k) {
  SCOPED_TRACE(std::string(k.name));
  const std::string prefix = op_str(k.op) + "__" + std::string(impl_name(k.impl));
  const std::string name(k.name);
  EXPECT_TRUE(name == prefix || name.rfind(prefix + "_", 0) == 0)
      << "kernel name must be " << prefix << "[_isa_tile], op " << op_str(k.op) << ", impl " << impl_name(k.impl);
  EXPECT_LT(static_cast<int>(k.op), kOpCount);
  EXPECT_NE(op_name(k.op), "unknown");
  EXPECT_NE(k.execute, nullptr);
  EXPECT_FALSE(k.isa.empty());
  EXPECT_FALSE(k.summary.empty());
  for (char c : name) EXPECT_TRUE((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_') << "char " << c;
}

TEST(Registry, NamesAreWellFormedAndUnique) {
  ASSERT_FALSE(kernels().empty());
  std::set<std::string_view> names;
  for (const KernelDef& k : kernels()) {
    expect_well_formed(k);
    EXPECT_TRUE(is_stage(k.impl)) << k.name << ": peer kernels belong in opfuse_peers";
    EXPECT_TRUE(names.insert(k.name).second) << "duplicate kernel name " << k.name;
  }
  for (const KernelDef& k : peers::kernels()) {
    expect_well_formed(k);
    EXPECT_FALSE(is_stage(k.impl)) << k.name << ": opfuse stages belong in the opfuse table";
    EXPECT_TRUE(names.insert(k.name).second) << "duplicate kernel name " << k.name;
  }
}

TEST(Registry, RowsOfOneOpAndStageAreContiguous) {
  // Best-first order only means something if an (op, impl) group is not split by others.
  std::set<std::pair<int, int>> closed;
  std::pair<int, int> current{-1, -1};
  for (const KernelDef& k : kernels()) {
    const std::pair<int, int> key{static_cast<int>(k.op), static_cast<int>(k.impl)};
    if (key == current) continue;
    EXPECT_EQ(closed.count(key), 0u) << k.name << " is separated from the other rows of its op and stage";
    if (current.first >= 0) closed.insert(current);
    current = key;
  }
}

TEST(Registry, FindKernelByName) {
  for (const KernelDef& k : kernels()) EXPECT_EQ(find_kernel(k.name), &k) << k.name;
  EXPECT_EQ(find_kernel("no_such_kernel"), nullptr);
  EXPECT_EQ(find_kernel(""), nullptr);
  EXPECT_EQ(find_kernel("gemm"), nullptr);
  for (const KernelDef& k : peers::kernels()) {
    EXPECT_EQ(peers::find(k.name), &k) << k.name;
    EXPECT_EQ(find_kernel(k.name), nullptr) << "find_kernel searches the opfuse table only";
  }
  EXPECT_EQ(peers::find("gemm__naive"), nullptr);
}

// ---- selection -----------------------------------------------------------------------------

class Selection : public ::testing::TestWithParam<OpKind> {};

TEST_P(Selection, SampleIsValid) {
  const OpDesc d = sample_desc(GetParam());
  const Status s = validate(d);
  EXPECT_TRUE(s) << s.to_string();
}

TEST_P(Selection, NaiveExactlyPicksTheNaiveKernel) {
  const OpDesc d = sample_desc(GetParam());
  const KernelDef* k = select_kernel(d, Context{Stage::naive, 1, false});
  ASSERT_NE(k, nullptr);
  EXPECT_EQ(k->impl, Impl::naive);
  EXPECT_EQ(k->op, d.op);
  EXPECT_EQ(k->name, op_str(d.op) + "__naive");
}

TEST_P(Selection, WithoutFallbackOnlyTheRequestedStage) {
  const OpDesc d = sample_desc(GetParam());
  for (int s = 0; s < kStageCount; ++s) {
    const auto stage = static_cast<Stage>(s);
    SCOPED_TRACE(std::string(stage_name(stage)));
    const Context ctx{stage, 1, false};
    const KernelDef* k = select_kernel(d, ctx);
    EXPECT_EQ(k, first_row(d, impl_of(stage), ctx));
    if (k) {
      EXPECT_EQ(k->impl, impl_of(stage));
    }
  }
}

TEST_P(Selection, SimdWithoutFallbackIsNullWhileThereIsNoSimdKernel) {
  const OpDesc d = sample_desc(GetParam());
  const KernelDef* k = select_kernel(d, Context{Stage::simd, 1, false});
  if (!has_rows(d.op, Impl::simd)) {
    EXPECT_EQ(k, nullptr);
    const auto prim = prepare(d, Context{Stage::simd, 1, false});
    EXPECT_EQ(prim.status().code(), StatusCode::unsupported) << prim.status().to_string();
  } else {
    ASSERT_NE(k, nullptr);
    EXPECT_EQ(k->impl, Impl::simd);
  }
}

TEST_P(Selection, FallbackWalksDownToNaive) {
  const OpDesc d = sample_desc(GetParam());
  for (int s = 0; s < kStageCount; ++s) {
    const auto stage = static_cast<Stage>(s);
    SCOPED_TRACE(std::string(stage_name(stage)));
    const Context ctx{stage, 1, true};
    const KernelDef* expected = nullptr;
    for (int t = s; t >= 0 && !expected; --t) expected = first_row(d, impl_of(static_cast<Stage>(t)), ctx);
    const KernelDef* k = select_kernel(d, ctx);
    ASSERT_NE(k, nullptr) << "naive accepts everything, so fallback always finds a kernel";
    EXPECT_EQ(k, expected) << k->name;
    EXPECT_LE(static_cast<int>(k->impl), s);
  }
  // An op with no simd or fused row has its fused requests served by naive.
  if (!has_rows(d.op, Impl::simd) && !has_rows(d.op, Impl::fused)) {
    const KernelDef* k = select_kernel(d, Context{Stage::fused, 0, true});
    ASSERT_NE(k, nullptr);
    EXPECT_EQ(k->impl, Impl::naive);
  }
}

TEST_P(Selection, PreparePicksTheSelectedKernel) {
  const OpDesc d = sample_desc(GetParam());
  const Context ctx;  // fused with fallback
  auto prim = prepare(d, ctx);
  ASSERT_TRUE(prim) << prim.status().to_string();
  EXPECT_EQ(&prim->kernel(), select_kernel(d, ctx));
  EXPECT_EQ(prim->kernel().op, d.op);
  if (!has_rows(d.op, Impl::simd) && !has_rows(d.op, Impl::fused)) {
    EXPECT_EQ(prim->kernel().impl, Impl::naive);
  }
  EXPECT_EQ(prim->output_descs(), infer_outputs(d).value());
  EXPECT_EQ(prim->desc().op, d.op);
  EXPECT_EQ(prim->desc().inputs, d.inputs);
}

TEST_P(Selection, CudaWithoutFallbackIsUnsupported) {
  const OpDesc d = sample_desc(GetParam());
  if (has_rows(d.op, Impl::cuda)) GTEST_SKIP() << "this build has a cuda kernel for " << op_str(d.op);
  EXPECT_EQ(select_kernel(d, Context{Stage::cuda, 1, false}), nullptr);
  auto prim = prepare(d, Context{Stage::cuda, 1, false});
  EXPECT_EQ(prim.status().code(), StatusCode::unsupported) << prim.status().to_string();
  // With fallback the same request is served by a CPU stage.
  auto fb = prepare(d, Context{Stage::cuda, 1, true});
  ASSERT_TRUE(fb) << fb.status().to_string();
  EXPECT_NE(fb->kernel().impl, Impl::cuda);
}

TEST_P(Selection, PrepareKernelOnEveryAcceptingKernel) {
  // Every kernel of the op - stages and peers - prepares the sample or declines it with
  // unsupported; kernels of another op are refused as invalid_argument, and a stage kernel
  // above the ISA this CPU runs as unsupported, naming the ISA it needs.
  const OpDesc d = sample_desc(GetParam());
  const Context ctx{Stage::fused, 1, false};
  auto try_kernel = [&](const KernelDef& k) {
    SCOPED_TRACE(std::string(k.name));
    auto prim = prepare_kernel(d, k, ctx);
    if (k.op != d.op) {
      EXPECT_EQ(prim.status().code(), StatusCode::invalid_argument);
    } else if (is_stage(k.impl) && kernel_isa(k) > effective_isa(ctx)) {
      EXPECT_EQ(prim.status().code(), StatusCode::unsupported) << prim.status().to_string();
      EXPECT_NE(prim.status().message().find(std::string(k.isa)), std::string::npos) << prim.status().message();
    } else if (!k.supports || k.supports(d)) {
      // An opfuse kernel that accepts a desc must prepare it; a peer's prepare may still
      // decline (its library can refuse at primitive creation) but only as unsupported.
      if (is_stage(k.impl) || prim) {
        EXPECT_TRUE(prim) << prim.status().to_string();
        if (prim) {
          EXPECT_EQ(&prim->kernel(), &k);
        }
      } else {
        EXPECT_EQ(prim.status().code(), StatusCode::unsupported) << prim.status().to_string();
      }
    } else {
      EXPECT_EQ(prim.status().code(), StatusCode::unsupported) << prim.status().to_string();
    }
  };
  for (const KernelDef& k : kernels()) try_kernel(k);
  for (const KernelDef& k : peers::kernels()) try_kernel(k);
}

INSTANTIATE_TEST_SUITE_P(AllOps, Selection, ::testing::ValuesIn(all_ops()),
                         [](const ::testing::TestParamInfo<OpKind>& i) { return op_str(i.param); });

}  // namespace
}  // namespace opfuse
