// fused/eltwise.hpp - declarations of the fused eltwise kernels (see fused/fused.hpp for the pattern):
// OPFUSE_SIMD_FUNCTOR(Name) / OPFUSE_SIMD_FUNCTOR_PREPARED(Name) inside namespace opfuse::fused,
// ISA-independent supports() predicates in fused/shared/.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "fused/fused.hpp"

namespace opfuse::fused {

OPFUSE_SIMD_FUNCTOR_PREPARED(EltwiseChain);  // eltwise.cpp: the whole chain per register block, one pass

// ---- ISA-independent code, in fused/shared/eltwise_supports.cpp -------------------------------

// One step of a compiled chain: what the interpreter does to a register block.
struct ChainOp {
  enum Code : std::uint8_t {
    activation,  // v = act(v), kind in `act.kind`
    add,         // v = v <op> operand (loaded: inner stride 1)
    sub,
    mul,
    div,
    add_s,  // the same with the operand splatted (inner stride 0)
    sub_s,
    mul_s,
    div_s,
  };
  Code code = activation;
  Activation act;
  int operand = -1;  // index into ChainPlan::operand strides (binary steps)
};

// The chain compiled at prepare: the step program plus the loop over memory shared by x, y and
// every operand. dims are y's dims in memory order (outermost first), size-1 dims dropped and
// neighbours merged wherever x and every operand are contiguous across them; the innermost dim
// is the vector run (x stride 1, each operand stride 1 or 0).
struct ChainPlan {
  std::vector<ChainOp> ops;
  int rank = 1;
  std::array<std::int64_t, kMaxRank> dims{};
  std::array<std::int64_t, kMaxRank> x{};                   // x's (= y's) strides per plan dim
  std::vector<std::array<std::int64_t, kMaxRank>> operand;  // each operand's strides per plan dim
  bool vectorizable = false;
  std::int64_t inner() const { return dims[static_cast<std::size_t>(rank - 1)]; }
};
ChainPlan plan_chain(const OpDesc& desc);

// Binary steps (operands) a fused chain takes: their per-row pointers live on the stack.
inline constexpr int kChainMaxOperands = 32;
// plan_chain(desc).vectorizable and at most kChainMaxOperands binary steps.
bool chain_supports(const OpDesc& desc);

}  // namespace opfuse::fused
