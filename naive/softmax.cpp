// naive/softmax.cpp - softmax along any axis, with scale and an additive mask.
//
// The story. y = softmax(scale * x + mask) along `axis`: every "row" is the set of elements
// that differ only in the axis index, and for each row
//   z_j = scale * x_j + mask_j
//   y_j = exp(z_j - max_k z_k) / sum_k exp(z_k - max_k z_k).
// Subtracting the row max changes nothing mathematically (it cancels between numerator and
// denominator) but keeps every exp argument <= 0, so nothing overflows: the "stable" softmax.
// The naive kernel makes three passes over each row:
//   1. max     read z, find its max (and whether any z is NaN);
//   2. exp-sum read z again, store e_j = exp(z_j - max) into y and add it to the sum;
//   3. scale   multiply each y_j by 1 / sum.
// The reductions (the exp sum) accumulate in double so the reference's own rounding stays
// far below the tolerance the faster float stages are held to.
//
// Edge rules (the contract every stage follows):
//   - NaN anywhere in a row's z (from x, the mask, or 0 * inf when scale == 0) makes the
//     whole output row NaN. (+inf - +inf is NaN too, so a row holding +inf is NaN as well.)
//   - A fully masked row, every z_j == -inf, has no probability mass to distribute. PyTorch
//     returns NaN (0/0); we return an all-zero row, as attention kernels (flash attention,
//     xFormers) do, so that a padded query row contributes nothing instead of poisoning
//     whatever consumes it. Detected as "row max is -inf".
//
// In-place: y may be x's buffer. Row elements of x and y then sit at the same addresses and
// rows are disjoint; pass 2 reads x_j before it overwrites y_j and pass 3 reads only y.
//
// What the simd stage changes: when the axis is the last memory dim (the usual case) a row is
// contiguous, so max, exp (a vector polynomial) and the sum run on vectors with a scalar tail;
// rows are split across threads. A strided axis (softmax over channels of an NCHW tensor)
// instead vectorizes across neighbouring rows, which are then the contiguous direction.
// What the fused stage keeps in registers: the running max and sum of the "online softmax"
// (Milakov & Gimelshein, 2018): one pass keeps (m, s) and rescales s by exp(m_old - m_new)
// whenever the max grows, so a row is read twice (online max-sum, then write) instead of
// three times. Flash attention (naive/attention.cpp tells that story) builds on the same trick.
#include <cassert>
#include <cmath>
#include <cstdint>
#include <limits>

#include "naive/common.hpp"
#include "naive/naive.hpp"

namespace opfuse::naive {

void softmax(const KernelArgs& args) {
  assert(args.desc && args.desc->op == OpKind::softmax);
  const SoftmaxParams& p = args.desc->p<SoftmaxParams>();
  const Tensor& x = *args.in[0];
  const Tensor* mask = p.has_mask ? args.in[1] : nullptr;
  const Tensor& y = *args.out[0];

  const Shape& shape = x.shape();
  const int rank = shape.rank;
  const int axis = p.axis < 0 ? p.axis + rank : p.axis;
  assert(axis >= 0 && axis < rank && y.shape() == shape);
  const auto ax = static_cast<std::size_t>(axis);
  const std::int64_t n = shape.dims[ax];  // row length

  const Index xs = x.strides(), ys = y.strides();
  // The mask broadcasts (NumPy rules) to x's shape: stride 0 where it repeats.
  const Index ms = mask ? broadcast_strides(mask->desc(), shape) : Index{};
  const float* xp = x.data();
  const float* mp = mask ? mask->data() : nullptr;
  float* yp = y.mutable_data();
  assert(xp && yp && (!mask || mp));
  const double scale = p.scale;
  constexpr double kInf = std::numeric_limits<double>::infinity();

  // Rows are indexed by every dim except `axis`: walk `rows`, which is x's shape with the
  // axis dim collapsed to 1, and step along the axis with each tensor's axis stride.
  Shape rows = shape;
  rows.dims[ax] = 1;

  // x is (d0, .., n at axis, .., dr-1); mask broadcasts to it; y is like x.
  Index idx{};
  do {
    const float* xrow = xp + offset_of(xs, idx, rank);
    const float* mrow = mask ? mp + offset_of(ms, idx, rank) : nullptr;
    float* yrow = yp + offset_of(ys, idx, rank);
    const std::int64_t x_j = xs[ax], m_j = ms[ax], y_j = ys[ax];

    // z_j = scale * x_j + mask_j, recomputed in each pass that needs it.
    auto z = [&](std::int64_t j) {
      return scale * static_cast<double>(xrow[j * x_j]) + (mrow ? static_cast<double>(mrow[j * m_j]) : 0.0);
    };

    // Pass 1 - z is (n): the row max, and whether any element is NaN.
    double max = -kInf;
    bool has_nan = false;
    for (std::int64_t j = 0; j < n; ++j) {
      const double v = z(j);
      if (std::isnan(v)) has_nan = true;
      if (v > max) max = v;
    }

    if (has_nan || max == -kInf) {
      // NaN in, NaN out; a fully masked row is all zeros (see the rules above).
      const float fill = has_nan ? std::numeric_limits<float>::quiet_NaN() : 0.f;
      // y is (n)
      for (std::int64_t j = 0; j < n; ++j) yrow[j * y_j] = fill;
    } else {
      // Pass 2 - z is (n); y is (n): e_j = exp(z_j - max) into y, and their sum.
      double sum = 0.0;
      for (std::int64_t j = 0; j < n; ++j) {
        const double e = std::exp(z(j) - max);
        yrow[j * y_j] = static_cast<float>(e);
        sum += e;
      }

      // Pass 3 - y is (n): normalize. sum >= 1 (the max element contributes exp(0)), except
      // when max is +inf: then z - max is NaN for that element and the whole row is NaN.
      const double inv_sum = 1.0 / sum;
      for (std::int64_t j = 0; j < n; ++j) yrow[j * y_j] = static_cast<float>(yrow[j * y_j] * inv_sum);
    }
  } while (next_index(idx, rows));
}

}  // namespace opfuse::naive
