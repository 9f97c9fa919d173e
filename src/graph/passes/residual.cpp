// src/graph/passes/residual.cpp - a residual Add into the conv epilogue (advanced level).
//
// ResNet's blocks end in conv -> (folded BN) -> Add(., shortcut) -> Relu. The add reads one
// full tensor besides the conv output; as a binary post-op it is applied while the conv's output
// tile is still in registers (fused stage) or cache (simd), and the Relu after it then joins the
// chain as well (activation_into_conv_gemm runs again). The shortcut becomes one more input of
// the conv. That cannot create a cycle: the conv's output has the add as its only reader, so
// the shortcut cannot depend on it.
#include "fusion.hpp"
#include "src/graph/pattern.hpp"

namespace opfuse::graph {

Result<int> residual_add_into_conv(Graph& g) {
  const ChainPattern pattern = {
      {{NodeOp::conv2d},
       0,
       [](const Graph&, const Node& n) {
         const auto& ops = std::get<Conv2dParams>(*n.params).post_ops;
         return ops.empty() || ops.back().kind != PostOp::Kind::pool;
       }},
      {{NodeOp::add}, -1, nullptr},
  };
  return rewrite_chains(g, "residual_add_into_conv", pattern, [&](const std::vector<int>& m) -> Result<bool> {
    const Node add = g.node(m[1]);
    const int conv_out = g.node(m[0]).outputs[0];
    const int other = add.inputs[0] == conv_out ? add.inputs[1] : add.inputs[0];
    // The same dims as the conv output (no broadcast), f32: the epilogue reads it tile by tile.
    const Value& o = g.value(other);
    if (o.dtype != DType::f32 || !o.has_shape || o.dims != g.value(conv_out).dims) return false;
    Node& conv = g.node(m[0]);
    std::get<Conv2dParams>(*conv.params).post_ops.push_back(PostOp::add());
    conv.inputs.push_back(other);
    if (Status s = g.remove_node(add.id); !s) return s;
    if (Status s = g.set_output(conv.id, 0, add.outputs[0]); !s) return s;
    record_fusion(g, "residual_add_into_conv", m, {conv.id});
    return true;
  });
}

}  // namespace opfuse::graph
