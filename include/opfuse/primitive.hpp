// opfuse/primitive.hpp - prepare once, execute many.
//
//   auto prim = opfuse::prepare(desc, ctx);        // validates, picks a kernel, packs
//   if (!prim) { report(prim.status()); }
//   Status s = prim->execute({&x, &w}, {&y});     // checks tensors against desc, computes
//
// prepare() picks the first kernel (best-first) of ctx.stage whose supports() accepts the
// desc, falling back to lower stages unless ctx.fallback is false. execute() validates its
// tensors (count, shape, layout, null data, read-only outputs, overlapping buffers) and
// leaves outputs untouched on error. A Primitive owns a workspace: do not execute the same
// Primitive from two threads at once (prepare one per thread instead).
//
// Constant inputs: pass `constants` (one entry per input, nullptr for runtime inputs) to bind
// weights at prepare time, so kernels can pack or transform them once (BN folding, GEMM
// panels, blocked layouts). The Primitive keeps a handle to each bound tensor (a view's memory
// must stay alive); at execute, pass nullptr for a bound input (or the same tensor).
#pragma once

#include <initializer_list>
#include <memory>
#include <span>

#include "opfuse/context.hpp"
#include "opfuse/ops.hpp"
#include "opfuse/registry.hpp"
#include "opfuse/status.hpp"
#include "opfuse/tensor.hpp"

namespace opfuse {

class Primitive {
 public:
  Status execute(std::span<const Tensor* const> inputs, std::span<const Tensor* const> outputs) const noexcept;
  Status execute(std::initializer_list<const Tensor*> inputs,
                 std::initializer_list<const Tensor*> outputs) const noexcept {
    return execute(std::span<const Tensor* const>(inputs.begin(), inputs.size()),
                   std::span<const Tensor* const>(outputs.begin(), outputs.size()));
  }
  // With caller scratch of at least workspace_size() floats, 64-byte aligned, in place of the
  // Primitive's own (nullptr: its own). A runtime that executes primitives one after another
  // prepares them with Context::own_workspace = false and lends all of them one buffer.
  Status execute(std::span<const Tensor* const> inputs, std::span<const Tensor* const> outputs,
                 float* workspace) const noexcept;
  // Scratch floats the kernel needs at execute (0: none).
  std::size_t workspace_size() const noexcept;
  const OpDesc& desc() const noexcept;
  const KernelDef& kernel() const noexcept;
  const std::vector<TensorDesc>& output_descs() const noexcept;

 private:
  struct Impl;
  std::shared_ptr<Impl> impl_;
  friend Result<Primitive> prepare_kernel(const OpDesc&, const KernelDef&, const Context&,
                                          std::span<const Tensor* const>) noexcept;
};

// Validates desc and prepares the best kernel for ctx.
Result<Primitive> prepare(const OpDesc& desc, const Context& ctx = {},
                          std::span<const Tensor* const> constants = {}) noexcept;
// Prepares one specific kernel (used by check and bench); unsupported if it declines.
Result<Primitive> prepare_kernel(const OpDesc& desc, const KernelDef& kernel, const Context& ctx = {},
                                 std::span<const Tensor* const> constants = {}) noexcept;
// The kernel prepare() would pick, or nullptr.
const KernelDef* select_kernel(const OpDesc& desc, const Context& ctx) noexcept;

// One-shot convenience: prepare + execute. Outputs must already have the right shape.
Status run(const OpDesc& desc, std::span<const Tensor* const> inputs, std::span<const Tensor* const> outputs,
           const Context& ctx = {}) noexcept;
Status run(const OpDesc& desc, std::initializer_list<const Tensor*> inputs,
           std::initializer_list<const Tensor*> outputs, const Context& ctx = {}) noexcept;

}  // namespace opfuse
