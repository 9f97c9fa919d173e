// src/runtime/executor.hpp - one specialization of a plan: a graph with static dims, its arena
// and one prepared step per node (internal; the public face is opfuse/model.hpp's Plan).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "host_ops.hpp"
#include "opfuse/model.hpp"
#include "opfuse/primitive.hpp"
#include "src/graph/ir.hpp"

namespace opfuse::runtime {

struct AlignedDelete {
  void operator()(float* p) const noexcept { free_buffer(p); }
};

struct Step {
  enum class Kind : std::uint8_t { registry, host, matmul, convert, alias };
  Kind kind = Kind::alias;
  int node = -1;
  std::string kernel;                  // registry kernel name, "host", "alias", "convert"
  Primitive prim;                      // registry, matmul
  std::vector<const Tensor*> in, out;  // registry: views owned by the Specialization
  std::vector<HostTensor> hin, hout;   // host
  std::vector<Tensor> mm;              // matmul: a, b, y views per gemm call (3 per call)
  // convert: (N, C, HW) <-> (N, HW, C)
  const float* src = nullptr;
  float* dst = nullptr;
  std::int64_t n = 0, c = 0, hw = 0;
  bool to_nhwc = false;
  std::uint64_t workspace_bytes = 0;
  float* workspace = nullptr;  // the plan's shared kernel workspace
  // Modeled work: op_cost() of the registry desc (every gemm call of a matmul), the bytes read
  // and written by a host op or a layout conversion, nothing for an alias.
  double flops = 0, bytes = 0;
};

struct Binding {
  int value = -1;
  ElementType type = ElementType::f32;
  void* data = nullptr;  // arena slot (inputs) or the value's storage (outputs)
  std::int64_t numel = 0;
  std::vector<std::int64_t> dims;
};

class Specialization {
 public:
  // Builds from a graph whose dims are all static (infer_and_fold strict already ran).
  static Result<std::unique_ptr<Specialization>> build(graph::Graph g, const CompileOptions& options);

  Status run();  // on the bound input slots, leaving the outputs in place
  Result<std::vector<NodeTime>> profile(int repeat);

  graph::Graph graph;
  std::vector<int> order;
  std::vector<Step> steps;
  std::vector<Binding> inputs, outputs;  // graph order
  std::vector<std::int64_t> key;         // input dims (and steering i64 values) it was built for
  std::uint64_t weight_bytes = 0, arena_bytes = 0, workspace_bytes = 0;  // workspace: the largest step's
  double flops = 0, bytes_moved = 0;                                     // sums over the steps
  std::uint64_t last_use = 0;                                            // LRU tick
  std::vector<std::pair<std::string, int>> fusions;                      // applied before planning: name, groups
  std::vector<std::pair<std::string, int>> fusion_removed;               // name, nodes it removed
  // The graph before fusion and after it (both before layout planning), for the groups, the
  // --dump-graph before fusion and --verify-fusion; constants are shared, not copied.
  graph::Graph unfused_graph, fused_graph;
  std::vector<FusionFallback> fallbacks;

 private:
  std::unique_ptr<float, AlignedDelete> arena_;
  std::unique_ptr<float, AlignedDelete> workspace_;  // the largest step's; shared by all
  std::vector<void*> data_;                          // per value id: where its elements are
  std::vector<std::vector<std::int64_t>> dims_;
  std::vector<std::unique_ptr<Tensor>> extra_;  // the registry steps' tensor views (stable addresses)
  Status build_steps(const CompileOptions& options);
  Status plan_memory(const CompileOptions& options);
};

}  // namespace opfuse::runtime
