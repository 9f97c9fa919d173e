// fused/conv_dw.cpp - depthwise conv2d with batchnorm folded into the taps and the rest of the
// post-op chain applied to the accumulators before the store.
//
// The simd stage's depthwise kernels (simd/conv_kernel.hpp) on taps scaled by the folded
// batchnorms (fused/conv_common.hpp), with an accumulator map in place of the simd stage's
// chain pass:
//   NCHW (dw_nchw_run): phase-split planes, vectors along the output row; the map runs on each
//        row chunk's accumulator vectors.
//   NHWC (dw_nhwc_run): channels in lanes; the map runs on each vector of a pixel's channels.
// After folding, MobileNet's dw + BN + ReLU6 is one activation, run with its kind fixed for the
// call. Measured, 3x3 144 @56 +bn+relu6 t1 (one opfuse-bench run, medians of 3; simd -> fused,
// oneDNN): NCHW stride 1 341 -> 298 us (225), stride 2 237 -> 208 us (96.4), NHWC 231 -> 170 us
// (137). oneDNN stays ahead on depthwise.
#include <algorithm>
#include <array>
#include <cstdint>
#include <memory>
#include <vector>

#include "fused/conv.hpp"
#include "fused/conv_common.hpp"
#include "fused/gemm_epilogue.hpp"
#include "simd/activation.hpp"
#include "simd/common.hpp"
#include "simd/conv_kernel.hpp"

namespace opfuse::fused {
inline namespace OPFUSE_SIMD_NS {
namespace {

// The chain after the folded batchnorms for one (n, c) plane, applied to the accumulators of a
// row chunk before the store (simd::dw_chunk): batchnorm with this channel's scalars, a binary
// operand read along the plane (or broadcast), an activation on the registers.
template <class Arch>
struct DwPlaneEpi {
  struct Step {
    PostOp::Kind kind = PostOp::Kind::activation;
    BinaryKind binary = BinaryKind::add;
    Activation act;
    const float* p = nullptr;                   // binary: the operand at this plane's pixel 0
    i64 cs = 0;                                 // binary: 1 along the plane's pixels, 0 one value for the plane
    float mean = 0.f, mult = 0.f, shift = 0.f;  // batchnorm, this channel's
  };
  int n = 0;
  Step steps[kEpiMaxSteps];

  DwPlaneEpi(const ChainEpilogue& epi, const i64* image_stride, i64 img, i64 c) {
    for (int s = 0; s < epi.n; ++s) {
      const EpiStep& e = epi.steps[s];
      Step& st = steps[n++];
      st.kind = e.kind;
      st.binary = e.binary;
      st.act = e.act;
      if (e.kind == PostOp::Kind::batchnorm) {  // channel_rows view: one value per row (channel)
        st.mean = e.p0[c * e.rs], st.mult = e.p1[c * e.rs], st.shift = e.p2[c * e.rs];
      } else if (e.kind == PostOp::Kind::binary) {
        st.p = e.p0 + c * e.rs + img * image_stride[s];
        st.cs = e.cs;
      }
    }
  }

  // acc holds outputs pix .. pix + valid - 1 of the plane; with `whole` all NV vectors lie inside
  // the plane, so an operand along the plane may be read in full vectors too.
  template <class B, int NV>
  void operator()(B (&acc)[NV], i64 pix, i64 valid, bool whole) const {
    constexpr i64 W = B::size;
    for (int s = 0; s < n; ++s) {
      const Step& st = steps[s];
      if (st.kind == PostOp::Kind::batchnorm) {
        const B m(st.mean), k(st.mult), h(st.shift);
        for (int v = 0; v < NV; ++v) acc[v] = xsimd::fma(acc[v] - m, k, h);
      } else if (st.kind == PostOp::Kind::binary) {
        for (int v = 0; v < NV; ++v) {
          B o;
          if (st.cs == 0) {
            o = B(st.p[0]);
          } else if (whole || (v + 1) * W <= valid) {
            o = B::load_unaligned(st.p + pix + v * W);
          } else {  // the row's last vector at the plane's end: nothing past `valid` is read
            alignas(64) float t[W] = {};
            for (i64 l = 0; l < valid - v * W; ++l) t[l] = st.p[pix + v * W + l];
            o = B::load_aligned(t);
          }
          acc[v] = simd::binary_op<Arch>(st.binary, acc[v], o);
        }
      } else {
        simd::with_act_kind(st.act.kind, [&](auto kind) {
          constexpr ActKind K = decltype(kind)::value;
          for (int v = 0; v < NV; ++v) acc[v] = simd::activate_k<K, Arch>(st.act, acc[v]);
        });
      }
    }
  }
};

// The common case, MobileNet's dw + BN + ReLU6: after folding, the chain is one activation,
// applied with its kind fixed for the whole call (the general map above dispatches on the kind
// per row chunk, and its accumulators went through the stack).
template <class Arch, ActKind K>
struct DwActEpi {
  Activation act;
  template <class B, int NV>
  void operator()(B (&acc)[NV], i64, i64, bool) const {
    for (int v = 0; v < NV; ++v) acc[v] = simd::activate_k<K, Arch>(act, acc[v]);
  }
};

// NHWC: w (C, 1, R, S) scaled by the folded batchnorms into [R][S][C], one vector of channels
// per tap.
void pack_dw_folded(const simd::ConvGeom& g, const float* w, const float* sc, float* out) {
  for (i64 r = 0; r < g.R; ++r)
    for (i64 s = 0; s < g.S; ++s)
      for (i64 c = 0; c < g.C; ++c) out[(r * g.S + s) * g.C + c] = w[c * g.ws[0] + r * g.ws[2] + s * g.ws[3]] * sc[c];
}

// NHWC: the chain after the folded batchnorms on one vector of a pixel's channels (cnt lanes
// valid): batchnorm vectors along the channels, the operand at (pixel, channels) through its
// pixel_rows strides, the activation on the register. Built once per call.
template <class Arch>
struct DwNhwcEpi {
  using B = fbatch<Arch>;
  static constexpr i64 W = B::size;
  const ChainEpilogue* epi;
  // cnt floats from p (stride cs; 0: one value), zero-filled past cnt: nothing beyond is read.
  static B load(const float* p, i64 cs, i64 cnt) {
    if (cs == 0) return B(*p);
    if (cnt == W) return B::load_unaligned(p);
    alignas(64) float t[W] = {};
    for (i64 l = 0; l < cnt; ++l) t[l] = p[l];
    return B::load_aligned(t);
  }
  B operator()(B acc, i64 pix, i64 c, i64 cnt) const {
    for (int s = 0; s < epi->n; ++s) {
      const EpiStep& st = epi->steps[s];
      if (st.kind == PostOp::Kind::batchnorm) {  // pixel_rows: rs 0, cs 1
        acc = xsimd::fma(acc - load(st.p0 + c, 1, cnt), load(st.p1 + c, 1, cnt), load(st.p2 + c, 1, cnt));
      } else if (st.kind == PostOp::Kind::binary) {
        acc = simd::binary_op<Arch>(st.binary, acc, load(st.p0 + pix * st.rs + c * st.cs, st.cs, cnt));
      } else {
        simd::with_act_kind(st.act.kind,
                            [&](auto kind) { acc = simd::activate_k<decltype(kind)::value, Arch>(st.act, acc); });
      }
    }
    return acc;
  }
};

// NHWC, the chain one activation after folding (MobileNet's dw + BN + ReLU6): its kind fixed.
template <class Arch, ActKind K>
struct DwNhwcAct {
  Activation act;
  fbatch<Arch> operator()(fbatch<Arch> acc, i64, i64, i64) const { return simd::activate_k<K, Arch>(act, acc); }
};

struct DepthwiseState {
  simd::DwState dw;     // NCHW: tap offsets and one phase-split plane per thread
  bool folded = false;  // sc and bi (NHWC: and wpk) from bound weights, bias and batchnorms
  Floats sc, bi;        // per channel: the folded batchnorm scale and bias (bias included)
  Floats wpk;           // NHWC: the folded taps [R][S][C]
  std::vector<Floats> mults;
};

}  // namespace
}  // namespace OPFUSE_SIMD_NS

template <class Arch>
std::size_t ConvDepthwise::workspace(Arch, const OpDesc& desc) {
  const Shape& w = desc.inputs[1].shape;
  const i64 K = w[0];
  return static_cast<std::size_t>(16 + 2 * gemm_round_up(K, 16) + gemm_round_up(K * w[2] * w[3], 16) +
                                  epilogue_ws(desc.p<Conv2dParams>(), K));
}

template <class Arch>
Status ConvDepthwise::prepare(Arch, const OpDesc& desc, const Context& ctx, const Tensor* const* constants,
                              std::shared_ptr<void>& state) {
  auto st = std::make_shared<DepthwiseState>();
  const simd::ConvGeom g = simd::conv_geom(desc);
  if (!g.x_nhwc) simd::dw_prepare_planes<Arch>(g, ctx.threads, &st->dw);
  if (fold_bound(desc, constants)) {
    st->sc = alloc_floats(static_cast<std::size_t>(g.K));
    st->bi = alloc_floats(static_cast<std::size_t>(g.K));
    fold_scales(desc, g.K, constants, st->sc.get(), st->bi.get());
    if (g.x_nhwc) {
      st->wpk = alloc_floats(static_cast<std::size_t>(g.R * g.S * g.C));
      pack_dw_folded(g, constants[1]->data(), st->sc.get(), st->wpk.get());
    }
    st->folded = true;
  }
  st->mults = bound_mults(desc, constants);
  state = std::move(st);
  return Status::ok();
}

template <class Arch>
void ConvDepthwise::operator()(Arch, const KernelArgs& args) const {
  const OpDesc& d = *args.desc;
  auto* st = static_cast<DepthwiseState*>(args.state);
  const simd::ConvGeom g = simd::conv_geom(d);
  float* ws0 = args.workspace + (16 - reinterpret_cast<std::uintptr_t>(args.workspace) / sizeof(float) % 16) % 16;
  Carver cv{ws0};
  float* wss = cv.take(g.K);
  float* wsb = cv.take(g.K);
  float* wsw = cv.take(g.R * g.S * g.C);
  float* wse = cv.take(epilogue_ws(d.p<Conv2dParams>(), g.K));
  const float* sc = st->sc.get();
  const float* bi = st->bi.get();
  const float* wpk = st->wpk.get();
  if (!st->folded) {
    fold_scales(d, g.K, args.in, wss, wsb);
    sc = wss;
    bi = wsb;
    if (g.x_nhwc) {
      pack_dw_folded(g, args.in[1]->data(), sc, wsw);
      wpk = wsw;
    }
  }
  if (g.x_nhwc) {
    const ChainEpilogue epi = make_epilogue(d, geom(d), args.in, &st->mults, wse, ConvView::pixel_rows);
    const auto run = [&](const auto& e) {
      simd::dw_nhwc_run<Arch>(g, args.in[0]->data(), wpk, bi, args.out[0]->mutable_data(), args.threads, e,
                              [](i64, float*) {});
    };
    if (epi.n == 1 && epi.steps[0].kind == PostOp::Kind::activation) {
      const Activation act = epi.steps[0].act;
      simd::with_act_kind(act.kind, [&](auto kind) { run(DwNhwcAct<Arch, decltype(kind)::value>{act}); });
    } else {
      run(DwNhwcEpi<Arch>{&epi});
    }
    return;
  }
  const ChainEpilogue epi = make_epilogue(d, geom(d), args.in, &st->mults, wse, ConvView::channel_rows);
  i64 image_stride[kEpiMaxSteps] = {};
  epilogue_image_strides(d, epi, image_stride);
  const float* w = args.in[1]->data();
  const i64 taps = g.R * g.S, S = g.S;
  const std::array<i64, kMaxRank> ws = g.ws;
  const auto setup = [=](i64, i64 c, float* wt) {  // the folded taps w * sc[c] and bias bi[c]
    for (i64 t = 0; t < taps; ++t) wt[t] = w[c * ws[0] + (t / S) * ws[2] + (t % S) * ws[3]] * sc[c];
    return bi[c];
  };
  const auto run = [&](auto epi_of) {
    simd::dw_nchw_run<Arch>(g, &st->dw, args.in[0]->data(), args.out[0]->mutable_data(), args.threads, setup, epi_of,
                            [](i64, i64, float*, i64, i64) {});
  };
  if (epi.n == 1 && epi.steps[0].kind == PostOp::Kind::activation) {
    const Activation act = epi.steps[0].act;
    simd::with_act_kind(
        act.kind, [&](auto kind) { run([act](i64, i64) { return DwActEpi<Arch, decltype(kind)::value>{act}; }); });
  } else {
    run([&](i64 n, i64 c) { return DwPlaneEpi<Arch>(epi, image_stride, n, c); });
  }
}

OPFUSE_SIMD_INSTANTIATE_PREPARED(ConvDepthwise);

}  // namespace opfuse::fused
