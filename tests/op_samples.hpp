// tests/op_samples.hpp - one small, valid OpDesc per op, and tensors bound to it.
//
// The samples exercise every optional input an op has (bias, post-op operands, mask,
// residual + write_sum, expansion), so tests that mutate them (test_errors.cpp) reach every
// validation rule, and tests that only need "some valid problem" (test_registry.cpp) have one.
#pragma once

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "opfuse/opfuse.hpp"

namespace opfuse::testing {

inline TensorDesc td(Shape s, Layout l = Layout::nchw) { return {s, l}; }

inline std::vector<OpKind> all_ops() {
  std::vector<OpKind> r;
  for (int i = 0; i < kOpCount; ++i) r.push_back(static_cast<OpKind>(i));
  return r;
}

inline OpDesc sample_desc(OpKind op);

// The ops whose sample satisfies `pred` (for suites that only apply to some ops).
template <class Pred>
std::vector<OpKind> ops_where(Pred pred) {
  std::vector<OpKind> r;
  for (OpKind op : all_ops())
    if (pred(sample_desc(op))) r.push_back(op);
  return r;
}

// A valid desc for `op`, small enough for the naive kernel to run instantly.
inline OpDesc sample_desc(OpKind op) {
  OpDesc d{op, default_params(op), {}};
  switch (op) {
    case OpKind::gemm: {
      // y (4,5) = a (4,6) b (6,5) + bias (5), then + residual (4,5), then relu.
      GemmParams p;
      p.has_bias = true;
      p.post_ops = {PostOp::add(), PostOp::activation(Activation::relu())};
      d.params = p;
      d.inputs = {td({4, 6}), td({6, 5}), td({5}), td({4, 5})};
      break;
    }
    case OpKind::conv2d: {
      // x (1,4,7,7) * w (6,4,3,3), stride 1, pad 1, bias (6), then batchnorm (6) and relu.
      Conv2dParams p;
      p.pad_top = p.pad_left = p.pad_bottom = p.pad_right = 1;
      p.has_bias = true;
      p.post_ops = {PostOp::batchnorm(), PostOp::activation(Activation::relu())};
      d.params = p;
      d.inputs = {td({1, 4, 7, 7}), td({6, 4, 3, 3}), td({6}), td({6}), td({6}), td({6}), td({6})};
      break;
    }
    case OpKind::batchnorm: d.inputs = {td({2, 3, 4, 5}), td({3}), td({3}), td({3}), td({3})}; break;
    case OpKind::add:
    case OpKind::sub:
    case OpKind::mul:
    case OpKind::div: d.inputs = {td({2, 3, 4, 5}), td({2, 3, 4, 5})}; break;
    case OpKind::maxpool2d:
    case OpKind::avgpool2d: {
      Pool2dParams p;
      p.kernel_h = p.kernel_w = 3;
      p.stride_h = p.stride_w = 2;
      p.pad_top = p.pad_left = p.pad_bottom = p.pad_right = 1;
      d.params = p;
      d.inputs = {td({1, 3, 8, 8})};
      break;
    }
    case OpKind::global_avgpool: d.inputs = {td({2, 3, 5, 5})}; break;
    case OpKind::softmax: {
      SoftmaxParams p;
      p.has_mask = true;
      d.params = p;
      d.inputs = {td({2, 3, 7}), td({1, 3, 7})};
      break;
    }
    case OpKind::layernorm: {
      NormParams p;
      p.has_residual = true;
      p.write_sum = true;
      d.params = p;
      d.inputs = {td({3, 8}), td({8}), td({8}), td({3, 8})};
      break;
    }
    case OpKind::rmsnorm: {
      NormParams p = std::get<NormParams>(default_params(op));
      p.has_residual = true;
      p.write_sum = true;
      d.params = p;
      d.inputs = {td({3, 8}), td({8}), td({3, 8})};
      break;
    }
    case OpKind::attention: {
      // q (1,2,5,4), k (1,2,6,4), v (1,2,6,3), mask (1,1,5,6) -> o (1,2,5,3).
      AttentionParams p;
      p.has_mask = true;
      d.params = p;
      d.inputs = {td({1, 2, 5, 4}), td({1, 2, 6, 4}), td({1, 2, 6, 3}), td({1, 1, 5, 6})};
      break;
    }
    case OpKind::inverted_residual: {
      // x (1,4,6,6), expand to 8 channels, depthwise 3x3 / 1, project back to 4, residual.
      InvertedResidualParams p;
      p.residual = true;
      d = inverted_residual_desc(td({1, 4, 6, 6}), 8, 4, p);
      break;
    }
    case OpKind::eltwise_chain: {
      // x (2,3,4): + a (2,3,4), relu, * b (1,1,4), sigmoid.
      d.params = ChainParams{{ChainStep::binary_step(BinaryKind::add), ChainStep::unary_step(Activation::relu()),
                              ChainStep::binary_step(BinaryKind::mul),
                              ChainStep::unary_step(Activation::of(ActKind::sigmoid))}};
      d.inputs = {td({2, 3, 4}), td({2, 3, 4}), td({1, 1, 4})};
      break;
    }
    default: d.inputs = {td({2, 3, 4, 5})}; break;  // unary ops
  }
  return d;
}

// The value written into outputs before a call that must fail; it must survive the call.
inline constexpr float kSentinel = -12345.5f;

// A desc with owning tensors for it: inputs hold deterministic values (variances and
// divisors positive), outputs hold kSentinel.
struct Bound {
  OpDesc desc;
  std::vector<Tensor> in, out;

  std::vector<const Tensor*> in_ptrs() const {
    std::vector<const Tensor*> r;
    for (const Tensor& t : in) r.push_back(&t);
    return r;
  }
  std::vector<const Tensor*> out_ptrs() const {
    std::vector<const Tensor*> r;
    for (const Tensor& t : out) r.push_back(&t);
    return r;
  }
};

inline void fill(const Tensor& t, float v) {
  float* p = t.mutable_data();
  for (std::int64_t i = 0; i < t.numel(); ++i) p[i] = v;
}

inline void fill_pattern(const Tensor& t, std::uint32_t seed, bool positive) {
  float* p = t.mutable_data();
  std::uint32_t s = seed * 2654435761u + 1u;
  for (std::int64_t i = 0; i < t.numel(); ++i) {
    s = s * 1664525u + 1013904223u;
    const float u = static_cast<float>(s >> 8) * 0x1p-24f;  // [0, 1)
    p[i] = positive ? 0.5f + u : 2.f * u - 1.f;
  }
}

// Tensors for a valid desc (asserts in the caller that infer_outputs succeeds).
inline Bound bind(const OpDesc& desc) {
  Bound b{desc, {}, {}};
  const std::vector<std::string> names = input_names(desc);
  for (std::size_t i = 0; i < desc.inputs.size(); ++i) {
    Tensor t = Tensor::create(desc.inputs[i].shape, desc.inputs[i].layout).value();
    const std::string& n = names[i];
    const bool positive = n.ends_with("var") || (desc.op == OpKind::div && n == "b") || n.ends_with(".div");
    fill_pattern(t, static_cast<std::uint32_t>(i + 1), positive);
    b.in.push_back(t);
  }
  const std::vector<TensorDesc> outs = infer_outputs(desc).value();
  for (const TensorDesc& od : outs) {
    Tensor t = Tensor::create(od.shape, od.layout).value();
    fill(t, kSentinel);
    b.out.push_back(t);
  }
  return b;
}

// Number of elements of `t` that no longer hold kSentinel.
inline std::int64_t touched(const Tensor& t) {
  std::int64_t n = 0;
  for (std::int64_t i = 0; i < t.numel(); ++i) n += t.data()[i] != kSentinel;
  return n;
}

}  // namespace opfuse::testing

namespace opfuse {
// Test parameters print as op names ("conv2d"), not as byte dumps.
inline void PrintTo(OpKind op, std::ostream* os) { *os << op_name(op); }
}  // namespace opfuse
