/// @file
/// opfuse/registry.hpp - the one table of kernels.
///
/// Each row is one kernel: the op it implements, its stage (or peer library), a name
/// `op__stage[_isa_tile]`, the ISA it needs, a one-line description of what it does
/// differently, a supports() predicate and its entry points. The same table drives
/// `opfuse ops`, `opfuse check`, the tests and `opfuse-bench`. Rows of one op and stage are
/// ordered best-first; the naive row of every op accepts every valid problem.
#pragma once

#include "opfuse/export.h"

#include <cstddef>
#include <memory>
#include <span>
#include <string_view>

#include "opfuse/context.hpp"
#include "opfuse/ops.hpp"
#include "opfuse/status.hpp"
#include "opfuse/tensor.hpp"

// OPFUSE_API on the namespace: everything this header declares is part of the exported API.
namespace opfuse OPFUSE_API {

/// Who implements a kernel: an opfuse stage, or a peer library registered for comparison.
enum class Impl : std::uint8_t { naive, simd, fused, cuda, onednn, eigen };
/// @param i An implementation.
/// @return Its name: "naive", "simd", "fused", "cuda", "onednn" or "eigen".
std::string_view impl_name(Impl i) noexcept;
/// @param i An implementation.
/// @return Whether it is one of opfuse's stages (not a peer).
inline bool is_stage(Impl i) noexcept { return i <= Impl::cuda; }
/// @param s A stage.
/// @return The Impl of that stage's kernels.
inline Impl impl_of(Stage s) noexcept { return static_cast<Impl>(s); }

/// What a kernel's execute receives. Shapes, pointers, aliasing and counts are validated
/// before; a kernel only asserts.
struct KernelArgs {
  const OpDesc* desc = nullptr;        ///< the problem, as prepared
  const Tensor* const* in = nullptr;   ///< desc->inputs.size() tensors
  const Tensor* const* out = nullptr;  ///< output_names(desc).size() tensors
  float* workspace = nullptr;          ///< workspace(desc) floats, 64-byte aligned
  void* state = nullptr;               ///< what prepare() built (packed weights, peer primitives)
  int threads = 1;                     ///< worker threads the kernel may use (>= 1)
};

/// One row of the registry: a kernel of one op, its stage or peer, and its entry points.
struct KernelDef {
  OpKind op;                 ///< the op it computes
  Impl impl;                 ///< its stage, or the peer library
  std::string_view name;     ///< "conv2d__naive", "gemm__simd_avx512_6x32"
  std::string_view isa;      ///< "scalar", "avx512", ...
  std::string_view summary;  ///< what this kernel does, for `opfuse ops` and the reports
  /// nullptr accepts every valid desc.
  bool (*supports)(const OpDesc&) = nullptr;
  /// Scratch floats execute needs (allocated once at prepare); nullptr means none.
  std::size_t (*workspace)(const OpDesc&) = nullptr;
  /// Optional prepare step: packs weights, builds peer primitives. `constants` is nullptr, or
  /// holds desc.inputs.size() entries: the inputs the caller bound at prepare time (weights) and
  /// nullptr for the runtime ones; a kernel may pack the bound ones and then ignore them at
  /// execute (KernelArgs::in still points at them). May throw std::bad_alloc (reported as
  /// out_of_memory); returns unsupported/internal for anything else.
  Status (*prepare)(const OpDesc&, const Context&, const Tensor* const* constants,
                    std::shared_ptr<void>& state) = nullptr;
  /// Computes the outputs. Must not throw.
  void (*execute)(const KernelArgs&) = nullptr;
};

/// The ISA level a kernel needs: its `isa` field read as an Isa name ("avx512", "avx2", "sse2");
/// anything else ("scalar", "onednn") needs nothing. Selection skips kernels above
/// effective_isa(ctx); prepare_kernel refuses them with unsupported.
/// @param k A kernel.
/// @return The level it needs (Isa::scalar for none).
Isa kernel_isa(const KernelDef& k) noexcept;

/// All kernels of the opfuse library, in registry order.
/// @return The registry table.
std::span<const KernelDef> kernels() noexcept;
// Peer kernels (oneDNN, Eigen) live in the opfuse_peers library; see peers.hpp.
/// A kernel of the library by name.
/// @param name Its registry name, e.g. "gemm__naive".
/// @return The kernel, or nullptr when there is none of that name.
const KernelDef* find_kernel(std::string_view name) noexcept;

}  // namespace OPFUSE_API
