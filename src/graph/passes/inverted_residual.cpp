// src/graph/passes/inverted_residual.cpp - a MobileNetV2 block into one inverted_residual (full).
//
// The block is expand 1x1 -> BN -> ReLU6 -> depthwise 3x3 -> BN -> ReLU6 -> project 1x1 -> BN
// [-> Add(x)] (blocks with expansion ratio 1 start at the depthwise conv). Even with each BN
// folded and each ReLU6 in a conv epilogue, the expanded tensor (6x the block's channels) is
// written by the expand conv and read by the depthwise one, and the depthwise output is written
// and read by the projection. The registry's inverted_residual computes the block in one pass
// (fused/inverted_residual.cpp: the expanded rows live in a 3-row ring in L2, the depthwise
// output in an L1 tile), so neither intermediate reaches memory. It takes the block's raw
// weights and batch-norm statistics and folds them at prepare, so this fusion runs on the
// unfolded graph, before fold_batchnorm_into_conv.
//
// Each conv must be bias-free with no post-ops yet; the 1x1s stride 1 unpadded, the depthwise
// 3x3 with groups == channels, padding 1, stride 1 or 2, dilation 1; the activations
// Clip(0, 6); the three batch norms constant with one epsilon. The residual Add must read the
// block's own input (stride 1, Cin == Cout).
#include <algorithm>

#include "fusion.hpp"
#include "src/graph/pattern.hpp"

namespace opfuse::graph {

namespace {

bool plain_conv(const Graph& g, const Node& n) {
  const auto& p = std::get<Conv2dParams>(*n.params);
  return p.post_ops.empty() && !p.has_bias && n.inputs.size() == 2 && is_constant_value(g, n.inputs[1]) &&
         g.value(n.inputs[1]).dims.size() == 4 && all_static(g.value(n.inputs[1]).dims) && p.dilation_h == 1 &&
         p.dilation_w == 1 && g.value(n.inputs[0]).dims.size() == 4 && all_static(g.value(n.inputs[0]).dims);
}

bool pointwise(const Graph& g, const Node& n) {
  if (!plain_conv(g, n)) return false;
  const auto& p = std::get<Conv2dParams>(*n.params);
  const Dims& w = g.value(n.inputs[1]).dims;
  return p.groups == 1 && p.stride_h == 1 && p.stride_w == 1 && p.pad_top == 0 && p.pad_left == 0 &&
         p.pad_bottom == 0 && p.pad_right == 0 && w[2].value == 1 && w[3].value == 1;
}

bool depthwise3x3(const Graph& g, const Node& n) {
  if (!plain_conv(g, n)) return false;
  const auto& p = std::get<Conv2dParams>(*n.params);
  const Dims& w = g.value(n.inputs[1]).dims;
  const std::int64_t C = g.value(n.inputs[0]).dims[1].value;
  return p.groups == C && w[0].value == C && w[1].value == 1 && w[2].value == 3 && w[3].value == 3 &&
         p.stride_h == p.stride_w && (p.stride_h == 1 || p.stride_h == 2) && p.pad_top == 1 && p.pad_left == 1 &&
         p.pad_bottom == 1 && p.pad_right == 1;
}

bool constant_bn(const Graph& g, const Node& n) {
  if (n.inputs.size() != 5) return false;
  for (std::size_t i = 1; i < 5; ++i)
    if (!is_constant_value(g, n.inputs[i]) || g.value(n.inputs[i]).dtype != DType::f32) return false;
  return true;
}

bool relu6(const Graph&, const Node& n) {
  const Activation& a = std::get<UnaryParams>(*n.params).act;
  return n.inputs.size() == 1 && a.kind == ActKind::clip && a.alpha == 0.f && a.beta == 6.f;
}

}  // namespace

Result<int> inverted_residual_block(Graph& g) {
  const PatternStep expand = {{NodeOp::conv2d}, 0, pointwise};
  const PatternStep bn = {{NodeOp::batchnorm}, 0, constant_bn};
  const PatternStep act = {{NodeOp::clip}, 0, relu6};
  const PatternStep dw = {{NodeOp::conv2d}, 0, depthwise3x3};
  const PatternStep project = {{NodeOp::conv2d}, 0, pointwise};
  const PatternStep add = {{NodeOp::add}, -1, nullptr};
  const auto rewrite = [&](const std::vector<int>& m, bool has_expand, bool residual) -> Result<bool> {
    const Node first = g.node(m[0]);
    const int x = first.inputs[0];
    const std::size_t dwi = has_expand ? 3 : 0;
    const Node& dwn = g.node(m[dwi]);
    const Node& last_bn = g.node(m[dwi + 4]);
    float eps = -1.f;
    for (std::size_t i : {dwi + 1, dwi + 4, has_expand ? std::size_t{1} : dwi + 1}) {
      const float e = std::get<BatchnormParams>(*g.node(m[i]).params).epsilon;
      if (eps >= 0.f && e != eps) return false;
      eps = e;
    }
    InvertedResidualParams p;
    p.has_expand = has_expand;
    p.stride = std::get<Conv2dParams>(*dwn.params).stride_h;
    p.epsilon = eps;
    p.residual = residual;
    const Dims xd = g.value(x).dims;
    const Dims yd = g.value(last_bn.outputs[0]).dims;
    if (residual) {
      const Node& a = g.node(m.back());
      if (other_input(a, last_bn.outputs[0]) != x || p.stride != 1 || xd != yd) return false;
    }
    std::vector<int> inputs = {x};
    const auto conv_bn = [&](std::size_t conv_at) {
      inputs.push_back(g.node(m[conv_at]).inputs[1]);
      const Node& b = g.node(m[conv_at + 1]);
      inputs.insert(inputs.end(), b.inputs.begin() + 1, b.inputs.end());
    };
    if (has_expand) conv_bn(0);
    conv_bn(dwi);
    conv_bn(dwi + 3);
    const int y = g.node(m.back()).outputs[0];
    const std::string name = g.node(m[dwi + 3]).name + "#block";
    for (int id : m)
      if (Status s = g.remove_node(id); !s) return s;
    auto node = g.add_node(NodeOp::inverted_residual, name, inputs, {y}, OpParams(p));
    if (!node) return node.status();
    record_fusion(g, "inverted_residual_block", m, {*node});
    return true;
  };
  int total = 0;
  for (bool has_expand : {true, false})
    for (bool residual : {true, false}) {
      ChainPattern pat;
      if (has_expand) pat = {expand, bn, act};
      for (const PatternStep& s : {dw, bn, act, project, bn}) pat.push_back(s);
      if (residual) pat.push_back(add);
      auto n = rewrite_chains(g, "inverted_residual_block", pat,
                              [&](const std::vector<int>& m) { return rewrite(m, has_expand, residual); });
      if (!n) return n;
      total += *n;
    }
  return total;
}

}  // namespace opfuse::graph
