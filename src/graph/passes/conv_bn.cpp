// src/graph/passes/conv_bn.cpp - BatchNormalization folded into the convolution before it.
//
// In inference a batch norm is a per-channel affine map, y = a*x + c with a = scale /
// sqrt(var + eps) and c = beta - mean*a. After a convolution (no post-ops yet) it folds into
// the weights and bias: w'[k] = a[k] * w[k], b'[k] = a[k] * (b[k] - mean[k]) + beta[k]. One
// pass over y and one stored intermediate disappear, at every stage, and the kernels see a
// plain conv with bias. The folded weights are new constants (the originals may have other
// readers); the rest of the graph keeps reading the batch norm's output, now the conv's.
#include <fmt/format.h>

#include <cmath>

#include "fusion.hpp"
#include "src/graph/pattern.hpp"

namespace opfuse::graph {

namespace {

bool all_constant(const Graph& g, const Node& n, std::size_t from) {
  for (std::size_t k = from; k < n.inputs.size(); ++k)
    if (!is_constant_value(g, n.inputs[k]) || g.value(n.inputs[k]).dtype != DType::f32) return false;
  return true;
}

}  // namespace

Result<int> fold_batchnorm_into_conv(Graph& g) {
  const ChainPattern pattern = {
      {{NodeOp::conv2d},
       0,
       [](const Graph& gr, const Node& n) {
         const auto& p = std::get<Conv2dParams>(*n.params);
         return p.post_ops.empty() && all_constant(gr, n, 1) && gr.value(n.inputs[1]).dims.size() == 4 &&
                all_static(gr.value(n.inputs[1]).dims);
       }},
      {{NodeOp::batchnorm}, 0, [](const Graph& gr, const Node& n) { return all_constant(gr, n, 1); }},
  };
  return rewrite_chains(g, "fold_batchnorm_into_conv", pattern, [&](const std::vector<int>& m) -> Result<bool> {
    const Node conv = g.node(m[0]);
    const Node bn = g.node(m[1]);
    const Value& w = g.value(conv.inputs[1]);
    const std::int64_t K = w.dims[0].value;
    const std::size_t per_k = w.f32_data->size() / static_cast<std::size_t>(K);
    const auto& scale = *g.value(bn.inputs[1]).f32_data;
    const auto& beta = *g.value(bn.inputs[2]).f32_data;
    const auto& mean = *g.value(bn.inputs[3]).f32_data;
    const auto& var = *g.value(bn.inputs[4]).f32_data;
    const auto Ku = static_cast<std::size_t>(K);
    if (scale.size() != Ku || beta.size() != Ku || mean.size() != Ku || var.size() != Ku) return false;
    const auto& p = std::get<Conv2dParams>(*conv.params);
    const std::vector<float>* bias = p.has_bias ? g.value(conv.inputs[2]).f32_data.get() : nullptr;
    if (bias && bias->size() != Ku) return false;
    const float eps = std::get<BatchnormParams>(*bn.params).epsilon;
    std::vector<float> w2(*w.f32_data), b2(Ku);
    for (std::size_t k = 0; k < Ku; ++k) {
      // In double: the fold rounds once, as the unfused pair would per element.
      const double a = scale[k] / std::sqrt(static_cast<double>(var[k]) + eps);
      for (std::size_t i = 0; i < per_k; ++i) w2[k * per_k + i] = static_cast<float>(w2[k * per_k + i] * a);
      b2[k] = static_cast<float>(a * ((bias ? (*bias)[k] : 0.f) - mean[k]) + beta[k]);
    }
    const Dims wd = w.dims;
    auto wv = g.add_initializer(fmt::format("{}#folded:{}", w.name, bn.name), wd, std::move(w2));
    if (!wv) return wv.status();
    auto bv = g.add_initializer(fmt::format("{}#bias", bn.name), Dims{K}, std::move(b2));
    if (!bv) return bv.status();
    Node& c = g.node(conv.id);
    c.inputs = {conv.inputs[0], *wv, *bv};
    std::get<Conv2dParams>(*c.params).has_bias = true;
    if (Status s = g.remove_node(bn.id); !s) return s;
    if (Status s = g.set_output(conv.id, 0, bn.outputs[0]); !s) return s;
    record_fusion(g, "fold_batchnorm_into_conv", m, {conv.id});
    return true;
  });
}

}  // namespace opfuse::graph
