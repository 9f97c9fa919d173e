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

#include <algorithm>
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

// ---- horizontal fusion: Q, K and V projections as one gemm, read in place ---------------------
//
// After attention_subgraph, BERT's attention reads q, k and v each through its own chain: a gemm
// (the projection, with bias) of the same hidden states, a reshape to (B, S, H, D) and a
// transpose to (B, H, S, D) - three 128 x 768 x 768 gemms and three copies - and its output goes
// through a transpose back to (B, S, H, D). The three gemms share their A operand: one gemm with
// the weights side by side (K, 3N) and the biases concatenated reads A once and writes the
// (B*S, 3*H*D) packed qkv, whose rows hold q, k and v of a token next to each other. The
// attention then reads q, k and v in place from it (AttentionParams::packed_qkv: strided views)
// and writes its output straight in (B, S, H, D) order, so the four transposes disappear.
namespace {

bool is_view_op(NodeOp op) {
  return op == NodeOp::reshape || op == NodeOp::flatten || op == NodeOp::squeeze || op == NodeOp::unsqueeze;
}

int only_reader(const std::vector<std::vector<int>>& consumers, const Graph& g, int v) {
  if (v < 0 || static_cast<std::size_t>(v) >= consumers.size() || is_graph_output(g, v)) return -1;
  const auto& r = consumers[static_cast<std::size_t>(v)];
  return r.size() == 1 ? r[0] : -1;
}

// The projection behind attention operand `v`: Transpose(0,2,1,3) <- reshape-likes <- gemm, each
// intermediate read once. Fills `chain` (transpose, views..., gemm) and returns the gemm, or -1.
int projection_of(const Graph& g, const std::vector<std::vector<int>>& consumers, int v, std::vector<int>& chain) {
  const int t = g.value(v).producer;
  if (t < 0 || only_reader(consumers, g, v) < 0) return -1;
  const Node& tn = g.node(t);
  const auto* perm = tn.attr<std::vector<std::int64_t>>("perm");
  if (tn.op != NodeOp::transpose || !perm || *perm != std::vector<std::int64_t>{0, 2, 1, 3}) return -1;
  chain.push_back(t);
  int x = tn.inputs[0];
  while (true) {
    if (only_reader(consumers, g, x) < 0) return -1;
    const int p = g.value(x).producer;
    if (p < 0) return -1;
    const Node& pn = g.node(p);
    chain.push_back(p);
    if (pn.op == NodeOp::gemm) return p;
    if (!is_view_op(pn.op)) return -1;
    x = pn.inputs[0];
  }
}

// A gemm that is a plain projection: y = a W + b, W (K, N) and b (N) constant, nothing else.
bool plain_projection(const Graph& g, const Node& n) {
  const auto& p = std::get<GemmParams>(*n.params);
  if (!p.post_ops.empty() || !p.has_bias || p.trans_a || p.trans_b || p.alpha != 1.f || p.beta != 0.f) return false;
  if (n.inputs.size() != 3 || !is_constant_value(g, n.inputs[1]) || !is_constant_value(g, n.inputs[2])) return false;
  const Value& w = g.value(n.inputs[1]);
  const Value& b = g.value(n.inputs[2]);
  return w.dims.size() == 2 && all_static(w.dims) && b.dims.size() == 1 && b.dims[0] == w.dims[1] && w.f32_data &&
         b.f32_data;
}

// The value a gemm's A really is: through reshape-likes whose dims end as A's, back to their source.
int a_source(const Graph& g, int a) {
  const Value& v = g.value(a);
  if (v.producer >= 0 && is_view_op(g.node(v.producer).op)) return g.node(v.producer).inputs[0];
  return a;
}

}  // namespace

Result<int> qkv_packed_attention(Graph& g) {
  const auto consumers = g.consumer_lists();
  int rewritten = 0;
  const std::size_t count = g.nodes().size();
  for (std::size_t id = 0; id < count; ++id) {
    const Node& a = g.node(static_cast<int>(id));
    if (a.dead || a.op != NodeOp::attention || a.inputs.size() < 3) continue;
    const auto& ap = std::get<AttentionParams>(*a.params);
    if (ap.packed_qkv || ap.causal) continue;
    std::vector<int> matched = {a.id};
    int gemms[3];
    bool ok = true;
    for (int i = 0; i < 3 && ok; ++i) {
      gemms[i] = projection_of(g, consumers, a.inputs[static_cast<std::size_t>(i)], matched);
      ok = gemms[i] >= 0 && plain_projection(g, g.node(gemms[i]));
    }
    if (!ok) continue;
    // One A for all three (each may flatten the same source into the same dims), one K, one N.
    const Node& gq = g.node(gemms[0]);
    const int aq = gq.inputs[0];
    const Dims wd = g.value(gq.inputs[1]).dims;
    for (int i = 1; i < 3 && ok; ++i) {
      const Node& gi = g.node(gemms[i]);
      const int ai = gi.inputs[0];
      ok = (ai == aq || (a_source(g, ai) == a_source(g, aq) && g.value(ai).dims == g.value(aq).dims)) &&
           g.value(gi.inputs[1]).dims == wd;
    }
    // The output goes only through Transpose(0,2,1,3) back to (B, S, H, D).
    const int to = only_reader(consumers, g, a.outputs[0]);
    if (!ok || to < 0) continue;
    const Node& tn = g.node(to);
    const auto* perm = tn.attr<std::vector<std::int64_t>>("perm");
    if (tn.op != NodeOp::transpose || !perm || *perm != std::vector<std::int64_t>{0, 2, 1, 3}) continue;
    const Dims qd = g.value(a.inputs[0]).dims;  // (B, H, S, D)
    if (qd.size() != 4 || !all_static(qd) || wd[1].value != qd[1].value * qd[3].value) continue;
    if (g.value(a.inputs[1]).dims != qd || g.value(a.inputs[2]).dims != qd) continue;
    matched.push_back(to);
    // The A flattens of K and V go too when the gemm was their only reader.
    for (int i = 1; i < 3; ++i) {
      const int ai = g.node(gemms[i]).inputs[0];
      const int p = g.value(ai).producer;
      if (ai != aq && p >= 0 && only_reader(consumers, g, ai) == gemms[i]) matched.push_back(p);
    }
    if (!fusable(g, matched, "qkv_packed_attention")) continue;
    const std::int64_t K = wd[0].value, N = wd[1].value;
    std::vector<float> w(static_cast<std::size_t>(K * 3 * N)), b(static_cast<std::size_t>(3 * N));
    for (int i = 0; i < 3; ++i) {
      const auto& wi = *g.value(g.node(gemms[i]).inputs[1]).f32_data;
      const auto& bi = *g.value(g.node(gemms[i]).inputs[2]).f32_data;
      for (std::int64_t r = 0; r < K; ++r) std::copy_n(wi.begin() + r * N, N, w.begin() + r * 3 * N + i * N);
      std::copy(bi.begin(), bi.end(), b.begin() + i * N);
    }
    const std::string name = gq.name + "#qkv";
    auto wv = g.add_initializer(name + ".weight", Dims{K, 3 * N}, std::move(w));
    auto bv = g.add_initializer(name + ".bias", Dims{3 * N}, std::move(b));
    const Dims ad = g.value(aq).dims;
    Dims qkv_dims = ad;
    qkv_dims.back() = Dim(3 * N);
    auto qkv = g.add_value(name, DType::f32, qkv_dims);
    if (!wv || !bv || !qkv) return Status(StatusCode::internal, "qkv_packed_attention: cannot add values");
    std::vector<int> mask_in(a.inputs.begin() + 3, a.inputs.end());
    AttentionParams p = ap;
    p.packed_qkv = true;
    const int y = tn.outputs[0];
    const std::string aname = a.name;
    for (int n : matched)
      if (Status s = g.remove_node(n); !s) return s;
    GemmParams gp;
    gp.has_bias = true;
    auto gn = g.add_node(NodeOp::gemm, name, {aq, *wv, *bv}, {*qkv}, OpParams(gp));
    if (!gn) return gn.status();
    std::vector<int> ins = {*qkv};
    ins.insert(ins.end(), mask_in.begin(), mask_in.end());
    auto an = g.add_node(NodeOp::attention, aname + "#packed", ins, {y}, OpParams(p));
    if (!an) return an.status();
    record_fusion(g, "qkv_packed_attention", matched, {*gn, *an});
    ++rewritten;
  }
  return rewritten;
}

}  // namespace opfuse::graph
