// src/peers/peers.hpp - peer implementations (oneDNN 2.6, Eigen 3.4) behind opfuse's KernelDef.
//
// Peers are registered like opfuse's own kernels, in their own table (peers.cpp), so the
// benchmark runs them side by side with the stages and `opfuse check --stage naive` can use
// the oneDNN row of an op as the independent reference for the naive kernel.
//
//   name               `<op>__onednn` (Impl::onednn, isa "onednn"), `<op>__eigen` (Impl::eigen)
//   supports(desc)     declines everything the peer cannot compute with exactly our semantics
//   prepare            oneDNN: builds engine, stream, primitive descriptors, primitives, weight
//                      reorders and scratch buffers once; Eigen needs no state
//   execute            binds the user pointers to the prepared memory objects and runs; never
//                      throws (an impossible library error asserts, and in release builds the
//                      outputs are filled with NaN so every check goes red)
//
// Threads: oneDNN from Debian uses OpenMP (libgomp). When this library is compiled with
// OpenMP (-fopenmp), prepare and execute set omp_set_num_threads to the requested count for
// their duration (ThreadScope) and restore the caller's value; Eigen's GEMM uses the same
// OpenMP setting. Without OpenMP at compile time the count is left to the runtime default
// (oneDNN) and Eigen runs single-threaded.
#pragma once

#include <cstddef>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "opfuse/context.hpp"
#include "opfuse/ops.hpp"
#include "opfuse/registry.hpp"
#include "opfuse/status.hpp"

namespace opfuse::peers {

// Every peer kernel, grouped by op (oneDNN first, then Eigen).
std::span<const KernelDef> kernels() noexcept;
// The peer kernel with this name ("gemm__onednn"), or nullptr.
const KernelDef* find(std::string_view name) noexcept;
// The oneDNN kernel of `op`: the independent reference the naive stage is checked against.
// Every op has one (attention, eltwise_chain, inverted_residual and rmsnorm are sequences of
// oneDNN primitives); its supports() still decides per desc.
const KernelDef* onednn_reference(OpKind op) noexcept;
// Library versions linked in, for reports: "oneDNN 2.6.3 (cpu runtime OpenMP), Eigen 3.4.0".
std::string versions();

// Caps oneDNN's JIT to the level closest to `isa` (avx512 -> avx512_core, avx2 -> avx2, sse2 ->
// sse41, oneDNN's lowest) before any of its primitives exists; Eigen follows OPFUSE_ISA through
// eigen::active(). Returns false when oneDNN refuses (a primitive was already created).
bool cap_onednn_isa(Isa isa) noexcept;
// The level oneDNN's JIT runs at now, in its own words ("avx2", "avx512_core", ...).
std::string onednn_isa();

// Sets the OpenMP thread count for the lifetime of the object and restores the previous
// value; a no-op for threads <= 0 or when built without OpenMP.
class ThreadScope {
 public:
  explicit ThreadScope(int threads) noexcept;
  ~ThreadScope();
  ThreadScope(const ThreadScope&) = delete;
  ThreadScope& operator=(const ThreadScope&) = delete;

 private:
  int previous_ = 0;
};

// Entry points used by the table in peers.cpp.
namespace onednn {
// One set of entry points for every op: each dispatches on desc.op.
bool supports(const OpDesc& desc);
Status prepare(const OpDesc& desc, const Context& ctx, const Tensor* const* constants, std::shared_ptr<void>& state);
void execute(const KernelArgs& args);
}  // namespace onednn

namespace eigen {
// eigen.cpp is compiled once per ISA; each copy exports its entry points as one Variant in its
// own namespace (isa_avx512, isa_avx2, isa_sse2). The Eigen rows run the best variant that
// effective_isa(Context{}) allows (the CPU, capped by OPFUSE_ISA).
struct Variant {
  Isa isa;
  bool (*supports_gemm)(const OpDesc& desc);
  std::size_t (*gemm_workspace)(const OpDesc& desc);
  void (*gemm)(const KernelArgs& args);
  bool (*supports_conv2d)(const OpDesc& desc);
  std::size_t (*conv2d_workspace)(const OpDesc& desc);
  void (*conv2d)(const KernelArgs& args);
};
namespace isa_avx512 {
extern const Variant variant;
}
namespace isa_avx2 {
extern const Variant variant;
}
namespace isa_sse2 {
extern const Variant variant;
}
// The variant the Eigen rows run on this CPU.
const Variant& active() noexcept;
}  // namespace eigen

}  // namespace opfuse::peers
