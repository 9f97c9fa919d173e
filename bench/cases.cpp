// bench/cases.cpp - the curated benchmark problems (see cases.hpp).
//
// Sizes: compute-bound ops use the layers that dominate real models (a 1024^3 GEMM, the
// BERT-base encoder layer at 128 and 512 tokens, ResNet-50's stem and its 3x3 / 1x1 convolutions
// per stage, MobileNetV2's depthwise layers and blocks); memory-bound ops use activations of a
// few MB (ResNet's 64x112x112 map is 3.2 MB: it fits in the last-level cache) and 64 MiB
// tensors that do not (DRAM bandwidth is their roof). The naive stage runs every case; the
// slowest (attention at 2048 tokens, several seconds) runs one iteration.
#include "cases.hpp"

#include <utility>

namespace opfuse::bench {

namespace {

TensorDesc td(Shape s) { return {s, Layout::nchw}; }

// Appends the operands of a post-op chain: batchnorm takes 4 x (channels), binary one
// tensor of the output's shape.
void add_post_op_operands(std::vector<TensorDesc>& in, const PostOps& post_ops, std::int64_t channels,
                          const Shape& out) {
  for (const PostOp& p : post_ops) {
    if (p.kind == PostOp::Kind::batchnorm)
      for (int i = 0; i < 4; ++i) in.push_back(td({channels}));
    else if (p.kind == PostOp::Kind::binary)
      in.push_back(td(out));
  }
}

// y (M, N) = a (M, K) * b (K, N) [+ bias (N)], then post_ops. trans_b: b is stored (N, K), as
// PyTorch's Linear weight (out, in), and op(b) = b^T.
OpDesc gemm(std::int64_t m, std::int64_t n, std::int64_t k, bool bias, PostOps post_ops = {}, bool trans_b = false) {
  GemmParams p;
  p.has_bias = bias;
  p.trans_b = trans_b;
  p.post_ops = std::move(post_ops);
  OpDesc d{OpKind::gemm, {}, {td({m, k}), trans_b ? td({n, k}) : td({k, n})}};
  if (bias) d.inputs.push_back(td({n}));
  add_post_op_operands(d.inputs, p.post_ops, n, {m, n});
  d.params = std::move(p);
  return d;
}

// x (N, C, H, W) * w (K, C/groups, R, R), stride s, pad p on every side.
OpDesc conv(std::int64_t n, std::int64_t c, std::int64_t h, std::int64_t w, std::int64_t k, std::int64_t r,
            std::int64_t s, std::int64_t pad, std::int64_t groups = 1, PostOps post_ops = {}) {
  Conv2dParams p;
  p.stride_h = p.stride_w = s;
  p.pad_top = p.pad_left = p.pad_bottom = p.pad_right = pad;
  p.groups = groups;
  p.post_ops = std::move(post_ops);
  const std::int64_t oh = (h + 2 * pad - r) / s + 1, ow = (w + 2 * pad - r) / s + 1;
  OpDesc d{OpKind::conv2d, {}, {td({n, c, h, w}), td({k, c / groups, r, r})}};
  add_post_op_operands(d.inputs, p.post_ops, k, {n, k, oh, ow});
  d.params = std::move(p);
  return d;
}

OpDesc unary(OpKind op, Shape s, std::optional<Activation> act = std::nullopt) {
  OpDesc d{op, default_params(op), {td(s)}};
  if (act) d.params = UnaryParams{*act};
  return d;
}

OpDesc binary(OpKind op, Shape a, Shape b) { return {op, BinaryParams{}, {td(a), td(b)}}; }

OpDesc batchnorm(Shape x) {
  OpDesc d{OpKind::batchnorm, BatchnormParams{}, {td(x)}};
  for (int i = 0; i < 4; ++i) d.inputs.push_back(td({x[1]}));
  return d;
}

OpDesc pool(OpKind op, Shape x, std::int64_t k, std::int64_t s, std::int64_t pad) {
  Pool2dParams p;
  p.kernel_h = p.kernel_w = k;
  p.stride_h = p.stride_w = s;
  p.pad_top = p.pad_left = p.pad_bottom = p.pad_right = pad;
  return {op, p, {td(x)}};
}

// Normalizes the last dim; [bias]; [residual like x].
OpDesc norm(OpKind op, Shape x, bool residual) {
  NormParams p = std::get<NormParams>(default_params(op));
  p.has_residual = residual;
  OpDesc d{op, p, {td(x), td({x[x.rank - 1]})}};
  if (op == OpKind::layernorm && p.has_bias) d.inputs.push_back(td({x[x.rank - 1]}));
  if (residual) d.inputs.push_back(td(x));
  return d;
}

OpDesc attention(std::int64_t b, std::int64_t h, std::int64_t s, std::int64_t dh, bool causal = false) {
  AttentionParams p;
  p.causal = causal;
  return {OpKind::attention, p, {td({b, h, s, dh}), td({b, h, s, dh}), td({b, h, s, dh})}};
}

// MobileNetV2 block: expand 1x1 (t * cin), depthwise 3x3 / stride, project 1x1 to cout.
OpDesc inverted_residual(Shape x, std::int64_t t, std::int64_t cout, std::int64_t stride) {
  InvertedResidualParams p;
  p.stride = stride;
  p.residual = stride == 1 && cout == x[1];
  return inverted_residual_desc(td(x), t * x[1], cout, p);
}

OpDesc eltwise_chain(Shape x, std::vector<ChainStep> steps) {
  OpDesc d{OpKind::eltwise_chain, {}, {td(x)}};
  for (const ChainStep& s : steps)
    if (s.kind == ChainStep::Kind::binary) d.inputs.push_back(td(x));
  d.params = ChainParams{std::move(steps)};
  return d;
}

// Bias add, GELU, scale, ReLU: a transformer-style epilogue as a standalone chain.
std::vector<ChainStep> bias_gelu_scale_relu() {
  return {ChainStep::binary_step(BinaryKind::add), ChainStep::unary_step(Activation::of(ActKind::gelu_erf)),
          ChainStep::binary_step(BinaryKind::mul), ChainStep::unary_step(Activation::relu())};
}

}  // namespace

std::vector<OpDesc> bench_cases() {
  using K = OpKind;
  const PostOp bn = PostOp::batchnorm(), add = PostOp::add(), relu = PostOp::activation(Activation::relu()),
               relu6 = PostOp::activation(Activation::relu6()),
               gelu = PostOp::activation(Activation::of(ActKind::gelu_erf));
  // A ResNet-50 activation after the stem: 64 x 112 x 112 = 3.2 MB.
  const Shape act{1, 64, 112, 112};
  std::vector<OpDesc> c;

  // gemm: the square reference point; the BERT-base encoder layer's projections at 128 tokens
  // (fused QKV, attention output, FFN up + GELU, FFN down) and 512 tokens (QKV, FFN up); and
  // ResNet-50's classifier, a matrix-vector product (M = 1) that is bound by reading the weights,
  // and a decoder's single-token projection with transposed weights.
  c.push_back(gemm(1024, 1024, 1024, false));
  c.push_back(gemm(128, 3072, 768, true, {gelu}));  // FFN up-projection + bias + GELU
  c.push_back(gemm(128, 768, 3072, true));          // FFN down-projection + bias
  c.push_back(gemm(128, 2304, 768, true));          // Q, K and V projections in one GEMM
  c.push_back(gemm(128, 768, 768, true));           // attention output projection
  c.push_back(gemm(512, 3072, 768, true, {gelu}));
  c.push_back(gemm(512, 2304, 768, true));
  c.push_back(gemm(1, 1000, 2048, true));  // ResNet-50 fc
  // One decoded token through a 4096-wide projection with the weight in PyTorch's Linear layout
  // (out, in), i.e. op(B) = B^T: 64 MiB of weights read once per call, DRAM-bound.
  c.push_back(gemm(1, 4096, 4096, false, {}, true));
  // The attention output projection with its weight in PyTorch's layout: B^T is packed into
  // panels on every call, a transpose.
  c.push_back(gemm(128, 768, 768, true, {}, true));

  // conv2d: ResNet-50 layer1 3x3, layer1 1x1 reduce with its BN + residual + ReLU tail, the
  // 7x7/2 stem, and a MobileNetV2 depthwise 3x3 (24*6 = 144 channels at 56x56).
  c.push_back(conv(1, 64, 56, 56, 64, 3, 1, 1));
  c.push_back(conv(1, 256, 56, 56, 64, 1, 1, 0, 1, {bn, add, relu}));
  c.push_back(conv(1, 3, 224, 224, 64, 7, 2, 3, 1, {bn, relu}));
  // The whole ResNet stem as one op: conv 7x7/2 + BN + ReLU + maxpool 3x3/2 pad 1 (a pool
  // post-op; oneDNN has none, so its peer runs convolution then pooling).
  c.push_back(conv(1, 3, 224, 224, 64, 7, 2, 3, 1, {bn, relu, PostOp::maxpool(3, 2, 1)}));
  c.push_back(conv(1, 144, 56, 56, 144, 3, 1, 1, 144, {bn, relu6}));
  {  // the same depthwise layer channels-last (NHWC): channels in vector lanes, no plane copies
    OpDesc d = conv(1, 144, 56, 56, 144, 3, 1, 1, 144, {bn, relu6});
    d.inputs[0].layout = Layout::nhwc;
    c.push_back(std::move(d));
  }
  // ResNet-50's other dominant layers: the 1x1 expansion that closes every layer1 bottleneck,
  // the 3x3 of layers 2, 3 and 4 (the same 231 MFLOP on ever smaller maps with ever more
  // channels), and layer3's 1x1 reduce.
  c.push_back(conv(1, 64, 56, 56, 256, 1, 1, 0, 1, {bn, add, relu}));
  c.push_back(conv(1, 128, 28, 28, 128, 3, 1, 1, 1, {bn, relu}));
  c.push_back(conv(1, 256, 14, 14, 256, 3, 1, 1, 1, {bn, relu}));
  c.push_back(conv(1, 512, 7, 7, 512, 3, 1, 1, 1, {bn, relu}));
  c.push_back(conv(1, 1024, 14, 14, 256, 1, 1, 0, 1, {bn, relu}));
  // MobileNetV2: the 3x3/2 stem, a stride-2 depthwise layer, and the final 1x1 to 1280.
  c.push_back(conv(1, 3, 224, 224, 32, 3, 2, 1, 1, {bn, relu6}));
  {  // the stem as MobileNetV2 runs it: the layout planner converts the network input to NHWC
    OpDesc d = conv(1, 3, 224, 224, 32, 3, 2, 1, 1, {bn, relu6});
    d.inputs[0].layout = Layout::nhwc;
    c.push_back(std::move(d));
  }
  c.push_back(conv(1, 144, 56, 56, 144, 3, 2, 1, 144, {bn, relu6}));
  c.push_back(conv(1, 320, 7, 7, 1280, 1, 1, 0, 1, {bn, relu6}));

  c.push_back(batchnorm(act));
  // Memory-bound ops far beyond the caches: 64 MiB tensors (16 Mi floats) measure DRAM
  // bandwidth, the roofline of relu, add and batchnorm.
  const Shape big{1, 64, 512, 512};
  c.push_back(batchnorm(big));

  // Unary ops: one 3.2 MB activation each (relu6 is clip's default); GELU also on BERT's
  // FFN hidden state (128 and 512 tokens x 3072).
  for (K op : {K::relu, K::clip, K::leaky_relu, K::sigmoid, K::tanh, K::gelu, K::silu, K::hardswish})
    c.push_back(unary(op, act));
  c.push_back(unary(K::gelu, {128, 3072}));
  c.push_back(unary(K::gelu, {512, 3072}));
  c.push_back(unary(K::relu, {16777216}));

  // Binary ops: same-shape (residual add), plus per-channel broadcasts (a squeeze-excite
  // scale, a bias add).
  for (K op : {K::add, K::sub, K::mul, K::div}) c.push_back(binary(op, act, act));
  c.push_back(binary(K::add, act, {1, 64, 1, 1}));
  c.push_back(binary(K::mul, act, {1, 64, 1, 1}));
  c.push_back(binary(K::add, {16777216}, {16777216}));

  // Pools: ResNet's 3x3/2 max pool after the stem, a 2x2/2 average pool, a 3x3/1 same-size
  // average pool, and the ResNet-50 / MobileNetV2 heads.
  c.push_back(pool(K::maxpool2d, {1, 64, 112, 112}, 3, 2, 1));
  c.push_back(pool(K::avgpool2d, {1, 128, 56, 56}, 2, 2, 0));
  c.push_back(pool(K::avgpool2d, {1, 192, 28, 28}, 3, 1, 1));
  c.push_back({K::global_avgpool, GlobalPoolParams{}, {td({1, 2048, 7, 7})}});
  c.push_back({K::global_avgpool, GlobalPoolParams{}, {td({1, 1280, 7, 7})}});

  // softmax: BERT attention probabilities (12 heads at 128, 256 and 512 tokens), ImageNet logits.
  c.push_back({K::softmax, SoftmaxParams{}, {td({1, 12, 128, 128})}});
  c.push_back({K::softmax, SoftmaxParams{}, {td({1, 12, 256, 256})}});
  c.push_back({K::softmax, SoftmaxParams{}, {td({1, 12, 512, 512})}});
  c.push_back({K::softmax, SoftmaxParams{}, {td({256, 1000})}});
  // 64 MiB (beyond every cache): softmax is then bound by DRAM bandwidth, one read + one write.
  c.push_back({K::softmax, SoftmaxParams{}, {td({4096, 4096})}});

  // Norms: the BERT-base layer's add + layernorm at 128 and 512 tokens, BERT hidden states of a
  // batch (4096 tokens x 768), and a LLaMA-7B-width rmsnorm.
  c.push_back(norm(K::layernorm, {128, 768}, true));
  c.push_back(norm(K::layernorm, {512, 768}, true));
  c.push_back(norm(K::layernorm, {4096, 768}, false));
  c.push_back(norm(K::layernorm, {4096, 768}, true));
  c.push_back(norm(K::rmsnorm, {4096, 768}, false));
  c.push_back(norm(K::rmsnorm, {512, 4096}, true));
  // 64 MiB rows of 4096: DRAM-bound, one read of x and one write of y.
  c.push_back(norm(K::layernorm, {4096, 4096}, false));
  c.push_back(norm(K::rmsnorm, {4096, 4096}, false));

  // attention: BERT-base self-attention at 128 and 512 tokens, a causal decoder prefill, and a
  // long 2048-token context where the naive stage's materialized 2048 x 2048 score matrix per
  // head no longer fits in any cache (the naive run takes seconds: it runs one iteration).
  c.push_back(attention(1, 12, 128, 64));
  c.push_back(attention(1, 12, 512, 64));
  c.push_back(attention(1, 12, 512, 64, true));
  c.push_back(attention(1, 12, 2048, 64));

  // inverted_residual: MobileNetV2's 24-channel block at 56x56 (with residual), the stride-2
  // block that enters it (16 -> 24 channels, 112 -> 56), and the residual blocks of the 32-,
  // 96- and 160-channel stages.
  c.push_back(inverted_residual({1, 24, 56, 56}, 6, 24, 1));
  c.push_back(inverted_residual({1, 16, 112, 112}, 6, 24, 2));
  c.push_back(inverted_residual({1, 32, 28, 28}, 6, 32, 1));
  c.push_back(inverted_residual({1, 96, 14, 14}, 6, 96, 1));
  c.push_back(inverted_residual({1, 160, 7, 7}, 6, 160, 1));

  // eltwise_chain: 64 MiB through 4 steps (bias add, GELU, scale, ReLU): the naive stage makes
  // 4 passes over DRAM, a fused one 1.
  c.push_back(eltwise_chain({16777216}, bias_gelu_scale_relu()));
  return c;
}

std::vector<OpDesc> quick_cases() {
  using K = OpKind;
  const PostOp bn = PostOp::batchnorm(), add = PostOp::add(), relu = PostOp::activation(Activation::relu()),
               relu6 = PostOp::activation(Activation::relu6()),
               gelu = PostOp::activation(Activation::of(ActKind::gelu_erf));
  const Shape act{1, 32, 56, 56};  // 400 KB
  std::vector<OpDesc> c;
  c.push_back(gemm(64, 256, 128, true, {gelu}));
  c.push_back(conv(1, 32, 28, 28, 32, 3, 1, 1, 1, {bn, relu}));
  c.push_back(conv(1, 3, 56, 56, 16, 7, 2, 3, 1, {bn, relu, PostOp::maxpool(3, 2, 1)}));
  c.push_back(conv(1, 64, 28, 28, 32, 1, 1, 0, 1, {bn, add, relu}));
  c.push_back(conv(1, 48, 28, 28, 48, 3, 1, 1, 48, {bn, relu6}));
  c.push_back(batchnorm(act));
  for (K op : {K::relu, K::clip, K::leaky_relu, K::sigmoid, K::tanh, K::gelu, K::silu, K::hardswish})
    c.push_back(unary(op, act));
  for (K op : {K::add, K::sub, K::mul, K::div}) c.push_back(binary(op, act, act));
  c.push_back(pool(K::maxpool2d, act, 3, 2, 1));
  c.push_back(pool(K::avgpool2d, act, 2, 2, 0));
  c.push_back({K::global_avgpool, GlobalPoolParams{}, {td({1, 512, 7, 7})}});
  c.push_back({K::softmax, SoftmaxParams{}, {td({1, 12, 64, 64})}});
  c.push_back(norm(K::layernorm, {128, 768}, true));
  c.push_back(norm(K::rmsnorm, {128, 768}, false));
  c.push_back(attention(1, 4, 128, 64));
  c.push_back(inverted_residual({1, 24, 28, 28}, 6, 24, 1));
  c.push_back(eltwise_chain({262144}, bias_gelu_scale_relu()));
  return c;
}

}  // namespace opfuse::bench
