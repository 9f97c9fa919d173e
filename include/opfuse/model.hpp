/// @file
/// opfuse/model.hpp - whole models: load an ONNX file, compile it into a plan, run the plan.
///
///   auto model = opfuse::Model::load_file("resnet50.onnx");     // or load_builtin("resnet50")
///   if (!model) return report(model.status());
///   opfuse::CompileOptions opt;
///   opt.stage = opfuse::Stage::simd;
///   auto plan = opfuse::Plan::compile(*model, opt);            // kernels chosen, weights packed
///   std::vector<float> x(1 * 3 * 224 * 224), y(1000);
///   opfuse::TensorRef in{"input", opfuse::ElementType::f32, {1, 3, 224, 224}, x.data()};
///   opfuse::MutableTensorRef out{"output", opfuse::ElementType::f32, {1, 1000}, y.data()};
///   opfuse::Status s = plan->run({&in, 1}, {&out, 1});          // allocates nothing
///
/// Loading imports the file into the graph IR, checks it and folds what is constant (weights,
/// shape subgraphs). Compiling binds the stage, threads and memory budget. The first run with a
/// given set of input dims specializes the plan for them: shapes are inferred, the remaining
/// shape arithmetic folded, layouts planned (convolutions keep their activations NHWC at the simd
/// and fused stages, with explicit conversion nodes where something else needs NCHW), one arena
/// sized by liveness, and every kernel prepared through the registry with the weights bound as
/// constants. Specializations are cached by input dims (a bounded cache), so a model with a
/// symbolic sequence length runs at 64, 128 and 384 tokens without reloading; later runs with
/// cached dims allocate nothing.
///
/// Errors come back as a Status naming the node, the input or the dim (never an exception):
/// invalid_argument for a bad file, graph or input, unsupported for an op or attribute the
/// importer or the kernels do not handle, out_of_memory past the memory budget.
///
/// Threads: every member of a Plan may be called from several threads at once. Concurrent runs
/// share the specializations (graph, chosen kernels) and the weights as loaded, and each runs
/// in a run state of its own: an activation arena, a kernel workspace and the kernels prepared
/// for them. A specialization keeps a pool of run states that grows to the most runs seen at
/// once and never shrinks; a run takes the state returned last, so runs from one thread always
/// reuse one state and allocate nothing. Memory budget: each run state counts weight_bytes() +
/// arena_bytes() + its workspace (peak_bytes()), as the kernels of an extra state pack their
/// own copy of the weights; a run that finds no free state and whose extra one would not fit
/// the budget waits for a state to come back (runs serialize, they do not fail). The queries
/// describe the current specialization: the one the most recent run() or output_infos() call
/// on any thread looked up, so with threads running different input dims it may change between
/// two queries. An evicted specialization stays alive until the runs using it end.
///
/// Numerics are those of Primitive::execute (opfuse/primitive.hpp): NaN and Inf propagate as the
/// naive stage defines, and run() flushes denormals to zero (FTZ and DAZ in MXCSR) on the
/// calling thread and every worker for its whole duration, restoring each thread's control bits
/// when it returns.
#pragma once

#include "opfuse/export.h"

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "opfuse/context.hpp"
#include "opfuse/status.hpp"

// OPFUSE_API on the namespace: everything this header declares is part of the exported API.
namespace opfuse OPFUSE_API {

/// Element types of model inputs and outputs: f32 activations; i64 and boolean for shapes,
/// indices and masks. A boolean element is one byte (0 or 1) in caller buffers.
enum class ElementType : std::uint8_t { f32, /**< 32-bit float */ i64, /**< 64-bit integer */ boolean /**< bool */ };
/// Name of an element type.
/// @param t the element type
/// @return "f32", "i64" or "boolean"
std::string_view element_type_name(ElementType t) noexcept;
/// Size of one element in caller buffers.
/// @param t the element type
/// @return bytes per element: 4, 8 or 1
std::size_t element_size(ElementType t) noexcept;

/// One dimension of a declared input or output: static (value >= 0) or symbolic (value -1 and a
/// name such as "seq"; an empty name is a dim the file left unknown).
struct DimInfo {
  std::int64_t value = -1;  ///< the size, or -1 for a symbolic or unknown dim
  std::string symbol;       ///< the dim's name when symbolic; empty otherwise
};

/// A declared input or output of a model: name, element type and dims.
struct ValueInfo {
  std::string name;                     ///< the ONNX value name
  ElementType type = ElementType::f32;  ///< element type
  std::vector<DimInfo> dims;            ///< dims, outermost first; empty for a scalar
};
/// Text form of declared dims: static values, symbols, "?" for unknown dims.
/// @param dims the dims
/// @return "1x3x224x224", "batchx128x768", "?x10" ("scalar" for no dims)
std::string dims_string(const std::vector<DimInfo>& dims);

/// A caller-owned input: dense row-major, dims in the declared order.
struct TensorRef {
  std::string name;                     ///< the model input it binds; empty binds by position
  ElementType type = ElementType::f32;  ///< must equal the input's declared type
  std::vector<std::int64_t> dims;       ///< the actual dims; static declared dims must match
  /// The values (type's elements, dense row-major); may be null when a dim is 0, and for
  /// Plan::output_infos unless the input decides a shape.
  const void* data = nullptr;
};
/// A caller-owned output buffer; dims must equal the output's dims for these inputs
/// (Plan::output_infos tells them).
struct MutableTensorRef {
  std::string name;                     ///< the model output it binds; empty binds by position
  ElementType type = ElementType::f32;  ///< must equal the output's type
  std::vector<std::int64_t> dims;       ///< must equal the output's dims for the inputs of the run
  void* data = nullptr;                 ///< receives the values (dense row-major); may be null with no elements
};
/// An owning tensor, for the allocating run() and for test data.
struct TensorData {
  std::string name;                     ///< the value name (input or output)
  ElementType type = ElementType::f32;  ///< which of the vectors below holds the values
  std::vector<std::int64_t> dims;       ///< dims, outermost first; empty for a scalar
  std::vector<float> f32;               ///< the values when type is f32
  std::vector<std::int64_t> i64;        ///< the values when type is i64
  std::vector<std::uint8_t> boolean;    ///< the values when type is boolean (0 or 1)
  /// Number of elements.
  /// @return the product of dims (1 for a scalar)
  std::int64_t numel() const noexcept;
  /// The values of the vector that `type` selects.
  /// @return a pointer to its first element
  const void* data() const noexcept;
  /// A non-owning reference for Plan::run; valid while this TensorData lives unchanged.
  /// @return a TensorRef with the same name, type, dims and data
  TensorRef ref() const;
};

/// ONNX test-data tensor files (input_0.pb, output_0.pb: one serialized TensorProto each), as
/// `opfuse run --inputs/--outputs` reads and writes them. FLOAT, INT64 (INT32 widened) and BOOL.
/// @param path the file to read
/// @return the tensor; invalid_argument when the file cannot be read or parsed, or is too large,
///         unsupported for other data types, out_of_memory when an allocation fails
Result<TensorData> read_tensor_file(const std::string& path) noexcept;
/// Writes one tensor in the format read_tensor_file reads.
/// @param path the file to write
/// @param t the tensor; its value vector must hold numel() elements
/// @return ok; invalid_argument for invalid dims, a value count that does not match them or a
///         file that cannot be written, out_of_memory when an allocation fails
Status write_tensor_file(const std::string& path, const TensorData& t) noexcept;

/// Limits applied while loading a model.
struct LoadOptions {
  std::uint64_t max_model_bytes = 4ull << 30;   ///< larger files are refused before parsing
  std::uint64_t max_tensor_bytes = 4ull << 30;  ///< per initializer or declared input
};

/// A loaded ONNX model: the checked, constant-folded graph IR and its declared inputs and
/// outputs. Immutable; copies share it (Plans keep their own copy).
class Model {
 public:
  /// Loads an ONNX model file.
  /// @param path the .onnx file
  /// @param options size limits
  /// @return the model; invalid_argument when the file cannot be opened or read, exceeds
  ///         max_model_bytes or is not a valid model, unsupported for an op or attribute the
  ///         importer does not handle, out_of_memory when an allocation fails
  static Result<Model> load_file(const std::string& path, const LoadOptions& options = {}) noexcept;
  /// Loads a serialized ONNX model from memory.
  /// @param data the serialized ModelProto
  /// @param size its size in bytes
  /// @param options size limits
  /// @return the model; invalid_argument for a malformed, oversized or invalid model,
  ///         unsupported for an op or attribute the importer does not handle, out_of_memory
  ///         when an allocation fails, internal for an unexpected failure
  static Result<Model> load_memory(const void* data, std::size_t size, const LoadOptions& options = {}) noexcept;
  /// A model the project writes itself (deterministic random weights): see builtin_names().
  /// @param name a name from builtin_names()
  /// @return the model; invalid_argument for an unknown name, otherwise the errors of
  ///         load_memory
  static Result<Model> load_builtin(std::string_view name) noexcept;
  /// Names of the built-in models.
  /// @return "resnet50", "mobilenet_v2", "bert_layer"
  static std::vector<std::string> builtin_names();
  /// The serialized ONNX file of a built-in model (what `opfuse export` writes).
  /// @param name a name from builtin_names()
  /// @return the bytes; invalid_argument for an unknown name, out_of_memory when an allocation
  ///         fails, internal when serializing fails
  static Result<std::string> builtin_bytes(std::string_view name) noexcept;

  /// The inputs a run supplies (graph inputs that are not initializers).
  /// @return the declared inputs, in model order
  const std::vector<ValueInfo>& inputs() const noexcept;
  /// The graph outputs.
  /// @return the declared outputs, in model order
  const std::vector<ValueInfo>& outputs() const noexcept;
  /// The file's metadata_props; built-in models set "opfuse.default_dims" ("batch=1,seq=128").
  /// @return key -> value
  const std::map<std::string, std::string>& metadata() const noexcept;
  /// The ONNX opset the model imports for the default domain.
  /// @return the opset version
  std::int64_t opset() const noexcept;
  /// Number of live nodes, after load-time folding.
  /// @return the node count
  int node_count() const noexcept;
  /// The graph as loaded, one line per node (the --dump-graph format).
  /// @return the text
  std::string dump_graph() const;

  struct OPFUSE_LOCAL Impl;

 private:
  std::shared_ptr<const Impl> impl_;
  friend class Plan;
};

/// Graph fusion levels (`opfuse fusions` lists what each enables); each includes the ones before.
/// none: the graph as imported. basic: identities removed, batch norm folded into conv weights,
/// activations into the conv / gemm post-op chain, MatMul + bias into gemm. advanced: residual
/// adds into the conv epilogue, GELU and LayerNorm recognized from their decompositions, add +
/// LayerNorm in one pass, conv + max pool, reshape / transpose pairs collapsed, elementwise
/// chains. full: attention subgraphs into flash attention, MobileNetV2 blocks into one
/// inverted_residual.
enum class FusionLevel : std::uint8_t { none, /**< off */ basic, /**< min */ advanced, /**< more */ full /**< max */ };
/// Name of a fusion level.
/// @param level the level
/// @return "none", "basic", "advanced" or "full"
std::string_view fusion_level_name(FusionLevel level) noexcept;

/// What Plan::compile binds: stage, fusion, threads, ISA, memory budget, cache size.
struct CompileOptions {
  Stage stage = Stage::fused;              ///< the highest stage; lower stages serve what it declines
  FusionLevel fusion = FusionLevel::full;  ///< none runs the graph as imported
  int threads = 0;                         ///< 0: all cores
  Isa max_isa = Isa::avx512;               ///< highest ISA level kernels may use (Context::max_isa)
  /// Weights + arena of one specialization may not exceed this; checked before allocating.
  /// Concurrent runs: each run state counts its own weights + arena + workspace.
  std::uint64_t memory_budget = 16ull << 30;
  int max_cached_shapes = 8;  ///< specializations kept; the least recently used one goes first
  /// Kernels never to select (Context::excluded_kernels).
  std::vector<std::string> excluded_kernels{};
};

/// One fused group of a specialization: nodes of the fused graph that together do the work of a
/// set of nodes of the graph before fusion.
struct FusedGroup {
  std::string pattern;                ///< the fusions that built it, "+"-joined in order
  std::vector<std::string> nodes;     ///< its nodes in the fused graph
  std::vector<std::string> replaced;  ///< the nodes of the unfused graph it replaced
};

/// A fusion undone because the fused node's kernel declined it at the plan's stage (only the
/// naive kernel, or none, accepted it): those nodes run unfused instead.
struct FusionFallback {
  std::string pattern;                ///< the fusion refused for these nodes
  std::string node;                   ///< the fused node that was declined
  std::vector<std::string> replaced;  ///< the unfused nodes that run instead
  std::string reason;                 ///< why the kernel declined the fused node
};

/// --verify-fusion: one fused group run on the inputs its unfused subgraph saw in an unfused run
/// of the same inputs, against that subgraph's outputs.
struct GroupCheck {
  FusedGroup group;  ///< the group checked
  bool ok = false;   ///< true when every output of the group is within tolerance
  /// @var max_abs_error
  /// Largest |fused - unfused| over the group's outputs.
  /// @var max_normalized_error
  /// Largest |fused - unfused| / (atol + rtol |unfused|) over the group's outputs; <= 1 passes.
  double max_abs_error = 0, max_normalized_error = 0;
  std::string reason;  ///< the first mismatch, or why the group could not be run
};

/// Time of one node in a profile.
struct NodeTime {
  std::string node;              ///< the node name
  std::string op;                ///< "conv2d", "reshape", "layout_convert", ...
  std::string kernel;            ///< the registry kernel, or "host" / "alias" (a view, no work)
  double median_ms = 0;          ///< run on its own, repeatedly, like a kernel benchmark (warm caches)
  double in_plan_median_ms = 0;  ///< timed where it stands in whole runs of the plan
  double cold_median_ms = 0;     ///< on its own, caches flushed (at least as many bytes as the plan uses) first
  double flops = 0;              ///< modeled work (op_cost of its desc)
  double bytes = 0;              ///< modeled bytes read and written
};

/// A compiled model: options bound, specializations per set of input dims cached. Thread-safe:
/// runs from several threads at once proceed in parallel, each in its own arena (see the file
/// documentation for the memory budget and what the queries describe).
class Plan {
 public:
  /// Compiles a model. A model whose inputs are all static (and none decides a shape) is
  /// specialized at once, so its errors show here.
  /// @param model the loaded model (the Plan keeps a copy)
  /// @param options stage, fusion level, threads, ISA, memory budget, cache size
  /// @return the plan; invalid_argument for an empty model, an unknown stage or fusion level,
  ///         threads < 0, an excluded kernel that is not registered or max_cached_shapes < 1;
  ///         out_of_memory when an allocation fails; for static models also the
  ///         specialization errors of run()
  static Result<Plan> compile(const Model& model, const CompileOptions& options = {}) noexcept;

  /// The model compiled.
  /// @return the Plan's copy of it
  const Model& model() const noexcept;
  /// The options compiled with.
  /// @return the options
  const CompileOptions& options() const noexcept;

  /// Runs with caller buffers: inputs in model order (or by name), outputs sized per
  /// output_infos(). Leaves the outputs untouched on error. Denormals are flushed to zero
  /// during the call and the caller's MXCSR control bits restored after (see the file comment).
  /// @param inputs one per model input, all with data
  /// @param outputs one per model output
  /// @return ok; invalid_argument for inputs or outputs that do not match the model (count,
  ///         name, type, dims, null data), unsupported for a node no kernel serves,
  ///         out_of_memory past the memory budget or when an allocation fails, internal for an
  ///         unexpected failure
  Status run(std::span<const TensorRef> inputs, std::span<const MutableTensorRef> outputs) noexcept;
  /// Allocating convenience: returns the outputs.
  /// @param inputs one per model input, all with data
  /// @return the outputs, in model order; the errors of run() with caller buffers
  Result<std::vector<TensorData>> run(std::span<const TensorRef> inputs) noexcept;

  /// Specializes for these input dims (no data needed; i64 inputs that steer shapes need data)
  /// and returns the outputs' static dims.
  /// @param inputs one per model input
  /// @return the outputs' name, type and dims, in model order; invalid_argument for inputs that
  ///         do not match the model or a shape-deciding input without data, plus the
  ///         specialization errors of run()
  Result<std::vector<ValueInfo>> output_infos(std::span<const TensorRef> inputs) noexcept;

  // About the current specialization: the one the most recent run (or output_infos), on any
  // thread, used; before any, the queries return 0 or empty values.
  /// The planned graph of the current specialization: layouts, conversions, kernels.
  /// @return the text, or a "not specialized yet" line
  std::string dump_graph() const;
  /// Nodes executed per run of the current specialization.
  /// @return the count
  int node_count() const noexcept;
  /// Of node_count(), the nodes that do work (not views).
  /// @return the count
  int kernel_launches() const noexcept;
  /// Of node_count(), the NCHW <-> NHWC conversions that copy.
  /// @return the count
  int layout_conversions() const noexcept;
  /// Bytes of the weights of the current specialization.
  /// @return the bytes
  std::uint64_t weight_bytes() const noexcept;
  /// Bytes of the activation arena of the current specialization.
  /// @return the bytes
  std::uint64_t arena_bytes() const noexcept;
  /// Peak memory of the current specialization for one run at a time: weights + arena + kernel
  /// workspaces. n runs at once take up to n times as much (the file documentation).
  /// @return the bytes
  std::uint64_t peak_bytes() const noexcept;
  /// Modeled work of one run, summed over the nodes.
  /// @return the floating-point operations
  double modeled_flops() const noexcept;
  /// Modeled memory traffic of one run, summed over the nodes.
  /// @return the bytes moved
  double modeled_bytes() const noexcept;
  /// Number of specializations in the cache.
  /// @return the count, at most CompileOptions::max_cached_shapes
  int cached_shapes() const noexcept;
  /// The fusions applied to the current specialization and the groups each rewrote.
  /// @return (fusion name, group count) pairs, in table order
  std::vector<std::pair<std::string, int>> fusions_applied() const;
  /// The nodes each fusion removed from the current specialization.
  /// @return (fusion name, nodes removed) pairs, in table order
  std::vector<std::pair<std::string, int>> fusion_nodes_removed() const;
  /// The fused groups of the current specialization.
  /// @return one FusedGroup per group
  std::vector<FusedGroup> fused_groups() const;
  /// The fusions undone in the current specialization because their kernel declined them.
  /// @return one FusionFallback per undone fusion
  std::vector<FusionFallback> fallbacks() const;
  /// Live graph nodes before fusion (layout conversions not counted).
  /// @return the count
  int nodes_before_fusion() const noexcept;
  /// Live graph nodes after fusion (layout conversions not counted).
  /// @return the count
  int nodes_after_fusion() const noexcept;
  /// The graph of the current specialization before fusion, in the dump_graph format.
  /// @return the text, or a "not specialized yet" line
  std::string dump_graph_before_fusion() const;
  /// The fused graph as Graphviz DOT: one box per node, the fused groups as clusters labelled
  /// with their pattern.
  /// @return the DOT text (an empty digraph before any specialization)
  std::string fused_graph_dot() const;
  /// The fused graph as a serialized ONNX model: standard ops as themselves, the registry ops
  /// (fused or not) as nodes of the "opfuse" domain with their parameters as attributes.
  /// @return the bytes; invalid_argument before any specialization, or the export's error
  Result<std::string> optimized_model() const noexcept;
  /// Runs the unfused graph on `inputs`, then each fused group on the values its unfused nodes
  /// read there, and compares the group's outputs with theirs (opfuse check's model tolerance).
  /// @param inputs one per model input, all with data
  /// @return one GroupCheck per fused group; the errors of run(), out_of_memory when an
  ///         allocation fails, internal for an unexpected failure
  Result<std::vector<GroupCheck>> verify_fusion(std::span<const TensorRef> inputs) noexcept;
  /// Times every node, in execution order: `repeat` whole runs timed step by step, then each
  /// node on its own `repeat` times (on the current arena contents: call after a run; with runs
  /// on other threads, in the run state returned last, which it holds meanwhile). Medians.
  /// @param repeat the repetitions (values below 1 count as 1)
  /// @return one NodeTime per node; invalid_argument before the first run, a kernel's error,
  ///         out_of_memory when an allocation fails
  Result<std::vector<NodeTime>> profile(int repeat) noexcept;

  struct OPFUSE_LOCAL Impl;

 private:
  std::shared_ptr<Impl> impl_;
};

}  // namespace OPFUSE_API
