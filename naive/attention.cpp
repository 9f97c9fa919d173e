// naive/attention.cpp - scaled dot-product attention, materializing the score matrix.
//
// The story. For every batch b and head h, with Q (Sq, D), K (Skv, D), V (Skv, Dv):
//   S = scale * Q K^T + mask         (Sq, Skv) scores; scale 0 means 1/sqrt(D)
//   P = softmax(S) along keys         each query's weights over the keys
//   O = P V                           (Sq, Dv)
// The causal flag hides key j from query i when j > i + (Skv - Sq), bottom-right aligned:
// the usual lower triangle when Sq == Skv, and for a suffix of queries (decoding with a KV
// cache) each query sees every cached key plus the new ones up to itself. The additive mask
// broadcasts NumPy-style to (B, H, Sq, Skv): (Sq, Skv) for one mask shared by all heads,
// (B, 1, 1, Skv) for key padding per sequence, and so on.
// The naive kernel does exactly that, one head at a time: it writes the whole Sq x Skv score
// matrix into the workspace (Sq * Skv floats, allocated once at prepare time), runs the
// three-pass softmax of naive/softmax.cpp over each row in place, then multiplies by V. The
// dot products and sums accumulate in double, so the reference's own rounding stays far
// below the tolerance the faster float stages are held to.
//
// Edge rules (the contract every stage follows):
//   - Causally hidden keys take no part at all: their scores are never computed and their V
//     rows never read, exactly as a kernel that skips hidden blocks behaves. Keys hidden by
//     an additive -inf mask get weight 0 and are multiplied into O like any other key.
//   - A query row whose visible scores are all -inf (fully masked, or causal with
//     Sq > Skv leaving the first queries no key) has no probability mass: its output row is
//     0, as in softmax.cpp (PyTorch would give NaN).
//   - NaN in a visible score (from Q, K or the mask) makes that query's output row NaN; NaN
//     in V reaches every query that puts weight on it (0 * NaN is NaN).
//
// What the simd stage changes: QK^T and PV become small register-tiled GEMMs over contiguous
// (packed) rows of K and V, the softmax rows are vectorized, and (b, h, query blocks) are
// split across threads, each with its own slice of score workspace.
// What the fused stage keeps in registers: flash attention (Dao et al., 2022). The score
// matrix is never materialized: for a block of queries it streams K and V in blocks, keeps the
// running row max m, the running sum l and the unnormalized output accumulator O in registers,
// and when a new block raises the max it rescales l and O by exp(m_old - m_new) - the online
// softmax. O is divided by l once at the end. Memory traffic drops from O(Sq * Skv) per head
// to reading Q, K, V once, and causal blocks entirely above the diagonal are skipped.
#include <cassert>
#include <cmath>
#include <cstdint>
#include <limits>

#include "naive/common.hpp"
#include "naive/naive.hpp"

namespace opfuse::naive {

std::size_t attention_workspace(const OpDesc& d) {
  // One head's score matrix: q is (B, H, Sq, D), k is (B, H, Skv, D).
  const std::int64_t Sq = d.inputs[0].shape[2], Skv = d.inputs[1].shape[2];
  return product_or_max({Sq, Skv});
}

void attention(const KernelArgs& args) {
  assert(args.desc && args.desc->op == OpKind::attention);
  const AttentionParams& p = args.desc->p<AttentionParams>();
  const Tensor& q = *args.in[0];
  const Tensor& k = *args.in[1];
  const Tensor& v = *args.in[2];
  const Tensor* mask = p.has_mask ? args.in[3] : nullptr;
  const Tensor& o = *args.out[0];

  const std::int64_t B = q.dim(0), H = q.dim(1), Sq = q.dim(2), D = q.dim(3);
  const std::int64_t Skv = k.dim(2), Dv = v.dim(3);
  assert(k.dim(0) == B && k.dim(1) == H && k.dim(3) == D);
  assert(v.dim(0) == B && v.dim(1) == H && v.dim(2) == Skv);
  assert(o.dim(0) == B && o.dim(1) == H && o.dim(2) == Sq && o.dim(3) == Dv);

  const double scale = p.scale != 0.f ? static_cast<double>(p.scale) : 1.0 / std::sqrt(static_cast<double>(D));
  constexpr double kInf = std::numeric_limits<double>::infinity();

  // Memory steps of each logical dim (any layout); the mask's are 0 where it broadcasts.
  const Index qs = attention_strides(*args.desc, 0), ks = attention_strides(*args.desc, 1),
              vs = attention_strides(*args.desc, 2), os = attention_strides(*args.desc, 3);
  const Index ms = mask ? broadcast_strides(mask->desc(), Shape{B, H, Sq, Skv}) : Index{};
  const float* qp = q.data();
  const float* kp = k.data();
  const float* vp = v.data();
  const float* mp = mask ? mask->data() : nullptr;
  float* op = o.mutable_data();
  float* scores = args.workspace;  // (Sq, Skv), row-major, reused for every head
  assert(qp && kp && vp && op && (!mask || mp) && scores);

  // q is (B, H, Sq, D); k is (B, H, Skv, D); v is (B, H, Skv, Dv); o is (B, H, Sq, Dv).
  for (std::int64_t b = 0; b < B; ++b) {
    for (std::int64_t h = 0; h < H; ++h) {
      const float* qh = qp + b * qs[0] + h * qs[1];
      const float* kh = kp + b * ks[0] + h * ks[1];
      const float* vh = vp + b * vs[0] + h * vs[1];
      const float* mh = mp ? mp + b * ms[0] + h * ms[1] : nullptr;
      float* oh = op + b * os[0] + h * os[1];

      for (std::int64_t i = 0; i < Sq; ++i) {
        float* srow = scores + i * Skv;
        // Keys [0, visible) are the ones query i may see; all Skv without causal.
        std::int64_t visible = Skv;
        if (p.causal) {
          const std::int64_t last = i + (Skv - Sq);  // the last key query i sees
          visible = last < 0 ? 0 : (last + 1 < Skv ? last + 1 : Skv);
        }

        // S row - q row is (D); k is (visible, D); scores row is (visible):
        // s_j = scale * (q_i . k_j) + mask_ij; the row max and any NaN on the way.
        double max = -kInf;
        bool has_nan = false;
        for (std::int64_t j = 0; j < visible; ++j) {
          double dot = 0.0;
          for (std::int64_t d = 0; d < D; ++d)
            dot += static_cast<double>(qh[i * qs[2] + d * qs[3]]) * static_cast<double>(kh[j * ks[2] + d * ks[3]]);
          double s = scale * dot;
          if (mh) s += static_cast<double>(mh[i * ms[2] + j * ms[3]]);
          srow[j] = static_cast<float>(s);  // the max below is of the stored (float) scores
          if (std::isnan(srow[j])) has_nan = true;
          if (srow[j] > max) max = srow[j];
        }

        float* orow = oh + i * os[2];
        if (has_nan || max == -kInf) {
          // NaN in, NaN out; a query with nothing visible gets a zero row (rules above).
          const float fill = has_nan ? std::numeric_limits<float>::quiet_NaN() : 0.f;
          // o row is (Dv)
          for (std::int64_t e = 0; e < Dv; ++e) orow[e * os[3]] = fill;
          continue;
        }

        // P row - scores row is (visible): p_j = exp(s_j - max) / sum, in place. max is
        // finite here, or +inf (a score overflowed), which turns the row into NaN.
        double sum = 0.0;
        for (std::int64_t j = 0; j < visible; ++j) {
          const double e = std::exp(static_cast<double>(srow[j]) - max);
          srow[j] = static_cast<float>(e);
          sum += e;
        }
        const double inv_sum = 1.0 / sum;
        for (std::int64_t j = 0; j < visible; ++j) srow[j] = static_cast<float>(srow[j] * inv_sum);

        // O row - P row is (visible); v is (visible, Dv); o row is (Dv): o_i = sum_j p_j v_j.
        for (std::int64_t e = 0; e < Dv; ++e) {
          double acc = 0.0;
          for (std::int64_t j = 0; j < visible; ++j)
            acc += static_cast<double>(srow[j]) * static_cast<double>(vh[j * vs[2] + e * vs[3]]);
          orow[e * os[3]] = static_cast<float>(acc);
        }
      }
    }
  }
}

}  // namespace opfuse::naive
