// src/registry.cpp - THE table of kernels. One row per kernel; rows of one (op, stage) are
// ordered best-first. Adding a kernel is adding a row (and its file under naive/, simd/,
// fused/ or cuda/). `opfuse ops`, `opfuse check`, the tests and opfuse-bench all read it.
#include <array>

#include "fused/fused.hpp"
#include "naive/naive.hpp"
#include "opfuse/registry.hpp"
#include "simd/simd.hpp"

namespace opfuse {

namespace {
using K = OpKind;
constexpr Impl N = Impl::naive;

// One row per ISA for a functor F of a stage's namespace (simd or fused), best ISA first (see
// simd/simd.hpp and fused/fused.hpp). Names: base "__<stage>_<isa>".
#define OPFUSE_ISA_ROW(op, impl, ns, name, isa, Arch, F, summary, supports) \
  { op, impl, name, isa, summary, supports, nullptr, nullptr, simd::run<ns::F, simd::Arch> }
#define OPFUSE_ISA_ROW_PREPARED(op, impl, ns, name, isa, Arch, F, summary, supports) \
  {                                                                                  \
    op, impl, name, isa, summary, supports, simd::workspace_of<ns::F, simd::Arch>,   \
        simd::prepare_of<ns::F, simd::Arch>, simd::run<ns::F, simd::Arch>            \
  }
#define OPFUSE_ISA_ROWS(ROW, op, impl, ns, base, stage, F, summary, supports)           \
  ROW(op, impl, ns, base "__" stage "_avx512", "avx512", avx512, F, summary, supports), \
      ROW(op, impl, ns, base "__" stage "_avx2", "avx2", avx2, F, summary, supports),   \
      ROW(op, impl, ns, base "__" stage "_sse2", "sse2", sse2, F, summary, supports)

#define OPFUSE_SIMD_ROWS(op, base, F, summary, supports) \
  OPFUSE_ISA_ROWS(OPFUSE_ISA_ROW, op, Impl::simd, simd, base, "simd", F, summary, supports)
// The same for a functor with a workspace and a prepare step.
#define OPFUSE_SIMD_ROWS_PREPARED(op, base, F, summary, supports) \
  OPFUSE_ISA_ROWS(OPFUSE_ISA_ROW_PREPARED, op, Impl::simd, simd, base, "simd", F, summary, supports)
#define OPFUSE_FUSED_ROWS(op, base, F, summary, supports) \
  OPFUSE_ISA_ROWS(OPFUSE_ISA_ROW, op, Impl::fused, fused, base, "fused", F, summary, supports)
#define OPFUSE_FUSED_ROWS_PREPARED(op, base, F, summary, supports) \
  OPFUSE_ISA_ROWS(OPFUSE_ISA_ROW_PREPARED, op, Impl::fused, fused, base, "fused", F, summary, supports)

// clang-format off
// Every row this source knows; kTable below keeps the ones whose ISA the build compiled.
constexpr KernelDef kAll[] = {
  // op                      impl  name                          isa       summary
  {K::gemm,              N, "gemm__naive",              "scalar", "triple loop i-k-j over row-major (M,K)x(K,N); post-ops as separate passes", nullptr, nullptr, nullptr, naive::gemm},
  {K::conv2d,            N, "conv2d__naive",            "scalar", "direct 7-loop convolution, any layout/stride/dilation/groups; post-ops as separate passes", nullptr, naive::conv2d_workspace, nullptr, naive::conv2d},
  {K::batchnorm,         N, "batchnorm__naive",         "scalar", "per-element scale*(x-mean)/sqrt(var+eps)+bias", nullptr, nullptr, nullptr, naive::batchnorm},
  {K::relu,              N, "relu__naive",              "scalar", "one scalar loop calling the activation function", nullptr, nullptr, nullptr, naive::unary},
  {K::clip,              N, "clip__naive",              "scalar", "one scalar loop calling the activation function", nullptr, nullptr, nullptr, naive::unary},
  {K::leaky_relu,        N, "leaky_relu__naive",        "scalar", "one scalar loop calling the activation function", nullptr, nullptr, nullptr, naive::unary},
  {K::sigmoid,           N, "sigmoid__naive",           "scalar", "one scalar loop calling std::exp", nullptr, nullptr, nullptr, naive::unary},
  {K::tanh,              N, "tanh__naive",              "scalar", "one scalar loop calling std::tanh", nullptr, nullptr, nullptr, naive::unary},
  {K::gelu,              N, "gelu__naive",              "scalar", "one scalar loop calling std::erf / std::tanh", nullptr, nullptr, nullptr, naive::unary},
  {K::silu,              N, "silu__naive",              "scalar", "one scalar loop calling std::exp", nullptr, nullptr, nullptr, naive::unary},
  {K::hardswish,         N, "hardswish__naive",         "scalar", "one scalar loop calling the activation function", nullptr, nullptr, nullptr, naive::unary},
  {K::add,               N, "add__naive",               "scalar", "NumPy broadcasting through stride-0 dims, one element at a time", nullptr, nullptr, nullptr, naive::binary},
  {K::sub,               N, "sub__naive",               "scalar", "NumPy broadcasting through stride-0 dims, one element at a time", nullptr, nullptr, nullptr, naive::binary},
  {K::mul,               N, "mul__naive",               "scalar", "NumPy broadcasting through stride-0 dims, one element at a time", nullptr, nullptr, nullptr, naive::binary},
  {K::div,               N, "div__naive",               "scalar", "NumPy broadcasting through stride-0 dims, one element at a time", nullptr, nullptr, nullptr, naive::binary},
  {K::maxpool2d,         N, "maxpool2d__naive",         "scalar", "window loop per output element, NaN-propagating max", nullptr, nullptr, nullptr, naive::pool2d},
  {K::avgpool2d,         N, "avgpool2d__naive",         "scalar", "window loop per output element, divisor per count_include_pad", nullptr, nullptr, nullptr, naive::pool2d},
  {K::global_avgpool,    N, "global_avgpool__naive",    "scalar", "sum over H*W per (n, c)", nullptr, nullptr, nullptr, naive::global_avgpool},
  {K::softmax,           N, "softmax__naive",           "scalar", "three passes per row: max, exp-sum, normalize", nullptr, nullptr, nullptr, naive::softmax},
  {K::layernorm,         N, "layernorm__naive",         "scalar", "residual add pass, then mean and variance passes, then normalize", nullptr, nullptr, nullptr, naive::layernorm},
  {K::rmsnorm,           N, "rmsnorm__naive",           "scalar", "residual add pass, then mean-square pass, then normalize", nullptr, nullptr, nullptr, naive::rmsnorm},
  {K::attention,         N, "attention__naive",         "scalar", "materializes the Sq x Skv score matrix per head: QK^T, scale+mask, softmax, times V", nullptr, naive::attention_workspace, nullptr, naive::attention},
  {K::inverted_residual, N, "inverted_residual__naive", "scalar", "expand 1x1 + BN + ReLU6, depthwise 3x3 + BN + ReLU6, project 1x1 + BN, each materialized", nullptr, naive::inverted_residual_workspace, nullptr, naive::inverted_residual},
  {K::eltwise_chain,     N, "eltwise_chain__naive",     "scalar", "one full pass over the tensor per step", nullptr, nullptr, nullptr, naive::eltwise_chain},

  // ---- simd stage: one .inc per family ---------------------------------------------------------
#include "simd/rows/conv.inc"
#include "simd/rows/eltwise.inc"
#include "simd/rows/gemm.inc"
#include "simd/rows/norm.inc"

  // ---- fused stage: one .inc per family --------------------------------------------------------
#include "fused/rows/attention.inc"
#include "fused/rows/conv.inc"
#include "fused/rows/eltwise.inc"
#include "fused/rows/gemm.inc"
#include "fused/rows/inverted_residual.inc"
#include "fused/rows/norm.inc"
};
// clang-format on

// A row whose ISA this build left out (OPFUSE_SIMD_ISAS; see simd/simd.hpp) is dropped here, at
// compile time, so nothing else needs to know: selection, `opfuse ops`, the check and the tests
// see the kernels that exist.
constexpr bool row_built(const KernelDef& k) {
  if (k.isa == "avx512") return OPFUSE_BUILT_avx512 != 0;
  if (k.isa == "avx2") return OPFUSE_BUILT_avx2 != 0;
  if (k.isa == "sse2") return OPFUSE_BUILT_sse2 != 0;
  return true;
}
constexpr std::size_t built_rows() {
  std::size_t n = 0;
  for (const KernelDef& k : kAll) n += row_built(k) ? 1 : 0;
  return n;
}
constexpr std::array<KernelDef, built_rows()> built_table() {
  std::array<KernelDef, built_rows()> t{};
  std::size_t i = 0;
  for (const KernelDef& k : kAll)
    if (row_built(k)) t[i++] = k;
  return t;
}
constexpr auto kTable = built_table();
}  // namespace

std::span<const KernelDef> kernels() noexcept { return kTable; }

const KernelDef* find_kernel(std::string_view name) noexcept {
  for (const KernelDef& k : kTable)
    if (k.name == name) return &k;
  return nullptr;
}

std::string_view impl_name(Impl i) noexcept {
  switch (i) {
    case Impl::naive: return "naive";
    case Impl::simd: return "simd";
    case Impl::fused: return "fused";
    case Impl::cuda: return "cuda";
    case Impl::onednn: return "onednn";
    case Impl::eigen: return "eigen";
  }
  return "unknown";
}

std::string_view stage_name(Stage s) noexcept { return impl_name(impl_of(s)); }

std::optional<Stage> stage_from_name(std::string_view name) noexcept {
  for (int i = 0; i < kStageCount; ++i)
    if (stage_name(static_cast<Stage>(i)) == name) return static_cast<Stage>(i);
  return std::nullopt;
}

}  // namespace opfuse
