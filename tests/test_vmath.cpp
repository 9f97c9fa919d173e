// tests/test_vmath.cpp - accuracy of the vector exp, tanh, erf and sigmoid (simd/vmath.hpp).
//
// The functions are reached through the per-ISA entry points simd::isa_<isa>::vmath_eval
// (simd/eltwise.hpp) and compared with a double-precision reference (std::exp((double)x), ...).
// Error model: for exact results |ref| >= FLT_MIN, the error in ulp of ref (ulp = 2^(e-23) for
// ref in [2^e, 2^(e+1))); for smaller results (denormals, zero) the absolute error. NaN must
// meet NaN, and a result that overflows fp32 (or is +-inf) must match exactly.
//
//   VmathAccuracy.*       always on: ~1e6 inputs per function and ISA (random bit patterns,
//                         uniform ranges around the interesting regions, special values) must
//                         stay within the documented bounds (simd::kVmathMaxUlp).
//   VmathExhaustive.*     every finite fp32 input (2^32 - 2^24 bit patterns) for each function
//                         on the best ISA (OPFUSE_VMATH_ISAS=avx512,avx2,... to choose); takes
//                         minutes, so it runs only with OPFUSE_LONG_TESTS=1. With
//                         OPFUSE_VMATH_REPORT=path it writes the measured table there
//                         (reports/vmath_accuracy.md is that file).
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cfloat>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "opfuse/context.hpp"
#include "opfuse/primitive.hpp"
#include "sanitized.hpp"
#include "simd/eltwise.hpp"
#include "simd/norm.hpp"

namespace opfuse {
namespace {

using simd::VmathFn;
using EvalFn = void (*)(VmathFn, const float*, float*, std::int64_t);

struct IsaEntry {
  const char* name;
  Isa isa;
  EvalFn eval;
};
const IsaEntry kIsas[] = {{"avx512", Isa::avx512, simd::isa_avx512::vmath_eval},
                          {"avx2", Isa::avx2, simd::isa_avx2::vmath_eval},
                          {"sse2", Isa::sse2, simd::isa_sse2::vmath_eval}};

struct FnEntry {
  const char* name;
  VmathFn fn;
};
const FnEntry kBounded[] = {{"exp", VmathFn::exp},
                            {"tanh", VmathFn::tanh},
                            {"erf", VmathFn::erf},
                            {"sigmoid", VmathFn::sigmoid},
                            {"gelu_erf", VmathFn::gelu_erf}};

double reference(VmathFn fn, float xf) {
  const double x = xf;
  switch (fn) {
    case VmathFn::exp: return std::exp(x);
    case VmathFn::tanh: return std::tanh(x);
    case VmathFn::erf: return std::erf(x);
    case VmathFn::sigmoid: return 1.0 / (1.0 + std::exp(-x));
    // x Phi(x) through erfc: 1 + erf(x / sqrt 2) cancels in double too for x < -8 or so.
    case VmathFn::gelu_erf: return 0.5 * x * std::erfc(-x * 0.70710678118654752);
    case VmathFn::gelu_tanh: return 0.5 * x * (1.0 + std::tanh(0.79788456080286536 * (x + 0.044715 * x * x * x)));
    case VmathFn::silu: return x / (1.0 + std::exp(-x));
  }
  return 0;
}

float bits_to_float(std::uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

// Worst errors seen over a set of inputs.
struct ErrStats {
  std::uint64_t count = 0;
  double max_ulp = 0;  // over |ref| >= FLT_MIN
  float ulp_x = 0, ulp_y = 0;
  double ulp_ref = 0;
  double max_tiny_abs = 0;  // over |ref| < FLT_MIN
  float tiny_x = 0, tiny_y = 0;
  double tiny_ref = 0;
  std::uint64_t special_bad = 0;  // NaN / overflow / inf mismatches
  float special_x = 0, special_y = 0;

  void add(float x, float y, double ref) {
    ++count;
    const float expect = static_cast<float>(ref);
    if (std::isnan(ref) || std::isinf(expect)) {
      const bool ok = std::isnan(ref) ? std::isnan(y) : y == expect;
      if (!ok && special_bad++ == 0) special_x = x, special_y = y;
      return;
    }
    const double a = std::fabs(ref);
    const double err = std::isfinite(y) ? std::fabs(static_cast<double>(y) - ref) : HUGE_VAL;
    if (a >= FLT_MIN) {
      std::uint64_t bits;
      std::memcpy(&bits, &a, sizeof bits);
      const std::uint64_t ulp_bits = ((bits >> 52) - 23) << 52;  // 2^(e - 23) for a in [2^e, 2^(e+1))
      double ulp;
      std::memcpy(&ulp, &ulp_bits, sizeof ulp);
      const double e = err / ulp;
      if (e > max_ulp) max_ulp = e, ulp_x = x, ulp_y = y, ulp_ref = ref;
    } else if (err > max_tiny_abs) {
      max_tiny_abs = err, tiny_x = x, tiny_y = y, tiny_ref = ref;
    }
  }
  void merge(const ErrStats& o) {
    count += o.count;
    if (o.max_ulp > max_ulp) max_ulp = o.max_ulp, ulp_x = o.ulp_x, ulp_y = o.ulp_y, ulp_ref = o.ulp_ref;
    if (o.max_tiny_abs > max_tiny_abs)
      max_tiny_abs = o.max_tiny_abs, tiny_x = o.tiny_x, tiny_y = o.tiny_y, tiny_ref = o.tiny_ref;
    if (o.special_bad && !special_bad) special_x = o.special_x, special_y = o.special_y;
    special_bad += o.special_bad;
  }
};

ErrStats measure(EvalFn eval, VmathFn fn, const std::vector<float>& x) {
  std::vector<float> y(x.size());
  eval(fn, x.data(), y.data(), static_cast<std::int64_t>(x.size()));
  ErrStats s;
  for (std::size_t i = 0; i < x.size(); ++i) s.add(x[i], y[i], reference(fn, x[i]));
  return s;
}

std::string describe(const ErrStats& s) {
  std::ostringstream o;
  o.precision(9);
  o << "max " << s.max_ulp << " ulp at x=" << s.ulp_x << " (got " << s.ulp_y << ", exact " << s.ulp_ref
    << "); tiny results: max abs " << s.max_tiny_abs << " at x=" << s.tiny_x << "; special mismatches "
    << s.special_bad;
  if (s.special_bad) o << " (first x=" << s.special_x << " got " << s.special_y << ")";
  return o.str();
}

// ~1e6 inputs: random finite bit patterns, uniform draws over the ranges that matter for fn,
// and the special values.
std::vector<float> sample_inputs(VmathFn fn) {
  std::mt19937_64 rng(0x5eed + static_cast<unsigned>(fn));
  std::vector<float> x;
  x.reserve(1 << 20);
  std::uniform_int_distribution<std::uint32_t> bits;
  while (x.size() < 250000) {
    const float v = bits_to_float(bits(rng));
    if (std::isfinite(v)) x.push_back(v);
  }
  auto uniform = [&](float lo, float hi, int n) {
    std::uniform_real_distribution<float> d(lo, hi);
    for (int i = 0; i < n; ++i) x.push_back(d(rng));
  };
  uniform(-1.f, 1.f, 150000);
  uniform(-10.f, 10.f, 150000);
  switch (fn) {
    case VmathFn::exp: uniform(-104.f, 89.f, 300000), uniform(-0.35f, 0.35f, 100000); break;
    case VmathFn::sigmoid: uniform(-105.f, 20.f, 300000), uniform(-90.f, -85.f, 100000); break;
    case VmathFn::tanh: uniform(-1.f, 1.f, 200000), uniform(0.55f, 0.7f, 200000); break;
    case VmathFn::erf: uniform(-4.f, 4.f, 200000), uniform(0.9f, 1.1f, 200000); break;
    case VmathFn::gelu_erf: uniform(-14.5f, 0.f, 200000), uniform(-4.f, 4.f, 200000); break;
    default: uniform(-8.f, 8.f, 400000); break;
  }
  const float inf = std::numeric_limits<float>::infinity();
  for (float v : {0.f,
                  FLT_MIN,
                  FLT_MAX,
                  inf,
                  std::numeric_limits<float>::quiet_NaN(),
                  std::numeric_limits<float>::denorm_min(),
                  1e-30f,
                  0.625f,
                  1.f,
                  3.92f,
                  4.f,
                  9.f,
                  88.7228f,
                  88.72284f,
                  88.7229f,
                  89.f,
                  87.33f,
                  100.f,
                  103.97f,
                  104.f,
                  126.f,
                  1e10f}) {
    x.push_back(v);
    x.push_back(-v);
  }
  return x;
}

bool isa_available(const IsaEntry& e) { return cpu_isa() >= e.isa; }

// The tests below run once per ISA (the index into kIsas is the parameter, the ISA's name the
// test's suffix); an ISA this CPU lacks is a skip that says so, never a silent pass.
class PerIsa : public ::testing::TestWithParam<std::size_t> {
 protected:
  void SetUp() override {
    if (!isa_available(entry()))
      GTEST_SKIP() << entry().name << " code cannot run here: this CPU runs " << isa_name(cpu_isa());
  }
  static const IsaEntry& entry() { return kIsas[GetParam()]; }
};

std::string isa_param_name(const ::testing::TestParamInfo<std::size_t>& i) { return kIsas[i.param].name; }

TEST_P(PerIsa, VmathSampledInputsWithinDocumentedBounds) {
  const IsaEntry& isa = entry();
  {
    for (const FnEntry& f : kBounded) {
      const ErrStats s = measure(isa.eval, f.fn, sample_inputs(f.fn));
      const double bound = simd::kVmathMaxUlp[static_cast<int>(f.fn)];
      SCOPED_TRACE(std::string(f.name) + "/" + isa.name + ": " + describe(s));
      EXPECT_LE(s.max_ulp, bound);
      if (std::getenv("OPFUSE_VMATH_VERBOSE")) std::printf("%s/%s: %s\n", f.name, isa.name, describe(s).c_str());
      EXPECT_LE(s.max_tiny_abs, simd::kVmathMaxTinyAbs[static_cast<int>(f.fn)]);
      EXPECT_EQ(s.special_bad, 0u);
    }
  }
}

// Exact special values, spelled out.
TEST_P(PerIsa, VmathSpecialValues) {
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<float> x = {inf, -inf, nan, 0.f, -0.f, 100.f, -200.f};
  const IsaEntry& isa = entry();
  {
    auto run = [&](VmathFn fn) {
      std::vector<float> y(x.size());
      isa.eval(fn, x.data(), y.data(), static_cast<std::int64_t>(x.size()));
      return y;
    };
    const auto e = run(VmathFn::exp), t = run(VmathFn::tanh), r = run(VmathFn::erf), s = run(VmathFn::sigmoid);
    EXPECT_EQ(e[0], inf);
    EXPECT_EQ(e[1], 0.f);
    EXPECT_TRUE(std::isnan(e[2]));
    EXPECT_EQ(e[3], 1.f);
    EXPECT_EQ(e[5], inf);  // overflow
    EXPECT_EQ(e[6], 0.f);  // underflow
    EXPECT_EQ(t[0], 1.f);
    EXPECT_EQ(t[1], -1.f);
    EXPECT_TRUE(std::isnan(t[2]));
    EXPECT_TRUE(std::signbit(t[4]) && t[4] == 0.f);  // tanh(-0) = -0
    EXPECT_EQ(r[0], 1.f);
    EXPECT_EQ(r[1], -1.f);
    EXPECT_TRUE(std::isnan(r[2]));
    EXPECT_TRUE(std::signbit(r[4]) && r[4] == 0.f);
    EXPECT_EQ(s[0], 1.f);
    EXPECT_EQ(s[1], 0.f);
    EXPECT_TRUE(std::isnan(s[2]));
    EXPECT_EQ(s[3], 0.5f);
    const auto g = run(VmathFn::gelu_erf);  // naive's 0.5 x (1 + erf(x / sqrt 2)) at the specials
    EXPECT_EQ(g[0], inf);
    EXPECT_TRUE(std::isnan(g[1]));  // -inf * 0
    EXPECT_TRUE(std::isnan(g[2]));
    EXPECT_EQ(g[3], 0.f);
    EXPECT_TRUE(std::signbit(g[4]) && g[4] == 0.f);
    EXPECT_EQ(g[5], 100.f);
    EXPECT_EQ(g[6], 0.f);  // -200 Phi(-200): below the smallest denormal
  }
}

// gelu and silu compose the functions above; they are held to the check's tolerance for the
// gelu/silu ops (16 eps absolute + 16 eps relative, src/check/compare.cpp), here against the
// exact (double) formula.
TEST_P(PerIsa, VmathCompositionsWithinCheckTolerance) {
  const double tol = 16 * 0x1p-23;
  const IsaEntry& isa = entry();
  {
    for (VmathFn fn : {VmathFn::gelu_erf, VmathFn::gelu_tanh, VmathFn::silu}) {
      std::vector<float> x = sample_inputs(fn);
      x.erase(std::remove_if(x.begin(), x.end(), [](float v) { return !(std::fabs(v) <= 1e4f); }), x.end());
      std::vector<float> y(x.size());
      isa.eval(fn, x.data(), y.data(), static_cast<std::int64_t>(x.size()));
      double worst = 0;
      float worst_x = 0;
      for (std::size_t i = 0; i < x.size(); ++i) {
        const double ref = reference(fn, x[i]);
        const double ratio = std::fabs(y[i] - ref) / (tol + tol * std::fabs(ref));
        if (!(ratio <= worst)) worst = ratio, worst_x = x[i];
      }
      EXPECT_LE(worst, 1.0) << isa.name << " fn " << static_cast<int>(fn) << " worst at x=" << worst_x;
    }
  }
}

// The base-e and base-2 exps of softmax and flash attention (vmath::exp_nonpositive,
// exp2_nonpositive through simd/norm.hpp's entry points) on their whole domain, x from -0 down to
// where the result is 0 (bits lo .. hi), plus -inf, -0 and NaN: every 61st float (every one with
// OPFUSE_LONG_TESTS=1, ~1.1e9 inputs) against std::exp / std::exp2 in double. Results below
// FLT_MIN: AVX-512 rounds them as denormals (abs error <= 2^-148: the polynomial's ~2 ulp at the
// top of the denormal range), AVX2 / SSE2 flush them to 0 (abs error < 2^-126),
// simd::kExpNonpositiveMaxTinyAbs.
using Eval = void (*)(const float*, float*, std::int64_t);
struct NonpositiveExp {
  const char* name;
  std::array<Eval, 3> eval;  // avx512, avx2, sse2
  double (*ref)(double);
  std::uint32_t hi;  // the last input tested (the most negative)
};

// k indexes kIsas (and f.eval); the caller has checked the CPU runs it.
void check_nonpositive_exp(const NonpositiveExp& f, std::size_t k) {
  const std::uint32_t step = opfuse::testing::long_tests() ? 1 : 61;
  const std::uint32_t lo = 0x80000000u;  // -0
  {
    const Eval eval = f.eval[k];
    const double tiny = kIsas[k].isa == Isa::avx512 ? 0x1p-148 : simd::kExpNonpositiveMaxTinyAbs;
    const unsigned nt = std::max(1u, std::thread::hardware_concurrency());
    std::vector<ErrStats> part(nt);
    std::vector<std::thread> pool;
    for (unsigned t = 0; t < nt; ++t)
      pool.emplace_back([&, t] {
        std::vector<float> x, y;
        const std::uint64_t span = (std::uint64_t{f.hi} - lo) / nt + 1;
        const std::uint64_t b = lo + t * span, e = std::min<std::uint64_t>(f.hi + 1, b + span);
        for (std::uint64_t c = b; c < e; c += std::uint64_t{step} << 16) {  // chunks of 65536 inputs
          x.clear();
          for (std::uint64_t u = c; u < e && u < c + (std::uint64_t{step} << 16); u += step)
            x.push_back(bits_to_float(static_cast<std::uint32_t>(u)));
          y.resize(x.size());
          eval(x.data(), y.data(), static_cast<std::int64_t>(x.size()));
          for (std::size_t i = 0; i < x.size(); ++i) part[t].add(x[i], y[i], f.ref(static_cast<double>(x[i])));
        }
      });
    for (auto& th : pool) th.join();
    ErrStats s;
    for (const ErrStats& p : part) s.merge(p);
    const float inf = std::numeric_limits<float>::infinity();
    const std::vector<float> sx = {-inf, std::numeric_limits<float>::quiet_NaN(), 0.f, -0.f, -1e30f};
    std::vector<float> sy(sx.size());
    eval(sx.data(), sy.data(), static_cast<std::int64_t>(sx.size()));
    SCOPED_TRACE(std::string(f.name) + "/" + kIsas[k].name + ": " + describe(s));
    if (std::getenv("OPFUSE_VMATH_VERBOSE")) std::printf("%s/%s: %s\n", f.name, kIsas[k].name, describe(s).c_str());
    EXPECT_GT(s.count, 1000000u);
    EXPECT_LE(s.max_ulp, simd::kExpNonpositiveMaxUlp);
    EXPECT_LE(s.max_tiny_abs, tiny);
    EXPECT_EQ(s.special_bad, 0u);
    EXPECT_EQ(sy[0], 0.f);
    EXPECT_TRUE(std::isnan(sy[1]));
    EXPECT_EQ(sy[2], 1.f);
    EXPECT_EQ(sy[3], 1.f);
    EXPECT_EQ(sy[4], 0.f);
  }
}

TEST_P(PerIsa, VmathExpNonpositive) {
  check_nonpositive_exp({"exp_nonpositive",
                         {simd::isa_avx512::exp_nonpositive_eval, simd::isa_avx2::exp_nonpositive_eval,
                          simd::isa_sse2::exp_nonpositive_eval},
                         [](double x) { return std::exp(x); },
                         0xC2D00000u},  // -104
                        GetParam());
}

TEST_P(PerIsa, VmathExp2Nonpositive) {
  check_nonpositive_exp({"exp2_nonpositive",
                         {simd::isa_avx512::exp2_nonpositive_eval, simd::isa_avx2::exp2_nonpositive_eval,
                          simd::isa_sse2::exp2_nonpositive_eval},
                         [](double x) { return std::exp2(x); },
                         0xC3160000u},  // -150
                        GetParam());
}

// ---- streaming stores ----------------------------------------------------------------------
// Outputs of >= 4 Mi floats take the non-temporal store path of simd/eltwise.cpp (an aligned
// body after a scalar head); the check's cases are too small to reach it, so it is tested
// here: every simd row against naive, on views shifted off the 64-byte grid, with 2 threads.
TEST_P(PerIsa, EltwiseStreamingLargeOutputsMatchNaive) {
  const std::int64_t n = (std::int64_t{1} << 22) + 37;
  const Shape bn_shape{1, 3, 1183, 1183};  // 4.2 Mi floats, planes of 1183^2 (odd) elements
  std::vector<OpDesc> descs;
  descs.push_back({OpKind::relu, default_params(OpKind::relu), {{Shape{n}, Layout::nchw}}});
  descs.push_back({OpKind::add, BinaryParams{}, {{Shape{n}, Layout::nchw}, {Shape{n}, Layout::nchw}}});
  OpDesc bn{OpKind::batchnorm, BatchnormParams{}, {{bn_shape, Layout::nchw}}};
  for (int i = 0; i < 4; ++i) bn.inputs.push_back({Shape{3}, Layout::nchw});
  descs.push_back(bn);
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> dist(0.5f, 1.5f);  // > 0: also a valid variance
  for (const OpDesc& d : descs) {
    // Input and output storage with one and three floats of offset.
    std::vector<std::vector<float>> in_store;
    std::vector<Tensor> in;
    for (const TensorDesc& t : d.inputs) {
      in_store.emplace_back(static_cast<std::size_t>(t.shape.numel()) + 1);
      for (float& v : in_store.back()) v = dist(rng) - (d.op == OpKind::batchnorm ? 0.f : 1.f);
      in.push_back(*Tensor::view(static_cast<const float*>(in_store.back().data() + 1), t.shape, t.layout));
    }
    std::vector<const Tensor*> ins;
    for (const Tensor& t : in) ins.push_back(&t);
    const Shape out_shape = d.inputs[0].shape;
    auto run_kernel = [&](const KernelDef& k, std::vector<float>& store) {
      store.assign(static_cast<std::size_t>(out_shape.numel()) + 3, 0.f);
      const Tensor y = *Tensor::view(store.data() + 3, out_shape);
      Context ctx;
      ctx.threads = 2;
      auto prim = prepare_kernel(d, k, ctx);
      ASSERT_TRUE(prim.is_ok()) << k.name;
      const Tensor* outs[] = {&y};
      ASSERT_TRUE(prim->execute(ins, outs).is_ok()) << k.name;
    };
    std::vector<float> ref, got;
    for (const KernelDef& k : kernels())
      if (k.op == d.op && k.impl == Impl::naive) run_kernel(k, ref);
    for (const KernelDef& k : kernels()) {
      if (k.op != d.op || k.impl != Impl::simd || kernel_isa(k) != entry().isa) continue;
      run_kernel(k, got);
      std::int64_t bad = 0;
      for (std::size_t i = 3; i < ref.size(); ++i)
        if (!(std::fabs(got[i] - ref[i]) <= 1e-6f * (1.f + std::fabs(ref[i])))) ++bad;
      EXPECT_EQ(bad, 0) << k.name;
    }
  }
}

// Row kernels (softmax, layernorm, rmsnorm) switch to their streaming variants for outputs of
// >= 16 MiB: row buffers, non-temporal stores, the next row prefetched, and (simd softmax) row
// pipelining, where one row's store rides along the next row's exp pass when y is vector-
// aligned. 1025 rows of 4096 (16.02 MiB) with y aligned to 64 bytes and shifted by 3 floats,
// softmax (plain, and scaled with a full mask) with a row of -inf (the scalar path) and a row
// holding a NaN between pipelined rows; layernorm with and without a residual (fused runs
// different row kernels for the two); every simd and fused row against naive, 2 threads.
TEST_P(PerIsa, NormStreamingLargeRowsMatchNaive) {
  const Shape shape{1025, 4096};
  const std::int64_t numel = shape.numel();
  std::vector<OpDesc> descs;
  descs.push_back({OpKind::softmax, SoftmaxParams{}, {{shape, Layout::nchw}}});
  SoftmaxParams scaled_masked;
  scaled_masked.scale = 0.5f;
  scaled_masked.has_mask = true;
  descs.push_back({OpKind::softmax, scaled_masked, {{shape, Layout::nchw}, {shape, Layout::nchw}}});
  NormParams ln;
  ln.has_residual = true;
  descs.push_back(
      {OpKind::layernorm,
       ln,
       {{shape, Layout::nchw}, {Shape{4096}, Layout::nchw}, {Shape{4096}, Layout::nchw}, {shape, Layout::nchw}}});
  descs.push_back({OpKind::layernorm,
                   NormParams{},
                   {{shape, Layout::nchw}, {Shape{4096}, Layout::nchw}, {Shape{4096}, Layout::nchw}}});
  NormParams rms;
  rms.has_bias = false;
  descs.push_back({OpKind::rmsnorm, rms, {{shape, Layout::nchw}, {Shape{4096}, Layout::nchw}}});
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> dist(-2.f, 2.f);
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  for (const OpDesc& d : descs) {
    std::vector<std::vector<float>> in_store;
    std::vector<Tensor> in;
    for (const TensorDesc& t : d.inputs) {
      in_store.emplace_back(static_cast<std::size_t>(t.shape.numel()));
      for (float& v : in_store.back()) v = dist(rng);
      in.push_back(*Tensor::view(static_cast<const float*>(in_store.back().data()), t.shape, t.layout));
    }
    if (d.op == OpKind::softmax) {
      float* x = in_store[0].data();
      for (std::int64_t j = 0; j < 4096; ++j) x[5 * 4096 + j] = -inf;  // fully masked row: zeros
      x[9 * 4096 + 100] = nan;                                         // a NaN row
    }
    std::vector<const Tensor*> ins;
    for (const Tensor& t : in) ins.push_back(&t);
    for (std::int64_t shift : {0, 3}) {
      std::vector<float> ref_store, got_store;
      // y at a 64-byte boundary plus `shift` floats.
      auto run_kernel = [&](const KernelDef& k, std::vector<float>& store) -> const float* {
        store.assign(static_cast<std::size_t>(numel) + 32, 0.f);
        float* base = store.data();
        while (reinterpret_cast<std::uintptr_t>(base) % 64) ++base;
        float* yp = base + shift;
        const Tensor y = *Tensor::view(yp, shape);
        Context ctx;
        ctx.threads = 2;
        auto prim = prepare_kernel(d, k, ctx);
        EXPECT_TRUE(prim.is_ok()) << k.name;
        if (!prim.is_ok()) return nullptr;
        const Tensor* outs[] = {&y};
        EXPECT_TRUE(prim->execute(ins, outs).is_ok()) << k.name;
        return yp;
      };
      const float* ref = nullptr;
      for (const KernelDef& k : kernels())
        if (k.op == d.op && k.impl == Impl::naive) ref = run_kernel(k, ref_store);
      ASSERT_NE(ref, nullptr);
      for (const KernelDef& k : kernels()) {
        if (k.op != d.op || (k.impl != Impl::simd && k.impl != Impl::fused) || kernel_isa(k) != entry().isa) continue;
        const float* got = run_kernel(k, got_store);
        ASSERT_NE(got, nullptr);
        std::int64_t bad = 0, first = -1;
        for (std::int64_t i = 0; i < numel; ++i) {
          // softmax: outputs ~1/4096, so relative; the norms: O(1), absolute + relative.
          const float tol =
              d.op == OpKind::softmax ? 1e-5f * std::fabs(ref[i]) + 1e-12f : 1e-5f * (1.f + std::fabs(ref[i]));
          const bool ok = std::isnan(ref[i]) ? std::isnan(got[i]) : std::fabs(got[i] - ref[i]) <= tol;
          if (!ok && bad++ == 0) first = i;
        }
        EXPECT_EQ(bad, 0) << k.name << " shift " << shift << " first bad at " << first << " (row " << first / 4096
                          << ")";
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Isa, PerIsa, ::testing::Range<std::size_t>(0, std::size(kIsas)), isa_param_name);

// ---- exhaustive ----------------------------------------------------------------------------

// Every finite fp32 input, in chunks of 64 Ki, on all hardware threads.
ErrStats exhaustive(EvalFn eval, VmathFn fn) {
  constexpr std::uint64_t kChunk = 1 << 16;
  constexpr std::uint64_t kChunks = (std::uint64_t{1} << 32) / kChunk;
  std::atomic<std::uint64_t> next{0};
  const unsigned nt = std::max(1u, std::thread::hardware_concurrency());
  std::vector<ErrStats> stats(nt);
  std::vector<std::thread> pool;
  for (unsigned t = 0; t < nt; ++t) {
    pool.emplace_back([&, t] {
      std::vector<float> x(kChunk), y(kChunk);
      for (std::uint64_t c; (c = next.fetch_add(1)) < kChunks;) {
        std::size_t n = 0;
        for (std::uint64_t i = 0; i < kChunk; ++i) {
          const auto u = static_cast<std::uint32_t>(c * kChunk + i);
          if ((u & 0x7f800000u) != 0x7f800000u) x[n++] = bits_to_float(u);  // finite only
        }
        eval(fn, x.data(), y.data(), static_cast<std::int64_t>(n));
        for (std::size_t i = 0; i < n; ++i) stats[t].add(x[i], y[i], reference(fn, x[i]));
      }
    });
  }
  for (auto& th : pool) th.join();
  ErrStats all;
  for (const ErrStats& s : stats) all.merge(s);
  return all;
}

std::string fmt_float(double v) {
  std::ostringstream o;
  o.precision(9);
  o << v;
  return o.str();
}

TEST(VmathExhaustive, AllFiniteInputs) {
  if (!opfuse::testing::long_tests()) GTEST_SKIP() << "exhaustive 2^32-input sweep: set OPFUSE_LONG_TESTS=1";
  std::string isas = std::getenv("OPFUSE_VMATH_ISAS") ? std::getenv("OPFUSE_VMATH_ISAS") : "";
  std::vector<const IsaEntry*> chosen;
  for (const IsaEntry& e : kIsas)
    if (isa_available(e) && (isas.empty() ? chosen.empty() : isas.find(e.name) != std::string::npos))
      chosen.push_back(&e);
  ASSERT_FALSE(chosen.empty());

  std::ostringstream md;
  md << "# Vector math accuracy (simd/vmath.hpp)\n\n"
     << "Written by `tests/test_vmath.cpp` (VmathExhaustive.AllFiniteInputs, run with `OPFUSE_LONG_TESTS=1 "
        "OPFUSE_VMATH_REPORT=reports/vmath_accuracy.md`); do not edit by hand.\n\n"
     << "Every finite fp32 input (all 2^32 bit patterns except Inf/NaN: "
     << ((std::uint64_t{1} << 32) - (std::uint64_t{1} << 24))
     << " inputs per function) is evaluated by the vector code and compared with a double-precision "
        "reference (`std::exp((double)x)`, `std::tanh`, `std::erf`, `1 / (1 + std::exp(-x))`). "
        "ulp = units in the last place of the exact result, over results >= FLT_MIN; smaller results "
        "(denormals and zero) are judged by absolute error, in units of the smallest denormal 2^-149. "
        "Overflowing results must be +-inf exactly.\n\n"
     << "| function | ISA | inputs | max error (ulp) | at x | got | exact | documented bound (ulp) | "
        "max abs error, results < FLT_MIN (x 2^-149) | at x | inf/NaN mismatches | seconds |\n"
     << "|---|---|---|---|---|---|---|---|---|---|---|---|\n";
  for (const IsaEntry* isa : chosen) {
    for (const FnEntry& f : kBounded) {
      const auto t0 = std::chrono::steady_clock::now();
      const ErrStats s = exhaustive(isa->eval, f.fn);
      const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      const double bound = simd::kVmathMaxUlp[static_cast<int>(f.fn)];
      md << "| " << f.name << " | " << isa->name << " | " << s.count << " | " << fmt_float(s.max_ulp) << " | "
         << fmt_float(s.ulp_x) << " | " << fmt_float(s.ulp_y) << " | " << fmt_float(s.ulp_ref) << " | " << bound
         << " | " << fmt_float(s.max_tiny_abs / 0x1p-149) << " | " << fmt_float(s.tiny_x) << " | " << s.special_bad
         << " | " << fmt_float(std::round(secs)) << " |\n";
      std::printf("%s/%s: %s (%.0f s)\n", f.name, isa->name, describe(s).c_str(), secs);
      EXPECT_LE(s.max_ulp, bound) << f.name << "/" << isa->name;
      EXPECT_LE(s.max_tiny_abs, simd::kVmathMaxTinyAbs[static_cast<int>(f.fn)]) << f.name << "/" << isa->name;
      EXPECT_EQ(s.special_bad, 0u) << f.name << "/" << isa->name;
    }
  }
  md << "\nCPU ISA level: " << isa_name(cpu_isa()) << "; threads: " << std::thread::hardware_concurrency() << ".\n";
  if (const char* path = std::getenv("OPFUSE_VMATH_REPORT")) {
    std::ofstream(path) << md.str();
    std::printf("wrote %s\n", path);
  }
}

}  // namespace
}  // namespace opfuse
