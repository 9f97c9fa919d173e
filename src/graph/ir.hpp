// src/graph/ir.hpp - the graph IR: values, nodes and the Graph that owns them.
//
// A whole model is a dataflow graph. Values are the edges (a tensor with a name, a dtype and
// dims that may be symbolic, like "batch"); nodes are the operations. A node whose op is a
// registry op (conv2d, gemm, ...) carries the same OpParams an OpDesc does, so the executor
// turns it into an OpDesc and hands it to the kernel registry unchanged, post-op chain and
// all: fusion is still data. Every other op (reshape, matmul, where, ...) carries a small
// attribute map instead, the way the model file spelled it.
//
// The Graph owns two vectors, and ids are indices into them. Removing a node only marks it
// dead, so a rewrite never renumbers anything and costs O(1); consumers are computed by a scan
// rather than maintained, so no edit can leave a stale use list behind. Building and editing
// check ids and return a Status; the structural rules (one producer per value, no dangling
// input, unique names, no cycle) belong to verify(), because a rewrite passes through states
// that break them and only its end result has to be whole.
//
// Nothing here knows ONNX: the importer (src/onnx/) maps its ops onto NodeOp, and the
// runtime (src/runtime/) reads the graph through topological_order() and op_desc().
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <string_view>
#include <unordered_map>
#include <variant>
#include <vector>

#include "opfuse/ops.hpp"
#include "opfuse/status.hpp"
#include "opfuse/tensor.hpp"

namespace opfuse::graph {

// ---- element types and dims ----------------------------------------------------------------

// Kernels compute in f32; i64 and boolean tensors are shapes, indices and masks.
enum class DType : std::uint8_t { f32, i64, boolean };
std::string_view name(DType dtype) noexcept;

// One dimension: static (value >= 0) or symbolic (value -1 and a name such as "batch"; an
// empty name is a dimension the model file left unknown, printed "?").
struct Dim {
  std::int64_t value = -1;
  std::string symbol;

  Dim() = default;
  Dim(std::int64_t v) : value(v) {}  // NOLINT(google-explicit-constructor): Dims{1, 3, 224, 224}
  static Dim sym(std::string s) {
    Dim d;
    d.symbol = std::move(s);
    return d;
  }
  bool is_static() const noexcept { return value >= 0; }
  friend bool operator==(const Dim& a, const Dim& b) = default;
};
using Dims = std::vector<Dim>;

bool all_static(const Dims& dims) noexcept;
// The Shape of static dims; invalid_argument naming `what`, the dim and its symbol when one is
// symbolic, or when the rank exceeds kMaxRank. Sizes are not validated here (the op does).
Result<Shape> to_shape(const Dims& dims, std::string_view what = "dims");
Dims dims_of(const Shape& shape);
// "1x3x224x224", "batchx128x768", "?x10" (an unknown dim), "scalar" (rank 0).
std::string to_string(const Dims& dims);

// ---- values --------------------------------------------------------------------------------

enum class ValueKind : std::uint8_t {
  input,         // a graph input, bound by the caller at run time
  constant,      // an initializer or a folded constant: it carries its payload
  intermediate,  // produced by a node
};

struct Value {
  int id = -1;
  std::string name;  // unique in the graph; fixed at add time (the name index keys on it)
  DType dtype = DType::f32;
  bool has_shape = false;  // false: not inferred yet, dims is empty and means nothing
  Dims dims;
  Layout layout = Layout::nchw;  // memory order; the planner sets it, layout_convert nodes change it
  ValueKind kind = ValueKind::intermediate;
  int producer = -1;  // the node that outputs it; -1 for inputs, constants and removed producers
  // The payload of a constant: f32_data for f32, i64_data for i64 and boolean (0 / 1). Shared so
  // a copied graph, or a rewrite that reuses a weight, does not duplicate it.
  std::shared_ptr<const std::vector<float>> f32_data;
  std::shared_ptr<const std::vector<std::int64_t>> i64_data;

  bool is_constant() const noexcept { return kind == ValueKind::constant; }
  std::size_t payload_bytes() const noexcept;
};

// ---- ops -----------------------------------------------------------------------------------

// The first kOpCount values mirror OpKind one to one, in its order, so a registry op converts
// by a cast. The rest have no kernel row: data movement and shape ops the runtime executes
// itself (or folds away), ONNX-level compute the fusion passes lower onto registry ops, and
// layout_convert, which the planner inserts so that every NCHW <-> NHWC change is a node.
// clang-format off
enum class NodeOp : std::uint8_t {
  // registry ops (OpKind order)
  gemm, conv2d, batchnorm, relu, clip, leaky_relu, sigmoid, tanh, gelu, silu, hardswish,
  add, sub, mul, div, maxpool2d, avgpool2d, global_avgpool, softmax, layernorm, rmsnorm,
  attention, inverted_residual, eltwise_chain,
  // data movement and shapes
  reshape, transpose, concat, flatten, slice, gather, squeeze, unsqueeze, split, identity,
  constant, constant_of_shape, shape, expand, cast,
  // compute with no kernel of its own
  matmul, pow, sqrt, erf, reduce_mean, where, equal, min, max, conv_nd, pool_nd, layernorm_stats,
  // inserted by the planner
  layout_convert,
};
// clang-format on
inline constexpr int kNodeOpCount = 52;
static_assert(static_cast<int>(NodeOp::layout_convert) + 1 == kNodeOpCount, "kNodeOpCount must count every NodeOp");
static_assert(static_cast<int>(NodeOp::eltwise_chain) + 1 == kOpCount, "NodeOp must list every OpKind first");

std::string_view name(NodeOp op) noexcept;  // the registry ops use op_name()'s spelling
std::optional<NodeOp> node_op_from_name(std::string_view name) noexcept;
// The registry op a NodeOp runs as (nullopt for the others) and back.
std::optional<OpKind> registry_op(NodeOp op) noexcept;
NodeOp node_op(OpKind op) noexcept;

// ---- the op contract: what the importer emits and the runtime runs ----------------------------
//
// Registry ops carry OpParams and take exactly the OpDesc's inputs (ops.hpp), f32. Where a model
// spells them with fewer dims the runtime views the tensors (memory is the same):
//   conv2d, maxpool2d, avgpool2d  also 1-D: x (N,C,L), w (K,C/g,k), params' H side trivial
//                                 (kernel_h 1, stride_h 1, no H padding); run as (N,C,1,L).
//   any op                         a rank-0 value (an ONNX scalar) runs as shape (1).
//   attention with packed_qkv      inputs qkv (B, S, 3*H*D), [mask]; output (B, S, H, D): the
//                                  registry's q, k, v are views of qkv (runtime::desc_operand).
//   add sub mul div                also on i64 (shape arithmetic): run by the host ops.
// Everything else carries attrs (keys below) and is run by the runtime's host ops. Shape-like
// operands are i64 *inputs* in ONNX's opset-13+ order, whatever the model's opset: the importer
// turns older opsets' attributes into i64 initializers. They must be constant by the time a plan
// is compiled (folding makes them so); otherwise compile fails naming the node.
//   reshape      data, shape(i64)                attrs: allowzero (i64, default 0)
//   transpose    data                            attrs: perm (i64s; absent = reverse)
//   concat       inputs...                       attrs: axis (i64)
//   flatten      data                            attrs: axis (i64, default 1)
//   slice        data, starts, ends, [axes], [steps]  (i64)
//   gather       data, indices(i64)              attrs: axis (i64, default 0)
//   squeeze      data, [axes(i64)]               (no axes: every dim of size 1)
//   unsqueeze    data, axes(i64)
//   split        data, [split(i64)]              attrs: axis (i64, default 0); outputs 1..n
//   identity     data
//   constant     -                               attrs: none; the importer makes constants
//                                                values, so no constant node survives import
//   constant_of_shape  shape(i64)                attrs: value_f32 (float) or value_i64 (i64)
//   shape        data                            attrs: start, end (i64, optional) -> i64
//   expand       data, shape(i64)
//   cast         data                            attrs: to (string "f32" | "i64" | "boolean")
//   matmul       a, b  (f32; NumPy matmul: 1-D operands promoted, batch dims broadcast)
//   pow          base(f32), exponent(f32 or i64)
//   sqrt erf     x(f32)
//   reduce_mean  data, [axes(i64)]               attrs: keepdims (default 1),
//                                                noop_with_empty_axes (default 0)
//   where        cond(boolean), x, y             (NumPy broadcasting)
//   equal        a, b -> boolean                 (NumPy broadcasting; f32 or i64)
//   min max      a, b (f32; NumPy broadcasting)  (Clip with bounds given at run time)
//   conv_nd      x, w, [b]                       attrs: strides, pads (begins then ends),
//                                                dilations (i64s, one per spatial dim), group;
//                                                any spatial rank (the importer uses it for 3-D)
//   pool_nd      x -> y, [indices(i64)]          attrs: mode ("max" | "avg"), kernel_shape,
//                                                strides, pads, dilations, ceil_mode,
//                                                count_include_pad, storage_order; indices as
//                                                ONNX MaxPool gives them (flat offsets into x)
//   layernorm_stats  x -> mean, inv_std_dev      attrs: axis, epsilon (LayerNormalization's
//                                                optional outputs; kept dims are 1)
//   layout_convert  x                            attrs: to ("nchw" | "nhwc")

// ---- nodes ---------------------------------------------------------------------------------

// An attribute of a non-registry op, as the model file gives it (axis, perm, to, ...).
using Attr = std::variant<std::int64_t, float, std::string, std::vector<std::int64_t>, std::vector<float>>;
// "3", "0.5", "nhwc", "0,2,1,3".
std::string to_string(const Attr& attr);

struct Node {
  int id = -1;
  std::string name;  // unique among the graph's nodes (verify() checks)
  NodeOp op = NodeOp::identity;
  std::optional<OpParams> params;     // registry ops only, and always set for them
  std::map<std::string, Attr> attrs;  // every other op
  std::vector<int> inputs;            // value ids; -1 for an omitted optional input
  std::vector<int> outputs;           // value ids
  bool dead = false;                  // removed; kept so that ids stay indices
  // Fusion provenance, set by the rewrites (record_fusion in pattern.hpp): the patterns that
  // built or changed this node, in order, and the ids of the nodes of the graph before fusion
  // whose work it now does (empty: the node is as it was). Ids stay valid because removed nodes
  // keep their slot, so the unfused graph's node i is node i here too.
  std::vector<std::string> fused_by;
  std::vector<int> origin;
  // Fusions that must not touch this node (the fallback of a fused kernel that declined).
  std::vector<std::string> refused;

  // The attribute `key` if present and of type T, else nullptr.
  template <class T>
  const T* attr(const std::string& key) const {
    const auto it = attrs.find(key);
    return it == attrs.end() ? nullptr : std::get_if<T>(&it->second);
  }
};

// ---- the graph -----------------------------------------------------------------------------

class Graph {
 public:
  explicit Graph(std::string name = "graph") : name_(std::move(name)) {}

  const std::string& name() const noexcept { return name_; }

  // Every add returns the new id, or invalid_argument (empty or duplicate value name, a payload
  // whose size does not match static dims, a bad id). Intermediate values start without producer
  // and, when dims is nullopt, without shape.
  Result<int> add_value(std::string name, DType dtype = DType::f32, std::optional<Dims> dims = std::nullopt);
  Result<int> add_input(std::string name, DType dtype, Dims dims);
  Result<int> add_initializer(std::string name, Dims dims, std::vector<float> data);
  // dtype i64 or boolean.
  Result<int> add_initializer(std::string name, Dims dims, std::vector<std::int64_t> data, DType dtype = DType::i64);
  // Registry ops without params get default_params(); their params must match the op, and other
  // ops take none. Checks the name is non-empty, each input is -1 or a value id, each output a
  // value id (at least one); sets the outputs' producer. Names and single producers are
  // verify()'s to check, so a rewrite may add a node before removing the one it replaces.
  Result<int> add_node(NodeOp op, std::string name, std::vector<int> inputs, std::vector<int> outputs,
                       std::optional<OpParams> params = std::nullopt, std::map<std::string, Attr> attrs = {});
  Status set_outputs(std::vector<int> outputs);
  // Rewires one input of a live node (value -1 omits it).
  Status set_input(int node, int slot, int value);
  // Makes `value` output `slot` of a live node (its producer becomes the node); the value it
  // replaces loses its producer. Used to put a node in front of a value that keeps its name,
  // such as a graph output that needs a layout conversion.
  Status set_output(int node, int slot, int value);
  // Every live node input equal to old_value, and every graph output equal to it, becomes
  // new_value; returns how many were replaced. A graph output then carries new_value's name.
  Result<int> replace_all_uses(int old_value, int new_value);
  // Marks a live node dead and clears its outputs' producer. Consumers of those outputs now
  // dangle until they are rewired (verify() says so).
  Status remove_node(int node);

  // Access by id: callers pass ids the graph gave them (valid_value / valid_node check).
  // Fields may be edited (shape inference sets dims, fusion appends post-ops); ids, names,
  // inputs and outputs change only through the calls above.
  bool valid_value(int id) const noexcept { return id >= 0 && id < static_cast<int>(values_.size()); }
  bool valid_node(int id) const noexcept { return id >= 0 && id < static_cast<int>(nodes_.size()); }
  const Value& value(int id) const { return values_[static_cast<std::size_t>(id)]; }
  Value& value(int id) { return values_[static_cast<std::size_t>(id)]; }
  const Node& node(int id) const { return nodes_[static_cast<std::size_t>(id)]; }
  Node& node(int id) { return nodes_[static_cast<std::size_t>(id)]; }
  const std::vector<Value>& values() const noexcept { return values_; }
  const std::vector<Node>& nodes() const noexcept { return nodes_; }
  const std::vector<int>& inputs() const noexcept { return inputs_; }
  const std::vector<int>& outputs() const noexcept { return outputs_; }
  int live_node_count() const noexcept;

  std::optional<int> find_value(std::string_view name) const;
  std::optional<int> find_node(std::string_view name) const;  // a live node
  // Live nodes reading `value`, each once, in id order.
  std::vector<int> consumers(int value) const;
  // The same for every value at once (index = value id), for passes that ask many times.
  std::vector<std::vector<int>> consumer_lists() const;

 private:
  Result<int> push_value(Value v);
  Status check_value_ref(const std::string& what, int id, bool allow_omitted) const;

  std::string name_;
  std::vector<Value> values_;
  std::vector<Node> nodes_;
  std::vector<int> inputs_, outputs_;
  std::unordered_map<std::string, int> value_index_;
};

// ---- whole-graph queries -------------------------------------------------------------------

// Live nodes, producers before consumers. Kahn's algorithm with the ready set ordered by id, so
// ties keep insertion order and a graph built in order comes back exactly in that order.
// Iterative: no recursion depth to overflow on long chains. A cycle is an invalid_argument that
// names the nodes on one cycle, in dataflow order.
Result<std::vector<int>> topological_order(const Graph& g);

// The structural rules every pass must leave intact; the first broken one comes back as
// invalid_argument naming the node and value: ids in range, unique non-empty names, registry ops
// with matching params, constants with their payload, each value produced at most once and
// inputs / constants never, every node input available (graph input, constant or produced by a
// live node), every graph output available, no cycle.
Status verify(const Graph& g);

// The OpDesc a live registry node runs as: its params and, per input, the static shape and
// layout of the value (invalid_argument for an omitted, unshaped, symbolic or non-f32 input).
// Not validated; the registry's validate() is the judge of that.
Result<OpDesc> op_desc(const Graph& g, int node);

// The --dump-graph text: one line per live node in topological order (insertion order if the
// graph has a cycle),
//   conv1  conv2d k7x7 s2 p3 g1 +bias+bn+relu  x[1x3x224x224] w[64x3x7x7] b[64] -> y[1x64x112x112]
// then a footer with the counts of live nodes, values in use and constants, the constants'
// bytes, and the graph inputs and outputs.
void print(const Graph& g, std::ostream& os);
std::string to_string(const Graph& g);

// The graph as Graphviz DOT: a box per live node (op and key attributes), an edge per value
// with its dims, graph inputs and outputs as ellipses, constants left out. Each cluster (a
// label and node ids) becomes a labelled subgraph: the fused groups.
struct DotCluster {
  std::string label;
  std::vector<int> nodes;
};
std::string to_dot(const Graph& g, const std::vector<DotCluster>& clusters);

}  // namespace opfuse::graph
