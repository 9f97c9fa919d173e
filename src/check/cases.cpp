// src/check/cases.cpp - the case generators: one list of edge cases per op, plus a few shapes
// drawn from the seed, and the input data of every case.
//
// Sizes are chosen for the edges of CONVENTIONS rule 11 and kept small, so that the naive
// stage checks all 24 ops in seconds: 1, primes (7, 13, 31), tile-1/tile/tile+1 around 16, 32
// and 64, and non-multiples of the 16-float vector width. Variants (+unaligned, +inplace,
// +nan, +inf) are set on a few cases per op.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <set>

#include "check/check.hpp"

namespace opfuse::check {

// ---- random numbers ---------------------------------------------------------------------------

std::uint64_t Rng::next() {
  // splitmix64: a full-period 64-bit generator, the same sequence everywhere.
  std::uint64_t z = (s_ += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

float Rng::uniform(float lo, float hi) {
  const float u = static_cast<float>(next() >> 40) * 0x1p-24f;  // [0, 1), 24 random bits
  return lo + (hi - lo) * u;
}

std::int64_t Rng::range(std::int64_t lo, std::int64_t hi) {
  return lo + static_cast<std::int64_t>(next() % static_cast<std::uint64_t>(hi - lo + 1));
}

std::uint64_t hash_name(std::string_view s) {
  std::uint64_t h = 0xcbf29ce484222325ull;
  for (char c : s) {
    h ^= static_cast<unsigned char>(c);
    h *= 0x100000001b3ull;
  }
  return h;
}

// ---- names ---------------------------------------------------------------------------------------

std::string variant_suffix(unsigned v) {
  std::string s;
  if (v & kUnaligned) s += "+unaligned";
  if (v & kInplace) s += "+inplace";
  if (v & kConst) s += "+const";
  if (v & kNan) s += "+nan";
  if (v & kInf) s += "+inf";
  return s;
}

std::string Case::id() const { return case_name(desc) + tag + variant_suffix(variants); }

std::string Case::name(std::string_view stage) const { return fmt::format("{}/{}/{}", op_name(desc.op), stage, id()); }

namespace {

constexpr Layout kNchw = Layout::nchw;
constexpr Layout kNhwc = Layout::nhwc;

TensorDesc td(Shape s, Layout l = kNchw) { return {s, l}; }

// Channel-wise operands (batchnorm post-ops) and rank >= 3 operands that have the output's full
// shape take the output's layout; broadcast operands are plain.
void add_post_op_inputs(OpDesc& d, const PostOps& post_ops, std::int64_t channels, const TensorDesc& out,
                        const std::vector<Shape>& binary_shapes) {
  std::size_t b = 0;
  for (const PostOp& p : post_ops) {
    if (p.kind == PostOp::Kind::batchnorm) {
      for (int i = 0; i < 4; ++i) d.inputs.push_back(td({channels}));
    } else if (p.kind == PostOp::Kind::binary) {
      if (b < binary_shapes.size()) {
        const Shape s = binary_shapes[b++];
        d.inputs.push_back(td(s, s == out.shape ? out.layout : kNchw));
      } else {
        d.inputs.push_back(out);
      }
    }
  }
}

struct Cases {
  OpKind op;
  std::vector<Case> list;
  void add(OpDesc d, unsigned variants = 0) {
    Case c;
    c.desc = std::move(d);
    c.variants = variants;
    list.push_back(std::move(c));
  }
};

PostOp act(Activation a) { return PostOp::activation(a); }
PostOp act(ActKind k) { return PostOp::activation(Activation::of(k)); }

// ---- gemm -----------------------------------------------------------------------------------------

OpDesc gemm(std::int64_t m, std::int64_t n, std::int64_t k, GemmParams p = {}, Shape bias = {},
            std::vector<Shape> binary = {}) {
  OpDesc d{OpKind::gemm, {}, {}};
  d.inputs.push_back(p.trans_a ? td({k, m}) : td({m, k}));
  d.inputs.push_back(p.trans_b ? td({n, k}) : td({k, n}));
  if (bias.rank > 0) {
    p.has_bias = true;
    d.inputs.push_back(td(bias));
  }
  add_post_op_inputs(d, p.post_ops, n, td({m, n}), binary);
  d.params = p;
  return d;
}

GemmParams gp(bool ta, bool tb, float alpha = 1.f, float beta = 0.f, PostOps post = {}) {
  GemmParams p;
  p.trans_a = ta;
  p.trans_b = tb;
  p.alpha = alpha;
  p.beta = beta;
  p.post_ops = std::move(post);
  return p;
}

void gemm_cases(Cases& c, Rng& rng) {
  // Sizes: 1, primes, around the 16/32/64 tiles, N = 1 (a matrix-vector product), tall K.
  const std::int64_t sizes[][3] = {{1, 1, 1},    {7, 13, 31},  {16, 16, 16}, {15, 17, 33}, {31, 32, 33}, {33, 31, 17},
                                   {63, 64, 65}, {64, 64, 64}, {1, 64, 17},  {65, 1, 7},   {3, 100, 129}};
  for (const auto& s : sizes) {
    unsigned v = 0;
    if (s[0] == 15) v = kUnaligned;
    c.add(gemm(s[0], s[1], s[2]), v);
  }
  c.add(gemm(7, 13, 31), kNan);
  c.add(gemm(16, 16, 16), kInf);
  // Transposed operands.
  c.add(gemm(13, 7, 31, gp(true, false)));
  c.add(gemm(13, 7, 31, gp(false, true)));
  c.add(gemm(17, 33, 16, gp(true, true)), kUnaligned);
  // Transposed B packed W rows x W k steps through registers, with rows and k steps left over.
  c.add(gemm(20, 57, 45, gp(false, true)));
  c.add(gemm(20, 57, 45, gp(false, true)), kNan);
  // alpha / beta (beta != 0 reads the prior y).
  c.add(gemm(16, 17, 9, gp(false, false, 0.5f)));
  c.add(gemm(9, 16, 17, gp(false, false, 1.f, 1.f)));
  c.add(gemm(7, 13, 31, gp(true, false, 2.f, -0.5f)));
  // Bias shapes broadcast to (M, N).
  c.add(gemm(15, 17, 33, {}, {17}));
  c.add(gemm(7, 13, 31, {}, {1, 13}), kUnaligned);
  c.add(gemm(13, 7, 5, {}, {13, 1}));
  c.add(gemm(16, 16, 16, {}, {16, 16}));
  c.add(gemm(5, 3, 2, {}, {1}));
  // Post-op chains.
  c.add(gemm(16, 33, 17, gp(false, false, 1.f, 0.f, {PostOp::batchnorm(), PostOp::add(), act(ActKind::relu)}), {33}));
  c.add(gemm(7, 13, 31, gp(false, false, 1.f, 0.f, {act(ActKind::relu)})));
  c.add(gemm(31, 17, 16, gp(false, false, 1.f, 0.f, {act(ActKind::gelu_erf)})));
  c.add(gemm(13, 16, 7, gp(false, true, 1.f, 0.f, {PostOp::batchnorm()})));
  c.add(gemm(15, 17, 33, gp(false, false, 1.f, 0.f, {PostOp::add(), act(Activation::relu6())}), {}, {{1, 17}}));
  c.add(gemm(30, 70, 20, gp(false, false, 1.f, 0.f, {PostOp::add()})));
  c.add(gemm(30, 70, 20, gp(false, false, 1.f, 0.f, {act(Activation::relu6())})), kNan);
  c.add(gemm(17, 15, 9, gp(false, false, 1.f, 0.f, {PostOp::binary_op(BinaryKind::mul), act(ActKind::sigmoid)})));
  c.add(gemm(9, 16, 17, gp(false, false, 1.f, 1.f, {PostOp::batchnorm(), PostOp::add(), act(ActKind::relu)}), {16}));
  // Weights bound at prepare (packed once), and problems big enough for threaded, multi-block paths.
  c.add(gemm(33, 31, 17), kConst);
  c.add(gemm(13, 7, 31, gp(false, true)), kConst);
  c.add(gemm(16, 33, 17, gp(false, false, 1.f, 0.f, {PostOp::batchnorm(), PostOp::add(), act(ActKind::relu)}), {33}),
        kConst);
  c.add(gemm(200, 300, 600, gp(false, true)));
  c.add(gemm(200, 300, 600, gp(true, false, 1.f, 0.f, {act(ActKind::gelu_erf)}), {300}), kConst);
  c.add(gemm(131, 1030, 70), kConst | kUnaligned);
  c.add(gemm(8, 24, 40, gp(false, false, 1.f, 0.f, {act(ActKind::silu), act(Activation::leaky_relu(0.1f))}), {1, 24}));
  // Right edges of a few columns beside whole vectors (gemm_kernel.hpp's kColumnTiles), on row
  // tiles of mr - 2 .. mr rows (40 rows: 13 and 14 at AVX-512, 5 and 6 at AVX2): N = 49, 36, 83,
  // 66, 27 leave 17, 4, 19, 2, 11 columns of a 32-wide tile and 1, 4, 3, 2, 11 of a 16-wide one;
  // with bias, alpha / beta, trans_a, two k blocks, B bound at prepare and a chain.
  c.add(gemm(40, 49, 64, gp(false, false, 1.f, 0.f, {act(Activation::relu6())}), {40, 1}));
  c.add(gemm(28, 36, 50, gp(false, false, 0.5f, 1.f)));
  c.add(gemm(40, 83, 600, gp(true, false), {83}));
  c.add(gemm(40, 66, 33, gp(false, false, 1.f, 0.f, {PostOp::batchnorm(), PostOp::add(), act(ActKind::relu)}), {66}),
        kConst);
  c.add(gemm(12, 27, 20, gp(true, false)));
  // Few rows, B not bound (gemm_kernel.hpp's BPanels): B's micro-panels read in place or packed
  // one at a time - transposed B, rows more than a page apart (N > 1024), more row tiles than
  // AVX2's 6-row tiles read in place - each with a right edge and K split into two k blocks.
  c.add(gemm(120, 300, 1100, gp(false, true), {300}));
  c.add(gemm(110, 70, 1100, gp(false, false, 1.f, 0.f, {act(ActKind::gelu_erf)})));
  c.add(gemm(50, 1030, 40, gp(false, false, 1.f, 1.f)), kUnaligned);
  // At most 4 rows (sgemm_rows: B's rows streamed once, no packing): N tails, K % 4, trans_a,
  // alpha / beta, every bias shape, post-op chains in the epilogue, and two threads splitting
  // the columns (2 m n k above 4e6).
  c.add(gemm(1, 1000, 2048, {}, {1000}));
  c.add(gemm(2, 77, 13, gp(true, false, 0.5f, 1.f)), kUnaligned);
  c.add(gemm(3, 33, 6, {}, {3, 1}));
  c.add(gemm(4, 40, 9, {}, {4, 40}), kNan);
  c.add(gemm(4, 17, 5, {}, {1}));
  c.add(gemm(1, 300, 70, gp(false, false, 1.f, 0.f, {PostOp::batchnorm(), PostOp::add(), act(ActKind::gelu_erf)}),
             {300}));
  c.add(gemm(3, 45, 31, gp(false, false, 1.f, 1.f, {PostOp::binary_op(BinaryKind::mul), act(ActKind::sigmoid)})));
  c.add(gemm(2, 2050, 1100, gp(false, false, 1.f, 0.f, {act(ActKind::relu)}), {2050}));
  // Two threads splitting K into chunks of uneven length, with trans_a and beta.
  c.add(gemm(3, 700, 1030, gp(true, false, 1.f, 1.f), {3, 1}));
  c.add(gemm(1, 64, 17, gp(false, true)), kConst);  // B bound at prepare: the BLIS path
  // Transposed B (n x k rows: dot products), with trans_a, tails of k and n, chains, threads.
  c.add(gemm(1, 1000, 2048, gp(false, true), {1000}));
  // One row of A: two vectors of each B row per step, then a tail of single vectors (K = 77),
  // an odd column count, trans_a gathering A.
  c.add(gemm(1, 35, 77, gp(true, true, 1.f, 0.f, {act(ActKind::relu)}), {35}));
  c.add(gemm(2, 7, 19, gp(false, true)), kNan);
  c.add(gemm(3, 37, 50, gp(true, true, 0.5f, 1.f)), kUnaligned);
  c.add(gemm(4, 33, 16, gp(false, true, 1.f, 0.f, {PostOp::batchnorm(), PostOp::add(), act(ActKind::silu)}), {4, 1}));
  c.add(gemm(2, 2050, 1100, gp(false, true, 1.f, 0.f, {act(ActKind::gelu_tanh)})));
  c.add(gemm(4, 530, 1000, gp(false, true, 0.5f, 1.f), {530}), kUnaligned);
  // Drawn from the seed.
  for (int i = 0; i < 3; ++i) {
    const std::int64_t m = rng.range(1, 70), n = rng.range(1, 70), k = rng.range(1, 70);
    GemmParams p = gp(rng.range(0, 1) == 1, rng.range(0, 1) == 1);
    Shape bias;
    if (rng.range(0, 1)) bias = Shape{n};
    if (rng.range(0, 1)) p.post_ops = {act(ActKind::relu)};
    c.add(gemm(m, n, k, p, bias));
  }
}

// ---- conv2d ---------------------------------------------------------------------------------------

struct ConvSpec {
  std::int64_t n, c, h, w, k, r, s;
  std::int64_t stride = 1, pad = 0, dil = 1, groups = 1;
  Layout layout = kNchw;
};

OpDesc conv(const ConvSpec& s, bool bias = false, PostOps post = {}, std::vector<Shape> binary = {},
            std::array<std::int64_t, 4> pads = {-1, -1, -1, -1}, std::array<std::int64_t, 2> strides = {0, 0}) {
  Conv2dParams p;
  p.stride_h = strides[0] ? strides[0] : s.stride;
  p.stride_w = strides[1] ? strides[1] : s.stride;
  p.dilation_h = p.dilation_w = s.dil;
  if (pads[0] >= 0) {
    p.pad_top = pads[0], p.pad_left = pads[1], p.pad_bottom = pads[2], p.pad_right = pads[3];
  } else {
    p.pad_top = p.pad_left = p.pad_bottom = p.pad_right = s.pad;
  }
  p.groups = s.groups;
  p.has_bias = bias;
  p.post_ops = std::move(post);
  OpDesc d{OpKind::conv2d, {}, {}};
  d.inputs.push_back(td({s.n, s.c, s.h, s.w}, s.layout));
  d.inputs.push_back(td({s.k, s.c / s.groups, s.r, s.s}));
  if (bias) d.inputs.push_back(td({s.k}));
  const auto out_dim = [](std::int64_t in, std::int64_t lo, std::int64_t hi, std::int64_t k, std::int64_t dil,
                          std::int64_t st) { return (in + lo + hi - dil * (k - 1) - 1) / st + 1; };
  const Shape out{s.n, s.k, out_dim(s.h, p.pad_top, p.pad_bottom, s.r, s.dil, p.stride_h),
                  out_dim(s.w, p.pad_left, p.pad_right, s.s, s.dil, p.stride_w)};
  add_post_op_inputs(d, p.post_ops, s.k, td(out, s.layout), binary);
  d.params = p;
  return d;
}

void conv_cases(Cases& c, Rng& rng) {
  const PostOps bn_add_relu = {PostOp::batchnorm(), PostOp::add(), act(ActKind::relu)};
  // 1x1 convolutions (a GEMM over pixels), incl. 1x1 spatial.
  c.add(conv({1, 16, 7, 7, 32, 1, 1}), kInf);
  c.add(conv({1, 16, 7, 7, 32, 1, 1}));
  c.add(conv({3, 32, 1, 1, 64, 1, 1}));
  c.add(conv({1, 16, 5, 5, 8, 1, 1, 1, 0, 1, 4}));  // grouped 1x1
  // 49 pixels, 40 output channels: the NCHW GEMM's right edge of single columns (see gemm).
  c.add(conv({1, 24, 7, 7, 40, 1, 1}, true, {PostOp::batchnorm(), act(Activation::relu6())}));
  // 3x3, the CONVENTIONS example, and stride 2 without padding on an even size.
  c.add(conv({1, 3, 7, 7, 5, 3, 3, 2, 1}));
  c.add(conv({1, 3, 7, 7, 5, 3, 3, 2, 1}), kUnaligned);
  c.add(conv({2, 8, 13, 13, 16, 3, 3, 1, 1}, true));
  c.add(conv({2, 8, 13, 13, 16, 3, 3, 1, 1}, true), kNan);
  c.add(conv({1, 8, 8, 8, 8, 3, 3, 2, 0}));
  c.add(conv({1, 1, 7, 7, 1, 3, 3, 1, 1}));
  // 5x5 and the ResNet stem's 7x7 stride 2 pad 3.
  c.add(conv({1, 6, 11, 11, 7, 5, 5, 1, 2}));
  c.add(conv({1, 3, 31, 31, 8, 7, 7, 2, 3}, true));
  // Dilation 2, asymmetric pads, rectangular kernels and strides.
  c.add(conv({1, 4, 13, 13, 4, 3, 3, 1, 2, 2}));
  c.add(conv({1, 5, 9, 11, 7, 3, 3}, false, {}, {}, {0, 1, 1, 2}));
  c.add(conv({1, 4, 8, 10, 6, 1, 3}, false, {}, {}, {0, 1, 0, 1}));
  c.add(conv({1, 4, 9, 8, 6, 3, 1}, false, {}, {}, {1, 0, 1, 0}, {2, 1}));
  // Groups and depthwise.
  c.add(conv({1, 8, 7, 7, 12, 3, 3, 1, 1, 1, 2}));
  c.add(conv({1, 16, 13, 13, 16, 3, 3, 1, 1, 1, 16}));
  c.add(conv({2, 17, 12, 12, 17, 3, 3, 2, 1, 1, 17}, true));
  // Stride-2 depthwise rows long enough for the vector deinterleave of every ISA, odd and even
  // widths, with and without padding.
  c.add(conv({1, 8, 37, 37, 8, 3, 3, 2, 1, 1, 8}, true, {PostOp::batchnorm(), act(Activation::relu6())}));
  c.add(conv({1, 8, 36, 70, 8, 3, 3, 2, 0, 1, 8}));
  // Stride 2 straight from x's rows (dw3s2_row): no top padding, extra bottom and right
  // padding (the last output row and column read past the plane), a residual add on the
  // accumulators.
  c.add(conv({1, 8, 20, 45, 8, 3, 3, 2, 1, 1, 8}, true, {PostOp::batchnorm(), act(Activation::relu6())}, {},
             {0, 1, 1, 2}));
  c.add(conv({2, 16, 35, 35, 16, 3, 3, 2, 1, 1, 16}, false, {PostOp::batchnorm(), PostOp::add(), act(ActKind::relu)}));
  // Output channels around the 16/32/64 tiles; input channels not a multiple of 16.
  for (std::int64_t k : {15, 16, 17, 31, 32, 33, 63, 64, 65}) c.add(conv({1, 16, 6, 6, k, 3, 3, 1, 1}));
  c.add(conv({1, 17, 5, 5, 33, 3, 3, 1, 1}));
  // More input channels than one weight block of the direct kernel (simd::direct_cblock: 128,
  // 256 and 512 channels on AVX-512, AVX2 and SSE2 here): the later blocks continue from the
  // partial sums stored in y, the epilogue runs after the last.
  c.add(conv({1, 520, 5, 5, 20, 3, 3, 1, 1}, true));
  c.add(conv({1, 520, 5, 5, 20, 3, 3, 1, 1, 1, 1, kNhwc}, true, bn_add_relu));
  // NHWC.
  c.add(conv({1, 16, 7, 7, 32, 1, 1, 1, 0, 1, 1, kNhwc}));
  c.add(conv({1, 3, 13, 13, 16, 3, 3, 2, 1, 1, 1, kNhwc}), kUnaligned);
  c.add(conv({1, 32, 9, 9, 32, 3, 3, 1, 1, 1, 32, kNhwc}));
  c.add(conv({2, 17, 7, 7, 33, 3, 3, 1, 1, 1, 1, kNhwc}, true));
  c.add(conv({1, 8, 7, 7, 12, 3, 3, 1, 1, 1, 2, kNhwc}));
  // Post-op chains.
  c.add(conv({1, 8, 7, 7, 16, 3, 3, 1, 1}, true, bn_add_relu));
  c.add(conv({1, 8, 7, 7, 16, 3, 3, 1, 1}, false, {act(Activation::relu6())}));
  c.add(conv({1, 16, 6, 6, 24, 1, 1}, true, {act(ActKind::silu)}));
  c.add(conv({1, 16, 9, 9, 16, 3, 3, 2, 1, 1, 16}, false, {PostOp::batchnorm(), act(Activation::relu6())}));
  c.add(conv({2, 8, 6, 6, 16, 3, 3, 1, 1, 1, 1, kNhwc}, true, bn_add_relu, {{1, 16, 1, 1}}));
  // 7 output rows over 5+ channel blocks: on two threads the direct kernels split the channel
  // blocks, not the rows (direct_split_channels); NCHW (each thread transposes its channels of
  // the y tile) and NHWC.
  c.add(conv({1, 32, 7, 7, 264, 3, 3, 1, 1}, true, bn_add_relu));
  c.add(conv({1, 32, 7, 7, 264, 3, 3, 1, 1, 1, 1, kNhwc}, false, {PostOp::batchnorm(), act(ActKind::relu)}));
  // Depthwise with chains the fused stage runs on its accumulators: BN + ReLU6 (MobileNet), bias
  // and two folded BNs, a residual over the full output (two images: the operand offset per
  // image), a per-channel operand, a BN after the activation (not folded), stride 2, rows of
  // 1-4 vectors, bound weights (folded at prepare), unaligned tensors and NaN / Inf.
  const PostOps bn_relu6 = {PostOp::batchnorm(), act(Activation::relu6())};
  c.add(conv({1, 24, 21, 21, 24, 3, 3, 1, 1, 1, 24}, false, bn_relu6));
  c.add(conv({1, 24, 21, 21, 24, 3, 3, 1, 1, 1, 24}, false, bn_relu6), kConst);
  c.add(conv({1, 24, 21, 21, 24, 3, 3, 1, 1, 1, 24}, false, bn_relu6), kUnaligned);
  c.add(conv({1, 24, 21, 21, 24, 3, 3, 1, 1, 1, 24}, false, bn_relu6), kNan);
  c.add(conv({1, 16, 70, 70, 16, 3, 3, 2, 1, 1, 16}, true, bn_relu6));
  // Few input channels, NCHW (the smallc kernels: phase-split input planes, 8 output
  // channels x 1-3 vectors of an output row): the MobileNet stem (3x3/2 + BN + ReLU6) on rows of
  // 75 outputs (a 3-vector chunk, then 2 vectors, the last partial) in two images, bound weights,
  // unaligned tensors with NaN; a residual per image; 10 and 7 output channels (a partial channel
  // block); stride 3; one channel, 5x5, rows of 130.
  c.add(conv({2, 3, 40, 150, 10, 3, 3, 2, 1}, true, bn_relu6));
  c.add(conv({2, 3, 40, 150, 10, 3, 3, 2, 1}, true, bn_relu6), kConst);
  c.add(conv({1, 3, 40, 150, 10, 3, 3, 2, 1}, false, bn_relu6), kUnaligned | kNan);
  c.add(conv({2, 2, 20, 70, 8, 3, 3, 1, 1}, true, bn_add_relu));
  c.add(conv({1, 4, 23, 47, 7, 3, 3, 3, 1}, false, {act(ActKind::silu)}));
  c.add(conv({1, 1, 30, 130, 5, 5, 5, 1, 2}, true));
  // The same planes on NHWC x and y (each input row split by channel, the fused kernel's
  // channels-in-lanes tile storing y as it lies): the MobileNet stem in two images, NaN in
  // unaligned tensors, a partial channel block at stride 3, and a residual, which the fused
  // kernel declines in NHWC.
  c.add(conv({2, 3, 40, 150, 10, 3, 3, 2, 1, 1, 1, kNhwc}, true, bn_relu6));
  c.add(conv({1, 3, 40, 150, 10, 3, 3, 2, 1, 1, 1, kNhwc}, false, bn_relu6), kUnaligned | kNan);
  c.add(conv({1, 4, 23, 47, 7, 3, 3, 3, 1, 1, 1, kNhwc}, false, {act(ActKind::silu)}));
  // The fused NHWC tile reads x in place where a tile's windows lie inside it, a zero-padded
  // patch elsewhere: a 7x7/2 stem of 70 channels (a partial block past 4 vectors), dilation 2
  // with uneven pads, a row narrower than one tile, and pads wider than the window.
  c.add(conv({1, 3, 29, 61, 70, 7, 7, 2, 3, 1, 1, kNhwc}, true, {act(ActKind::relu)}));
  c.add(conv({2, 2, 17, 45, 19, 3, 3, 1, 0, 2, 1, kNhwc}, false, {PostOp::batchnorm()}, {}, {1, 3, 2, 0}));
  c.add(conv({1, 3, 9, 5, 33, 3, 3, 1, 1, 1, 1, kNhwc}, true, bn_relu6), kNan);
  // 3 channels, 3x3: bound weights in two images with 40 channels (a partial last block past
  // whole tiles), and dilation 2.
  c.add(conv({2, 3, 30, 61, 40, 3, 3, 2, 1, 1, 1, kNhwc}, true, bn_relu6), kConst);
  c.add(conv({1, 3, 25, 50, 16, 3, 3, 1, 2, 2, 1, kNhwc}, false, {act(ActKind::relu)}), kNan);
  c.add(conv({1, 1, 6, 7, 16, 3, 2, 1, 0, 1, 1, kNhwc}, true, {act(ActKind::hardswish)}, {}, {4, 3, 3, 5}, {2, 3}));
  c.add(conv({2, 2, 20, 70, 8, 3, 3, 1, 1, 1, 1, kNhwc}, true, bn_add_relu));
  c.add(
      conv({1, 8, 11, 67, 8, 3, 3, 1, 1, 1, 8}, true, {PostOp::batchnorm(), PostOp::batchnorm(), act(ActKind::silu)}));
  c.add(conv({2, 12, 10, 10, 12, 3, 3, 1, 1, 1, 12}, true, bn_add_relu));
  c.add(conv({2, 12, 10, 10, 12, 3, 3, 1, 1, 1, 12}, true, bn_add_relu), kConst);
  c.add(conv({1, 12, 10, 10, 12, 3, 3, 1, 1, 1, 12}, false, {PostOp::binary_op(BinaryKind::mul), act(ActKind::relu)},
             {{1, 12, 1, 1}}));
  c.add(conv({1, 12, 9, 9, 12, 5, 5, 1, 2, 1, 12}, false, {act(ActKind::relu), PostOp::batchnorm()}));
  // ... and odd geometries: dilation 2, stride 3, asymmetric pads and strides, 1 x 1 outputs.
  c.add(conv({1, 8, 15, 15, 8, 3, 3, 1, 2, 2, 8}, true, bn_relu6));
  c.add(conv({2, 8, 17, 19, 8, 3, 3, 3, 1, 1, 8}, false, bn_add_relu));
  c.add(conv({1, 8, 9, 11, 8, 3, 5, 1, 0, 1, 8}, false, bn_relu6, {}, {0, 2, 1, 1}, {2, 1}));
  c.add(conv({1, 8, 3, 3, 8, 3, 3, 1, 0, 1, 8}, true, bn_relu6));
  // NHWC depthwise with chains: channels past whole vectors and past one 256-channel chunk of the
  // fused kernel's L1 buffer, a residual over two images, a per-channel operand, stride 2 with
  // dilation, bound weights, unaligned tensors and NaN / Inf.
  c.add(conv({1, 40, 9, 9, 40, 3, 3, 1, 1, 1, 40, kNhwc}, false, bn_relu6));
  c.add(conv({1, 40, 9, 9, 40, 3, 3, 1, 1, 1, 40, kNhwc}, false, bn_relu6), kConst);
  c.add(conv({1, 40, 9, 9, 40, 3, 3, 1, 1, 1, 40, kNhwc}, false, bn_relu6), kUnaligned);
  c.add(conv({1, 40, 9, 9, 40, 3, 3, 1, 1, 1, 40, kNhwc}, false, bn_relu6), kNan);
  c.add(conv({1, 300, 5, 5, 300, 3, 3, 1, 1, 1, 300, kNhwc}, true, bn_relu6));
  c.add(conv({2, 32, 8, 8, 32, 3, 3, 1, 1, 1, 32, kNhwc}, true, bn_add_relu));
  c.add(
      conv({1, 24, 8, 8, 24, 3, 3, 1, 1, 1, 24, kNhwc}, false, {PostOp::binary_op(BinaryKind::mul)}, {{1, 24, 1, 1}}));
  c.add(conv({1, 16, 15, 15, 16, 3, 3, 2, 2, 2, 16, kNhwc}, true, {act(ActKind::silu), PostOp::batchnorm()}));
  // Activations the depthwise and small-C kernels leave to their general chain
  // (simd::with_common_act_kind): sigmoid and GELU after NCHW depthwise at stride 1 (row pairs)
  // and 2, tanh after NHWC depthwise, GELU's tanh form and sigmoid on the small-C stem in NCHW
  // and NHWC.
  c.add(conv({1, 16, 11, 37, 16, 3, 3, 1, 1, 1, 16}, true, {PostOp::batchnorm(), act(ActKind::sigmoid)}));
  c.add(conv({1, 16, 14, 30, 16, 3, 3, 2, 1, 1, 16}, false, {act(ActKind::gelu_erf)}), kNan);
  c.add(conv({1, 40, 9, 9, 40, 3, 3, 1, 1, 1, 40, kNhwc}, true, {PostOp::batchnorm(), act(ActKind::tanh)}));
  c.add(conv({1, 3, 20, 50, 10, 3, 3, 2, 1}, true, {PostOp::batchnorm(), act(ActKind::gelu_tanh)}));
  c.add(conv({1, 3, 20, 50, 10, 3, 3, 2, 1, 1, 1, kNhwc}, false, {PostOp::batchnorm(), act(ActKind::sigmoid)}));
  // NHWC 3x3 windows inside the image (weights in registers) next to edge ones: wide rows, stride
  // 2, dilation, and rows too narrow for any interior window (width 2, stride 2, right pad 1).
  c.add(conv({2, 40, 12, 29, 40, 3, 3, 1, 1, 1, 40, kNhwc}, true, bn_add_relu));
  c.add(conv({1, 48, 11, 23, 48, 3, 3, 2, 1, 1, 48, kNhwc}, false, bn_relu6));
  c.add(conv({1, 20, 11, 23, 20, 3, 3, 1, 2, 2, 20, kNhwc}, false, bn_relu6));
  c.add(conv({1, 16, 5, 2, 16, 3, 3, 1, 0, 1, 16, kNhwc}, false, bn_relu6, {}, {1, 0, 1, 1}, {2, 2}));
  c.add(conv({1, 16, 5, 2, 16, 3, 3, 1, 0, 1, 16, kNhwc}, false, {}, {}, {1, 0, 1, 1}, {2, 2}));
  // Binary operands over the (p, q) plane in NCHW: varying along the rows only (the chain runs
  // row by row) and a dense plane broadcast over channels (rows merged into one run), each for
  // the depthwise, direct and 1x1 kernels.
  for (const Shape& o : {Shape{1, 1, 9, 1}, Shape{9, 9}}) {
    c.add(conv({2, 16, 9, 9, 16, 3, 3, 1, 1, 1, 16}, true, {PostOp::add(), act(ActKind::relu)}, {o}));
    c.add(conv({1, 8, 9, 9, 16, 3, 3, 1, 1}, false, {PostOp::add()}, {o}));
    c.add(conv({1, 16, 9, 9, 24, 1, 1}, false, {PostOp::batchnorm(), PostOp::add()}, {o}));
  }
  c.add(conv({1, 8, 5, 5, 16, 3, 3, 1, 1, 1, 1, kNhwc}, false, bn_add_relu), kUnaligned);
  // The direct convolution's tiles skip the taps that read only padding for all their pixels
  // (simd::DirectTiler): pads of 2 and 3 (one and two taps left at the corners), pads wider
  // than the window (corner outputs with no real tap: bias and chain only), more distinct top
  // and bottom rows than it keeps apart (pad 5 of a 7x7), dilation with pad, a one-column
  // image (no interior column), and NHWC residual tiles whose pixels are not consecutive
  // (edge columns: the chain one pixel run at a time).
  c.add(conv({1, 8, 5, 6, 16, 3, 3, 1, 2}, true, bn_add_relu));
  c.add(conv({1, 8, 5, 5, 16, 3, 3, 1, 4}, true, {PostOp::batchnorm(), act(Activation::relu6())}));
  c.add(conv({1, 16, 9, 8, 24, 7, 7, 1, 5}, true));
  c.add(conv({1, 8, 9, 9, 16, 3, 3, 1, 3, 2}));
  c.add(conv({1, 8, 6, 1, 16, 3, 3, 1, 1}, true));
  c.add(conv({1, 16, 14, 14, 64, 3, 3, 1, 1, 1, 1, kNhwc}, true, bn_add_relu));
  c.add(conv({1, 16, 7, 7, 32, 3, 3, 1, 1, 1, 1, kNhwc}, false, {PostOp::add()}), kConst);
  // 1x1 tiles wide enough for full register tiles (NCHW: >= 32 pixels; NHWC: >= 32 channels),
  // whose short chains (residual add, relu / relu6, both, none) run on the accumulators
  // (ChainEpilogue::apply_registers), next to edge tiles that take the L1 buffer.
  c.add(conv({1, 24, 9, 9, 20, 1, 1}, true, bn_add_relu));
  c.add(conv({1, 24, 9, 9, 20, 1, 1}, false, bn_relu6), kNan);
  c.add(conv({2, 16, 8, 8, 40, 1, 1}, true, {PostOp::add()}), kConst);
  c.add(conv({1, 16, 6, 6, 40, 1, 1, 1, 0, 1, 1, kNhwc}, true, bn_add_relu));
  c.add(conv({1, 16, 6, 6, 64, 1, 1, 1, 0, 1, 1, kNhwc}, false, bn_relu6), kNan);
  // An NCHW 1x1 whose image (C x PQ) outgrows L2 and whose weights outgrow the in-place A block:
  // B packed in L2-sized column blocks (conv1x1_nc_cap), several per image.
  c.add(conv({1, 512, 24, 24, 256, 1, 1}, true, bn_relu6));
  // Weights bound at prepare (transformed once), and problems big enough for threaded paths.
  c.add(conv({1, 8, 7, 7, 16, 3, 3, 1, 1}, true, bn_add_relu), kConst);
  c.add(conv({1, 16, 7, 7, 32, 1, 1}), kConst);
  c.add(conv({1, 16, 9, 9, 16, 3, 3, 2, 1, 1, 16}), kConst);
  c.add(conv({1, 17, 7, 7, 33, 3, 3, 1, 1, 1, 1, kNhwc}, true), kConst);
  c.add(conv({2, 32, 28, 28, 48, 3, 3, 1, 1}, true, {act(ActKind::relu)}), kConst);
  // NCHW 1x1 with the (scaled) weights packed at prepare (pack_a_all): two k blocks (C past
  // gemm_blocking's KC), more rows than one A block (MC), two images, on a team.
  c.add(conv({2, 1100, 5, 5, 300, 1, 1}, true, bn_relu6), kConst);
  c.add(conv({1, 64, 28, 28, 64, 1, 1, 1, 0, 1, 1, kNhwc}));
  c.add(conv({1, 48, 30, 30, 48, 3, 3, 1, 1, 1, 48}));
  // A pool post-op (always last): the ResNet stem's conv 7x7/2 + bn + relu + maxpool 3x3/2 pad 1
  // at small sizes, odd conv outputs (the floor-mode pool drops the last row / column), a pool
  // alone, asymmetric windows and pads, stride > kernel (conv rows no window reads), a
  // residual-shaped binary operand before the pool (the pre-pool conv output's shape), output
  // channels around the vector tiles, NHWC, groups / dilation (no fused kernel: simd's
  // composition), bound weights, NaN/Inf, and a threaded stem.
  const PostOps stem = {PostOp::batchnorm(), act(ActKind::relu), PostOp::maxpool(3, 2, 1)};
  c.add(conv({1, 3, 31, 31, 8, 7, 7, 2, 3}, true, stem));
  c.add(conv({1, 3, 31, 31, 8, 7, 7, 2, 3}, true, stem), kUnaligned);
  c.add(conv({1, 3, 31, 31, 8, 7, 7, 2, 3}, true, stem), kConst);
  c.add(conv({2, 3, 29, 27, 17, 7, 7, 2, 3}, false, stem), kNan);
  c.add(conv({1, 3, 29, 27, 16, 7, 7, 2, 3}, false, stem), kInf);
  c.add(conv({1, 3, 64, 64, 16, 7, 7, 2, 3}, false, stem), kNan);  // NaN in full vectors of the pools
  c.add(conv({1, 3, 40, 40, 32, 3, 3, 2, 1, 1, 1, kNhwc}, false, stem), kNan);
  c.add(conv({2, 3, 29, 27, 20, 7, 7, 2, 3, 1, 1, kNhwc}, false, stem), kNan);  // NHWC, two images, 20 channels
  c.add(conv({1, 3, 64, 64, 64, 7, 7, 2, 3}, false, stem));
  c.add(conv({1, 3, 64, 64, 64, 7, 7, 2, 3}, false, stem), kConst);
  c.add(conv({2, 3, 45, 45, 65, 7, 7, 2, 3}, true, stem));
  c.add(conv({1, 3, 70, 76, 20, 7, 7, 2, 3}, false, stem));  // pooled 18x19: 16-wide blocks + tails
  c.add(conv({1, 8, 9, 9, 16, 3, 3, 1, 1}, false, {PostOp::maxpool(2, 2, 0)}));
  c.add(conv({1, 8, 9, 9, 1, 3, 3, 1, 1}, false, {PostOp::maxpool(3, 1, 1)}));
  c.add(conv({1, 5, 12, 11, 33, 3, 3, 1, 1}, false, {act(ActKind::silu), PostOp::maxpool(1, 2, 0)}));
  c.add(conv({1, 4, 13, 10, 31, 3, 3, 1, 0}, true,
             {act(Activation::relu6()), PostOp::maxpool(PostOp::Window{3, 2, 2, 1, 1, 0, 0, 1})}));
  c.add(conv({1, 4, 10, 13, 15, 3, 5, 1, 0}, false, {PostOp::maxpool(PostOp::Window{2, 3, 1, 2, 0, 1, 1, 0})}, {},
             {1, 2, 0, 2}, {1, 2}));
  c.add(conv({2, 8, 6, 6, 16, 3, 3, 1, 1}, true,
             {PostOp::batchnorm(), PostOp::add(), act(ActKind::relu), PostOp::maxpool(3, 2, 1)}));
  c.add(conv({1, 8, 7, 7, 16, 3, 3, 1, 1}, false,
             {act(ActKind::relu), PostOp::batchnorm(), act(ActKind::tanh), PostOp::maxpool(2, 2, 1)}));
  c.add(conv({1, 8, 7, 7, 16, 3, 3, 1, 1}, false,
             {PostOp::batchnorm(), PostOp::batchnorm(), act(Activation::leaky_relu(0.1f)), PostOp::maxpool(3, 2, 1)}),
        kConst);
  c.add(conv({1, 3, 13, 13, 16, 3, 3, 2, 1, 1, 1, kNhwc}, true, stem));
  c.add(conv({1, 3, 13, 13, 16, 3, 3, 2, 1, 1, 1, kNhwc}, true, stem), kUnaligned | kConst);
  c.add(conv({2, 17, 9, 9, 40, 3, 3, 1, 1, 1, 1, kNhwc}, false, {act(ActKind::relu), PostOp::maxpool(3, 2, 1)}));
  c.add(conv({1, 8, 9, 9, 12, 3, 3, 1, 1, 1, 2}, false, {act(ActKind::relu), PostOp::maxpool(2, 2, 0)}));
  c.add(conv({1, 16, 13, 13, 16, 3, 3, 1, 1, 1, 16}, false, {PostOp::batchnorm(), PostOp::maxpool(3, 2, 1)}));
  c.add(conv({1, 4, 13, 13, 8, 3, 3, 1, 2, 2}, false, {PostOp::maxpool(3, 2, 1)}));
  // 64-channel blocks (the AVX-512 7x4 tile) with dilation (tap columns not contiguous) and
  // with an unpadded NHWC x read in place.
  c.add(conv({1, 5, 17, 17, 40, 3, 3, 1, 2, 2}, true, {act(ActKind::relu), PostOp::maxpool(3, 2, 1)}));
  c.add(conv({1, 8, 12, 12, 64, 3, 3, 1, 0, 1, 1, kNhwc}, false, {PostOp::batchnorm(), PostOp::maxpool(2, 2, 0)}));
  // Few NCHW input channels and a 3-wide stride-2 width window (the small-C path below AVX-512):
  // no left pad with a later batchnorm, and a left and right pad that clip the last window.
  c.add(conv({1, 3, 23, 21, 12, 3, 3, 1, 1}, false,
             {act(ActKind::relu), PostOp::batchnorm(), PostOp::maxpool(PostOp::Window{3, 3, 2, 2, 0, 0, 0, 0})}));
  c.add(conv({1, 2, 20, 25, 9, 5, 5, 2, 2}, true,
             {act(Activation::relu6()), PostOp::maxpool(PostOp::Window{2, 3, 2, 2, 0, 1, 0, 1})}),
        kNan);
  // Drawn from the seed.
  for (int i = 0; i < 3; ++i) {
    ConvSpec s{1, 1, 1, 1, 1, 1, 1};
    s.n = rng.range(1, 2);
    s.groups = rng.range(0, 3) == 0 ? rng.range(1, 4) : 1;
    s.c = s.groups * rng.range(1, 8);
    s.k = s.groups * rng.range(1, 12);
    s.r = rng.range(0, 2) * 2 + 1;
    s.s = rng.range(0, 2) * 2 + 1;
    s.dil = rng.range(1, 2);
    s.stride = rng.range(1, 2);
    s.pad = rng.range(0, (s.r - 1) / 2);
    s.h = rng.range(s.dil * (s.r - 1) + 1, 15);
    s.w = rng.range(s.dil * (s.s - 1) + 1, 15);
    s.layout = rng.range(0, 1) ? kNhwc : kNchw;
    c.add(conv(s, rng.range(0, 1) == 1));
  }
}

// ---- batchnorm, unary, binary ----------------------------------------------------------------

void batchnorm_cases(Cases& c) {
  const auto bn = [](Shape x, Layout l = kNchw, float eps = 1e-5f) {
    OpDesc d{OpKind::batchnorm, BatchnormParams{eps}, {td(x, l)}};
    for (int i = 0; i < 4; ++i) d.inputs.push_back(td({x[1]}));
    return d;
  };
  c.add(bn({1, 1, 1, 1}));
  c.add(bn({2, 7, 5, 5}));
  c.add(bn({2, 7, 5, 5}), kInplace);
  c.add(bn({1, 16, 4, 4}));
  c.add(bn({1, 17, 3, 3}, kNhwc));
  c.add(bn({1, 17, 3, 3}, kNhwc), kUnaligned);
  c.add(bn({3, 33}));
  c.add(bn({2, 13, 7}));
  c.add(bn({1, 4, 2, 3, 3}));
  c.add(bn({2, 64, 3, 3}, kNhwc));
  c.add(bn({1, 31, 16, 16}));
  c.add(bn({2, 7, 5, 5}), kNan);
  c.add(bn({1, 16, 4, 4}), kInf);
}

void unary_cases(Cases& c) {
  const OpKind op = c.op;
  const auto un = [op](Shape x, Layout l = kNchw, std::optional<Activation> a = std::nullopt) {
    OpDesc d{op, default_params(op), {td(x, l)}};
    if (a) d.params = UnaryParams{*a};
    return d;
  };
  // Lengths around the 16-float vector: 1, 7, 15, 16, 17, 2x33, 4x64, 3x65, then bigger.
  c.add(un({1}));
  c.add(un({7}));
  c.add(un({15}));
  c.add(un({16}), kInf);
  c.add(un({16}));
  c.add(un({17}));
  c.add(un({17}), kUnaligned);
  c.add(un({2, 33}));
  c.add(un({2, 33}), kInplace);
  c.add(un({4, 64}));
  c.add(un({3, 65}), kUnaligned | kInplace);
  c.add(un({2, 3, 13, 13}));
  c.add(un({2, 3, 13, 13}), kNan);
  c.add(un({1, 16, 5, 5}, kNhwc));
  c.add(un({1, 16, 5, 5}, kNhwc), kInplace);
  c.add(un({1, 3, 2, 4, 5}));
  // Parameter variants.
  std::vector<Activation> params;
  if (op == OpKind::clip) params = {Activation::clip(-0.5f, 0.5f), Activation::clip(-2.f, 1.f)};
  if (op == OpKind::leaky_relu) params = {Activation::leaky_relu(0.2f), Activation::leaky_relu(-1.5f)};
  if (op == OpKind::gelu) params = {Activation::of(ActKind::gelu_tanh)};
  for (const Activation& a : params) {
    c.add(un({33}, kNchw, a));
    c.add(un({2, 3, 7, 7}, kNchw, a), kUnaligned);
    c.add(un({2, 3, 7, 7}, kNchw, a), kInplace);
  }
}

void binary_cases(Cases& c) {
  const OpKind op = c.op;
  const auto bin = [op](Shape a, Shape b, Layout la = kNchw, Layout lb = kNchw) {
    return OpDesc{op, BinaryParams{}, {td(a, la), td(b, lb)}};
  };
  c.add(bin({1}, {1}));
  c.add(bin({17}, {17}));
  c.add(bin({17}, {17}), kUnaligned);
  c.add(bin({2, 3, 5, 7}, {2, 3, 5, 7}));
  c.add(bin({3, 65}, {3, 65}), kInplace);
  c.add(bin({2, 3, 5, 7}, {7}));
  c.add(bin({2, 3, 5, 7}, {7}), kInplace);
  c.add(bin({2, 3, 5, 7}, {7}), kNan);
  c.add(bin({2, 3, 5, 7}, {3, 1, 1}));
  c.add(bin({2, 16, 4, 4}, {1, 16, 1, 1}));
  c.add(bin({4, 33}, {1}));
  c.add(bin({4, 33}, {1}), kInf);
  c.add(bin({1, 7}, {5, 1}));  // both sides broadcast
  c.add(bin({1, 7}, {5, 1}), kUnaligned);
  c.add(bin({4, 1, 6}, {3, 1}));
  c.add(bin({1}, {2, 3}));  // a broadcasts
  c.add(bin({2, 16, 3, 3}, {2, 16, 3, 3}, kNhwc, kNhwc));
  c.add(bin({2, 16, 3, 3}, {2, 16, 3, 3}, kNhwc, kNhwc), kInplace);
  c.add(bin({2, 16, 3, 3}, {1, 16, 1, 1}, kNhwc, kNchw));
  c.add(bin({2, 16, 3, 3}, {2, 16, 3, 3}, kNchw, kNhwc));  // mixed layouts
  c.add(bin({1, 2, 3, 4, 5}, {2, 1, 1, 5}));
  c.add(bin({64, 65}, {65}));
}

// ---- pooling ------------------------------------------------------------------------------------

struct PoolSpec {
  std::int64_t kh, kw, sh, sw;
  std::array<std::int64_t, 4> pads = {0, 0, 0, 0};  // top, left, bottom, right
  std::int64_t dh = 1, dw = 1;
  bool ceil = false, incpad = false;
};

OpDesc pool(OpKind op, Shape x, const PoolSpec& s, Layout l = kNchw) {
  Pool2dParams p;
  p.kernel_h = s.kh, p.kernel_w = s.kw, p.stride_h = s.sh, p.stride_w = s.sw;
  p.pad_top = s.pads[0], p.pad_left = s.pads[1], p.pad_bottom = s.pads[2], p.pad_right = s.pads[3];
  if (op == OpKind::maxpool2d) p.dilation_h = s.dh, p.dilation_w = s.dw;
  p.ceil_mode = s.ceil;
  p.count_include_pad = op == OpKind::avgpool2d && s.incpad;
  return OpDesc{op, p, {td(x, l)}};
}

void pool_cases(Cases& c) {
  const OpKind op = c.op;
  const bool avg = op == OpKind::avgpool2d;
  const std::array<std::int64_t, 4> p1 = {1, 1, 1, 1};
  c.add(pool(op, {1, 1, 1, 1}, {1, 1, 1, 1}));
  c.add(pool(op, {1, 3, 7, 7}, {2, 2, 2, 2}));
  c.add(pool(op, {1, 3, 7, 7}, {2, 2, 2, 2}), kNan);
  // NaN inside full vectors (NCHW rows of 40, NHWC 32 channels), not only in scalar tails.
  c.add(pool(op, {1, 3, 9, 40}, {3, 3, 2, 2, p1}), kNan);
  c.add(pool(op, {1, 32, 9, 9}, {3, 3, 2, 2, p1}, kNhwc), kNan);
  c.add(pool(op, {2, 5, 13, 13}, {3, 3, 2, 2, p1}));
  c.add(pool(op, {2, 5, 13, 13}, {3, 3, 2, 2, p1}), kUnaligned);
  c.add(pool(op, {1, 4, 8, 8}, {3, 3, 2, 2, {}, 1, 1, true}));
  c.add(pool(op, {1, 16, 12, 12}, {3, 3, 1, 1, p1}));
  c.add(pool(op, {1, 16, 12, 12}, {3, 3, 1, 1, p1}), kInf);
  c.add(pool(op, {1, 3, 7, 9}, {3, 3, 2, 2, {1, 0, 0, 1}}));
  c.add(pool(op, {1, 2, 7, 7}, {7, 7, 1, 1}));
  c.add(pool(op, {1, 17, 9, 9}, {3, 3, 2, 2, p1}, kNhwc));
  c.add(pool(op, {1, 17, 9, 9}, {3, 3, 2, 2, p1}, kNhwc), kUnaligned);
  c.add(pool(op, {2, 32, 6, 6}, {2, 2, 2, 2}, kNhwc));
  c.add(pool(op, {1, 4, 10, 11}, {2, 3, 1, 2}));
  c.add(pool(op, {1, 3, 10, 10}, {3, 3, 2, 2, p1, 1, 1, true}));  // ceil mode + padding
  c.add(pool(op, {1, 3, 5, 5}, {3, 3, 3, 3, p1, 1, 1, true}));    // ceil drops a window that starts in padding
  c.add(pool(op, {1, 5, 11, 11}, {3, 3, 3, 3, {}, 1, 1, true}));  // ceil with a partial last window
  // NCHW rows: whole vectors and a partial last one (masked) in every pass - odd and even
  // stride-2 widths across several vectors, a left pad of 2 (the column buffer's alignment
  // shift), and kernels over 16 taps (several sweeps reading back the partial result).
  c.add(pool(op, {1, 3, 9, 67}, {3, 3, 2, 2, p1}), kNan);
  c.add(pool(op, {1, 2, 7, 64}, {3, 3, 2, 2}));
  c.add(pool(op, {1, 2, 6, 35}, {5, 5, 2, 2, {2, 2, 2, 2}}));
  c.add(pool(op, {1, 2, 20, 37}, {18, 17, 1, 1}));
  c.add(pool(op, {1, 2, 20, 37}, {18, 17, 1, 2, {1, 2, 1, 2}}), kNan);
  // The register row kernel (kw 2 or 3, stride 1 or 2, left pad 0 or 1): each of its
  // instances on rows of several vectors and a partial one, so the taps that shift across
  // neighbouring vectors (and past the row's ends) run at every ISA's width.
  c.add(pool(op, {1, 2, 5, 37}, {3, 3, 1, 1, p1}), kNan);
  c.add(pool(op, {1, 2, 5, 37}, {3, 3, 1, 1}));
  c.add(pool(op, {1, 2, 5, 33}, {2, 2, 1, 1}));
  c.add(pool(op, {1, 2, 5, 33}, {2, 2, 1, 1, {0, 1, 1, 0}}), kNan);
  c.add(pool(op, {1, 2, 6, 37}, {2, 2, 2, 2, {1, 1, 1, 1}}), kNan);
  c.add(pool(op, {1, 2, 7, 50}, {3, 3, 2, 2}));
  c.add(pool(op, {1, 2, 7, 50}, {3, 3, 2, 2, {0, 1, 1, 0}, 1, 1, true}));
  c.add(pool(op, {1, 2, 7, 51}, {2, 2, 2, 2, {}, 1, 1, true}));
  // The 3x3/1 same window's flat run over a plane's interior rows: widths below, at and above
  // a vector (the row-boundary tables at every lane phase), one interior row (H 3), and NaN or
  // inf beside a row's ends, which must not reach the next row's windows.
  c.add(pool(op, {2, 3, 3, 2}, {3, 3, 1, 1, p1}), kNan);
  c.add(pool(op, {1, 4, 9, 5}, {3, 3, 1, 1, p1}), kNan);
  c.add(pool(op, {2, 3, 7, 16}, {3, 3, 1, 1, p1}), kInf);
  c.add(pool(op, {1, 3, 6, 23}, {3, 3, 1, 1, p1, 1, 1, false, true}));
  c.add(pool(op, {1, 2, 28, 28}, {3, 3, 1, 1, p1}), kNan);
  if (avg) {
    c.add(pool(op, {1, 16, 12, 12}, {3, 3, 1, 1, p1, 1, 1, false, true}));
    c.add(pool(op, {1, 2, 6, 35}, {3, 3, 1, 1, {1, 1, 0, 1}, 1, 1, false, true}));
    c.add(pool(op, {1, 5, 7, 7}, {3, 3, 2, 2, p1, 1, 1, false, true}));
    c.add(pool(op, {1, 3, 10, 10}, {3, 3, 2, 2, p1, 1, 1, true, true}));  // ceil overhang not counted
    c.add(pool(op, {1, 3, 7, 9}, {3, 3, 2, 2, {1, 0, 0, 1}, 1, 1, false, true}));
    c.add(pool(op, {1, 17, 9, 9}, {3, 3, 2, 2, p1, 1, 1, true, true}, kNhwc));
  } else {
    c.add(pool(op, {1, 3, 11, 11}, {3, 3, 1, 1, {2, 2, 2, 2}, 2, 2}));  // dilation 2
    c.add(pool(op, {1, 4, 12, 12}, {2, 2, 2, 2, {}, 2, 1}));
    c.add(pool(op, {1, 16, 13, 13}, {3, 3, 2, 2, p1, 2, 2, true}, kNhwc));
  }
}

void global_pool_cases(Cases& c) {
  const auto gap = [](Shape x, Layout l = kNchw) {
    return OpDesc{OpKind::global_avgpool, GlobalPoolParams{}, {td(x, l)}};
  };
  c.add(gap({1, 1, 1, 1}));
  c.add(gap({2, 3, 7, 7}));
  c.add(gap({2, 3, 7, 7}), kUnaligned);
  c.add(gap({2, 3, 7, 7}), kNan);
  c.add(gap({1, 16, 13, 13}));
  c.add(gap({1, 16, 13, 13}), kInf);
  c.add(gap({1, 17, 1, 1}));
  c.add(gap({1, 64, 5, 5}, kNhwc));
  c.add(gap({1, 33, 16, 16}));
  c.add(gap({2, 15, 4, 4}, kNhwc));
  c.add(gap({2, 15, 4, 4}, kNhwc), kUnaligned);
  c.add(gap({1, 7, 31, 1}));
}

// ---- softmax, norms ----------------------------------------------------------------------------

OpDesc softmax(Shape x, int axis = -1, float scale = 1.f, Shape mask = {}, Layout l = kNchw) {
  SoftmaxParams p;
  p.axis = axis;
  p.scale = scale;
  p.has_mask = mask.rank > 0;
  OpDesc d{OpKind::softmax, p, {td(x, l)}};
  if (p.has_mask) d.inputs.push_back(td(mask, mask == x ? l : kNchw));
  return d;
}

void softmax_cases(Cases& c) {
  c.add(softmax({1}));
  c.add(softmax({7}));
  c.add(softmax({3, 13}));
  c.add(softmax({3, 13}), kInplace);
  c.add(softmax({3, 13}), kNan);
  for (std::int64_t n : {15, 16, 17, 31, 32, 33, 63, 64, 65}) c.add(softmax({4, n}));
  c.add(softmax({4, 17}), kUnaligned);
  c.add(softmax({2, 1000}));
  c.add(softmax({2, 3, 31}));
  c.add(softmax({2, 3, 31}, 0));
  c.add(softmax({2, 3, 31}, 0), kUnaligned);
  c.add(softmax({2, 3, 31}, 1));
  c.add(softmax({2, 3, 31}, -2));
  c.add(softmax({2, 17, 5, 5}, 1, 1.f, {}, kNhwc));
  c.add(softmax({2, 17, 5, 5}, 1, 1.f, {}, kNhwc), kInplace);
  c.add(softmax({2, 17, 5, 5}, -1, 1.f, {}, kNhwc));
  c.add(softmax({2, 3, 4, 5, 6}, 2));
  c.add(softmax({3, 13}, -1, 0.5f));
  c.add(softmax({2, 33}, -1, 2.f));
  c.add(softmax({2, 33}, -1, 2.f), kInf);
  c.add(softmax({3, 13}, -1, 1.f, {3, 13}));
  c.add(softmax({2, 4, 7, 9}, -1, 1.f, {1, 1, 7, 9}));
  c.add(softmax({2, 4, 7, 9}, -1, 1.f, {2, 1, 1, 9}));
  c.add(softmax({2, 4, 7, 9}, -1, 1.f, {9}), kUnaligned);
  c.add(softmax({2, 3, 31}, 1, 1.f, {3, 1}));
  c.add(softmax({4, 17}, -1, 0.125f, {4, 17}));
  c.add(softmax({4, 17}, -1, 0.125f, {4, 17}), kInplace);
}

OpDesc norm(OpKind op, Shape x, int axis = -1, bool bias = true, bool residual = false, bool sum = false,
            Layout l = kNchw) {
  NormParams p;
  p.axis = axis;
  p.has_bias = op == OpKind::layernorm && bias;
  p.has_residual = residual;
  p.write_sum = sum;
  OpDesc d{op, p, {td(x, l)}};
  const int a = axis < 0 ? axis + x.rank : axis;
  const Shape ns = Shape::of(x.dims.data() + a, x.rank - a);
  d.inputs.push_back(td(ns));
  if (p.has_bias) d.inputs.push_back(td(ns));
  if (residual) d.inputs.push_back(td(x, l));
  return d;
}

void norm_cases(Cases& c) {
  const OpKind op = c.op;
  c.add(norm(op, {1, 1}));
  c.add(norm(op, {4, 7}));
  c.add(norm(op, {4, 7}), kInplace);
  c.add(norm(op, {4, 7}), kNan);
  c.add(norm(op, {2, 3, 16}));
  for (std::int64_t n : {15, 17, 31, 32, 33, 64, 65}) c.add(norm(op, {3, n}));
  c.add(norm(op, {3, 17}), kUnaligned);
  c.add(norm(op, {2, 32}), kInf);
  c.add(norm(op, {2, 768}));
  c.add(norm(op, {2, 17, 5}, 1));
  c.add(norm(op, {2, 3, 4, 5}, 1));
  c.add(norm(op, {3, 5}, 0));
  c.add(norm(op, {2, 8, 3, 3}, 1, true, false, false, kNhwc));
  c.add(norm(op, {2, 8, 3, 3}, -1, true, true, true, kNhwc));
  if (op == OpKind::layernorm) c.add(norm(op, {4, 31}, -1, false));
  c.add(norm(op, {4, 31}, -1, true, true));
  c.add(norm(op, {2, 3, 16}, -1, true, true, true));
  c.add(norm(op, {2, 3, 16}, -1, true, true, true), kInplace);
  c.add(norm(op, {4, 31}, -1, true, true, true), kUnaligned);
  c.add(norm(op, {2, 5, 7}, 1, true, true, true));
}

// ---- attention -------------------------------------------------------------------------------

OpDesc attention(std::int64_t b, std::int64_t h, std::int64_t sq, std::int64_t skv, std::int64_t dk, std::int64_t dv,
                 float scale = 0.f, Shape mask = {}, bool causal = false) {
  AttentionParams p;
  p.scale = scale;
  p.has_mask = mask.rank > 0;
  p.causal = causal;
  OpDesc d{OpKind::attention, p, {td({b, h, sq, dk}), td({b, h, skv, dk}), td({b, h, skv, dv})}};
  if (p.has_mask) d.inputs.push_back(td(mask));
  return d;
}

void attention_cases(Cases& c, Rng& rng) {
  c.add(attention(1, 1, 1, 1, 1, 1));
  c.add(attention(1, 2, 7, 7, 16, 16));
  c.add(attention(1, 2, 7, 7, 16, 16), kNan);
  c.add(attention(2, 3, 5, 13, 32, 32));  // Sq != Skv
  c.add(attention(2, 3, 5, 13, 32, 32), kUnaligned);
  c.add(attention(1, 2, 13, 5, 16, 16));  // Sq > Skv
  c.add(attention(1, 1, 9, 9, 16, 8));    // Dv < D
  c.add(attention(2, 1, 15, 33, 8, 24));  // Dv > D
  c.add(attention(1, 2, 17, 17, 64, 64));
  c.add(attention(1, 2, 17, 17, 64, 64), kInf);
  c.add(attention(1, 1, 16, 31, 63, 65));
  c.add(attention(1, 2, 7, 7, 16, 16, 0.25f));
  // Mask shapes broadcast to (B, H, Sq, Skv).
  c.add(attention(1, 2, 7, 7, 16, 16, 0.f, {7, 7}));
  c.add(attention(1, 2, 7, 11, 16, 16, 0.f, {1, 1, 7, 11}));
  c.add(attention(2, 2, 5, 9, 8, 8, 0.f, {2, 1, 1, 9}));
  c.add(attention(2, 2, 5, 9, 8, 8, 0.f, {2, 2, 5, 9}), kUnaligned);
  c.add(attention(2, 3, 4, 6, 8, 8, 0.f, {3, 1, 6}));
  // Causal: square, query suffix (KV cache), decode step, Sq > Skv (first queries see no key),
  // and with a mask.
  c.add(attention(1, 2, 16, 16, 16, 16, 0.f, {}, true));
  c.add(attention(1, 2, 4, 13, 16, 16, 0.f, {}, true));
  c.add(attention(1, 2, 1, 31, 16, 16, 0.f, {}, true));
  c.add(attention(1, 1, 9, 5, 8, 8, 0.f, {}, true));
  c.add(attention(2, 2, 9, 9, 8, 8, 0.f, {9, 9}, true));
  c.add(attention(2, 2, 9, 9, 8, 8, 0.f, {9, 9}, true), kNan);
  for (int i = 0; i < 2; ++i) {
    const std::int64_t sq = rng.range(1, 20), skv = rng.range(1, 40), dk = rng.range(1, 40), dv = rng.range(1, 40);
    c.add(attention(rng.range(1, 2), rng.range(1, 3), sq, skv, dk, dv, 0.f, {}, sq <= skv && rng.range(0, 1)));
  }
}

// ---- inverted residual -----------------------------------------------------------------------

OpDesc inverted_residual(std::int64_t n, std::int64_t cin, std::int64_t h, std::int64_t w, std::int64_t ce,
                         std::int64_t cout, std::int64_t stride, bool residual, bool expand = true, Layout l = kNchw) {
  InvertedResidualParams p;
  p.has_expand = expand;
  p.stride = stride;
  p.residual = residual;
  return inverted_residual_desc(td({n, cin, h, w}, l), ce, cout, p);
}

void inverted_residual_cases(Cases& c) {
  c.add(inverted_residual(1, 16, 7, 7, 96, 16, 1, true));
  c.add(inverted_residual(1, 16, 8, 8, 96, 24, 2, false));
  c.add(inverted_residual(1, 32, 7, 7, 32, 16, 1, false, false));  // expansion ratio 1: no expand conv
  c.add(inverted_residual(1, 16, 15, 15, 16, 16, 2, false, false));
  c.add(inverted_residual(1, 3, 13, 13, 17, 5, 1, false));
  c.add(inverted_residual(1, 3, 13, 13, 17, 5, 1, false), kUnaligned);
  c.add(inverted_residual(1, 16, 7, 7, 96, 16, 1, true), kConst);
  c.add(inverted_residual(1, 16, 8, 8, 96, 24, 2, false), kConst);
  c.add(inverted_residual(1, 4, 1, 1, 24, 4, 1, true));
  c.add(inverted_residual(1, 4, 1, 1, 24, 4, 2, false));
  c.add(inverted_residual(2, 8, 9, 9, 48, 8, 1, true, true, kNhwc));
  c.add(inverted_residual(2, 8, 9, 9, 48, 8, 1, true, true, kNhwc), kNan);
  c.add(inverted_residual(1, 24, 6, 6, 144, 32, 2, false, true, kNhwc));
  c.add(inverted_residual(1, 17, 5, 5, 33, 17, 1, true));
  c.add(inverted_residual(1, 17, 5, 5, 33, 17, 1, true), kInf);
  c.add(inverted_residual(1, 8, 10, 7, 48, 12, 2, false));
  c.add(inverted_residual(1, 16, 4, 4, 64, 65, 1, false, true, kNhwc), kUnaligned);
  // Cout of 3 AVX2 vectors (24) over rows of 15 and 16 pixels: the row-mode depthwise tiles of
  // 7 and 8 pixels that the projection runs as 4 + 3 and 4 + 4 (kIrTileMax).
  c.add(inverted_residual(1, 24, 4, 15, 144, 24, 1, true));
  c.add(inverted_residual(1, 20, 3, 16, 40, 24, 1, false, true, kNhwc));
  // 1.3 MB of 1x1 weights over small images: the fused kernel's whole-image mode wherever L2 is
  // below 2.6 MB (ir_image_mode), Ce not a multiple of the vector width.
  c.add(inverted_residual(1, 160, 6, 6, 1000, 160, 1, true));
  c.add(inverted_residual(2, 160, 6, 5, 1000, 168, 1, false, true, kNhwc));
  c.add(inverted_residual(1, 160, 7, 7, 1000, 168, 2, false));
}

// ---- eltwise chain ---------------------------------------------------------------------------

OpDesc chain(Shape x, std::vector<std::pair<ChainStep, Shape>> steps, Layout l = kNchw) {
  ChainParams p;
  OpDesc d{OpKind::eltwise_chain, {}, {td(x, l)}};
  for (auto& [s, operand] : steps) {
    p.steps.push_back(s);
    if (s.kind == ChainStep::Kind::binary) d.inputs.push_back(td(operand, operand == x ? l : kNchw));
  }
  d.params = p;
  return d;
}

std::pair<ChainStep, Shape> un(Activation a) { return {ChainStep::unary_step(a), {}}; }
std::pair<ChainStep, Shape> un(ActKind k) { return un(Activation::of(k)); }
std::pair<ChainStep, Shape> bin(BinaryKind k, Shape s) { return {ChainStep::binary_step(k), s}; }

void chain_cases(Cases& c) {
  using B = BinaryKind;
  c.add(chain({1}, {un(ActKind::relu)}));
  c.add(chain({1, 7}, {}));  // no steps: a copy
  c.add(chain({17}, {un(Activation::linear(2.f, 0.5f)), un(ActKind::relu)}));
  c.add(chain({17}, {un(Activation::linear(2.f, 0.5f)), un(ActKind::relu)}), kInplace);
  c.add(chain({17}, {un(Activation::linear(2.f, 0.5f)), un(ActKind::relu)}), kInf);
  c.add(chain({2, 3, 5, 7}, {bin(B::add, {3, 1, 1}), un(ActKind::gelu_erf), bin(B::mul, {7})}));
  c.add(chain({2, 3, 5, 7}, {bin(B::add, {3, 1, 1}), un(ActKind::gelu_erf), bin(B::mul, {7})}), kInplace);
  c.add(chain({2, 16, 4, 4}, {bin(B::mul, {1, 16, 1, 1}), bin(B::add, {2, 16, 4, 4}), un(Activation::relu6())}, kNhwc));
  c.add(chain({2, 16, 4, 4}, {bin(B::mul, {1, 16, 1, 1}), bin(B::add, {2, 16, 4, 4}), un(Activation::relu6())}, kNhwc),
        kUnaligned);
  c.add(chain({4, 33}, {un(ActKind::sigmoid), bin(B::sub, {1}), bin(B::div, {33})}));
  c.add(chain({4, 33}, {un(ActKind::sigmoid), bin(B::sub, {1}), bin(B::div, {33})}), kUnaligned);
  c.add(
      chain({3, 65}, {un(ActKind::tanh), un(Activation::leaky_relu(0.1f)), un(ActKind::hardswish), un(ActKind::silu)}));
  c.add(
      chain({3, 65}, {un(ActKind::tanh), un(Activation::leaky_relu(0.1f)), un(ActKind::hardswish), un(ActKind::silu)}),
      kNan);
  c.add(chain({1, 64, 3, 3}, {un(Activation::clip(-0.5f, 0.5f)), bin(B::mul, {64, 1, 1}), un(ActKind::gelu_tanh)}));
  c.add(chain({5, 31}, {bin(B::div, {5, 1}), un(Activation::linear(0.5f, 0.25f)), bin(B::add, {31})}));
  c.add(chain({2, 3, 4, 5, 6}, {bin(B::add, {4, 1, 6}), un(ActKind::relu)}));
  c.add(chain({2, 8, 5, 5}, {un(Activation::linear(1.5f, -0.25f)), bin(B::add, {8, 1, 1}), un(ActKind::silu),
                             bin(B::mul, {2, 8, 5, 5}), un(ActKind::tanh), bin(B::sub, {5}), un(ActKind::sigmoid),
                             un(Activation::clip(0.1f, 0.9f))}));
}

}  // namespace

std::vector<Case> make_cases(OpKind op, std::uint64_t seed) {
  Cases c{op, {}};
  Rng rng(hash_name(op_name(op)) ^ (seed * 0x9E3779B97F4A7C15ull));
  switch (op) {
    case OpKind::gemm: gemm_cases(c, rng); break;
    case OpKind::conv2d: conv_cases(c, rng); break;
    case OpKind::batchnorm: batchnorm_cases(c); break;
    case OpKind::maxpool2d:
    case OpKind::avgpool2d: pool_cases(c); break;
    case OpKind::global_avgpool: global_pool_cases(c); break;
    case OpKind::softmax: softmax_cases(c); break;
    case OpKind::layernorm:
    case OpKind::rmsnorm: norm_cases(c); break;
    case OpKind::attention: attention_cases(c, rng); break;
    case OpKind::inverted_residual: inverted_residual_cases(c); break;
    case OpKind::eltwise_chain: chain_cases(c); break;
    default:
      if (is_unary(op)) unary_cases(c);
      if (is_binary(op)) binary_cases(c);
      break;
  }
  for (Case& k : make_closed_form_cases(op)) c.list.push_back(std::move(k));
  // Names are reproducers, so they must be unique: a seed-drawn shape that repeats a fixed one
  // is dropped. An in-place variant is kept only where the op allows it.
  std::vector<Case> out;
  std::set<std::string> seen;
  for (Case& k : c.list) {
    if ((k.variants & kInplace) && !allows_inplace(k.desc, 0, 0)) continue;
    if (!seen.insert(k.id()).second) continue;
    out.push_back(std::move(k));
  }
  return out;
}

// ---- input data -----------------------------------------------------------------------------

namespace {
struct Domain {
  float lo = -1.f, hi = 1.f;
  bool away_from_zero = false;  // |v| in [lo, hi], random sign
};

bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

Domain domain_of(const OpDesc& d, std::size_t i, const std::string& name) {
  if (ends_with(name, "var")) return {0.5f, 2.f};     // batchnorm variance: > 0, rstd <= 1.42
  if (ends_with(name, "scale")) return {0.5f, 1.5f};  // batchnorm / norm scales: O(1), no zeros
  if (name == "mask") return {-2.f, 0.f};             // additive masks: finite, <= 0
  if (ends_with(name, "div") || (d.op == OpKind::div && i == 1)) return {0.5f, 2.f, true};  // divisors
  if (is_unary(d.op)) return {-8.f, 8.f};  // reaches relu6's top, the saturation of sigmoid/tanh
  if (d.op == OpKind::inverted_residual && name.rfind("w_", 0) == 0) {
    // Weights ~ 3/sqrt(fan_in) keep each stage's output at unit scale, so relu6 clips some
    // values but not all of them.
    const Shape& w = d.inputs[i].shape;
    const double fan_in = static_cast<double>(w[1] * w[2] * w[3]);
    const float a = static_cast<float>(std::sqrt(3.0 / fan_in));
    return {-a, a};
  }
  return {};
}

void fill_logical_random(std::vector<float>& v, Rng& rng, const Domain& dom) {
  for (float& x : v) {
    if (dom.away_from_zero) {
      const float m = rng.uniform(dom.lo, dom.hi);
      x = (rng.next() & 1) ? m : -m;
    } else {
      x = rng.uniform(dom.lo, dom.hi);
    }
  }
}
}  // namespace

std::vector<std::vector<float>> make_inputs(const Case& c, std::uint64_t seed) {
  const OpDesc& d = c.desc;
  std::vector<std::vector<float>> in(d.inputs.size());
  if (!c.inputs.empty()) {
    in = c.inputs;
  } else {
    const std::string base = fmt::format("{}/{}", op_name(d.op), c.id());
    Rng rng(hash_name(base) ^ seed);
    const auto names = input_names(d);
    for (std::size_t i = 0; i < in.size(); ++i) {
      in[i].resize(static_cast<std::size_t>(d.inputs[i].shape.numel()));
      fill_logical_random(in[i], rng, domain_of(d, i, i < names.size() ? names[i] : std::string()));
    }
    // The first element of x is positive, so no rectifier can turn a small input all zero.
    if (!in.empty() && !in[0].empty()) in[0][0] = std::fabs(in[0][0]) + 0.125f;
  }
  if ((c.variants & (kNan | kInf)) && !in.empty() && !in[0].empty()) {
    const std::size_t n = in[0].size();
    const float a =
        (c.variants & kNan) ? std::numeric_limits<float>::quiet_NaN() : std::numeric_limits<float>::infinity();
    in[0][n / 2] = a;
    if (n > 8) in[0][n - 1] = (c.variants & kNan) ? a : -a;
  }
  return in;
}

std::vector<std::vector<float>> make_initial_outputs(const Case& c, std::uint64_t seed) {
  if (!c.initial.empty()) return c.initial;
  if (c.desc.op != OpKind::gemm || c.desc.p<GemmParams>().beta == 0.f) return {};
  auto outs = infer_outputs(c.desc);
  if (!outs) return {};
  // gemm with beta != 0 reads y: the same prior contents for the kernel and its reference.
  std::vector<std::vector<float>> init(1);
  init[0].resize(static_cast<std::size_t>((*outs)[0].shape.numel()));
  Rng rng(hash_name(fmt::format("{}/{}/y0", op_name(c.desc.op), c.id())) ^ seed);
  fill_logical_random(init[0], rng, {});
  return init;
}

}  // namespace opfuse::check
