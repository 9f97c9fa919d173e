// naive/batchnorm.cpp - inference batch normalization, the scalar reference.
//
// The story. With the statistics frozen, batchnorm is a per-channel affine map:
//   y[n][c][...] = scale[c] * (x[n][c][...] - mean[c]) / sqrt(var[c] + epsilon) + bias[c]
// for x of rank 2 to 5 with channels at logical dim 1, in either layout. The naive kernel
// evaluates that formula literally for every element (including the square root, recomputed
// per element) through naive::batchnorm_pass, the same pass the conv2d/gemm post-op chains use.
//
// What the simd stage changes: it folds the four vectors into one multiplier and one offset per
// channel, a = scale / sqrt(var + eps) and b = bias - a * mean, so the hot loop is one FMA per
// element, vectorized along the innermost memory dimension. The fused stage goes further and
// folds a and b into the weights and bias of the preceding convolution at prepare time, so the
// batchnorm disappears from the execute path entirely.
#include <cassert>

#include "naive/common.hpp"
#include "naive/naive.hpp"

namespace opfuse::naive {

void batchnorm(const KernelArgs& args) {
  assert(args.desc && args.desc->op == OpKind::batchnorm);
  const BatchnormParams& p = args.desc->p<BatchnormParams>();
  // x is (N, C, ...); scale, bias, mean, var are (C); y is like x (and may be x itself).
  batchnorm_pass(*args.in[0], *args.out[0], *args.in[1], *args.in[2], *args.in[3], *args.in[4], p.epsilon);
}

}  // namespace opfuse::naive
