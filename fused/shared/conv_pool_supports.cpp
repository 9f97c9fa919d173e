// fused/shared/conv_pool_supports.cpp - ISA-independent parts of the fused conv + pool kernel
// (compiled once, no ISA flags): supports(), the geometry, and the prepare-time weight folding
// and packing (run at execute into the workspace when the constants are not bound).
#include <cmath>
#include <cstring>

#include "fused/conv_pool.hpp"
#include "simd/simd.hpp"

namespace opfuse::fused {

namespace {
using i64 = std::int64_t;
i64 round_up(i64 v, i64 m) { return (v + m - 1) / m * m; }
}  // namespace

bool conv_pool_supports(const OpDesc& desc) {
  const auto& p = desc.p<Conv2dParams>();
  if (p.post_ops.empty() || p.post_ops.back().kind != PostOp::Kind::pool) return false;
  if (p.groups != 1) return false;
  if (p.post_ops.back().window.kernel_h > 64) return false;  // the ring's slot tags are a fixed array
  if (p.post_ops.size() - 1 > static_cast<std::size_t>(kConvPoolMaxSteps)) return false;
  for (std::size_t i = 0; i + 1 < p.post_ops.size(); ++i) {
    const PostOp& op = p.post_ops[i];
    if (op.kind == PostOp::Kind::binary) return false;
    if (op.kind == PostOp::Kind::activation && !simd::act_supported(op.act.kind)) return false;
  }
  return true;
}

ConvPoolGeom conv_pool_geom(const OpDesc& d) {
  const auto& p = d.p<Conv2dParams>();
  ConvPoolGeom g{};
  static_cast<simd::ConvGeom&>(g) = simd::conv_geom(d);
  const PostOp::Window& pw = p.post_ops.back().window;
  g.kh = pw.kernel_h, g.kw = pw.kernel_w, g.psh = pw.stride_h, g.psw = pw.stride_w;
  g.ppt = pw.pad_top, g.ppl = pw.pad_left;
  g.PP = (g.P + pw.pad_top + pw.pad_bottom - g.kh) / g.psh + 1;  // floor mode, as validate()
  g.PQ = (g.Q + pw.pad_left + pw.pad_right - g.kw) / g.psw + 1;
  g.copy_x = !g.x_nhwc || g.pt || g.pl || g.pb || g.pr;
  g.Hp = g.copy_x ? g.H + g.pt + g.pb : g.H;
  g.Wp = g.copy_x ? g.W + g.pl + g.pr : g.W;
  const int chain = static_cast<int>(p.post_ops.size()) - 1;
  g.nfold = 0;
  while (g.nfold < chain && p.post_ops[static_cast<std::size_t>(g.nfold)].kind == PostOp::Kind::batchnorm) ++g.nfold;
  g.nsteps = chain - g.nfold;
  return g;
}

std::size_t conv_pool_params_floats(const ConvPoolGeom& g, i64 KB) {
  const i64 Kp = round_up(g.K, KB);
  return static_cast<std::size_t>(Kp * g.R * g.S * g.C + Kp + 3 * Kp * g.nsteps);
}

void conv_pool_fold_pack(const OpDesc& d, const ConvPoolGeom& g, i64 KB, const Tensor* const* in, float* out) {
  const auto& p = d.p<Conv2dParams>();
  const i64 Kp = round_up(g.K, KB), taps = g.R * g.S * g.C;
  float* wp = out;
  float* bias = wp + Kp * taps;
  float* vecs = bias + Kp;
  const float* w = in[1]->data();
  const float* b = p.has_bias ? in[2]->data() : nullptr;
  std::size_t operand = p.has_bias ? 3 : 2;  // first post-op operand
  // Leading batchnorms: w' = w * s, b' = (b - mean) * s + beta per batchnorm in a row, with
  // s = scale / sqrt(var + eps), composed in double and rounded once (as oneDNN users fold).
  for (i64 k = 0; k < Kp; ++k) {
    double s = 1.0, t = b && k < g.K ? static_cast<double>(b[k]) : 0.0;
    std::size_t op = operand;
    for (int i = 0; i < g.nfold && k < g.K; ++i) {
      const double sc = in[op]->data()[k], beta = in[op + 1]->data()[k];
      const double mean = in[op + 2]->data()[k], var = in[op + 3]->data()[k];
      const double m = sc / std::sqrt(var + static_cast<double>(p.post_ops[static_cast<std::size_t>(i)].epsilon));
      t = (t - mean) * m + beta;
      s *= m;
      op += 4;
    }
    bias[k] = k < g.K ? static_cast<float>(t) : 0.f;
    // Packed [kb][r][s][c][KB]: one K block's weights are contiguous, in the micro-kernel's
    // reduction order (window row, window column, channel).
    const float sf = static_cast<float>(s);
    const i64 kb = k / KB, l = k % KB;
    float* o = wp + kb * taps * KB + l;
    for (i64 r = 0; r < g.R; ++r)
      for (i64 sx = 0; sx < g.S; ++sx)
        for (i64 c = 0; c < g.C; ++c, o += KB)
          *o = k < g.K ? w[k * g.ws[0] + c * g.ws[1] + r * g.ws[2] + sx * g.ws[3]] * sf : 0.f;
  }
  // Later batchnorms (after an activation): y = (y - mean) * mult + shift on the accumulators,
  // the formula of the simd chain, mult = scale / sqrt(var + eps) in float as naive computes it.
  operand += 4 * static_cast<std::size_t>(g.nfold);
  for (int i = 0; i < g.nsteps; ++i) {
    const PostOp& op = p.post_ops[static_cast<std::size_t>(g.nfold + i)];
    float* mean = vecs + 3 * Kp * i;
    float* mult = mean + Kp;
    float* shift = mult + Kp;
    if (op.kind != PostOp::Kind::batchnorm) {
      std::memset(mean, 0, static_cast<std::size_t>(3 * Kp) * sizeof(float));
      continue;
    }
    const float* sc = in[operand]->data();
    const float* beta = in[operand + 1]->data();
    const float* mu = in[operand + 2]->data();
    const float* var = in[operand + 3]->data();
    for (i64 k = 0; k < Kp; ++k) {
      const bool real = k < g.K;
      mean[k] = real ? mu[k] : 0.f;
      mult[k] = real ? sc[k] * (1.f / std::sqrt(var[k] + op.epsilon)) : 0.f;
      shift[k] = real ? beta[k] : 0.f;
    }
    operand += 4;
  }
}

}  // namespace opfuse::fused
