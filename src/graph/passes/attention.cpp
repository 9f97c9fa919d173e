// src/graph/passes/attention.cpp - the attention subgraph into one flash attention (full level).
//
// An exported scaled dot-product attention is MatMul(Q, K^T) -> Div(., sqrt d) or Mul(., 1/sqrt d)
// -> [Add(., mask)] -> Softmax(last axis) -> MatMul(., V). Run as written, the B x H x S x S
// score matrix is written by the first MatMul, read and written by the scale, the mask add and
// the softmax, and read again by the second MatMul: at BERT's S = 128 that is 0.8 MB per pass.
// The registry's attention computes softmax(scale * Q K^T + mask) V; its fused kernel keeps one
// tile of scores in L1 and never stores the matrix (fused/attention.cpp).
//
// The operands must be 4-D (B, H, Sq, D), (B, H, D, Skv) and (B, H, Skv, Dv) with equal batch
// and head dims (no broadcasting between them), the scale a positive finite constant, the mask
// broadcastable to (B, H, Sq, Skv), the softmax over the last axis. K arrives transposed: the
// attention takes it as (B, H, Skv, D), so the transpose that made K^T is changed to give K
// instead when the MatMul was its only reader (BERT's key head split, perm (0, 2, 3, 1), then
// becomes (0, 2, 1, 3)); otherwise one transpose of the last two dims is added.
#include <fmt/format.h>

#include <cmath>

#include "fusion.hpp"
#include "src/graph/pattern.hpp"

namespace opfuse::graph {

namespace {

bool rank4(const Graph& g, int v) {
  const Value& x = g.value(v);
  return x.dtype == DType::f32 && x.has_shape && x.dims.size() == 4 && all_static(x.dims);
}

bool mask_fits(const Dims& m, const Dims& s) {
  if (m.size() > s.size() || !all_static(m)) return false;
  for (std::size_t i = 0; i < m.size(); ++i) {
    const std::int64_t a = m[m.size() - 1 - i].value, b = s[s.size() - 1 - i].value;
    if (a != b && a != 1) return false;
  }
  return true;
}

}  // namespace

Result<int> attention_subgraph(Graph& g) {
  const PatternStep qk = {{NodeOp::matmul}, 0, [](const Graph& gr, const Node& n) {
                            return n.inputs.size() == 2 && rank4(gr, n.inputs[0]) && rank4(gr, n.inputs[1]);
                          }};
  const PatternStep scale = {{NodeOp::div, NodeOp::mul}, 0, [](const Graph& gr, const Node& n) {
                               return n.inputs.size() == 2 && constant_scalar(gr, n.inputs[1]).has_value();
                             }};
  const PatternStep mask = {{NodeOp::add}, -1, nullptr};
  const PatternStep softmax = {{NodeOp::softmax}, 0, [](const Graph& gr, const Node& n) {
                                 const auto& p = std::get<SoftmaxParams>(*n.params);
                                 const auto rank = static_cast<int>(gr.value(n.inputs[0]).dims.size());
                                 return n.inputs.size() == 1 && !p.has_mask && p.scale == 1.f &&
                                        (p.axis == -1 || p.axis == rank - 1);
                               }};
  const PatternStep pv = {{NodeOp::matmul}, 0, [](const Graph& gr, const Node& n) {
                            return n.inputs.size() == 2 && rank4(gr, n.inputs[1]);
                          }};
  const auto rewrite = [&](const std::vector<int>& m) -> Result<bool> {
    const bool has_mask = m.size() == 5;
    const Node mm1 = g.node(m[0]);
    const Node sc = g.node(m[1]);
    const Node mm2 = g.node(m.back());
    const int q = mm1.inputs[0], kt = mm1.inputs[1], v = mm2.inputs[1];
    const Dims qd = g.value(q).dims, ktd = g.value(kt).dims, vd = g.value(v).dims;
    // (B, H, Sq, D) x (B, H, D, Skv); V (B, H, Skv, Dv).
    for (int i = 0; i < 2; ++i)
      if (qd[i] != ktd[i] || qd[i] != vd[i]) return false;
    if (qd[3] != ktd[2] || ktd[3] != vd[2]) return false;
    const float c = *constant_scalar(g, sc.inputs[1]);
    const double s = sc.op == NodeOp::div ? 1.0 / c : c;
    if (!std::isfinite(s) || !(s > 0.0) || !std::isfinite(static_cast<float>(s))) return false;
    int mask_v = -1;
    if (has_mask) {
      const Node& add = g.node(m[2]);
      mask_v = other_input(add, sc.outputs[0]);
      const Dims sd = g.value(sc.outputs[0]).dims;
      if (mask_v < 0 || g.value(mask_v).dtype != DType::f32 || !mask_fits(g.value(mask_v).dims, sd) ||
          g.value(add.outputs[0]).dims != sd)
        return false;
    }
    const Dims kd = {ktd[0], ktd[1], ktd[3], ktd[2]};
    // K from K^T: re-aim the transpose that made K^T, or add one.
    int k = -1;
    std::vector<int> result;
    const Value& ktv = g.value(kt);
    const Node* tp = ktv.producer >= 0 ? &g.node(ktv.producer) : nullptr;
    const bool reuse = tp && tp->op == NodeOp::transpose && tp->attr<std::vector<std::int64_t>>("perm") &&
                       tp->attr<std::vector<std::int64_t>>("perm")->size() == 4 && g.consumers(kt).size() == 1 &&
                       !is_graph_output(g, kt) && fusable(g, {tp->id}, "attention_subgraph");
    auto kv = g.add_value(fmt::format("{}#k", mm1.name), DType::f32, kd);
    if (!kv) return kv.status();
    k = *kv;
    std::vector<int> matched = m;
    if (reuse) {
      Node& t = g.node(tp->id);
      auto perm = *t.attr<std::vector<std::int64_t>>("perm");
      std::swap(perm[2], perm[3]);
      t.attrs["perm"] = perm;
      if (Status st = g.set_output(t.id, 0, k); !st) return st;
      matched.push_back(t.id);
      result.push_back(t.id);
    } else {
      auto t = g.add_node(NodeOp::transpose, mm1.name + "#k", {kt}, {k}, std::nullopt,
                          {{"perm", std::vector<std::int64_t>{0, 1, 3, 2}}});
      if (!t) return t.status();
      result.push_back(*t);
    }
    AttentionParams p;
    p.scale = static_cast<float>(s);
    p.has_mask = has_mask;
    std::vector<int> inputs = {q, k, v};
    if (has_mask) inputs.push_back(mask_v);
    const int y = mm2.outputs[0];
    for (int id : m)
      if (Status st = g.remove_node(id); !st) return st;
    auto node = g.add_node(NodeOp::attention, mm1.name + "#attention", inputs, {y}, OpParams(p));
    if (!node) return node.status();
    result.push_back(*node);
    record_fusion(g, "attention_subgraph", matched, result);
    return true;
  };
  auto masked = rewrite_chains(g, "attention_subgraph", {qk, scale, mask, softmax, pv}, rewrite);
  if (!masked) return masked;
  auto plain = rewrite_chains(g, "attention_subgraph", {qk, scale, softmax, pv}, rewrite);
  if (!plain) return plain;
  return *masked + *plain;
}

}  // namespace opfuse::graph
