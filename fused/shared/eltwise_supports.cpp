// fused/shared/eltwise_supports.cpp - ISA-independent part of the fused eltwise_chain kernel: the
// chain compiler (step program + one joint loop plan over x, y and every operand) and its
// supports() predicate. Compiled once, without ISA flags.
#include <cstddef>
#include <utility>

#include "fused/eltwise.hpp"
#include "simd/eltwise.hpp"
#include "simd/norm.hpp"

namespace opfuse::fused {

namespace {
using Strides = std::array<std::int64_t, kMaxRank>;
std::size_t u(int i) { return static_cast<std::size_t>(i); }
}  // namespace

ChainPlan plan_chain(const OpDesc& desc) {
  ChainPlan plan;
  const TensorDesc& xd = desc.inputs[0];
  const Shape& shape = xd.shape;
  const int r = shape.rank;

  // The program: one op per step; binary steps name their operand (inputs 1, 2, ... in order).
  std::vector<Strides> ops_strides;  // logical strides of each operand over x's shape
  bool ok = true;
  for (const ChainStep& s : desc.p<ChainParams>().steps) {
    ChainOp op;
    if (s.kind == ChainStep::Kind::unary) {
      op.code = ChainOp::activation;
      op.act = s.act;
      ok = ok && simd::act_supported(s.act.kind);
    } else {
      const std::size_t in = ops_strides.size() + 1;
      if (in >= desc.inputs.size()) return plan;  // not a valid desc: decline
      op.operand = static_cast<int>(ops_strides.size());
      op.code = static_cast<ChainOp::Code>(ChainOp::add + static_cast<int>(s.binary));  // splat decided below
      ops_strides.push_back(simd::broadcast_strides(desc.inputs[in], shape));
    }
    plan.ops.push_back(op);
  }
  const std::size_t nops = ops_strides.size();
  const Strides xs = dense_strides(shape, xd.layout);

  // Logical dims in x's memory order, outermost first, without size-1 dims.
  std::array<int, kMaxRank> order{};
  int n = 0;
  for (int d = 0; d < r; ++d)
    if (shape[d] > 1) order[u(n++)] = d;
  for (int i = 1; i < n; ++i)  // insertion sort by descending x stride (n <= 5)
    for (int j = i; j > 0 && xs[u(order[u(j - 1)])] < xs[u(order[u(j)])]; --j) std::swap(order[u(j)], order[u(j - 1)]);

  plan.operand.assign(nops, Strides{});
  if (n == 0) {  // a single element
    plan.rank = 1;
    plan.dims[0] = 1;
    plan.x[0] = 1;
  } else {
    // Merge from the inside out: dim d folds into the block inside it when every tensor steps over
    // d exactly as far as over the whole block (0 for an operand broadcast across both).
    int k = kMaxRank;  // plan dims are built right-aligned, then shifted down
    for (int i = n - 1; i >= 0; --i) {
      const int d = order[u(i)];
      if (k < kMaxRank) {
        const std::size_t in = u(k);
        const std::int64_t len = plan.dims[in];
        bool merge = xs[u(d)] == plan.x[in] * len;
        for (std::size_t o = 0; merge && o < nops; ++o) merge = ops_strides[o][u(d)] == plan.operand[o][in] * len;
        if (merge) {
          plan.dims[in] *= shape[d];
          continue;
        }
      }
      --k;
      plan.dims[u(k)] = shape[d];
      plan.x[u(k)] = xs[u(d)];
      for (std::size_t o = 0; o < nops; ++o) plan.operand[o][u(k)] = ops_strides[o][u(d)];
    }
    plan.rank = kMaxRank - k;
    for (int i = 0; i < plan.rank; ++i) {
      plan.dims[u(i)] = plan.dims[u(i + k)];
      plan.x[u(i)] = plan.x[u(i + k)];
      for (std::size_t o = 0; o < nops; ++o) plan.operand[o][u(i)] = plan.operand[o][u(i + k)];
    }
  }
  const std::size_t last = u(plan.rank - 1);
  ok = ok && plan.x[last] == 1;
  for (ChainOp& op : plan.ops) {
    if (op.operand < 0) continue;
    const std::int64_t s = plan.operand[u(op.operand)][last];
    if (s == 0)
      op.code = static_cast<ChainOp::Code>(op.code + (ChainOp::add_s - ChainOp::add));
    else if (s != 1)
      ok = false;  // strided along the vector run (mixed layouts): not vectorizable, decline
  }
  plan.vectorizable = ok;
  return plan;
}

bool chain_supports(const OpDesc& desc) {
  const ChainPlan plan = plan_chain(desc);
  return plan.vectorizable && plan.operand.size() <= static_cast<std::size_t>(kChainMaxOperands);
}

}  // namespace opfuse::fused
