// fused/conv_dw.cpp - depthwise conv2d, and the dense conv of few input channels (the RGB stems)
// that shares its phase-split planes, with batchnorm folded into the taps and the rest of the
// post-op chain applied to the accumulators before the store.
//
// The simd stage's depthwise kernels (simd/conv_kernel.hpp) on taps scaled by the folded
// batchnorms (fused/conv_common.hpp), with an accumulator map in place of the simd stage's
// chain pass:
//   NCHW (dw_nchw_run): phase-split planes (3x3 stride 2: x's rows split in registers),
//        vectors along the output row; the map runs on each row chunk's accumulator vectors.
//   NHWC (dw_nhwc_run): channels in lanes; the map runs on each vector of a pixel's channels.
// After folding, MobileNet's dw + BN + ReLU6 is one activation, run with its kind fixed for the
// call. Measured on 3x3 144 @56 +bn+relu6 (NCHW stride 1 and 2, NHWC), simd / fused / oneDNN:
// reports/REPORT.md (conv2d), or run `opfuse-bench --op conv2d`.
// Few input channels, NCHW or NHWC (ConvSmallC, below): simd's smallc kernel on BN-folded weights with
// the chain on its 8-channel x 1-3-vector tile (a lone activation with its kind fixed, as for
// depthwise). On MobileNet's 3x3/2 3->32 @224 +bn+relu6 stem it beat both simd's smallc kernel
// and the fused NHWC direct kernel it replaces, by a wide margin over the latter (3 A/B pairs on
// a quiet VM); simd / fused / oneDNN for that case are in reports/REPORT.md (conv2d).
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

// NCHW: the chain after the folded batchnorms on the accumulators of a row chunk of plane c
// (simd::dw_chunk), epi already moved to the plane's image: channels are the view's rows, pixels
// its columns. No operand is read past `valid` (ChainEpilogue::apply_vector).
template <class Arch>
struct DwPlaneEpi {
  ChainEpilogue epi;
  i64 c;
  template <class B, int NV>
  void operator()(B (&acc)[NV], i64 pix, i64 valid) const {
    constexpr i64 W = B::size;
    for (int v = 0; v < NV; ++v)
      acc[v] = epi.template apply_vector<Arch>(acc[v], c, pix + v * W, std::min(W, valid - v * W));
  }
};

// The common case, MobileNet's dw + BN + ReLU6 (and a stem's conv + BN + ReLU / ReLU6): after
// folding, the chain is one activation, applied with its kind fixed for the whole call by
// simd::ActMap (simd/activation.hpp), in each kernel's map form.

// NHWC: w (C, 1, R, S) scaled by the folded batchnorms into [R][S][C], one vector of channels
// per tap.
void pack_dw_folded(const ConvGeom& g, const float* w, const float* sc, float* out) {
  for (i64 r = 0; r < g.R; ++r)
    for (i64 s = 0; s < g.S; ++s)
      for (i64 c = 0; c < g.C; ++c) out[(r * g.S + s) * g.C + c] = w[c * g.ws[0] + r * g.ws[2] + s * g.ws[3]] * sc[c];
}

// NHWC: the chain on one vector of a pixel's channels (pixels are the view's rows, channels its
// columns).
template <class Arch>
struct DwNhwcEpi {
  const ChainEpilogue* epi;
  fbatch<Arch> operator()(fbatch<Arch> acc, i64 pix, i64 c, i64 cnt) const {
    return epi->template apply_vector<Arch>(acc, pix, c, cnt);
  }
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
  const ConvGeom g = conv_geom(desc);
  if (!g.x_nhwc) simd::dw_nchw_prepare<Arch>(g, ctx.threads, &st->dw);
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
  const ConvGeom g = conv_geom(d);
  Carver cv{simd::align64(args.workspace)};
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
    const ChainEpilogue epi = make_epilogue(d, g, args.in, &st->mults, wse, ConvView::pixel_rows);
    const auto run = [&](const auto& e) {
      simd::dw_nhwc_run<Arch>(g, args.in[0]->data(), wpk, bi, args.out[0]->mutable_data(), args.threads, e,
                              [](i64, float*) {});
    };
    if (epi.n == 1 && epi.steps[0].kind == PostOp::Kind::activation) {
      const Activation act = epi.steps[0].act;
      simd::with_common_act_kind(
          act.kind, [&](auto kind) { run(simd::ActMap<Arch, decltype(kind)::value>{act}); },
          [&] { run(DwNhwcEpi<Arch>{&epi}); });
    } else {
      run(DwNhwcEpi<Arch>{&epi});
    }
    return;
  }
  const ChainEpilogue epi = make_epilogue(d, g, args.in, &st->mults, wse, ConvView::channel_rows);
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
  // The general chain: kinds with_common_act_kind leaves to it, and every other chain.
  const auto chain = [&](i64 n, i64 c) { return DwPlaneEpi<Arch>{epi.for_image(image_stride, n), c}; };
  if (epi.n == 1 && epi.steps[0].kind == PostOp::Kind::activation) {
    const Activation act = epi.steps[0].act;
    simd::with_common_act_kind(
        act.kind, [&](auto kind) { run([act](i64, i64) { return simd::ActMap<Arch, decltype(kind)::value>{act}; }); },
        [&] { run(chain); });
  } else {
    run(chain);
  }
}

OPFUSE_SIMD_INSTANTIATE_PREPARED(ConvDepthwise);

// ---- few input channels ----------------------------------------------------------------------
// simd's smallc kernel (simd/conv_kernel.hpp: phase-split input planes, 8 output channels x 1-3
// vectors of an output row) on weights with the leading batchnorms folded in, the rest of the
// chain on the accumulators before the only store of y (channels as rows: apply_rows over the
// tile's 8 channels per vector, each step's kind resolved once). NHWC x and y (the layout
// planner's stems, whose input is converted before them): simd's channels-in-lanes tile
// reading x in place (smallc_nhwc_run), for chains of folded batchnorms and at most one
// activation (conv_smallc_supports).

inline namespace OPFUSE_SIMD_NS {
namespace {

template <class Arch>
struct SmallcEpi {
  ChainEpilogue epi;  // moved to the tile's image
  i64 k0, K;
  template <class B, int KC, int NV>
  void operator()(B (&acc)[KC][NV], i64 pix, i64 valid) const {
    if (epi.n == 0) return;
    constexpr i64 W = B::size;
    for (int v = 0; v < NV; ++v) {
      const i64 cnt = std::min(W, valid - v * W);
      if (k0 + KC <= K) {
        B col[KC];
        for (int u = 0; u < KC; ++u) col[u] = acc[u][v];
        epi.template apply_rows<Arch, KC>(col, k0, pix + v * W, cnt);
        for (int u = 0; u < KC; ++u) acc[u][v] = col[u];
      } else {  // the last block's channels past K have no operands to read
        for (int u = 0; u < K - k0; ++u)
          acc[u][v] = epi.template apply_vector<Arch>(acc[u][v], k0 + u, pix + v * W, cnt);
      }
    }
  }
};

struct SmallcState {
  simd::DwState dw;     // tap offsets; C phase-split planes (NCHW) or a patch (NHWC) per thread
  bool folded = false;  // wpk and bpk from bound weights, bias and batchnorms
  Floats wpk, bpk;
  std::vector<Floats> mults;
};

}  // namespace
}  // namespace OPFUSE_SIMD_NS

namespace {
// Packed output channels: NCHW's blocks of kSmallKC, or NHWC's K rounded up to the vector width.
template <class Arch>
i64 smallc_packed_k(const ConvGeom& g) {
  return g.x_nhwc ? simd::smallc_nhwc_kpad(g, fbatch<Arch>::size) : simd::smallc_kpad(g);
}
// Folded BN scales and bias, then the packs of smallc_pack or smallc_pack_nhwc.
template <class Arch>
void smallc_fold_pack(const ConvGeom& g, const float* w, const float* sc, const float* bi, float* wpk, float* bpk) {
  if (g.x_nhwc)
    simd::smallc_pack_nhwc(g, smallc_packed_k<Arch>(g), w, sc, bi, wpk, bpk);
  else
    simd::smallc_pack(g, w, sc, bi, wpk, bpk);
}
}  // namespace

template <class Arch>
std::size_t ConvSmallC::workspace(Arch, const OpDesc& desc) {
  const ConvGeom g = conv_geom(desc);
  const i64 kp = smallc_packed_k<Arch>(g);
  return static_cast<std::size_t>(16 + 2 * gemm_round_up(g.K, 16) + gemm_round_up(kp * g.C * g.R * g.S, 16) +
                                  gemm_round_up(kp, 16) + epilogue_ws(desc.p<Conv2dParams>(), g.K));
}

template <class Arch>
Status ConvSmallC::prepare(Arch, const OpDesc& desc, const Context& ctx, const Tensor* const* constants,
                           std::shared_ptr<void>& state) {
  auto st = std::make_shared<SmallcState>();
  const ConvGeom g = conv_geom(desc);
  if (g.x_nhwc)
    simd::smallc_nhwc_prepare<Arch>(g, ctx.threads, &st->dw);
  else
    simd::smallc_prepare<Arch>(g, ctx.threads, &st->dw);
  if (fold_bound(desc, constants)) {
    const i64 kp = smallc_packed_k<Arch>(g);
    std::vector<float> sc(static_cast<std::size_t>(g.K)), bi(static_cast<std::size_t>(g.K));
    fold_scales(desc, g.K, constants, sc.data(), bi.data());
    st->wpk = alloc_floats(static_cast<std::size_t>(kp * g.C * g.R * g.S));
    st->bpk = alloc_floats(static_cast<std::size_t>(kp));
    smallc_fold_pack<Arch>(g, constants[1]->data(), sc.data(), bi.data(), st->wpk.get(), st->bpk.get());
    st->folded = true;
  }
  st->mults = bound_mults(desc, constants);
  state = std::move(st);
  return Status::ok();
}

template <class Arch>
void ConvSmallC::operator()(Arch, const KernelArgs& args) const {
  const OpDesc& d = *args.desc;
  auto* st = static_cast<SmallcState*>(args.state);
  const ConvGeom g = conv_geom(d);
  const i64 kp = smallc_packed_k<Arch>(g);
  Carver cv{simd::align64(args.workspace)};
  float* wss = cv.take(g.K);
  float* wsb = cv.take(g.K);
  float* wsw = cv.take(kp * g.C * g.R * g.S);
  float* wsp = cv.take(kp);
  float* wse = cv.take(epilogue_ws(d.p<Conv2dParams>(), g.K));
  const float* wpk = st->wpk.get();
  const float* bpk = st->bpk.get();
  if (!st->folded) {
    fold_scales(d, g.K, args.in, wss, wsb);
    smallc_fold_pack<Arch>(g, args.in[1]->data(), wss, wsb, wsw, wsp);
    wpk = wsw;
    bpk = wsp;
  }
  const ChainEpilogue epi = make_epilogue(d, g, args.in, &st->mults, wse, ConvView::channel_rows);
  if (g.x_nhwc) {  // folded batchnorms and at most one activation (conv_smallc_supports)
    const auto run = [&](const auto& map) {
      simd::smallc_nhwc_run<Arch>(g, &st->dw, args.in[0]->data(), wpk, bpk, args.out[0]->mutable_data(), args.threads,
                                  map);
    };
    if (epi.n == 0) {
      run(simd::NoMap{});
    } else {
      const Activation act = epi.steps[0].act;
      simd::with_common_act_kind(
          act.kind, [&](auto kind) { run(simd::ActMap<Arch, decltype(kind)::value>{act}); },
          [&] { run(simd::ActMapAny<Arch>{act}); });
    }
    return;
  }
  i64 image_stride[kEpiMaxSteps] = {};
  epilogue_image_strides(d, epi, image_stride);
  const i64 K = g.K;
  const auto run = [&](auto epi_of) {
    simd::smallc_run<Arch>(g, &st->dw, args.in[0]->data(), wpk, bpk, args.out[0]->mutable_data(), args.threads, epi_of,
                           [](i64, i64, i64) {});
  };
  const auto chain = [&](i64 n, i64 k0) { return SmallcEpi<Arch>{epi.for_image(image_stride, n), k0, K}; };
  if (epi.n == 1 && epi.steps[0].kind == PostOp::Kind::activation) {
    const Activation act = epi.steps[0].act;
    simd::with_common_act_kind(
        act.kind, [&](auto kind) { run([act](i64, i64) { return simd::ActMap<Arch, decltype(kind)::value>{act}; }); },
        [&] { run(chain); });
  } else {
    run(chain);
  }
}

OPFUSE_SIMD_INSTANTIATE_PREPARED(ConvSmallC);

}  // namespace opfuse::fused
