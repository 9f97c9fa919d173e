// src/peers/peers.cpp - THE table of peer kernels (oneDNN 2.6, Eigen 3.4), one row each.
// Same shape as src/registry.cpp; the entry points live in onednn.cpp and eigen.cpp.
#ifdef _OPENMP
#include <omp.h>
#endif

#include <string>

#include <Eigen/Core>

#include "oneapi/dnnl/dnnl.hpp"
#include "peers/peers.hpp"

namespace opfuse::peers {

namespace {
using K = OpKind;
constexpr Impl D = Impl::onednn;
constexpr Impl E = Impl::eigen;

bool eigen_gemm_supports(const OpDesc& d) { return eigen::active().supports_gemm(d); }
std::size_t eigen_gemm_workspace(const OpDesc& d) { return eigen::active().gemm_workspace(d); }
void eigen_gemm(const KernelArgs& a) { eigen::active().gemm(a); }
bool eigen_conv2d_supports(const OpDesc& d) { return eigen::active().supports_conv2d(d); }
std::size_t eigen_conv2d_workspace(const OpDesc& d) { return eigen::active().conv2d_workspace(d); }
void eigen_conv2d(const KernelArgs& a) { eigen::active().conv2d(a); }

// Every oneDNN row uses the same three entry points (they dispatch on desc.op).
#define OPFUSE_ONEDNN onednn::supports, nullptr, onednn::prepare, onednn::execute

// clang-format off
const KernelDef kTable[] = {
  // op                      impl  name                           isa       summary
  {K::gemm,              D, "gemm__onednn",              "onednn", "oneDNN matmul primitive: trans via strides, alpha as output scale, beta as sum post-op, bias arg (binary-add post-op when alpha != 1), post-ops via primitive attributes, BN folded to scale/shift", OPFUSE_ONEDNN},
  {K::conv2d,            D, "conv2d__onednn",            "onednn", "oneDNN convolution_forward (direct), src/dst in the user layout, weights format any reordered on every execute; bias arg, post-ops via attributes, BN folded to scale/shift", OPFUSE_ONEDNN},
  {K::batchnorm,         D, "batchnorm__onednn",         "onednn", "oneDNN batch_normalization_forward inference, use_global_stats|use_scale|use_shift", OPFUSE_ONEDNN},
  {K::relu,              D, "relu__onednn",              "onednn", "oneDNN eltwise_forward, eltwise_relu", OPFUSE_ONEDNN},
  {K::clip,              D, "clip__onednn",              "onednn", "oneDNN eltwise_forward, eltwise_clip (declines lo > hi)", OPFUSE_ONEDNN},
  {K::leaky_relu,        D, "leaky_relu__onednn",        "onednn", "oneDNN eltwise_forward, eltwise_relu with alpha = slope", OPFUSE_ONEDNN},
  {K::sigmoid,           D, "sigmoid__onednn",           "onednn", "oneDNN eltwise_forward, eltwise_logistic", OPFUSE_ONEDNN},
  {K::tanh,              D, "tanh__onednn",              "onednn", "oneDNN eltwise_forward, eltwise_tanh", OPFUSE_ONEDNN},
  {K::gelu,              D, "gelu__onednn",              "onednn", "oneDNN eltwise_forward, eltwise_gelu_erf / eltwise_gelu_tanh", OPFUSE_ONEDNN},
  {K::silu,              D, "silu__onednn",              "onednn", "oneDNN eltwise_forward, eltwise_swish with alpha 1", OPFUSE_ONEDNN},
  {K::hardswish,         D, "hardswish__onednn",         "onednn", "oneDNN eltwise_forward, eltwise_hardswish", OPFUSE_ONEDNN},
  {K::add,               D, "add__onednn",               "onednn", "oneDNN binary primitive, binary_add; a and b swapped when a broadcasts, both broadcast as (0 + a) + b", OPFUSE_ONEDNN},
  {K::sub,               D, "sub__onednn",               "onednn", "oneDNN binary primitive, binary_sub; a broadcast a as -(b - a), both broadcast as (0 + a) - b", OPFUSE_ONEDNN},
  {K::mul,               D, "mul__onednn",               "onednn", "oneDNN binary primitive, binary_mul; a and b swapped when a broadcasts, both broadcast as (0 + a) * b", OPFUSE_ONEDNN},
  {K::div,               D, "div__onednn",               "onednn", "oneDNN binary primitive, binary_div; a broadcast a is first materialized as 0 + a", OPFUSE_ONEDNN},
  {K::maxpool2d,         D, "maxpool2d__onednn",         "onednn", "oneDNN pooling_v2_forward, pooling_max with dilation; ceil mode as a larger right padding", OPFUSE_ONEDNN},
  {K::avgpool2d,         D, "avgpool2d__onednn",         "onednn", "oneDNN pooling_v2_forward, avg include/exclude padding; ceil mode as a larger right padding", OPFUSE_ONEDNN},
  {K::global_avgpool,    D, "global_avgpool__onednn",    "onednn", "oneDNN pooling_v2_forward, average over an HxW kernel", OPFUSE_ONEDNN},
  {K::softmax,           D, "softmax__onednn",           "onednn", "oneDNN softmax_forward on the axis, after eltwise_linear (scale) and binary_add (mask) primitives", OPFUSE_ONEDNN},
  {K::layernorm,         D, "layernorm__onednn",         "onednn", "oneDNN layer_normalization_forward (use_scale|use_shift) on the 2-D view, after a binary_add primitive for the residual", OPFUSE_ONEDNN},
  {K::rmsnorm,           D, "rmsnorm__onednn",           "onednn", "sequence of oneDNN primitives: eltwise_square, reduction_mean, eltwise linear+pow(-1/2), binary_mul x2", OPFUSE_ONEDNN},
  {K::attention,         D, "attention__onednn",         "onednn", "sequence of oneDNN primitives: batched matmul QK^T (output scale), binary_add masks, softmax, matmul with V", OPFUSE_ONEDNN},
  {K::inverted_residual, D, "inverted_residual__onednn", "onednn", "three oneDNN convolutions with BN folded to scale/shift post-ops, clip 0..6 post-ops, residual as binary-add post-op", OPFUSE_ONEDNN},
  {K::eltwise_chain,     D, "eltwise_chain__onednn",     "onednn", "leading unary steps as oneDNN eltwise primitives, then a binary primitive with every later step as its post-ops (one primitive per step if unsupported)", OPFUSE_ONEDNN},
  {K::gemm,              E, "gemm__eigen",               "eigen",  "Eigen 3.4 GEMM (compiled per ISA, the best the CPU runs) on row-major Maps (transposes as views), alpha/beta/bias/post-ops as Eigen array expressions; OpenMP threads only if built with -fopenmp", eigen_gemm_supports, eigen_gemm_workspace, nullptr, eigen_gemm},
  {K::conv2d,            E, "conv2d__eigen",             "eigen",  "im2col per image + Eigen 3.4 GEMM (compiled per ISA), NCHW, groups 1; bias and post-ops as Eigen array expressions; OpenMP threads only if built with -fopenmp", eigen_conv2d_supports, eigen_conv2d_workspace, nullptr, eigen_conv2d},
};
// clang-format on
#undef OPFUSE_ONEDNN

// Every op has exactly one oneDNN row (the reference of `opfuse check --stage naive`).
static_assert(sizeof(kTable) / sizeof(kTable[0]) == kOpCount + 2, "one oneDNN row per op plus the Eigen rows");
}  // namespace

std::span<const KernelDef> kernels() noexcept { return kTable; }

const KernelDef* find(std::string_view name) noexcept {
  for (const KernelDef& k : kTable)
    if (k.name == name) return &k;
  return nullptr;
}

const KernelDef* onednn_reference(OpKind op) noexcept {
  for (const KernelDef& k : kTable)
    if (k.op == op && k.impl == Impl::onednn) return &k;
  return nullptr;
}

namespace eigen {
// The process's ISA cap (OPFUSE_ISA) is read once, so every call picks the same variant and
// a row's workspace size always matches the code that uses it.
const Variant& active() noexcept {
  static const Variant& v = []() -> const Variant& {
    const Isa isa = effective_isa(Context{});
    // A build with fewer kernel ISAs (OPFUSE_SIMD_ISAS) compiles Eigen for those and SSE2 only.
#if OPFUSE_BUILT_avx512
    if (isa >= Isa::avx512) return isa_avx512::variant;
#endif
#if OPFUSE_BUILT_avx2
    if (isa >= Isa::avx2) return isa_avx2::variant;
#endif
    (void)isa;
    return isa_sse2::variant;
  }();
  return v;
}
}  // namespace eigen

std::string versions() {
  const dnnl_version_t* v = dnnl_version();
  std::string s = "oneDNN " + std::to_string(v->major) + "." + std::to_string(v->minor) + "." +
                  std::to_string(v->patch) + " (" + (v->cpu_runtime == DNNL_RUNTIME_OMP ? "OpenMP" : "other") +
                  " runtime), Eigen " + std::to_string(EIGEN_WORLD_VERSION) + "." +
                  std::to_string(EIGEN_MAJOR_VERSION) + "." + std::to_string(EIGEN_MINOR_VERSION);
  const Isa isa = eigen::active().isa;
  s += isa == Isa::avx512 ? " (AVX-512" : isa == Isa::avx2 ? " (AVX2" : " (SSE2";
#ifdef _OPENMP
  s += ", OpenMP)";
#else
  s += ", 1 thread)";
#endif
  return s;
}

bool cap_onednn_isa(Isa isa) noexcept {
  const dnnl_cpu_isa_t level = isa >= Isa::avx512 ? dnnl_cpu_isa_avx512_core
                               : isa >= Isa::avx2 ? dnnl_cpu_isa_avx2
                                                  : dnnl_cpu_isa_sse41;
  return dnnl_set_max_cpu_isa(level) == dnnl_success;
}

std::string onednn_isa() {
  switch (dnnl_get_effective_cpu_isa()) {
    case dnnl_cpu_isa_sse41: return "sse41";
    case dnnl_cpu_isa_avx: return "avx";
    case dnnl_cpu_isa_avx2: return "avx2";
    case dnnl_cpu_isa_avx512_mic: return "avx512_mic";
    case dnnl_cpu_isa_avx512_mic_4ops: return "avx512_mic_4ops";
    case dnnl_cpu_isa_avx512_core: return "avx512_core";
    case dnnl_cpu_isa_avx512_core_vnni: return "avx512_core_vnni";
    case dnnl_cpu_isa_avx512_core_bf16: return "avx512_core_bf16";
    case dnnl_cpu_isa_avx512_core_amx: return "avx512_core_amx";
    case dnnl_cpu_isa_avx2_vnni: return "avx2_vnni";
    default: return "other";
  }
}

ThreadScope::ThreadScope(int threads) noexcept {
#ifdef _OPENMP
  if (threads > 0) {
    previous_ = omp_get_max_threads();
    omp_set_num_threads(threads);
  }
#else
  (void)threads;
#endif
}

ThreadScope::~ThreadScope() {
#ifdef _OPENMP
  if (previous_ > 0) omp_set_num_threads(previous_);
#endif
}

}  // namespace opfuse::peers
