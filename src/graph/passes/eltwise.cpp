// src/graph/passes/eltwise.cpp - runs of elementwise ops grouped into one eltwise_chain
// (advanced level; TVM's injective fusion into one loop).
//
// Each elementwise op on its own streams its whole input from memory and its output back. A
// chain of them - the scale and mask before a softmax, a bias and an activation nobody fused
// into a gemm - becomes one eltwise_chain node: x is read once, every step is applied to the
// value in a register, y is written once. A step is a unary activation or a binary op whose
// other operand broadcasts to x without growing it (y = y op operand: Sub and Div only when the
// chain's value is their first operand). A chain grows one op per match; apply_fusions' sweeps
// extend it until the next op does not qualify. It runs after every other fusion, so it only
// takes what no kernel epilogue could.
#include <algorithm>

#include "fusion.hpp"
#include "src/graph/pattern.hpp"

namespace opfuse::graph {

namespace {

bool is_unary_op(NodeOp op) {
  const auto k = registry_op(op);
  return k && is_unary(*k);
}
bool is_binary_op(NodeOp op) {
  const auto k = registry_op(op);
  return k && is_binary(*k);
}

// `operand` broadcasts to dims `to` (NumPy rules, right-aligned) without making it bigger.
bool broadcasts_to(const Dims& operand, const Dims& to) {
  if (operand.size() > to.size() || !all_static(operand) || !all_static(to)) return false;
  for (std::size_t i = 0; i < operand.size(); ++i) {
    const std::int64_t a = operand[operand.size() - 1 - i].value, b = to[to.size() - 1 - i].value;
    if (a != b && a != 1) return false;
  }
  return true;
}

// The chain step `n` applies to value `x` flowing in, or nullopt. Sets *operand for a binary step.
std::optional<ChainStep> step_of(const Graph& g, const Node& n, int x, int* operand) {
  const Value& xv = g.value(x);
  if (xv.dtype != DType::f32 || !xv.has_shape || g.value(n.outputs[0]).dims != xv.dims) return std::nullopt;
  if (is_unary_op(n.op)) {
    if (n.inputs.size() != 1 || n.inputs[0] != x) return std::nullopt;
    *operand = -1;
    return ChainStep::unary_step(std::get<UnaryParams>(*n.params).act);
  }
  if (!is_binary_op(n.op) || n.inputs.size() != 2) return std::nullopt;
  const int other = other_input(n, x);
  if (other < 0 || g.value(other).dtype != DType::f32 || !broadcasts_to(g.value(other).dims, xv.dims))
    return std::nullopt;
  const BinaryKind k = binary_kind_of(*registry_op(n.op));
  if ((k == BinaryKind::sub || k == BinaryKind::div) && n.inputs[0] != x) return std::nullopt;
  *operand = other;
  return ChainStep::binary_step(k);
}

}  // namespace

Result<int> eltwise_chains(Graph& g) {
  const auto elementwise = [](const Graph&, const Node& n) {
    return n.outputs.size() == 1 && (is_unary_op(n.op) || is_binary_op(n.op) || n.op == NodeOp::eltwise_chain);
  };
  const ChainPattern pattern = {{{}, -1, elementwise}, {{}, -1, elementwise}};
  return rewrite_chains(g, "eltwise_chain", pattern, [&](const std::vector<int>& m) -> Result<bool> {
    const Node first = g.node(m[0]);
    const Node second = g.node(m[1]);
    if (second.op == NodeOp::eltwise_chain) return false;  // chains grow forward only
    // The first node as a chain: its own steps, or one step on its flowing input.
    ChainParams chain;
    std::vector<int> inputs;
    if (first.op == NodeOp::eltwise_chain) {
      chain = std::get<ChainParams>(*first.params);
      inputs = first.inputs;
    } else {
      int x = -1, operand = -1;
      std::optional<ChainStep> s;
      for (int cand : first.inputs) {  // the input with the output's dims is the one that flows
        if (cand < 0 || g.value(cand).dims != g.value(first.outputs[0]).dims) continue;
        if ((s = step_of(g, first, cand, &operand))) {
          x = cand;
          break;
        }
      }
      if (!s) return false;
      chain.steps.push_back(*s);
      inputs = {x};
      if (operand >= 0) inputs.push_back(operand);
    }
    int operand = -1;
    const auto s2 = step_of(g, second, first.outputs[0], &operand);
    if (!s2 || g.value(inputs[0]).dims != g.value(second.outputs[0]).dims) return false;
    chain.steps.push_back(*s2);
    if (operand >= 0) inputs.push_back(operand);
    const int y = second.outputs[0];
    const std::string name = first.op == NodeOp::eltwise_chain ? first.name : first.name + "#chain";
    if (Status s = g.remove_node(first.id); !s) return s;
    if (Status s = g.remove_node(second.id); !s) return s;
    auto node = g.add_node(NodeOp::eltwise_chain, name, inputs, {y}, OpParams(chain));
    if (!node) return node.status();
    record_fusion(g, "eltwise_chain", m, {*node});
    return true;
  });
}

}  // namespace opfuse::graph
