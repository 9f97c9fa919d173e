// src/graph/passes/recognize.cpp - GELU and LayerNorm recognized from their decompositions
// (advanced level).
//
// Exporters at opsets before 17 (LayerNormalization) and 20 (Gelu) spell both as chains of
// elementwise ops and reductions. Run as written, the LayerNorm of BERT is nine nodes and five
// full passes over the activation (Sub, Pow, Div, Mul, Add) plus two reductions; the GELU is five
// passes over the 4x wider intermediate. Recognized, each is one registry op: a LayerNorm reads
// x once per statistic and writes y once; a GELU joins the gemm before it as a post-op
// (activation_into_conv_gemm runs again after this).
//
//   GELU (erf):  Div(x, sqrt 2) | Mul(x, 1/sqrt 2) -> Erf -> Add(., 1) -> then x * . * 0.5 in any
//                association: Mul(x, .) -> Mul(., 0.5); Mul(., 0.5) -> Mul(x, .); or a separate
//                h = Mul(x, 0.5) and Mul(h, .)
//   GELU (tanh): Pow(x, 3) -> Mul(., 0.044715) -> Add(x, .) -> Mul(., sqrt(2/pi)) -> Tanh ->
//                Add(., 1) -> the same tails
//   LayerNorm:   ReduceMean(x, last axis) -> Sub(x, mean) -> Pow(d, 2) -> ReduceMean(last axis)
//                -> Add(., eps) -> Sqrt -> Div(d, .) [-> Mul(., gamma)] [-> Add(., beta)]
// Constants must be constants and match to 1e-4 relative; the statistics must be over the last
// axis only (the registry's layernorm normalizes trailing dims: any other axis is a near miss
// that stays unfused); gamma and beta must be vectors along that axis.
#include <fmt/format.h>

#include <cmath>

#include "fusion.hpp"
#include "src/graph/pattern.hpp"

namespace opfuse::graph {

namespace {

bool near(std::optional<float> v, double want) {
  return v && std::isfinite(*v) && std::abs(*v - want) <= 1e-4 * std::abs(want);
}

// A constant number (f32 or i64 scalar).
std::optional<double> constant_number(const Graph& g, int v) {
  if (auto f = constant_scalar(g, v)) return *f;
  if (!is_constant_value(g, v)) return std::nullopt;
  const Value& x = g.value(v);
  if (x.dtype == DType::i64 && x.i64_data && x.i64_data->size() == 1) return static_cast<double>((*x.i64_data)[0]);
  return std::nullopt;
}

// The binary node reads `v` and a constant near `want` (either slot unless `slot1_only`).
bool binary_with_constant(const Graph& g, const Node& n, double want, bool slot1_only = false) {
  if (n.inputs.size() != 2) return false;
  if (near(constant_scalar(g, n.inputs[1]), want)) return true;
  return !slot1_only && near(constant_scalar(g, n.inputs[0]), want);
}

bool f32_static(const Graph& g, int v) {
  const Value& x = g.value(v);
  return x.dtype == DType::f32 && x.has_shape && all_static(x.dims) && !x.dims.empty();
}

// The tail "x * a * 0.5" after a = 1 + erf(...) (or tanh), matched from the node after a.
// `m` holds the chain so far ending at the Add; on success the tail's nodes are appended.
bool match_gelu_tail(const Graph& g, const std::vector<std::vector<int>>& consumers, int x, std::vector<int>& m) {
  const int a = g.node(m.back()).outputs[0];
  const auto& ra = consumers[static_cast<std::size_t>(a)];
  if (ra.size() != 1 || is_graph_output(g, a)) return false;
  const Node& m1 = g.node(ra[0]);
  if (m1.op != NodeOp::mul || m1.inputs.size() != 2) return false;
  const int other = other_input(m1, a);
  if (other < 0) return false;
  const auto next_mul = [&](const Node& n) -> const Node* {
    const auto& r = consumers[static_cast<std::size_t>(n.outputs[0])];
    if (r.size() != 1 || is_graph_output(g, n.outputs[0])) return nullptr;
    const Node& k = g.node(r[0]);
    return k.op == NodeOp::mul && k.inputs.size() == 2 && other_input(k, n.outputs[0]) >= 0 ? &k : nullptr;
  };
  if (other == x) {  // Mul(x, a) -> Mul(., 0.5)
    const Node* m2 = next_mul(m1);
    if (!m2 || !near(constant_scalar(g, other_input(*m2, m1.outputs[0])), 0.5)) return false;
    m.push_back(m1.id);
    m.push_back(m2->id);
    return true;
  }
  if (near(constant_scalar(g, other), 0.5)) {  // Mul(a, 0.5) -> Mul(x, .)
    const Node* m2 = next_mul(m1);
    if (!m2 || other_input(*m2, m1.outputs[0]) != x) return false;
    m.push_back(m1.id);
    m.push_back(m2->id);
    return true;
  }
  // h = Mul(x, 0.5) read only here, then Mul(h, a).
  const Value& hv = g.value(other);
  if (hv.producer < 0 || is_graph_output(g, other) || consumers[static_cast<std::size_t>(other)].size() != 1)
    return false;
  const Node& h = g.node(hv.producer);
  if (h.op != NodeOp::mul || other_input(h, x) < 0 || !near(constant_scalar(g, other_input(h, x)), 0.5)) return false;
  m.push_back(h.id);
  m.push_back(m1.id);
  return true;
}

Result<bool> replace_by_gelu(Graph& g, const std::vector<int>& m, int x, ActKind kind) {
  // The tail's last node is the one whose output leaves the group ([.., m1, m2], or [.., h, m1]
  // with the separate h branch).
  const int last = m.back();
  const int y = g.node(last).outputs[0];
  const std::string name = g.node(last).name;
  for (int id : m)
    if (Status s = g.remove_node(id); !s) return s;
  UnaryParams p;
  p.act = Activation::of(kind);
  auto node = g.add_node(NodeOp::gelu, name + "#gelu", {x}, {y}, OpParams(p));
  if (!node) return node.status();
  record_fusion(g, kind == ActKind::gelu_erf ? "gelu_from_erf" : "gelu_from_tanh", m, {*node});
  return true;
}

}  // namespace

Result<int> gelu_from_erf(Graph& g) {
  // Div(x, sqrt 2) or Mul(x, 1/sqrt 2) -> Erf -> Add(., 1); the tail is matched by hand (it
  // reads x again, which a chain cannot say).
  const ChainPattern pattern = {
      {{NodeOp::div, NodeOp::mul},
       0,
       [](const Graph& gr, const Node& n) {
         return n.op == NodeOp::div ? binary_with_constant(gr, n, std::sqrt(2.0), true)
                                    : binary_with_constant(gr, n, std::sqrt(0.5));
       }},
      {{NodeOp::erf}, 0, nullptr},
      {{NodeOp::add}, -1, [](const Graph& gr, const Node& n) { return binary_with_constant(gr, n, 1.0); }},
  };
  return rewrite_chains(g, "gelu_from_erf", pattern, [&](std::vector<int> m) -> Result<bool> {
    const Node& scale = g.node(m[0]);
    const int x = is_constant_value(g, scale.inputs[0]) ? scale.inputs[1] : scale.inputs[0];
    if (!f32_static(g, x)) return false;
    const auto consumers = g.consumer_lists();
    if (!match_gelu_tail(g, consumers, x, m) || !fusable(g, m, "gelu_from_erf")) return false;
    return replace_by_gelu(g, m, x, ActKind::gelu_erf);
  });
}

Result<int> gelu_from_tanh(Graph& g) {
  const ChainPattern pattern = {
      {{NodeOp::pow},
       0,
       [](const Graph& gr, const Node& n) {
         const auto e = constant_number(gr, n.inputs[1]);
         return e && *e == 3.0;
       }},
      {{NodeOp::mul}, -1, [](const Graph& gr, const Node& n) { return binary_with_constant(gr, n, 0.044715); }},
      {{NodeOp::add}, -1, nullptr},
      {{NodeOp::mul},
       -1,
       [](const Graph& gr, const Node& n) { return binary_with_constant(gr, n, std::sqrt(2.0 / M_PI)); }},
      {{NodeOp::tanh}, 0, nullptr},
      {{NodeOp::add}, -1, [](const Graph& gr, const Node& n) { return binary_with_constant(gr, n, 1.0); }},
  };
  return rewrite_chains(g, "gelu_from_tanh", pattern, [&](std::vector<int> m) -> Result<bool> {
    const int x = g.node(m[0]).inputs[0];
    if (!f32_static(g, x) || other_input(g.node(m[2]), g.node(m[1]).outputs[0]) != x) return false;
    const auto consumers = g.consumer_lists();
    if (!match_gelu_tail(g, consumers, x, m) || !fusable(g, m, "gelu_from_tanh")) return false;
    return replace_by_gelu(g, m, x, ActKind::gelu_tanh);
  });
}

namespace {

// A ReduceMean over the last axis only, keeping dims.
bool mean_over_last_axis(const Graph& g, const Node& n) {
  if (n.inputs.empty() || !f32_static(g, n.inputs[0])) return false;
  const std::int64_t* keep = n.attr<std::int64_t>("keepdims");
  if (keep && *keep != 1) return false;
  if (n.inputs.size() < 2 || !is_constant_value(g, n.inputs[1])) return false;
  const Value& axes = g.value(n.inputs[1]);
  if (axes.dtype != DType::i64 || !axes.i64_data || axes.i64_data->size() != 1) return false;
  const auto rank = static_cast<std::int64_t>(g.value(n.inputs[0]).dims.size());
  const std::int64_t a = (*axes.i64_data)[0];
  return a == -1 || a == rank - 1;
}

// A constant f32 vector of C values along the last axis: dims (C), (1, C), (1, 1, C), ...
bool last_axis_vector(const Graph& g, int v, std::int64_t C) {
  if (!is_constant_value(g, v)) return false;
  const Value& x = g.value(v);
  if (x.dtype != DType::f32 || x.dims.empty() || !all_static(x.dims) || x.dims.back().value != C) return false;
  for (std::size_t i = 0; i + 1 < x.dims.size(); ++i)
    if (x.dims[i].value != 1) return false;
  return true;
}

}  // namespace

Result<int> layernorm_from_reductions(Graph& g) {
  const ChainPattern core = {
      {{NodeOp::reduce_mean}, 0, mean_over_last_axis},
      {{NodeOp::sub}, 1, nullptr},
      {{NodeOp::pow},
       0,
       [](const Graph& gr, const Node& n) {
         const auto e = constant_number(gr, n.inputs[1]);
         return e && *e == 2.0;
       }},
      {{NodeOp::reduce_mean}, 0, mean_over_last_axis},
      {{NodeOp::add},
       -1,
       [](const Graph& gr, const Node& n) {
         return n.inputs.size() == 2 && (constant_scalar(gr, n.inputs[0]) || constant_scalar(gr, n.inputs[1]));
       }},
      {{NodeOp::sqrt}, 0, nullptr},
      {{NodeOp::div}, 1, nullptr},
  };
  ChainPattern with_scale = core;
  with_scale.push_back({{NodeOp::mul}, -1, nullptr});
  ChainPattern with_both = with_scale;
  with_both.push_back({{NodeOp::add}, -1, nullptr});
  const auto rewrite = [&](const std::vector<int>& m) -> Result<bool> {
    const Node& mean = g.node(m[0]);
    const Node& sub = g.node(m[1]);
    const Node& div = g.node(m[6]);
    const int x = mean.inputs[0];
    // Sub(x, mean) and Div(x - mean, .): the diamond closes on the same values.
    if (sub.inputs[0] != x || div.inputs[0] != sub.outputs[0]) return false;
    const Node& eps_add = g.node(m[4]);
    const float eps = *constant_scalar(g, other_input(eps_add, g.node(m[3]).outputs[0]));
    if (!(eps >= 0.f) || !std::isfinite(eps)) return false;
    const std::int64_t C = g.value(x).dims.back().value;
    int gamma = -1, beta = -1;
    if (m.size() >= 8) {
      gamma = other_input(g.node(m[7]), div.outputs[0]);
      if (!last_axis_vector(g, gamma, C)) return false;
    }
    if (m.size() >= 9) {
      beta = other_input(g.node(m[8]), g.node(m[7]).outputs[0]);
      if (!last_axis_vector(g, beta, C)) return false;
    }
    const Node& last = g.node(m.back());
    if (g.value(last.outputs[0]).dims != g.value(x).dims) return false;  // no broadcast past x
    // The registry's layernorm takes scale and bias as (C).
    const auto as_vector = [&](int v, float fill, const char* what) -> Result<int> {
      std::vector<float> d = v >= 0 ? *g.value(v).f32_data : std::vector<float>(static_cast<std::size_t>(C), fill);
      return g.add_initializer(fmt::format("{}#{}", last.name, what), Dims{C}, std::move(d));
    };
    auto s = as_vector(gamma, 1.f, "scale");
    if (!s) return s.status();
    std::vector<int> inputs = {x, *s};
    NormParams p;
    p.axis = -1;
    p.epsilon = eps;
    p.has_bias = beta >= 0;
    if (beta >= 0) {
      auto b = as_vector(beta, 0.f, "bias");
      if (!b) return b.status();
      inputs.push_back(*b);
    }
    const int y = last.outputs[0];
    const std::string name = last.name + "#layernorm";
    for (int id : m)
      if (Status st = g.remove_node(id); !st) return st;
    auto node = g.add_node(NodeOp::layernorm, name, inputs, {y}, OpParams(p));
    if (!node) return node.status();
    record_fusion(g, "layernorm_from_reductions", m, {*node});
    return true;
  };
  int total = 0;
  for (const ChainPattern* p : std::initializer_list<const ChainPattern*>{&with_both, &with_scale, &core}) {
    auto n = rewrite_chains(g, "layernorm_from_reductions", *p, rewrite);
    if (!n) return n;
    total += *n;
  }
  return total;
}

}  // namespace opfuse::graph
