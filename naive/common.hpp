// naive/common.hpp - scalar building blocks shared by the naive kernels.
//
// Conventions: every tensor is addressed through its strides (Tensor::strides()), so one
// loop nest serves NCHW and NHWC. NaN in means NaN out for every elementwise function here.
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>

#include "opfuse/ops.hpp"
#include "opfuse/tensor.hpp"

namespace opfuse::naive {

using Index = std::array<std::int64_t, kMaxRank>;

// act(x) for one activation (see ActKind for the formulas).
float activate(const Activation& act, float x);
// a <op> b.
float apply_binary(BinaryKind kind, float a, float b);

// Strides that read `operand` at the logical index of an output of shape `out`, following
// NumPy broadcasting (trailing dims aligned, stride 0 where the operand has size 1 or lacks
// the dim). Indexed by the output's logical dims.
Index broadcast_strides(const TensorDesc& operand, const Shape& out);

// Element offset of logical index `idx` (first `rank` entries) under `strides`.
inline std::int64_t offset_of(const Index& strides, const Index& idx, int rank) {
  std::int64_t off = 0;
  for (int d = 0; d < rank; ++d) off += strides[static_cast<std::size_t>(d)] * idx[static_cast<std::size_t>(d)];
  return off;
}

// Product of non-negative factors as a workspace size in floats, saturating at SIZE_MAX so an
// absurd problem makes prepare() report out_of_memory instead of wrapping around.
inline std::size_t product_or_max(std::initializer_list<std::int64_t> factors) {
  std::size_t r = 1;
  for (std::int64_t f : factors) {
    const auto u = static_cast<std::size_t>(f);
    if (f < 0 || (u != 0 && r > SIZE_MAX / u)) return SIZE_MAX;
    r *= u;
  }
  return r;
}

// Advances idx through `shape` in row-major logical order; false after the last index.
inline bool next_index(Index& idx, const Shape& shape) {
  for (int d = shape.rank - 1; d >= 0; --d) {
    auto u = static_cast<std::size_t>(d);
    if (++idx[u] < shape.dims[u]) return true;
    idx[u] = 0;
  }
  return false;
}

// y = conv2d(x, w) + bias with p's geometry (p.post_ops and p.has_bias are ignored; bias may be
// null). Shapes come from the tensors; y is (N, K, P, Q). Defined in conv.cpp.
void conv2d_pass(const Tensor& x, const Tensor& w, const Tensor* bias, const Tensor& y, const Conv2dParams& p);

// Runs a conv2d/gemm post-op chain over y in place, one materialized pass per step.
// `operands` points at the first post-op operand tensor; channels are logical dim 1 of y
// (C for conv2d outputs (N,C,P,Q), N for gemm outputs (M,N)). A pool step (conv2d only, always
// last) is the one step that cannot run in place: it max-pools y into *pooled.
void apply_post_ops(const PostOps& post_ops, const Tensor& y, const Tensor* const* operands,
                    const Tensor* pooled = nullptr);

// y = maxpool2d(x) (is_max) or avgpool2d(x) with p's window; y's P, Q come from y. Defined in
// pool.cpp; the maxpool2d/avgpool2d ops and conv2d's pool post-op both run it.
void pool2d_pass(const Tensor& x, const Tensor& y, const Pool2dParams& p, bool is_max);

// y = batchnorm(x) per channel (logical dim 1): scale * (x - mean) / sqrt(var + eps) + bias.
// x and y may be the same tensor.
void batchnorm_pass(const Tensor& x, const Tensor& y, const Tensor& scale, const Tensor& bias, const Tensor& mean,
                    const Tensor& var, float eps);
// y = act(x) elementwise; x and y have the same shape and may alias.
void activation_pass(const Activation& act, const Tensor& x, const Tensor& y);
// y = a <op> b with broadcasting; y may alias a or b when shapes match.
void binary_pass(BinaryKind kind, const Tensor& a, const Tensor& b, const Tensor& y);

}  // namespace opfuse::naive
