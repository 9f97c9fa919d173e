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

// The chain starting at `node`, as node ids in pattern order, or nullopt. `consumers` is
// Graph::consumer_lists() (passed in so that a pass scanning every node computes it once).
std::optional<std::vector<int>> match_chain(const Graph& g, int node, const ChainPattern& pattern,
                                            const std::vector<std::vector<int>>& consumers);

// Calls rewrite(matched node ids) -> Result<bool> (true: rewritten) at every match of the
// pattern, scanning the nodes that exist when it starts; returns how many were rewritten. The
// consumer lists are computed once: a rewrite only removes the nodes it matched and rewires
// their outputs, and match_chain() skips dead nodes, so later matches stay sound (a chain a
// rewrite made possible is found by the next sweep of apply_fusions()).
template <class Rewrite>
Result<int> rewrite_chains(Graph& g, const ChainPattern& pattern, Rewrite rewrite) {
  const auto consumers = g.consumer_lists();
  int rewritten = 0;
  const std::size_t count = g.nodes().size();
  for (std::size_t id = 0; id < count; ++id) {
    auto m = match_chain(g, static_cast<int>(id), pattern, consumers);
    if (!m) continue;
    Result<bool> r = rewrite(*m);
    if (!r) return r.status();
    rewritten += *r ? 1 : 0;
  }
  return rewritten;
}

// True when value v is a constant (an initializer or a folded value).
bool is_constant_value(const Graph& g, int v);

}  // namespace opfuse::graph
