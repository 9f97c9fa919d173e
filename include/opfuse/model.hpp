// opfuse/model.hpp - whole models: load an ONNX file, compile it into a plan, run the plan.
//
//   auto model = opfuse::Model::load_file("resnet50.onnx");     // or load_builtin("resnet50")
//   if (!model) return report(model.status());
//   opfuse::CompileOptions opt;
//   opt.stage = opfuse::Stage::simd;
//   auto plan = opfuse::Plan::compile(*model, opt);            // kernels chosen, weights packed
//   std::vector<float> x(1 * 3 * 224 * 224), y(1000);
//   opfuse::TensorRef in{"input", opfuse::ElementType::f32, {1, 3, 224, 224}, x.data()};
//   opfuse::MutableTensorRef out{"output", opfuse::ElementType::f32, {1, 1000}, y.data()};
//   opfuse::Status s = plan->run({&in, 1}, {&out, 1});          // allocates nothing
//
// Loading imports the file into the graph IR, checks it and folds what is constant (weights,
// shape subgraphs). Compiling binds the stage, threads and memory budget. The first run with a
// given set of input dims specializes the plan for them: shapes are inferred, the remaining
// shape arithmetic folded, layouts planned (convolutions keep their activations NHWC at the simd
// and fused stages, with explicit conversion nodes where something else needs NCHW), one arena
// sized by liveness, and every kernel prepared through the registry with the weights bound as
// constants. Specializations are cached by input dims (a bounded cache), so a model with a
// symbolic sequence length runs at 64, 128 and 384 tokens without reloading; later runs with
// cached dims allocate nothing.
//
// Errors come back as a Status naming the node, the input or the dim (never an exception):
// invalid_argument for a bad file, graph or input, unsupported for an op or attribute the
// importer or the kernels do not handle, out_of_memory past the memory budget.
// A Plan runs one inference at a time: run() and the queries below must not be called
// concurrently on one Plan (compile a Plan per thread; they share the Model).
#pragma once

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

namespace opfuse {

// Element types of model inputs and outputs: f32 activations; i64 and boolean for shapes,
// indices and masks. A boolean element is one byte (0 or 1) in caller buffers.
enum class ElementType : std::uint8_t { f32, i64, boolean };
std::string_view element_type_name(ElementType t) noexcept;
std::size_t element_size(ElementType t) noexcept;

// One dimension of a declared input or output: static (value >= 0) or symbolic (value -1 and a
// name such as "seq"; an empty name is a dim the file left unknown).
struct DimInfo {
  std::int64_t value = -1;
  std::string symbol;
};

struct ValueInfo {
  std::string name;
  ElementType type = ElementType::f32;
  std::vector<DimInfo> dims;
};
// "1x3x224x224", "batchx128x768", "?x10".
std::string dims_string(const std::vector<DimInfo>& dims);

// A caller-owned input: dense row-major, dims in the declared order.
struct TensorRef {
  std::string name;  // the model input it binds; empty binds by position
  ElementType type = ElementType::f32;
  std::vector<std::int64_t> dims;
  const void* data = nullptr;
};
// A caller-owned output buffer; dims must equal the output's dims for these inputs
// (Plan::output_infos tells them).
struct MutableTensorRef {
  std::string name;  // empty binds by position
  ElementType type = ElementType::f32;
  std::vector<std::int64_t> dims;
  void* data = nullptr;
};
// An owning tensor, for the allocating run() and for test data.
struct TensorData {
  std::string name;
  ElementType type = ElementType::f32;
  std::vector<std::int64_t> dims;
  std::vector<float> f32;             // f32
  std::vector<std::int64_t> i64;      // i64
  std::vector<std::uint8_t> boolean;  // boolean
  std::int64_t numel() const noexcept;
  const void* data() const noexcept;
  TensorRef ref() const;
};

// ONNX test-data tensor files (input_0.pb, output_0.pb: one serialized TensorProto each), as
// `opfuse run --inputs/--outputs` reads and writes them. FLOAT, INT64 (INT32 widened) and BOOL.
Result<TensorData> read_tensor_file(const std::string& path) noexcept;
Status write_tensor_file(const std::string& path, const TensorData& t) noexcept;

struct LoadOptions {
  std::uint64_t max_model_bytes = 4ull << 30;   // larger files are refused before parsing
  std::uint64_t max_tensor_bytes = 4ull << 30;  // per initializer or declared input
};

class Model {
 public:
  static Result<Model> load_file(const std::string& path, const LoadOptions& options = {}) noexcept;
  static Result<Model> load_memory(const void* data, std::size_t size, const LoadOptions& options = {}) noexcept;
  // A model the project writes itself (deterministic random weights): see builtin_names().
  static Result<Model> load_builtin(std::string_view name) noexcept;
  // "resnet50", "mobilenet_v2", "bert_layer".
  static std::vector<std::string> builtin_names();
  // The serialized ONNX file of a built-in model (what `opfuse export` writes).
  static Result<std::string> builtin_bytes(std::string_view name) noexcept;

  const std::vector<ValueInfo>& inputs() const noexcept;
  const std::vector<ValueInfo>& outputs() const noexcept;
  // The file's metadata_props; built-in models set "opfuse.default_dims" ("batch=1,seq=128").
  const std::map<std::string, std::string>& metadata() const noexcept;
  std::int64_t opset() const noexcept;
  int node_count() const noexcept;  // after load-time folding
  // The graph as loaded, one line per node (the --dump-graph format).
  std::string dump_graph() const;

  struct Impl;

 private:
  std::shared_ptr<const Impl> impl_;
  friend class Plan;
};

// Graph fusion levels (`opfuse fusions` lists what each enables); each includes the ones before.
// basic: identities removed, batch norm folded into conv weights, activations into the conv /
// gemm post-op chain, MatMul + bias into gemm. advanced: residual adds into the conv epilogue,
// GELU and LayerNorm recognized from their decompositions, add + LayerNorm in one pass, conv +
// max pool, reshape / transpose pairs collapsed, elementwise chains. full: attention subgraphs
// into flash attention, MobileNetV2 blocks into one inverted_residual.
enum class FusionLevel : std::uint8_t { none, basic, advanced, full };
std::string_view fusion_level_name(FusionLevel level) noexcept;

struct CompileOptions {
  Stage stage = Stage::fused;              // the highest stage; lower stages serve what it declines
  FusionLevel fusion = FusionLevel::full;  // none runs the graph as imported
  int threads = 0;                         // 0: all cores
  Isa max_isa = Isa::avx512;
  // Weights + arena of one specialization may not exceed this; checked before allocating.
  std::uint64_t memory_budget = 16ull << 30;
  int max_cached_shapes = 8;  // specializations kept; the least recently used one goes first
  // Kernels never to select (Context::excluded_kernels).
  std::vector<std::string> excluded_kernels{};
};

// One fused group of a specialization: nodes of the fused graph that together do the work of a
// set of nodes of the graph before fusion.
struct FusedGroup {
  std::string pattern;                // the fusions that built it, "+"-joined in order
  std::vector<std::string> nodes;     // its nodes in the fused graph
  std::vector<std::string> replaced;  // the nodes of the unfused graph it replaced
};

// A fusion undone because the fused node's kernel declined it at the plan's stage (only the
// naive kernel, or none, accepted it): those nodes run unfused instead.
struct FusionFallback {
  std::string pattern;                // the fusion refused for these nodes
  std::string node;                   // the fused node that was declined
  std::vector<std::string> replaced;  // the unfused nodes that run instead
  std::string reason;
};

// --verify-fusion: one fused group run on the inputs its unfused subgraph saw in an unfused run
// of the same inputs, against that subgraph's outputs.
struct GroupCheck {
  FusedGroup group;
  bool ok = false;
  double max_abs_error = 0, max_normalized_error = 0;
  std::string reason;  // the first mismatch, or why the group could not be run
};

// Time of one node in a profile.
struct NodeTime {
  std::string node;
  std::string op;                // "conv2d", "reshape", "layout_convert", ...
  std::string kernel;            // the registry kernel, or "host" / "alias" (a view, no work)
  double median_ms = 0;          // run on its own, repeatedly, like a kernel benchmark (warm caches)
  double in_plan_median_ms = 0;  // timed where it stands in whole runs of the plan
  double cold_median_ms = 0;     // on its own, caches flushed (as many bytes as the plan uses) first
  double flops = 0;              // modeled work (op_cost of its desc)
  double bytes = 0;              // modeled bytes read and written
};

class Plan {
 public:
  static Result<Plan> compile(const Model& model, const CompileOptions& options = {}) noexcept;

  const Model& model() const noexcept;
  const CompileOptions& options() const noexcept;

  // Runs with caller buffers: inputs in model order (or by name), outputs sized per
  // output_infos(). Leaves the outputs untouched on error.
  Status run(std::span<const TensorRef> inputs, std::span<const MutableTensorRef> outputs) noexcept;
  // Allocating convenience: returns the outputs.
  Result<std::vector<TensorData>> run(std::span<const TensorRef> inputs) noexcept;

  // Specializes for these input dims (no data needed; i64 inputs that steer shapes need data)
  // and returns the outputs' static dims.
  Result<std::vector<ValueInfo>> output_infos(std::span<const TensorRef> inputs) noexcept;

  // About the specialization the last run (or output_infos) used:
  std::string dump_graph() const;           // planned graph: layouts, conversions, kernels
  int node_count() const noexcept;          // nodes executed per run
  int kernel_launches() const noexcept;     // of those, the ones that do work (not views)
  int layout_conversions() const noexcept;  // of those, NCHW <-> NHWC conversions that copy
  std::uint64_t weight_bytes() const noexcept;
  std::uint64_t arena_bytes() const noexcept;
  std::uint64_t peak_bytes() const noexcept;  // weights + arena + kernel workspaces
  double modeled_flops() const noexcept;      // one run, summed over the nodes
  double modeled_bytes() const noexcept;      // bytes moved by one run, summed over the nodes
  int cached_shapes() const noexcept;
  // The fusions applied to that specialization and the groups each rewrote (table order).
  std::vector<std::pair<std::string, int>> fusions_applied() const;
  std::vector<std::pair<std::string, int>> fusion_nodes_removed() const;  // per fusion, table order
  std::vector<FusedGroup> fused_groups() const;
  std::vector<FusionFallback> fallbacks() const;
  int nodes_before_fusion() const noexcept;  // live graph nodes, before and after fusion
  int nodes_after_fusion() const noexcept;   // (layout conversions not counted)
  std::string dump_graph_before_fusion() const;
  // The fused graph as Graphviz DOT: one box per node, the fused groups as clusters labelled
  // with their pattern.
  std::string fused_graph_dot() const;
  // The fused graph as a serialized ONNX model: standard ops as themselves, the registry ops
  // (fused or not) as nodes of the "opfuse" domain with their parameters as attributes.
  Result<std::string> optimized_model() const noexcept;
  // Runs the unfused graph on `inputs`, then each fused group on the values its unfused nodes
  // read there, and compares the group's outputs with theirs (opfuse check's model tolerance).
  Result<std::vector<GroupCheck>> verify_fusion(std::span<const TensorRef> inputs) noexcept;
  // Times every node, in execution order: `repeat` whole runs timed step by step, then each
  // node on its own `repeat` times (on the current arena contents: call after a run). Medians.
  Result<std::vector<NodeTime>> profile(int repeat) noexcept;

  struct Impl;

 private:
  std::shared_ptr<Impl> impl_;
};

}  // namespace opfuse
