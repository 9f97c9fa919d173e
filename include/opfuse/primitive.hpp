/// @file
/// opfuse/primitive.hpp - prepare once, execute many.
///
///   auto prim = opfuse::prepare(desc, ctx);        // validates, picks a kernel, packs
///   if (!prim) { report(prim.status()); }
///   Status s = prim->execute({&x, &w}, {&y});     // checks tensors against desc, computes
///
/// prepare() picks the first kernel (best-first) of ctx.stage whose supports() accepts the
/// desc, falling back to lower stages unless ctx.fallback is false. execute() validates its
/// tensors (count, shape, layout, null data, read-only outputs, overlapping buffers) and
/// leaves outputs untouched on error. A Primitive owns a workspace: do not execute the same
/// Primitive from two threads at once (prepare one per thread instead).
///
/// Constant inputs: pass `constants` (one entry per input, nullptr for runtime inputs) to bind
/// weights at prepare time, so kernels can pack or transform them once (BN folding, GEMM
/// panels, blocked layouts). The Primitive keeps a handle to each bound tensor (a view's memory
/// must stay alive); at execute, pass nullptr for a bound input (or the same tensor).
///
/// Numerics: every stage computes the same IEEE 754 values, with the naive kernels as the
/// contract: NaN and Inf propagate the same way in every stage (naive/ documents each op's rule:
/// a NaN in a max-pool window wins, a softmax row with NaN is all NaN, a fully masked one all 0,
/// conv2d padding is a zero input multiplied in, so 0 * Inf is NaN there too). Denormals are
/// flushed: while execute() runs, the SSE control register (MXCSR) of the calling thread and of
/// every worker thread is set to round-to-nearest, all exceptions masked, flush-to-zero and
/// denormals-are-zero, so no kernel slows down on denormal data and all stages see the same
/// zeros. Each thread's control bits are restored when the call returns; exception flags the
/// call raised stay raised.
#pragma once

#include "opfuse/export.h"

#include <initializer_list>
#include <memory>
#include <span>

#include "opfuse/context.hpp"
#include "opfuse/ops.hpp"
#include "opfuse/registry.hpp"
#include "opfuse/status.hpp"
#include "opfuse/tensor.hpp"

// OPFUSE_API on the namespace: everything this header declares is part of the exported API.
namespace opfuse OPFUSE_API {

/// A prepared op: validated, its kernel chosen, weights packed. Prepare once, execute many.
class Primitive {
 public:
  /// Runs the op, with denormals flushed to zero on every thread it uses (the caller's MXCSR
  /// control bits are restored on return; see the file comment).
  /// @param inputs The op's inputs, in input_names() order, shaped as prepared.
  /// @param outputs Its outputs, shaped as output_descs().
  /// @return ok; invalid_argument for tensors that do not match the prepared desc (outputs
  /// untouched).
  Status execute(std::span<const Tensor* const> inputs, std::span<const Tensor* const> outputs) const noexcept;
  /// Runs the op.
  /// @param inputs The op's inputs, in input_names() order, shaped as prepared.
  /// @param outputs Its outputs, shaped as output_descs().
  /// @return As the span overload.
  Status execute(std::initializer_list<const Tensor*> inputs,
                 std::initializer_list<const Tensor*> outputs) const noexcept {
    return execute(std::span<const Tensor* const>(inputs.begin(), inputs.size()),
                   std::span<const Tensor* const>(outputs.begin(), outputs.size()));
  }
  /// With caller scratch of at least workspace_size() floats, 64-byte aligned, in place of the
  /// Primitive's own (nullptr: its own). A runtime that executes primitives one after another
  /// prepares them with Context::own_workspace = false and lends all of them one buffer.
  /// @param inputs The op's inputs.
  /// @param outputs Its outputs.
  /// @param workspace The scratch buffer, or nullptr.
  /// @return As the two-argument overload; invalid_argument when a workspace is needed and
  /// none is given.
  Status execute(std::span<const Tensor* const> inputs, std::span<const Tensor* const> outputs,
                 float* workspace) const noexcept;
  /// @return Scratch floats the kernel needs at execute (0: none).
  std::size_t workspace_size() const noexcept;
  /// @return The op as prepared.
  const OpDesc& desc() const noexcept;
  /// @return The registry kernel that runs it.
  const KernelDef& kernel() const noexcept;
  /// @return The outputs' shapes and layouts.
  const std::vector<TensorDesc>& output_descs() const noexcept;

 private:
  struct OPFUSE_LOCAL Impl;
  std::shared_ptr<Impl> impl_;
  /// @cond PRIVATE
  friend Result<Primitive> prepare_kernel(const OpDesc&, const KernelDef&, const Context&,
                                          std::span<const Tensor* const>) noexcept;
  /// @endcond
};

/// Validates desc and prepares the best kernel for ctx.
/// @param desc The op.
/// @param ctx The stage, threads, ISA cap and excluded kernels.
/// @param constants Empty, or one entry per input: the tensors bound now (weights), nullptr
/// for the ones given at execute.
/// @return The primitive; invalid_argument for a bad desc, unsupported when no kernel
/// accepts it, out_of_memory when its workspace and packed constants exceed ctx.memory_budget
/// (checked before allocating) or an allocation fails.
Result<Primitive> prepare(const OpDesc& desc, const Context& ctx = {},
                          std::span<const Tensor* const> constants = {}) noexcept;
/// Prepares one specific kernel (used by check and bench).
/// @param desc The op.
/// @param kernel The registry kernel to use.
/// @param ctx The threads and ISA cap.
/// @param constants As for prepare().
/// @return The primitive; unsupported if the kernel declines or needs a higher ISA,
/// out_of_memory as for prepare().
Result<Primitive> prepare_kernel(const OpDesc& desc, const KernelDef& kernel, const Context& ctx = {},
                                 std::span<const Tensor* const> constants = {}) noexcept;
/// The kernel prepare() would pick.
/// @param desc The op.
/// @param ctx The context.
/// @return That kernel, or nullptr when none accepts desc.
const KernelDef* select_kernel(const OpDesc& desc, const Context& ctx) noexcept;

/// One-shot convenience: prepare + execute. Outputs must already have the right shape.
/// @param desc The op.
/// @param inputs Its inputs.
/// @param outputs Its outputs, already shaped.
/// @param ctx The stage, threads and ISA cap.
/// @return As prepare() and Primitive::execute().
Status run(const OpDesc& desc, std::span<const Tensor* const> inputs, std::span<const Tensor* const> outputs,
           const Context& ctx = {}) noexcept;
/// One-shot convenience: prepare + execute.
/// @param desc The op.
/// @param inputs Its inputs.
/// @param outputs Its outputs, already shaped.
/// @param ctx The stage, threads and ISA cap.
/// @return As prepare() and Primitive::execute().
Status run(const OpDesc& desc, std::initializer_list<const Tensor*> inputs,
           std::initializer_list<const Tensor*> outputs, const Context& ctx = {}) noexcept;

}  // namespace OPFUSE_API
