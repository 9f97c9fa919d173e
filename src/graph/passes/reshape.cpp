// src/graph/passes/reshape.cpp - back-to-back reshapes and transposes collapsed (advanced level).
//
// Exporters and the other fusions leave pairs that undo or repeat each other: bias_into_matmul
// unflattens a gemm's (rows, N) output only for the next MatMul to flatten it again; BERT's head
// split reshapes the gemm's unflattened output once more. A reshape-like op (Reshape, Flatten,
// Squeeze, Unsqueeze: with static dims all are views) followed by another is one reshape to the
// final dims, or nothing when the final dims are the first input's. Two transposes compose into
// one (out dim i of B(A(x)) is x's dim pA[pB[i]]), or nothing when that is the identity: a
// whole copy of the tensor saved each. The first node's output must have the second as its only
// reader; a graph output keeps its producer.
#include <fmt/format.h>

#include <numeric>

#include "fusion.hpp"
#include "src/graph/pattern.hpp"

namespace opfuse::graph {

namespace {

bool static_f32(const Graph& g, int v) {
  const Value& x = g.value(v);
  return x.has_shape && all_static(x.dims);
}

std::vector<std::int64_t> perm_of(const Graph& g, const Node& n) {
  const Dims& d = g.value(n.inputs[0]).dims;
  if (const auto* p = n.attr<std::vector<std::int64_t>>("perm")) return *p;
  std::vector<std::int64_t> r(d.size());
  std::iota(r.rbegin(), r.rend(), 0);  // absent: reverse
  return r;
}

// Removes the pair m = {a, b} that computes y = x exactly: y's readers read x. The value y
// disappears, and with it the boundary between the node that made x and the nodes that read y,
// so the provenance of both sides merges into one group (--verify-fusion then checks them
// together, on the values the unfused graph has).
Result<bool> cancel_pair(Graph& g, const std::vector<int>& m, int x, int y) {
  std::vector<int> around = g.consumers(y);
  const int producer = g.value(x).producer;
  if (producer >= 0) around.push_back(producer);
  if (Status s = g.remove_node(m[1]); !s) return s;
  if (Status s = g.remove_node(m[0]); !s) return s;
  auto r = g.replace_all_uses(y, x);
  if (!r) return r.status();
  std::vector<int> matched = m;
  matched.insert(matched.end(), around.begin(), around.end());
  record_fusion(g, "cancel_reshape_transpose", matched, around);
  return true;
}

}  // namespace

Result<int> cancel_reshape_transpose(Graph& g) {
  const PatternStep view = {
      {NodeOp::reshape, NodeOp::flatten, NodeOp::squeeze, NodeOp::unsqueeze}, 0, [](const Graph& gr, const Node& n) {
        return !n.inputs.empty() && n.outputs.size() == 1 && static_f32(gr, n.inputs[0]) &&
               static_f32(gr, n.outputs[0]);
      }};
  auto views =
      rewrite_chains(g, "cancel_reshape_transpose", {view, view}, [&](const std::vector<int>& m) -> Result<bool> {
        const Node a = g.node(m[0]);
        const Node b = g.node(m[1]);
        const int x = a.inputs[0], y = b.outputs[0];
        const Dims out = g.value(y).dims;
        if (g.value(x).dims == out) {
          if (is_graph_output(g, y)) return false;
          return cancel_pair(g, m, x, y);
        }
        std::vector<std::int64_t> dims;
        for (const Dim& d : out) dims.push_back(d.value);
        const auto rank = static_cast<std::int64_t>(dims.size());
        auto shape = g.add_initializer(fmt::format("{}#dims", b.name), Dims{rank}, std::move(dims));
        if (!shape) return shape.status();
        if (Status s = g.remove_node(b.id); !s) return s;
        if (Status s = g.remove_node(a.id); !s) return s;
        auto node =
            g.add_node(NodeOp::reshape, b.name, {x, *shape}, {y}, std::nullopt, {{"allowzero", std::int64_t{0}}});
        if (!node) return node.status();
        record_fusion(g, "cancel_reshape_transpose", m, {*node});
        return true;
      });
  if (!views) return views;
  const PatternStep tr = {{NodeOp::transpose}, 0, [](const Graph& gr, const Node& n) {
                            return n.inputs.size() == 1 && n.outputs.size() == 1 && static_f32(gr, n.inputs[0]);
                          }};
  auto pairs = rewrite_chains(g, "cancel_reshape_transpose", {tr, tr}, [&](const std::vector<int>& m) -> Result<bool> {
    const Node a = g.node(m[0]);
    const Node b = g.node(m[1]);
    const auto pa = perm_of(g, a), pb = perm_of(g, b);
    if (pa.size() != pb.size()) return false;
    std::vector<std::int64_t> r(pb.size());
    bool identity = true;
    for (std::size_t i = 0; i < pb.size(); ++i) {
      if (pb[i] < 0 || pb[i] >= static_cast<std::int64_t>(pa.size())) return false;
      r[i] = pa[static_cast<std::size_t>(pb[i])];
      identity = identity && r[i] == static_cast<std::int64_t>(i);
    }
    const int x = a.inputs[0], y = b.outputs[0];
    if (identity) return is_graph_output(g, y) ? Result<bool>(false) : cancel_pair(g, m, x, y);
    if (Status s = g.remove_node(b.id); !s) return s;
    if (Status s = g.remove_node(a.id); !s) return s;
    auto node = g.add_node(NodeOp::transpose, b.name, {x}, {y}, std::nullopt, {{"perm", r}});
    if (!node) return node.status();
    record_fusion(g, "cancel_reshape_transpose", m, {*node});
    return true;
  });
  if (!pairs) return pairs;
  return *views + *pairs;
}

}  // namespace opfuse::graph
