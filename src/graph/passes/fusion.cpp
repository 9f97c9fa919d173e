// src/graph/passes/fusion.cpp - the fusion table and the driver (see fusion.hpp).
#include "fusion.hpp"

#include <fmt/format.h>

namespace opfuse::graph {

namespace {
// clang-format off
constexpr Fusion kFusions[] = {
  {"remove_identities", FusionLevel::basic,
   "Identity (and inference Dropout) nodes removed: their readers read the input directly",
   remove_identities},
  // Before BN folding: the block kernel takes the raw batch norms and folds them itself.
  {"inverted_residual_block", FusionLevel::full,
   "MobileNetV2 block (expand 1x1, depthwise 3x3, project 1x1, each + BN, ReLU6, residual) as one inverted_residual",
   inverted_residual_block},
  {"fold_batchnorm_into_conv", FusionLevel::basic,
   "BatchNormalization after a conv folded into the conv's weights and bias (w*a, (b-mean)*a+beta)",
   fold_batchnorm_into_conv},
  {"bias_into_matmul", FusionLevel::basic,
   "MatMul by a constant matrix, then Add of a constant bias row: one gemm with bias (batch dims fold into M)",
   bias_into_matmul},
  {"gelu_from_erf", FusionLevel::advanced,
   "x * 0.5 * (1 + Erf(x / sqrt 2)) in any association recognized as one GELU",
   gelu_from_erf},
  {"gelu_from_tanh", FusionLevel::advanced,
   "x * 0.5 * (1 + Tanh(sqrt(2/pi) (x + 0.044715 x^3))) recognized as one GELU (tanh form)",
   gelu_from_tanh},
  {"layernorm_from_reductions", FusionLevel::advanced,
   "ReduceMean/Sub/Pow/ReduceMean/Add/Sqrt/Div[/Mul/Add] over the last axis recognized as one LayerNorm",
   layernorm_from_reductions},
  {"residual_add_into_conv", FusionLevel::advanced,
   "Add of a same-shaped tensor (the residual shortcut) after a conv becomes a binary post-op of its epilogue",
   residual_add_into_conv},
  {"activation_into_conv_gemm", FusionLevel::basic,
   "Relu, Clip (relu6), LeakyRelu, Sigmoid, Tanh, HardSwish, GELU, SiLU after a conv or gemm become its post-op",
   activation_into_conv_gemm},
  {"conv_maxpool", FusionLevel::advanced,
   "MaxPool after a conv (+ bn + relu) becomes the conv's last post-op: only the pooled tensor is written",
   conv_maxpool},
  {"skip_layernorm", FusionLevel::advanced,
   "Add of two same-shaped tensors, then LayerNorm of the sum: one pass (writing the sum only if it is read again)",
   skip_layernorm},
  {"attention_subgraph", FusionLevel::full,
   "MatMul(Q, K^T), scale, [mask Add], Softmax, MatMul(., V) as one flash attention (no score matrix)",
   attention_subgraph},
  {"cancel_reshape_transpose", FusionLevel::advanced,
   "Back-to-back reshapes become one (or none), back-to-back transposes compose (or cancel)",
   cancel_reshape_transpose},
  {"qkv_packed_attention", FusionLevel::full,
   "Q, K and V projections of one input as one gemm (weights side by side); the attention reads it in place",
   qkv_packed_attention},
  // Last: it only takes elementwise ops that no epilogue or pattern above could.
  {"eltwise_chain", FusionLevel::advanced,
   "Runs of elementwise ops (activations, binary ops with a broadcast operand) as one eltwise_chain pass",
   eltwise_chains},
};
// clang-format on
}  // namespace

std::string_view name(FusionLevel level) noexcept {
  switch (level) {
    case FusionLevel::none: return "none";
    case FusionLevel::basic: return "basic";
    case FusionLevel::advanced: return "advanced";
    case FusionLevel::full: return "full";
  }
  return "?";
}

std::optional<FusionLevel> fusion_level_from_name(std::string_view n) noexcept {
  for (FusionLevel l : {FusionLevel::none, FusionLevel::basic, FusionLevel::advanced, FusionLevel::full})
    if (name(l) == n) return l;
  return std::nullopt;
}

std::span<const Fusion> fusions() noexcept { return kFusions; }

Result<std::vector<FusionStats>> apply_fusions(Graph& g, FusionLevel level) noexcept {
  try {
    std::vector<FusionStats> stats;
    for (const Fusion& f : kFusions) stats.push_back({std::string(f.name), 0});
    for (bool changed = true; changed;) {
      changed = false;
      for (std::size_t i = 0; i < std::size(kFusions); ++i) {
        const Fusion& f = kFusions[i];
        if (f.level > level) continue;
        const int before = g.live_node_count();
        auto n = f.apply(g);
        if (!n) return n.status();
        if (*n == 0) continue;
        stats[i].nodes_removed += before - g.live_node_count();
        if (Status s = verify(g); !s)
          return Status(StatusCode::internal, fmt::format("fusion {} left an invalid graph: {}", f.name, s.message()));
        stats[i].groups += *n;
        changed = true;
      }
    }
    return stats;
  } catch (const std::bad_alloc&) {
    return Status(StatusCode::out_of_memory, "out of memory while fusing");
  } catch (const std::exception& e) {
    return Status(StatusCode::internal, fmt::format("fusing failed: {}", e.what()));
  }
}

}  // namespace opfuse::graph
