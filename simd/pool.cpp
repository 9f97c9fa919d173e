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
//          read consecutive floats again. The average divides by rows(oh) * cols(q), which is
//          how n_valid and n_padded factor over a rectangle.
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
//          vector stores, they stalled on store forwarding.
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
  std::int64_t cols, phases, counts;
  explicit RowScratch(const Geometry& g)
      : cols(round16(g.wb + 1 + 15) + 32), phases(round16(g.sw * g.phase) + 32), counts(round16(g.Q) + 16) {}
  std::int64_t floats() const { return cols + phases + counts; }
};

// Output row oh's share of the average's divisor: the window rows inside the input (rows), or
// inside the padded input (count_include_pad); 0 for max pooling, which does not divide.
float row_divisor(const Geometry& g, std::int64_t oh, std::int64_t rows) {
  if (g.is_max) return 0.f;
  return static_cast<float>(g.incpad ? count_inside(oh, g.sh, g.pt, g.kh, 1, -g.pt, g.H + g.pb) : rows);
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
void pool_row_regs(const Geometry& g, const float* const* rp, int nr, float* y, float rcount, const float* cnt) {
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
  const B vr(rcount);
  auto finish = [&](B acc, std::int64_t q) {
    if (!is_max) {
      const B div = vr * B::load_unaligned(cnt + q);
      acc = xsimd::select(div > B(0.f), acc / div, B(0.f));
    }
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

// The pool_row_regs instance for this geometry, or null where it does not apply.
template <class Arch>
using RowRegsFn = void (*)(const Geometry&, const float* const*, int, float*, float, const float*);
template <class Arch>
RowRegsFn<Arch> row_regs_kernel(const Geometry& g) {
  if (g.dw != 1 || g.kh > kTaps || g.pl > 1 || (g.sw != 1 && g.sw != 2)) return nullptr;
  const int key = static_cast<int>(g.kw * 100 + g.sw * 10 + g.pl);
  switch (key) {
    case 210: return pool_row_regs<Arch, 2, 1, 0>;
    case 211: return pool_row_regs<Arch, 2, 1, 1>;
    case 310: return pool_row_regs<Arch, 3, 1, 0>;
    case 311: return pool_row_regs<Arch, 3, 1, 1>;
    case 220: return pool_row_regs<Arch, 2, 2, 0>;
    case 221: return pool_row_regs<Arch, 2, 2, 1>;
    case 320: return pool_row_regs<Arch, 3, 2, 0>;
    case 321: return pool_row_regs<Arch, 3, 2, 1>;
    default: return nullptr;
  }
}

// NCHW (unit W stride): one output row of one plane, separable. x is the (H, W) plane with row
// step xh; y the (Q) output row; scratch this thread's RowScratch; cnt each output column's
// divisor factor (avgpool).
template <class Arch>
void pool_row(const Geometry& g, const RowScratch& rs, const float* x, std::int64_t xh, float* y, std::int64_t oh,
              float* scratch, const float* cnt) {
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
  const float rcount = row_divisor(g, oh, rows);
  const B vr(rcount);
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
      if (!is_max && last) {
        const B div = vr * B::load_unaligned(cnt + q);
        acc = xsimd::select(div > B(0.f), acc / div, B(0.f));
      }
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
  const std::size_t bytes = s->per_thread * sizeof(float) * static_cast<std::size_t>(s->threads);
  s->data = static_cast<float*>(std::aligned_alloc(64, bytes));
  if (!s->data) return {StatusCode::out_of_memory, "pool2d: cannot allocate the row buffers"};
  std::memset(s->data, 0, bytes);  // the slack lanes compute on zeros, never on garbage
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

  if (xs[3] == 1) {
    // Rows along W are contiguous (NCHW, or NHWC with C == 1): separable row kernel.
    assert(ys[3] == 1);
    const RowScratch rs(g);
    const RowRegsFn<Arch> regs = row_regs_kernel<Arch>(g);
    parallel_tid(g.N * g.C * g.P, threads, 4, [&](int tid, std::int64_t b, std::int64_t e) {
      float* mine = scratch->of(tid);
      float* cnt = mine + rs.cols + rs.phases;
      for (std::int64_t q = 0; q < g.Q; ++q)  // each output column's share of the divisor
        cnt[q] = static_cast<float>(g.incpad ? count_inside(q, g.sw, g.pl, g.kw, 1, -g.pl, g.W + g.pr)
                                             : count_inside(q, g.sw, g.pl, g.kw, 1, 0, g.W));
      // Rows b .. e - 1 of the (n, c, oh) space, the indices stepped (no division per row).
      std::int64_t oh = b % g.P, c = b / g.P % g.C, n = b / g.P / g.C;
      for (std::int64_t r = b; r < e; ++r) {
        const float* plane = xp + n * xs[0] + c * xs[1];
        float* yrow = yp + n * ys[0] + c * ys[1] + oh * ys[2];
        if (regs) {
          const float* rp[kTaps];
          int nr = 0;
          for (std::int64_t i = 0; i < g.kh; ++i) {
            const std::int64_t ih = oh * g.sh - g.pt + i * g.dh;
            if (ih >= 0 && ih < g.H) rp[nr++] = plane + ih * xs[2];
          }
          regs(g, rp, nr, yrow, row_divisor(g, oh, nr), cnt);
        } else {
          pool_row<Arch>(g, rs, plane, xs[2], yrow, oh, mine, cnt);
        }
        if (++oh == g.P) {
          oh = 0;
          if (++c == g.C) c = 0, ++n;
        }
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
      // Window positions inside the input (rows x cols) and inside the padded input.
      const std::int64_t rows = count_inside(oh, g.sh, g.pt, g.kh, g.dh, 0, g.H);
      const std::int64_t cols = count_inside(ow, g.sw, g.pl, g.kw, g.dw, 0, g.W);
      std::int64_t divisor = rows * cols;
      if (g.incpad)
        divisor = count_inside(oh, g.sh, g.pt, g.kh, 1, -g.pt, g.H + g.pb) *
                  count_inside(ow, g.sw, g.pl, g.kw, 1, -g.pl, g.W + g.pr);
      const float fdiv = static_cast<float>(divisor);
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
          const B s = window(B(0.f), ld, [](B a, B v) { return a + v; });
          r = divisor > 0 ? s / B(fdiv) : B(0.f);
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
