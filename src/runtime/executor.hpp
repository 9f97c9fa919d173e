// src/runtime/executor.hpp - one specialization of a plan: a graph with static dims, its memory
// plan and a pool of run states, each an arena with one prepared step per node (internal; the
// public face is opfuse/model.hpp's Plan).
//
// A Specialization is immutable once built, and shared (shared_ptr) between the plan's cache and
// every run that uses it, so evicting it from the cache never frees it under a running thread.
// What a run writes lives in a RunState: the activation arena, the kernel workspace and the
// steps, whose tensor views point into that arena and whose primitives were prepared for it.
// The primitives are per state too, because a prepared kernel keeps per-thread scratch in its
// state (GEMM panels, depthwise planes, pool rows) and a Primitive rebinds its inputs on every
// execute: one Primitive must never execute on two threads at once (opfuse/primitive.hpp).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
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
  std::vector<const Tensor*> in, out;  // registry: views owned by the RunState
  std::vector<HostTensor> hin, hout;   // host
  std::vector<Tensor> mm;              // matmul: a, b, y views per gemm call (3 per call)
  // convert: (N, C, HW) <-> (N, HW, C)
  const float* src = nullptr;
  float* dst = nullptr;
  std::int64_t n = 0, c = 0, hw = 0;
  bool to_nhwc = false;
  int threads = 1;  // convert: the plan's thread count
  std::uint64_t workspace_bytes = 0;
  float* workspace = nullptr;  // the run state's kernel workspace, shared by its steps
  // Modeled work: op_cost() of the registry desc (every gemm call of a matmul), the bytes read
  // and written by a host op or a layout conversion, nothing for an alias.
  double flops = 0, bytes = 0;
};

// What the queries tell about a step; the same in every run state.
struct StepInfo {
  Step::Kind kind = Step::Kind::alias;
  int node = -1;
  std::string kernel;
};

struct Binding {
  int value = -1;
  ElementType type = ElementType::f32;
  std::int64_t numel = 0;
  std::vector<std::int64_t> dims;
};

// One run's memory and steps. Only one run uses a state at a time.
struct RunState {
  std::unique_ptr<float, AlignedDelete> arena;
  std::unique_ptr<float, AlignedDelete> workspace;  // the largest step's; shared by the steps
  std::vector<void*> data;                          // per value id: where its elements are
  std::vector<Step> steps;
  std::vector<std::unique_ptr<Tensor>> views;  // the registry steps' tensor views (stable addresses)
  // Where a binding's elements are in this state.
  void* at(const Binding& b) const { return data[static_cast<std::size_t>(b.value)]; }
};

class Specialization {
 public:
  // Builds from a graph whose dims are all static (infer_and_fold strict already ran), with its
  // first run state.
  static Result<std::shared_ptr<Specialization>> build(graph::Graph g, const CompileOptions& options);

  // A run state checked out of the pool; returned to it when the Lease goes.
  class Lease {
   public:
    Lease() = default;
    Lease(Lease&& o) noexcept : owner_(o.owner_), state_(std::move(o.state_)) { o.owner_ = nullptr; }
    Lease& operator=(Lease&&) = delete;
    ~Lease() {
      if (owner_ && state_) owner_->release(std::move(state_));
    }
    RunState& state() const { return *state_; }

   private:
    friend class Specialization;
    Lease(const Specialization* owner, std::unique_ptr<RunState> s) : owner_(owner), state_(std::move(s)) {}
    const Specialization* owner_ = nullptr;
    std::unique_ptr<RunState> state_;
  };
  // The state the last run returned when one is free (its arena holds that run's values);
  // otherwise a new one while the memory budget allows (see model.hpp), otherwise the first
  // one a running thread returns. Errors only when no state exists to wait for.
  Result<Lease> acquire() const;

  Status run(const RunState& st) const;  // on the state's bound input slots, leaving the outputs in place
  Result<std::vector<NodeTime>> profile(const RunState& st, int repeat) const;

  graph::Graph graph;
  std::vector<int> order;
  std::vector<StepInfo> steps;           // one per node in execution order
  std::vector<Binding> inputs, outputs;  // graph order
  std::vector<std::int64_t> key;         // input dims (and steering i64 values) it was built for
  std::uint64_t weight_bytes = 0, arena_bytes = 0, workspace_bytes = 0;  // workspace: the largest step's
  double flops = 0, bytes_moved = 0;                                     // sums over the steps
  std::uint64_t last_use = 0;                                            // LRU tick (under the plan's lock)
  std::vector<std::pair<std::string, int>> fusions;                      // applied before planning: name, groups
  std::vector<std::pair<std::string, int>> fusion_removed;               // name, nodes it removed
  // The graph before fusion and after it (both before layout planning), for the groups, the
  // --dump-graph before fusion and --verify-fusion; constants are shared, not copied.
  graph::Graph unfused_graph, fused_graph;
  std::vector<FusionFallback> fallbacks;

 private:
  CompileOptions options_;
  std::vector<std::vector<std::int64_t>> dims_;  // per value id
  // Per value id: the value whose storage it uses (alias groups and in-place outputs share a
  // root), and for a root in the arena its offset there (UINT64_MAX: no storage).
  std::vector<int> root_;
  std::vector<std::uint64_t> offset_;
  // The pool. free_ is a stack: the most recently returned state is reused first, so a plan
  // run from one thread always runs in the same state. states_ counts every state in or out
  // of the pool; free_ keeps capacity for all of them, so returning one never allocates.
  mutable std::mutex mu_;
  mutable std::condition_variable returned_;
  mutable std::vector<std::unique_ptr<RunState>> free_;
  mutable int states_ = 0;
  mutable bool no_more_states_ = false;  // a new state failed once: later runs wait instead

  Status plan_memory();
  Result<std::unique_ptr<RunState>> make_state() const;
  Status build_steps(RunState& rs) const;
  void release(std::unique_ptr<RunState> s) const noexcept;
};

}  // namespace opfuse::runtime
