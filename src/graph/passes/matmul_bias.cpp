// src/graph/passes/matmul_bias.cpp - a bias Add after a MatMul becomes one gemm with bias.
//
// Exporters write a linear layer as MatMul(x, W) then Add(bias, .) (PyTorch puts the bias
// first). When W is a constant matrix (K, N) and the bias a constant of N values, the pair is a
// gemm with a bias: the bias initializes the accumulators instead of a second pass over y. A
// batched x (..., M, K) is the gemm's (M', K) with M' the product of its leading dims - the
// same memory, so the reshapes on either side run as views. Runs after shape inference (the
// plan's dims are static), so every reshape gets constant dims.
#include <fmt/format.h>

#include "fusion.hpp"
#include "src/graph/pattern.hpp"

namespace opfuse::graph {

Result<int> bias_into_matmul(Graph& g) {
  const ChainPattern pattern = {
      {{NodeOp::matmul},
       0,
       [](const Graph& gr, const Node& n) {
         if (n.inputs.size() != 2 || !is_constant_value(gr, n.inputs[1])) return false;
         const Value& a = gr.value(n.inputs[0]);
         const Value& b = gr.value(n.inputs[1]);
         return a.dtype == DType::f32 && b.dtype == DType::f32 && a.has_shape && all_static(a.dims) &&
                a.dims.size() >= 2 && b.dims.size() == 2 && all_static(b.dims);
       }},
      {{NodeOp::add}, -1, nullptr},
  };
  return rewrite_chains(g, "bias_into_matmul", pattern, [&](const std::vector<int>& m) -> Result<bool> {
    const Node mm = g.node(m[0]);
    const Node add = g.node(m[1]);
    const int bias = add.inputs[0] == mm.outputs[0] ? add.inputs[1] : add.inputs[0];
    if (!is_constant_value(g, bias) || g.value(bias).dtype != DType::f32) return false;
    const Dims a = g.value(mm.inputs[0]).dims;
    const std::int64_t K = a.back().value, N = g.value(mm.inputs[1]).dims[1].value;
    // The bias must be N values along the output's last dim: (N), (1, N), (1, 1, N), ...
    const Dims& bd = g.value(bias).dims;
    if (bd.empty() || !all_static(bd) || bd.back().value != N) return false;
    for (std::size_t i = 0; i + 1 < bd.size(); ++i)
      if (bd[i].value != 1) return false;
    const Dims y = g.value(add.outputs[0]).dims;
    if (y.size() != a.size()) return false;  // a bias of higher rank than y would broadcast y up
    std::int64_t rows = 1;
    for (std::size_t i = 0; i + 1 < a.size(); ++i) rows *= a[i].value;
    int bias2 = bias;
    if (bd.size() != 1) {  // the registry's gemm bias is (N) or (M, N): flatten (1, .., N) to (N)
      auto v =
          g.add_initializer(fmt::format("{}#bias_row", add.name), Dims{N}, std::vector<float>(*g.value(bias).f32_data));
      if (!v) return v.status();
      bias2 = *v;
    }
    GemmParams p;
    p.has_bias = true;
    if (a.size() == 2) {
      if (Status s = g.remove_node(add.id); !s) return s;
      if (Status s = g.remove_node(mm.id); !s) return s;
      auto node = g.add_node(NodeOp::gemm, mm.name, {mm.inputs[0], mm.inputs[1], bias2}, {add.outputs[0]}, p);
      if (!node) return node.status();
      record_fusion(g, "bias_into_matmul", m, {*node});
      return true;
    }
    // (..., M, K) -> (rows, K) -> gemm -> (rows, N) -> (..., M, N): both reshapes are views.
    auto shape_in = g.add_initializer(fmt::format("{}#rows_k", mm.name), Dims{2}, std::vector<std::int64_t>{rows, K});
    auto shape_out =
        g.add_initializer(fmt::format("{}#dims", add.name), Dims{static_cast<std::int64_t>(y.size())}, [&] {
          std::vector<std::int64_t> d;
          for (const Dim& x : y) d.push_back(x.value);
          return d;
        }());
    auto a2 = g.add_value(fmt::format("{}#in_2d", mm.name), DType::f32, Dims{rows, K});
    auto y2 = g.add_value(fmt::format("{}#out_2d", mm.name), DType::f32, Dims{rows, N});
    if (!shape_in || !shape_out || !a2 || !y2)
      return Status(StatusCode::internal, "bias_into_matmul: cannot add values");
    if (Status s = g.remove_node(add.id); !s) return s;
    if (Status s = g.remove_node(mm.id); !s) return s;
    auto r1 = g.add_node(NodeOp::reshape, mm.name + "#flatten", {mm.inputs[0], *shape_in}, {*a2}, std::nullopt,
                         {{"allowzero", std::int64_t{0}}});
    auto r2 = g.add_node(NodeOp::gemm, mm.name, {*a2, mm.inputs[1], bias2}, {*y2}, p);
    auto r3 = g.add_node(NodeOp::reshape, add.name + "#unflatten", {*y2, *shape_out}, {add.outputs[0]}, std::nullopt,
                         {{"allowzero", std::int64_t{0}}});
    for (const Result<int>* r : {&r1, &r2, &r3})
      if (!*r) return r->status();
    record_fusion(g, "bias_into_matmul", m, {*r1, *r2, *r3});
    return true;
  });
}

}  // namespace opfuse::graph
