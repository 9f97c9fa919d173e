// simd/eltwise.cpp - elementwise ops, vectorized.
//
// naive: one scalar loop through logical indices, one std:: call per element.
// simd:  the tensors of a unary op share shape and layout, so the op is a flat loop over
//        numel() floats: full xsimd batches (16 floats on AVX-512, 8 on AVX2, 4 on SSE2), a
//        scalar tail, and OpenMP threads over cache-line-aligned chunks. The activation is a
//        branch-free select, so NaN propagates exactly as in naive (comparisons with NaN are
//        false and select keeps x).
// fused: the same per-batch activation code is reused inside GEMM/conv epilogues and chains.
#include <cassert>

#include "simd/activation.hpp"
#include "simd/common.hpp"

namespace opfuse::simd {

template <class Arch>
void Unary::operator()(Arch, const KernelArgs& args) const {
  using B = fbatch<Arch>;
  constexpr std::int64_t W = B::size;
  const Activation act = args.desc->p<UnaryParams>().act;
  const float* x = args.in[0]->data();
  float* y = args.out[0]->mutable_data();
  const std::int64_t n = args.in[0]->numel();
  // x and y share shape and layout (validated), so logical order does not matter: flat loop.
  parallel_for(n, args.threads, 16 * W, [&](std::int64_t b, std::int64_t e) {
    std::int64_t i = b;
    for (; i + W <= e; i += W) activate<Arch>(act, B::load_unaligned(x + i)).store_unaligned(y + i);
    for (; i < e; ++i) y[i] = activate_scalar<Arch>(act, x[i]);  // scalar tail
  });
}

OPFUSE_SIMD_INSTANTIATE(Unary);

}  // namespace opfuse::simd
