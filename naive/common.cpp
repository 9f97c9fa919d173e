// naive/common.cpp - scalar activations, binary ops, broadcasting and post-op passes.
#include "common.hpp"

#include <cassert>
#include <cmath>

namespace opfuse::naive {

float activate(const Activation& act, float x) {
  // Each branch is the textbook formula; NaN propagates because no branch maps NaN to a
  // constant (comparisons with NaN are false, so `x < 0` keeps NaN on the x side).
  switch (act.kind) {
    case ActKind::relu: return x < 0.f ? 0.f : x;
    case ActKind::clip:
      if (std::isnan(x)) return x;
      return x < act.alpha ? act.alpha : (x > act.beta ? act.beta : x);
    case ActKind::leaky_relu: return x < 0.f ? act.alpha * x : x;
    case ActKind::sigmoid: return 1.f / (1.f + std::exp(-x));
    case ActKind::tanh: return std::tanh(x);
    case ActKind::gelu_erf: return 0.5f * x * (1.f + std::erf(x * 0.70710678118654752f));
    case ActKind::gelu_tanh: {
      const float k = 0.79788456080286536f;  // sqrt(2/pi)
      return 0.5f * x * (1.f + std::tanh(k * (x + 0.044715f * x * x * x)));
    }
    case ActKind::silu: return x / (1.f + std::exp(-x));
    case ActKind::hardswish: {
      if (std::isnan(x)) return x;
      float r = x + 3.f;
      r = r < 0.f ? 0.f : (r > 6.f ? 6.f : r);
      return x * r / 6.f;
    }
    case ActKind::linear: return act.alpha * x + act.beta;
  }
  return x;
}

float apply_binary(BinaryKind kind, float a, float b) {
  switch (kind) {
    case BinaryKind::add: return a + b;
    case BinaryKind::sub: return a - b;
    case BinaryKind::mul: return a * b;
    case BinaryKind::div: return a / b;
  }
  return a;
}

Index broadcast_strides(const TensorDesc& operand, const Shape& out) {
  Index s{};
  const auto dense = dense_strides(operand.shape, operand.layout);
  const int shift = out.rank - operand.shape.rank;  // operand dims align with the trailing dims
  for (int d = 0; d < out.rank; ++d) {
    const int od = d - shift;
    if (od < 0) continue;  // missing leading dim: broadcast
    auto u = static_cast<std::size_t>(od);
    s[static_cast<std::size_t>(d)] = operand.shape.dims[u] == 1 ? 0 : dense[u];
  }
  return s;
}

void activation_pass(const Activation& act, const Tensor& x, const Tensor& y) {
  // x and y have the same shape; layouts may differ, so walk logical indices.
  const Shape& shape = y.shape();
  const Index xs = x.strides(), ys = y.strides();
  const float* xp = x.data();
  float* yp = y.mutable_data();
  Index idx{};
  do {
    yp[offset_of(ys, idx, shape.rank)] = activate(act, xp[offset_of(xs, idx, shape.rank)]);
  } while (next_index(idx, shape));
}

void binary_pass(BinaryKind kind, const Tensor& a, const Tensor& b, const Tensor& y) {
  const Shape& shape = y.shape();
  const Index as = broadcast_strides(a.desc(), shape), bs = broadcast_strides(b.desc(), shape);
  const Index ys = y.strides();
  const float* ap = a.data();
  const float* bp = b.data();
  float* yp = y.mutable_data();
  Index idx{};
  do {
    const float va = ap[offset_of(as, idx, shape.rank)];
    const float vb = bp[offset_of(bs, idx, shape.rank)];
    yp[offset_of(ys, idx, shape.rank)] = apply_binary(kind, va, vb);
  } while (next_index(idx, shape));
}

void batchnorm_pass(const Tensor& x, const Tensor& y, const Tensor& scale, const Tensor& bias, const Tensor& mean,
                    const Tensor& var, float eps) {
  // x, y are (N, C, ...); the four vectors are (C). Logical dim 1 picks the channel.
  const Shape& shape = y.shape();
  const Index xs = x.strides(), ys = y.strides();
  const float* xp = x.data();
  float* yp = y.mutable_data();
  Index idx{};
  do {
    const std::int64_t c = idx[1];
    const float inv_std = 1.f / std::sqrt(var.data()[c] + eps);
    const float v = xp[offset_of(xs, idx, shape.rank)];
    yp[offset_of(ys, idx, shape.rank)] = scale.data()[c] * (v - mean.data()[c]) * inv_std + bias.data()[c];
  } while (next_index(idx, shape));
}

void apply_post_ops(const PostOps& post_ops, const Tensor& y, const Tensor* const* operands, const Tensor* pooled) {
  // One full pass over y per step: exactly the memory traffic the fused stage avoids.
  for (const PostOp& p : post_ops) {
    switch (p.kind) {
      case PostOp::Kind::batchnorm:
        batchnorm_pass(y, y, *operands[0], *operands[1], *operands[2], *operands[3], p.epsilon);
        break;
      case PostOp::Kind::binary: binary_pass(p.binary, y, *operands[0], y); break;
      case PostOp::Kind::activation: activation_pass(p.act, y, y); break;
      case PostOp::Kind::pool:  // the last step (validated): y, the conv output, into *pooled
        assert(pooled && "a pool post-op needs the pooled output");
        pool2d_pass(y, *pooled, p.pool_params(), true);
        break;
    }
    operands += post_op_operands(p);
  }
}

}  // namespace opfuse::naive
