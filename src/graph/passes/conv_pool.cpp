// src/graph/passes/conv_pool.cpp - a max pool after a conv becomes the conv's last post-op
// (advanced level): the ResNet stem's conv 7x7/2 + bn + relu + maxpool 3x3/2.
//
// The stem's conv output (64 x 112 x 112, 3.2 MB) is written once and read back once by the
// pool only to be reduced 4x. With the pool as the last step of the conv's chain, the fused
// kernel pools rows of the conv output while they are still in cache and writes only the pooled
// (64 x 56 x 56) tensor. The window must be what a pool step accepts (dilation 1, floor mode,
// padding at most half the window); anything else stays a separate maxpool2d.
#include "fusion.hpp"
#include "src/graph/pattern.hpp"

namespace opfuse::graph {

Result<int> conv_maxpool(Graph& g) {
  const ChainPattern pattern = {
      {{NodeOp::conv2d},
       0,
       [](const Graph&, const Node& n) {
         const auto& ops = std::get<Conv2dParams>(*n.params).post_ops;
         for (const PostOp& op : ops)
           if (op.kind == PostOp::Kind::pool || op.kind == PostOp::Kind::binary) return false;
         return true;
       }},
      {{NodeOp::maxpool2d},
       0,
       [](const Graph&, const Node& n) {
         const auto& p = std::get<Pool2dParams>(*n.params);
         return p.dilation_h == 1 && p.dilation_w == 1 && !p.ceil_mode && 2 * p.pad_top <= p.kernel_h &&
                2 * p.pad_bottom <= p.kernel_h && 2 * p.pad_left <= p.kernel_w && 2 * p.pad_right <= p.kernel_w;
       }},
  };
  return rewrite_chains(g, "conv_maxpool", pattern, [&](const std::vector<int>& m) -> Result<bool> {
    const Node pool = g.node(m[1]);
    const auto& pp = std::get<Pool2dParams>(*pool.params);
    PostOp::Window w;
    w.kernel_h = pp.kernel_h, w.kernel_w = pp.kernel_w;
    w.stride_h = pp.stride_h, w.stride_w = pp.stride_w;
    w.pad_top = pp.pad_top, w.pad_left = pp.pad_left, w.pad_bottom = pp.pad_bottom, w.pad_right = pp.pad_right;
    Node& conv = g.node(m[0]);
    std::get<Conv2dParams>(*conv.params).post_ops.push_back(PostOp::maxpool(w));
    if (Status s = g.remove_node(pool.id); !s) return s;
    if (Status s = g.set_output(conv.id, 0, pool.outputs[0]); !s) return s;
    record_fusion(g, "conv_maxpool", m, {conv.id});
    return true;
  });
}

}  // namespace opfuse::graph
