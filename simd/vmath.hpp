// simd/vmath.hpp - vector exp, tanh, erf and sigmoid on xsimd batches: range reduction plus a
// short polynomial, branch-free (both sides of every split are computed and a select keeps one),
// with inf, overflow, underflow and NaN handled in the same straight-line code.
//
// Why not libm or xsimd::exp: the activations (sigmoid, tanh, GELU, SiLU) and softmax spend
// almost all their time here, and a scalar libm call per element is 10-20x slower than one
// polynomial per 16 lanes. The formulas below are the classic ones (Cody-Waite reduction,
// Cephes-style polynomials), written out so the error analysis is visible.
//
// Maximum errors, measured exhaustively over every finite fp32 input (all 2^32 bit patterns
// minus Inf/NaN) against a double-precision reference by tests/test_vmath.cpp
// (VmathExhaustive, OPFUSE_LONG_TESTS=1), recorded in reports/vmath_accuracy.md. "ulp" counts
// units in the last place of the exact result, over results in the normal range (>= FLT_MIN);
// smaller results (exp's denormals, erf/tanh of denormal x) are judged by absolute error.
// The fast test VmathAccuracy.* asserts the bounds (simd::kVmathMaxUlp in simd/eltwise.hpp) on
// ~1e6 sampled inputs on every ISA. Exhaustive maxima, AVX-512 (the same FMA math as AVX2):
//   exp      1.26 ulp (bound 2)   results < FLT_MIN: abs error <= 0.78 x 2^-149
//   tanh     1.36 ulp (bound 2)
//   erf      1.06 ulp (bound 2)   tiny results (denormal x): <= 0.51 x 2^-149
//   sigmoid  2.64 ulp (bound 3)   results < FLT_MIN (x < -87.3): <= 0.78 x 2^-149
//   gelu_erf 8.33 ulp (bound 9)   results < FLT_MIN (x < -13.15): flushed to 0 (<= 2^-126, the
//                                 bound; see gelu_erf); SSE2 8.59 ulp
//            (the old 0.5 x (1 + erf(x / sqrt 2)) form was within 2 ulp for x >= 0 but lost all
//            relative accuracy for x < -3, where 1 + erf cancels - millions of ulp at x = -5)
// Overflow, underflow, +-inf and NaN: 0 mismatches. SSE2 has no FMA (xsimd::fma is a multiply and
// an add there), which costs at most ~0.3 ulp more (exhaustive on all three ISAs:
// reports/vmath_accuracy.md).
//
// Everything lives in the ISA's inline namespace (see simd/common.hpp): each of the three
// compilations of a simd/*.cpp gets its own copy.
#pragma once

#include <cstdint>
#include <type_traits>

#include "simd/common.hpp"

namespace opfuse::simd {
inline namespace OPFUSE_SIMD_NS {
namespace vmath {

template <class Arch>
using ibatch = xsimd::batch<std::int32_t, Arch>;

// c[0] + t * (c[1] + t * (... + t * c[N-1])) by Horner with FMAs (SSE2: multiply + add).
template <class Arch, std::size_t N>
inline fbatch<Arch> horner(fbatch<Arch> t, const float (&c)[N]) {
  fbatch<Arch> p(c[N - 1]);
  for (std::size_t i = N - 1; i-- > 0;) p = xsimd::fma(p, t, fbatch<Arch>(c[i]));
  return p;
}

template <class Arch>
inline fbatch<Arch> copysign_of(fbatch<Arch> magnitude, fbatch<Arch> sign_from) {
  const fbatch<Arch> sign_bit(-0.f);
  return magnitude | (sign_from & sign_bit);
}

// min(max(x, lo), hi) with compare + select: NaN stays NaN (the compares are false), and GCC 12
// does not raise its false -Wmaybe-uninitialized on _mm512_min_ps/_mm512_max_ps (PR 105593).
template <class Arch>
inline fbatch<Arch> clamp(fbatch<Arch> x, fbatch<Arch> lo, fbatch<Arch> hi) {
  return xsimd::select(x < lo, lo, xsimd::select(x > hi, hi, x));
}

// e^x. n = round(x / ln2) by the 1.5 * 2^23 "magic" add (the integer lands in the low mantissa
// bits), r = x - n ln2 with ln2 split into C1 (8 significant bits, so n * C1 is exact) and C2
// (Cody-Waite), |r| <= ln2 / 2; e^r = 1 + r + r^2 P(r) with Cephes expf's degree-5 P. The scale
// 2^n is applied as two factors 2^(n/2) and 2^(n - n/2), each a normal float built from exponent
// bits, so results that are denormal (x < -87.3) get one correct rounding, x > 88.72 overflows
// to +inf through an ordinary multiply and x < -103.97 underflows to +0. x is clamped to
// [-104, 89] first (beyond it the result is already 0 / inf), which keeps n in [-150, 128];
// the clamp keeps NaN, and NaN runs through to the result.
// Max error: see the table at the top of this file.
template <class Arch>
inline fbatch<Arch> exp(fbatch<Arch> x) {
  using B = fbatch<Arch>;
  using I = ibatch<Arch>;
  static constexpr float P[] = {5.0000001201e-1f, 1.6666665459e-1f, 4.1665795894e-2f,
                                8.3334519073e-3f, 1.3981999507e-3f, 1.9875691500e-4f};
  const B magic(12582912.f);  // 1.5 * 2^23: adding it rounds to an integer (round-to-nearest)
  const B xc = clamp<Arch>(x, B(-104.f), B(89.f));
  const B t = xsimd::fma(xc, B(1.44269504088896341f), magic);
  const B n = t - magic;
  B r = xsimd::fnma(n, B(0.693359375f), xc);  // xc - n * C1, exact
  r = xsimd::fnma(n, B(-2.12194440e-4f), r);  // - n * C2
  const B p = xsimd::fma(horner<Arch>(r, P), r * r, r + B(1.f));
  // n as integers: n1 = round(n / 2) by the same magic add, n2 = n - n1, both in [-75, 64]. The
  // exponent field is filled with a multiply by 2^23 rather than a shift (GCC 12 warns falsely
  // on the AVX-512 shift intrinsics, PR 105593), done in unsigned arithmetic: NaN/Inf lanes
  // carry garbage integers here (their result is NaN/Inf anyway) and SSE2, lacking a 32-bit
  // multiply, emulates it lane by lane in C++, where a signed overflow would be undefined.
  const I magic_bits = xsimd::bitwise_cast<I>(magic);
  const I ni = xsimd::bitwise_cast<I>(t) - magic_bits;
  const I n1 = xsimd::bitwise_cast<I>(xsimd::fma(n, B(0.5f), magic)) - magic_bits;
  const I n2 = ni - n1;
  using U = xsimd::batch<std::uint32_t, Arch>;
  const B s1 = xsimd::bitwise_cast<B>(xsimd::bitwise_cast<U>(n1 + I(127)) * U(1u << 23));
  const B s2 = xsimd::bitwise_cast<B>(xsimd::bitwise_cast<U>(n2 + I(127)) * U(1u << 23));
  return (p * s1) * s2;  // NaN x: p is NaN, whatever s1 and s2 hold
}

// e^x for x <= 0 (and NaN): the softmax argument z - max. A faster variant of exp above for
// the one domain where softmax spends its time; ~11 vector operations on AVX-512, ~15 on
// AVX2 / SSE2, against ~24 for exp.
//   reduction  n = round(x / ln2), r = x - n ln2 (Cody-Waite, the same C1 + C2 split as exp),
//              |r| <= ln2 / 2;
//   e^r        1 + c1 r + ... + c5 r^5, a degree-5 minimax fit (the coefficients of ARM's
//              optimized-routines expf, relative error 1.5 ulp in exact arithmetic), 5 FMAs
//              by Horner instead of exp's degree-7 form;
//   2^n        AVX-512: vscalefps computes p * 2^n with one rounding, so results below
//              FLT_MIN come out as correctly rounded denormals and x < -104 (n <= -150) as 0;
//              AVX2 / SSE2: 2^n from exponent bits, valid while 2^n is normal, so results below
//              FLT_MIN (x < -87.34) are flushed to 0 (an absolute error < 1.2e-38).
// -inf gives 0, NaN gives NaN; x > 0 is outside the contract (AVX2 / SSE2 return garbage for
// x > 88). Max error over every float in [-104, 0] (tests/test_vmath.cpp,
// VmathAccuracy.ExpNonpositive with OPFUSE_LONG_TESTS=1; the fast test samples every 61st and
// asserts kExpNonpositiveMaxUlp = 2.5 from simd/norm.hpp):
//   AVX-512  1.95 ulp   results < FLT_MIN: abs error <= 1.35 x 2^-149 (rounded denormals)
//   AVX2     1.95 ulp   results < FLT_MIN: flushed to 0 (abs error < 2^-126)
//   SSE2     2.12 ulp   (no FMA: Horner's multiply and add round separately); as AVX2 below FLT_MIN
// Softmax's tolerance (src/check/compare.cpp) is ~2 eps (sqrt(L) + 2|scale| + 2) relative, so
// two ulp more than exp's 1.26 cost nothing measurable there.
template <class Arch>
inline fbatch<Arch> exp_nonpositive(fbatch<Arch> x) {
  using B = fbatch<Arch>;
  static constexpr float C[] = {1.f, 0x1.ffffecp-1f, 0x1.fffdb6p-2f, 0x1.555e66p-3f, 0x1.573e2ep-5f, 0x1.0e4020p-7f};
  const B log2e(1.44269504088896341f), c1(0.693359375f), c2(-2.12194440e-4f);
  if constexpr (std::is_same_v<Arch, xsimd::avx512f>) {
    // The masked (all lanes) forms of max, roundscale and scalef: GCC 12's plain ones read
    // _mm512_undefined_ps() and raise false -Wuninitialized warnings (PR 105593).
    // max(-104, x) keeps NaN: max_ps returns its second operand then.
    const B xc = _mm512_mask_max_ps(x, 0xFFFF, B(-104.f), x);
    const B n = _mm512_mask_roundscale_ps(xc, 0xFFFF, xc * log2e, 0x08);  // to nearest, no exceptions
    B r = xsimd::fnma(n, c1, xc);  // exact: n * C1 has at most 16 significant bits
    r = xsimd::fnma(n, c2, r);
    return _mm512_mask_scalef_ps(n, 0xFFFF, horner<Arch>(r, C), n);
  } else {
    using I = ibatch<Arch>;
    const B magic(12582912.f);                      // 1.5 * 2^23: adding it rounds to an integer
    const auto tiny = x < B(-87.3365448f);          // x < ln(FLT_MIN), e^x < FLT_MIN (also -inf): returned as 0
    const B xc = xsimd::select(tiny, B(-87.f), x);  // n >= -126: 2^n stays normal
    const B t = xsimd::fma(xc, log2e, magic);
    const B n = t - magic;
    B r = xsimd::fnma(n, c1, xc);
    r = xsimd::fnma(n, c2, r);
    // 2^n from t's low mantissa bits: bits(t) - bits(magic) = n, in [-126, 0] (NaN lanes carry
    // garbage, and the NaN polynomial wins). Unsigned, as in exp: SSE2 emulates the shift's
    // multiply lane by lane.
    using U = xsimd::batch<std::uint32_t, Arch>;
    const I e = xsimd::bitwise_cast<I>(t) - I(0x4B400000 - 127);
    const B s = xsimd::bitwise_cast<B>(xsimd::bitwise_cast<U>(e) << 23);
    return xsimd::select(tiny, B(0.f), horner<Arch>(r, C) * s);
  }
}

// 2^x for x <= 0 (and NaN): exp_nonpositive in base 2, for callers that can fold log2(e) into a
// multiply they do anyway (flash attention scales Q by scale * log2(e) once per query tile, so
// its scores arrive in base 2). The reduction loses its multiply and its Cody-Waite step:
//   n = round(x), r = x - n exactly (Sterbenz), |r| <= 1/2;
//   2^r = e^(r ln2): exp_nonpositive's degree-5 polynomial with coefficient k times ln2^k
//         (rounded to float), so the same 1.95 x 2^-24 relative error in exact arithmetic;
//   2^n as in exp_nonpositive (AVX-512 vscalefps, denormal results correctly rounded; AVX2 /
//         SSE2 exponent bits, results below FLT_MIN, x < -126, flushed to 0).
// 9 vector operations on AVX-512 (max, roundscale, subtract, Horner's 5 FMAs, scalef) against
// exp_nonpositive's 11, and 5 of them on the multiply pipes against 8. (The AVX2 form, exponent
// bits and a multiply in place of roundscale and scalef, measured slower in the AVX-512 flash
// attention.) -inf gives 0, NaN gives NaN; x > 0 is outside the contract. Max error over every
// float in [-150, 0] (VmathAccuracy.Exp2Nonpositive with OPFUSE_LONG_TESTS=1, against std::exp2
// in double; the fast test samples every 61st and asserts kExpNonpositiveMaxUlp = 2.5):
//   AVX-512  1.80 ulp   results < FLT_MIN: abs error <= 1.35 x 2^-149 (rounded denormals)
//   AVX2     1.80 ulp   results < FLT_MIN: flushed to 0 (abs error < 2^-126)
//   SSE2     2.06 ulp   (no FMA); as AVX2 below FLT_MIN
template <class Arch>
inline fbatch<Arch> exp2_nonpositive(fbatch<Arch> x) {
  using B = fbatch<Arch>;
  static constexpr float C[] = {1.f, 0x1.62e422p-1f, 0x1.ebf9acp-3f, 0x1.c6bca0p-5f, 0x1.3cee16p-7f, 0x1.59ed2cp-10f};
  if constexpr (std::is_same_v<Arch, xsimd::avx512f>) {
    // max(-151, x) keeps NaN (max_ps returns its second operand then); masked forms as in
    // exp_nonpositive (GCC 12's PR 105593).
    const B xc = _mm512_mask_max_ps(x, 0xFFFF, B(-151.f), x);
    const B n = _mm512_mask_roundscale_ps(xc, 0xFFFF, xc, 0x08);  // to nearest, no exceptions
    return _mm512_mask_scalef_ps(n, 0xFFFF, horner<Arch>(xc - n, C), n);
  } else {
    using I = ibatch<Arch>;
    using U = xsimd::batch<std::uint32_t, Arch>;
    const B magic(12582912.f);                       // 1.5 * 2^23: adding it rounds to an integer
    const auto tiny = x < B(-126.f);                 // 2^x < FLT_MIN (also -inf): returned as 0
    const B xc = xsimd::select(tiny, B(-126.f), x);  // n >= -126: 2^n stays normal
    const B t = xc + magic;
    const B n = t - magic;
    const I e = xsimd::bitwise_cast<I>(t) - I(0x4B400000 - 127);
    const B s = xsimd::bitwise_cast<B>(xsimd::bitwise_cast<U>(e) << 23);
    return xsimd::select(tiny, B(0.f), horner<Arch>(xc - n, C) * s);
  }
}

// 1 / (1 + e^-x), evaluated as e / (1 + e) for x < 0 and 1 / (1 + e) for x >= 0 with
// e = e^-|x| <= 1: e never overflows, so sigmoid(x) for x < -88.7 is the tiny (denormal) e^x
// rather than 1 / inf = 0, and one division serves both signs. NaN propagates through e.
template <class Arch>
inline fbatch<Arch> sigmoid(fbatch<Arch> x) {
  using B = fbatch<Arch>;
  const B e = exp<Arch>(-xsimd::abs(x));
  const B num = xsimd::select(x < B(0.f), e, B(1.f));
  return num / (B(1.f) + e);
}

// tanh(x) = sign(x) * tanh(|x|). For |x| < 0.625: a + a^3 P(a^2) with Cephes tanhf's degree-4 P
// (no cancellation, exact for denormal x); above: 1 - 2 / (e^(2a) + 1), where the subtraction
// loses nothing because the result is >= 0.55, and e^(2a) = inf gives exactly 1.
template <class Arch>
inline fbatch<Arch> tanh(fbatch<Arch> x) {
  using B = fbatch<Arch>;
  static constexpr float P[] = {-3.33332819422e-1f, 1.33314422036e-1f, -5.37397155531e-2f, 2.06390887954e-2f,
                                -5.70498872745e-3f};
  const B a = xsimd::abs(x);
  const B a2 = a * a;
  const B small = xsimd::fma(horner<Arch>(a2, P) * a2, a, a);
  const B large = B(1.f) - B(2.f) / (exp<Arch>(a + a) + B(1.f));
  return copysign_of(xsimd::select(a < B(0.625f), small, large), x);
}

// erf(x) = sign(x) * erf(|x|).
//   |x| < 1:        a + a (P(a^2) - 1), P of degree 6 (Chebyshev interpolant of erf(sqrt z)/sqrt z on
//                   z in [0, 1], relative error 0.02 ulp in exact arithmetic).
//   1 <= |x|:       1 - e^(-a^2) Q(a), Q of degree 8 in t = (a - 2.5) / 1.5, a weighted minimax
//                   fit of erfcx(a) = e^(a^2) erfc(a) on [1, 4] (Lawson iteration, weight e^(-a^2)
//                   so the error is uniform in ulp of the result: 0.04 ulp). erfc(4) = 1.5e-8 is
//                   below half an ulp of 1, so a is clamped at 4 and the formula yields exactly 1
//                   (erfc(3.92) = 2.96e-8 is too close to 2^-25 to clamp there).
// The rounding of a^2 in e^(-a^2) scales erfc's relative error by a^2, harmless since erfc
// shrinks faster than a^2 grows.
template <class Arch>
inline fbatch<Arch> erf(fbatch<Arch> x) {
  using B = fbatch<Arch>;
  // P - 1: erf(a) = a + a (P(a^2) - 1), so the leading term is exact and the rounding of the
  // O(1.13) value P(a^2) (whose ulp is 4x that of results just below 0.5) never enters.
  static constexpr float Pm1[] = {1.2837916585e-01f, -3.7612626667e-01f, 1.1283594715e-01f, -2.6854212010e-02f,
                                  5.1890874228e-03f, -8.0168642818e-04f, 7.8758750468e-05f};
  static constexpr float Q[] = {2.108076230e-01f,  -1.115126952e-01f, 5.606105859e-02f,
                                -2.744489102e-02f, 1.162751488e-02f,  -5.110634582e-03f,
                                6.070029169e-03f,  3.770713403e-03f,  2.719836389e-03f};
  const B a = xsimd::abs(x);
  const B as = xsimd::select(a > B(1.f), B(1.f), a);
  const B small = xsimd::fma(as, horner<Arch>(as * as, Pm1), as);
  const B al = clamp<Arch>(a, B(1.f), B(4.f));
  const B t = xsimd::fma(al, B(1.f / 1.5f), B(-2.5f / 1.5f));
  const B large = xsimd::fnma(exp<Arch>(-(al * al)), horner<Arch>(t, Q), B(1.f));
  return copysign_of(xsimd::select(a < B(1.f), small, large), x);  // NaN: a < 1 is false, large is NaN
}

// The compositions used by the activations; silu's and gelu_tanh's operation order mirrors
// naive/common.cpp so that the only difference to the reference is the vector exp/tanh (and
// x * sigmoid(x) in place of x / (1 + e^-x), which agrees including silu(-inf) = NaN).
//
// gelu_erf(x) = x Phi(x), Phi the normal CDF, is NOT computed as naive's 0.5 x (1 + erf(x/sqrt 2)):
// for x < 0 that sum cancels (1 + erf(-2.1) = 0.0027 keeps only the few bits of erf's last ulp,
// ~370 ulp of the result at x = -3), and erf's two branches cost ~55 vector operations. Instead,
// with u = |x| and the upper tail h = Phi(-u) = e^(-u^2/2) S(u):
//   x < 0:  gelu = x h         (no cancellation: h is computed to a few ulp, down to FLT_MIN)
//   x >= 0: gelu = x (1 - h)   (h <= 0.5, so 1 - h >= 0.5 loses nothing)
// S(u) = Phi(-u) e^(u^2/2) (= erfcx(u / sqrt 2) / 2, Mills' ratio / sqrt(2 pi)) is smooth,
// positive and ~1 / (u sqrt(2 pi)) for large u, so one rational function covers all of
// [0, 14.5]: P4(u) / Q5(u), a weighted least-squares fit refined by Lawson iterations to a
// relative error of 6e-9 (0.1 ulp) in exact arithmetic; every coefficient is positive, so
// Horner's rule on u >= 0 never cancels. u is clamped at 13.15, past which the result is below
// FLT_MIN and flushed to 0 (u^2 must not overflow either). u^2 is split exactly into q + lo (an FMA; SSE2:
// Dekker's product) and e^(-u^2/2) = e^(-q/2) (1 - lo/2), because the rounding of u^2 alone
// would scale e^(-u^2/2)'s relative error by u^2 / 2 (~85 at u = 13). e^(-q/2) is
// exp_nonpositive, so ~34 vector operations in all (one division, on its own unit).
// Specials follow naive: gelu(+inf) = +inf, gelu(-inf) = -inf * 0 = NaN, NaN -> NaN.
// Max error: see the table at the top of this file (measured exhaustively).
template <class Arch>
inline fbatch<Arch> gelu_erf(fbatch<Arch> x) {
  using B = fbatch<Arch>;
  static constexpr float P[] = {0x1p-1f, 0x1.c0bb62p-2f, 0x1.77233cp-3f, 0x1.4cbp-5f, 0x1.0d8932p-8f};
  static constexpr float Q[] = {1.f, 0x1.ac9fe2p+0f, 0x1.33c6aep+0f, 0x1.e0917ap-2f, 0x1.a0fd08p-4f, 0x1.51cf2cp-7f};
  const B a = xsimd::abs(x);
  // u = min(a, kFlush); a NaN may become kFlush here (x itself carries the NaN to the result).
  // Beyond kFlush = 13.15, |gelu| < FLT_MIN (the crossing is at 13.1462) and the result is
  // x * 0; up to it e^(-u^2/2) >= 2.8e-38 and every intermediate stays normal. Computed on (as
  // AVX-512's vscalefps would, rounding them as denormals), those lanes ran on denormals, and
  // each denormal operation takes a microcode assist on Intel cores: a GEMM's gelu epilogue
  // over outputs of magnitude 10-40 took longer than the GEMM itself.
  constexpr float kFlush = 13.15f;
  B u;
  if constexpr (std::is_same_v<Arch, xsimd::avx512f>)
    u = _mm512_mask_min_ps(a, 0xFFFF, a, B(kFlush));  // masked form: see vmax in simd/norm_kernel.hpp
  else
    u = xsimd::min(a, B(kFlush));
  const B q = u * u;
  B lo;
  if constexpr (std::is_same_v<Arch, xsimd::sse2>) {
    // No FMA: Dekker's exact product, u split into two 12-bit halves uh + ul.
    const B c = u * B(4097.f);
    const B uh = c - (c - u);
    const B ul = u - uh;
    lo = ((uh * uh - q) + B(2.f) * uh * ul) + ul * ul;
  } else if constexpr (std::is_same_v<Arch, xsimd::avx512f>) {
    // xsimd 8 has no AVX-512 fms: its generic x * y - z would be folded to q - q = 0.
    lo = _mm512_fmsub_ps(u, u, q);  // u * u - q, exact
  } else {
    lo = xsimd::fms(u, u, q);  // fma3<avx2>: one vfmsub, exact
  }
  const B e = exp_nonpositive<Arch>(B(-0.5f) * q);
  const B tail = xsimd::fnma(e * B(0.5f), lo, e);  // e^(-u^2/2) = e^(-q/2) e^(-lo/2), |lo| <= 2^-24 q
  const B s = horner<Arch>(u, P) / horner<Arch>(u, Q);
  // x s first: (x s) is normal whenever the result is; past kFlush, x * 0 (-0, or NaN for -inf).
  const B neg = xsimd::select(a > B(kFlush), x * B(0.f), (x * s) * tail);
  // Not x - x h: gelu(+inf) = inf * 1, not inf - inf * 0. Past u = 5.6, h = tail s < 2^-25 and
  // 1 - h rounds to 1: the tail is zeroed first so that tail * s is never formed as a denormal.
  const B tail_pos = xsimd::select(u > B(5.6f), B(0.f), tail);
  const B pos = x * (B(1.f) - tail_pos * s);
  return xsimd::select(x < B(0.f), neg, pos);
}

template <class Arch>
inline fbatch<Arch> gelu_tanh(fbatch<Arch> x) {
  using B = fbatch<Arch>;
  const B k(0.79788456080286536f);  // sqrt(2/pi)
  return B(0.5f) * x * (B(1.f) + tanh<Arch>(k * (x + B(0.044715f) * x * x * x)));
}

template <class Arch>
inline fbatch<Arch> silu(fbatch<Arch> x) {
  return x * sigmoid<Arch>(x);
}

}  // namespace vmath
}  // namespace OPFUSE_SIMD_NS
}  // namespace opfuse::simd
