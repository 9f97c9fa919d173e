// tests/test_explain.cpp - the bytes-moved model (opfuse/explain.hpp) against traffic counted
// by hand from the shapes: each expected figure below is written out from the op's definition
// (which tensors each pass reads and writes), not from the model's code.
#include <gtest/gtest.h>

#include "fused/attention.hpp"
#include "opfuse/explain.hpp"

namespace opfuse {
namespace {

TensorDesc td(Shape s) { return {s, Layout::nchw}; }

// The flash attention kernel's whole extra memory (what its prepare allocates, per thread: the
// Q^T tile D x bq, one score tile bk x bq, the O^T accumulator Dv x bq and three rows of bq -
// running max, running sum, correction - each region rounded up to 16 floats) against the
// score matrix the unfused pipeline materializes, at the bench's BERT case b1_h12_s2048_d64.
TEST(FlashAttention, ExtraMemoryUnderOnePercentOfTheScoreMatrix) {
  AttentionParams p;
  OpDesc d{OpKind::attention, p, {td({1, 12, 2048, 64}), td({1, 12, 2048, 64}), td({1, 12, 2048, 64})}};
  const double scores = 1.0 * 12 * 2048 * 2048 * 4;  // 201,326,592 bytes
  // AVX-512: bq = 64, bk = 72: (64 + 72 + 64 + 3) * 64 floats; AVX2: bq = 16, bk = 128:
  // (64 + 128 + 64 + 3) * 16; SSE2: bq = 8, bk = 128: 64*8 + 128*8 + 64*8 + 3 * 16 (rows of 8
  // rounded up to 16).
  EXPECT_EQ(fused::attention_extra_bytes(d, Isa::avx512, 1), 4u * (64 + 72 + 64 + 3) * 64);
  EXPECT_EQ(fused::attention_extra_bytes(d, Isa::avx2, 1), 4u * (64 + 128 + 64 + 3) * 16);
  EXPECT_EQ(fused::attention_extra_bytes(d, Isa::sse2, 1), 4u * (512 + 1024 + 512 + 48));
  for (Isa isa : {Isa::avx512, Isa::avx2, Isa::sse2})
    for (int threads : {1, 2, 16}) {
      const double extra = static_cast<double>(fused::attention_extra_bytes(d, isa, threads));
      EXPECT_LT(extra, 0.01 * scores) << isa_name(isa) << " t" << threads;
    }
}

TEST(Explain, EltwiseChainFourStepsSavesSixtyPercent) {
  // y = relu(gelu(x + a) * b) over n floats: unfused passes move
  // (x, a -> y) + (y -> y) + (y, b -> y) + (y -> y) = 3n + 2n + 3n + 2n = 10n floats;
  // fused: x, a, b read once, y written once = 4n floats.
  const std::int64_t n = 1000;
  OpDesc d{
      OpKind::eltwise_chain,
      ChainParams{{ChainStep::binary_step(BinaryKind::add), ChainStep::unary_step(Activation::of(ActKind::gelu_erf)),
                   ChainStep::binary_step(BinaryKind::mul), ChainStep::unary_step(Activation::relu())}},
      {td({n}), td({n}), td({n})}};
  auto m = fusion_model(d);
  ASSERT_TRUE(m) << m.status().message();
  EXPECT_DOUBLE_EQ(m->unfused_bytes(), 4.0 * 10 * n);
  EXPECT_DOUBLE_EQ(m->fused_bytes(), 4.0 * 4 * n);
  EXPECT_NEAR(m->saved(), 0.6, 1e-12);
  EXPECT_EQ(m->unfused.size(), 4u);
}

TEST(Explain, ConvWithBnAddReluCountsEveryPass) {
  // 1x1 conv 8 -> 4 channels on 5x5: x = 200, w = 32, y = 100 floats; BN vectors 4 x 4.
  Conv2dParams p;
  p.post_ops = {PostOp::batchnorm(), PostOp::add(), PostOp::activation(Activation::relu())};
  OpDesc d{OpKind::conv2d, p, {td({1, 8, 5, 5}), td({4, 8, 1, 1})}};
  for (int i = 0; i < 4; ++i) d.inputs.push_back(td({4}));
  d.inputs.push_back(td({1, 4, 5, 5}));
  auto m = fusion_model(d);
  ASSERT_TRUE(m) << m.status().message();
  // conv (200 + 32 -> 100) + bn (100 + 16 -> 100) + add (100 + 100 -> 100) + relu (100 -> 100)
  EXPECT_DOUBLE_EQ(m->unfused_bytes(), 4.0 * ((232 + 100) + (116 + 100) + (200 + 100) + (100 + 100)));
  // fused: x, w, the residual read once, BN folded into w at prepare, y written once.
  EXPECT_DOUBLE_EQ(m->fused_bytes(), 4.0 * (232 + 100 + 100));
}

TEST(Explain, ConvReluMaxpoolNeverWritesTheConvOutput) {
  // 3x3 pad 1 conv 2 -> 4 channels on 8x8 (x = 128, w = 72, y = 256 floats), relu, then
  // maxpool 2x2/2 -> (1, 4, 4, 4) = 64 floats.
  Conv2dParams p;
  p.pad_top = p.pad_left = p.pad_bottom = p.pad_right = 1;
  p.post_ops = {PostOp::activation(Activation::relu()), PostOp::maxpool(2, 2, 0)};
  OpDesc d{OpKind::conv2d, p, {td({1, 2, 8, 8}), td({4, 2, 3, 3})}};
  auto m = fusion_model(d);
  ASSERT_TRUE(m) << m.status().message();
  // conv (128 + 72 -> 256) + relu (256 -> 256) + maxpool (256 -> 64)
  EXPECT_DOUBLE_EQ(m->unfused_bytes(), 4.0 * ((200 + 256) + (256 + 256) + (256 + 64)));
  EXPECT_DOUBLE_EQ(m->fused_bytes(), 4.0 * (200 + 64));
  EXPECT_DOUBLE_EQ(m->unfused_intermediate_bytes, 4.0 * 256);
}

TEST(Explain, LayernormResidualUnfusedWritesTheSum) {
  NormParams p;
  p.has_residual = true;
  const std::int64_t rows = 16, c = 64, n = rows * c;
  OpDesc d{OpKind::layernorm, p, {td({rows, c}), td({c}), td({c}), td({rows, c})}};
  auto m = fusion_model(d);
  ASSERT_TRUE(m) << m.status().message();
  // add pass (x, r -> s) + layernorm (s, scale, bias -> y) vs fused (x, r, scale, bias -> y).
  EXPECT_DOUBLE_EQ(m->unfused_bytes(), 4.0 * (3 * n + (n + 2 * c + n)));
  EXPECT_DOUBLE_EQ(m->fused_bytes(), 4.0 * (2 * n + 2 * c + n));
  EXPECT_DOUBLE_EQ(m->unfused_intermediate_bytes, 4.0 * n);
}

TEST(Explain, AttentionScoreMatrixIsTheIntermediate) {
  const std::int64_t b = 1, h = 2, s = 32, dh = 8;
  OpDesc d{OpKind::attention, AttentionParams{}, {td({b, h, s, dh}), td({b, h, s, dh}), td({b, h, s, dh})}};
  auto m = fusion_model(d);
  ASSERT_TRUE(m) << m.status().message();
  const double qkv = 4.0 * b * h * s * dh, scores = 4.0 * b * h * s * s;
  EXPECT_DOUBLE_EQ(m->unfused_intermediate_bytes, scores);
  // QK^T (q, k -> S) + softmax (S -> P) + PV (P, v -> o)
  EXPECT_DOUBLE_EQ(m->unfused_bytes(), (2 * qkv + scores) + 2 * scores + (scores + qkv + qkv));
  EXPECT_DOUBLE_EQ(m->fused_bytes(), 4 * qkv);
}

TEST(Explain, NothingToFuseMeansNothingSaved) {
  OpDesc d{OpKind::relu, UnaryParams{Activation::relu()}, {td({1, 3, 4, 4})}};
  auto m = fusion_model(d);
  ASSERT_TRUE(m) << m.status().message();
  EXPECT_DOUBLE_EQ(m->saved(), 0.0);
  EXPECT_DOUBLE_EQ(m->fused_bytes(), 4.0 * 2 * 48);
}

TEST(Explain, InvalidDescIsAnErrorNotACrash) {
  OpDesc d{OpKind::gemm, GemmParams{}, {td({4, 5}), td({6, 7})}};
  auto m = fusion_model(d);
  ASSERT_FALSE(m);
  EXPECT_EQ(m.status().code(), StatusCode::invalid_argument);
  EXPECT_NE(m.status().message().find("gemm"), std::string::npos);
}

}  // namespace
}  // namespace opfuse
