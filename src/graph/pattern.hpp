// src/graph/pattern.hpp - a small pattern matcher over the graph IR.
//
// Most fusions start from one node and follow its output into the next: conv2d -> batchnorm,
// conv2d -> relu, gemm -> gelu. A ChainPattern says that once - the op kinds each step accepts,
// the input slot through which a step reads the previous one, extra predicates (constant
// inputs, parameters) - and match_chain() checks the rules a rewrite needs to be safe: every
// intermediate output has exactly that one reader and is not a graph output, so replacing the
// chain by one node removes nothing anyone else sees. A rewrite is then written against the
// matched node ids instead of walking the graph by hand (TVM's dataflow patterns, reduced to
// the chains the fusion table uses).
#pragma once

#include <functional>
#include <optional>
#include <string_view>
#include <vector>

#include "ir.hpp"
#include "opfuse/status.hpp"

namespace opfuse::graph {

struct PatternStep {
  std::vector<NodeOp> ops;  // accepted op kinds (empty: any)
  int slot = 0;             // the input through which this step reads the previous step's output 0 (-1: any one)
  std::function<bool(const Graph&, const Node&)> where;  // optional extra condition
};
using ChainPattern = std::vector<PatternStep>;

// The chain starting at `node`, as node ids in pattern order, or nullopt. Each step is a reader
// of the previous step's output 0 (the first reader, in id order, that satisfies the step),
// reading it through exactly one input. Every intermediate output - the outputs of all steps
// but the last - must be read only by nodes of the match and must not be a graph output, so
// replacing the match by one node hides nothing anyone else sees. That allows the diamonds of
// decomposed ops (LayerNorm's x - mean feeds both Pow and Div) and forbids an extra consumer.
// No matched node may refuse `fusion` (Node::refused). `consumers` is
// Graph::consumer_lists() (passed in so that a pass scanning every node computes it once).
std::optional<std::vector<int>> match_chain(const Graph& g, int node, const ChainPattern& pattern,
                                            const std::vector<std::vector<int>>& consumers,
                                            std::string_view fusion = {});

// Calls rewrite(matched node ids) -> Result<bool> (true: rewritten) at every match of the
// pattern, scanning the nodes that exist when it starts; returns how many were rewritten. The
// consumer lists are computed once: a rewrite only removes the nodes it matched and rewires
// their outputs, and match_chain() skips dead nodes, so later matches stay sound (a chain a
// rewrite made possible is found by the next sweep of apply_fusions()). Stale lists only err on
// the safe side: a value that gained readers in a rewrite lost a reader that is now dead, and a
// dead reader is never inside a match, so the closure check refuses it until the next sweep.
template <class Rewrite>
Result<int> rewrite_chains(Graph& g, std::string_view fusion, const ChainPattern& pattern, Rewrite rewrite) {
  const auto consumers = g.consumer_lists();
  int rewritten = 0;
  const std::size_t count = g.nodes().size();
  for (std::size_t id = 0; id < count; ++id) {
    auto m = match_chain(g, static_cast<int>(id), pattern, consumers, fusion);
    if (!m) continue;
    Result<bool> r = rewrite(*m);
    if (!r) return r.status();
    rewritten += *r ? 1 : 0;
  }
  return rewritten;
}

// Records a rewrite on the nodes it left: `result` (new nodes, or matched nodes it changed)
// gets `fusion` appended to fused_by and, as origin, the union of the origins of `matched`
// (a node's origin is itself when it has none yet).
void record_fusion(Graph& g, std::string_view fusion, const std::vector<int>& matched, const std::vector<int>& result);

// True when no node in `ids` refuses `fusion`.
bool fusable(const Graph& g, const std::vector<int>& ids, std::string_view fusion);

// The value of a constant f32 scalar (one element, any rank), or nullopt.
std::optional<float> constant_scalar(const Graph& g, int v);
// For a two-input node reading `v`, the other input (-1 if it reads v twice or not at all).
int other_input(const Node& n, int v);
// True when `v` is a graph output.
bool is_graph_output(const Graph& g, int v);

// True when value v is a constant (an initializer or a folded value).
bool is_constant_value(const Graph& g, int v);

}  // namespace opfuse::graph
