// simd/shared/norm_supports.cpp - ISA-independent supports() predicates of the simd norm-family
// kernels (compiled once, not per ISA). softmax, the pools and inverted_residual accept every
// valid desc; these two decline the layouts their row loops cannot walk contiguously.
#include <array>
#include <cassert>
#include <cstdint>
#include <cstdlib>
#include <initializer_list>
#include <memory>

#include "opfuse/primitive.hpp"
#include "simd/simd.hpp"

namespace opfuse::simd {

// layernorm / rmsnorm: the simd kernel treats memory as R contiguous rows of n floats (the
// normalized dims [axis, rank)), and x, y, residual and sum must share that row order. True
// when the normalized dims of size > 1 have the dense row-major strides of the normalized shape
// (always for NCHW and rank <= 2; for NHWC rank >= 3 only when the dims the channel dim
// interleaves with are 1), and the residual has x's layout.
bool norm_supports(const OpDesc& desc) {
  const NormParams& p = desc.p<NormParams>();
  const TensorDesc& x = desc.inputs[0];
  const int rank = x.shape.rank;
  const int axis = p.axis < 0 ? p.axis + rank : p.axis;
  const auto strides = dense_strides(x.shape, x.layout);
  std::int64_t expect = 1;
  for (int d = rank - 1; d >= axis; --d) {
    const auto u = static_cast<std::size_t>(d);
    if (x.shape.dims[u] == 1) continue;  // a size-1 dim's stride is never used
    if (strides[u] != expect) return false;
    expect *= x.shape.dims[u];
  }
  if (p.has_residual) {
    const bool has_bias = desc.op == OpKind::layernorm && p.has_bias;
    if (!(desc.inputs[has_bias ? 3 : 2] == x)) return false;  // same shape and memory order
  }
  return true;
}

// attention: q, k and v (and so o, which takes q's layout and head count) must be dense
// (B, H, S, D) so that a query, key or value row is a contiguous vector: NCHW, or NHWC with one
// head (then the two orders coincide).
bool attention_supports(const OpDesc& desc) {
  for (std::size_t i = 0; i < 3; ++i) {
    const TensorDesc& t = desc.inputs[i];
    if (t.layout != Layout::nchw && t.shape[1] != 1) return false;
  }
  return true;
}

// ---- broadcast strides ----------------------------------------------------------------------

std::array<std::int64_t, kMaxRank> broadcast_strides(const TensorDesc& operand, const Shape& out) {
  std::array<std::int64_t, kMaxRank> s{};
  const auto dense = dense_strides(operand.shape, operand.layout);
  const int shift = out.rank - operand.shape.rank;  // operand dims align with the trailing dims
  for (int d = shift < 0 ? 0 : shift; d < out.rank; ++d) {
    const auto od = static_cast<std::size_t>(d - shift);
    s[static_cast<std::size_t>(d)] = operand.shape.dims[od] == 1 ? 0 : dense[od];
  }
  return s;
}

// ---- inverted_residual as three registry convolutions -----------------------------------------
//
// The simd block is the naive block's sequence with each step handed to the best simd conv2d
// kernel (falling back to naive where none accepts): batchnorm, ReLU6 and the residual add
// ride along as post-op chains (fusion is data), so the block is three kernel calls over e and
// d in the workspace. The nested kernels are prepared here once (their own packing, state and
// workspace) and executed directly through their KernelDef, so the hot path allocates nothing
// and does not validate again what prepare already validated.

namespace {

struct AlignedFree {
  void operator()(float* p) const noexcept { std::free(p); }
};

struct SubKernel {
  OpDesc desc;
  const KernelDef* kernel = nullptr;
  std::shared_ptr<void> state;
  std::unique_ptr<float, AlignedFree> workspace;
  std::array<int, 8> inputs{};  // block input index of each sub input; -1 = the intermediate, -2 = unused
};

struct BlockState {
  SubKernel expand, dw, project;
  Shape e_shape, d_shape;
  Layout layout = Layout::nchw;
  std::size_t e_floats = 0;  // e's slice of the workspace (0 without an expand conv), rounded to 16
};

std::int64_t round16(std::int64_t n) { return (n + 15) / 16 * 16; }

struct Geometry {
  std::size_t dw, project;  // input positions of w_dw and w_project
  std::int64_t N, Cin, H, W, Ce, Cout, P, Q;
};
Geometry block_geometry(const OpDesc& d) {
  const auto& p = d.p<InvertedResidualParams>();
  Geometry g{};
  g.dw = p.has_expand ? 6 : 1;
  g.project = g.dw + 5;
  const Shape& x = d.inputs[0].shape;
  g.N = x[0], g.Cin = x[1], g.H = x[2], g.W = x[3];
  g.Ce = d.inputs[g.dw].shape[0];
  g.Cout = d.inputs[g.project].shape[0];
  g.P = (g.H - 1) / p.stride + 1, g.Q = (g.W - 1) / p.stride + 1;
  return g;
}

// Builds, validates and prepares one conv2d step. `from` lists, per conv input, the block input
// it reads (-1: the intermediate tensor `src`).
Status prepare_step(SubKernel& k, const TensorDesc& src, const OpDesc& block, const Conv2dParams& cp,
                    std::initializer_list<int> from, const Context& ctx, const Tensor* const* constants) {
  k.desc = OpDesc{OpKind::conv2d, cp, {}};
  k.inputs.fill(-2);
  std::size_t i = 0;
  std::array<const Tensor*, 8> consts{};
  for (int f : from) {
    k.desc.inputs.push_back(f < 0 ? src : block.inputs[static_cast<std::size_t>(f)]);
    consts[i] = f >= 0 && constants ? constants[f] : nullptr;
    k.inputs[i++] = f;
  }
  if (Status s = validate(k.desc); !s) return s;
  k.kernel = select_kernel(k.desc, ctx);
  if (!k.kernel) return {StatusCode::unsupported, "inverted_residual: no conv2d kernel accepts " + case_name(k.desc)};
  if (k.kernel->workspace) {
    const std::size_t floats = k.kernel->workspace(k.desc);
    if (floats > 0) {
      if (floats > (SIZE_MAX - 64) / sizeof(float))
        return {StatusCode::out_of_memory, "inverted_residual: conv2d workspace too large"};
      const std::size_t bytes = (floats * sizeof(float) + 63) / 64 * 64;
      k.workspace.reset(static_cast<float*>(std::aligned_alloc(64, bytes)));
      if (!k.workspace) return {StatusCode::out_of_memory, "inverted_residual: cannot allocate a conv2d workspace"};
    }
  }
  if (k.kernel->prepare) return k.kernel->prepare(k.desc, ctx, constants ? consts.data() : nullptr, k.state);
  return Status::ok();
}

void run_step(const SubKernel& k, const Tensor* const* block_in, const Tensor* src, const Tensor* dst, int threads) {
  std::array<const Tensor*, 8> in{};
  for (std::size_t i = 0; i < k.desc.inputs.size(); ++i)
    in[i] = k.inputs[i] < 0 ? src : block_in[static_cast<std::size_t>(k.inputs[i])];
  KernelArgs a;
  a.desc = &k.desc;
  a.in = in.data();
  a.out = &dst;
  a.workspace = k.workspace.get();
  a.state = k.state.get();
  a.threads = threads;
  k.kernel->execute(a);
}

}  // namespace

std::size_t inverted_residual_workspace(const OpDesc& desc) {
  const Geometry g = block_geometry(desc);
  const bool expand = desc.p<InvertedResidualParams>().has_expand;
  const std::int64_t e = expand ? round16(g.N * g.Ce * g.H * g.W) : 0;
  return static_cast<std::size_t>(e + g.N * g.Ce * g.P * g.Q);
}

Status inverted_residual_prepare(const OpDesc& desc, const Context& ctx, Isa isa, const Tensor* const* constants,
                                 std::shared_ptr<void>& state) {
  const auto& p = desc.p<InvertedResidualParams>();
  const Geometry g = block_geometry(desc);
  auto st = std::make_shared<BlockState>();
  st->layout = desc.inputs[0].layout;
  st->e_shape = Shape{g.N, g.Ce, g.H, g.W};
  st->d_shape = Shape{g.N, g.Ce, g.P, g.Q};
  st->e_floats = p.has_expand ? static_cast<std::size_t>(round16(g.N * g.Ce * g.H * g.W)) : 0;
  // Nested kernels: simd (or lower), no higher ISA than this block's row.
  Context sub = ctx;
  sub.stage = Stage::simd;
  sub.fallback = true;
  if (isa < sub.max_isa) sub.max_isa = isa;
  const Activation relu6 = Activation::relu6();
  const TensorDesc e{st->e_shape, st->layout}, d{st->d_shape, st->layout};
  const int dw = static_cast<int>(g.dw), pj = static_cast<int>(g.project);

  if (p.has_expand) {  // e = relu6(bn1(conv1x1(x, w_expand)))
    Conv2dParams cp;
    cp.post_ops = {PostOp::batchnorm(p.epsilon), PostOp::activation(relu6)};
    if (Status s = prepare_step(st->expand, desc.inputs[0], desc, cp, {0, 1, 2, 3, 4, 5}, sub, constants); !s) return s;
  }
  {  // d = relu6(bn2(depthwise3x3(e, w_dw, stride, pad 1)))
    Conv2dParams cp;
    cp.stride_h = cp.stride_w = p.stride;
    cp.pad_top = cp.pad_left = cp.pad_bottom = cp.pad_right = 1;
    cp.groups = g.Ce;
    cp.post_ops = {PostOp::batchnorm(p.epsilon), PostOp::activation(relu6)};
    const TensorDesc& src = p.has_expand ? e : desc.inputs[0];
    if (Status s = prepare_step(st->dw, src, desc, cp, {-1, dw, dw + 1, dw + 2, dw + 3, dw + 4}, sub, constants); !s)
      return s;
  }
  {  // y = bn3(conv1x1(d, w_project)) [+ x]
    Conv2dParams cp;
    cp.post_ops = {PostOp::batchnorm(p.epsilon)};
    if (p.residual) cp.post_ops.push_back(PostOp::add());
    Status s = p.residual
                   ? prepare_step(st->project, d, desc, cp, {-1, pj, pj + 1, pj + 2, pj + 3, pj + 4, 0}, sub, constants)
                   : prepare_step(st->project, d, desc, cp, {-1, pj, pj + 1, pj + 2, pj + 3, pj + 4}, sub, constants);
    if (!s) return s;
  }
  state = std::move(st);
  return Status::ok();
}

void inverted_residual_execute(const KernelArgs& args) {
  const auto& p = args.desc->p<InvertedResidualParams>();
  const auto& st = *static_cast<const BlockState*>(args.state);
  // e and d are views over the workspace: a view holds no buffer, so nothing is allocated.
  float* ws = args.workspace;
  Tensor e;
  if (p.has_expand) {
    Result<Tensor> ev = Tensor::view(ws, st.e_shape, st.layout);
    assert(ev.is_ok());
    e = *ev;
  }
  Result<Tensor> dv = Tensor::view(ws + st.e_floats, st.d_shape, st.layout);
  assert(dv.is_ok());
  const Tensor& x = *args.in[0];
  const Tensor* e_ptr = p.has_expand ? &e : &x;
  if (p.has_expand) run_step(st.expand, args.in, nullptr, &e, args.threads);
  run_step(st.dw, args.in, e_ptr, &*dv, args.threads);
  run_step(st.project, args.in, &*dv, args.out[0], args.threads);
}

}  // namespace opfuse::simd
