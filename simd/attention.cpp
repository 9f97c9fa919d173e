// simd/attention.cpp - scaled dot-product attention, unfused: QK^T GEMM -> scaled, masked
// softmax -> times V, each a separate pass over a materialized score matrix.
//
// naive: per (b, h) the whole Sq x Skv score matrix in the workspace, double-precision dot
//        products one element at a time, three softmax passes, then P V (naive/attention.cpp).
// simd:  the same three steps, each at vector speed, with the two products on the packed GEMM
//        of simd/gemm_kernel.hpp (sgemm<Arch>, the BLIS loops and micro-kernels of gemm.cpp):
//          S = scale * Q K^T   sgemm (m = Sq, n = Skv, k = D, K read transposed, alpha = scale)
//                              into the thread's Sq x Skv score matrix (prepared state)
//          P = softmax(S + M)  one vector pass adds the mask and finds the row max and any
//                              NaN, a second writes exp(s - max) (vmath::exp_nonpositive)
//                              and sums it
//          O = P V             sgemm (m = Sq, n = Dv, k = Skv) straight into o, then each
//                              row of O is scaled by 1 / sum (Dv multiplies instead of Skv)
//        Work items are heads (b, h) split across the threads; with fewer heads than threads a
//        head's query rows are split too, each part with its own slice of scores.
//        Causal: queries are taken in bands of kBand rows. A band's QK^T GEMM stops at the last
//        key its last query sees (the scores above the diagonal are never computed: half the
//        QK^T work of a square causal problem). Its PV GEMM covers only the keys its FIRST
//        query sees - visible to every row of the band - and each row adds its remaining
//        visible keys (the band's triangle) with vector axpys. So a hidden V row is never
//        read: a GEMM over the band's whole visible range would multiply the rows' zero
//        weights into it, and 0 * NaN is NaN.
//        Rules as in naive: a query with no visible key (or only -inf scores) gets 0, a NaN
//        score makes its query row NaN.
// fused: flash attention (fused/attention.cpp) - K/V streamed in tiles, running max / sum and
//        the O^T tile kept in L1, the score matrix never written to memory.
//
// Measured: b1_h12 at s128, s512 (also causal, where oneDNN adds a -inf mask and computes all
// the scores, so the skipped triangle shows) and s2048, against naive, oneDNN and the fused
// stage, are in reports/REPORT.md (attention), or run `opfuse-bench --op attention`. Moving
// both products onto the packed GEMM brought this stage about level with oneDNN when it was
// measured; the previous kernel (issue 3), 4 query rows with their own FMA dot products, had
// been well behind it. At s128 most of the time is the GEMM
// micro-kernel; the rest splits between packing (K^T is transposed by scalar copies, Q by
// register transposes) and the softmax pass (perf).
#include <algorithm>
#include <cassert>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <memory>

#include "simd/common.hpp"
#include "simd/gemm_kernel.hpp"
#include "simd/vmath.hpp"

namespace opfuse::simd {

namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
// Causal query band: the GEMMs of a band stop at its visible keys, so a smaller band skips
// more of the hidden triangle but packs the keys once per band (pack cost / GEMM cost ~ 1 / band).
constexpr std::int64_t kBand = 64;

std::int64_t round16(std::int64_t n) { return (n + 15) / 16 * 16; }

// a * b, or -1 when it overflows int64 or is negative.
std::int64_t checked_mul(std::int64_t a, std::int64_t b) {
  std::int64_t r = 0;
  if (a < 0 || b < 0 || __builtin_mul_overflow(a, b, &r)) return -1;
  return r;
}

// The per-thread scratch: the score rows, the per-row 1 / sum (or kZeroRow / kNanRow for a
// row that gets no softmax) and the sgemm workspace.
struct ScoreLayout {
  std::int64_t ld = 0;        // score row step, floats
  std::int64_t scores = 0;    // rows * ld
  std::int64_t rows = 0;      // most query rows one work item holds
  std::int64_t gemm = 0;      // sgemm workspace floats
  std::int64_t packed_v = 0;  // floats of V packed for the PV GEMM (only when Dv == nr, see below)
  std::int64_t total = 0;     // floats per thread, a multiple of 16; -1 when it overflows
};

template <class Arch>
ScoreLayout layout_of(const OpDesc& desc) {
  const std::int64_t Sq = desc.inputs[0].shape[2], D = desc.inputs[0].shape[3];
  const std::int64_t Skv = desc.inputs[1].shape[2], Dv = desc.inputs[2].shape[3];
  ScoreLayout l;
  l.ld = round16(Skv);
  l.rows = Sq;  // one thread may hold a whole head (threads <= heads, or a single thread)
  l.scores = checked_mul(l.rows, l.ld);
  // sgemm_workspace grows with m and n but not with k (a k that fits one KC block is packed
  // whole, a slightly larger one in two halves), and the causal bands' PV GEMMs use every k up
  // to Skv: take the largest over the k a KC block can hold, and Skv itself.
  const auto ws = [](std::int64_t m, std::int64_t n, std::int64_t k) {
    return static_cast<std::int64_t>(sgemm_workspace<Arch>(m > 0 ? m : 1, n > 0 ? n : 1, k > 0 ? k : 1, 1));
  };
  l.gemm = std::max(ws(Sq, Skv, D), ws(Sq, Dv, Skv));
  for (std::int64_t k = 1; k <= std::min<std::int64_t>(Skv, 1024); ++k) l.gemm = std::max(l.gemm, ws(Sq, Dv, k));
  l.gemm = round16(l.gemm);
  if (l.scores < 0 || l.scores > std::numeric_limits<std::int64_t>::max() / 8) {
    l.total = -1;
    return l;
  }
  if (Dv == GemmTile<Arch>::nr) l.packed_v = round16(static_cast<std::int64_t>(packed_b_size<Arch>(Dv, Skv)));
  l.total = l.scores + round16(l.rows) + l.gemm + l.packed_v;
  return l;
}

// The prepared state: the layout (computed once, at prepare) and the per-thread scratch.
struct ScoreState {
  ScoreLayout layout;
  Scratch scratch;
};

// What softmax_row returns for a row that gets no softmax (1 / sum is positive or NaN).
constexpr float kZeroRow = -1.f;  // nothing visible (or only -inf scores): o row = 0
constexpr float kNanRow = -2.f;   // a NaN score: o row = NaN

// Softmax of one score row s (n visible scores, already scaled) with the mask row m (step mj,
// or null): s_j = exp(s_j + m_j - max), unnormalized. Returns 1 / sum, or kZeroRow / kNanRow.
template <class Arch>
float softmax_row(float* s, std::int64_t n, const float* m, std::int64_t mj) {
  using B = fbatch<Arch>;
  constexpr std::int64_t W = B::size;
  // Mask added and stored back; the max of the stored scores and any NaN.
  B vmax(-kInf);
  auto nan = xsimd::isnan(vmax);  // all false
  std::int64_t j = 0;
  for (; j + W <= n; j += W) {
    B z = B::load_unaligned(s + j);
    if (m) {
      z += load_strided<Arch>(m + j * mj, mj);
      z.store_unaligned(s + j);
    }
    nan = nan | xsimd::isnan(z);  // not z != z: xsimd 8 compares ordered on AVX, never true for NaN
    vmax = xsimd::max(vmax, z);
  }
  float mx = hmax<Arch>(vmax);
  bool has_nan = xsimd::any(nan);
  for (; j < n; ++j) {  // scalar tail
    const float z = s[j] + (m ? m[j * mj] : 0.f);
    s[j] = z;
    if (std::isnan(z)) has_nan = true;
    if (z > mx) mx = z;
  }
  if (has_nan) return kNanRow;
  if (mx == -kInf) return kZeroRow;
  // p_j = exp(s_j - max) (an argument <= 0: vmath::exp_nonpositive) and their sum. max may be
  // +inf (an overflowed score): then the row turns NaN through inf - inf, as in naive.
  const B vm(mx);
  B vsum(0.f);
  for (j = 0; j + W <= n; j += W) {
    const B e = vmath::exp_nonpositive<Arch>(B::load_unaligned(s + j) - vm);
    e.store_unaligned(s + j);
    vsum += e;
  }
  float sum = xsimd::hadd(vsum);
  for (; j < n; ++j) {
    const float e = vmath::exp_nonpositive<Arch>(B(s[j] - mx)).get(0);
    s[j] = e;
    sum += e;
  }
  return 1.f / sum;  // NaN when max was +inf: the row turns NaN, as in naive
}

// o (Dv) += sum over keys j in [0, n) of p_j v_j (v rows vs apart).
template <class Arch>
void axpy_rows(const float* p, std::int64_t n, const float* v, std::int64_t vs, std::int64_t Dv, float* o) {
  using B = fbatch<Arch>;
  constexpr std::int64_t W = B::size;
  std::int64_t c = 0;
  for (; c + 2 * W <= Dv; c += 2 * W) {
    B a0 = B::load_unaligned(o + c), a1 = B::load_unaligned(o + c + W);
    for (std::int64_t j = 0; j < n; ++j) {
      const B pj(p[j]);
      a0 = xsimd::fma(pj, B::load_unaligned(v + j * vs + c), a0);
      a1 = xsimd::fma(pj, B::load_unaligned(v + j * vs + c + W), a1);
    }
    a0.store_unaligned(o + c);
    a1.store_unaligned(o + c + W);
  }
  for (; c + W <= Dv; c += W) {
    B a0 = B::load_unaligned(o + c);
    for (std::int64_t j = 0; j < n; ++j) a0 = xsimd::fma(B(p[j]), B::load_unaligned(v + j * vs + c), a0);
    a0.store_unaligned(o + c);
  }
  for (; c < Dv; ++c) {  // scalar tail columns
    float a = o[c];
    for (std::int64_t j = 0; j < n; ++j) a += p[j] * v[j * vs + c];
    o[c] = a;
  }
}

// o (Dv) *= f, or o = fill.
template <class Arch>
void finish_row(float* o, std::int64_t Dv, float f, bool fill) {
  using B = fbatch<Arch>;
  constexpr std::int64_t W = B::size;
  std::int64_t c = 0;
  if (fill) {
    for (; c < Dv; ++c) o[c] = f;
    return;
  }
  const B vf(f);
  for (; c + W <= Dv; c += W) (B::load_unaligned(o + c) * vf).store_unaligned(o + c);
  for (; c < Dv; ++c) o[c] *= f;
}

}  // namespace

template <class Arch>
std::size_t Attention::workspace(Arch, const OpDesc&) {
  return 0;  // the score matrices are per thread, so they live in the prepared state
}

template <class Arch>
Status Attention::prepare(Arch, const OpDesc& desc, const Context& ctx, const Tensor* const*,
                          std::shared_ptr<void>& state) {
  auto s = std::make_shared<ScoreState>();
  s->layout = layout_of<Arch>(desc);
  const ScoreLayout& l = s->layout;
  Scratch& sc = s->scratch;
  sc.threads = ctx.threads > 0 ? ctx.threads : 1;
  const std::int64_t limit = std::numeric_limits<std::int64_t>::max() / 4 / sc.threads;
  if (l.total < 0 || l.total > limit)
    return {StatusCode::out_of_memory, "attention: the score matrix does not fit in memory"};
  sc.per_thread = static_cast<std::size_t>(l.total);
  sc.data =
      static_cast<float*>(std::aligned_alloc(64, sc.per_thread * sizeof(float) * static_cast<std::size_t>(sc.threads)));
  if (!sc.data) return {StatusCode::out_of_memory, "attention: cannot allocate the score matrices"};
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
  const auto qs = attention_strides(*args.desc, 0), ks = attention_strides(*args.desc, 1),
             vs = attention_strides(*args.desc, 2), os = attention_strides(*args.desc, 3);
  assert(qs[3] == 1 && ks[3] == 1 && vs[3] == 1 && os[3] == 1);  // attention_supports
  const auto ms = mask ? broadcast_strides(mask->desc(), Shape{B, H, Sq, Skv}) : decltype(qs){};
  const float* qp = q.data();
  const float* kp = k.data();
  const float* vp = v.data();
  const float* mp = mask ? mask->data() : nullptr;
  float* op = o.mutable_data();
  const float scale = p.scale != 0.f ? p.scale : static_cast<float>(1.0 / std::sqrt(static_cast<double>(D)));
  const auto* state = static_cast<const ScoreState*>(args.state);
  const Scratch* scratch = &state->scratch;
  const int threads = args.threads < scratch->threads ? args.threads : scratch->threads;
  const ScoreLayout& lay = state->layout;
  if (Sq <= 0 || B * H <= 0) return;

  // Keys [0, visible(i)) are the ones query i sees (bottom-right aligned causal rule).
  auto visible = [&](std::int64_t i) -> std::int64_t {
    if (!p.causal) return Skv;
    const std::int64_t last = i + (Skv - Sq);
    return last < 0 ? 0 : (last + 1 < Skv ? last + 1 : Skv);
  };

  // Work items: (head, part of its query rows); a head is split only when heads < threads.
  const std::int64_t heads = B * H;
  std::int64_t parts = heads >= threads ? 1 : (threads + heads - 1) / heads;
  if (parts > Sq) parts = Sq;
  const std::int64_t part_rows = (Sq + parts - 1) / parts;
  const std::int64_t band = p.causal ? kBand : Sq;

  parallel_tid(heads * parts, threads, 1, [&](int tid, std::int64_t b, std::int64_t e) {
    float* const sc = scratch->of(tid);
    float* const row_f = sc + lay.scores;  // per row: 1 / sum, kZeroRow or kNanRow
    float* const gws = row_f + round16(lay.rows);
    float* const pv = gws + lay.gemm;  // lay.packed_v floats
    for (std::int64_t item = b; item < e; ++item) {
      const std::int64_t bh = item / parts, r0 = item % parts * part_rows;
      const std::int64_t r1 = r0 + part_rows < Sq ? r0 + part_rows : Sq;
      if (r0 >= r1) continue;
      const std::int64_t bb = bh / H, hh = bh % H;
      const float* qh = qp + bb * qs[0] + hh * qs[1];
      const float* kh = kp + bb * ks[0] + hh * ks[1];
      const float* vh = vp + bb * vs[0] + hh * vs[1];
      const float* mh = mp ? mp + bb * ms[0] + hh * ms[1] : nullptr;
      float* oh = op + bb * os[0] + hh * os[1];

      // 1. S = scale * Q K^T over each band's visible keys (all keys without causal).
      for (std::int64_t i0 = r0; i0 < r1; i0 += band) {
        const std::int64_t i1 = i0 + band < r1 ? i0 + band : r1;
        SgemmArgs g;
        g.m = i1 - i0;
        g.n = visible(i1 - 1);
        g.k = D;
        g.alpha = scale;
        g.a = qh + i0 * qs[2];
        g.lda = qs[2];
        g.b = kh;
        g.ldb = ks[2];
        g.trans_b = true;
        g.c = sc + (i0 - r0) * lay.ld;
        g.ldc = lay.ld;
        g.workspace = gws;
        g.threads = 1;
        sgemm<Arch>(g);
      }
      // 2. P = exp(S + mask - rowmax) in place, 1 / rowsum aside.
      for (std::int64_t i = r0; i < r1; ++i)
        row_f[i - r0] = softmax_row<Arch>(sc + (i - r0) * lay.ld, visible(i), mh ? mh + i * ms[2] : nullptr, ms[3]);
      // 3. O = P V: each band's GEMM over the keys all its rows see, then each row's triangle
      //    of further visible keys, then 1 / sum.
      for (std::int64_t i0 = r0; i0 < r1; i0 += band) {
        const std::int64_t i1 = i0 + band < r1 ? i0 + band : r1;
        const std::int64_t common = visible(i0);
        SgemmArgs g;
        g.m = i1 - i0;
        g.n = Dv;
        g.k = common;
        g.a = sc + (i0 - r0) * lay.ld;
        g.lda = lay.ld;
        g.b = vh;
        g.ldb = vs[2];
        g.c = oh + i0 * os[2];
        g.ldc = os[2];
        g.workspace = gws;
        g.threads = 1;
        if (lay.packed_v && common > 0) {
          // Workaround: sgemm reads an unpacked B "in place" when its rows fit, but its
          // micro-kernel picks the aligned packed-panel loads whenever ldb == nr, so a V with
          // Dv == nr that is not vector-aligned faults (movaps). V packed here instead.
          pack_b<Arch>(vh, vs[2], false, Dv, common, pv);
          g.packed_b = pv;
        }
        sgemm<Arch>(g);  // k = 0 (no common key) writes zeros
        for (std::int64_t i = i0; i < i1; ++i) {
          float* orow = oh + i * os[2];
          const float f = row_f[i - r0];
          if (f == kZeroRow || f == kNanRow) {  // its P row was never written: overwrite o
            finish_row<Arch>(orow, Dv, f == kNanRow ? kNaN : 0.f, true);
            continue;
          }
          const std::int64_t n = visible(i);
          if (n > common)
            axpy_rows<Arch>(sc + (i - r0) * lay.ld + common, n - common, vh + common * vs[2], vs[2], Dv, orow);
          finish_row<Arch>(orow, Dv, f, false);
        }
      }
    }
  });
}

OPFUSE_SIMD_INSTANTIATE_PREPARED(Attention);

}  // namespace opfuse::simd
