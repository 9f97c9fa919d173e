// opfuse/ops.hpp - the operators, their parameters, and OpDesc: what to compute.
//
// An OpDesc names the op, carries its parameters and describes every input (shape + layout).
// Inputs come in a fixed order per op; input_names() spells it out. Post-op chains
// ("fusion is data") append their operand tensors after the op's own inputs, in chain order.
//
//   op                 inputs (in order; [..] when enabled by a parameter)
//   gemm               a (M,K) or (K,M) if trans_a; b (K,N) or (N,K) if trans_b; [bias] broadcastable
//                      to (M,N); post-op operands.           out: y (M,N)
//                      y = alpha*op(a)*op(b) + beta*y + bias, then the post-op chain
//                      (beta == 0 never reads y, so y may hold garbage or NaN).
//   conv2d             x (N,C,H,W); w (K,C/groups,R,S); [bias (K)]; post-op operands.
//                                                            out: y (N,K,P,Q)
//   batchnorm          x (N,C,...); scale (C); bias (C); mean (C); var (C).   out: y like x
//   relu clip leaky_relu sigmoid tanh gelu silu hardswish
//                      x.                                    out: y like x (may alias x)
//   add sub mul div    a; b (NumPy broadcasting).            out: y broadcast shape
//   maxpool2d avgpool2d x (N,C,H,W).                         out: y (N,C,P,Q)
//   global_avgpool     x (N,C,H,W).                          out: y (N,C,1,1)
//   softmax            x; [mask broadcastable to x].         out: y like x; softmax(scale*x + mask)
//   layernorm          x; scale (normalized shape); [bias]; [residual like x].
//                                                            out: y like x; [sum = x + residual]
//   rmsnorm            x; scale; [residual].                 out: y; [sum]
//   attention          q (B,H,Sq,D); k (B,H,Skv,D); v (B,H,Skv,Dv); [mask broadcastable to
//                      (B,H,Sq,Skv)].                        out: o (B,H,Sq,Dv)
//   inverted_residual  x (N,Cin,H,W); [w_expand (Ce,Cin,1,1); bn1 scale,bias,mean,var (Ce)];
//                      w_dw (Ce,1,3,3); bn2 x4 (Ce); w_project (Cout,Ce,1,1); bn3 x4 (Cout).
//                                                            out: y (N,Cout,H/s,W/s)
//   eltwise_chain      x; one operand per binary step (broadcastable to x).   out: y like x
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "opfuse/status.hpp"
#include "opfuse/tensor.hpp"

namespace opfuse {

// Every operator. The names (op_name) are used by the registry, the CLI, tests and benchmarks.
enum class OpKind : std::uint8_t {
  gemm,
  conv2d,
  batchnorm,
  relu,
  clip,
  leaky_relu,
  sigmoid,
  tanh,
  gelu,
  silu,
  hardswish,
  add,
  sub,
  mul,
  div,
  maxpool2d,
  avgpool2d,
  global_avgpool,
  softmax,
  layernorm,
  rmsnorm,
  attention,
  inverted_residual,
  eltwise_chain,
};
inline constexpr int kOpCount = 24;

std::string_view op_name(OpKind op) noexcept;
std::optional<OpKind> op_from_name(std::string_view name) noexcept;
bool is_unary(OpKind op) noexcept;   // relu .. hardswish
bool is_binary(OpKind op) noexcept;  // add, sub, mul, div

// ---- elementwise building blocks -------------------------------------------------------

enum class ActKind : std::uint8_t {
  relu,        // max(x, 0)
  clip,        // min(max(x, alpha), beta); relu6 is clip(0, 6)
  leaky_relu,  // x >= 0 ? x : alpha * x
  sigmoid,     // 1 / (1 + exp(-x))
  tanh,        // tanh(x)
  gelu_erf,    // 0.5 x (1 + erf(x / sqrt 2))
  gelu_tanh,   // 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
  silu,        // x * sigmoid(x)
  hardswish,   // x * clip(x + 3, 0, 6) / 6
  linear,      // alpha * x + beta
};
std::string_view act_name(ActKind kind) noexcept;

struct Activation {
  ActKind kind = ActKind::relu;
  float alpha = 0.f;
  float beta = 0.f;
  static Activation relu() { return {ActKind::relu, 0.f, 0.f}; }
  static Activation relu6() { return {ActKind::clip, 0.f, 6.f}; }
  static Activation clip(float lo, float hi) { return {ActKind::clip, lo, hi}; }
  static Activation leaky_relu(float slope) { return {ActKind::leaky_relu, slope, 0.f}; }
  static Activation of(ActKind k) { return {k, 0.f, 0.f}; }
  static Activation linear(float a, float b) { return {ActKind::linear, a, b}; }
};

enum class BinaryKind : std::uint8_t { add, sub, mul, div };
// The BinaryKind an add/sub/mul/div op computes (add for any other op).
BinaryKind binary_kind_of(OpKind op) noexcept;
std::string_view binary_name(BinaryKind kind) noexcept;

struct Pool2dParams;

// One step of a post-op chain, applied to the op's output in order (like oneDNN post_ops).
struct PostOp {
  enum class Kind : std::uint8_t {
    batchnorm,   // y = scale * (y - mean) / sqrt(var + epsilon) + bias; operands scale, bias,
                 // mean, var, each (C) for conv2d or (N) for gemm
    binary,      // y = y <op> other; operand broadcastable to the output (residual add)
    activation,  // y = act(y)
    pool,        // conv2d only: y = maxpool2d(y) with `window` (the ResNet stem's conv + bn +
                 // relu + maxpool 3x3/2 pad 1). No operands. It changes the output shape: the
                 // conv output (N, K, P, Q) becomes the pooled (N, K, P', Q') exactly as a
                 // maxpool2d op on it would give (floor mode, dilation 1, NaN-propagating max,
                 // padding ignored). At most one, and it must be the last step, so every
                 // operand of an earlier step (batchnorm (K), binary broadcastable to the
                 // pre-pool (N, K, P, Q)) refers to the conv output. Max only: an average pool
                 // after a conv is linear and belongs folded into the weights, not here.
                 // gemm rejects it (invalid_argument).
  };
  // The pooling window of a pool step, with maxpool2d's meaning and validation (kernel >= 1,
  // stride >= 1, padding >= 0 and at most half the window).
  struct Window {
    std::int64_t kernel_h = 1, kernel_w = 1;
    std::int64_t stride_h = 1, stride_w = 1;
    std::int64_t pad_top = 0, pad_left = 0, pad_bottom = 0, pad_right = 0;
  };
  Kind kind = Kind::activation;
  float epsilon = 1e-5f;
  BinaryKind binary = BinaryKind::add;
  Activation act;
  Window window;  // pool only

  static PostOp batchnorm(float eps = 1e-5f) { return {Kind::batchnorm, eps, BinaryKind::add, {}, {}}; }
  static PostOp add() { return {Kind::binary, 0.f, BinaryKind::add, {}, {}}; }
  static PostOp binary_op(BinaryKind k) { return {Kind::binary, 0.f, k, {}, {}}; }
  static PostOp activation(Activation a) { return {Kind::activation, 0.f, BinaryKind::add, a, {}}; }
  // Max pooling with a k x k window, stride s and padding `pad` on every side (3, 2, 1 for
  // the ResNet stem).
  static PostOp maxpool(std::int64_t k, std::int64_t s, std::int64_t pad) {
    return {Kind::pool, 0.f, BinaryKind::add, {}, {k, k, s, s, pad, pad, pad, pad}};
  }
  static PostOp maxpool(const Window& w) { return {Kind::pool, 0.f, BinaryKind::add, {}, w}; }
  // The maxpool2d parameters of a pool step (dilation 1, floor mode), to run it as that op.
  Pool2dParams pool_params() const;
};
using PostOps = std::vector<PostOp>;
// Tensor operands a post-op takes: 4 for batchnorm, 1 for binary, 0 for activation and pool.
int post_op_operands(const PostOp& p) noexcept;

// ---- per-op parameters -------------------------------------------------------------------

struct GemmParams {
  float alpha = 1.f;
  float beta = 0.f;
  bool trans_a = false;
  bool trans_b = false;
  bool has_bias = false;
  PostOps post_ops;
};

struct Conv2dParams {
  std::int64_t stride_h = 1, stride_w = 1;
  std::int64_t dilation_h = 1, dilation_w = 1;
  std::int64_t pad_top = 0, pad_left = 0, pad_bottom = 0, pad_right = 0;
  std::int64_t groups = 1;  // groups == C == K is depthwise
  bool has_bias = false;
  PostOps post_ops;
};

struct BatchnormParams {
  float epsilon = 1e-5f;
};

// relu, clip, leaky_relu, sigmoid, tanh, gelu, silu, hardswish. act.kind must match the op
// (gelu takes gelu_erf or gelu_tanh); clip reads alpha/beta as min/max, leaky_relu alpha.
struct UnaryParams {
  Activation act;
};

// add, sub, mul, div: NumPy broadcasting between a and b.
struct BinaryParams {};

struct Pool2dParams {
  std::int64_t kernel_h = 2, kernel_w = 2;
  std::int64_t stride_h = 2, stride_w = 2;
  std::int64_t dilation_h = 1, dilation_w = 1;  // maxpool2d only
  std::int64_t pad_top = 0, pad_left = 0, pad_bottom = 0, pad_right = 0;
  bool ceil_mode = false;
  // avgpool2d only: divide by the window positions inside the padded input (padding counts,
  // a ceil-mode overhang past the padding does not) instead of the real elements only.
  bool count_include_pad = false;
};

struct GlobalPoolParams {};

// A row containing NaN gives NaN; a fully masked row (max is -inf) gives all zeros, since it
// holds no probability mass (PyTorch gives NaN there; attention kernels commonly give 0).
struct SoftmaxParams {
  int axis = -1;      // any axis, negative counts from the end
  float scale = 1.f;  // softmax(scale * x + mask)
  bool has_mask = false;
};

// layernorm / rmsnorm normalize over dims [axis, rank). With has_residual the op computes
// s = x + residual first; write_sum also returns s as a second output.
struct NormParams {
  int axis = -1;
  float epsilon = 1e-5f;
  bool has_bias = true;  // layernorm only
  bool has_residual = false;
  bool write_sum = false;
};

struct AttentionParams {
  float scale = 0.f;  // 0 means 1/sqrt(D)
  bool has_mask = false;
  // Key j is hidden from query i when j > i + (Skv - Sq): bottom-right aligned, which is the
  // usual top-left causal mask when Sq == Skv and the right one for a query suffix (KV cache).
  // Causally hidden keys are never read (NaN there does not spread, as in a flash kernel that
  // skips hidden tiles); a query with no visible key outputs 0 (the softmax fully-masked rule).
  bool causal = false;
  // Packed layout (what one horizontally fused Q/K/V projection writes, read in place): q, k and
  // v keep their logical (B, H, S, D) descs (S and D equal for all three), but they are views of
  // one (B, S, 3, H, D) buffer - k's data H*D floats after q's, v's 2*H*D after - so each has
  // strides (S*3*H*D, D, 3*H*D, 1); and o is written as (B, S, H, D) memory, strides
  // (S*H*D, D, H*D, 1), which is what the next projection reads. attention_strides() gives them.
  bool packed_qkv = false;
};
struct OpDesc;
// The element strides a kernel uses for attention operand `which` (0 q, 1 k, 2 v, 3 o): dense for
// the usual layout, the packed ones above when desc's params say packed_qkv.
std::array<std::int64_t, kMaxRank> attention_strides(const OpDesc& desc, int which);

struct InvertedResidualParams {
  bool has_expand = true;   // MobileNetV2 blocks with expansion ratio 1 have no expand conv
  std::int64_t stride = 1;  // 1 or 2; the depthwise 3x3 pads 1 on every side
  bool residual = false;    // y += x; requires stride 1 and Cin == Cout
  float epsilon = 1e-5f;    // all three batchnorms
};

struct ChainStep {
  enum class Kind : std::uint8_t { unary, binary } kind = Kind::unary;
  Activation act;                       // unary
  BinaryKind binary = BinaryKind::add;  // binary: y = y <op> operand
  static ChainStep unary_step(Activation a) { return {Kind::unary, a, BinaryKind::add}; }
  static ChainStep binary_step(BinaryKind k) { return {Kind::binary, {}, k}; }
};
struct ChainParams {
  std::vector<ChainStep> steps;
};

using OpParams =
    std::variant<GemmParams, Conv2dParams, BatchnormParams, UnaryParams, BinaryParams, Pool2dParams, GlobalPoolParams,
                 SoftmaxParams, NormParams, AttentionParams, InvertedResidualParams, ChainParams>;

struct OpDesc {
  OpKind op = OpKind::relu;
  OpParams params = UnaryParams{};
  std::vector<TensorDesc> inputs;

  // Typed access; the caller knows the op (validate() checks the pairing).
  template <class P>
  const P& p() const {
    return std::get<P>(params);
  }
};

// The desc of an inverted_residual block on x with `ce` expanded and `cout` output channels:
// the 16 (or, without expansion, 11) inputs in the documented order and shapes. Without
// expansion ce must equal x's channels (validate() says so otherwise).
OpDesc inverted_residual_desc(const TensorDesc& x, std::int64_t ce, std::int64_t cout, const InvertedResidualParams& p);

// The parameter struct an op takes, default-initialized (UnaryParams get the op's activation).
OpParams default_params(OpKind op);

// Names of the inputs this desc expects, in order ("x", "w", "bias", "post0.scale", ...).
// Valid for any desc whose params match its op.
std::vector<std::string> input_names(const OpDesc& desc);
std::vector<std::string> output_names(const OpDesc& desc);

// Full validation of shapes and parameters. The message names op, parameter and value.
Status validate(const OpDesc& desc);
// Output descriptors (validates first).
Result<std::vector<TensorDesc>> infer_outputs(const OpDesc& desc);
// May output `out` alias input `in` (same buffer, same shape)? In-place elementwise work.
bool allows_inplace(const OpDesc& desc, int in, int out) noexcept;

// Work and traffic of one call, for benchmark counters: floating-point operations counted
// as 2 per multiply-add, and the minimal bytes an implementation must read and write.
struct OpCost {
  double flops = 0;
  double bytes = 0;
};
OpCost op_cost(const OpDesc& desc);

// Systematic case string for names of tests and benchmarks, e.g. "1024x1024x1024" (gemm
// MxNxK), "n1_c64_h56_w56_k64_r3_s1_p1" (conv2d), with post-ops appended ("+bn+add+relu").
std::string case_name(const OpDesc& desc);

}  // namespace opfuse
