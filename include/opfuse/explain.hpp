/// @file
/// opfuse/explain.hpp - the bytes-moved model: what an op costs in memory traffic when its
/// parts run as separate passes (the naive and simd stages) and when they run as one fused
/// pipeline (the fused stage).
///
/// "Fusion is data" (ops.hpp): a conv2d with a post-op chain, a layernorm with a residual, an
/// attention with a mask are each one OpDesc, but the unfused stages compute them as a
/// sequence of passes that write every intermediate to memory and read it back. The model
/// lists that sequence, step by step, with the bytes each step reads and writes (every tensor
/// it touches, once - the compulsory traffic), and next to it the fused pipeline: the same
/// work in one pass, where only the op's real inputs and outputs reach memory and each stage
/// says what it keeps in registers or cache instead.
///
/// It is a model, not a measurement: re-reads a real kernel makes from cache (GEMM panels, K/V
/// tiles) are not counted. opfuse-bench reports it as counters next to the measured GB/s, and
/// `opfuse explain <op> [case]` prints it.
#pragma once

#include "opfuse/export.h"

#include <string>
#include <vector>

#include "opfuse/ops.hpp"
#include "opfuse/status.hpp"

// OPFUSE_API on the namespace: everything this header declares is part of the exported API.
namespace opfuse OPFUSE_API {

/// One pass of the modeled sequence and the memory traffic it causes.
struct TrafficStep {
  std::string name;        ///< "conv2d 1x1", "batchnorm pass", "residual add (in registers)"
  double read_bytes = 0;   ///< bytes this step reads from memory
  double write_bytes = 0;  ///< bytes this step writes to memory
  std::string detail;      ///< what it reads and writes, or what it keeps in registers / cache
  /// @return read_bytes + write_bytes.
  double bytes() const { return read_bytes + write_bytes; }
};

/// The memory traffic of an op run as separate passes and as one fused pass.
struct FusionModel {
  std::vector<TrafficStep> unfused;  ///< one pass per step, intermediates materialized
  std::vector<TrafficStep> fused;    ///< the one-pass pipeline; in-register stages move 0 bytes
  /// @return The bytes of all unfused steps.
  double unfused_bytes() const;
  /// @return The bytes of all fused steps.
  double fused_bytes() const;
  /// The fraction of memory traffic fusion removes.
  /// @return 1 - fused / unfused (0 for ops with nothing to fuse, like a plain relu).
  double saved() const;
  /// Intermediate memory the unfused sequence materializes beyond inputs and outputs (bytes).
  double unfused_intermediate_bytes = 0;
};

/// The traffic model of an op. Validates desc first.
/// @param desc The op.
/// @return The model, or the status validate() returns for a bad desc.
Result<FusionModel> fusion_model(const OpDesc& desc);

}  // namespace OPFUSE_API
