// naive/eltwise.cpp - elementwise ops: activations, broadcasting binary ops, and chains.
//
// The story. Elementwise ops do almost no arithmetic per element and move every element
// through memory at least twice (one load, one store), so their speed is set by memory
// bandwidth, never by the ALUs. The naive kernels walk the output's logical index with
// naive::next_index and find each operand element through its strides:
//   unary          y = act(x)                one pass (naive::activation_pass)
//   binary         y = a <op> b              one pass; NumPy broadcasting is a stride of 0
//                                            on every dim an operand lacks or has size 1
//                                            (naive::broadcast_strides, naive::binary_pass)
//   eltwise_chain  y = x, then per step       one full materialized pass per step: the first
//                  y = act(y) | y <op> opnd  reads x and writes y, every later one reads and
//                                            writes y. A chain of s steps streams the tensor
//                                            through memory s times.
// Every output element is computed from the input elements at the same logical index only,
// and is written after they are read, so y may share x's buffer (in-place) and a binary
// output may share the buffer of an operand that has the output's shape.
//
// What the simd stage changes: contiguous inner runs (the last memory dim, or the whole
// tensor when nothing broadcasts) become vector loads and stores with a scalar tail, the
// transcendental functions (exp, tanh, erf) become vector polynomial approximations, and
// the outer loop is split across threads. Broadcast operands are loaded once per run and
// splatted.
// What the fused stage keeps in registers: the whole chain. Each vector of x is loaded once,
// every step is applied to it while it sits in a register (binary steps load their operand
// vector), and y is stored once: one pass over memory instead of s, the same idea as the
// post-op chains of conv2d and gemm.
#include <cassert>
#include <cstdint>

#include "naive/common.hpp"
#include "naive/naive.hpp"

namespace opfuse::naive {

void unary(const KernelArgs& args) {
  assert(args.desc && is_unary(args.desc->op));
  const UnaryParams& p = args.desc->p<UnaryParams>();
  const Tensor& x = *args.in[0];
  const Tensor& y = *args.out[0];
  assert(x.data() && y.mutable_data() && x.shape() == y.shape());

  // x is (d0, ..., dr-1); y is (d0, ..., dr-1): y = act(x), one element at a time.
  activation_pass(p.act, x, y);
}

void binary(const KernelArgs& args) {
  assert(args.desc && is_binary(args.desc->op));
  const Tensor& a = *args.in[0];
  const Tensor& b = *args.in[1];
  const Tensor& y = *args.out[0];
  assert(a.data() && b.data() && y.mutable_data());

  // a and b broadcast to y's shape (d0, ..., dr-1); y = a <op> b, one element at a time.
  binary_pass(binary_kind_of(args.desc->op), a, b, y);
}

void eltwise_chain(const KernelArgs& args) {
  assert(args.desc && args.desc->op == OpKind::eltwise_chain);
  const ChainParams& p = args.desc->p<ChainParams>();
  const Tensor& x = *args.in[0];
  const Tensor& y = *args.out[0];
  assert(x.data() && y.mutable_data() && x.shape() == y.shape());

  // Binary steps take their operands from inputs 1, 2, ... in step order.
  const Tensor* const* operand = args.in + 1;

  // x is (d0, ..., dr-1); every operand broadcasts to it; y is (d0, ..., dr-1).
  // One full pass per step: the first reads x, the rest read y (which may be x's buffer).
  const Tensor* src = &x;
  for (const ChainStep& step : p.steps) {
    switch (step.kind) {
      case ChainStep::Kind::unary: activation_pass(step.act, *src, y); break;
      case ChainStep::Kind::binary:
        binary_pass(step.binary, *src, **operand, y);
        ++operand;
        break;
    }
    src = &y;
  }
  // An empty chain is the identity.
  if (p.steps.empty() && x.data() != y.data()) {
    [[maybe_unused]] const Status copied = y.copy_from(x);
    assert(copied.is_ok());
  }
}

}  // namespace opfuse::naive
