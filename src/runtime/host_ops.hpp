// src/runtime/host_ops.hpp - the ops the runtime runs itself: shapes, data movement and the
// ONNX-level compute that has no registry kernel (see the op contract in src/graph/ir.hpp).
//
// Each host op has two halves. infer() derives the output dtypes and static dims from the
// input infos, reading the *values* of shape-like inputs (reshape's shape, slice's starts, ...)
// where the op needs them; those come as constants or the op fails with invalid_argument naming
// the node. run() computes, on dense row-major (NCHW-order) buffers, and allocates nothing: the
// executor sized every output from infer(). Both check what they read (axes in range, indices
// in bounds, sizes that fit) and return a Status naming the node, the op, the parameter and the
// value; they never throw or abort.
//
// The registry ops add, sub, mul, div are also host ops, for i64 (shape arithmetic) and as the
// f32 fallback of constant folding. matmul is not: the executor runs it as gemm primitives.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "opfuse/status.hpp"
#include "src/graph/ir.hpp"

namespace opfuse::runtime {

// What infer() knows and derives about a value: its element type and static dims (rank 0 is a
// scalar).
struct TensorInfo {
  graph::DType dtype = graph::DType::f32;
  std::vector<std::int64_t> dims;
  std::int64_t numel() const noexcept;  // 1 for rank 0
};

// A dense row-major buffer: float* for f32, std::int64_t* for i64 and boolean (0 / 1).
struct HostTensor {
  graph::DType dtype = graph::DType::f32;
  std::vector<std::int64_t> dims;
  void* data = nullptr;
  std::int64_t numel() const noexcept;
  float* f32() const noexcept { return static_cast<float*>(data); }
  std::int64_t* i64() const noexcept { return static_cast<std::int64_t*>(data); }
};

// True for the NodeOps this file runs: every non-registry op except matmul, constant and
// layout_convert; plus add, sub, mul, div (any dtype).
bool is_host_op(graph::NodeOp op) noexcept;

// `in` has one entry per node input (nullptr for an omitted optional one); `constant` has the
// same length and holds the payload of each input that is a constant, else nullptr. On success
// `out` has one TensorInfo per node output.
Status infer(const graph::Node& node, std::span<const TensorInfo* const> in,
             std::span<const HostTensor* const> constant, std::vector<TensorInfo>& out);

// Computes the node. `in` / `out` as infer() described them (omitted inputs have data ==
// nullptr). Outputs never alias inputs.
Status run(const graph::Node& node, std::span<const HostTensor> in, std::span<const HostTensor> out);

}  // namespace opfuse::runtime
