// src/graph/passes/activation.cpp - activations into the conv / gemm epilogue; identities out.
//
// conv2d and gemm carry a post-op chain ("fusion is data"): an activation right after one, on
// its only reader, becomes the last step of that chain. The naive and simd stages still run it
// as a pass over y; the fused stage applies it to the accumulator tile before the store.
#include "fusion.hpp"
#include "src/graph/pattern.hpp"

namespace opfuse::graph {

namespace {

PostOps* post_ops_of(Node& n) {
  if (n.op == NodeOp::conv2d) return &std::get<Conv2dParams>(*n.params).post_ops;
  if (n.op == NodeOp::gemm) return &std::get<GemmParams>(*n.params).post_ops;
  return nullptr;
}

}  // namespace

Result<int> activation_into_conv_gemm(Graph& g) {
  const PatternStep producer = {{NodeOp::conv2d, NodeOp::gemm}, 0, [](const Graph&, const Node& n) {
                                  // A pool step must stay last in a conv's chain.
                                  const PostOps& ops = n.op == NodeOp::conv2d
                                                           ? std::get<Conv2dParams>(*n.params).post_ops
                                                           : std::get<GemmParams>(*n.params).post_ops;
                                  return ops.empty() || ops.back().kind != PostOp::Kind::pool;
                                }};
  const PatternStep act = {
      {NodeOp::relu, NodeOp::clip, NodeOp::leaky_relu, NodeOp::sigmoid, NodeOp::tanh, NodeOp::gelu, NodeOp::silu,
       NodeOp::hardswish},
      0,
      [](const Graph& gr, const Node& n) { return n.inputs.size() == 1 && gr.value(n.inputs[0]).dtype == DType::f32; }};
  // A gemm's batched (rows, N) output is often reshaped back to (..., M, N) before the
  // activation (bias_into_matmul's unflatten): an elementwise op commutes with a reshape, so it
  // moves into the gemm and the reshape then reshapes the activated values.
  const PatternStep view = {{NodeOp::reshape, NodeOp::flatten, NodeOp::squeeze, NodeOp::unsqueeze}, 0, nullptr};
  const auto fuse = [&](const std::vector<int>& m) -> Result<bool> {
    const Node a = g.node(m.back());
    Node& op = g.node(m[0]);
    post_ops_of(op)->push_back(PostOp::activation(std::get<UnaryParams>(*a.params).act));
    if (Status s = g.remove_node(a.id); !s) return s;
    // The node just before the activation now produces its output.
    if (Status s = g.set_output(m[m.size() - 2], 0, a.outputs[0]); !s) return s;
    std::vector<int> result(m.begin(), m.end() - 1);
    record_fusion(g, "activation_into_conv_gemm", m, result);
    return true;
  };
  auto direct = rewrite_chains(g, "activation_into_conv_gemm", {producer, act}, fuse);
  if (!direct) return direct;
  const PatternStep gemm_only = {{NodeOp::gemm}, 0, producer.where};
  auto through = rewrite_chains(g, "activation_into_conv_gemm", {gemm_only, view, act}, fuse);
  if (!through) return through;
  return *direct + *through;
}

Result<int> remove_identities(Graph& g) {
  int removed = 0;
  const std::size_t count = g.nodes().size();
  for (std::size_t id = 0; id < count; ++id) {
    const Node& n = g.node(static_cast<int>(id));
    if (n.dead || n.op != NodeOp::identity || n.inputs.size() != 1 || n.outputs.size() != 1 || n.inputs[0] < 0)
      continue;
    const int in = n.inputs[0], out = n.outputs[0];
    // A graph output keeps its name: an identity producing one stays (it runs as a view).
    bool is_output = false;
    for (int o : g.outputs()) is_output = is_output || o == out;
    if (is_output) continue;
    if (Status s = g.remove_node(static_cast<int>(id)); !s) return s;
    auto r = g.replace_all_uses(out, in);
    if (!r) return r.status();
    ++removed;
  }
  return removed;
}

}  // namespace opfuse::graph
