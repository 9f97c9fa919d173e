// naive/norm.cpp - layernorm and rmsnorm, optionally with a residual add in front.
//
// The story. Both ops normalize every "row" of x, where a row is the block of trailing dims
// [axis, rank) (the normalized shape, n elements) and the leading dims [0, axis) count rows:
//   layernorm  y = (s - mean(s)) / sqrt(var(s) + eps) * scale + bias
//   rmsnorm    y = s / sqrt(mean(s^2) + eps) * scale
// scale and bias have the normalized shape. s is x, or with has_residual s = x + residual,
// the "add & norm" of every transformer block; write_sum also returns s (output 1), which is
// the residual stream the next block adds to.
// The naive kernels do it the way an unfused framework would:
//   0. residual pass  s = x + residual over the whole tensor, materialized into the sum
//                     output (write_sum) or else into y (naive::binary_pass);
//   1. mean pass      per row, mean(s)                      (rmsnorm: mean(s^2))
//   2. variance pass  per row, var = mean((s - mean)^2)     (layernorm only)
//   3. normalize pass per row, y from s, scale [and bias].
// The variance is the biased (population) variance computed in a second pass over the row,
// not as E[s^2] - mean^2, which cancels catastrophically when |mean| >> std. The sums
// accumulate in double so the reference's own rounding stays far below the tolerance the
// faster float stages are held to. A NaN anywhere in a row makes that row's mean (and so
// every output of the row) NaN: NaN in, NaN out.
//
// In-place: y may be x's buffer. Pass 0 reads each x element before it writes the same
// element of s; passes 1 and 2 only read; pass 3 reads s_j before it writes y_j at the same
// address, so every element of a row is fully read before it is overwritten.
//
// What the simd stage changes: when the normalized dims are the contiguous ones (the usual
// axis = -1), each pass over a row is a vector loop with a scalar tail, the residual add is
// done inside the mean pass instead of as its own pass over the tensor, and rows are split
// across threads.
// What the fused stage keeps in registers: add and norm in one pass. Rows of a hidden size up
// to a few thousand fit in registers/L1, so s = x + residual is computed once, kept while
// the mean and variance are reduced (Welford or two in-register passes), and normalized and
// stored straight from there; the sum output is stored from the same registers. x and the
// residual are read once and y written once, instead of the tensor going through memory once
// per pass.
#include <cassert>
#include <cmath>
#include <cstdint>

#include "naive/common.hpp"
#include "naive/naive.hpp"

namespace opfuse::naive {

namespace {

// Which kind of normalization a row gets.
enum class NormKind { layer, rms };

// Strides of dims [axis, rank) of `s`, renumbered from 0: addresses within one row.
Index tail_strides(const Index& s, int axis, int rank) {
  Index t{};
  for (int d = axis; d < rank; ++d) t[static_cast<std::size_t>(d - axis)] = s[static_cast<std::size_t>(d)];
  return t;
}

// Shape of dims [first, last) of `shape`.
Shape dims_between(const Shape& shape, int first, int last) {
  Shape r;
  r.rank = last - first;
  for (int d = first; d < last; ++d)
    r.dims[static_cast<std::size_t>(d - first)] = shape.dims[static_cast<std::size_t>(d)];
  return r;
}

// The shared body of layernorm and rmsnorm (they differ in pass 1-3 arithmetic only).
void norm(const KernelArgs& args, NormKind kind) {
  const NormParams& p = args.desc->p<NormParams>();
  const bool has_bias = kind == NormKind::layer && p.has_bias;
  // Inputs: x, scale, [bias], [residual]. Outputs: y, [sum].
  const Tensor& x = *args.in[0];
  const Tensor& scale = *args.in[1];
  const Tensor* bias = has_bias ? args.in[2] : nullptr;
  const Tensor* residual = p.has_residual ? args.in[has_bias ? 3 : 2] : nullptr;
  const Tensor& y = *args.out[0];
  const Tensor* sum_out = p.has_residual && p.write_sum ? args.out[1] : nullptr;

  const Shape& shape = x.shape();
  const int rank = shape.rank;
  const int axis = p.axis < 0 ? p.axis + rank : p.axis;
  assert(axis >= 0 && axis < rank && y.shape() == shape);
  assert(x.data() && y.mutable_data() && scale.data() && (!bias || bias->data()));

  // Pass 0 - x, residual and s are (d0, ..., dr-1): s = x + residual, materialized.
  // Without a residual, s is x itself.
  const Tensor* s = &x;
  if (residual) {
    s = sum_out ? sum_out : &y;
    binary_pass(BinaryKind::add, x, *residual, *s);
  }

  // A row: the leading dims [0, axis) pick it, the trailing dims [axis, rank) walk it.
  const Shape rows = dims_between(shape, 0, axis);    // rank 0 when axis == 0: one row
  const Shape row = dims_between(shape, axis, rank);  // the normalized shape
  const double n = static_cast<double>(row.numel());
  const int row_rank = row.rank;

  const Index ss = s->strides(), ys = y.strides();
  const Index s_in = tail_strides(ss, axis, rank), y_in = tail_strides(ys, axis, rank);
  // scale and bias have the normalized shape (broadcast_strides also accepts a shape that
  // merely broadcasts to it, at no cost).
  const Index g_in = broadcast_strides(scale.desc(), row);
  const Index b_in = bias ? broadcast_strides(bias->desc(), row) : Index{};
  const float* sp = s->data();
  const float* gp = scale.data();
  const float* bp = bias ? bias->data() : nullptr;
  float* yp = y.mutable_data();
  const double eps = p.epsilon;

  // s is (rows..., row...); y is (rows..., row...); scale and bias are (row...).
  Index r{};
  do {
    const float* srow = sp + offset_of(ss, r, axis);
    float* yrow = yp + offset_of(ys, r, axis);
    Index i{};

    // Pass 1 - s is (row...): mean(s) for layernorm, mean(s^2) for rmsnorm.
    double acc = 0.0;
    do {
      const double v = srow[offset_of(s_in, i, row_rank)];
      acc += kind == NormKind::layer ? v : v * v;
    } while (next_index(i, row));
    const double mean = acc / n;  // rmsnorm: the mean square

    // Pass 2 - s is (row...): layernorm's variance mean((s - mean)^2), around the exact mean.
    double inv_std = 0.0;
    if (kind == NormKind::layer) {
      double var = 0.0;
      i = Index{};
      do {
        const double d = srow[offset_of(s_in, i, row_rank)] - mean;
        var += d * d;
      } while (next_index(i, row));
      inv_std = 1.0 / std::sqrt(var / n + eps);
    } else {
      inv_std = 1.0 / std::sqrt(mean + eps);  // 1 / rms
    }

    // Pass 3 - s is (row...); y is (row...); scale, bias are (row...): normalize.
    i = Index{};
    do {
      const double v = srow[offset_of(s_in, i, row_rank)];
      const double g = gp[offset_of(g_in, i, row_rank)];
      double out = 0.0;
      if (kind == NormKind::layer) {
        out = (v - mean) * inv_std * g + (bp ? static_cast<double>(bp[offset_of(b_in, i, row_rank)]) : 0.0);
      } else {
        out = v * inv_std * g;
      }
      yrow[offset_of(y_in, i, row_rank)] = static_cast<float>(out);
    } while (next_index(i, row));
  } while (next_index(r, rows));
}

}  // namespace

void layernorm(const KernelArgs& args) {
  assert(args.desc && args.desc->op == OpKind::layernorm);
  norm(args, NormKind::layer);
}

void rmsnorm(const KernelArgs& args) {
  assert(args.desc && args.desc->op == OpKind::rmsnorm);
  norm(args, NormKind::rms);
}

}  // namespace opfuse::naive
