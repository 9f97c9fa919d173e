// src/check/closed_form.cpp - cases whose expected output follows from a formula.
//
// The naive stage is checked against oneDNN where a peer covers the case, and against these
// where the answer can be written down: inputs are built so that the op collapses to
// something derivable by hand (rows of +-a have rms |a|; equal keys make attention a mean of
// V rows; a ramp averages to its midpoint; ...). Every expected value is computed here, in
// double, by that formula - never by calling code under test.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "check/check.hpp"

namespace opfuse::check {

namespace {

TensorDesc td(Shape s, Layout l = Layout::nchw) { return {s, l}; }

// Fixed (seed-independent) data for a closed-form case.
std::vector<float> random_values(std::string_view what, std::size_t n, float lo = -1.f, float hi = 1.f) {
  Rng rng(hash_name(what));
  std::vector<float> v(n);
  for (float& x : v) x = rng.uniform(lo, hi);
  return v;
}

std::vector<float> to_float(const std::vector<double>& v) { return {v.begin(), v.end()}; }

Case make(OpDesc d, std::string tag, std::string formula, std::vector<std::vector<float>> inputs,
          std::vector<std::vector<double>> expected) {
  Case c;
  c.desc = std::move(d);
  c.tag = "+closed_" + tag;
  c.formula = std::move(formula);
  c.inputs = std::move(inputs);
  for (auto& e : expected) c.expected.push_back(to_float(e));
  return c;
}

// ---- rmsnorm: rows of +-a have rms |a| ------------------------------------------------------------

double sign_pattern(std::size_t r, std::size_t j) { return (j * 7 + r * 3) % 5 < 2 ? -1.0 : 1.0; }

void rmsnorm_cases(std::vector<Case>& out) {
  constexpr double eps = 1e-5;
  {
    // x (4, 16), row r all +-a_r: y = x / sqrt(a_r^2 + eps) * scale.
    const std::size_t R = 4, Lr = 16;
    const double a[R] = {0.5, 1, 2, 3};
    std::vector<float> x(R * Lr), s(Lr);
    std::vector<double> y(R * Lr);
    for (std::size_t j = 0; j < Lr; ++j) s[j] = 0.5f + static_cast<float>(j) / 16.f;
    for (std::size_t r = 0; r < R; ++r)
      for (std::size_t j = 0; j < Lr; ++j) {
        x[r * Lr + j] = static_cast<float>(sign_pattern(r, j) * a[r]);
        y[r * Lr + j] = sign_pattern(r, j) * a[r] / std::sqrt(a[r] * a[r] + eps) * s[j];
      }
    NormParams p = std::get<NormParams>(default_params(OpKind::rmsnorm));
    out.push_back(make(OpDesc{OpKind::rmsnorm, p, {td({4, 16}), td({16})}}, "pm_a",
                       "rows of +-a: rms = |a|, y = +-a / sqrt(a^2 + eps) * scale", {x, s}, {y}));
  }
  {
    // Residual + write_sum: x = +-a - r so that sum = +-a exactly (dyadic values).
    const std::size_t R = 3, Lr = 20;
    const double a[R] = {0.75, 1.5, 0.25};
    std::vector<float> x(R * Lr), res(R * Lr), s(Lr);
    std::vector<double> y(R * Lr), sum(R * Lr);
    for (std::size_t j = 0; j < Lr; ++j) s[j] = 1.25f - static_cast<float>(j % 4) * 0.25f;
    for (std::size_t r = 0; r < R; ++r)
      for (std::size_t j = 0; j < Lr; ++j) {
        const double t = sign_pattern(r, j) * a[r];
        const double rv = 0.25 * static_cast<double>(static_cast<int>(j % 5) - 2);
        res[r * Lr + j] = static_cast<float>(rv);
        x[r * Lr + j] = static_cast<float>(t - rv);
        sum[r * Lr + j] = t;
        y[r * Lr + j] = t / std::sqrt(a[r] * a[r] + eps) * s[j];
      }
    NormParams p = std::get<NormParams>(default_params(OpKind::rmsnorm));
    p.has_residual = p.write_sum = true;
    out.push_back(make(OpDesc{OpKind::rmsnorm, p, {td({3, 20}), td({20}), td({3, 20})}}, "pm_a",
                       "x + residual = rows of +-a: sum = +-a, y = +-a / sqrt(a^2 + eps) * scale", {x, s, res},
                       {y, sum}));
  }
  {
    // axis 1 of (2, 3, 5): each sample's 15 values are +-a_n.
    const double a[2] = {1.5, 0.25};
    std::vector<float> x(30), s(15);
    std::vector<double> y(30);
    for (std::size_t j = 0; j < 15; ++j) s[j] = static_cast<float>(j % 3) * 0.5f - 0.75f;
    for (std::size_t n = 0; n < 2; ++n)
      for (std::size_t j = 0; j < 15; ++j) {
        x[n * 15 + j] = static_cast<float>(sign_pattern(n, j) * a[n]);
        y[n * 15 + j] = sign_pattern(n, j) * a[n] / std::sqrt(a[n] * a[n] + eps) * s[j];
      }
    NormParams p = std::get<NormParams>(default_params(OpKind::rmsnorm));
    p.axis = 1;
    out.push_back(make(OpDesc{OpKind::rmsnorm, p, {td({2, 3, 5}), td({3, 5})}}, "pm_a",
                       "samples of +-a: y = +-a / sqrt(a^2 + eps) * scale", {x, s}, {y}));
  }
  {
    // Rows of length 1: rms = |x|.
    std::vector<float> x = {0.5f, -2.f, 0.001f, -0.75f, 3.f}, s = {1.5f};
    std::vector<double> y(5);
    for (std::size_t i = 0; i < 5; ++i) y[i] = x[i] / std::sqrt(double(x[i]) * x[i] + eps) * s[0];
    NormParams p = std::get<NormParams>(default_params(OpKind::rmsnorm));
    out.push_back(make(OpDesc{OpKind::rmsnorm, p, {td({5, 1}), td({1})}}, "single",
                       "rows of one element: y = x / sqrt(x^2 + eps) * scale", {x, s}, {y}));
  }
}

// ---- layernorm: affine rows have mean a + b(L-1)/2 and variance b^2 (L^2-1)/12 -------------------

void layernorm_cases(std::vector<Case>& out) {
  constexpr double eps = 1e-5;
  const auto affine = [&](std::size_t R, std::size_t Lr, const double* a, const double* b, const std::vector<float>& s,
                          const std::vector<float>* bias, std::vector<float>& x, std::vector<double>& y) {
    x.resize(R * Lr);
    y.resize(R * Lr);
    for (std::size_t r = 0; r < R; ++r) {
      const double n = static_cast<double>(Lr);
      const double mean = a[r] + b[r] * (n - 1) / 2, var = b[r] * b[r] * (n * n - 1) / 12;
      for (std::size_t j = 0; j < Lr; ++j) {
        const double v = a[r] + b[r] * static_cast<double>(j);
        x[r * Lr + j] = static_cast<float>(v);
        y[r * Lr + j] = (v - mean) / std::sqrt(var + eps) * s[j] + (bias ? (*bias)[j] : 0.0);
      }
    }
  };
  {
    const double a[3] = {0.5, -1, 2}, b[3] = {0.125, -0.25, 0.0625};
    const std::vector<float> s = random_values("layernorm/affine/scale", 16, 0.5f, 1.5f);
    const std::vector<float> bias = random_values("layernorm/affine/bias", 16);
    std::vector<float> x;
    std::vector<double> y;
    affine(3, 16, a, b, s, &bias, x, y);
    out.push_back(make(OpDesc{OpKind::layernorm, NormParams{}, {td({3, 16}), td({16}), td({16})}}, "affine",
                       "rows a + b*j: mean a + b(L-1)/2, var b^2(L^2-1)/12", {x, s, bias}, {y}));
  }
  {
    // Constant rows: x - mean = 0, so y = bias.
    const double c[4] = {0.75, -1.5, 3, 0};
    const std::vector<float> s = random_values("layernorm/const/scale", 13, 0.5f, 1.5f);
    const std::vector<float> bias = random_values("layernorm/const/bias", 13);
    std::vector<float> x(4 * 13);
    std::vector<double> y(4 * 13);
    for (std::size_t r = 0; r < 4; ++r)
      for (std::size_t j = 0; j < 13; ++j) x[r * 13 + j] = static_cast<float>(c[r]), y[r * 13 + j] = bias[j];
    out.push_back(make(OpDesc{OpKind::layernorm, NormParams{}, {td({4, 13}), td({13}), td({13})}}, "const",
                       "constant rows: y = bias", {x, s, bias}, {y}));
  }
  {
    // x + residual is affine; write_sum returns it.
    const double a[2] = {-0.5, 1}, b[2] = {0.0625, 0.03125};
    const std::vector<float> s = random_values("layernorm/affine_sum/scale", 33, 0.5f, 1.5f);
    const std::vector<float> bias = random_values("layernorm/affine_sum/bias", 33);
    std::vector<float> t;
    std::vector<double> y;
    affine(2, 33, a, b, s, &bias, t, y);
    std::vector<float> res(t.size()), x(t.size());
    std::vector<double> sum(t.size());
    for (std::size_t i = 0; i < t.size(); ++i) {
      res[i] = 0.25f * static_cast<float>(static_cast<int>(i % 7) - 3);
      x[i] = t[i] - res[i];  // exact: dyadic values of similar size
      sum[i] = t[i];
    }
    NormParams p;
    p.has_residual = p.write_sum = true;
    out.push_back(make(OpDesc{OpKind::layernorm, p, {td({2, 33}), td({33}), td({33}), td({2, 33})}}, "affine",
                       "x + residual = a + b*j: sum and normalized ramp", {x, s, bias, res}, {y, sum}));
  }
  {
    // axis 1 of (2, 3, 3), no bias: each sample is a ramp over its 9 values.
    const double a[2] = {0.25, -2}, b[2] = {0.5, 0.125};
    const std::vector<float> s = random_values("layernorm/affine_axis/scale", 9, 0.5f, 1.5f);
    std::vector<float> x;
    std::vector<double> y;
    affine(2, 9, a, b, s, nullptr, x, y);
    NormParams p;
    p.axis = 1;
    p.has_bias = false;
    out.push_back(make(OpDesc{OpKind::layernorm, p, {td({2, 3, 3}), td({3, 3})}}, "affine", "samples a + b*j, no bias",
                       {x, s}, {y}));
  }
}

// ---- softmax ------------------------------------------------------------------------------

void softmax_cases(std::vector<Case>& out) {
  {
    // Uniform rows: every probability is 1/L, whatever the row's value and the scale.
    std::vector<float> x(3 * 13);
    for (std::size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i / 13) * 1.5f - 2.f;
    SoftmaxParams p;
    p.scale = 2.f;
    out.push_back(make(OpDesc{OpKind::softmax, p, {td({3, 13})}}, "uniform", "uniform rows: 1/L", {x},
                       {std::vector<double>(x.size(), 1.0 / 13)}));
  }
  {
    // Along axis 0 of (5, 3).
    std::vector<float> x(15);
    for (std::size_t i = 0; i < 15; ++i) x[i] = static_cast<float>(i % 3) - 0.5f;
    SoftmaxParams p;
    p.axis = 0;
    out.push_back(make(OpDesc{OpKind::softmax, p, {td({5, 3})}}, "uniform", "uniform columns: 1/5", {x},
                       {std::vector<double>(15, 0.2)}));
  }
  for (float scale : {1.f, 0.5f}) {
    // scale * x_j = log(j + 1): p_j = (j + 1) / sum(1..L).
    const std::size_t Lr = 10;
    std::vector<float> x(2 * Lr);
    std::vector<double> y(2 * Lr);
    for (std::size_t r = 0; r < 2; ++r)
      for (std::size_t j = 0; j < Lr; ++j) {
        x[r * Lr + j] = static_cast<float>(std::log(static_cast<double>(j + 1)) / scale);
        y[r * Lr + j] = static_cast<double>(j + 1) / 55.0;
      }
    SoftmaxParams p;
    p.scale = scale;
    out.push_back(
        make(OpDesc{OpKind::softmax, p, {td({2, 10})}}, "log_ramp", "scale*x = log(j+1): p = (j+1)/55", {x}, {y}));
  }
  {
    // x = 0 with a mask m: p = exp(m) / sum exp(m).
    const std::size_t Lr = 7;
    std::vector<float> x(2 * Lr, 0.f), m(Lr);
    double z = 0;
    for (std::size_t j = 0; j < Lr; ++j) m[j] = -0.5f * static_cast<float>(j % 3), z += std::exp(double(m[j]));
    std::vector<double> y(2 * Lr);
    for (std::size_t i = 0; i < y.size(); ++i) y[i] = std::exp(double(m[i % Lr])) / z;
    SoftmaxParams p;
    p.has_mask = true;
    out.push_back(make(OpDesc{OpKind::softmax, p, {td({2, 7}), td({7})}}, "mask_only",
                       "x = 0: p = exp(mask) / sum exp(mask)", {x, m}, {y}));
  }
}

// ---- gemm ------------------------------------------------------------------------------------

std::vector<float> identity(std::size_t n) {
  std::vector<float> v(n * n, 0.f);
  for (std::size_t i = 0; i < n; ++i) v[i * n + i] = 1.f;
  return v;
}

void gemm_cases(std::vector<Case>& out) {
  {
    const std::vector<float> b = random_values("gemm/identity_a/b", 16 * 13);
    out.push_back(make(OpDesc{OpKind::gemm, GemmParams{}, {td({16, 16}), td({16, 13})}}, "identity_a", "I * B = B",
                       {identity(16), b}, {{b.begin(), b.end()}}));
  }
  {
    GemmParams p;
    p.trans_b = true;
    const std::vector<float> a = random_values("gemm/identity_b/a", 7 * 9);
    out.push_back(make(OpDesc{OpKind::gemm, p, {td({7, 9}), td({9, 9})}}, "identity_b", "A * I^T = A", {a, identity(9)},
                       {{a.begin(), a.end()}}));
  }
  {
    GemmParams p;
    p.alpha = 2.f;
    p.beta = 0.5f;
    const std::vector<float> b = random_values("gemm/alpha_beta/b", 8 * 5),
                             y0 = random_values("gemm/alpha_beta/y0", 40);
    std::vector<double> y(40);
    for (std::size_t i = 0; i < 40; ++i) y[i] = 2.0 * b[i] + 0.5 * y0[i];
    Case c = make(OpDesc{OpKind::gemm, p, {td({8, 8}), td({8, 5})}}, "identity_a", "2 * I * B + 0.5 * y0",
                  {identity(8), b}, {y});
    c.initial = {y0};
    out.push_back(std::move(c));
  }
  {
    GemmParams p;
    p.has_bias = true;
    p.post_ops = {PostOp::activation(Activation::relu())};
    const std::vector<float> b = random_values("gemm/bias_relu/b", 6 * 11),
                             bias = random_values("gemm/bias_relu/c", 11);
    std::vector<double> y(66);
    for (std::size_t i = 0; i < 66; ++i) y[i] = std::max(0.0, double(b[i]) + bias[i % 11]);
    out.push_back(make(OpDesc{OpKind::gemm, p, {td({6, 6}), td({6, 11}), td({11})}}, "identity_a", "relu(I * B + bias)",
                       {identity(6), b, bias}, {y}));
  }
  {
    GemmParams p;
    p.alpha = -1.5f;
    const std::vector<float> a = random_values("gemm/outer/a", 9), b = random_values("gemm/outer/b", 12);
    std::vector<double> y(9 * 12);
    for (std::size_t i = 0; i < 9; ++i)
      for (std::size_t j = 0; j < 12; ++j) y[i * 12 + j] = -1.5 * a[i] * b[j];
    out.push_back(
        make(OpDesc{OpKind::gemm, p, {td({9, 1}), td({1, 12})}}, "outer", "K = 1: y = alpha a_i b_j", {a, b}, {y}));
  }
}

// ---- attention: equal keys give equal scores, so the output is a mean of V rows ------------------

struct AttnSpec {
  std::int64_t b, h, sq, skv, d, dv;
  bool causal = false;
  bool mask = false;
};

void attention_case(std::vector<Case>& out, const AttnSpec& s, const std::string& tag, const std::string& formula) {
  const std::string key = fmt::format("attention/{}/{}_{}_{}_{}", tag, s.b, s.h, s.sq, s.skv);
  const std::size_t BH = static_cast<std::size_t>(s.b * s.h);
  const std::size_t sq = static_cast<std::size_t>(s.sq), skv = static_cast<std::size_t>(s.skv);
  const std::size_t d = static_cast<std::size_t>(s.d), dv = static_cast<std::size_t>(s.dv);
  std::vector<float> q = random_values(key + "/q", BH * sq * d);
  std::vector<float> v = random_values(key + "/v", BH * skv * dv);
  const std::vector<float> k1 = random_values(key + "/k", BH * d);
  std::vector<float> k(BH * skv * d);
  for (std::size_t bh = 0; bh < BH; ++bh)
    for (std::size_t j = 0; j < skv; ++j)
      for (std::size_t c = 0; c < d; ++c) k[(bh * skv + j) * d + c] = k1[bh * d + c];  // every key the same
  std::vector<float> m;
  if (s.mask) m = random_values(key + "/mask", sq * skv, -2.f, 0.f);
  std::vector<double> o(BH * sq * dv, 0.0);
  for (std::size_t bh = 0; bh < BH; ++bh)
    for (std::size_t i = 0; i < sq; ++i) {
      // Visible keys: all, or j <= i + (Skv - Sq) when causal. Equal scores leave only the mask.
      const std::int64_t last = s.causal ? static_cast<std::int64_t>(i) + s.skv - s.sq : s.skv - 1;
      double z = 0;
      std::vector<double> w(skv, 0.0);
      for (std::size_t j = 0; j < skv && static_cast<std::int64_t>(j) <= last; ++j)
        z += (w[j] = s.mask ? std::exp(double(m[i * skv + j])) : 1.0);
      if (z == 0) continue;  // no visible key: the output row is 0
      for (std::size_t j = 0; j < skv; ++j)
        for (std::size_t c = 0; c < dv; ++c) o[(bh * sq + i) * dv + c] += w[j] / z * v[(bh * skv + j) * dv + c];
    }
  AttentionParams p;
  p.causal = s.causal;
  p.has_mask = s.mask;
  OpDesc desc{
      OpKind::attention, p, {td({s.b, s.h, s.sq, s.d}), td({s.b, s.h, s.skv, s.d}), td({s.b, s.h, s.skv, s.dv})}};
  std::vector<std::vector<float>> in = {q, k, v};
  if (s.mask) {
    desc.inputs.push_back(td({s.sq, s.skv}));
    in.push_back(m);
  }
  out.push_back(make(std::move(desc), tag, formula, std::move(in), {o}));
}

void attention_cases(std::vector<Case>& out) {
  attention_case(out, {1, 2, 5, 7, 16, 8}, "equal_keys", "equal keys: o = mean of the V rows");
  attention_case(out, {2, 1, 4, 1, 8, 16}, "one_key", "one key: o = v[0]");
  attention_case(out, {1, 2, 6, 6, 8, 8, true}, "equal_keys", "causal, equal keys: o_i = mean(v_0..v_i)");
  attention_case(out, {1, 2, 3, 8, 8, 8, true}, "equal_keys", "causal suffix: o_i = mean(v_0..v_(i+5))");
  attention_case(out, {1, 1, 5, 3, 4, 4, true}, "equal_keys",
                 "causal, Sq > Skv: rows 0-1 see no key (0), then prefix means");
  attention_case(out, {1, 2, 4, 6, 8, 8, false, true}, "equal_keys", "equal keys + mask: o = softmax(mask) . V");
}

// ---- eltwise_chain -------------------------------------------------------------------------------

void chain_cases(std::vector<Case>& out) {
  using B = BinaryKind;
  {
    // (3,4,5): linear(2,-1), relu, + b (4,1,1), * s (1).
    const std::vector<float> x = random_values("chain/1/x", 60), b = random_values("chain/1/b", 4);
    const std::vector<float> s = {-1.25f};
    std::vector<double> y(60);
    for (std::size_t i = 0; i < 60; ++i) y[i] = (std::max(2.0 * x[i] - 1.0, 0.0) + b[(i / 5) % 4]) * s[0];
    ChainParams p;
    p.steps = {ChainStep::unary_step(Activation::linear(2.f, -1.f)), ChainStep::unary_step(Activation::relu()),
               ChainStep::binary_step(B::add), ChainStep::binary_step(B::mul)};
    out.push_back(make(OpDesc{OpKind::eltwise_chain, p, {td({3, 4, 5}), td({4, 1}), td({1})}}, "linear_relu",
                       "(max(2x - 1, 0) + b_c) * s", {x, b, s}, {y}));
  }
  {
    // (17): clip(-0.5, 0.5), linear(-1, 0), - o (17).
    const std::vector<float> x = random_values("chain/2/x", 17), o = random_values("chain/2/o", 17);
    std::vector<double> y(17);
    for (std::size_t i = 0; i < 17; ++i) y[i] = -std::clamp(double(x[i]), -0.5, 0.5) - o[i];
    ChainParams p;
    p.steps = {ChainStep::unary_step(Activation::clip(-0.5f, 0.5f)),
               ChainStep::unary_step(Activation::linear(-1.f, 0.f)), ChainStep::binary_step(B::sub)};
    out.push_back(make(OpDesc{OpKind::eltwise_chain, p, {td({17}), td({17})}}, "clip_neg", "-clamp(x, -0.5, 0.5) - o",
                       {x, o}, {y}));
  }
  {
    // (2,3,4): / o (4), leaky_relu(0.5).
    const std::vector<float> x = random_values("chain/3/x", 24);
    const std::vector<float> o = {0.5f, -2.f, 1.25f, -0.75f};
    std::vector<double> y(24);
    for (std::size_t i = 0; i < 24; ++i) {
      const double q = double(x[i]) / o[i % 4];
      y[i] = q < 0 ? 0.5 * q : q;
    }
    ChainParams p;
    p.steps = {ChainStep::binary_step(B::div), ChainStep::unary_step(Activation::leaky_relu(0.5f))};
    out.push_back(make(OpDesc{OpKind::eltwise_chain, p, {td({2, 3, 4}), td({4})}}, "div_leaky",
                       "q = x / o; q < 0 ? q/2 : q", {x, o}, {y}));
  }
}

// ---- inverted_residual on a 1x1 input: the depthwise 3x3 sees only its centre tap ----------------

struct IrSpec {
  std::int64_t n, cin, ce, cout, stride;
  bool residual, expand, identity_bn;
};

void inverted_residual_case(std::vector<Case>& out, const IrSpec& s) {
  const std::string key = fmt::format("inverted_residual/{}_{}_{}_{}", s.n, s.cin, s.ce, s.cout);
  constexpr double eps = 1e-5;
  const std::size_t N = static_cast<std::size_t>(s.n), Cin = static_cast<std::size_t>(s.cin);
  const std::size_t Ce = static_cast<std::size_t>(s.ce), Cout = static_cast<std::size_t>(s.cout);
  // Batchnorm operands: identity (scale 1, bias 0, mean 0, var 1) or drawn.
  const auto bn_params = [&](const std::string& name, std::size_t c) {
    std::vector<std::vector<float>> p(4);
    if (s.identity_bn) {
      p = {std::vector<float>(c, 1.f), std::vector<float>(c, 0.f), std::vector<float>(c, 0.f),
           std::vector<float>(c, 1.f)};
    } else {
      p = {random_values(key + name + "s", c, 0.5f, 1.5f), random_values(key + name + "b", c),
           random_values(key + name + "m", c), random_values(key + name + "v", c, 0.5f, 2.f)};
    }
    return p;
  };
  const auto bn = [&](const std::vector<std::vector<float>>& p, std::size_t c, double v) {
    return p[0][c] * (v - p[2][c]) / std::sqrt(p[3][c] + eps) + p[1][c];
  };
  const auto relu6 = [](double v) { return std::clamp(v, 0.0, 6.0); };
  const std::vector<float> x = random_values(key + "/x", N * Cin);
  std::vector<std::vector<float>> in = {x};
  std::vector<float> we;
  std::vector<std::vector<float>> bn1;
  if (s.expand) {
    we = random_values(key + "/we", Ce * Cin, -1.5f, 1.5f);
    bn1 = bn_params("/bn1", Ce);
    in.push_back(we);
    for (auto& v : bn1) in.push_back(v);
  }
  const std::vector<float> wdw = random_values(key + "/wdw", Ce * 9, -1.5f, 1.5f);
  const auto bn2 = bn_params("/bn2", Ce);
  in.push_back(wdw);
  for (auto& v : bn2) in.push_back(v);
  const std::vector<float> wp = random_values(key + "/wp", Cout * Ce, -1.f, 1.f);
  const auto bn3 = bn_params("/bn3", Cout);
  in.push_back(wp);
  for (auto& v : bn3) in.push_back(v);

  std::vector<double> y(N * Cout);
  for (std::size_t n = 0; n < N; ++n) {
    std::vector<double> d(Ce);
    for (std::size_t e = 0; e < Ce; ++e) {
      double h = x[n * Cin + e % Cin];  // without expansion Ce == Cin and h = x
      if (s.expand) {
        h = 0;
        for (std::size_t c = 0; c < Cin; ++c) h += double(we[e * Cin + c]) * x[n * Cin + c];
        h = relu6(bn(bn1, e, h));
      }
      d[e] = relu6(bn(bn2, e, wdw[e * 9 + 4] * h));  // centre tap (1,1) of the 3x3 filter
    }
    for (std::size_t o = 0; o < Cout; ++o) {
      double acc = 0;
      for (std::size_t e = 0; e < Ce; ++e) acc += double(wp[o * Ce + e]) * d[e];
      y[n * Cout + o] = bn(bn3, o, acc) + (s.residual ? double(x[n * Cin + o]) : 0.0);
    }
  }
  InvertedResidualParams p;
  p.has_expand = s.expand;
  p.stride = s.stride;
  p.residual = s.residual;
  OpDesc desc = inverted_residual_desc(td({s.n, s.cin, 1, 1}), s.ce, s.cout, p);
  out.push_back(make(std::move(desc), s.identity_bn ? "centre_tap_idbn" : "centre_tap",
                     "1x1 input: y = bn3(Wp relu6(bn2(wdw[1,1] relu6(bn1(We x))))) (+ x)", std::move(in), {y}));
}

void inverted_residual_cases(std::vector<Case>& out) {
  inverted_residual_case(out, {2, 4, 12, 4, 1, true, true, true});
  inverted_residual_case(out, {1, 8, 8, 5, 2, false, false, true});
  inverted_residual_case(out, {3, 3, 7, 6, 1, false, true, false});
}

// ---- global_avgpool: constants and ramps ---------------------------------------------------

void global_avgpool_cases(std::vector<Case>& out) {
  {
    const std::vector<float> c = random_values("global_avgpool/const", 6);
    std::vector<float> x(6 * 25);
    for (std::size_t i = 0; i < x.size(); ++i) x[i] = c[i / 25];
    out.push_back(make(OpDesc{OpKind::global_avgpool, GlobalPoolParams{}, {td({2, 3, 5, 5})}}, "const",
                       "constant planes: y = c", {x}, {{c.begin(), c.end()}}));
  }
  for (Layout l : {Layout::nchw, Layout::nhwc}) {
    // x[n,c,h,w] = a + b*(h*W + w): the mean is a + b*(H*W - 1)/2.
    const std::int64_t N = l == Layout::nchw ? 1 : 2, C = l == Layout::nchw ? 4 : 17, H = 7,
                       W = l == Layout::nchw ? 9 : 5;
    const std::size_t planes = static_cast<std::size_t>(N * C), hw = static_cast<std::size_t>(H * W);
    std::vector<float> a = random_values(fmt::format("global_avgpool/ramp{}/a", C), planes);
    std::vector<float> b = random_values(fmt::format("global_avgpool/ramp{}/b", C), planes);
    // Dyadic a (2^-8 steps) and b (2^-10 steps): every ramp value is exact in fp32.
    for (float& v : a) v = std::round(v * 256.f) / 256.f;
    for (float& v : b) v = std::round(v * 64.f) / 1024.f;
    std::vector<float> x(planes * hw);
    std::vector<double> y(planes);
    for (std::size_t p = 0; p < planes; ++p) {
      for (std::size_t i = 0; i < hw; ++i) x[p * hw + i] = a[p] + b[p] * static_cast<float>(i);
      y[p] = double(a[p]) + double(b[p]) * (static_cast<double>(hw) - 1) / 2;
    }
    out.push_back(make(OpDesc{OpKind::global_avgpool, GlobalPoolParams{}, {td({N, C, H, W}, l)}}, "ramp",
                       "ramps a + b*(h*W + w): y = a + b*(H*W - 1)/2", {x}, {y}));
  }
}

}  // namespace

std::vector<Case> make_closed_form_cases(OpKind op) {
  std::vector<Case> out;
  switch (op) {
    case OpKind::rmsnorm: rmsnorm_cases(out); break;
    case OpKind::layernorm: layernorm_cases(out); break;
    case OpKind::softmax: softmax_cases(out); break;
    case OpKind::gemm: gemm_cases(out); break;
    case OpKind::attention: attention_cases(out); break;
    case OpKind::eltwise_chain: chain_cases(out); break;
    case OpKind::inverted_residual: inverted_residual_cases(out); break;
    case OpKind::global_avgpool: global_avgpool_cases(out); break;
    default: break;
  }
  return out;
}

}  // namespace opfuse::check
