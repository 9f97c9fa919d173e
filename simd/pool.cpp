// simd/pool.cpp - max / average pooling and global average pooling, vectorized.
//
// naive: one output element at a time, every window position tested against the bounds
//        (naive/pool.cpp: NaN-propagating max, ceil mode, count_include_pad, dilation).
// simd:  two layouts, two vector directions.
//        W contiguous (NCHW): the window is a rectangle, so both reductions are separable. For
//          each output row, the kernel_h input rows are first reduced column-wise into a row
//          buffer, in registers across the rows (one store per vector; the buffer's padding
//          columns hold the identity, -inf or 0), then each output is reduced across kernel_w
//          buffer entries. For stride_w > 1 the buffer is first de-interleaved into stride_w
//          phase rows (stride 2: split_phases2's register shuffles), so that consecutive outputs
//          read consecutive floats again. The average's divisor is rows(oh) * cols(q), which is
//          how n_valid and n_padded factor over a rectangle; the kernels multiply by its
//          reciprocal from a table made at prepare (InvTable).
//        C contiguous (NHWC): one window walk per output pixel reduces a vector of channels.
//        Every loop runs whole vectors: a row's (or a pixel's channels') last partial vector is
//          loaded and stored masked (load_partial / store_partial in simd/common.hpp), its
//          spare lanes computing on the scratch's zeroed slack. The scalar tails this replaced -
//          up to 26 outputs of a 56-wide row on AVX-512, each a data-dependent branch per tap -
//          cost more than the vectors (AVX-512 ran slower than AVX2). In one-thread A/B pairs
//          the masked vectors made maxpool 3x3/2 pad 1 over 64 x 112 x 112, avgpool 2x2/2 over
//          128 x 56 x 56 and avgpool 3x3/1 pad 1 over 192 x 28 x 28 up to several times faster
//          (level with oneDNN on the maxpool, still behind it on the avgpools then; current
//          figures: reports/REPORT.md, maxpool2d and avgpool2d).
//        The 2- and 3-row windows run the vertical pass with their row offsets fixed (no
//          pointer array read back per vector).
//        The windows of real models (kw 2 or 3, stride 1 or 2, left pad 0 or 1, undilated)
//          skip the buffer: pool_row_regs keeps both reductions in registers, the taps shifted
//          across neighbouring vectors. Read back from the buffer one or two floats off its
//          vector stores, they stalled on store forwarding. pool_rows_regs loops over a plane's
//          rows inside the instance.
//        The 3x3/1 same window over small planes runs the rows between the first and the last
//          as one flat run of the plane (pool_plane_flat3), its vectors straddling rows.
//        The max is select((v > m) | isnan(v), v, m): naive's rule, so a NaN sticks.
//        global_avgpool: a vector sum per (n, c) plane (NCHW) or vectors across channels (NHWC).
// fused: pooling is memory-bound; fusion only pays when it follows a convolution (the pool is
//        then applied to the conv's output tile before it is stored).
// GCC 12's AVX-512 headers build min/max/roundscale from _mm512_undefined_ps(), which
// -Wmaybe-uninitialized flags at every inlining site (GCC bug 105593, fixed in GCC 13).

#include <cassert>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>

#include "simd/common.hpp"
#include "simd/transpose.hpp"

namespace opfuse::simd {

namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr std::size_t u(int d) { return static_cast<std::size_t>(d); }

// The geometry of one pooling call.
struct Geometry {
  std::int64_t N, C, H, W, P, Q;
  std::int64_t kh, kw, sh, sw, dh, dw, pt, pl, pb, pr;
  std::int64_t wb;     // row buffer width: buffer column u is input column u - pl
  std::int64_t phase;  // phase row length, ceil(wb / sw)
  bool is_max, incpad;
};

Geometry geometry(const OpDesc& d) {
  const Pool2dParams& p = d.p<Pool2dParams>();
  const Shape& x = d.inputs[0].shape;
  const bool is_max = d.op == OpKind::maxpool2d;
  Geometry g{};
  g.N = x[0], g.C = x[1], g.H = x[2], g.W = x[3];
  g.kh = p.kernel_h, g.kw = p.kernel_w, g.sh = p.stride_h, g.sw = p.stride_w;
  g.dh = is_max ? p.dilation_h : 1, g.dw = is_max ? p.dilation_w : 1;
  g.pt = p.pad_top, g.pl = p.pad_left, g.pb = p.pad_bottom, g.pr = p.pad_right;
  // P, Q as validation derives them (floor or ceil mode, a window must start inside the input
  // or the top/left padding).
  auto out = [&](std::int64_t in, std::int64_t pa, std::int64_t pz, std::int64_t k, std::int64_t dil, std::int64_t s) {
    const std::int64_t span = in + pa + pz - dil * (k - 1) - 1;
    std::int64_t o = (p.ceil_mode ? (span + s - 1) / s : span / s) + 1;
    if (p.ceil_mode && (o - 1) * s >= in + pa) --o;
    return o;
  };
  g.P = out(g.H, g.pt, g.pb, g.kh, g.dh, g.sh);
  g.Q = out(g.W, g.pl, g.pr, g.kw, g.dw, g.sw);
  g.wb = (g.Q - 1) * g.sw + (g.kw - 1) * g.dw + 1;
  g.phase = (g.wb + g.sw - 1) / g.sw;
  g.is_max = is_max;
  g.incpad = !is_max && p.count_include_pad;
  return g;
}

std::int64_t round16(std::int64_t n) { return (n + 15) / 16 * 16; }

// Window positions of output index o along one axis that fall inside [lo, hi).
std::int64_t count_inside(std::int64_t o, std::int64_t s, std::int64_t pad, std::int64_t k, std::int64_t dil,
                          std::int64_t lo, std::int64_t hi) {
  std::int64_t c = 0;
  for (std::int64_t i = 0; i < k; ++i) {
    const std::int64_t v = o * s - pad + i * dil;
    c += v >= lo && v < hi;
  }
  return c;
}

template <class Arch>
fbatch<Arch> max_nan(fbatch<Arch> m, fbatch<Arch> v) {
  // xsimd::isnan, not v != v: xsimd 8 compiles != to an ordered compare on AVX/AVX-512 (false for NaN).
  return xsimd::select((v > m) | xsimd::isnan(v), v, m);  // naive: if (v > max || isnan(v)) max = v
}

// Window taps handled per sweep: the row pointers of the vertical reduction and the tap
// pointers of the horizontal one live in registers / on the stack, kTaps at a time (a larger
// kernel takes several sweeps, each after the first reading back the partial result).
constexpr int kTaps = 16;

// The per-thread scratch of the NCHW row kernel, in floats: the column buffer (wb + 1 columns,
// starting up to 15 floats in so that its stores from column pl on are vector-aligned), the
// phase rows (sw x phase) and the column divisors (Q), each with a vector of slack, so every
// loop runs whole vectors: the lanes past a row's end compute on the slack (zeroed at prepare)
// and are dropped by the one partial store at the row's end.
struct RowScratch {
  std::int64_t cols, phases;
  explicit RowScratch(const Geometry& g) : cols(round16(g.wb + 1 + 15) + 32), phases(round16(g.sw * g.phase) + 32) {}
  std::int64_t floats() const { return cols + phases; }
};

// The average's reciprocal divisors, made once at prepare and shared by the threads. Over a
// rectangle the divisor of output (oh, q) factors into the window rows and the window columns
// inside the input (or inside the padded input, count_include_pad): rows(oh) * cols(q). Row
// r of the table holds 1 / (r * cols(q)) for every q (0 where that is 0: the window holds no
// input and its sum is the identity 0), so the kernels scale a sum by one vector multiply. A
// vector divide per output vector was most of the 3x3/1 average pool's time.
struct InvTable {
  std::int64_t stride;  // floats per row: Q rounded up, plus a vector of slack
  explicit InvTable(const Geometry& g) : stride(round16(g.Q) + 16) {}
  std::int64_t floats(const Geometry& g) const { return g.is_max ? 0 : (g.kh + 1) * stride; }
  void fill(const Geometry& g, float* t) const {
    for (std::int64_t r = 0; r <= g.kh; ++r)
      for (std::int64_t q = 0; q < stride; ++q) {
        const std::int64_t c = q >= g.Q   ? 0
                               : g.incpad ? count_inside(q, g.sw, g.pl, g.kw, 1, -g.pl, g.W + g.pr)
                                          : count_inside(q, g.sw, g.pl, g.kw, 1, 0, g.W);
        t[r * stride + q] = r * c > 0 ? 1.f / static_cast<float>(r * c) : 0.f;
      }
  }
};

// Output row oh's share of the average's divisor, its row in the InvTable: the window rows
// inside the input (rows), or inside the padded input (count_include_pad).
std::int64_t row_divisor(const Geometry& g, std::int64_t oh, std::int64_t rows) {
  return g.incpad ? count_inside(oh, g.sh, g.pt, g.kh, 1, -g.pt, g.H + g.pb) : rows;
}

// NCHW, the small windows of real models (kw 2 or 3, stride 1 or 2, left pad 0 or 1 - what
// validation allows them - no dilation): one output row with both reductions in registers.
// col(k) reduces the window's rows over input columns k W .. k W + W - 1 (the identity past
// the row's end); each output
// vector's taps are col vectors shifted across their neighbours (shift_concat), or for
// stride 2 the even and odd columns of two col vectors (even_odd) and their shifts. Each col
// vector is computed once and rolled along the row. The buffer route below stores the
// vertical sums and reads each tap back one or two floats off those stores, which the CPU
// cannot forward from its store buffer: on a 28-wide row that stall was most of the call.
// The window's rows are combined bottom-up. With stride 1 and both tensors page-aligned, the
// window's top input row lies at the same offset modulo 4 KiB as the output row stored just
// before; the CPU matches a load to earlier stores by those low address bits, so that load
// waits on the store (a false dependency) and goes last, behind the other rows' loads.
template <class Arch, int KW, int SW, int PL>
[[gnu::always_inline]] inline void pool_row_regs(const Geometry& g, const float* const* rp, int nr, float* y,
                                                 const float* inv) {
  using B = fbatch<Arch>;
  constexpr std::int64_t W = B::size;
  const bool is_max = g.is_max;
  const B id(is_max ? -kInf : 0.f);
  const std::int64_t width = g.W;
  auto comb = [is_max](B a, B v) { return is_max ? max_nan<Arch>(a, v) : a + v; };
  auto col = [&](std::int64_t k) {
    const std::int64_t o = k * W, n = width - o;
    if (n <= 0 || nr == 0) return id;
    B acc = load_partial<Arch>(rp[nr - 1] + o, n);
    for (int r = nr - 2; r >= 0; --r) acc = comb(acc, load_partial<Arch>(rp[r] + o, n));
    if (is_max && n < W) acc = xsimd::select(lane_iota<Arch>() < B(static_cast<float>(n)), acc, id);
    return acc;
  };
  auto finish = [&](B acc, std::int64_t q) {
    if (!is_max) acc *= B::load_unaligned(inv + q);
    store_partial<Arch>(y + q, acc, g.Q - q);
  };
  // The tap of output vector m at input column offset D (from the window's first column at
  // pad 0): prev, cur, next are the vectors m - 1, m, m + 1 of the (phase) row.
  if constexpr (SW == 1) {
    B prev = id, cur = col(0);
    for (std::int64_t m = 0, q = 0; q < g.Q; ++m, q += W) {
      const B next = col(m + 1);
      auto tap = [&](auto dc) {
        constexpr int D = decltype(dc)::value;
        if constexpr (D < 0)
          return shift_concat<static_cast<int>(W) + D, Arch>(prev, cur);
        else if constexpr (D == 0)
          return cur;
        else
          return shift_concat<D, Arch>(cur, next);
      };
      B acc = tap(std::integral_constant<int, -PL>{});
      acc = comb(acc, tap(std::integral_constant<int, 1 - PL>{}));
      if constexpr (KW == 3) acc = comb(acc, tap(std::integral_constant<int, 2 - PL>{}));
      finish(acc, q);
      prev = cur, cur = next;
    }
  } else {
    static_assert(SW == 2, "pool_row_regs: stride 1 or 2");
    B pe = id, po = id, ce, co;  // even / odd columns of the previous and current output vector
    even_odd<Arch>(col(0), col(1), ce, co);
    for (std::int64_t m = 0, q = 0; q < g.Q; ++m, q += W) {
      B ne, no;
      even_odd<Arch>(col(2 * m + 2), col(2 * m + 3), ne, no);
      // Input column 2 q' + D - PL of output q': D - PL = 0 is the even column, 1 the odd one,
      // 2 the next even one, -1 the odd one before, -2 the even one before.
      auto tap = [&](auto dc) {
        constexpr int D = decltype(dc)::value;
        if constexpr (D == -2)
          return shift_concat<static_cast<int>(W) - 1, Arch>(pe, ce);
        else if constexpr (D == -1)
          return shift_concat<static_cast<int>(W) - 1, Arch>(po, co);
        else if constexpr (D == 0)
          return ce;
        else if constexpr (D == 1)
          return co;
        else
          return shift_concat<1, Arch>(ce, ne);
      };
      B acc = tap(std::integral_constant<int, -PL>{});
      acc = comb(acc, tap(std::integral_constant<int, 1 - PL>{}));
      if constexpr (KW == 3) acc = comb(acc, tap(std::integral_constant<int, 2 - PL>{}));
      finish(acc, q);
      pe = ce, po = co, ce = ne, co = no;
    }
  }
}

// Output rows oh0 .. oh1 - 1 of one plane (x: its (H, W) rows, step xh; y: output row oh0,
// step yh), each by pool_row_regs. The loop over rows sits inside the instance: called per row
// through a pointer, the call and the row setup around it took about a third of a 3x3/1 pool
// over 28-wide rows.
template <class Arch, int KW, int SW, int PL>
void pool_rows_regs(const Geometry& g, const float* x, std::int64_t xh, float* y, std::int64_t yh, std::int64_t oh0,
                    std::int64_t oh1, const float* inv, std::int64_t inv_stride) {
  for (std::int64_t oh = oh0; oh < oh1; ++oh, y += yh) {
    const float* rp[kTaps];
    int nr = 0;
    for (std::int64_t i = 0, ih = oh * g.sh - g.pt; i < g.kh; ++i, ih += g.dh)
      if (ih >= 0 && ih < g.H) rp[nr++] = x + ih * xh;
    pool_row_regs<Arch, KW, SW, PL>(g, rp, nr, y, g.is_max ? nullptr : inv + row_divisor(g, oh, nr) * inv_stride);
  }
}

// The 3x3 stride-1 "same" window (pad 1 all round, undilated) over small planes: the plane's
// interior rows (1 .. H - 2) as one flat run of H W floats, whole vectors straddling rows.
// The rows above and below a flat position are W floats away, its left and right neighbours
// one float, so one vertical sum per vector and two shifts across neighbouring vectors give
// the window as in pool_row_regs; only the neighbours across a row boundary (a first column's
// left, a last column's right) must drop out, which a per-position table says. On 28-wide rows
// the row kernel ran 1.75 vectors per row, the last one masked, plus its row setup; the flat
// run is whole vectors but one. Rows 0 and H - 1, whose windows lose a row, take the row
// kernel. FlatTables holds, per interior position k = i - W: left[k] and right[k] (1 where the
// neighbour is in the row, else 0) and the average's reciprocal divisor inv[k].
struct FlatTables {
  std::int64_t len;  // (H - 2) W positions plus a vector of slack
  explicit FlatTables(const Geometry& g) : len(applies(g) ? round16((g.H - 2) * g.W) + 16 : 0) {}
  static bool applies(const Geometry& g) {
    return g.kh == 3 && g.kw == 3 && g.sh == 1 && g.sw == 1 && g.dh == 1 && g.dw == 1 && g.pt == 1 && g.pl == 1 &&
           g.pb == 1 && g.pr == 1 && g.H >= 3 && g.W >= 2 && g.H * g.W <= 16384;
  }
  std::int64_t floats() const { return 3 * len; }
  void fill(const Geometry& g, const InvTable& it, const float* inv_table, float* t) const {
    for (std::int64_t k = 0; k < len; ++k) {
      const std::int64_t col = k % g.W;
      const bool in = k < (g.H - 2) * g.W;
      t[k] = in && col > 0 ? 1.f : 0.f;
      t[len + k] = in && col < g.W - 1 ? 1.f : 0.f;
      // An interior row's window holds 3 rows, with or without count_include_pad.
      t[2 * len + k] = in && !g.is_max ? inv_table[3 * it.stride + col] : 0.f;
    }
  }
};

template <class Arch>
void pool_plane_flat3(const Geometry& g, const float* x, float* y, const float* t, std::int64_t len) {
  using B = fbatch<Arch>;
  constexpr std::int64_t V = B::size;
  const bool is_max = g.is_max;
  const B id(is_max ? -kInf : 0.f);
  auto comb = [is_max](B a, B v) { return is_max ? max_nan<Arch>(a, v) : a + v; };
  const std::int64_t w = g.W, end = (g.H - 1) * w;
  // Vertical reduction at flat positions i .. i + V - 1 (the identity from end on), bottom-up
  // for the reason pool_row_regs gives.
  auto vsum = [&](std::int64_t i) {
    const std::int64_t n = end - i;
    if (n <= 0) return id;
    B a = load_partial<Arch>(x + i + w, n);
    a = comb(a, load_partial<Arch>(x + i, n));
    return comb(a, load_partial<Arch>(x + i - w, n));
  };
  const float *left = t, *right = t + len, *inv = t + 2 * len;
  B prev = id, cur = vsum(w);
  for (std::int64_t i = w, k = 0; i < end; i += V, k += V) {
    const B next = vsum(i + V);
    const B l =
        xsimd::select(B::load_unaligned(left + k) > B(0.f), shift_concat<static_cast<int>(V) - 1, Arch>(prev, cur), id);
    const B r = xsimd::select(B::load_unaligned(right + k) > B(0.f), shift_concat<1, Arch>(cur, next), id);
    B acc = comb(comb(l, cur), r);
    if (!is_max) acc *= B::load_unaligned(inv + k);
    store_partial<Arch>(y + i, acc, end - i);
    prev = cur, cur = next;
  }
}

// The pool_rows_regs instance for this geometry, or null where it does not apply.
template <class Arch>
using RowRegsFn = void (*)(const Geometry&, const float*, std::int64_t, float*, std::int64_t, std::int64_t,
                           std::int64_t, const float*, std::int64_t);
template <class Arch>
RowRegsFn<Arch> row_regs_kernel(const Geometry& g) {
  if (g.dw != 1 || g.kh > kTaps || g.pl > 1 || (g.sw != 1 && g.sw != 2)) return nullptr;
  const int key = static_cast<int>(g.kw * 100 + g.sw * 10 + g.pl);
  switch (key) {
    case 210: return pool_rows_regs<Arch, 2, 1, 0>;
    case 211: return pool_rows_regs<Arch, 2, 1, 1>;
    case 310: return pool_rows_regs<Arch, 3, 1, 0>;
    case 311: return pool_rows_regs<Arch, 3, 1, 1>;
    case 220: return pool_rows_regs<Arch, 2, 2, 0>;
    case 221: return pool_rows_regs<Arch, 2, 2, 1>;
    case 320: return pool_rows_regs<Arch, 3, 2, 0>;
    case 321: return pool_rows_regs<Arch, 3, 2, 1>;
    default: return nullptr;
  }
}

// NCHW (unit W stride): one output row of one plane, separable. x is the (H, W) plane with row
// step xh; y the (Q) output row; scratch this thread's RowScratch; inv the InvTable (avgpool).
template <class Arch>
void pool_row(const Geometry& g, const RowScratch& rs, const float* x, std::int64_t xh, float* y, std::int64_t oh,
              float* scratch, const float* inv) {
  using B = fbatch<Arch>;
  constexpr std::int64_t W = B::size;
  const float id = g.is_max ? -kInf : 0.f;
  const bool is_max = g.is_max;
  auto comb = [is_max](B a, B v) { return is_max ? max_nan<Arch>(a, v) : a + v; };
  float* buf = scratch + (16 - g.pl % 16) % 16;
  // Vertical: buf[u] = reduction over the window's rows of input column u - pl, accumulated in
  // registers over the rows (one store per vector); columns outside the input stay the
  // identity, and so does buf[wb] (read by the odd phase of an odd-width row).
  const std::int64_t lo = g.pl, hi = g.pl + g.W < g.wb ? g.pl + g.W : g.wb;  // input columns in buf
  std::int64_t j = 0;
  for (; j < lo; ++j) buf[j] = id;
  for (j = hi > lo ? hi : lo; j <= g.wb; ++j) buf[j] = id;
  std::int64_t rows = 0;  // window rows inside the input
  const float* rp[kTaps];
  std::int64_t i = 0;
  while (i < g.kh) {
    int nr = 0;  // the next (up to kTaps) rows inside the input
    for (; i < g.kh && nr < kTaps; ++i) {
      const std::int64_t ih = oh * g.sh - g.pt + i * g.dh;
      if (ih >= 0 && ih < g.H) rp[nr++] = x + ih * xh;
    }
    if (nr == 0) continue;
    const bool first = rows == 0;
    rows += nr;
    if (first && (nr == 2 || nr == 3)) {  // the common windows' rows, their pointers in registers
      const float *r0 = rp[0] - g.pl, *r1 = rp[1] - g.pl, *r2 = rp[nr - 1] - g.pl;
      for (j = lo; j < hi; j += W) {
        const std::int64_t n = hi - j;
        B acc = comb(load_partial<Arch>(r0 + j, n), load_partial<Arch>(r1 + j, n));
        if (nr == 3) acc = comb(acc, load_partial<Arch>(r2 + j, n));
        store_partial<Arch>(buf + j, acc, n);
      }
      continue;
    }
    for (j = lo; j < hi; j += W) {    // buffer column j is input column j - pl
      const std::int64_t n = hi - j;  // a partial last vector: masked loads and store
      auto ld = [&](const float* p) { return load_partial<Arch>(p, n); };
      B acc = ld(first ? rp[0] + (j - g.pl) : buf + j);
      for (int r = first ? 1 : 0; r < nr; ++r) acc = comb(acc, ld(rp[r] + (j - g.pl)));
      store_partial<Arch>(buf + j, acc, n);
    }
  }
  if (rows == 0)
    for (j = lo; j < hi; ++j) buf[j] = id;  // no window row inside the input

  // De-interleave for stride_w > 1: phase r holds buf[t * sw + r] at ph + r * phase + t (the
  // identity past wb). Stride 2: both phases in one pass of register shuffles (split_phases2,
  // simd/transpose.hpp, shared with the stride-2 depthwise convolution), the last vector masked.
  const float* ph = buf;
  std::int64_t plen = g.wb;
  if (g.sw > 1) {
    float* d = scratch + rs.cols;
    if (g.sw == 2) {
      split_phases2<Arch>(buf, 2 * g.phase, d, d + g.phase);  // buf[wb] (the identity) ends an odd row
    } else {
      for (std::int64_t r = 0; r < g.sw; ++r)
        for (std::int64_t t = 0; t < g.phase; ++t) {
          const std::int64_t src = t * g.sw + r;
          d[r * g.phase + t] = src < g.wb ? buf[src] : id;
        }
    }
    ph = d;
    plen = g.phase;
  }
  // Horizontal: y[q] = reduction over jj of buf[q * sw + jj * dw], which is phase (jj * dw) % sw
  // at q + (jj * dw) / sw: the tap pointers are stepped without a division, kTaps per sweep.
  const float* rinv = g.is_max ? nullptr : inv + row_divisor(g, oh, rows) * InvTable(g).stride;
  const float* tp[kTaps];
  std::int64_t phase = 0, off = 0;  // of the next tap
  for (std::int64_t j0 = 0; j0 < g.kw; j0 += kTaps) {
    const int nt = static_cast<int>(g.kw - j0 < kTaps ? g.kw - j0 : kTaps);
    for (int t = 0; t < nt; ++t) {
      tp[t] = ph + phase * plen + off;
      for (phase += g.dw; phase >= g.sw; phase -= g.sw) ++off;  // no division: once per tap and row
    }
    const bool first = j0 == 0, last = j0 + nt >= g.kw;
    for (std::int64_t q = 0; q < g.Q; q += W) {
      const std::int64_t n = g.Q - q;  // the last vector may be partial: lanes past Q are dropped
      B acc = first ? B::load_unaligned(tp[0] + q) : load_partial<Arch>(y + q, n);
      for (int t = first ? 1 : 0; t < nt; ++t) acc = comb(acc, B::load_unaligned(tp[t] + q));
      if (!is_max && last) acc *= B::load_unaligned(rinv + q);
      store_partial<Arch>(y + q, acc, n);
    }
  }
}

}  // namespace

template <class Arch>
std::size_t Pool2d::workspace(Arch, const OpDesc&) {
  return 0;  // per-thread row buffers live in the prepared state (they depend on the thread count)
}

template <class Arch>
Status Pool2d::prepare(Arch, const OpDesc& desc, const Context& ctx, const Tensor* const*,
                       std::shared_ptr<void>& state) {
  const Geometry g = geometry(desc);
  auto s = std::make_shared<Scratch>();
  s->threads = ctx.threads > 0 ? ctx.threads : 1;
  s->per_thread = static_cast<std::size_t>(RowScratch(g).floats());
  // The threads' row buffers, then (at of(threads)) the shared InvTable of an average pool and
  // the FlatTables of a 3x3/1 same window.
  const InvTable it(g);
  const FlatTables ft(g);
  const std::size_t floats =
      s->per_thread * static_cast<std::size_t>(s->threads) + static_cast<std::size_t>(it.floats(g) + ft.floats());
  s->data = static_cast<float*>(std::aligned_alloc(64, floats * sizeof(float)));
  if (!s->data) return {StatusCode::out_of_memory, "pool2d: cannot allocate the row buffers"};
  std::memset(s->data, 0, floats * sizeof(float));  // the slack lanes compute on zeros, never on garbage
  if (!g.is_max) it.fill(g, s->of(s->threads));
  if (ft.len > 0) ft.fill(g, it, s->of(s->threads), s->of(s->threads) + it.floats(g));
  state = std::move(s);
  return Status::ok();
}

template <class Arch>
void Pool2d::operator()(Arch, const KernelArgs& args) const {
  using B = fbatch<Arch>;
  constexpr std::int64_t W = B::size;
  const Geometry g = geometry(*args.desc);
  const Tensor& xt = *args.in[0];
  const Tensor& yt = *args.out[0];
  assert(yt.dim(2) == g.P && yt.dim(3) == g.Q);
  const auto xs = xt.strides(), ys = yt.strides();
  const float* xp = xt.data();
  float* yp = yt.mutable_data();
  const auto* scratch = static_cast<const Scratch*>(args.state);
  const int threads = args.threads < scratch->threads ? args.threads : scratch->threads;
  const InvTable it(g);
  const float* inv = scratch->of(scratch->threads);  // average pools only

  if (xs[3] == 1) {
    // Rows along W are contiguous (NCHW, or NHWC with C == 1): separable row kernel.
    assert(ys[3] == 1);
    const RowScratch rs(g);
    const RowRegsFn<Arch> regs = row_regs_kernel<Arch>(g);
    const FlatTables ft(g);
    if (ft.len > 0 && xs[2] == g.W && ys[2] == g.Q && g.N * g.C >= threads) {
      // Whole planes: rows 0 and H - 1 by the row kernel, the rows between as one flat run.
      const float* t = inv + it.floats(g);
      parallel_for(g.N * g.C, threads, 1, [&](std::int64_t b, std::int64_t e) {
        for (std::int64_t nc = b; nc < e; ++nc) {
          const std::int64_t n = nc / g.C, c = nc % g.C;
          const float* plane = xp + n * xs[0] + c * xs[1];
          float* yplane = yp + n * ys[0] + c * ys[1];
          regs(g, plane, xs[2], yplane, ys[2], 0, 1, inv, it.stride);
          pool_plane_flat3<Arch>(g, plane, yplane, t, ft.len);
          regs(g, plane, xs[2], yplane + (g.P - 1) * ys[2], ys[2], g.P - 1, g.P, inv, it.stride);
        }
      });
      return;
    }
    parallel_tid(g.N * g.C * g.P, threads, 4, [&](int tid, std::int64_t b, std::int64_t e) {
      float* mine = scratch->of(tid);
      // Rows b .. e - 1 of the (n, c, oh) space, one plane's share at a time.
      for (std::int64_t r = b; r < e;) {
        const std::int64_t oh0 = r % g.P, nc = r / g.P, c = nc % g.C, n = nc / g.C;
        const std::int64_t oh1 = e - r < g.P - oh0 ? oh0 + (e - r) : g.P;
        const float* plane = xp + n * xs[0] + c * xs[1];
        float* yrow = yp + n * ys[0] + c * ys[1] + oh0 * ys[2];
        if (regs) {
          regs(g, plane, xs[2], yrow, ys[2], oh0, oh1, inv, it.stride);
        } else {
          for (std::int64_t oh = oh0; oh < oh1; ++oh, yrow += ys[2])
            pool_row<Arch>(g, rs, plane, xs[2], yrow, oh, mine, inv);
        }
        r += oh1 - oh0;
      }
    });
    return;
  }

  // Channels contiguous (NHWC): one window walk per output pixel, vectors across C.
  assert(xs[1] == 1 && ys[1] == 1);
  parallel_tid(g.N * g.P * g.Q, threads, 8, [&](int, std::int64_t b, std::int64_t e) {
    for (std::int64_t r = b; r < e; ++r) {
      const std::int64_t ow = r % g.Q, nh = r / g.Q, oh = nh % g.P, n = nh / g.P;
      const std::int64_t ih0 = oh * g.sh - g.pt, iw0 = ow * g.sw - g.pl;
      const float* xn = xp + n * xs[0];
      float* yo = yp + n * ys[0] + oh * ys[2] + ow * ys[3];
      // An average's reciprocal divisor, from the InvTable's row for this window's rows.
      const float scale =
          g.is_max ? 0.f : inv[row_divisor(g, oh, count_inside(oh, g.sh, g.pt, g.kh, 1, 0, g.H)) * it.stride + ow];
      auto window = [&](auto acc, auto load, auto combine) {
        for (std::int64_t i = 0; i < g.kh; ++i) {
          const std::int64_t ih = ih0 + i * g.dh;
          if (ih < 0 || ih >= g.H) continue;
          for (std::int64_t j = 0; j < g.kw; ++j) {
            const std::int64_t iw = iw0 + j * g.dw;
            if (iw < 0 || iw >= g.W) continue;
            acc = combine(acc, load(xn + ih * xs[2] + iw * xs[3]));
          }
        }
        return acc;
      };
      // Vectors of channels; the last partial one with masked loads and a masked store.
      for (std::int64_t c = 0; c < g.C; c += W) {
        const std::int64_t n = g.C - c;
        auto ld = [&](const float* p) { return load_partial<Arch>(p + c, n); };
        B r;
        if (g.is_max) {
          r = window(B(-kInf), ld, max_nan<Arch>);
        } else {
          r = window(B(0.f), ld, [](B a, B v) { return a + v; }) * B(scale);
        }
        store_partial<Arch>(yo + c, r, n);
      }
    }
  });
}

template <class Arch>
void GlobalAvgPool::operator()(Arch, const KernelArgs& args) const {
  using B = fbatch<Arch>;
  constexpr std::int64_t W = B::size;
  const Tensor& xt = *args.in[0];
  const Tensor& yt = *args.out[0];
  const std::int64_t N = xt.dim(0), C = xt.dim(1), HW = xt.dim(2) * xt.dim(3);
  const auto xs = xt.strides(), ys = yt.strides();
  const float* xp = xt.data();
  float* yp = yt.mutable_data();
  const float inv_div = static_cast<float>(HW);

  if (xs[1] == 1 && C > 1) {
    // NHWC: x is (N, HW, C) in memory; sum the HW pixels of a vector of channels at a time.
    const std::int64_t cb = (C + W - 1) / W;
    parallel_for(N * cb, args.threads, 1, [&](std::int64_t b, std::int64_t e) {
      for (std::int64_t item = b; item < e; ++item) {
        const std::int64_t n = item / cb, c = item % cb * W;
        const float* xn = xp + n * xs[0] + c;
        float* yn = yp + n * ys[0] + c * ys[1];
        if (c + W <= C) {
          B acc(0.f);
          for (std::int64_t i = 0; i < HW; ++i) acc += B::load_unaligned(xn + i * C);
          alignas(64) float t[B::size];
          (acc / B(inv_div)).store_aligned(t);
          for (std::int64_t l = 0; l < W; ++l) yn[l * ys[1]] = t[l];
        } else {
          for (std::int64_t l = 0; c + l < C; ++l) {  // scalar tail: the last C % W channels
            float acc = 0.f;
            for (std::int64_t i = 0; i < HW; ++i) acc += xn[i * C + l];
            yn[l * ys[1]] = acc / inv_div;
          }
        }
      }
    });
    return;
  }
  // NCHW (or C == 1): every (n, c) plane is HW contiguous floats.
  assert(xs[3] == 1 && (xt.dim(2) == 1 || xs[2] == xt.dim(3)));
  parallel_for(N * C, args.threads, 16, [&](std::int64_t b, std::int64_t e) {
    for (std::int64_t pl = b; pl < e; ++pl) {
      const std::int64_t n = pl / C, c = pl % C;
      const float* x = xp + n * xs[0] + c * xs[1];
      B a0(0.f), a1(0.f);
      std::int64_t i = 0;
      for (; i + 2 * W <= HW; i += 2 * W) {
        a0 += B::load_unaligned(x + i);
        a1 += B::load_unaligned(x + i + W);
      }
      for (; i + W <= HW; i += W) a0 += B::load_unaligned(x + i);
      float acc = xsimd::hadd(a0 + a1);
      for (; i < HW; ++i) acc += x[i];
      yp[n * ys[0] + c * ys[1]] = acc / inv_div;
    }
  });
}

OPFUSE_SIMD_INSTANTIATE_PREPARED(Pool2d);
OPFUSE_SIMD_INSTANTIATE(GlobalAvgPool);

}  // namespace opfuse::simd
