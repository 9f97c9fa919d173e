// simd/pool.cpp - max / average pooling and global average pooling, vectorized.
//
// naive: one output element at a time, every window position tested against the bounds
//        (naive/pool.cpp: NaN-propagating max, ceil mode, count_include_pad, dilation).
// simd:  two layouts, two vector directions.
//        W contiguous (NCHW): the window is a rectangle, so both reductions are separable. For
//          each output row, the kernel_h input rows are first reduced column-wise into a row
//          buffer (full-width vector loads, no bounds checks: the buffer's padding columns hold
//          the identity, -inf or 0), then each output is reduced across kernel_w buffer
//          entries. For stride_w > 1 the buffer is first de-interleaved into stride_w phase rows,
//          so that consecutive outputs read consecutive floats again. The average divides by
//          rows(oh) * cols(q), which is how n_valid and n_padded factor over a rectangle.
//        C contiguous (NHWC): one window walk per output pixel reduces a vector of channels.
//        The max is select((v > m) | isnan(v), v, m): naive's rule, so a NaN sticks.
//        global_avgpool: a vector sum per (n, c) plane (NCHW) or vectors across channels (NHWC).
// fused: pooling is memory-bound; fusion only pays when it follows a convolution (the pool is
//        then applied to the conv's output tile before it is stored).
// GCC 12's AVX-512 headers build min/max/roundscale from _mm512_undefined_ps(), which
// -Wmaybe-uninitialized flags at every inlining site (GCC bug 105593, fixed in GCC 13).

#include <cassert>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <memory>

#include "simd/common.hpp"

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
inline float max_nan(float m, float v) { return (v > m || v != v) ? v : m; }

// NCHW (unit W stride): one output row of one plane, separable. x is the (H, W) plane with row
// step xh; y the (Q) output row. buf is wb + phases + Q floats of this thread's scratch; cnt
// holds each output column's divisor factor (avgpool).
template <class Arch>
void pool_row(const Geometry& g, const float* x, std::int64_t xh, float* y, std::int64_t oh, float* buf,
              const float* cnt) {
  using B = fbatch<Arch>;
  constexpr std::int64_t W = B::size;
  const float id = g.is_max ? -kInf : 0.f;
  const B vid(id);
  // Vertical: buf[u] = reduction over the window's rows of input column u - pl; columns outside
  // the input stay the identity.
  const std::int64_t lo = g.pl, hi = g.pl + g.W < g.wb ? g.pl + g.W : g.wb;  // input columns in buf
  std::int64_t j = 0;
  for (; j < lo; ++j) buf[j] = id;
  for (j = hi > lo ? hi : lo; j < g.wb; ++j) buf[j] = id;
  bool first = true;
  std::int64_t rows = 0;  // window rows inside the input
  for (std::int64_t i = 0; i < g.kh; ++i) {
    const std::int64_t ih = oh * g.sh - g.pt + i * g.dh;
    if (ih < 0 || ih >= g.H) continue;
    ++rows;
    const float* xr = x + ih * xh;  // buffer column j is xr[j - pl]
    j = lo;
    if (first) {
      for (; j + W <= hi; j += W) B::load_unaligned(xr + (j - g.pl)).store_unaligned(buf + j);
      for (; j < hi; ++j) buf[j] = xr[j - g.pl];
      first = false;
    } else if (g.is_max) {
      for (; j + W <= hi; j += W)
        max_nan<Arch>(B::load_unaligned(buf + j), B::load_unaligned(xr + (j - g.pl))).store_unaligned(buf + j);
      for (; j < hi; ++j) buf[j] = max_nan(buf[j], xr[j - g.pl]);
    } else {
      for (; j + W <= hi; j += W)
        (B::load_unaligned(buf + j) + B::load_unaligned(xr + (j - g.pl))).store_unaligned(buf + j);
      for (; j < hi; ++j) buf[j] += xr[j - g.pl];
    }
  }
  if (first)
    for (j = lo; j < hi; ++j) buf[j] = id;  // no window row inside the input

  // De-interleave for stride_w > 1: phase r holds buf[t * sw + r] at ph + r * phase + t.
  const float* ph = buf;
  std::int64_t plen = g.wb;
  if (g.sw > 1) {
    float* d = buf + round16(g.wb);
    for (std::int64_t r = 0; r < g.sw; ++r)
      for (std::int64_t t = 0; t < g.phase; ++t) {
        const std::int64_t src = t * g.sw + r;
        d[r * g.phase + t] = src < g.wb ? buf[src] : id;
      }
    ph = d;
    plen = g.phase;
  }
  // Horizontal: y[q] = reduction over j of buf[q * sw + j * dw] = phase (j*dw % sw) at q + j*dw / sw.
  auto tap = [&](std::int64_t jj) { return ph + (jj * g.dw % g.sw) * plen + jj * g.dw / g.sw; };
  std::int64_t q = 0;
  if (g.is_max) {
    for (; q + W <= g.Q; q += W) {
      B acc = B::load_unaligned(tap(0) + q);
      for (std::int64_t jj = 1; jj < g.kw; ++jj) acc = max_nan<Arch>(acc, B::load_unaligned(tap(jj) + q));
      acc.store_unaligned(y + q);
    }
    for (; q < g.Q; ++q) {
      float acc = tap(0)[q];
      for (std::int64_t jj = 1; jj < g.kw; ++jj) acc = max_nan(acc, tap(jj)[q]);
      y[q] = acc;
    }
    return;
  }
  const float rcount = static_cast<float>(g.incpad ? count_inside(oh, g.sh, g.pt, g.kh, 1, -g.pt, g.H + g.pb) : rows);
  const B vr(rcount);
  for (; q + W <= g.Q; q += W) {
    B acc = B::load_unaligned(tap(0) + q);
    for (std::int64_t jj = 1; jj < g.kw; ++jj) acc += B::load_unaligned(tap(jj) + q);
    const B div = vr * B::load_unaligned(cnt + q);
    xsimd::select(div > B(0.f), acc / div, B(0.f)).store_unaligned(y + q);
  }
  for (; q < g.Q; ++q) {
    float acc = tap(0)[q];
    for (std::int64_t jj = 1; jj < g.kw; ++jj) acc += tap(jj)[q];
    const float div = rcount * cnt[q];
    y[q] = div > 0.f ? acc / div : 0.f;
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
  // buf (wb) + phases (sw * phase) + column counts (Q), each rounded to 16 floats.
  s->per_thread = static_cast<std::size_t>(round16(g.wb) + round16(g.sw * g.phase) + round16(g.Q));
  s->data =
      static_cast<float*>(std::aligned_alloc(64, s->per_thread * sizeof(float) * static_cast<std::size_t>(s->threads)));
  if (!s->data) return {StatusCode::out_of_memory, "pool2d: cannot allocate the row buffers"};
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
    parallel_tid(g.N * g.C * g.P, threads, 4, [&](int tid, std::int64_t b, std::int64_t e) {
      float* buf = scratch->of(tid);
      float* cnt = buf + round16(g.wb) + round16(g.sw * g.phase);
      for (std::int64_t q = 0; q < g.Q; ++q)  // each output column's share of the divisor
        cnt[q] = static_cast<float>(g.incpad ? count_inside(q, g.sw, g.pl, g.kw, 1, -g.pl, g.W + g.pr)
                                             : count_inside(q, g.sw, g.pl, g.kw, 1, 0, g.W));
      for (std::int64_t r = b; r < e; ++r) {
        const std::int64_t oh = r % g.P, nc = r / g.P, c = nc % g.C, n = nc / g.C;
        pool_row<Arch>(g, xp + n * xs[0] + c * xs[1], xs[2], yp + n * ys[0] + c * ys[1] + oh * ys[2], oh, buf, cnt);
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
      std::int64_t c = 0;
      if (g.is_max) {
        for (; c + W <= g.C; c += W)
          window(
              B(-kInf), [&](const float* p) { return B::load_unaligned(p + c); }, max_nan<Arch>)
              .store_unaligned(yo + c);
        for (; c < g.C; ++c)
          yo[c] = window(
              -kInf, [&](const float* p) { return p[c]; }, [](float m, float v) { return max_nan(m, v); });
      } else {
        const auto add = [](auto a, auto v) { return a + v; };
        for (; c + W <= g.C; c += W) {
          const B s = window(
              B(0.f), [&](const float* p) { return B::load_unaligned(p + c); }, add);
          (divisor > 0 ? s / B(fdiv) : B(0.f)).store_unaligned(yo + c);
        }
        for (; c < g.C; ++c) {
          const float s = window(
              0.f, [&](const float* p) { return p[c]; }, add);
          yo[c] = divisor > 0 ? s / fdiv : 0.f;
        }
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
