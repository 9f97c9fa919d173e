// simd/activation.hpp - activations on one xsimd batch, shared by every simd and fused kernel
// (unary ops, post-op passes, epilogues, chains). The formulas mirror naive/common.cpp; NaN
// propagates because every select keeps x when a comparison with NaN is false, and the
// transcendental kinds (sigmoid, tanh, gelu_erf, gelu_tanh, silu) use the vector math of
// simd/vmath.hpp (its header lists their measured maximum errors). Every ActKind is
// vectorized: act_supported() (simd/eltwise.hpp) is true for all of them.
//
// Two entry points:
//   activate<Arch>(act, x)        switches on act.kind per call: for epilogues and tails.
//   activate_k<K, Arch>(act, x)   the kind fixed at compile time: for hot loops, which pick K once
//                                 with with_act_kind() and then run branch-free.
#pragma once

#include <cassert>
#include <cstdint>
#include <utility>

#include "simd/common.hpp"
#include "simd/vmath.hpp"

namespace opfuse::simd {
inline namespace OPFUSE_SIMD_NS {

template <ActKind K, class Arch>
inline fbatch<Arch> activate_k(const Activation& a, fbatch<Arch> x) {
  using B = fbatch<Arch>;
  const B zero(0.f);
  if constexpr (K == ActKind::relu) {
    return xsimd::select(x < zero, zero, x);
  } else if constexpr (K == ActKind::clip) {
    return xsimd::select(x < B(a.alpha), B(a.alpha), xsimd::select(x > B(a.beta), B(a.beta), x));
  } else if constexpr (K == ActKind::leaky_relu) {
    return xsimd::select(x < zero, B(a.alpha) * x, x);
  } else if constexpr (K == ActKind::sigmoid) {
    return vmath::sigmoid<Arch>(x);
  } else if constexpr (K == ActKind::tanh) {
    return vmath::tanh<Arch>(x);
  } else if constexpr (K == ActKind::gelu_erf) {
    return vmath::gelu_erf<Arch>(x);
  } else if constexpr (K == ActKind::gelu_tanh) {
    return vmath::gelu_tanh<Arch>(x);
  } else if constexpr (K == ActKind::silu) {
    return vmath::silu<Arch>(x);
  } else if constexpr (K == ActKind::hardswish) {
    B r = x + B(3.f);
    r = xsimd::select(r < zero, zero, xsimd::select(r > B(6.f), B(6.f), r));
    return x * r / B(6.f);
  } else {
    static_assert(K == ActKind::linear, "every ActKind has a branch above");
    return B(a.alpha) * x + B(a.beta);
  }
}

// Calls fn(std::integral_constant<ActKind, K>{}) for the runtime kind: one switch, then the loop
// inside fn is compiled once per kind with no per-batch branch.
template <class Fn>
inline decltype(auto) with_act_kind(ActKind kind, Fn&& fn) {
  using K = ActKind;
  switch (kind) {
    case K::relu: return fn(std::integral_constant<K, K::relu>{});
    case K::clip: return fn(std::integral_constant<K, K::clip>{});
    case K::leaky_relu: return fn(std::integral_constant<K, K::leaky_relu>{});
    case K::sigmoid: return fn(std::integral_constant<K, K::sigmoid>{});
    case K::tanh: return fn(std::integral_constant<K, K::tanh>{});
    case K::gelu_erf: return fn(std::integral_constant<K, K::gelu_erf>{});
    case K::gelu_tanh: return fn(std::integral_constant<K, K::gelu_tanh>{});
    case K::silu: return fn(std::integral_constant<K, K::silu>{});
    case K::hardswish: return fn(std::integral_constant<K, K::hardswish>{});
    case K::linear: break;
  }
  return fn(std::integral_constant<K, K::linear>{});
}

// act(x) for one batch.
template <class Arch>
fbatch<Arch> activate(const Activation& a, fbatch<Arch> x) {
  return with_act_kind(a.kind, [&](auto k) { return activate_k<decltype(k)::value, Arch>(a, x); });
}

// with_act_kind for the kinds that follow a depthwise or a stem convolution in real models
// (ReLU, ReLU6 as clip, LeakyReLU, HardSwish, SiLU): fixed(std::integral_constant<ActKind, K>{})
// for those, any() for the rest, which a kernel then runs with the kind read per vector
// (ActMapAny, or its general chain). A kernel's loops are compiled once per kind passed to
// fixed: each of the other kinds, compiled for every depthwise and small-C variant at every
// ISA, made fused/conv_dw.cpp the slowest file of the build.
template <class Fixed, class Any>
inline decltype(auto) with_common_act_kind(ActKind kind, Fixed&& fixed, Any&& any) {
  return with_act_kind(kind, [&](auto k) -> decltype(auto) {
    using K = ActKind;
    constexpr K k0 = decltype(k)::value;
    if constexpr (k0 == K::relu || k0 == K::clip || k0 == K::leaky_relu || k0 == K::hardswish || k0 == K::silu)
      return fixed(k);
    else
      return any();
  });
}

template <class Arch>
inline float activate_scalar(const Activation& a, float v) {
  // The tail uses the same code on a one-lane view: broadcast, compute, take lane 0.
  return activate<Arch>(a, fbatch<Arch>(v)).get(0);
}

// a <op> b for one batch: the binary post-op / chain step, as naive's apply_binary.
template <class Arch>
fbatch<Arch> binary_op(BinaryKind kind, fbatch<Arch> a, fbatch<Arch> b) {
  switch (kind) {
    case BinaryKind::add: return a + b;
    case BinaryKind::sub: return a - b;
    case BinaryKind::mul: return a * b;
    case BinaryKind::div: return a / b;
  }
  return a;
}

// An activation with its kind K fixed, as a kernel's accumulator map (the fused stage's chain
// when, after folding, it is one activation: MobileNet's dw + BN + ReLU6, a stem's conv + BN +
// ReLU / ReLU6). Every kernel's map form: a row chunk's NV vectors in place, a tile of KC x NV
// in place (the small-C kernels, the conv + pool stem), and one NHWC vector by value.
// The by-value form runs relu and clip as MAXPS / MINPS (clamp_nan, the same lanes NaN
// included) below AVX-512: fewer instructions in the NHWC depthwise row loop and in the tiles
// (the AVX2 stems measured faster with them); the NCHW row chunks measured slower with them and
// keep activate_k's selects.
template <class Arch, ActKind K>
struct ActMap {
  Activation act;
  template <class B, int NV>
  void operator()(B (&acc)[NV], std::int64_t, std::int64_t) const {
#pragma GCC unroll 16
    for (int v = 0; v < NV; ++v) acc[v] = activate_k<K, Arch>(act, acc[v]);
  }
  template <class B, int KC, int NV>
  void operator()(B (&acc)[KC][NV], std::int64_t pix, std::int64_t valid) const {
    // Unrolled, so that a tile's accumulators stay registers (a loop indexes them in memory).
    // Each vector by value (see above).
#pragma GCC unroll 32
    for (int u = 0; u < KC; ++u)
#pragma GCC unroll 16
      for (int v = 0; v < NV; ++v) acc[u][v] = (*this)(acc[u][v], pix, valid, 0);
  }
  fbatch<Arch> operator()(fbatch<Arch> acc, std::int64_t, std::int64_t, std::int64_t) const {
    using B = fbatch<Arch>;
    if constexpr (K == ActKind::clip && isa_of<Arch>() != Isa::avx512)
      return clamp_nan<Arch>(acc, B(act.alpha), B(act.beta));  // alpha <= beta: validated
    else if constexpr (K == ActKind::relu && isa_of<Arch>() != Isa::avx512)
      return vmax<Arch>(B(0.f), acc);
    else
      return activate_k<K, Arch>(act, acc);
  }
};

// ActMap with the kind read per vector (activate): the kernel's map for the kinds
// with_common_act_kind leaves to any().
template <class Arch>
struct ActMapAny {
  Activation act;
  template <class B, int NV>
  void operator()(B (&acc)[NV], std::int64_t, std::int64_t) const {
    for (int v = 0; v < NV; ++v) acc[v] = activate<Arch>(act, acc[v]);
  }
  template <class B, int KC, int NV>
  void operator()(B (&acc)[KC][NV], std::int64_t, std::int64_t) const {
    for (int u = 0; u < KC; ++u)
      for (int v = 0; v < NV; ++v) acc[u][v] = activate<Arch>(act, acc[u][v]);
  }
  fbatch<Arch> operator()(fbatch<Arch> acc, std::int64_t, std::int64_t, std::int64_t) const {
    return activate<Arch>(act, acc);
  }
};

}  // namespace OPFUSE_SIMD_NS
}  // namespace opfuse::simd
