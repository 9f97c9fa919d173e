// simd/shared/conv_pool_supports.cpp - conv2d with a pool post-op as two registry kernels
// (compiled once, not per ISA; simd/conv_pool.cpp only names the ISA cap).
//
// The simd stage has no conv kernel that pools: the conv2d kernels of simd/conv.cpp decline a
// pool post-op (conv_post_ops_supported). So the composition runs the desc without its pool
// step - the convolution with the rest of its chain (batchnorm, binary, activation) - through
// the best simd conv2d kernel into the workspace, then the simd maxpool2d kernel from there
// into y. Both are chosen, sized and prepared once here (the conv gets the caller's bound
// weights and BN vectors as its constants: its inputs are the desc's inputs, since a pool step
// takes no operands) and executed through their KernelDefs, so execute allocates nothing and
// validates nothing twice. The full conv output round-trips through memory: what the fused
// stage's conv2d__fused_*_pool removes.
#include <array>
#include <cassert>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>

#include "opfuse/primitive.hpp"
#include "simd/simd.hpp"

namespace opfuse::simd {

namespace {

struct AlignedFree {
  void operator()(float* p) const noexcept { std::free(p); }
};

// One prepared registry kernel.
struct Sub {
  OpDesc desc;
  const KernelDef* kernel = nullptr;
  std::shared_ptr<void> state;
  std::unique_ptr<float, AlignedFree> workspace;
};

struct ConvPoolState {
  Sub conv, pool;
  TensorDesc mid;  // the conv output (N, K, P, Q), in the workspace
};

// The desc without its pool step, and that step's maxpool2d desc on the conv output.
OpDesc conv_part(const OpDesc& d) {
  Conv2dParams p = d.p<Conv2dParams>();
  p.post_ops.pop_back();
  return {OpKind::conv2d, p, d.inputs};
}

std::size_t round16(std::size_t n) { return (n + 15) / 16 * 16; }

Status prepare_sub(Sub& k, OpDesc desc, const Context& ctx, const Tensor* const* constants) {
  k.desc = std::move(desc);
  if (Status s = validate(k.desc); !s) return s;
  k.kernel = select_kernel(k.desc, ctx);
  if (!k.kernel)
    return {StatusCode::unsupported,
            "conv2d: no " + std::string(op_name(k.desc.op)) + " kernel accepts " + case_name(k.desc)};
  if (k.kernel->workspace) {
    const std::size_t floats = k.kernel->workspace(k.desc);
    if (floats > 0) {
      if (floats > (SIZE_MAX - 64) / sizeof(float)) return {StatusCode::out_of_memory, "conv2d: workspace too large"};
      const std::size_t bytes = (floats * sizeof(float) + 63) / 64 * 64;
      k.workspace.reset(static_cast<float*>(std::aligned_alloc(64, bytes)));
      if (!k.workspace) return {StatusCode::out_of_memory, "conv2d: cannot allocate a sub-kernel workspace"};
    }
  }
  if (k.kernel->prepare) return k.kernel->prepare(k.desc, ctx, constants, k.state);
  return Status::ok();
}

void run_sub(const Sub& k, const Tensor* const* in, const Tensor* out, int threads) {
  KernelArgs a;
  a.desc = &k.desc;
  a.in = in;
  a.out = &out;
  a.workspace = k.workspace.get();
  a.state = k.state.get();
  a.threads = threads;
  k.kernel->execute(a);
}

}  // namespace

bool conv_pool_supports(const OpDesc& desc) {
  const auto& p = desc.p<Conv2dParams>();
  return !p.post_ops.empty() && p.post_ops.back().kind == PostOp::Kind::pool;
}

TensorDesc conv_pool_mid(const OpDesc& desc) {
  auto outs = infer_outputs(conv_part(desc));
  assert(outs.is_ok());
  return outs.is_ok() ? (*outs)[0] : TensorDesc{};
}

std::size_t conv_pool_workspace(const OpDesc& desc) {
  return round16(static_cast<std::size_t>(conv_pool_mid(desc).shape.numel()));
}

Status conv_pool_prepare(const OpDesc& desc, const Context& ctx, Isa isa, const Tensor* const* constants,
                         std::shared_ptr<void>& state) {
  auto st = std::make_shared<ConvPoolState>();
  st->mid = conv_pool_mid(desc);
  // Nested kernels: simd (or lower), no higher ISA than this row's.
  Context sub = ctx;
  sub.stage = Stage::simd;
  sub.fallback = true;
  if (isa < sub.max_isa) sub.max_isa = isa;
  if (Status s = prepare_sub(st->conv, conv_part(desc), sub, constants); !s) return s;
  const OpDesc pool{OpKind::maxpool2d, desc.p<Conv2dParams>().post_ops.back().pool_params(), {st->mid}};
  if (Status s = prepare_sub(st->pool, pool, sub, nullptr); !s) return s;
  state = std::move(st);
  return Status::ok();
}

void conv_pool_execute(const KernelArgs& args) {
  const auto& st = *static_cast<const ConvPoolState*>(args.state);
  // The conv output is a view over the workspace: a view holds no buffer, nothing is allocated.
  Result<Tensor> mid = Tensor::view(args.workspace, st.mid.shape, st.mid.layout);
  assert(mid.is_ok());
  const Tensor* m = &*mid;
  run_sub(st.conv, args.in, m, args.threads);
  run_sub(st.pool, &m, args.out[0], args.threads);
}

}  // namespace opfuse::simd
