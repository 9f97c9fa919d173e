// simd/shared/eltwise_supports.cpp - ISA-independent supports() predicates of the simd eltwise
// kernels and the broadcast loop planner (compiled once, not per ISA).
#include <cstddef>
#include <utility>

#include "simd/simd.hpp"

namespace opfuse::simd {

namespace {

using Strides = std::array<std::int64_t, kMaxRank>;

std::size_t u(int i) { return static_cast<std::size_t>(i); }

// Element strides reading `operand` at the logical index of a tensor of shape `out`: trailing
// dims aligned, 0 on dims the operand lacks or has as 1.
Strides operand_strides(const TensorDesc& operand, const Shape& out) {
  Strides s{};
  const Strides dense = dense_strides(operand.shape, operand.layout);
  const int shift = out.rank - operand.shape.rank;
  for (int d = shift < 0 ? 0 : shift; d < out.rank; ++d) {
    const int od = d - shift;
    s[u(d)] = operand.shape[od] == 1 ? 0 : dense[u(od)];
  }
  return s;
}

bool inner_ok(std::int64_t stride) { return stride == 0 || stride == 1; }

}  // namespace

bool act_supported(ActKind kind) noexcept {
  switch (kind) {
    case ActKind::relu:
    case ActKind::clip:
    case ActKind::leaky_relu:
    case ActKind::sigmoid:
    case ActKind::tanh:
    case ActKind::gelu_erf:
    case ActKind::gelu_tanh:
    case ActKind::silu:
    case ActKind::hardswish:
    case ActKind::linear: return true;
  }
  return false;
}

bool unary_supports(const OpDesc& desc) { return act_supported(desc.p<UnaryParams>().act.kind); }

BroadcastPlan plan_broadcast(const TensorDesc& y, const TensorDesc& a, const TensorDesc& b) {
  const Shape& shape = y.shape;
  const int r = shape.rank;
  const Strides ys = dense_strides(shape, y.layout);
  const Strides as = operand_strides(a, shape), bs = operand_strides(b, shape);

  // Logical dims in y's memory order, outermost first, without size-1 dims.
  std::array<int, kMaxRank> order{};
  int n = 0;
  for (int d = 0; d < r; ++d)
    if (shape[d] > 1) order[u(n++)] = d;
  for (int i = 1; i < n; ++i)  // insertion sort by descending y stride (n <= 5)
    for (int j = i; j > 0 && ys[u(order[u(j - 1)])] < ys[u(order[u(j)])]; --j) std::swap(order[u(j)], order[u(j - 1)]);

  BroadcastPlan plan;
  if (n == 0) {  // a single element
    plan.rank = 1;
    plan.dims[0] = 1;
    plan.y[0] = 1;
    plan.vectorizable = true;
    return plan;
  }
  // Merge from the inside out: dim d folds into the block inside it when every tensor steps
  // over d exactly as far as over the whole block (0 for an operand broadcast across both).
  int k = kMaxRank;  // plan dims are built right-aligned, then shifted down
  for (int i = n - 1; i >= 0; --i) {
    const int d = order[u(i)];
    if (k < kMaxRank) {
      const std::size_t in = u(k);
      const std::int64_t len = plan.dims[in];
      if (ys[u(d)] == plan.y[in] * len && as[u(d)] == plan.a[in] * len && bs[u(d)] == plan.b[in] * len) {
        plan.dims[in] *= shape[d];
        continue;
      }
    }
    --k;
    plan.dims[u(k)] = shape[d];
    plan.y[u(k)] = ys[u(d)];
    plan.a[u(k)] = as[u(d)];
    plan.b[u(k)] = bs[u(d)];
  }
  plan.rank = kMaxRank - k;
  for (int i = 0; i < plan.rank; ++i) {
    plan.dims[u(i)] = plan.dims[u(i + k)];
    plan.y[u(i)] = plan.y[u(i + k)];
    plan.a[u(i)] = plan.a[u(i + k)];
    plan.b[u(i)] = plan.b[u(i + k)];
  }
  const std::size_t last = u(plan.rank - 1);
  plan.vectorizable = plan.y[last] == 1 && inner_ok(plan.a[last]) && inner_ok(plan.b[last]);
  return plan;
}

bool binary_supports(const OpDesc& desc) {
  auto out = infer_outputs(desc);
  if (!out || desc.inputs.size() != 2) return false;
  return plan_broadcast((*out)[0], desc.inputs[0], desc.inputs[1]).vectorizable;
}

bool chain_supports(const OpDesc& desc) {
  const TensorDesc& x = desc.inputs[0];
  std::size_t operand = 1;
  for (const ChainStep& s : desc.p<ChainParams>().steps) {
    if (s.kind == ChainStep::Kind::unary) {
      if (!act_supported(s.act.kind)) return false;
    } else {
      if (operand >= desc.inputs.size() || !plan_broadcast(x, x, desc.inputs[operand]).vectorizable) return false;
      ++operand;
    }
  }
  return true;
}

}  // namespace opfuse::simd
