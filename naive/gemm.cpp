// naive/gemm.cpp - general matrix multiply, the scalar reference.
//
// The story. y (M, N) = alpha * op(a) * op(b) + beta * y + bias, then the post-op chain.
// op(a) is a (M, K) or its transpose when a is stored (K, M); op(b) likewise. The naive kernel
// is the textbook triple loop in i-k-j order (the order of reference BLAS's SGEMM, with the
// roles of the loops written row-major): for each row i of y it first scales the row by beta
// (or zeroes it when beta == 0, so garbage or NaN in y is never read), then adds
// alpha * a[i][k] * b[k][:] for every k, then adds the broadcast bias. The post-op chain
// (batchnorm per column, binary with a broadcast operand, activation) then runs as separate
// full passes over y through naive::apply_post_ops.
//
// What the simd stage changes: it packs panels of op(a) and op(b) into contiguous,
// cache-sized blocks (so transposes cost nothing in the inner loop) and computes a small
// register tile of y (e.g. 6 rows x 32 columns) with vector FMAs, threading over tiles.
// What the fused stage keeps in registers: the finished y tile; bias and every post-op are
// applied to it before the single store, so y is written once instead of once per step.
#include <cassert>
#include <cstdint>

#include "naive/common.hpp"
#include "naive/naive.hpp"

namespace opfuse::naive {

void gemm(const KernelArgs& args) {
  assert(args.desc && args.desc->op == OpKind::gemm);
  const GemmParams& p = args.desc->p<GemmParams>();
  const Tensor& a = *args.in[0];
  const Tensor& b = *args.in[1];
  const Tensor& y = *args.out[0];

  // Sizes of the product: op(a) is (M, K), op(b) is (K, N).
  const std::int64_t M = y.dim(0), N = y.dim(1);
  const std::int64_t K = p.trans_a ? a.dim(0) : a.dim(1);
  assert((p.trans_a ? a.dim(1) : a.dim(0)) == M);
  assert((p.trans_b ? b.dim(1) : b.dim(0)) == K && (p.trans_b ? b.dim(0) : b.dim(1)) == N);

  // Memory steps of op(a)[i][k] and op(b)[k][j]: a transpose is just swapped strides.
  const Index as = a.strides(), bs = b.strides(), ys = y.strides();
  const std::int64_t a_i = p.trans_a ? as[1] : as[0], a_k = p.trans_a ? as[0] : as[1];
  const std::int64_t b_k = p.trans_b ? bs[1] : bs[0], b_j = p.trans_b ? bs[0] : bs[1];
  const std::int64_t y_i = ys[0], y_j = ys[1];

  const float* ap = a.data();
  const float* bp = b.data();
  float* yp = y.mutable_data();
  assert(ap && bp && yp);

  // The bias (input 2) broadcasts NumPy-style to (M, N): (N), (1,N), (M,1), (M,N) or (1).
  // Stride 0 on a dimension means "the same bias element for every index along it".
  const Tensor* bias = p.has_bias ? args.in[2] : nullptr;
  const Index bias_s = bias ? broadcast_strides(bias->desc(), y.shape()) : Index{};
  const float* biasp = bias ? bias->data() : nullptr;

  // a is (M, K) [or (K, M)]; b is (K, N) [or (N, K)]; y is (M, N).
  //
  // Why i-k-j and not the i-j-k of the dot-product definition: the innermost loop runs over
  // j, walking one row of b and one row of y with unit stride (for untransposed b), and
  // a[i][k] is a single scalar hoisted out of it. i-j-k would stride down a column of b in
  // the innermost loop, touching a new cache line per multiply. It is also the shape the
  // simd stage vectorizes: broadcast a[i][k], multiply a vector of b's row, add into y's row.
  for (std::int64_t i = 0; i < M; ++i) {
    float* yrow = yp + i * y_i;
    // beta == 0 must not read y: 0 * NaN would be NaN.
    for (std::int64_t j = 0; j < N; ++j) yrow[j * y_j] = p.beta == 0.f ? 0.f : p.beta * yrow[j * y_j];

    for (std::int64_t k = 0; k < K; ++k) {
      const float aik = p.alpha * ap[i * a_i + k * a_k];
      const float* brow = bp + k * b_k;
      for (std::int64_t j = 0; j < N; ++j) yrow[j * y_j] += aik * brow[j * b_j];
    }

    if (biasp)
      for (std::int64_t j = 0; j < N; ++j) yrow[j * y_j] += biasp[i * bias_s[0] + j * bias_s[1]];
  }

  // Post-op operands come right after the op's own inputs: a, b, [bias].
  const int first_operand = p.has_bias ? 3 : 2;
  apply_post_ops(p.post_ops, y, args.in + first_operand);
}

}  // namespace opfuse::naive
