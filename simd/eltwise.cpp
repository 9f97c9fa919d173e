// simd/eltwise.cpp - elementwise ops, vectorized: unary activations, broadcasting binary ops,
// batchnorm and eltwise chains.
//
// naive: one scalar loop through logical indices, one std:: call per element, the batchnorm
//        formula (with its square root) evaluated per element.
// simd:  every loop runs over memory, not over logical indices:
//        - unary: x and y share shape and layout, so the op is a flat loop over numel() floats:
//          full xsimd batches (16 floats on AVX-512, 8 on AVX2, 4 on SSE2) and a scalar tail. The
//          activation kind is picked once per call (with_act_kind), so the loop body is branch-
//          free; sigmoid/tanh/GELU/SiLU use the polynomial exp/tanh/erf of simd/vmath.hpp.
//        - binary: plan_broadcast (simd/shared/eltwise_supports.cpp) orders the dims by the
//          output's memory order and merges every run that is contiguous for all three tensors.
//          Same shapes collapse to one flat loop; a scalar or per-channel operand becomes a
//          splat (NCHW: one constant per H*W plane) or a repeating row (NHWC: a C-long row);
//          anything else walks the outer dims with an odometer and vectorizes the innermost
//          one. An operand that is strided along the innermost dim (mixed layouts) is declined
//          and served by naive.
//        - batchnorm: a = scale / sqrt(var + eps) and b = bias - mean * a are folded once per
//          call into the workspace (2C floats), so the hot loop is one FMA per element: per
//          H*W plane with a, b splatted (NCHW) or per C-long row with a, b loaded (NHWC, rank 2).
//        - eltwise_chain: one vector pass per step (the first reads x, later ones read y): the
//          same s passes as naive, just vectorized; the fused stage makes it one pass.
//        OpenMP splits the outer loop into cache-line-aligned chunks (parallel_for). Every output
//        element is read before it is written at the same index, so y may alias x (unary,
//        batchnorm, chain) or a same-shaped operand (binary), as allows_inplace says.
// Measured (opfuse-bench, 64 MiB tensors, 1 thread): see reports/ and the bench output; the
// memory-bound ops run at the single-core stream bandwidth, plain stores beating streaming ones.
#include <cassert>
#include <cmath>
#include <cstring>
#include <type_traits>

#include "simd/activation.hpp"
#include "simd/common.hpp"
#include "simd/vmath.hpp"

namespace opfuse::simd {
inline namespace OPFUSE_SIMD_NS {
namespace {

// Elements per parallel chunk: big enough that a thread's share dwarfs the fork cost.
constexpr std::int64_t kGrain = 4096;
// Outputs of at least this many floats (16 MiB) are written with non-temporal (streaming) stores:
// they cannot stay in cache anyway, and a plain store first reads the line it overwrites (read
// for ownership), so streaming cuts relu's DRAM traffic from 3 to 2 bytes per byte of output.
// Smaller outputs keep plain stores so the next op finds them in cache.
constexpr std::int64_t kStreamMin = std::int64_t{1} << 22;

// Runs body(i0, i1, aligned) over [0, n): a scalar-width head up to the first address of y that is
// batch-aligned (only when streaming), then the rest. body handles its own vector loop and tail.
template <class Arch, class Body>
inline void with_stream_head(bool stream, float* y, std::int64_t n, Body&& body) {
  if (!stream) return body(std::int64_t{0}, n, false);
  constexpr std::size_t bytes = sizeof(float) * fbatch<Arch>::size;
  const auto misalign = reinterpret_cast<std::uintptr_t>(y) % bytes;
  std::int64_t head = misalign ? static_cast<std::int64_t>((bytes - misalign) / sizeof(float)) : 0;
  if (misalign % sizeof(float)) head = n;  // not even float-aligned: no streaming
  head = head < n ? head : n;
  body(std::int64_t{0}, head, false);
  body(head, n, true);
  _mm_sfence();  // order the streaming stores before whatever the caller does next
}

// y[i] = act(x[i]) for i in [0, n), kind fixed at compile time; Stream: y is batch-aligned.
template <ActKind K, bool Stream, class Arch>
void act_run(const Activation& act, const float* x, float* y, std::int64_t n) {
  using B = fbatch<Arch>;
  constexpr std::int64_t W = B::size;
  auto store = [](float* p, B v) {
    if constexpr (Stream)
      store_stream<Arch>(p, v);
    else
      v.store_unaligned(p);
  };
  // U batches per trip: U independent dependency chains through the polynomials. AVX-512 (32
  // registers) takes 4 (the fused chain measured 4 best there, 8 spills); AVX2 / SSE2 (16) 2.
  constexpr std::int64_t U = std::is_same_v<Arch, avx512> ? 4 : 2;
  std::int64_t i = 0;
  for (; i + U * W <= n; i += U * W) {
    B v[U];
#pragma GCC unroll 4
    for (std::int64_t u = 0; u < U; ++u) v[u] = B::load_unaligned(x + i + u * W);
#pragma GCC unroll 4
    for (std::int64_t u = 0; u < U; ++u) store(y + i + u * W, activate_k<K, Arch>(act, v[u]));
  }
  for (; i + W <= n; i += W) store(y + i, activate_k<K, Arch>(act, B::load_unaligned(x + i)));
  for (; i < n; ++i) y[i] = activate_k<K, Arch>(act, B(x[i])).get(0);  // scalar tail
}

// The whole flat pass, threaded.
template <class Arch>
void act_pass(const Activation& act, const float* x, float* y, std::int64_t n, int threads) {
  with_act_kind(act.kind, [&](auto k) {
    constexpr ActKind K = decltype(k)::value;
    parallel_for(n, threads, kGrain, [&](std::int64_t b, std::int64_t e) {
      with_stream_head<Arch>(n >= kStreamMin, y + b, e - b, [&](std::int64_t i0, std::int64_t i1, bool aligned) {
        if (aligned)
          act_run<K, true, Arch>(act, x + b + i0, y + b + i0, i1 - i0);
        else
          act_run<K, false, Arch>(act, x + b + i0, y + b + i0, i1 - i0);
      });
    });
  });
}

template <BinaryKind K, class T>
inline T apply(T a, T b) {
  if constexpr (K == BinaryKind::add) return a + b;
  if constexpr (K == BinaryKind::sub) return a - b;
  if constexpr (K == BinaryKind::mul) return a * b;
  if constexpr (K == BinaryKind::div) return a / b;
}

template <class Fn>
inline decltype(auto) with_binary_kind(BinaryKind kind, Fn&& fn) {
  using K = BinaryKind;
  switch (kind) {
    case K::sub: return fn(std::integral_constant<K, K::sub>{});
    case K::mul: return fn(std::integral_constant<K, K::mul>{});
    case K::div: return fn(std::integral_constant<K, K::div>{});
    case K::add: break;
  }
  return fn(std::integral_constant<K, K::add>{});
}

// One contiguous run: y[i] = a[i*sa] <op> b[i*sb] with sa, sb in {0, 1} (compile time);
// Stream: y is batch-aligned, store non-temporally.
template <BinaryKind K, bool SplatA, bool SplatB, bool Stream, class Arch>
void binary_run(const float* a, const float* b, float* y, std::int64_t n) {
  using B = fbatch<Arch>;
  constexpr std::int64_t W = B::size;
  const B ca(a[0]), cb(b[0]);
  std::int64_t i = 0;
  for (; i + W <= n; i += W) {
    const B va = SplatA ? ca : B::load_unaligned(a + i);
    const B vb = SplatB ? cb : B::load_unaligned(b + i);
    if constexpr (Stream)
      store_stream<Arch>(y + i, apply<K>(va, vb));
    else
      apply<K>(va, vb).store_unaligned(y + i);
  }
  for (; i < n; ++i) y[i] = apply<K>(a[SplatA ? 0 : i], b[SplatB ? 0 : i]);  // scalar tail
}

// y = a <op> b over a plan from plan_broadcast (vectorizable).
template <class Arch>
void binary_pass(BinaryKind kind, const BroadcastPlan& plan, const float* a, const float* b, float* y, int threads) {
  const int r = plan.rank;
  const std::size_t last = static_cast<std::size_t>(r - 1);
  const std::int64_t inner = plan.inner();
  std::int64_t outer = 1;
  for (int d = 0; d + 1 < r; ++d) outer *= plan.dims[static_cast<std::size_t>(d)];
  const bool splat_a = plan.a[last] == 0, splat_b = plan.b[last] == 0;

  with_binary_kind(kind, [&](auto k) {
    constexpr BinaryKind K = decltype(k)::value;
    auto run_as = [&](auto stream, const float* ap, const float* bp, float* yp, std::int64_t n) {
      constexpr bool S = decltype(stream)::value;
      if (!splat_a && !splat_b)
        binary_run<K, false, false, S, Arch>(ap, bp, yp, n);
      else if (!splat_a)
        binary_run<K, false, true, S, Arch>(ap, bp, yp, n);
      else if (!splat_b)
        binary_run<K, true, false, S, Arch>(ap, bp, yp, n);
      else
        binary_run<K, true, true, S, Arch>(ap, bp, yp, n);
    };
    auto run = [&](const float* ap, const float* bp, float* yp, std::int64_t n) {
      run_as(std::false_type{}, ap, bp, yp, n);
    };
    if (outer == 1) {  // one run: split it across threads
      parallel_for(inner, threads, kGrain, [&](std::int64_t s, std::int64_t e) {
        with_stream_head<Arch>(inner >= kStreamMin, y + s, e - s, [&](std::int64_t i0, std::int64_t i1, bool al) {
          const float* ap = a + (splat_a ? 0 : s + i0);
          const float* bp = b + (splat_b ? 0 : s + i0);
          if (al)
            run_as(std::true_type{}, ap, bp, y + s + i0, i1 - i0);
          else
            run(ap, bp, y + s + i0, i1 - i0);
        });
      });
      return;
    }
    // Rows of `inner` elements; the outer dims are walked with an odometer from each chunk's start.
    const std::int64_t grain = inner >= kGrain ? 1 : kGrain / inner;
    parallel_for(outer, threads, grain, [&](std::int64_t s, std::int64_t e) {
      std::array<std::int64_t, kMaxRank> idx{};
      std::int64_t rem = s, oa = 0, ob = 0, oy = 0;
      for (int d = r - 2; d >= 0; --d) {
        const auto du = static_cast<std::size_t>(d);
        idx[du] = rem % plan.dims[du];
        rem /= plan.dims[du];
        oa += idx[du] * plan.a[du];
        ob += idx[du] * plan.b[du];
        oy += idx[du] * plan.y[du];
      }
      for (std::int64_t row = s; row < e; ++row) {
        run(a + oa, b + ob, y + oy, inner);
        for (int d = r - 2; d >= 0; --d) {  // odometer step
          const auto du = static_cast<std::size_t>(d);
          oa += plan.a[du];
          ob += plan.b[du];
          oy += plan.y[du];
          if (++idx[du] < plan.dims[du]) break;
          oa -= plan.a[du] * plan.dims[du];
          ob -= plan.b[du] * plan.dims[du];
          oy -= plan.y[du] * plan.dims[du];
          idx[du] = 0;
        }
      }
    });
  });
}

// y = x * a[c] + b[c] over one plane of n elements (a, b splatted): NCHW. Stream: y is
// batch-aligned, store non-temporally.
template <bool Stream, class Arch>
void bn_plane(const float* x, float* y, std::int64_t n, float a, float b) {
  using B = fbatch<Arch>;
  constexpr std::int64_t W = B::size;
  const B va(a), vb(b);
  std::int64_t i = 0;
  for (; i + W <= n; i += W) {
    if constexpr (Stream)
      store_stream<Arch>(y + i, xsimd::fma(B::load_unaligned(x + i), va, vb));
    else
      xsimd::fma(B::load_unaligned(x + i), va, vb).store_unaligned(y + i);
  }
  for (; i < n; ++i) y[i] = xsimd::fma(B(x[i]), va, vb).get(0);  // scalar tail, same rounding
}

// y[c] = x[c] * a[c] + b[c] over one row of C channels: NHWC and rank 2.
template <class Arch>
void bn_row(const float* x, float* y, std::int64_t c, const float* a, const float* b) {
  using B = fbatch<Arch>;
  constexpr std::int64_t W = B::size;
  std::int64_t i = 0;
  for (; i + W <= c; i += W)
    xsimd::fma(B::load_unaligned(x + i), B::load_unaligned(a + i), B::load_unaligned(b + i)).store_unaligned(y + i);
  for (; i < c; ++i) y[i] = xsimd::fma(B(x[i]), B(a[i]), B(b[i])).get(0);
}

}  // namespace

// ---- test entry point: the vector math of this ISA over an array ------------------------------
void vmath_eval(VmathFn fn, const float* x, float* y, std::int64_t n) {
  using B = fbatch<OPFUSE_SIMD_ARCH>;
  constexpr std::int64_t W = B::size;
  auto loop = [&](auto f) {
    std::int64_t i = 0;
    for (; i + W <= n; i += W) f(B::load_unaligned(x + i)).store_unaligned(y + i);
    for (; i < n; ++i) y[i] = f(B(x[i])).get(0);
  };
  using A = OPFUSE_SIMD_ARCH;
  switch (fn) {
    case VmathFn::exp: loop([](B v) { return vmath::exp<A>(v); }); break;
    case VmathFn::tanh: loop([](B v) { return vmath::tanh<A>(v); }); break;
    case VmathFn::erf: loop([](B v) { return vmath::erf<A>(v); }); break;
    case VmathFn::sigmoid: loop([](B v) { return vmath::sigmoid<A>(v); }); break;
    case VmathFn::gelu_erf: loop([](B v) { return vmath::gelu_erf<A>(v); }); break;
    case VmathFn::gelu_tanh: loop([](B v) { return vmath::gelu_tanh<A>(v); }); break;
    case VmathFn::silu: loop([](B v) { return vmath::silu<A>(v); }); break;
  }
}

}  // namespace OPFUSE_SIMD_NS

// ---- kernels -------------------------------------------------------------------------------

template <class Arch>
void Unary::operator()(Arch, const KernelArgs& args) const {
  const Activation act = args.desc->p<UnaryParams>().act;
  // x and y share shape and layout (validated), so logical order does not matter: flat loop.
  act_pass<Arch>(act, args.in[0]->data(), args.out[0]->mutable_data(), args.in[0]->numel(), args.threads);
}

template <class Arch>
void Binary::operator()(Arch, const KernelArgs& args) const {
  const Tensor& a = *args.in[0];
  const Tensor& b = *args.in[1];
  const Tensor& y = *args.out[0];
  const BroadcastPlan plan = plan_broadcast(y.desc(), a.desc(), b.desc());
  assert(plan.vectorizable && "binary_supports() lets only these through");
  binary_pass<Arch>(binary_kind_of(args.desc->op), plan, a.data(), b.data(), y.mutable_data(), args.threads);
}

template <class Arch>
std::size_t Batchnorm::workspace(Arch, const OpDesc& desc) {
  return 2 * static_cast<std::size_t>(desc.inputs[0].shape[1]);  // a (C) and b (C)
}

template <class Arch>
Status Batchnorm::prepare(Arch, const OpDesc&, const Context&, const Tensor* const*, std::shared_ptr<void>&) {
  return Status::ok();  // the statistics may be runtime inputs: folded per call, in execute
}

template <class Arch>
void Batchnorm::operator()(Arch, const KernelArgs& args) const {
  const Tensor& x = *args.in[0];
  const Tensor& y = *args.out[0];
  const float eps = args.desc->p<BatchnormParams>().epsilon;
  const std::int64_t C = x.dim(1);
  // x is (N, C, ...); scale, bias, mean, var are (C). Fold them: y = x * a[c] + b[c].
  float* fa = args.workspace;
  float* fb = args.workspace + C;
  const float *scale = args.in[1]->data(), *bias = args.in[2]->data(), *mean = args.in[3]->data(),
              *var = args.in[4]->data();
  for (std::int64_t c = 0; c < C; ++c) {
    fa[c] = scale[c] / std::sqrt(var[c] + eps);
    fb[c] = bias[c] - mean[c] * fa[c];
  }
  const float* xp = x.data();
  float* yp = y.mutable_data();
  const std::int64_t n = x.numel();
  if (x.strides()[1] == 1) {
    // Channels innermost (NHWC, rank 2, or 1x1 spatial): rows of C.
    const std::int64_t rows = n / C;
    parallel_for(rows, args.threads, C >= kGrain ? 1 : kGrain / C, [&](std::int64_t s, std::int64_t e) {
      for (std::int64_t r = s; r < e; ++r) bn_row<Arch>(xp + r * C, yp + r * C, C, fa, fb);
    });
  } else {
    // NCHW: N*C planes of S = H*W (or D*H*W) elements, one (a, b) per plane.
    const std::int64_t S = n / (x.dim(0) * C);
    const bool stream = n >= kStreamMin;  // rows (NHWC) keep plain stores: C-long rows are not aligned
    parallel_for(n / S, args.threads, S >= kGrain ? 1 : kGrain / S, [&](std::int64_t s, std::int64_t e) {
      for (std::int64_t p = s; p < e; ++p)
        with_stream_head<Arch>(stream, yp + p * S, S, [&](std::int64_t i0, std::int64_t i1, bool aligned) {
          const float* xs = xp + p * S + i0;
          const float a = fa[p % C], b = fb[p % C];
          if (aligned)
            bn_plane<true, Arch>(xs, yp + p * S + i0, i1 - i0, a, b);
          else
            bn_plane<false, Arch>(xs, yp + p * S + i0, i1 - i0, a, b);
        });
    });
  }
}

template <class Arch>
void EltwiseChain::operator()(Arch, const KernelArgs& args) const {
  const Tensor& x = *args.in[0];
  const Tensor& y = *args.out[0];
  const float* src = x.data();
  float* yp = y.mutable_data();
  const std::int64_t n = x.numel();
  const Tensor* const* operand = args.in + 1;
  // x is (d0, ..., dr-1); every operand broadcasts to it; y is like x. One pass per step: the
  // first reads x, the rest read y (which may be x's buffer).
  for (const ChainStep& step : args.desc->p<ChainParams>().steps) {
    if (step.kind == ChainStep::Kind::unary) {
      act_pass<Arch>(step.act, src, yp, n, args.threads);
    } else {
      const Tensor& b = **operand++;
      const BroadcastPlan plan = plan_broadcast(x.desc(), x.desc(), b.desc());
      assert(plan.vectorizable && "chain_supports() lets only these through");
      binary_pass<Arch>(step.binary, plan, src, b.data(), yp, args.threads);
    }
    src = yp;
  }
  if (src != yp) std::memcpy(yp, src, static_cast<std::size_t>(n) * sizeof(float));  // empty chain: a copy
}

OPFUSE_SIMD_INSTANTIATE(Unary);
OPFUSE_SIMD_INSTANTIATE(Binary);
OPFUSE_SIMD_INSTANTIATE_PREPARED(Batchnorm);
OPFUSE_SIMD_INSTANTIATE(EltwiseChain);

}  // namespace opfuse::simd
