/// @file
/// opfuse/ops.hpp - the operators, their parameters, and OpDesc: what to compute.
///
/// An OpDesc names the op, carries its parameters and describes every input (shape + layout).
/// Inputs come in a fixed order per op; input_names() spells it out. Post-op chains
/// ("fusion is data") append their operand tensors after the op's own inputs, in chain order.
///
///   op                 inputs (in order; [..] when enabled by a parameter)
///   gemm               a (M,K) or (K,M) if trans_a; b (K,N) or (N,K) if trans_b; [bias] broadcastable
///                      to (M,N); post-op operands.           out: y (M,N)
///                      y = alpha*op(a)*op(b) + beta*y + bias, then the post-op chain
///                      (beta == 0 never reads y, so y may hold garbage or NaN).
///   conv2d             x (N,C,H,W); w (K,C/groups,R,S); [bias (K)]; post-op operands.
///                                                            out: y (N,K,P,Q)
///   batchnorm          x (N,C,...); scale (C); bias (C); mean (C); var (C).   out: y like x
///   relu clip leaky_relu sigmoid tanh gelu silu hardswish
///                      x.                                    out: y like x (may alias x)
///   add sub mul div    a; b (NumPy broadcasting).            out: y broadcast shape
///   maxpool2d avgpool2d x (N,C,H,W).                         out: y (N,C,P,Q)
///   global_avgpool     x (N,C,H,W).                          out: y (N,C,1,1)
///   softmax            x; [mask broadcastable to x].         out: y like x; softmax(scale*x + mask)
///   layernorm          x; scale (normalized shape); [bias]; [residual like x].
///                                                            out: y like x; [sum = x + residual]
///   rmsnorm            x; scale; [residual].                 out: y; [sum]
///   attention          q (B,H,Sq,D); k (B,H,Skv,D); v (B,H,Skv,Dv); [mask broadcastable to
///                      (B,H,Sq,Skv)].                        out: o (B,H,Sq,Dv)
///   inverted_residual  x (N,Cin,H,W); [w_expand (Ce,Cin,1,1); bn1 scale,bias,mean,var (Ce)];
///                      w_dw (Ce,1,3,3); bn2 x4 (Ce); w_project (Cout,Ce,1,1); bn3 x4 (Cout).
///                                                            out: y (N,Cout,H/s,W/s)
///   eltwise_chain      x; one operand per binary step (broadcastable to x).   out: y like x
#pragma once

#include "opfuse/export.h"

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "opfuse/status.hpp"
#include "opfuse/tensor.hpp"

// OPFUSE_API on the namespace: everything this header declares is part of the exported API.
namespace opfuse OPFUSE_API {

/// Every operator. The names (op_name) are used by the registry, the CLI, tests and benchmarks.
enum class OpKind : std::uint8_t {
  gemm,               ///< Matrix multiply y = alpha*op(a)*op(b) + beta*y + bias (GemmParams).
  conv2d,             ///< 2-D convolution, optionally grouped/depthwise (Conv2dParams).
  batchnorm,          ///< Inference batch normalization over dim 1 (BatchnormParams).
  relu,               ///< max(x, 0) (UnaryParams).
  clip,               ///< min(max(x, alpha), beta) (UnaryParams).
  leaky_relu,         ///< x >= 0 ? x : alpha * x (UnaryParams).
  sigmoid,            ///< 1 / (1 + exp(-x)) (UnaryParams).
  tanh,               ///< tanh(x) (UnaryParams).
  gelu,               ///< GELU, erf or tanh form (UnaryParams).
  silu,               ///< x * sigmoid(x) (UnaryParams).
  hardswish,          ///< x * clip(x + 3, 0, 6) / 6 (UnaryParams).
  add,                ///< a + b with broadcasting (BinaryParams).
  sub,                ///< a - b with broadcasting (BinaryParams).
  mul,                ///< a * b with broadcasting (BinaryParams).
  div,                ///< a / b with broadcasting (BinaryParams).
  maxpool2d,          ///< 2-D max pooling (Pool2dParams).
  avgpool2d,          ///< 2-D average pooling (Pool2dParams).
  global_avgpool,     ///< Mean over H and W to (N, C, 1, 1) (GlobalPoolParams).
  softmax,            ///< softmax(scale*x + mask) along one axis (SoftmaxParams).
  layernorm,          ///< Layer normalization, optional residual add (NormParams).
  rmsnorm,            ///< RMS normalization, optional residual add (NormParams).
  attention,          ///< Scaled dot-product attention (AttentionParams).
  inverted_residual,  ///< Fused MobileNetV2 inverted residual block (InvertedResidualParams).
  eltwise_chain,      ///< Chain of unary/binary elementwise steps on x (ChainParams).
};
/// Number of OpKind values.
inline constexpr int kOpCount = 24;

/// The op's name, e.g. "gemm".
/// @param op The op.
/// @return Its name, or "unknown" for a value outside OpKind.
std::string_view op_name(OpKind op) noexcept;
/// Looks an op up by its name (the inverse of op_name).
/// @param name An op name, e.g. "conv2d".
/// @return The op, or std::nullopt if no op has that name.
std::optional<OpKind> op_from_name(std::string_view name) noexcept;
/// Whether op is an elementwise activation op (relu .. hardswish).
/// @param op The op.
/// @return True for relu, clip, leaky_relu, sigmoid, tanh, gelu, silu, hardswish.
bool is_unary(OpKind op) noexcept;
/// Whether op is an elementwise binary op.
/// @param op The op.
/// @return True for add, sub, mul, div.
bool is_binary(OpKind op) noexcept;

// ---- elementwise building blocks -------------------------------------------------------

/// Activation functions, used by unary ops, post-ops and chain steps.
enum class ActKind : std::uint8_t {
  relu,        ///< max(x, 0)
  clip,        ///< min(max(x, alpha), beta); relu6 is clip(0, 6)
  leaky_relu,  ///< x >= 0 ? x : alpha * x
  sigmoid,     ///< 1 / (1 + exp(-x))
  tanh,        ///< tanh(x)
  gelu_erf,    ///< 0.5 x (1 + erf(x / sqrt 2))
  gelu_tanh,   ///< 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
  silu,        ///< x * sigmoid(x)
  hardswish,   ///< x * clip(x + 3, 0, 6) / 6
  linear,      ///< alpha * x + beta
};
/// The activation's name, e.g. "gelu_tanh".
/// @param kind The activation kind.
/// @return Its name, or "unknown" for a value outside ActKind.
std::string_view act_name(ActKind kind) noexcept;

/// An activation function with its scalar parameters.
struct Activation {
  ActKind kind = ActKind::relu;  ///< The function.
  float alpha = 0.f;             ///< clip: min; leaky_relu: negative slope; linear: scale.
  float beta = 0.f;              ///< clip: max; linear: offset.
  /// max(x, 0).
  /// @return A relu activation.
  static Activation relu() { return {ActKind::relu, 0.f, 0.f}; }
  /// clip(x, 0, 6).
  /// @return A clip activation with bounds 0 and 6.
  static Activation relu6() { return {ActKind::clip, 0.f, 6.f}; }
  /// min(max(x, lo), hi).
  /// @param lo Lower bound.
  /// @param hi Upper bound.
  /// @return A clip activation.
  static Activation clip(float lo, float hi) { return {ActKind::clip, lo, hi}; }
  /// x >= 0 ? x : slope * x.
  /// @param slope Slope for negative x.
  /// @return A leaky_relu activation.
  static Activation leaky_relu(float slope) { return {ActKind::leaky_relu, slope, 0.f}; }
  /// An activation of kind k with alpha = beta = 0.
  /// @param k The activation kind.
  /// @return That activation.
  static Activation of(ActKind k) { return {k, 0.f, 0.f}; }
  /// a * x + b.
  /// @param a Scale.
  /// @param b Offset.
  /// @return A linear activation.
  static Activation linear(float a, float b) { return {ActKind::linear, a, b}; }
};

/// Elementwise binary operations.
enum class BinaryKind : std::uint8_t { add, /**< a + b */ sub, /**< a - b */ mul, /**< a * b */ div /**< a / b */ };
/// The BinaryKind an add/sub/mul/div op computes (add for any other op).
/// @param op The op.
/// @return Its BinaryKind.
BinaryKind binary_kind_of(OpKind op) noexcept;
/// The binary operation's name, e.g. "mul".
/// @param kind The binary kind.
/// @return Its name, or "unknown" for a value outside BinaryKind.
std::string_view binary_name(BinaryKind kind) noexcept;

struct Pool2dParams;

/// One step of a post-op chain, applied to the op's output in order (like oneDNN post_ops).
struct PostOp {
  /// What a post-op step does.
  enum class Kind : std::uint8_t {
    /// y = scale * (y - mean) / sqrt(var + epsilon) + bias; operands scale, bias, mean, var,
    /// each (C) for conv2d or (N) for gemm.
    batchnorm,
    /// y = y op other, op being `binary`; operand broadcastable to the output (residual add).
    binary,
    /// y = act(y).
    activation,
    /// conv2d only: y = maxpool2d(y) with `window` (the ResNet stem's conv + bn +
    /// relu + maxpool 3x3/2 pad 1). No operands. It changes the output shape: the
    /// conv output (N, K, P, Q) becomes the pooled (N, K, P', Q') exactly as a
    /// maxpool2d op on it would give (floor mode, dilation 1, NaN-propagating max,
    /// padding ignored). At most one, and it must be the last step, so every
    /// operand of an earlier step (batchnorm (K), binary broadcastable to the
    /// pre-pool (N, K, P, Q)) refers to the conv output. Max only: an average pool
    /// after a conv is linear and belongs folded into the weights, not here.
    /// gemm rejects it (invalid_argument).
    pool,
  };
  /// The pooling window of a pool step, with maxpool2d's meaning and validation (kernel >= 1,
  /// stride >= 1, padding >= 0 and at most half the window).
  struct Window {
    std::int64_t kernel_h = 1, /**< Window height. */ kernel_w = 1;    ///< Window width.
    std::int64_t stride_h = 1, /**< Vertical stride. */ stride_w = 1;  ///< Horizontal stride.
    /// Top padding (ignored by the max); pad_left, pad_bottom, pad_right pad the other sides.
    std::int64_t pad_top = 0, pad_left = 0, /**< Left. */ pad_bottom = 0, /**< Bottom. */ pad_right = 0;  ///< Right.
  };
  Kind kind = Kind::activation;         ///< What the step does.
  float epsilon = 1e-5f;                ///< batchnorm only: added to var.
  BinaryKind binary = BinaryKind::add;  ///< binary only: the operation.
  Activation act;                       ///< activation only: the function.
  Window window;                        ///< pool only

  /// A batchnorm step.
  /// @param eps Epsilon added to the variance.
  /// @return The step.
  static PostOp batchnorm(float eps = 1e-5f) { return {Kind::batchnorm, eps, BinaryKind::add, {}, {}}; }
  /// A binary add step (residual add).
  /// @return The step.
  static PostOp add() { return {Kind::binary, 0.f, BinaryKind::add, {}, {}}; }
  /// A binary step y = y op other.
  /// @param k The binary operation.
  /// @return The step.
  static PostOp binary_op(BinaryKind k) { return {Kind::binary, 0.f, k, {}, {}}; }
  /// An activation step y = act(y).
  /// @param a The activation.
  /// @return The step.
  static PostOp activation(Activation a) { return {Kind::activation, 0.f, BinaryKind::add, a, {}}; }
  /// Max pooling with a k x k window, stride s and padding `pad` on every side (3, 2, 1 for
  /// the ResNet stem).
  /// @param k Window height and width.
  /// @param s Stride in both dims.
  /// @param pad Padding on every side.
  /// @return The pool step.
  static PostOp maxpool(std::int64_t k, std::int64_t s, std::int64_t pad) {
    return {Kind::pool, 0.f, BinaryKind::add, {}, {k, k, s, s, pad, pad, pad, pad}};
  }
  /// Max pooling with an arbitrary window.
  /// @param w The pooling window.
  /// @return The pool step.
  static PostOp maxpool(const Window& w) { return {Kind::pool, 0.f, BinaryKind::add, {}, w}; }
  /// The maxpool2d parameters of a pool step (dilation 1, floor mode), to run it as that op.
  /// @return Pool2dParams with this step's window.
  Pool2dParams pool_params() const;
};
/// A post-op chain, applied in order.
using PostOps = std::vector<PostOp>;
/// Tensor operands a post-op takes: 4 for batchnorm, 1 for binary, 0 for activation and pool.
/// @param p The post-op.
/// @return The operand count.
int post_op_operands(const PostOp& p) noexcept;

// ---- per-op parameters -------------------------------------------------------------------

/// gemm parameters: y = alpha*op(a)*op(b) + beta*y + bias, then the post-op chain.
struct GemmParams {
  float alpha = 1.f;      ///< Scale of op(a)*op(b).
  float beta = 0.f;       ///< Scale of the previous y; 0 never reads y.
  bool trans_a = false;   ///< a is stored (K, M).
  bool trans_b = false;   ///< b is stored (N, K).
  bool has_bias = false;  ///< A bias input broadcastable to (M, N) follows b.
  PostOps post_ops;       ///< Steps applied to y; their operands follow the op's inputs.
};

/// conv2d parameters (NCHW semantics; explicit padding per side).
struct Conv2dParams {
  std::int64_t stride_h = 1, /**< Vertical stride. */ stride_w = 1;        ///< Horizontal stride.
  std::int64_t dilation_h = 1, /**< Vertical dilation. */ dilation_w = 1;  ///< Horizontal dilation.
  /// Top zero padding; pad_left, pad_bottom, pad_right pad the other sides.
  std::int64_t pad_top = 0, pad_left = 0, /**< Left. */ pad_bottom = 0, /**< Bottom. */ pad_right = 0;  ///< Right.
  std::int64_t groups = 1;  ///< groups == C == K is depthwise
  bool has_bias = false;    ///< A bias input (K) follows w.
  PostOps post_ops;         ///< Steps applied to y; their operands follow the op's inputs.
};

/// batchnorm parameters: y = scale * (x - mean) / sqrt(var + epsilon) + bias per channel.
struct BatchnormParams {
  float epsilon = 1e-5f;  ///< Added to var; finite and > 0.
};

/// relu, clip, leaky_relu, sigmoid, tanh, gelu, silu, hardswish. act.kind must match the op
/// (gelu takes gelu_erf or gelu_tanh); clip reads alpha/beta as min/max, leaky_relu alpha.
struct UnaryParams {
  Activation act;  ///< The activation the op computes.
};

/// add, sub, mul, div: NumPy broadcasting between a and b.
struct BinaryParams {};

/// maxpool2d / avgpool2d parameters. Padding may be at most half the (dilated) window.
struct Pool2dParams {
  std::int64_t kernel_h = 2, /**< Window height. */ kernel_w = 2;       ///< Window width.
  std::int64_t stride_h = 2, /**< Vertical stride. */ stride_w = 2;     ///< Horizontal stride.
  std::int64_t dilation_h = 1, /**< maxpool2d only. */ dilation_w = 1;  ///< maxpool2d only
  /// Top padding; pad_left, pad_bottom, pad_right pad the other sides.
  std::int64_t pad_top = 0, pad_left = 0, /**< Left. */ pad_bottom = 0, /**< Bottom. */ pad_right = 0;  ///< Right.
  bool ceil_mode = false;  ///< Round the output size up instead of down.
  /// avgpool2d only: divide by the window positions inside the padded input (padding counts,
  /// a ceil-mode overhang past the padding does not) instead of the real elements only.
  bool count_include_pad = false;
};

/// global_avgpool parameters (none).
struct GlobalPoolParams {};

/// softmax parameters: y = softmax(scale * x + mask) along `axis`.
/// A row containing NaN gives NaN; a fully masked row (max is -inf) gives all zeros, since it
/// holds no probability mass (PyTorch gives NaN there; attention kernels commonly give 0).
struct SoftmaxParams {
  int axis = -1;          ///< any axis, negative counts from the end
  float scale = 1.f;      ///< softmax(scale * x + mask)
  bool has_mask = false;  ///< A mask input broadcastable to x follows x; it is added.
};

/// layernorm / rmsnorm normalize over dims [axis, rank). With has_residual the op computes
/// s = x + residual first; write_sum also returns s as a second output.
struct NormParams {
  int axis = -1;              ///< First normalized dim; negative counts from the end.
  float epsilon = 1e-5f;      ///< Added to the variance (mean square for rmsnorm).
  bool has_bias = true;       ///< layernorm only
  bool has_residual = false;  ///< A residual input like x follows; x + residual is normalized.
  bool write_sum = false;     ///< Also output sum = x + residual; needs has_residual.
};

/// attention parameters: o = softmax(scale * q k^T + mask) v per batch and head.
struct AttentionParams {
  float scale = 0.f;      ///< 0 means 1/sqrt(D)
  bool has_mask = false;  ///< A mask input broadcastable to (B, H, Sq, Skv) follows v; it is added.
  /// Key j is hidden from query i when j > i + (Skv - Sq): bottom-right aligned, which is the
  /// usual top-left causal mask when Sq == Skv and the right one for a query suffix (KV cache).
  /// Causally hidden keys are never read (NaN there does not spread, as in a flash kernel that
  /// skips hidden tiles); a query with no visible key outputs 0 (the softmax fully-masked rule).
  bool causal = false;
  /// Packed layout (what one horizontally fused Q/K/V projection writes, read in place): q, k and
  /// v keep their logical (B, H, S, D) descs (S and D equal for all three), but they are views of
  /// one (B, S, 3, H, D) buffer - k's data H*D floats after q's, v's 2*H*D after - so each has
  /// strides (S*3*H*D, D, 3*H*D, 1); and o is written as (B, S, H, D) memory, strides
  /// (S*H*D, D, H*D, 1), which is what the next projection reads. attention_strides() gives them.
  bool packed_qkv = false;
};
struct OpDesc;
/// The element strides a kernel uses for attention operand `which` (0 q, 1 k, 2 v, 3 o): dense for
/// the usual layout, the packed ones above when desc's params say packed_qkv.
/// @param desc A valid attention desc.
/// @param which The operand: 0 q, 1 k, 2 v, 3 o.
/// @return Strides of the operand's 4 dims (unused trailing entries 0).
std::array<std::int64_t, kMaxRank> attention_strides(const OpDesc& desc, int which);

/// inverted_residual parameters: expand 1x1 conv + bn + relu6, depthwise 3x3 conv + bn + relu6,
/// project 1x1 conv + bn, optional residual add.
struct InvertedResidualParams {
  bool has_expand = true;   ///< MobileNetV2 blocks with expansion ratio 1 have no expand conv
  std::int64_t stride = 1;  ///< 1 or 2; the depthwise 3x3 pads 1 on every side
  bool residual = false;    ///< y += x; requires stride 1 and Cin == Cout
  float epsilon = 1e-5f;    ///< all three batchnorms
};

/// One step of an eltwise_chain.
struct ChainStep {
  /// What the step does.
  enum class Kind : std::uint8_t { unary, /**< act(y) */ binary /**< y op operand */ } kind = Kind::unary;  ///< Kind.
  /// unary only: the activation.
  Activation act;
  /// binary only: y = y op operand, op being this.
  BinaryKind binary = BinaryKind::add;
  /// A unary step.
  /// @param a The activation.
  /// @return The step.
  static ChainStep unary_step(Activation a) { return {Kind::unary, a, BinaryKind::add}; }
  /// A binary step.
  /// @param k The binary operation.
  /// @return The step.
  static ChainStep binary_step(BinaryKind k) { return {Kind::binary, {}, k}; }
};
/// eltwise_chain parameters.
struct ChainParams {
  std::vector<ChainStep> steps;  ///< Applied to x in order.
};

/// Any op's parameter struct; OpDesc::params must hold the one its op takes.
using OpParams =
    std::variant<GemmParams, Conv2dParams, BatchnormParams, UnaryParams, BinaryParams, Pool2dParams, GlobalPoolParams,
                 SoftmaxParams, NormParams, AttentionParams, InvertedResidualParams, ChainParams>;

/// What to compute: the op, its parameters and its input descriptors.
struct OpDesc {
  OpKind op = OpKind::relu;         ///< The operator.
  OpParams params = UnaryParams{};  ///< The op's parameter struct.
  std::vector<TensorDesc> inputs;   ///< Input descriptors in the order input_names() gives.

  /// Typed access; the caller knows the op (validate() checks the pairing).
  /// @tparam P The parameter struct type.
  /// @return The held parameters (std::get throws std::bad_variant_access on a mismatch).
  template <class P>
  const P& p() const {
    return std::get<P>(params);
  }
};

/// The desc of an inverted_residual block on x with `ce` expanded and `cout` output channels:
/// the 16 (or, without expansion, 11) inputs in the documented order and shapes. Without
/// expansion ce must equal x's channels (validate() says so otherwise).
/// @param x The block input (N, Cin, H, W).
/// @param ce Expanded channels.
/// @param cout Output channels.
/// @param p Block parameters.
/// @return The desc.
OpDesc inverted_residual_desc(const TensorDesc& x, std::int64_t ce, std::int64_t cout, const InvertedResidualParams& p);

/// The parameter struct an op takes, default-initialized (UnaryParams get the op's activation).
/// @param op The op.
/// @return Its default parameters.
OpParams default_params(OpKind op);

/// Names of the inputs this desc expects, in order ("x", "w", "bias", "post0.scale", ...).
/// Valid for any desc whose params match its op.
/// @param desc The desc.
/// @return The input names.
std::vector<std::string> input_names(const OpDesc& desc);
/// Names of the outputs: "y", plus "sum" for layernorm/rmsnorm with has_residual and write_sum.
/// @param desc The desc.
/// @return The output names.
std::vector<std::string> output_names(const OpDesc& desc);

/// Full validation of shapes and parameters. The message names op, parameter and value.
/// @param desc The desc.
/// @return ok, or invalid_argument with the message.
Status validate(const OpDesc& desc);
/// Output descriptors (validates first).
/// @param desc The desc.
/// @return The outputs in output_names() order, or validate()'s error.
Result<std::vector<TensorDesc>> infer_outputs(const OpDesc& desc);
/// May output `out` alias input `in` (same buffer, same shape)? In-place elementwise work.
/// @param desc The desc.
/// @param in Input index.
/// @param out Output index.
/// @return True if the output may share the input's buffer.
bool allows_inplace(const OpDesc& desc, int in, int out) noexcept;

/// Work and traffic of one call, for benchmark counters: floating-point operations counted
/// as 2 per multiply-add, and the minimal bytes an implementation must read and write.
struct OpCost {
  double flops = 0;  ///< Floating-point operations.
  double bytes = 0;  ///< Bytes read and written.
};
/// The cost model of one call.
/// @param desc The desc.
/// @return Its OpCost; all zero if the desc is invalid.
OpCost op_cost(const OpDesc& desc);

/// Systematic case string for names of tests and benchmarks, e.g. "1024x1024x1024" (gemm
/// MxNxK), "n1_c64_h56_w56_k64_r3_s1_p1" (conv2d), with post-ops appended ("+bn+add+relu").
/// @param desc The desc.
/// @return The case string.
std::string case_name(const OpDesc& desc);

}  // namespace OPFUSE_API
