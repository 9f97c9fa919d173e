// src/graph/passes/fusion.hpp - fusions as data: one row per graph rewrite.
//
// Each fusion is a row, like a kernel in the registry: a name, the level that enables it, a
// one-line description and the function that applies it everywhere it matches (a pattern from
// pattern.hpp plus a rewrite). The same table drives `--fusion LEVEL`, `opfuse fusions`, the
// tests and the report. A rewrite replaces a matched group by one node whose op and post-op
// chain the registry already knows, so every stage - naive included - can still run it; a group
// that does not match exactly is left as it was.
//
// Levels include the ones before them: none < basic < advanced < full. Every rewrite records
// its provenance on the nodes it leaves (record_fusion in pattern.hpp), so the runtime can name
// the groups, verify each against the nodes it replaced, and fall back to them.
#pragma once

#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "opfuse/status.hpp"
#include "src/graph/ir.hpp"

namespace opfuse::graph {

enum class FusionLevel : std::uint8_t { none, basic, advanced, full };
std::string_view name(FusionLevel level) noexcept;
std::optional<FusionLevel> fusion_level_from_name(std::string_view name) noexcept;

struct Fusion {
  std::string_view name;     // "fold_batchnorm_into_conv"
  FusionLevel level;         // the lowest level that applies it
  std::string_view summary;  // one line for `opfuse fusions`
  // Applies the fusion at every match; returns how many groups it rewrote.
  Result<int> (*apply)(Graph& g);
};

// Every fusion, in the order they are applied.
std::span<const Fusion> fusions() noexcept;

struct FusionStats {
  std::string name;
  int groups = 0;
  int nodes_removed = 0;  // live nodes before minus after, over every application
};
// Applies every fusion of `level` or below, in table order, until none changes the graph.
// The graph verifies after each fusion (a failed verify is an internal error: a bug in a
// rewrite). Returns the groups each fusion rewrote.
Result<std::vector<FusionStats>> apply_fusions(Graph& g, FusionLevel level) noexcept;

// The passes (one file per family).
Result<int> fold_batchnorm_into_conv(Graph& g);   // conv_bn.cpp
Result<int> activation_into_conv_gemm(Graph& g);  // activation.cpp
Result<int> remove_identities(Graph& g);          // activation.cpp
Result<int> bias_into_matmul(Graph& g);           // matmul_bias.cpp
Result<int> residual_add_into_conv(Graph& g);     // residual.cpp
Result<int> gelu_from_erf(Graph& g);              // recognize.cpp
Result<int> gelu_from_tanh(Graph& g);             // recognize.cpp
Result<int> layernorm_from_reductions(Graph& g);  // recognize.cpp
Result<int> skip_layernorm(Graph& g);             // norm.cpp
Result<int> conv_maxpool(Graph& g);               // conv_pool.cpp
Result<int> eltwise_chains(Graph& g);             // eltwise.cpp
Result<int> cancel_reshape_transpose(Graph& g);   // reshape.cpp
Result<int> attention_subgraph(Graph& g);         // attention.cpp
Result<int> qkv_packed_attention(Graph& g);       // attention.cpp
Result<int> inverted_residual_block(Graph& g);    // inverted_residual.cpp

}  // namespace opfuse::graph
