// src/check/compare.cpp - the one comparator and the one tolerance table.
//
// Model: an element passes iff |out - ref| <= atol + rtol * |ref|. rtol covers rounding that
// scales with the value; atol covers elements that cancel to near zero, where the absolute
// rounding error of the terms that were summed stays. Both are multiples of the fp32 unit
// roundoff eps = 2^-23, scaled with the reduction length L of the op: a sum of L rounded
// terms accumulates error like a random walk, ~eps * sqrt(L) relative to the size of the
// terms (Higham & Mary's probabilistic bound), and the absolute error is that times the
// typical magnitude M of the sum, which the case generators fix by drawing inputs from known
// domains (uniform [-1, 1] unless make_inputs says otherwise).
//
// Calibration (`opfuse check --stage naive --seed 1..6`): the naive kernels stay below ~0.15 of
// the allowed error against oneDNN and the closed forms (the "measured" notes below), and the
// test Cases.RelativeErrorOf1e3FailsOnEveryCase shows that every generated case fails when its
// reference is perturbed by 1e-3 relative.
#include <algorithm>
#include <cmath>
#include <limits>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "src/check/compare.hpp"

namespace opfuse::check {

namespace {
constexpr double kEps = 0x1p-23;  // fp32 unit roundoff (1 ulp at 1.0)
constexpr double kInfinity = std::numeric_limits<double>::infinity();

// A dot product of L terms a*b with a, b uniform in [-1, 1]: the sum has standard deviation
// sqrt(L)/3, the rounding error ~eps * sqrt(L) of that. c is the safety factor.
Tolerance dot_tolerance(double L, double magnitude, double c) {
  const double r = c * kEps * std::sqrt(std::max(L, 1.0));
  return {r * magnitude, r};
}

// Each batchnorm step multiplies an absolute error by up to scale/sqrt(var) = 1.5/sqrt(0.5)
// (make_inputs draws scale from [0.5, 1.5], var from [0.5, 2]).
constexpr double kBnGain = 2.2;

double post_op_gain(const PostOps& post_ops) {
  double g = 1;
  for (const PostOp& p : post_ops) {
    if (p.kind == PostOp::Kind::batchnorm) g *= kBnGain;
    if (p.kind == PostOp::Kind::binary && p.binary == BinaryKind::div) g *= 2;  // divisors >= 0.5
  }
  return g;
}
}  // namespace

CompareResult compare(std::span<const float> out, std::span<const float> ref, const Tolerance& tol) {
  CompareResult r;
  r.count = static_cast<std::int64_t>(ref.size());
  if (out.size() != ref.size()) {
    r.reason = "size mismatch: output has " + std::to_string(out.size()) + " elements, reference " +
               std::to_string(ref.size());
    r.worst_ratio = kInfinity;
    return r;
  }
  bool ref_all_zero = true, out_all_zero = true;
  // Under the flush-to-zero policy (src/denormal.hpp) a denormal and the zero it flushes to are
  // the same value: an op that only moves an element (clip's blend, a copy) may keep a denormal
  // that another stage's min/max instruction reads as zero. So both sides are compared flushed.
  const auto flushed = [](float v) { return std::fabs(v) < std::numeric_limits<float>::min() ? 0.f : v; };
  for (std::size_t i = 0; i < ref.size(); ++i) {
    const float o = flushed(out[i]), e = flushed(ref[i]);
    if (e != 0.f) ref_all_zero = false;  // NaN != 0 too
    if (o != 0.f) out_all_zero = false;
    const double allowed = tol.atol + tol.rtol * std::fabs(static_cast<double>(e));
    double err = 0;
    bool bad = false;
    if (std::isnan(e) || std::isnan(o)) {
      bad = std::isnan(e) != std::isnan(o);  // NaN must meet NaN
      err = bad ? kInfinity : 0;
    } else if (std::isinf(e) || std::isinf(o)) {
      bad = o != e;  // Infs must match exactly, sign included
      err = bad ? kInfinity : 0;
    } else {
      err = std::fabs(static_cast<double>(o) - static_cast<double>(e));
      bad = err > allowed;
    }
    const double ratio = err == 0 ? 0 : (allowed > 0 ? err / allowed : kInfinity);
    if (ratio > r.worst_ratio || (r.worst.index < 0 && bad)) {
      r.worst_ratio = ratio;
      r.worst = {static_cast<std::int64_t>(i), out[i], ref[i], err, allowed};
    }
    if (bad) {
      ++r.mismatches;
      if (r.first.size() < kReportedMismatches)
        r.first.push_back({static_cast<std::int64_t>(i), out[i], ref[i], err, allowed});
    }
  }
  if (ref.empty()) {
    r.reason = "degenerate: no elements to compare";
  } else if (ref_all_zero) {
    r.reason = "degenerate: reference is all zero";
  } else if (out_all_zero) {
    r.reason = "output is all zero (reference is not)";
  } else if (r.mismatches > 0) {
    r.reason = std::to_string(r.mismatches) + " of " + std::to_string(r.count) + " elements differ";
  } else {
    r.ok = true;
  }
  return r;
}

// The tolerance table. L is the reduction length, M the typical magnitude of the output (or
// of the terms that cancel in it) under make_inputs' domains, c the safety factor. The
// "measured" figures are the worst err/allowed of naive vs oneDNN over seeds 1-6 (and vs the
// closed forms), so there is room for other summation orders, FMA and vector exp/erf.
Tolerance tolerance(const OpDesc& d) {
  const auto in = [&](std::size_t i) -> const Shape& {
    static const Shape kNone{1};
    return i < d.inputs.size() ? d.inputs[i].shape : kNone;
  };
  const auto dim = [](const Shape& s, int i) { return static_cast<double>(i < s.rank ? s[i] : 1); };
  switch (d.op) {
    case OpKind::gemm: {
      // L = K. y = alpha * sum_k a*b: M = |alpha| sqrt(K)/3, plus |beta|*|y| and the bias
      // (|.| <= 1). c = 4; measured <= 0.03.
      const auto& p = d.p<GemmParams>();
      const double K = dim(in(0), p.trans_a ? 0 : 1);
      const double M = std::fabs(p.alpha) * std::sqrt(K) / 3 + std::fabs(p.beta) + (p.has_bias ? 1 : 0) + 1;
      Tolerance t = dot_tolerance(K, M, 4);
      t.atol *= post_op_gain(p.post_ops);
      return t;
    }
    case OpKind::conv2d: {
      // L = C/groups * R * S (padding only removes terms). Same model as gemm; measured <= 0.03.
      const auto& p = d.p<Conv2dParams>();
      const Shape& w = in(1);
      const double L = dim(w, 1) * dim(w, 2) * dim(w, 3);
      Tolerance t = dot_tolerance(L, std::sqrt(L) / 3 + (p.has_bias ? 1 : 0) + 1, 4);
      t.atol *= post_op_gain(p.post_ops);
      return t;
    }
    case OpKind::batchnorm:
      // L = 1, but implementations fold to x*a + (bias - mean*a) with a = scale/sqrt(var+eps)
      // <= 2.2: terms up to ~5 cancel, so a few ulp of 5 absolute. Measured <= 0.07.
      return {8 * kEps * 5, 8 * kEps};
    case OpKind::relu:
    case OpKind::clip:
    case OpKind::leaky_relu:
    case OpKind::add:
    case OpKind::sub:
    case OpKind::mul:
      // One correctly rounded operation (or none): any IEEE implementation gives the same
      // bits. 1 ulp of slack for a contracted alpha*x or a reassociated broadcast. Measured 0.
      return {0, kEps};
    case OpKind::div:
      // a/b or a * (1/b) (+ Newton step): 2 roundings, |b| >= 0.5 so |a/b| <= 2. Measured 0.
      return {2 * kEps, 4 * kEps};
    case OpKind::hardswish:
      // x * clip(x+3, 0, 6) / 6: three roundings; near x = -3 the value is ~0 while x+3 rounds
      // relative to 3, so ~eps * 8 absolute (inputs in [-8, 8]). Measured <= 0.14.
      return {8 * kEps, 4 * kEps};
    case OpKind::sigmoid:
    case OpKind::tanh:
      // libm is < 1 ulp, vector polynomial versions (oneDNN's jit eltwise, xsimd) a few ulp;
      // exp(-x) for |x| up to 8 turns the half-ulp rounding of x into ~4 eps relative.
      // Measured <= 0.04.
      return {8 * kEps, 8 * kEps};
    case OpKind::gelu:
    case OpKind::silu:
      // As sigmoid/tanh, times x (|x| <= 8); gelu's 1 + erf(x/sqrt 2) cancels for x < 0, which
      // leaves ~2 eps absolute on values ~1e-3 (x ~ -3). Measured <= 0.15.
      return {16 * kEps, 16 * kEps};
    case OpKind::maxpool2d:
      // A max selects one input exactly: no rounding at all.
      return {0, 0};
    case OpKind::avgpool2d: {
      // L = window (kh*kw). Sum of L values in [-1, 1] then one division (or a reciprocal
      // multiply): M ~ 1 at most. Measured 0 (oneDNN sums in the same order).
      const auto& p = d.p<Pool2dParams>();
      return dot_tolerance(static_cast<double>(p.kernel_h * p.kernel_w), 1, 4);
    }
    case OpKind::global_avgpool: {
      // L = H*W; as avgpool, with values up to ~2 (the closed-form ramps). Measured <= 0.06
      // (the closed-form ramps, exact in double).
      const Shape& x = in(0);
      return dot_tolerance(dim(x, 2) * dim(x, 3), 2, 2);
    }
    case OpKind::softmax: {
      // L = length of the softmax axis. p_i = exp(z_i - max) / sum: the argument z = scale*x +
      // mask spans A = 2|scale| + 2, and exp turns its rounding into ~A*eps relative; the sum
      // adds ~eps*sqrt(L). Outputs are ~1/L, so atol is rtol/L. Measured <= 0.1.
      const auto& p = d.p<SoftmaxParams>();
      const Shape& x = in(0);
      const int axis = p.axis < 0 ? p.axis + x.rank : p.axis;
      const double L = dim(x, axis);
      const double A = 2 * std::fabs(p.scale) + 2;
      const double r = 2 * kEps * (std::sqrt(L) + A);
      return {r / L, r};
    }
    case OpKind::layernorm:
    case OpKind::rmsnorm: {
      // L = normalized size (dims [axis, rank)). Mean and mean-square carry ~eps*sqrt(L)
      // relative error, and y = (x - mean) * rstd * scale + bias is O(3) (|scale| <= 1.5,
      // |x - mean| / std <= ~1.7 for uniform inputs, bias <= 1; the residual doubles x).
      // Measured <= 0.12 (layernorm), 0.05 (rmsnorm).
      const auto& p = d.p<NormParams>();
      const Shape& x = in(0);
      const int axis = p.axis < 0 ? p.axis + x.rank : p.axis;
      double L = 1;
      for (int i = axis; i < x.rank; ++i) L *= dim(x, i);
      return dot_tolerance(L, 4, 4);
    }
    case OpKind::attention: {
      // Two reductions: scores over D (|q.k| * scale = O(1)), then the softmax-weighted sum
      // of Skv rows of V (|v| <= 1, so the output is a convex combination, |o| <= 1).
      // Error ~ eps*(sqrt(D) + sqrt(Skv)) plus the exp argument span (~2 + mask 2).
      // Measured <= 0.025.
      const Shape& q = in(0);
      const Shape& k = in(1);
      const double D = dim(q, 3), Skv = dim(k, 2);
      const double r = 4 * kEps * (std::sqrt(D) + std::sqrt(Skv) + 4);
      return {r, r};
    }
    case OpKind::inverted_residual: {
      // Three convolutions (expand L = Cin, depthwise L = 9, project L = Ce), each followed
      // by a batchnorm (gain <= 2.2, see kBnGain) and clipped by relu6 in between. Weights are
      // scaled by sqrt(3/fan_in), so every stage's output is O(1): M = 4. Measured <= 0.06.
      const auto& p = d.p<InvertedResidualParams>();
      const Shape& x = in(0);
      const double cin = dim(x, 1);
      const double ce = dim(in(p.has_expand ? 6 : 1), 0);
      const double L = (p.has_expand ? cin : 0) + 9 + ce;
      return dot_tolerance(L, 4, 8);
    }
    case OpKind::eltwise_chain: {
      // One rounding per step (a few ulp for transcendental steps); linear(alpha, beta) and
      // div steps scale the value and its error by |alpha| + |beta| / up to 2 (divisors
      // >= 0.5); binary add/sub/mul with operands in [-1, 1] at most double the magnitude.
      // Measured <= 0.05.
      const auto& p = d.p<ChainParams>();
      double gain = 1, steps = 1;
      for (const ChainStep& s : p.steps) {
        steps += 1;
        if (s.kind == ChainStep::Kind::unary && s.act.kind == ActKind::linear)
          gain *= std::max(1.0, static_cast<double>(std::fabs(s.act.alpha)) + std::fabs(s.act.beta));
        if (s.kind == ChainStep::Kind::binary) gain *= 2;
      }
      return {4 * kEps * steps * gain, 4 * kEps * steps};
    }
  }
  return {16 * kEps, 16 * kEps};
}

}  // namespace opfuse::check

namespace opfuse::check {

OutputCheck compare_output(const TensorData& out, const TensorData& ref, const Tolerance& tol) {
  OutputCheck c;
  c.name = out.name;
  if (out.type != ref.type || out.dims != ref.dims) {
    c.reason = fmt::format("is {} [{}], the reference {} [{}]", element_type_name(out.type), fmt::join(out.dims, "x"),
                           element_type_name(ref.type), fmt::join(ref.dims, "x"));
    return c;
  }
  if (out.type != ElementType::f32) {
    c.ok = out.type == ElementType::i64 ? out.i64 == ref.i64 : out.boolean == ref.boolean;
    if (!c.ok) c.reason = "values differ";
    return c;
  }
  if (out.f32.size() != ref.f32.size()) {
    c.reason = fmt::format("has {} values, the reference {}", out.f32.size(), ref.f32.size());
    return c;
  }
  if (out.f32.empty()) {
    c.ok = true;
    return c;
  }
  const CompareResult r = compare(out.f32, ref.f32, tol);
  for (std::size_t i = 0; i < out.f32.size(); ++i) {
    const double e = std::fabs(static_cast<double>(out.f32[i]) - ref.f32[i]);
    if (std::isfinite(e)) c.max_abs = std::max(c.max_abs, e);
    if (std::isfinite(e)) c.max_norm = std::max(c.max_norm, e / (tol.atol + tol.rtol * std::fabs(ref.f32[i])));
  }
  c.ok = r.ok || (r.mismatches == 0 && r.reason == "degenerate: reference is all zero");
  if (!c.ok) {
    c.reason = r.reason;
    if (r.worst.index >= 0)
      c.reason += fmt::format(" (worst at {}: {} vs {})", r.worst.index, r.worst.out, r.worst.ref);
  }
  return c;
}

}  // namespace opfuse::check
