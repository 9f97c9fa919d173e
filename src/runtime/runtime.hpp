// src/runtime/runtime.hpp - the passes between a loaded graph and a plan (internal).
//
// A loaded graph goes through, in order:
//   infer_and_fold   shapes of every value (registry ops through infer_outputs, host ops through
//                    host_ops.hpp's infer), folding each node whose inputs are all constants
//                    (and Shape of a static value) into a constant, then dead-node removal.
//                    Tolerant at load (symbolic dims stop inference where they flow), strict
//                    when a plan is specialized for concrete input dims.
//   plan_layouts     which memory order each 4-D activation lives in, inserting layout_convert
//                    nodes where a consumer needs the other one (layout.cpp).
//   the executor     liveness-based arena, aliases and in-place outputs, one prepared step per
//                    node (executor.cpp).
#pragma once

#include <cstdint>
#include <vector>

#include "opfuse/context.hpp"
#include "opfuse/ops.hpp"
#include "opfuse/status.hpp"
#include "src/graph/ir.hpp"

namespace opfuse::runtime {

// "node 'conv_a' (conv2d): <msg>" - every error the runtime raises about a node reads so.
Status node_error(const graph::Node& n, StatusCode code, const std::string& msg);

// Runs through the registry: a registry op whose inputs are all f32 (add .. div on i64 go to
// the host ops).
bool runs_on_registry(const graph::Graph& g, const graph::Node& n);

// The OpDesc a registry node runs as, with the views the op contract allows: a rank-0 value
// as shape (1), the 1-D forms of conv2d / pools as (N, C, 1, L). Errors name the node.
Result<OpDesc> registry_desc(const graph::Graph& g, const graph::Node& n);

// An attention node in the packed layout (AttentionParams::packed_qkv): its graph inputs are
// qkv (B, S, 3*H*D) and [mask], its output (B, S, H, D); its desc has q, k, v (B, H, S, D), all
// three views of qkv (registry_desc takes B, S, H, D from the output's dims).
bool is_packed_attention(const graph::Node& n);
// Where desc input k of registry node n lives: the graph value and the offset in floats into it
// (packed attention: q, k and v are the qkv value at 0, H*D and 2*H*D).
std::pair<int, std::int64_t> desc_operand(const graph::Node& n, const OpDesc& desc, std::size_t k);

// MatMul's geometry under NumPy's rules, for valid operand dims (shape inference checked them):
// 1-D operands promoted, y (batches, M, N) = a (.., M, K) x b (.., K, N), and for each output
// batch the index of the (M, K) matrix of a and the (K, N) matrix of b it multiplies (size-1
// batch dims repeat).
struct MatmulGeometry {
  std::int64_t M = 0, K = 0, N = 0;
  std::vector<std::pair<std::int64_t, std::int64_t>> batches;  // (a matrix, b matrix) per y matrix
};
MatmulGeometry matmul_geometry(std::vector<std::int64_t> a, std::vector<std::int64_t> b);

// Dims of a value; invalid_argument naming it when they are not all static.
Result<std::vector<std::int64_t>> static_dims(const graph::Value& v);

struct FoldOptions {
  bool strict = false;                       // every value must get static dims
  std::uint64_t max_fold_bytes = 64u << 20;  // a larger constant result stays a node
  // Strict mode: a value larger than this is out_of_memory, naming the node that makes it (the
  // plan's memory budget; a load has none).
  std::uint64_t memory_budget = UINT64_MAX;
  // Folding runs at load time on a model from anywhere: a few bytes of ConstantOfShape or MatMul
  // of constants must not cost gigabytes or minutes. A node whose fold would take more work
  // (element operations, shapes.cpp's fold_work) stays a node; past the totals of one pass only
  // small results (shape arithmetic) still fold. What stays a node runs with the plan, under
  // its memory budget.
  double max_fold_work = double(1 << 28);
  std::uint64_t max_fold_total_bytes = 256u << 20;
  double max_fold_total_work = double(1u << 30);
};
// Infers shapes in topological order and folds constants (see above). Strict mode fails on the
// first node it cannot infer, naming it.
Status infer_and_fold(graph::Graph& g, const FoldOptions& options);

// Removes live nodes none of whose outputs is consumed or a graph output; returns how many.
int remove_dead_nodes(graph::Graph& g);

// At the simd and fused stages, 4-D activations of convolutions and the ops between them stay
// NHWC; conversions are nodes. The naive stage keeps NCHW (its kernels read through strides).
Status plan_layouts(graph::Graph& g, Stage stage);

// True when converting a rank-4 tensor of these dims between NCHW and NHWC moves nothing
// (C == 1 or H * W == 1): the executor runs such a layout_convert as a view.
bool layout_convert_is_view(const std::vector<std::int64_t>& dims);

}  // namespace opfuse::runtime
