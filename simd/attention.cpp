// simd/attention.cpp - scaled dot-product attention, unfused, vectorized.
//
// naive: per (b, h) the whole Sq x Skv score matrix in the workspace, double-precision dot
//        products one element at a time, three softmax passes, then P V (naive/attention.cpp).
// simd:  work items are (b, h, block of 4 query rows), split across OpenMP threads; each thread
//        owns a 4 x Skv score block in the prepared state (allocated at prepare, per thread).
//        S = Q K^T: each key row k_j is loaded once per block and FMA'd against the 4 query
//          rows over D (4 vector accumulators, horizontal add at the end, scalar D tail).
//        Softmax per query row: scale and mask in one vector pass that also finds the max and
//          any NaN, exp(s - max) in a second pass with the sum; 1/sum is applied to O at the end
//          instead of in a third pass over P.
//        O = P V: axpy of V rows into up to 4 vector accumulators per Dv chunk.
//        Rules as in naive: causally hidden keys are never read, a query with no visible key
//        (or only -inf scores) gets 0, a NaN score makes its query row NaN.
// fused: flash attention - K/V streamed in blocks, running max / sum / O kept in registers,
//        the score matrix never written to memory.
// GCC 12's AVX-512 headers build min/max/roundscale from _mm512_undefined_ps(), which
// -Wmaybe-uninitialized flags at every inlining site (GCC bug 105593, fixed in GCC 13).

#include <cassert>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <memory>

#include "simd/common.hpp"
#include "simd/vmath.hpp"

namespace opfuse::simd {

namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr std::int64_t kRows = 4;  // query rows per work item

std::int64_t round16(std::int64_t n) { return (n + 15) / 16 * 16; }

// Dot products of 4 query rows q[r] (D) with keys [0, nk) of k (rows ks apart): s[r * ld + j].
template <class Arch>
void qk_block(const float* const q[kRows], const float* k, std::int64_t ks, std::int64_t D, std::int64_t nk, float* s,
              std::int64_t ld) {
  using B = fbatch<Arch>;
  constexpr std::int64_t W = B::size;
  for (std::int64_t j = 0; j < nk; ++j) {
    const float* kj = k + j * ks;
    B a0(0.f), a1(0.f), a2(0.f), a3(0.f);
    std::int64_t d = 0;
    for (; d + W <= D; d += W) {
      const B kv = B::load_unaligned(kj + d);
      a0 = xsimd::fma(B::load_unaligned(q[0] + d), kv, a0);
      a1 = xsimd::fma(B::load_unaligned(q[1] + d), kv, a1);
      a2 = xsimd::fma(B::load_unaligned(q[2] + d), kv, a2);
      a3 = xsimd::fma(B::load_unaligned(q[3] + d), kv, a3);
    }
    float t0 = xsimd::hadd(a0), t1 = xsimd::hadd(a1), t2 = xsimd::hadd(a2), t3 = xsimd::hadd(a3);
    for (; d < D; ++d) {  // scalar D tail
      t0 += q[0][d] * kj[d];
      t1 += q[1][d] * kj[d];
      t2 += q[2][d] * kj[d];
      t3 += q[3][d] * kj[d];
    }
    s[j] = t0;
    s[ld + j] = t1;
    s[2 * ld + j] = t2;
    s[3 * ld + j] = t3;
  }
}

// One query row: s (n scores, raw dots) -> scale, mask, softmax weights (unnormalized) and
// o (Dv) = sum_j p_j v_j. m is the mask row (step mj) or null; v rows are vs apart.
template <class Arch>
void softmax_pv(float* s, std::int64_t n, float scale, const float* m, std::int64_t mj, const float* v, std::int64_t vs,
                std::int64_t Dv, float* o) {
  using B = fbatch<Arch>;
  constexpr std::int64_t W = B::size;
  // Scale + mask, stored back; the max of the stored scores and any NaN.
  const B vscale(scale);
  B vmax(-kInf);
  auto nan = vmax != vmax;
  std::int64_t j = 0;
  for (; j + W <= n; j += W) {
    B z = B::load_unaligned(s + j) * vscale;
    if (m) z += load_strided<Arch>(m + j * mj, mj);
    z.store_unaligned(s + j);
    nan = nan | (z != z);
    vmax = xsimd::max(vmax, z);
  }
  float mx = hmax<Arch>(vmax);
  bool has_nan = xsimd::any(nan);
  for (; j < n; ++j) {  // scalar tail
    const float z = scale * s[j] + (m ? m[j * mj] : 0.f);
    s[j] = z;
    if (std::isnan(z)) has_nan = true;
    if (z > mx) mx = z;
  }
  if (has_nan || mx == -kInf) {  // NaN row -> NaN; nothing visible -> 0
    const float fill = has_nan ? kNaN : 0.f;
    for (std::int64_t e = 0; e < Dv; ++e) o[e] = fill;
    return;
  }
  // p_j = exp(s_j - max), unnormalized, and their sum.
  const B vm(mx);
  B vsum(0.f);
  for (j = 0; j + W <= n; j += W) {
    const B e = vmath::exp<Arch>(B::load_unaligned(s + j) - vm);
    e.store_unaligned(s + j);
    vsum += e;
  }
  float sum = xsimd::hadd(vsum);
  for (; j < n; ++j) {
    const float e = vmath::exp<Arch>(B(s[j] - mx)).get(0);
    s[j] = e;
    sum += e;
  }
  const float inv = 1.f / sum;
  const B vinv(inv);
  // o = (sum_j p_j v_j) / sum: chunks of 4 vectors, then 1 vector, then scalar columns.
  std::int64_t c = 0;
  for (; c + 4 * W <= Dv; c += 4 * W) {
    B a0(0.f), a1(0.f), a2(0.f), a3(0.f);
    for (j = 0; j < n; ++j) {
      const B pj(s[j]);
      const float* vj = v + j * vs + c;
      a0 = xsimd::fma(pj, B::load_unaligned(vj), a0);
      a1 = xsimd::fma(pj, B::load_unaligned(vj + W), a1);
      a2 = xsimd::fma(pj, B::load_unaligned(vj + 2 * W), a2);
      a3 = xsimd::fma(pj, B::load_unaligned(vj + 3 * W), a3);
    }
    (a0 * vinv).store_unaligned(o + c);
    (a1 * vinv).store_unaligned(o + c + W);
    (a2 * vinv).store_unaligned(o + c + 2 * W);
    (a3 * vinv).store_unaligned(o + c + 3 * W);
  }
  for (; c + W <= Dv; c += W) {
    B a0(0.f);
    for (j = 0; j < n; ++j) a0 = xsimd::fma(B(s[j]), B::load_unaligned(v + j * vs + c), a0);
    (a0 * vinv).store_unaligned(o + c);
  }
  for (; c < Dv; ++c) {  // scalar tail columns
    float a = 0.f;
    for (j = 0; j < n; ++j) a += s[j] * v[j * vs + c];
    o[c] = a * inv;
  }
}

}  // namespace

template <class Arch>
std::size_t Attention::workspace(Arch, const OpDesc&) {
  return 0;  // the score blocks are per thread, so they live in the prepared state
}

template <class Arch>
Status Attention::prepare(Arch, const OpDesc& desc, const Context& ctx, const Tensor* const*,
                          std::shared_ptr<void>& state) {
  const std::int64_t Skv = desc.inputs[1].shape[2];
  auto s = std::make_shared<Scratch>();
  s->threads = ctx.threads > 0 ? ctx.threads : 1;
  s->per_thread = static_cast<std::size_t>(kRows * round16(Skv));
  s->data =
      static_cast<float*>(std::aligned_alloc(64, s->per_thread * sizeof(float) * static_cast<std::size_t>(s->threads)));
  if (!s->data) return {StatusCode::out_of_memory, "attention: cannot allocate the score blocks"};
  state = std::move(s);
  return Status::ok();
}

template <class Arch>
void Attention::operator()(Arch, const KernelArgs& args) const {
  const AttentionParams& p = args.desc->p<AttentionParams>();
  const Tensor& q = *args.in[0];
  const Tensor& k = *args.in[1];
  const Tensor& v = *args.in[2];
  const Tensor* mask = p.has_mask ? args.in[3] : nullptr;
  const Tensor& o = *args.out[0];
  const std::int64_t B = q.dim(0), H = q.dim(1), Sq = q.dim(2), D = q.dim(3);
  const std::int64_t Skv = k.dim(2), Dv = v.dim(3);
  const auto qs = q.strides(), ks = k.strides(), vs = v.strides(), os = o.strides();
  const auto ms = mask ? broadcast_strides(mask->desc(), Shape{B, H, Sq, Skv}) : decltype(qs){};
  const float* qp = q.data();
  const float* kp = k.data();
  const float* vp = v.data();
  const float* mp = mask ? mask->data() : nullptr;
  float* op = o.mutable_data();
  const float scale = p.scale != 0.f ? p.scale : static_cast<float>(1.0 / std::sqrt(static_cast<double>(D)));
  const auto* scratch = static_cast<const Scratch*>(args.state);
  const int threads = args.threads < scratch->threads ? args.threads : scratch->threads;
  const std::int64_t ld = round16(Skv);

  // Keys [0, visible(i)) are the ones query i sees (bottom-right aligned causal rule).
  auto visible = [&](std::int64_t i) -> std::int64_t {
    if (!p.causal) return Skv;
    const std::int64_t last = i + (Skv - Sq);
    return last < 0 ? 0 : (last + 1 < Skv ? last + 1 : Skv);
  };

  const std::int64_t blocks = (Sq + kRows - 1) / kRows;
  parallel_tid(B * H * blocks, threads, 1, [&](int tid, std::int64_t b, std::int64_t e) {
    float* sc = scratch->of(tid);
    for (std::int64_t item = b; item < e; ++item) {
      const std::int64_t bh = item / blocks, i0 = item % blocks * kRows;
      const std::int64_t bb = bh / H, hh = bh % H;
      const std::int64_t rows = Sq - i0 < kRows ? Sq - i0 : kRows;
      const float* qh = qp + bb * qs[0] + hh * qs[1];
      const float* kh = kp + bb * ks[0] + hh * ks[1];
      const float* vh = vp + bb * vs[0] + hh * vs[1];
      const float* mh = mp ? mp + bb * ms[0] + hh * ms[1] : nullptr;
      float* oh = op + bb * os[0] + hh * os[1];
      // Rows past Sq repeat the last real row; their scores are computed and ignored.
      const float* qr[kRows];
      for (std::int64_t r = 0; r < kRows; ++r) qr[r] = qh + (i0 + (r < rows ? r : rows - 1)) * qs[2];
      // The causal visible range grows with i: the block's last row sees the most keys. Keys a
      // row does not see are scored for the block but never used by that row.
      const std::int64_t nk = visible(i0 + rows - 1);
      qk_block<Arch>(qr, kh, ks[2], D, nk, sc, ld);
      for (std::int64_t r = 0; r < rows; ++r) {
        const std::int64_t i = i0 + r;
        softmax_pv<Arch>(sc + r * ld, visible(i), scale, mh ? mh + i * ms[2] : nullptr, ms[3], vh, vs[2], Dv,
                         oh + i * os[2]);
      }
    }
  });
}

OPFUSE_SIMD_INSTANTIATE_PREPARED(Attention);

}  // namespace opfuse::simd
