// fused/shared/gemm_supports.cpp - ISA-independent parts of the fused gemm: its supports()
// predicate (compiled once, not per ISA).
#include "fused/gemm.hpp"

namespace opfuse::fused {

// Post-op kinds the GEMM epilogue (fused/gemm_epilogue.hpp) runs; anything else is declined.
bool epilogue_post_op_supported(const PostOp& op) {
  switch (op.kind) {
    case PostOp::Kind::batchnorm:
    case PostOp::Kind::binary: return true;
    case PostOp::Kind::activation: return simd::act_supported(op.act.kind);
    default: return false;
  }
}

bool gemm_supports(const OpDesc& desc) {
  const auto& post = desc.p<GemmParams>().post_ops;
  if (post.size() > 8) return false;  // kEpiMaxSteps: the epilogue is a fixed array
  for (const PostOp& op : post)
    if (!epilogue_post_op_supported(op)) return false;
  return true;
}

}  // namespace opfuse::fused
