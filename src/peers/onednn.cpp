// src/peers/onednn.cpp - oneDNN 2.6 peers: every opfuse op as oneDNN primitives.
//
// What it does. prepare() turns an OpDesc into a Pipeline: a list of oneDNN primitives with
// their memory objects, built once (engine, stream, op descriptors, primitive descriptors,
// primitives, weight reorders, scratch buffers, one shared user-managed scratchpad). The user
// tensors are bound at execute time with memory::set_data_handle, so the hot path only binds
// pointers, folds batchnorm vectors (O(channels); into convolution weights O(K*C*R*S)) and
// calls dnnl_primitive_execute.
//
// Mapping, op by op (fp32 only; memory descriptors use explicit strides taken from the
// tensor's layout, which oneDNN matches to the plain tags ab/ba, nchw/nhwc, ...):
//   gemm        matmul; trans_a/trans_b are the strides of a (M,K) / b (K,N) view ("ba");
//               alpha = output scale; beta = sum post-op (first, only when beta != 0);
//               bias = the matmul bias argument (reshaped to 2-D) when alpha == 1, else a
//               binary-add post-op after the sum (oneDNN 2.x computes (acc + bias) * scale,
//               which differs from alpha*acc + bias); then the post-op chain.
//   conv2d      convolution_forward (direct), set up as an expert oneDNN user would (add_conv):
//               batchnorms directly after the convolution (one or several in a row) fold into
//               its weights and bias, w' = w*s, b' = (b - mean)*s + beta with s = g/sqrt(v+eps),
//               at execute (the vectors arrive with the data); the first add of an operand of
//               the full output shape is a sum post-op (the operand is reordered into the
//               destination first, skipped when it is y). Weights `any`: the (folded) weights
//               are reordered into oneDNN's blocked layout on every execute (no caching, so a
//               changed weight buffer is never missed). src/dst: the user's layout when oneDNN
//               has a JIT kernel for it (NHWC: brgconv, brdgmm_dw); for NCHW it has only
//               gemm:jit, so NCHW runs in nChw16c (jit:avx512_core, jit_1x1, jit_dw) where the
//               channels fill blocks of 16 (a source of < 16 channels stays NCHW), else in the
//               formats oneDNN picks for `any` (NHWC); the reorders from x and into y run inside
//               execute and count in its time. Dilation = ours - 1; asymmetric pads.
//               A pool post-op (conv + ... + maxpool, the ResNet stem) is a second primitive:
//               see add_conv_pool.
//   post-ops    activation -> eltwise post-op, binary -> binary post-op (operand reshaped to
//               the output rank), batchnorm (on conv2d only where it does not directly follow
//               the convolution; gemm) -> folded to a per-channel scale s = g/sqrt(v+eps) and
//               shift t = b - m*s (in double at execute) applied as binary mul + binary add
//               post-ops. oneDNN 2.6.3 convolutions get binary post-ops wrong on a
//               channels-last output unless the operand is a scalar, per-channel or a full
//               tensor in the output's layout (see conv_post_op_ok; a destination in a format
//               of oneDNN's choosing is held to scalar / per-channel): from the first other
//               operand on, the chain runs as binary primitives in place on y.
//   batchnorm   batch_normalization_forward (inference, use_global_stats|use_scale|use_shift).
//   unary       eltwise_forward: relu, clip, relu(alpha) for leaky_relu, logistic, tanh,
//               gelu_erf / gelu_tanh, swish(alpha=1) for silu, hardswish (2.6: x*relu6(x+3)/6).
//   add..div    binary; oneDNN broadcasts src1 only (see BinPlan): a with the output shape
//               is src0; else add/mul swap a and b, sub computes -(b - a), div and the case
//               where both broadcast first materialize 0 + a in the output's shape.
//   pooling     pooling_v2_forward (dilation = ours - 1); ceil mode by enlarging padding_r;
//               avg with count_include_pad where a ceil window overhangs the padding: oneDNN
//               divides by the full kernel, so a binary mul by kernel/positions follows.
//   global_avgpool  avg pooling with an HxW kernel.
//   softmax     [eltwise linear (scale)] [binary add mask] then softmax_forward, in y.
//   layernorm   [binary add residual -> sum or y] then layer_normalization_forward over the
//               2-D view (prod(dims < axis), prod(dims >= axis)), or over x itself when the
//               axis is the last; channels-last with other axes: reduction_mean, binary sub,
//               eltwise square, reduction_mean, eltwise linear + pow(-1/2), binary mul/add.
//   rmsnorm     sequence: [binary add] eltwise square, reduction mean, eltwise linear (+eps),
//               eltwise pow(-1/2), binary mul, binary mul scale.
//   attention   matmul QK^T (output scale), [binary add mask], [binary add causal 0/-inf
//               mask built at prepare], softmax, matmul with V; 4-D batched matmuls.
//   eltwise_chain  leading unary steps as eltwise primitives, then the first binary step as a
//               binary primitive with every later step as its post-ops; if oneDNN has no
//               implementation for that, one primitive per step, in place in y.
//   inverted_residual  three convolutions (add_conv) with their BNs folded into the weights
//               and clip 0..6 eltwise post-ops; the intermediates stay in the formats oneDNN
//               picks (NHWC: brgconv_1x1, brdgmm_dw), reorders only from x and into y; the
//               residual add is a sum post-op of the projection.
// Anything oneDNN cannot express exactly is declined by supports(): clip with lo > hi, and
// attention with causal and Sq > Skv (a query with no visible key, where opfuse outputs 0).
//
// Where oneDNN's results differ by data, not by desc (supports() cannot see data):
//   NaN/Inf  oneDNN's relu and clip map NaN to 0 / the lower bound, max pooling skips NaN,
//            softmax of a row holding NaN or +Inf is not all NaN; opfuse propagates NaN.
//   -inf     a softmax row (or attention row) whose scores are all -inf gives NaN in oneDNN,
//            all zeros in opfuse.
// So the oneDNN peers are a reference for finite inputs with finite masks only.
#include <algorithm>
#include <cassert>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <new>
#include <optional>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "oneapi/dnnl/dnnl.hpp"
#include "opfuse/tensor.hpp"
#include "peers/peers.hpp"

namespace opfuse::peers::onednn {

namespace {

using dnnl::algorithm;
using dnnl::memory;
using Dims = memory::dims;
using ArgMap = std::unordered_map<int, memory>;
constexpr memory::data_type f32 = memory::data_type::f32;
constexpr dnnl::prop_kind inference = dnnl::prop_kind::forward_inference;

// ---- memory descriptors --------------------------------------------------------------------

// Descriptor of a dense tensor, optionally viewed at a higher rank by prepending size-1 dims
// (NumPy broadcasting aligns trailing dims). Strides follow the tensor's layout.
memory::desc md_of(const TensorDesc& t, int rank = 0) {
  const int r = std::max(rank, t.shape.rank);
  const int shift = r - t.shape.rank;
  const auto st = dense_strides(t.shape, t.layout);
  Dims dims(static_cast<std::size_t>(r)), strides(static_cast<std::size_t>(r));
  for (int i = 0; i < r; ++i) {
    const auto u = static_cast<std::size_t>(i);
    if (i < shift) {
      dims[u] = 1;
      strides[u] = t.shape.numel();
    } else {
      dims[u] = t.shape[i - shift];
      strides[u] = st[static_cast<std::size_t>(i - shift)];
    }
  }
  return memory::desc(dims, f32, strides);
}

// Row-major (plain `abc...`) descriptor.
memory::desc plain_md(const Dims& dims) {
  Dims strides(dims.size());
  memory::dim step = 1;
  for (std::size_t i = dims.size(); i-- > 0;) {
    strides[i] = step;
    step *= dims[i];
  }
  return memory::desc(dims, f32, strides);
}

// Shape of `t` aligned to `rank` by prepending 1s.
Shape aligned(const Shape& s, int rank) {
  Shape r;
  r.rank = rank;
  const int shift = rank - s.rank;
  for (int i = 0; i < rank; ++i) r[i] = i < shift ? 1 : s[i - shift];
  return r;
}

// ---- elementwise building blocks -----------------------------------------------------------

struct Elt {
  algorithm alg;
  float alpha, beta;
};

Elt elt_of(const Activation& a) {
  switch (a.kind) {
    case ActKind::relu: return {algorithm::eltwise_relu, 0.f, 0.f};
    case ActKind::clip: return {algorithm::eltwise_clip, a.alpha, a.beta};
    case ActKind::leaky_relu: return {algorithm::eltwise_relu, a.alpha, 0.f};
    case ActKind::sigmoid: return {algorithm::eltwise_logistic, 0.f, 0.f};
    case ActKind::tanh: return {algorithm::eltwise_tanh, 0.f, 0.f};
    case ActKind::gelu_erf: return {algorithm::eltwise_gelu_erf, 0.f, 0.f};
    case ActKind::gelu_tanh: return {algorithm::eltwise_gelu_tanh, 0.f, 0.f};
    case ActKind::silu: return {algorithm::eltwise_swish, 1.f, 0.f};
    case ActKind::hardswish: return {algorithm::eltwise_hardswish, 0.f, 0.f};
    case ActKind::linear: return {algorithm::eltwise_linear, a.alpha, a.beta};
  }
  return {algorithm::eltwise_linear, 1.f, 0.f};
}

// oneDNN's clip is min(max(x, lo), hi); ours tests lo first, so they agree only for lo <= hi.
bool act_ok(const Activation& a) { return a.kind != ActKind::clip || a.alpha <= a.beta; }

algorithm binary_alg(BinaryKind k) {
  switch (k) {
    case BinaryKind::add: return algorithm::binary_add;
    case BinaryKind::sub: return algorithm::binary_sub;
    case BinaryKind::mul: return algorithm::binary_mul;
    case BinaryKind::div: return algorithm::binary_div;
  }
  return algorithm::binary_add;
}

bool post_ops_ok(const PostOps& ops) {
  for (const PostOp& p : ops)
    if (p.kind == PostOp::Kind::activation && !act_ok(p.act)) return false;
  return true;
}

// ---- the prepared state --------------------------------------------------------------------

struct FreeAligned {
  void operator()(void* p) const noexcept { std::free(p); }
};
using Buffer = std::unique_ptr<void, FreeAligned>;

Buffer alloc_bytes(std::size_t bytes) {
  const std::size_t rounded = (std::max<std::size_t>(bytes, 1) + 63) / 64 * 64;
  void* p = std::aligned_alloc(64, rounded);
  if (!p) throw std::bad_alloc();
  std::memset(p, 0, rounded);
  return Buffer(p);
}

// A batchnorm folded to scale/shift: inputs first..first+3 are (scale, bias, mean, var).
struct Fold {
  int first;
  float eps;
  std::int64_t channels;
  float* s;
  float* t;
};

// Convolution weights with the batchnorms that directly follow the convolution folded in:
// w'[k] = w[k] * s[k], b'[k] = (b[k] - mean[k]) * s[k] + beta[k] with s = g / sqrt(var + eps),
// repeated for each batchnorm in a row (composed in double, rounded once). Every layout keeps
// output channel k's inner = C/groups*R*S weights contiguous at k * inner (dim 0 is outermost),
// so the folded weights have the user's layout and go through the same weight reorder.
struct WeightFold {
  int w_in;                                // user weights (K, C/groups, R, S)
  int bias_in;                             // user bias (K), or -1
  std::vector<std::pair<int, float>> bns;  // first operand (scale) of each batchnorm, epsilon
  std::int64_t channels, inner;
  float* w;  // K * inner folded weights
  float* b;  // K folded biases
};

struct Step {
  dnnl::primitive prim;
  ArgMap args;
  memory::desc scratch_md;
  std::vector<dnnl_exec_arg_t> c_args;  // built once in finalize(): execute allocates nothing
  bool skip_if_alias = false;           // a reorder (FROM -> TO) skipped when both are one buffer
};

struct Pipeline {
  dnnl::engine eng{dnnl::engine::kind::cpu, 0};
  dnnl::stream strm{eng};
  struct Bind {
    memory mem;
    bool output;
    int index;
  };
  std::vector<Bind> binds;
  std::vector<Step> steps;
  std::vector<Fold> folds;
  std::vector<WeightFold> weight_folds;
  std::vector<Buffer> buffers;
  Buffer scratchpad;

  // What a tentative build added, so that it can be taken back (see add_conv).
  struct Mark {
    std::size_t binds, steps, folds, weight_folds, buffers;
  };
  Mark mark() const { return {binds.size(), steps.size(), folds.size(), weight_folds.size(), buffers.size()}; }
  void rollback(const Mark& m) {
    binds.resize(m.binds);
    steps.resize(m.steps);
    folds.resize(m.folds);
    weight_folds.resize(m.weight_folds);
    buffers.resize(m.buffers);
  }

  // A memory object that execute() points at input / output `i`.
  memory input(int i, const memory::desc& md) {
    memory m(md, eng, DNNL_MEMORY_NONE);
    binds.push_back({m, false, i});
    return m;
  }
  memory output(int i, const memory::desc& md) {
    memory m(md, eng, DNNL_MEMORY_NONE);
    binds.push_back({m, true, i});
    return m;
  }
  // A buffer owned by the pipeline (intermediates, reordered weights).
  memory buffer(const memory::desc& md) {
    buffers.push_back(alloc_bytes(md.get_size()));
    return memory(md, eng, buffers.back().get());
  }
  float* floats(std::int64_t n) {
    buffers.push_back(alloc_bytes(static_cast<std::size_t>(n) * sizeof(float)));
    return static_cast<float*>(buffers.back().get());
  }
  void add(const dnnl::primitive_desc_base& pd, dnnl::primitive prim, ArgMap args) {
    steps.push_back({std::move(prim), std::move(args), pd.scratchpad_desc(), {}});
  }
  // One scratchpad buffer serves every step (they run one after another).
  void finalize() {
    std::size_t most = 0;
    for (const Step& s : steps) most = std::max(most, s.scratch_md.get_size());
    scratchpad = alloc_bytes(most);
    for (Step& s : steps) {
      if (s.scratch_md.get_size() > 0) s.args[DNNL_ARG_SCRATCHPAD] = memory(s.scratch_md, eng, scratchpad.get());
      s.c_args.clear();
      for (const auto& [arg, mem] : s.args) s.c_args.push_back({arg, mem.get()});
    }
  }
};

dnnl::primitive_attr make_attr() {
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  return attr;
}

// One post-op of a chain together with the input index of its first operand.
struct ChainItem {
  PostOp op;
  int operand = -1;
};

std::vector<ChainItem> chain_of(const PostOps& ops, int first_operand) {
  std::vector<ChainItem> items;
  int next = first_operand;
  for (const PostOp& p : ops) {
    items.push_back({p, post_op_operands(p) > 0 ? next : -1});
    next += post_op_operands(p);
  }
  return items;
}

bool is_plain(const memory::desc& md) { return md == plain_md(md.dims()); }

// Whether oneDNN 2.6.3 convolutions apply a binary post-op with this operand correctly. With
// a channels-last destination they do not for operands that broadcast over anything but the
// channels, nor for a full operand in another layout (measured: every such case of
// (N,1,1,1), (N,C,1,1), (1,C,H,W) with N > 1, (1,1,H,W) and an NCHW operand on an NHWC
// destination is wrong, for gemm:jit and the avx512 kernels alike). Scalars, per-channel
// vectors and a full operand in the destination's own layout are right, and so is every
// operand on a plain destination. The binary primitive itself handles all of these. A
// destination of format `any` (chosen by oneDNN) is neither plain nor equal to an operand,
// so it gets the channels-last rule.
bool conv_post_op_ok(const memory::desc& operand, const memory::desc& dst) {
  if (is_plain(dst) || operand == dst) return true;
  const Dims dims = operand.dims();
  for (std::size_t i = 0; i < dims.size(); ++i)
    if (i != 1 && dims[i] != 1) return false;
  return true;
}

// Appends items[begin..] to `ops`; binary operands and folded BN vectors go into `args`.
// The output has rank `out_rank` with `channels` channels in logical dim 1. With `conv_dst`
// it stops at the first binary operand conv_post_op_ok() refuses and returns its index
// (add_chain_tail runs the rest); otherwise it returns items.size(). With `sum_operand`
// (a convolution), the first add of an operand with the output's full shape becomes a sum
// post-op and *sum_operand its input index: the caller copies that operand into the
// destination before the convolution runs.
std::size_t append_chain(Pipeline& pl, const OpDesc& d, const std::vector<ChainItem>& items, std::size_t begin,
                         int out_rank, std::int64_t channels, const memory::desc* conv_dst, dnnl::post_ops& ops,
                         ArgMap& args, int* sum_operand = nullptr) {
  for (std::size_t i = begin; i < items.size(); ++i) {
    const ChainItem& it = items[i];
    switch (it.op.kind) {
      case PostOp::Kind::activation: {
        const Elt e = elt_of(it.op.act);
        ops.append_eltwise(1.f, e.alg, e.alpha, e.beta);
        break;
      }
      case PostOp::Kind::binary: {
        const memory::desc md = md_of(d.inputs[static_cast<std::size_t>(it.operand)], out_rank);
        if (sum_operand && *sum_operand < 0 && conv_dst && it.op.binary == BinaryKind::add &&
            md.dims() == conv_dst->dims()) {
          ops.append_sum(1.f);
          *sum_operand = it.operand;
          break;
        }
        if (conv_dst && !conv_post_op_ok(md, *conv_dst)) return i;
        const int idx = ops.len();
        ops.append_binary(binary_alg(it.op.binary), md);
        args[DNNL_ARG_ATTR_MULTIPLE_POST_OP(idx) | DNNL_ARG_SRC_1] = pl.input(it.operand, md);
        break;
      }
      case PostOp::Kind::batchnorm: {
        Dims cd(static_cast<std::size_t>(out_rank), 1);
        cd[1] = channels;
        const memory::desc md = plain_md(cd);
        float* s = pl.floats(channels);
        float* t = pl.floats(channels);
        pl.folds.push_back({it.operand, it.op.epsilon, channels, s, t});
        int idx = ops.len();
        ops.append_binary(algorithm::binary_mul, md);
        args[DNNL_ARG_ATTR_MULTIPLE_POST_OP(idx) | DNNL_ARG_SRC_1] = memory(md, pl.eng, s);
        idx = ops.len();
        ops.append_binary(algorithm::binary_add, md);
        args[DNNL_ARG_ATTR_MULTIPLE_POST_OP(idx) | DNNL_ARG_SRC_1] = memory(md, pl.eng, t);
        break;
      }
      case PostOp::Kind::pool:  // never a post-op here: add_conv_pool runs it as a pooling primitive
        throw std::logic_error("a pool post-op inside a primitive's post-ops");
    }
  }
  return items.size();
}

// Runs items[from..] on the convolution output y in place: each binary step the convolution
// could not take becomes a binary primitive (y = y op operand) carrying the following steps
// as its post-ops.
void add_chain_tail(Pipeline& pl, const OpDesc& d, const std::vector<ChainItem>& items, std::size_t from,
                    std::int64_t channels, const memory::desc& y_md, const memory& y) {
  const int rank = static_cast<int>(y_md.dims().size());
  while (from < items.size()) {
    const ChainItem& it = items[from];  // a binary step
    const memory::desc b_md = md_of(d.inputs[static_cast<std::size_t>(it.operand)], rank);
    ArgMap args;
    dnnl::primitive_attr attr = make_attr();
    dnnl::post_ops ops;
    const std::size_t next = append_chain(pl, d, items, from + 1, rank, channels, &y_md, ops, args);
    attr.set_post_ops(ops);
    const dnnl::binary::primitive_desc pd({binary_alg(it.op.binary), y_md, b_md, y_md}, attr, pl.eng);
    args[DNNL_ARG_SRC_0] = y;
    args[DNNL_ARG_SRC_1] = pl.input(it.operand, b_md);
    args[DNNL_ARG_DST] = y;
    pl.add(pd, dnnl::binary(pd), std::move(args));
    from = next;
  }
}

// Adds y = eltwise(x) (in place when x and y are the same memory).
void add_eltwise(Pipeline& pl, const Elt& e, const memory::desc& md, const memory& x, const memory& y) {
  const dnnl::eltwise_forward::primitive_desc pd({inference, e.alg, md, e.alpha, e.beta}, make_attr(), pl.eng);
  pl.add(pd, dnnl::eltwise_forward(pd), {{DNNL_ARG_SRC, x}, {DNNL_ARG_DST, y}});
}

// Adds y = a <alg> b; b's descriptor may broadcast.
void add_binary(Pipeline& pl, algorithm alg, const memory::desc& amd, const memory& a, const memory::desc& bmd,
                const memory& b, const memory::desc& ymd, const memory& y) {
  const dnnl::binary::primitive_desc pd({alg, amd, bmd, ymd}, make_attr(), pl.eng);
  pl.add(pd, dnnl::binary(pd), {{DNNL_ARG_SRC_0, a}, {DNNL_ARG_SRC_1, b}, {DNNL_ARG_DST, y}});
}

// ---- per-op builders ---------------------------------------------------------------------------

void build_gemm(Pipeline& pl, const OpDesc& d, const std::vector<TensorDesc>& outs) {
  const auto& p = d.p<GemmParams>();
  const Shape& a = d.inputs[0].shape;
  const Shape& b = d.inputs[1].shape;
  const memory::dim m = p.trans_a ? a[1] : a[0], k = p.trans_a ? a[0] : a[1];
  const memory::dim n = p.trans_b ? b[0] : b[1];
  // a is stored (M,K) or, transposed, (K,M); the (M,K) view of the latter has strides (1, M).
  const memory::desc a_md({m, k}, f32, p.trans_a ? Dims{1, m} : Dims{k, 1});
  const memory::desc b_md({k, n}, f32, p.trans_b ? Dims{1, k} : Dims{n, 1});
  const memory::desc y_md = md_of(outs[0], 2);

  ArgMap args;
  dnnl::primitive_attr attr = make_attr();
  if (p.alpha != 1.f) attr.set_output_scales(0, {p.alpha});
  dnnl::post_ops ops;
  if (p.beta != 0.f) ops.append_sum(p.beta);
  const bool bias_arg = p.has_bias && p.alpha == 1.f;
  std::vector<ChainItem> chain;
  if (p.has_bias && !bias_arg) chain.push_back({PostOp::add(), 2});
  for (const ChainItem& it : chain_of(p.post_ops, p.has_bias ? 3 : 2)) chain.push_back(it);
  append_chain(pl, d, chain, 0, 2, n, nullptr, ops, args);
  attr.set_post_ops(ops);

  const memory::desc bias_md = p.has_bias ? md_of(d.inputs[2], 2) : memory::desc();
  const dnnl::matmul::desc md =
      bias_arg ? dnnl::matmul::desc(a_md, b_md, bias_md, y_md) : dnnl::matmul::desc(a_md, b_md, y_md);
  const dnnl::matmul::primitive_desc pd(md, attr, pl.eng);
  args[DNNL_ARG_SRC] = pl.input(0, a_md);
  args[DNNL_ARG_WEIGHTS] = pl.input(1, b_md);
  if (bias_arg) args[DNNL_ARG_BIAS] = pl.input(2, bias_md);
  args[DNNL_ARG_DST] = pl.output(0, y_md);
  pl.add(pd, dnnl::matmul(pd), std::move(args));
}

// Adds a reorder from -> to (each memory's own descriptor). With skip_if_alias, execute skips
// it when both are bound to one buffer.
void add_reorder(Pipeline& pl, const memory& from, const memory& to, bool skip_if_alias = false) {
  const dnnl::reorder::primitive_desc rpd(pl.eng, from.get_desc(), pl.eng, to.get_desc(), make_attr());
  pl.add(rpd, dnnl::reorder(rpd), {{DNNL_ARG_FROM, from}, {DNNL_ARG_TO, to}});
  pl.steps.back().skip_if_alias = skip_if_alias;
}

// The format a convolution's NCHW user tensor `md` takes inside the convolution when oneDNN
// has only gemm:jit for NCHW itself: nChw16c (the native layout of its jit:avx512 kernels)
// where the channels fill whole blocks of 16; a source of fewer than 16 channels stays NCHW
// (oneDNN's first-convolution kernels read it); anything else `any`. Measured, 1 thread: with
// `any` oneDNN 2.6 picks NHWC (brgconv), which is as fast as nChw16c inside the convolution
// (3x3 64->64 @56, 1x1 256->64), but NCHW <-> NHWC reorders cost several times as much as
// NCHW <-> nChw16c ones (256x56x56 in, 144x56x56 out), so with `any` the depthwise 144 @56
// +bn+relu6 ran at less than half the speed it has blocked, and the 1x1 256->64 +bn+add+relu
// was slower too.
memory::desc blocked_format(const memory::desc& md, bool src) {
  const Dims dims = md.dims();
  if (is_plain(md) && dims[1] % 16 == 0) return memory::desc(dims, f32, memory::format_tag::nChw16c);
  if (is_plain(md) && src && dims[1] < 16) return md;
  return memory::desc(dims, f32, memory::format_tag::any);
}

// Whether oneDNN picked one of its direct JIT convolutions (brgconv, jit, jit_1x1, jit_dw,
// ...) rather than the im2col GEMM fallback (gemm:jit) or the reference loops.
bool jit_conv(const dnnl::convolution_forward::primitive_desc& pd) {
  const std::string impl = pd.impl_info_str();
  return impl.find("gemm") == std::string::npos && impl.find("ref") == std::string::npos;
}

// One convolution of x (in any format: the user's layout, or an intermediate in oneDNN's)
// with weights from input `w_in`, an optional bias input and a post-op chain, into the user
// tensor *y, or with y == nullptr into a new buffer in the format oneDNN chose (the result,
// returned). Built the way oneDNN's own users build it:
//  - batchnorms at the head of the chain fold into the weights and bias (WeightFold, at
//    execute, since they arrive with the data); the folded weights then take the weight
//    reorder into oneDNN's blocked format, every execute (no caching, so a changed weight
//    buffer is never missed);
//  - the first add of an operand with the output's full shape is a sum post-op: a reorder
//    copies the operand into the convolution's destination first (skipped when the operand
//    already is y);
//  - formats, the first of these oneDNN has a JIT convolution for (not gemm:jit or ref): the
//    formats x and y have (NHWC: brgconv, brdgmm_dw; an intermediate: its own format); with
//    `blocked` and y, blocked_format() of each (NCHW user tensors: nChw16c); else src/dst
//    `any`. Reorders x -> the convolution's src format and its dst format -> y run inside
//    execute and are part of its cost.
// Binary post-ops on a destination of unknown format follow the channels-last rule of
// conv_post_op_ok (scalar and per-channel operands only); the rest of the chain from the
// first other operand runs as binary primitives on y (add_chain_tail).
memory add_conv(Pipeline& pl, const OpDesc& d, const Conv2dParams& p, const memory& x, int w_in, int bias_in,
                const std::vector<ChainItem>& chain, const Dims& ydims, const memory* y, bool blocked) {
  const TensorDesc& wd = d.inputs[static_cast<std::size_t>(w_in)];
  const Shape& w = wd.shape;  // (K, C/groups, R, S)
  const memory::dim g = p.groups, k = w[0];
  Dims wdims;
  memory::desc w_user;
  if (g == 1) {
    wdims = {w[0], w[1], w[2], w[3]};
    w_user = md_of(wd);
  } else {
    const auto ws = dense_strides(w, wd.layout);
    wdims = {g, w[0] / g, w[1], w[2], w[3]};
    w_user = memory::desc(wdims, f32, Dims{w[0] / g * ws[0], ws[0], ws[1], ws[2], ws[3]});
  }
  std::size_t bns = 0;  // leading batchnorms, folded into the weights
  while (bns < chain.size() && chain[bns].op.kind == PostOp::Kind::batchnorm) ++bns;
  const std::vector<ChainItem> rest(chain.begin() + static_cast<std::ptrdiff_t>(bns), chain.end());
  const bool with_bias = bns > 0 || bias_in >= 0;
  const memory::desc bias_md = with_bias ? plain_md({k}) : memory::desc();
  const memory::desc w_any(wdims, f32, memory::format_tag::any);
  const memory::desc y_any(ydims, f32, memory::format_tag::any);
  const memory::desc x_md = x.get_desc();

  const Dims strides{p.stride_h, p.stride_w}, dilates{p.dilation_h - 1, p.dilation_w - 1};
  const Dims pad_l{p.pad_top, p.pad_left}, pad_r{p.pad_bottom, p.pad_right};
  struct Built {
    dnnl::convolution_forward::primitive_desc pd;
    ArgMap args;
    std::size_t stop = 0;  // rest[stop..] runs after the convolution (add_chain_tail)
    int sum = -1;          // input copied into the destination for the sum post-op
  };
  const auto build = [&](const memory::desc& src_md, const memory::desc& dst_md) {
    Built b;
    dnnl::primitive_attr attr = make_attr();
    dnnl::post_ops ops;
    b.stop = append_chain(pl, d, rest, 0, 4, k, &dst_md, ops, b.args, &b.sum);
    attr.set_post_ops(ops);
    const dnnl::convolution_forward::desc cd =
        with_bias ? dnnl::convolution_forward::desc(inference, algorithm::convolution_direct, src_md, w_any, bias_md,
                                                    dst_md, strides, dilates, pad_l, pad_r)
                  : dnnl::convolution_forward::desc(inference, algorithm::convolution_direct, src_md, w_any, dst_md,
                                                    strides, dilates, pad_l, pad_r);
    b.pd = dnnl::convolution_forward::primitive_desc(cd, attr, pl.eng);
    return b;
  };
  // Candidate formats, best first; the first one oneDNN has a JIT convolution for wins, and
  // a rejected attempt's pipeline entries are taken back.
  std::vector<std::pair<memory::desc, memory::desc>> cands{{x_md, y ? y->get_desc() : y_any}};
  if (blocked && y) cands.push_back({blocked_format(x_md, true), blocked_format(y->get_desc(), false)});
  std::optional<Built> built;
  for (const auto& [src_md, dst_md] : cands) {
    const Pipeline::Mark mark = pl.mark();
    try {
      built = build(src_md, dst_md);
      if (jit_conv(built->pd)) break;
    } catch (const dnnl::error& e) {
      if (e.status != dnnl_unimplemented) throw;
    }
    built.reset();
    pl.rollback(mark);
  }
  if (!built) built = build(memory::desc(x_md.dims(), f32, memory::format_tag::any), y_any);
  const dnnl::convolution_forward::primitive_desc& pd = built->pd;
  ArgMap args = std::move(built->args);

  memory src = x;
  if (pd.src_desc() != x_md) {
    src = pl.buffer(pd.src_desc());
    add_reorder(pl, x, src);
  }
  memory wmem;
  if (bns > 0) {
    const std::int64_t inner = w[1] * w[2] * w[3];
    WeightFold f{w_in, bias_in, {}, k, inner, pl.floats(k * inner), pl.floats(k)};
    for (std::size_t i = 0; i < bns; ++i) f.bns.emplace_back(chain[i].operand, chain[i].op.epsilon);
    wmem = memory(w_user, pl.eng, f.w);
    args[DNNL_ARG_BIAS] = memory(bias_md, pl.eng, f.b);
    pl.weight_folds.push_back(std::move(f));
  } else {
    wmem = pl.input(w_in, w_user);
    if (bias_in >= 0) args[DNNL_ARG_BIAS] = pl.input(bias_in, bias_md);
  }
  if (pd.weights_desc() != w_user) {
    const memory packed = pl.buffer(pd.weights_desc());
    add_reorder(pl, wmem, packed);
    wmem = packed;
  }
  const bool into_y = y && pd.dst_desc() == y->get_desc();
  const memory dst = into_y ? *y : pl.buffer(pd.dst_desc());
  if (built->sum >= 0) {
    const auto u = static_cast<std::size_t>(built->sum);
    add_reorder(pl, pl.input(built->sum, md_of(d.inputs[u], 4)), dst, into_y);
  }
  args[DNNL_ARG_SRC] = src;
  args[DNNL_ARG_WEIGHTS] = wmem;
  args[DNNL_ARG_DST] = dst;
  pl.add(pd, dnnl::convolution_forward(pd), std::move(args));
  if (!y) {
    if (built->stop < rest.size()) throw std::logic_error("a post-op chain left over on an intermediate");
    return dst;
  }
  if (!into_y) add_reorder(pl, dst, *y);
  add_chain_tail(pl, d, rest, built->stop, k, y->get_desc(), *y);
  return *y;
}

// The convolution's own output (N, K, P, Q) in x's layout: y's shape, or what a pool post-op
// pools into y.
TensorDesc conv_output(const OpDesc& d) {
  const auto& p = d.p<Conv2dParams>();
  const Shape& x = d.inputs[0].shape;
  const Shape& w = d.inputs[1].shape;
  const std::int64_t oh = (x[2] + p.pad_top + p.pad_bottom - p.dilation_h * (w[2] - 1) - 1) / p.stride_h + 1;
  const std::int64_t ow = (x[3] + p.pad_left + p.pad_right - p.dilation_w * (w[3] - 1) - 1) / p.stride_w + 1;
  return {Shape{x[0], w[0], oh, ow}, d.inputs[0].layout};
}

bool has_pool(const Conv2dParams& p) { return !p.post_ops.empty() && p.post_ops.back().kind == PostOp::Kind::pool; }

void add_conv_pool(Pipeline& pl, const OpDesc& d, const memory& x, const memory& y, const TensorDesc& y_td);

void build_conv2d(Pipeline& pl, const OpDesc& d, const std::vector<TensorDesc>& outs) {
  const auto& p = d.p<Conv2dParams>();
  const memory x = pl.input(0, md_of(d.inputs[0]));
  const memory y = pl.output(0, md_of(outs[0]));
  if (has_pool(p)) {
    add_conv_pool(pl, d, x, y, outs[0]);
  } else {
    const Shape& o = outs[0].shape;
    add_conv(pl, d, p, x, 1, p.has_bias ? 2 : -1, chain_of(p.post_ops, p.has_bias ? 3 : 2), {o[0], o[1], o[2], o[3]},
             &y, true);
  }
}

// The intermediates stay in the formats oneDNN picks for `any` (NHWC with oneDNN 2.6 on
// AVX-512: brgconv_1x1, brdgmm_dw); only x and y are in the user's layout. Measured for NCHW
// users, 1 thread: the 24-channel block at 56 runs faster this way than with every tensor in
// nChw16c (24 channels pad to 32), and the stride-2 block runs the same either way.
void build_inverted_residual(Pipeline& pl, const OpDesc& d, const std::vector<TensorDesc>& outs) {
  const auto& p = d.p<InvertedResidualParams>();
  const TensorDesc& xd = d.inputs[0];
  const std::int64_t n = xd.shape[0], h = xd.shape[2], w = xd.shape[3];
  const PostOp bn = PostOp::batchnorm(p.epsilon);
  const PostOp relu6 = PostOp::activation(Activation::relu6());

  memory cur = pl.input(0, md_of(xd));
  int idx = 1;
  if (p.has_expand) {
    const std::int64_t ce = d.inputs[1].shape[0];
    cur = add_conv(pl, d, Conv2dParams{}, cur, 1, -1, {{bn, 2}, {relu6, -1}}, {n, ce, h, w}, nullptr, false);
    idx = 6;
  }
  // Depthwise 3x3, pad 1, stride s: inputs idx (w_dw), idx+1..idx+4 (bn2).
  const std::int64_t ce = d.inputs[static_cast<std::size_t>(idx)].shape[0];
  const Shape& ys = outs[0].shape;
  Conv2dParams dw;
  dw.stride_h = dw.stride_w = p.stride;
  dw.pad_top = dw.pad_left = dw.pad_bottom = dw.pad_right = 1;
  dw.groups = ce;
  cur = add_conv(pl, d, dw, cur, idx, -1, {{bn, idx + 1}, {relu6, -1}}, {n, ce, ys[2], ys[3]}, nullptr, false);
  // Project 1x1: inputs idx+5 (w_project), idx+6..idx+9 (bn3); the residual x (input 0)
  // becomes a sum post-op.
  std::vector<ChainItem> chain{{bn, idx + 6}};
  if (p.residual) chain.push_back({PostOp::add(), 0});
  const memory y = pl.output(0, md_of(outs[0]));
  add_conv(pl, d, Conv2dParams{}, cur, idx + 5, -1, chain, {ys[0], ys[1], ys[2], ys[3]}, &y, false);
}

void build_batchnorm(Pipeline& pl, const OpDesc& d, const std::vector<TensorDesc>& outs) {
  const auto& p = d.p<BatchnormParams>();
  const memory::desc x_md = md_of(d.inputs[0]);
  const auto flags = dnnl::normalization_flags::use_global_stats | dnnl::normalization_flags::use_scale |
                     dnnl::normalization_flags::use_shift;
  const dnnl::batch_normalization_forward::primitive_desc pd({inference, x_md, p.epsilon, flags}, make_attr(), pl.eng);
  const memory::desc c_md = plain_md({d.inputs[0].shape[1]});
  pl.add(pd, dnnl::batch_normalization_forward(pd),
         {{DNNL_ARG_SRC, pl.input(0, x_md)},
          {DNNL_ARG_SCALE, pl.input(1, c_md)},
          {DNNL_ARG_SHIFT, pl.input(2, c_md)},
          {DNNL_ARG_MEAN, pl.input(3, c_md)},
          {DNNL_ARG_VARIANCE, pl.input(4, c_md)},
          {DNNL_ARG_DST, pl.output(0, md_of(outs[0]))}});
}

void build_unary(Pipeline& pl, const OpDesc& d, const std::vector<TensorDesc>& outs) {
  const memory::desc md = md_of(d.inputs[0]);
  add_eltwise(pl, elt_of(d.p<UnaryParams>().act), md, pl.input(0, md), pl.output(0, md_of(outs[0])));
}

// How a binary op maps onto oneDNN's binary primitive, which broadcasts src1 only.
enum class BinPlan : std::uint8_t {
  direct,       // a has the output shape: y = a op b
  swapped,      // add / mul, only b has it: y = b op a (commutative, bit-exact)
  negated,      // sub, only b has it: y = b - a, then y = -y (IEEE negation is exact)
  broadcast,    // neither has it: y = 0 + a (a broadcast into y, exact up to the sign of zero),
                // then y = y op b in place. Neither input can alias y here.
  materialize,  // div, only b has it (and y may alias b): t = 0 + a into a buffer, y = t / b
};

BinPlan binary_plan(const OpDesc& d, const Shape& out) {
  const bool a_full = aligned(d.inputs[0].shape, out.rank) == out;
  const bool b_full = aligned(d.inputs[1].shape, out.rank) == out;
  if (a_full) return BinPlan::direct;
  if (!b_full) return BinPlan::broadcast;
  if (d.op == OpKind::add || d.op == OpKind::mul) return BinPlan::swapped;
  if (d.op == OpKind::sub) return BinPlan::negated;
  return BinPlan::materialize;
}

void build_binary(Pipeline& pl, const OpDesc& d, const std::vector<TensorDesc>& outs) {
  const int r = outs[0].shape.rank;
  const memory::desc a_md = md_of(d.inputs[0], r), b_md = md_of(d.inputs[1], r), y_md = md_of(outs[0]);
  const algorithm alg = binary_alg(binary_kind_of(d.op));
  const memory y = pl.output(0, y_md);
  switch (binary_plan(d, outs[0].shape)) {
    case BinPlan::direct: add_binary(pl, alg, a_md, pl.input(0, a_md), b_md, pl.input(1, b_md), y_md, y); break;
    case BinPlan::swapped: add_binary(pl, alg, b_md, pl.input(1, b_md), a_md, pl.input(0, a_md), y_md, y); break;
    case BinPlan::negated:
      add_binary(pl, algorithm::binary_sub, b_md, pl.input(1, b_md), a_md, pl.input(0, a_md), y_md, y);
      add_eltwise(pl, {algorithm::eltwise_linear, -1.f, 0.f}, y_md, y, y);
      break;
    case BinPlan::broadcast: {
      const memory zeros = pl.buffer(y_md);  // zero-filled at allocation, never written
      add_binary(pl, algorithm::binary_add, y_md, zeros, a_md, pl.input(0, a_md), y_md, y);
      add_binary(pl, alg, y_md, y, b_md, pl.input(1, b_md), y_md, y);
      break;
    }
    case BinPlan::materialize: {
      const memory zeros = pl.buffer(y_md), t = pl.buffer(y_md);
      add_binary(pl, algorithm::binary_add, y_md, zeros, a_md, pl.input(0, a_md), y_md, t);
      add_binary(pl, alg, y_md, t, b_md, pl.input(1, b_md), y_md, y);
      break;
    }
  }
}

// Pooling geometry along one spatial dim: oneDNN's right padding that yields `out` outputs.
struct PoolDim {
  std::int64_t in, out, kernel, stride, dilation, pad_l, pad_r;
  std::int64_t extent() const { return (kernel - 1) * dilation + 1; }
  std::int64_t onednn_pad_r() const {
    // Floor mode: our bottom/right pad already gives `out`. Ceil mode: enlarge it.
    if ((in + pad_l + pad_r - extent()) / stride + 1 == out) return pad_r;
    return (out - 1) * stride + extent() - in - pad_l;
  }
  // Every window holds at least one input element (no empty max / average).
  bool windows_nonempty() const {
    for (std::int64_t o = 0; o < out; ++o) {
      bool any = false;
      for (std::int64_t k = 0; k < kernel && !any; ++k) {
        const std::int64_t i = o * stride - pad_l + k * dilation;
        any = i >= 0 && i < in;
      }
      if (!any) return false;
    }
    return true;
  }
  // Every window lies inside the padded input [-pad_l, in + pad_r).
  bool windows_inside_padding() const { return (out - 1) * stride - pad_l + extent() <= in + pad_r; }
  // Window positions of output o inside the padded input (average pooling: no dilation).
  std::int64_t positions_in_padding(std::int64_t o) const {
    const std::int64_t lo = o * stride - pad_l;
    return std::min(lo + kernel, in + pad_r) - std::max(lo, -pad_l);
  }
};

PoolDim pool_dim(const Pool2dParams& p, const Shape& x, const Shape& y, int axis) {
  if (axis == 0) return {x[2], y[2], p.kernel_h, p.stride_h, p.dilation_h, p.pad_top, p.pad_bottom};
  return {x[3], y[3], p.kernel_w, p.stride_w, p.dilation_w, p.pad_left, p.pad_right};
}

void build_pool(Pipeline& pl, const OpDesc& d, const std::vector<TensorDesc>& outs) {
  const memory::desc x_md = md_of(d.inputs[0]), y_md = md_of(outs[0]);
  algorithm alg = algorithm::pooling_avg_exclude_padding;
  Dims kernel, strides, dilation{0, 0}, pad_l{0, 0}, pad_r{0, 0};
  if (d.op == OpKind::global_avgpool) {
    kernel = {d.inputs[0].shape[2], d.inputs[0].shape[3]};
    strides = {1, 1};
  } else {
    const auto& p = d.p<Pool2dParams>();
    const PoolDim ph = pool_dim(p, d.inputs[0].shape, outs[0].shape, 0);
    const PoolDim pw = pool_dim(p, d.inputs[0].shape, outs[0].shape, 1);
    if (d.op == OpKind::maxpool2d) {
      alg = algorithm::pooling_max;
      dilation = {ph.dilation - 1, pw.dilation - 1};
    } else if (p.count_include_pad) {
      alg = algorithm::pooling_avg_include_padding;
    }
    kernel = {ph.kernel, pw.kernel};
    strides = {ph.stride, pw.stride};
    pad_l = {ph.pad_l, pw.pad_l};
    pad_r = {ph.onednn_pad_r(), pw.onednn_pad_r()};
  }
  const dnnl::pooling_v2_forward::primitive_desc pd(
      {inference, alg, x_md, y_md, strides, kernel, dilation, pad_l, pad_r}, make_attr(), pl.eng);
  const memory y = pl.output(0, y_md);
  pl.add(pd, dnnl::pooling_v2_forward(pd), {{DNNL_ARG_SRC, pl.input(0, x_md)}, {DNNL_ARG_DST, y}});
  if (alg != algorithm::pooling_avg_include_padding) return;
  // oneDNN divides by kernel_h * kernel_w; we divide by the window positions inside the padded
  // input, which is fewer where a ceil-mode window overhangs it. Rescale those outputs by
  // kernel / positions, a (1, 1, P, Q) map of window geometry built here.
  const auto& p = d.p<Pool2dParams>();
  const PoolDim ph = pool_dim(p, d.inputs[0].shape, outs[0].shape, 0);
  const PoolDim pw = pool_dim(p, d.inputs[0].shape, outs[0].shape, 1);
  if (ph.windows_inside_padding() && pw.windows_inside_padding()) return;
  const memory::desc f_md = plain_md({1, 1, ph.out, pw.out});
  float* f = pl.floats(ph.out * pw.out);
  for (std::int64_t i = 0; i < ph.out; ++i)
    for (std::int64_t j = 0; j < pw.out; ++j)
      f[i * pw.out + j] =
          static_cast<float>(static_cast<double>(ph.kernel * pw.kernel) /
                             static_cast<double>(ph.positions_in_padding(i) * pw.positions_in_padding(j)));
  add_binary(pl, algorithm::binary_mul, y_md, y, f_md, memory(f_md, pl.eng, f), y_md, y);
}

// conv2d with a pool post-op (the ResNet stem: conv + bn + relu + maxpool 3x3/2). oneDNN has no
// pooling post-op, so its users write two primitives, and so does this peer: the convolution
// with the chain before the pool (batchnorms folded into its weights as add_conv does) into an
// intermediate in the format oneDNN picks (nChw16c for the stem's NCHW 3-channel source), then
// pooling_v2 max on that format, then one reorder of the pooled (4x smaller) result into y.
// A chain whose binary operands the convolution cannot take on an intermediate runs on a plain
// intermediate in x's layout instead (add_conv's chain tail).
void add_conv_pool(Pipeline& pl, const OpDesc& d, const memory& x, const memory& y, const TensorDesc& y_td) {
  const auto& p = d.p<Conv2dParams>();
  std::vector<ChainItem> chain = chain_of(p.post_ops, p.has_bias ? 3 : 2);
  const Pool2dParams pp = chain.back().op.pool_params();
  chain.pop_back();
  const TensorDesc c_td = conv_output(d);
  const Shape& cs = c_td.shape;
  const Dims cdims{cs[0], cs[1], cs[2], cs[3]};
  memory t;
  const Pipeline::Mark mark = pl.mark();
  try {
    t = add_conv(pl, d, p, x, 1, p.has_bias ? 2 : -1, chain, cdims, nullptr, false);
  } catch (const std::logic_error&) {  // a chain step left over on the intermediate
    pl.rollback(mark);
    t = pl.buffer(md_of(c_td));
    add_conv(pl, d, p, x, 1, p.has_bias ? 2 : -1, chain, cdims, &t, true);
  }
  const PoolDim ph = pool_dim(pp, cs, y_td.shape, 0), pw = pool_dim(pp, cs, y_td.shape, 1);
  const memory::desc y_md = y.get_desc();
  const memory::desc pooled_any(y_md.dims(), f32, memory::format_tag::any);
  const dnnl::pooling_v2_forward::primitive_desc pd(
      {inference, algorithm::pooling_max, t.get_desc(), pooled_any, Dims{ph.stride, pw.stride},
       Dims{ph.kernel, pw.kernel}, Dims{0, 0}, Dims{ph.pad_l, pw.pad_l}, Dims{ph.onednn_pad_r(), pw.onednn_pad_r()}},
      make_attr(), pl.eng);
  const bool into_y = pd.dst_desc() == y_md;
  const memory dst = into_y ? y : pl.buffer(pd.dst_desc());
  pl.add(pd, dnnl::pooling_v2_forward(pd), {{DNNL_ARG_SRC, t}, {DNNL_ARG_DST, dst}});
  if (!into_y) add_reorder(pl, dst, y);
}

int norm_axis(int axis, int rank) { return axis < 0 ? axis + rank : axis; }

void build_softmax(Pipeline& pl, const OpDesc& d, const std::vector<TensorDesc>& outs) {
  const auto& p = d.p<SoftmaxParams>();
  const int r = d.inputs[0].shape.rank;
  const memory::desc x_md = md_of(d.inputs[0]), y_md = md_of(outs[0]);
  memory src = pl.input(0, x_md);
  const memory y = pl.output(0, y_md);
  memory::desc src_md = x_md;
  // softmax(scale * x + mask): the pre-steps write into y, softmax then runs in place.
  if (p.scale != 1.f) {
    add_eltwise(pl, {algorithm::eltwise_linear, p.scale, 0.f}, x_md, src, y);
    src = y;
    src_md = y_md;
  }
  if (p.has_mask) {
    const memory::desc m_md = md_of(d.inputs[1], r);
    add_binary(pl, algorithm::binary_add, src_md, src, m_md, pl.input(1, m_md), y_md, y);
    src = y;
    src_md = y_md;
  }
  const dnnl::softmax_forward::primitive_desc pd({inference, src_md, norm_axis(p.axis, r)}, make_attr(), pl.eng);
  pl.add(pd, dnnl::softmax_forward(pd), {{DNNL_ARG_SRC, src}, {DNNL_ARG_DST, y}});
}

// x is nchw-dense (or rank < 3), so dims [axis, rank) are contiguous per row.
bool plain(const TensorDesc& t) { return t.shape.rank < 3 || t.layout == Layout::nchw; }

bool all_plain(const OpDesc& d, const std::vector<TensorDesc>& outs) {
  for (const TensorDesc& t : d.inputs)
    if (!plain(t)) return false;
  for (const TensorDesc& t : outs)
    if (!plain(t)) return false;
  return true;
}

// The descriptors of layernorm / rmsnorm. When every tensor is nchw-dense the op works on the
// 2-D view (prod(dims < axis), prod(dims >= axis)): normalizing dims [axis, rank) is
// normalizing the last axis of that view. Otherwise the logical shapes are used as they are,
// with each tensor's own strides.
struct NormMds {
  memory::desc x, res, y, sum;  // sum: the second output, or y's descriptor without write_sum
  memory::desc stat;            // x's shape with dims [axis, rank) set to 1, plain
  memory::desc vec;             // scale / bias at x's rank: (1, .., 1, dims[axis..]), plain
  memory::desc vec1;            // scale / bias as given (the normalized shape), flattened
  memory::dim inner = 1;        // elements per normalized row
};

NormMds norm_mds(const OpDesc& d, const std::vector<TensorDesc>& outs) {
  const auto& p = d.p<NormParams>();
  const Shape& s = d.inputs[0].shape;
  const int axis = norm_axis(p.axis, s.rank);
  NormMds m;
  if (all_plain(d, outs)) {
    memory::dim outer = 1, inner = 1;
    for (int i = 0; i < s.rank; ++i) (i < axis ? outer : inner) *= s[i];
    m.x = m.res = m.y = m.sum = plain_md({outer, inner});
    m.stat = plain_md({outer, 1});
    m.vec = plain_md({1, inner});
    m.vec1 = plain_md({inner});
    m.inner = inner;
    return m;
  }
  m.x = md_of(d.inputs[0]);
  m.res = p.has_residual ? md_of(d.inputs.back()) : m.x;
  m.y = md_of(outs[0]);
  m.sum = outs.size() > 1 ? md_of(outs[1]) : m.y;
  Dims stat(static_cast<std::size_t>(s.rank)), vec(static_cast<std::size_t>(s.rank));
  memory::dim inner = 1;
  for (int i = 0; i < s.rank; ++i) {
    const auto u = static_cast<std::size_t>(i);
    stat[u] = i < axis ? s[i] : 1;
    vec[u] = i < axis ? 1 : s[i];
    if (i >= axis) inner *= s[i];
  }
  m.stat = plain_md(stat);
  m.vec = plain_md(vec);
  m.vec1 = plain_md({inner});
  m.inner = inner;
  return m;
}

// s = x (+ residual), written to the sum output (write_sum) or to y. Returns the memory that
// holds s and sets `s_md` to its descriptor.
memory norm_input(Pipeline& pl, const OpDesc& d, const NormMds& m, const memory& y, memory::desc& s_md) {
  const auto& p = d.p<NormParams>();
  memory x = pl.input(0, m.x);
  s_md = m.x;
  if (!p.has_residual) return x;
  const int res_in = static_cast<int>(d.inputs.size()) - 1;  // the residual is the last input
  const memory s = p.write_sum ? pl.output(1, m.sum) : y;
  s_md = p.write_sum ? m.sum : m.y;
  add_binary(pl, algorithm::binary_add, m.x, x, m.res, pl.input(res_in, m.res), s_md, s);
  return s;
}

// mean over the normalized dims of `src` (s_md) into a new stat buffer.
memory add_row_mean(Pipeline& pl, const NormMds& m, const memory::desc& s_md, const memory& src) {
  const memory mean = pl.buffer(m.stat);
  const dnnl::reduction::primitive_desc rpd({algorithm::reduction_mean, s_md, m.stat, 0.f, 0.f}, make_attr(), pl.eng);
  pl.add(rpd, dnnl::reduction(rpd), {{DNNL_ARG_SRC, src}, {DNNL_ARG_DST, mean}});
  return mean;
}

// Whether layernorm runs as the oneDNN primitive (over the last axis of the 2-D view or of x
// itself) rather than as a sequence of reductions and binaries.
bool layernorm_direct(const OpDesc& d, const std::vector<TensorDesc>& outs) {
  const int r = d.inputs[0].shape.rank;
  return all_plain(d, outs) || norm_axis(d.p<NormParams>().axis, r) == r - 1;
}

void build_layernorm(Pipeline& pl, const OpDesc& d, const std::vector<TensorDesc>& outs) {
  const auto& p = d.p<NormParams>();
  const NormMds m = norm_mds(d, outs);
  const memory y = pl.output(0, m.y);
  memory::desc s_md;
  const memory src = norm_input(pl, d, m, y, s_md);
  if (layernorm_direct(d, outs)) {
    // layer_normalization takes one descriptor for src and dst (same layout).
    auto flags = dnnl::normalization_flags::use_scale;
    if (p.has_bias) flags = flags | dnnl::normalization_flags::use_shift;
    const dnnl::layer_normalization_forward::primitive_desc pd({inference, s_md, p.epsilon, flags}, make_attr(),
                                                               pl.eng);
    ArgMap args{{DNNL_ARG_SRC, src}, {DNNL_ARG_SCALE, pl.input(1, m.vec1)}, {DNNL_ARG_DST, y}};
    if (p.has_bias) args[DNNL_ARG_SHIFT] = pl.input(2, m.vec1);
    pl.add(pd, dnnl::layer_normalization_forward(pd), std::move(args));
    return;
  }
  // Channels-last with the normalized dims not innermost: c = s - mean(s),
  // y = c * (mean(c^2) + eps)^(-1/2) * scale [+ bias].
  const memory mean = add_row_mean(pl, m, s_md, src);
  const memory c = pl.buffer(s_md), sq = pl.buffer(s_md);
  add_binary(pl, algorithm::binary_sub, s_md, src, m.stat, mean, s_md, c);
  add_eltwise(pl, {algorithm::eltwise_square, 0.f, 0.f}, s_md, c, sq);
  const memory var = add_row_mean(pl, m, s_md, sq);
  add_eltwise(pl, {algorithm::eltwise_linear, 1.f, p.epsilon}, m.stat, var, var);
  add_eltwise(pl, {algorithm::eltwise_pow, 1.f, -0.5f}, m.stat, var, var);
  add_binary(pl, algorithm::binary_mul, s_md, c, m.stat, var, m.y, y);
  add_binary(pl, algorithm::binary_mul, m.y, y, m.vec, pl.input(1, m.vec), m.y, y);
  if (p.has_bias) add_binary(pl, algorithm::binary_add, m.y, y, m.vec, pl.input(2, m.vec), m.y, y);
}

void build_rmsnorm(Pipeline& pl, const OpDesc& d, const std::vector<TensorDesc>& outs) {
  const auto& p = d.p<NormParams>();
  const NormMds m = norm_mds(d, outs);
  const memory y = pl.output(0, m.y);
  memory::desc s_md;
  const memory src = norm_input(pl, d, m, y, s_md);
  // y = s * (mean(s^2) + eps)^(-1/2) * scale
  // A row of one element is its own mean: oneDNN has no reduction that reduces nothing.
  const memory::desc ms_md = m.inner == 1 ? s_md : m.stat;
  const memory ms = pl.buffer(ms_md);
  if (m.inner == 1) {
    add_eltwise(pl, {algorithm::eltwise_square, 0.f, 0.f}, s_md, src, ms);
  } else {
    const memory sq = pl.buffer(s_md);
    add_eltwise(pl, {algorithm::eltwise_square, 0.f, 0.f}, s_md, src, sq);
    const dnnl::reduction::primitive_desc rpd({algorithm::reduction_mean, s_md, m.stat, 0.f, 0.f}, make_attr(), pl.eng);
    pl.add(rpd, dnnl::reduction(rpd), {{DNNL_ARG_SRC, sq}, {DNNL_ARG_DST, ms}});
  }
  add_eltwise(pl, {algorithm::eltwise_linear, 1.f, p.epsilon}, ms_md, ms, ms);
  add_eltwise(pl, {algorithm::eltwise_pow, 1.f, -0.5f}, ms_md, ms, ms);
  add_binary(pl, algorithm::binary_mul, s_md, src, ms_md, ms, m.y, y);
  add_binary(pl, algorithm::binary_mul, m.y, y, m.vec, pl.input(1, m.vec), m.y, y);
}

void build_attention(Pipeline& pl, const OpDesc& d, const std::vector<TensorDesc>& outs) {
  const auto& p = d.p<AttentionParams>();
  const TensorDesc &qd = d.inputs[0], &kd = d.inputs[1], &vd = d.inputs[2];
  const memory::dim b = qd.shape[0], h = qd.shape[1], sq = qd.shape[2], dh = qd.shape[3], skv = kd.shape[2];
  const float scale = p.scale != 0.f ? p.scale : 1.f / std::sqrt(static_cast<float>(dh));
  // K^T as a (B,H,D,Skv) view of k (B,H,Skv,D): swap the strides of the last two dims.
  const auto ks = dense_strides(kd.shape, kd.layout);
  const memory::desc q_md = md_of(qd), v_md = md_of(vd), o_md = md_of(outs[0]);
  const memory::desc kt_md({b, h, dh, skv}, f32, Dims{ks[0], ks[1], ks[3], ks[2]});
  const memory::desc s_md = plain_md({b, h, sq, skv});
  const memory scores = pl.buffer(s_md);

  dnnl::primitive_attr attr = make_attr();
  attr.set_output_scales(0, {scale});
  const dnnl::matmul::primitive_desc qk({q_md, kt_md, s_md}, attr, pl.eng);
  pl.add(qk, dnnl::matmul(qk),
         {{DNNL_ARG_SRC, pl.input(0, q_md)}, {DNNL_ARG_WEIGHTS, pl.input(1, kt_md)}, {DNNL_ARG_DST, scores}});
  if (p.has_mask) {
    const memory::desc m_md = md_of(d.inputs[3], 4);
    add_binary(pl, algorithm::binary_add, s_md, scores, m_md, pl.input(3, m_md), s_md, scores);
  }
  if (p.causal) {
    // Key j is hidden from query i when j > i + (Skv - Sq).
    const memory::desc c_md = plain_md({1, 1, sq, skv});
    float* mask = pl.floats(sq * skv);
    for (memory::dim i = 0; i < sq; ++i)
      for (memory::dim j = 0; j < skv; ++j)
        mask[i * skv + j] = j > i + (skv - sq) ? -std::numeric_limits<float>::infinity() : 0.f;
    add_binary(pl, algorithm::binary_add, s_md, scores, c_md, memory(c_md, pl.eng, mask), s_md, scores);
  }
  const dnnl::softmax_forward::primitive_desc sm({inference, s_md, 3}, make_attr(), pl.eng);
  pl.add(sm, dnnl::softmax_forward(sm), {{DNNL_ARG_SRC, scores}, {DNNL_ARG_DST, scores}});
  const dnnl::matmul::primitive_desc pv({s_md, v_md, o_md}, make_attr(), pl.eng);
  pl.add(pv, dnnl::matmul(pv),
         {{DNNL_ARG_SRC, scores}, {DNNL_ARG_WEIGHTS, pl.input(2, v_md)}, {DNNL_ARG_DST, pl.output(0, o_md)}});
}

// eltwise_chain: `fused` puts the steps after the first binary step into its post-ops.
void build_chain(Pipeline& pl, const OpDesc& d, const std::vector<TensorDesc>& outs, bool fused) {
  const auto& steps = d.p<ChainParams>().steps;
  const int r = d.inputs[0].shape.rank;
  const memory::desc x_md = md_of(d.inputs[0]), y_md = md_of(outs[0]);
  const memory x = pl.input(0, x_md), y = pl.output(0, y_md);
  if (steps.empty()) {  // y = x
    const dnnl::reorder::primitive_desc rpd(pl.eng, x_md, pl.eng, y_md, make_attr());
    pl.add(rpd, dnnl::reorder(rpd), {{DNNL_ARG_FROM, x}, {DNNL_ARG_TO, y}});
    return;
  }
  std::vector<int> operand(steps.size(), -1);
  for (std::size_t i = 0, next = 1; i < steps.size(); ++i)
    if (steps[i].kind == ChainStep::Kind::binary) operand[i] = static_cast<int>(next++);
  const auto to_item = [&](std::size_t i) {
    const ChainStep& s = steps[i];
    return ChainItem{s.kind == ChainStep::Kind::binary ? PostOp::binary_op(s.binary) : PostOp::activation(s.act),
                     operand[i]};
  };
  memory src = x;
  memory::desc src_md = x_md;
  for (std::size_t i = 0; i < steps.size();) {
    // A binary step takes every later step as post-ops. A unary step runs alone: oneDNN
    // 2.6.3's reference eltwise computes wrong results with post-ops attached (seen with
    // linear + relu on a 1-D tensor), so eltwise primitives never get post-ops here.
    const bool absorbs = fused && steps[i].kind == ChainStep::Kind::binary;
    const std::size_t count = absorbs ? steps.size() - i : 1;
    ArgMap args;
    dnnl::primitive_attr attr = make_attr();
    dnnl::post_ops ops;
    std::vector<ChainItem> rest;
    for (std::size_t j = i + 1; j < i + count; ++j) rest.push_back(to_item(j));
    append_chain(pl, d, rest, 0, r, r >= 2 ? d.inputs[0].shape[1] : 1, nullptr, ops, args);
    attr.set_post_ops(ops);
    const ChainStep& s = steps[i];
    args[DNNL_ARG_DST] = y;
    if (s.kind == ChainStep::Kind::unary) {
      const Elt e = elt_of(s.act);
      const dnnl::eltwise_forward::primitive_desc pd({inference, e.alg, src_md, e.alpha, e.beta}, attr, pl.eng);
      args[DNNL_ARG_SRC] = src;
      pl.add(pd, dnnl::eltwise_forward(pd), std::move(args));
    } else {
      const memory::desc b_md = md_of(d.inputs[static_cast<std::size_t>(operand[i])], r);
      const dnnl::binary::primitive_desc pd({binary_alg(s.binary), src_md, b_md, y_md}, attr, pl.eng);
      args[DNNL_ARG_SRC_0] = src;
      args[DNNL_ARG_SRC_1] = pl.input(operand[i], b_md);
      pl.add(pd, dnnl::binary(pd), std::move(args));
    }
    src = y;
    src_md = y_md;
    i += count;
  }
}

void build(Pipeline& pl, const OpDesc& d, const std::vector<TensorDesc>& outs) {
  switch (d.op) {
    case OpKind::gemm: build_gemm(pl, d, outs); break;
    case OpKind::conv2d: build_conv2d(pl, d, outs); break;
    case OpKind::batchnorm: build_batchnorm(pl, d, outs); break;
    case OpKind::relu:
    case OpKind::clip:
    case OpKind::leaky_relu:
    case OpKind::sigmoid:
    case OpKind::tanh:
    case OpKind::gelu:
    case OpKind::silu:
    case OpKind::hardswish: build_unary(pl, d, outs); break;
    case OpKind::add:
    case OpKind::sub:
    case OpKind::mul:
    case OpKind::div: build_binary(pl, d, outs); break;
    case OpKind::maxpool2d:
    case OpKind::avgpool2d:
    case OpKind::global_avgpool: build_pool(pl, d, outs); break;
    case OpKind::softmax: build_softmax(pl, d, outs); break;
    case OpKind::layernorm: build_layernorm(pl, d, outs); break;
    case OpKind::rmsnorm: build_rmsnorm(pl, d, outs); break;
    case OpKind::attention: build_attention(pl, d, outs); break;
    case OpKind::inverted_residual: build_inverted_residual(pl, d, outs); break;
    case OpKind::eltwise_chain: try { build_chain(pl, d, outs, true);
      } catch (const dnnl::error&) {
        // No oneDNN implementation takes this chain as post-ops: one primitive per step.
        pl.binds.clear();
        pl.steps.clear();
        pl.folds.clear();
        pl.buffers.clear();
        build_chain(pl, d, outs, false);
      }
      break;
  }
  pl.finalize();
}

bool supports_impl(const OpDesc& d) {
  auto outs = infer_outputs(d);
  if (!outs) return false;
  const std::vector<TensorDesc>& o = *outs;
  switch (d.op) {
    case OpKind::gemm: return post_ops_ok(d.p<GemmParams>().post_ops);
    case OpKind::conv2d: {
      const auto& p = d.p<Conv2dParams>();
      if (!post_ops_ok(p.post_ops)) return false;
      if (has_pool(p)) {  // the pooling primitive's geometry, as for maxpool2d
        const Pool2dParams pp = p.post_ops.back().pool_params();
        for (int axis = 0; axis < 2; ++axis) {
          const PoolDim pd = pool_dim(pp, conv_output(d).shape, o[0].shape, axis);
          if (pd.onednn_pad_r() < 0 || !pd.windows_nonempty()) return false;
        }
      }
      return true;
    }
    case OpKind::batchnorm: return d.inputs[0].shape.rank >= 2;
    case OpKind::relu:
    case OpKind::clip:
    case OpKind::leaky_relu:
    case OpKind::sigmoid:
    case OpKind::tanh:
    case OpKind::gelu:
    case OpKind::silu:
    case OpKind::hardswish: return act_ok(d.p<UnaryParams>().act);
    case OpKind::add:
    case OpKind::sub:
    case OpKind::mul:
    case OpKind::div: return true;
    case OpKind::maxpool2d:
    case OpKind::avgpool2d: {
      const auto& p = d.p<Pool2dParams>();
      for (int axis = 0; axis < 2; ++axis) {
        const PoolDim pd = pool_dim(p, d.inputs[0].shape, o[0].shape, axis);
        if (pd.onednn_pad_r() < 0 || !pd.windows_nonempty()) return false;
      }
      return true;
    }
    case OpKind::global_avgpool:
    case OpKind::softmax: return true;
    case OpKind::layernorm: {
      // The composed path needs a reduction, which oneDNN refuses for one-element rows.
      if (layernorm_direct(d, o)) return true;
      const Shape& x = d.inputs[0].shape;
      std::int64_t inner = 1;
      for (int i = norm_axis(d.p<NormParams>().axis, x.rank); i < x.rank; ++i) inner *= x[i];
      return inner > 1;
    }
    case OpKind::rmsnorm: return true;
    case OpKind::attention: {
      const auto& p = d.p<AttentionParams>();
      // A causal query row that sees no key (Sq > Skv) has no softmax; decline it.
      return !p.causal || d.inputs[0].shape[2] <= d.inputs[1].shape[2];
    }
    case OpKind::inverted_residual: return true;
    case OpKind::eltwise_chain: {
      for (const ChainStep& s : d.p<ChainParams>().steps)
        if (s.kind == ChainStep::Kind::unary && !act_ok(s.act)) return false;
      return true;
    }
  }
  return false;
}

// Writes the folded weights and bias of `f` (see WeightFold). The per-channel factors are
// composed in double; the weights are scaled in float (one rounding of the factor, one of
// the product), which keeps the pass over K*C*R*S weights vectorized.
void fold_weights(const WeightFold& f, const KernelArgs& a) {
  const float* w = a.in[f.w_in]->data();
  const float* bias = f.bias_in >= 0 ? a.in[f.bias_in]->data() : nullptr;
  for (std::int64_t c = 0; c < f.channels; ++c) {
    double s = 1.0, t = bias ? static_cast<double>(bias[c]) : 0.0;
    for (const auto& [first, eps] : f.bns) {
      const double g = a.in[first]->data()[c], beta = a.in[first + 1]->data()[c];
      const double mean = a.in[first + 2]->data()[c], var = a.in[first + 3]->data()[c];
      const double sc = g / std::sqrt(var + static_cast<double>(eps));
      t = (t - mean) * sc + beta;
      s *= sc;
    }
    f.b[c] = static_cast<float>(t);
    const float sf = static_cast<float>(s);
    const float* src = w + c * f.inner;
    float* dst = f.w + c * f.inner;
    for (std::int64_t j = 0; j < f.inner; ++j) dst[j] = src[j] * sf;
  }
}

void poison_outputs(const KernelArgs& a) noexcept {
  try {
    const std::size_t n = output_names(*a.desc).size();
    for (std::size_t i = 0; i < n; ++i) {
      float* p = a.out[i]->mutable_data();
      if (p) std::fill(p, p + a.out[i]->numel(), std::numeric_limits<float>::quiet_NaN());
    }
  } catch (...) {
  }
}

}  // namespace

bool supports(const OpDesc& desc) {
  try {
    return supports_impl(desc);
  } catch (...) {
    return false;
  }
}

Status prepare(const OpDesc& desc, const Context& ctx, const Tensor* const* /*constants*/,
               std::shared_ptr<void>& state) {
  const ThreadScope threads(ctx.threads);  // oneDNN sizes its work split at creation time
  try {
    auto outs = infer_outputs(desc);
    if (!outs) return outs.status();
    auto pl = std::make_shared<Pipeline>();
    build(*pl, desc, *outs);
    state = std::move(pl);
    return Status::ok();
  } catch (const dnnl::error& e) {
    // No implementation for this problem is a decline; anything else is a library failure.
    const StatusCode code = e.status == dnnl_unimplemented ? StatusCode::unsupported : StatusCode::internal;
    const std::string op(op_name(desc.op));
    return {code, op + ": " + op + "__onednn: oneDNN: " + e.what()};
  } catch (const std::bad_alloc&) {
    throw;  // reported as out_of_memory by prepare_kernel
  } catch (const std::exception& e) {
    const std::string op(op_name(desc.op));
    return {StatusCode::internal, op + ": " + op + "__onednn: " + e.what()};
  }
}

void execute(const KernelArgs& a) {
  auto* pl = static_cast<Pipeline*>(a.state);
  assert(pl && "onednn peer executed without prepare");
  const ThreadScope threads(a.threads);
  try {
    for (const Pipeline::Bind& b : pl->binds) {
      const Tensor* t = b.output ? a.out[b.index] : a.in[b.index];
      // oneDNN never writes through a source memory object; the cast only fits its API.
      b.mem.set_data_handle(const_cast<float*>(t->data()));
    }
    for (const Fold& f : pl->folds) {
      const float* g = a.in[f.first]->data();
      const float* beta = a.in[f.first + 1]->data();
      const float* mean = a.in[f.first + 2]->data();
      const float* var = a.in[f.first + 3]->data();
      for (std::int64_t c = 0; c < f.channels; ++c) {
        const double s = static_cast<double>(g[c]) / std::sqrt(static_cast<double>(var[c]) + f.eps);
        f.s[c] = static_cast<float>(s);
        f.t[c] = static_cast<float>(static_cast<double>(beta[c]) - static_cast<double>(mean[c]) * s);
      }
    }
    for (const WeightFold& f : pl->weight_folds) fold_weights(f, a);
    for (Step& s : pl->steps) {
      if (s.skip_if_alias && s.args.at(DNNL_ARG_FROM).get_data_handle() == s.args.at(DNNL_ARG_TO).get_data_handle())
        continue;
      const dnnl_status_t st =
          dnnl_primitive_execute(s.prim.get(), pl->strm.get(), static_cast<int>(s.c_args.size()), s.c_args.data());
      if (st != dnnl_success) throw dnnl::error(st, "could not execute a primitive");
    }
    pl->strm.wait();
  } catch (...) {
    assert(false && "oneDNN failed to execute a prepared primitive");
    poison_outputs(a);
  }
}

}  // namespace opfuse::peers::onednn
