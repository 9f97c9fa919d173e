// fuzz/fuzz_ops.cpp - libFuzzer target: the single-op API with hostile descs.
//
// Each input starts from one op's small valid sample (tests/op_samples.hpp) and then lets the
// bytes rewrite it: dims set to 0, 1, -1, huge or overflowing values, ranks changed, layouts
// flipped, every parameter of the op's struct (strides, pads, dilations, groups, axes, scales,
// epsilons, flags) set to edge values, post-op chains replaced by random ones of every kind, the
// stage and ISA cap chosen, and the output aliased onto an input. The library must answer every
// one with a Status (prepare or execute), never crash, and when it accepts a problem, run it
// without an ASan or UBSan report. Problems larger than kMaxElements are prepared but not run,
// so one input stays fast.
#include <fuzzer/FuzzedDataProvider.h>

#include <cstddef>
#include <cstdint>
#include <limits>
#include <vector>

#include "opfuse/opfuse.hpp"
#include "tests/op_samples.hpp"

namespace {

using namespace opfuse;

constexpr std::int64_t kMaxElements = std::int64_t{1} << 20;

std::int64_t edge_int(FuzzedDataProvider& f) {
  static constexpr std::int64_t kEdges[] = {0,
                                            1,
                                            2,
                                            3,
                                            -1,
                                            -2,
                                            7,
                                            16,
                                            33,
                                            std::int64_t{1} << 31,
                                            std::int64_t{1} << 32,
                                            std::int64_t{1} << 62,
                                            std::numeric_limits<std::int64_t>::max(),
                                            std::numeric_limits<std::int64_t>::min()};
  if (f.ConsumeBool()) return f.PickValueInArray(kEdges);
  return f.ConsumeIntegralInRange<std::int64_t>(-4, 64);
}

float edge_float(FuzzedDataProvider& f) {
  static constexpr float kEdges[] = {0.f,
                                     1.f,
                                     -1.f,
                                     1e-5f,
                                     -1e-5f,
                                     6.f,
                                     1e30f,
                                     -1e30f,
                                     std::numeric_limits<float>::denorm_min(),
                                     std::numeric_limits<float>::infinity(),
                                     -std::numeric_limits<float>::infinity(),
                                     std::numeric_limits<float>::quiet_NaN()};
  if (f.ConsumeBool()) return f.PickValueInArray(kEdges);
  return f.ConsumeFloatingPointInRange<float>(-8.f, 8.f);
}

Activation random_act(FuzzedDataProvider& f) {
  Activation a;
  a.kind = static_cast<ActKind>(f.ConsumeIntegralInRange<int>(0, static_cast<int>(ActKind::linear) + 1));
  a.alpha = edge_float(f);
  a.beta = edge_float(f);
  return a;
}

PostOps random_post_ops(FuzzedDataProvider& f) {
  PostOps ops(f.ConsumeIntegralInRange<std::size_t>(0, 4));
  for (PostOp& p : ops) {
    switch (f.ConsumeIntegralInRange<int>(0, 4)) {
      case 0: p = PostOp::batchnorm(edge_float(f)); break;
      case 1: p = PostOp::binary_op(static_cast<BinaryKind>(f.ConsumeIntegralInRange<int>(0, 4))); break;
      case 2:
        p = PostOp::maxpool(PostOp::Window{edge_int(f), edge_int(f), edge_int(f), edge_int(f), edge_int(f), edge_int(f),
                                           edge_int(f), edge_int(f)});
        break;
      default: p = PostOp::activation(random_act(f)); break;
    }
  }
  return ops;
}

// Rewrites the parameters of the desc's op; every field reachable.
void mutate_params(FuzzedDataProvider& f, OpDesc& d) {
  std::visit(
      [&](auto& p) {
        using P = std::decay_t<decltype(p)>;
        if constexpr (std::is_same_v<P, GemmParams>) {
          if (f.ConsumeBool()) p.alpha = edge_float(f);
          if (f.ConsumeBool()) p.beta = edge_float(f);
          p.trans_a = f.ConsumeBool();
          p.trans_b = f.ConsumeBool();
          if (f.ConsumeBool()) p.has_bias = !p.has_bias;
          if (f.ConsumeBool()) p.post_ops = random_post_ops(f);
        } else if constexpr (std::is_same_v<P, Conv2dParams>) {
          std::int64_t* fields[] = {&p.stride_h, &p.stride_w,   &p.dilation_h, &p.dilation_w, &p.pad_top,
                                    &p.pad_left, &p.pad_bottom, &p.pad_right,  &p.groups};
          for (std::int64_t* v : fields)
            if (f.ConsumeBool()) *v = edge_int(f);
          if (f.ConsumeBool()) p.has_bias = !p.has_bias;
          if (f.ConsumeBool()) p.post_ops = random_post_ops(f);
        } else if constexpr (std::is_same_v<P, BatchnormParams>) {
          p.epsilon = edge_float(f);
        } else if constexpr (std::is_same_v<P, UnaryParams>) {
          if (f.ConsumeBool()) p.act = random_act(f);
        } else if constexpr (std::is_same_v<P, Pool2dParams>) {
          std::int64_t* fields[] = {&p.kernel_h,   &p.kernel_w, &p.stride_h, &p.stride_w,   &p.dilation_h,
                                    &p.dilation_w, &p.pad_top,  &p.pad_left, &p.pad_bottom, &p.pad_right};
          for (std::int64_t* v : fields)
            if (f.ConsumeBool()) *v = edge_int(f);
          p.ceil_mode = f.ConsumeBool();
          p.count_include_pad = f.ConsumeBool();
        } else if constexpr (std::is_same_v<P, SoftmaxParams>) {
          if (f.ConsumeBool()) p.axis = static_cast<int>(edge_int(f));
          if (f.ConsumeBool()) p.scale = edge_float(f);
          if (f.ConsumeBool()) p.has_mask = !p.has_mask;
        } else if constexpr (std::is_same_v<P, NormParams>) {
          if (f.ConsumeBool()) p.axis = static_cast<int>(edge_int(f));
          if (f.ConsumeBool()) p.epsilon = edge_float(f);
          if (f.ConsumeBool()) p.has_bias = !p.has_bias;
          if (f.ConsumeBool()) p.has_residual = !p.has_residual;
          if (f.ConsumeBool()) p.write_sum = !p.write_sum;
        } else if constexpr (std::is_same_v<P, AttentionParams>) {
          if (f.ConsumeBool()) p.scale = edge_float(f);
          if (f.ConsumeBool()) p.has_mask = !p.has_mask;
          p.causal = f.ConsumeBool();
          if (f.ConsumeBool()) p.packed_qkv = !p.packed_qkv;
        } else if constexpr (std::is_same_v<P, InvertedResidualParams>) {
          if (f.ConsumeBool()) p.has_expand = !p.has_expand;
          if (f.ConsumeBool()) p.stride = edge_int(f);
          if (f.ConsumeBool()) p.residual = !p.residual;
          if (f.ConsumeBool()) p.epsilon = edge_float(f);
        } else if constexpr (std::is_same_v<P, ChainParams>) {
          if (f.ConsumeBool()) {
            p.steps.resize(f.ConsumeIntegralInRange<std::size_t>(0, 6));
            for (ChainStep& s : p.steps)
              s = f.ConsumeBool()
                      ? ChainStep::unary_step(random_act(f))
                      : ChainStep::binary_step(static_cast<BinaryKind>(f.ConsumeIntegralInRange<int>(0, 4)));
          }
        }
      },
      d.params);
  // Now and then the wrong parameter struct for the op altogether.
  if (f.ConsumeIntegralInRange<int>(0, 15) == 0)
    d.params = default_params(static_cast<OpKind>((static_cast<int>(d.op) + 1) % kOpCount));
}

void mutate_inputs(FuzzedDataProvider& f, OpDesc& d) {
  if (f.ConsumeIntegralInRange<int>(0, 7) == 0) d.inputs.resize(f.ConsumeIntegralInRange<std::size_t>(0, 20));
  const int edits = f.ConsumeIntegralInRange<int>(0, 6);
  for (int e = 0; e < edits && !d.inputs.empty(); ++e) {
    TensorDesc& t = d.inputs[f.ConsumeIntegralInRange<std::size_t>(0, d.inputs.size() - 1)];
    switch (f.ConsumeIntegralInRange<int>(0, 3)) {
      case 0: t.shape.rank = f.ConsumeIntegralInRange<int>(-1, kMaxRank + 1); break;
      case 1: t.layout = t.layout == Layout::nchw ? Layout::nhwc : Layout::nchw; break;
      default:
        if (t.shape.rank > 0 && t.shape.rank <= kMaxRank)
          t.shape.dims[f.ConsumeIntegralInRange<int>(0, t.shape.rank - 1)] = edge_int(f);
    }
  }
}

std::int64_t elements(const TensorDesc& t) {
  std::int64_t n = 1;
  for (int i = 0; i < t.shape.rank; ++i)
    if (t.shape.dims[i] < 0 || __builtin_mul_overflow(n, t.shape.dims[i], &n)) return -1;
  return n;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  FuzzedDataProvider f(data, size);
  const auto op = static_cast<OpKind>(f.ConsumeIntegralInRange<int>(0, kOpCount - 1));
  OpDesc d = testing::sample_desc(op);
  if (f.ConsumeBool()) mutate_params(f, d);
  if (f.ConsumeBool()) mutate_inputs(f, d);
  Context ctx;
  ctx.stage = static_cast<Stage>(f.ConsumeIntegralInRange<int>(0, 2));
  ctx.threads = f.ConsumeIntegralInRange<int>(0, 2);
  ctx.max_isa = static_cast<Isa>(f.ConsumeIntegralInRange<int>(0, 3));
  const bool alias = f.ConsumeBool();
  Result<Primitive> prim = prepare(d, ctx);
  if (!prim) return 0;  // refused with a Status: what a hostile desc should get

  // Accepted: the desc must then be runnable. Bind tensors unless the problem is too large to
  // run quickly, fill the inputs from the remaining bytes (NaN, Inf and denormals included).
  std::int64_t total = 0;
  for (const TensorDesc& t : d.inputs) {
    const std::int64_t n = elements(t);
    if (n < 0 || __builtin_add_overflow(total, n, &total)) return 0;
  }
  for (const TensorDesc& t : prim->output_descs()) {
    const std::int64_t n = elements(t);
    if (n < 0 || __builtin_add_overflow(total, n, &total)) return 0;
  }
  if (total > kMaxElements) return 0;
  std::vector<Tensor> in, out;
  for (const TensorDesc& t : d.inputs) {
    Result<Tensor> x = Tensor::create(t.shape, t.layout);
    if (!x) return 0;
    float* p = x->mutable_data();
    for (std::int64_t i = 0; i < x->numel(); ++i) p[i] = f.remaining_bytes() ? edge_float(f) : 0.5f;
    in.push_back(*x);
  }
  for (const TensorDesc& t : prim->output_descs()) {
    Result<Tensor> y = Tensor::create(t.shape, t.layout);
    if (!y) return 0;
    out.push_back(*y);
  }
  std::vector<const Tensor*> ip, op_;
  for (const Tensor& t : in) ip.push_back(&t);
  for (const Tensor& t : out) op_.push_back(&t);
  // In place: the first output onto the first input of the same shape (the library either
  // supports the aliasing or refuses it; it must not read freed or half-written data).
  if (alias && !ip.empty() && !op_.empty() && in[0].shape() == out[0].shape()) op_[0] = ip[0];
  (void)prim->execute(ip, op_);
  return 0;
}
