// simd/shared/conv_supports.cpp - ISA-independent supports() predicates of the simd conv kernels
// (compiled once, not per ISA).
#include "simd/simd.hpp"

namespace opfuse::simd {

bool conv_post_ops_supported(const Conv2dParams& p) {
  if (p.post_ops.size() > kConvMaxPostOps) return false;  // the chain plan is a fixed array
  for (const PostOp& op : p.post_ops) {
    if (op.kind == PostOp::Kind::activation && !act_supported(op.act.kind)) return false;  // simd/activation.hpp
    if (op.kind == PostOp::Kind::pool) return false;  // conv + maxpool: simd/conv_pool.cpp composes the two
  }
  return true;
}

bool conv_depthwise_supports(const OpDesc& desc) {
  const auto& p = desc.p<Conv2dParams>();
  const std::int64_t c = desc.inputs[0].shape[1], k = desc.inputs[1].shape[0];
  return p.groups == c && k == c && conv_post_ops_supported(p);
}

bool conv_1x1_supports(const OpDesc& desc) {
  const auto& p = desc.p<Conv2dParams>();
  const Shape& w = desc.inputs[1].shape;
  return p.groups == 1 && w[2] == 1 && w[3] == 1 && p.stride_h == 1 && p.stride_w == 1 && p.pad_top == 0 &&
         p.pad_left == 0 && p.pad_bottom == 0 && p.pad_right == 0 && conv_post_ops_supported(p);
}

// Few input channels (the RGB stems), groups 1, NCHW in and out: any R, S, stride, dilation and
// pads (the depthwise kernel's phase-split planes).
bool conv_smallc_supports(const OpDesc& desc) {
  const auto& p = desc.p<Conv2dParams>();
  return p.groups == 1 && desc.inputs[0].layout == Layout::nchw && desc.inputs[0].shape[1] <= 4 &&
         conv_post_ops_supported(p);
}

// Any geometry and any groups (grouped convolutions run the same kernel once per group).
bool conv_direct_supports(const OpDesc& desc) { return conv_post_ops_supported(desc.p<Conv2dParams>()); }

}  // namespace opfuse::simd
