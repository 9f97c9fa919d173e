// src/runtime/executor.cpp - memory planning and execution of one specialization.
//
// Memory. Every activation gets a slot in one arena, allocated once. A slot is shared by:
//   * aliases - reshape, flatten, squeeze, unsqueeze, identity, a same-type cast and a
//     layout_convert that moves nothing are views of their input's slot (no copy, no step);
//   * in-place outputs - a registry op whose output may overwrite an input (allows_inplace:
//     activations, batch norm, a residual add) writes over that input when this op is its last
//     reader;
//   * anything whose lifetime does not overlap - slots are placed largest first at the lowest
//     offset free of every slot live at the same time (greedy by size, as TFLite's arena
//     planner does), lifetimes being [first write, last read] in execution order.
// Weights stay in the graph's constant payloads and are bound to each kernel at prepare, so a
// kernel packs them once per run state. The steps of a run go one at a time, so they share one
// kernel workspace (the largest one any step needs); peak memory is weights + arena + that
// workspace.
//
// Run states. The slot offsets are planned once; a RunState is one arena laid out by them, a
// workspace and the steps built over that arena (views, host buffers, primitives prepared for
// it). build() makes the first; concurrent runs check one out each (acquire), so two threads
// never share an arena, a workspace or a Primitive. A run that finds a free state takes the one
// returned last (the one a single-threaded caller always gets, its caches warm); one that finds
// none builds another while n states of weights + arena + workspace each fit the memory budget,
// and otherwise waits for a state to come back, so a tight budget serializes runs instead of
// failing them. States are never freed before the specialization: a pool grows to the largest
// concurrency seen, and once warm a run allocates nothing.
//
// Execution is a flat list of steps prepared at build time: registry kernels through
// Primitive::execute with views made once, host ops over fixed buffers, matmul as one gemm (a
// 2-D right operand: the batch folds into M, so a weight is packed once) or one gemm per batch.
// A run allocates nothing.
#include "executor.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <limits>
#include <numeric>

#include "runtime.hpp"
#include "src/threads.hpp"

#ifdef _OPENMP
#include <omp.h>
#endif

namespace opfuse::runtime {

using graph::DType;
using graph::Graph;
using graph::Node;
using graph::NodeOp;
using graph::Value;

namespace {

// Product of dims [from, to) (all of them by default).
std::int64_t product(const std::vector<std::int64_t>& d, std::size_t from = 0, std::size_t to = SIZE_MAX) {
  const auto end = d.begin() + static_cast<std::ptrdiff_t>(std::min(to, d.size()));
  const auto begin = d.begin() + static_cast<std::ptrdiff_t>(std::min(from, d.size()));
  return std::accumulate(begin, end, std::int64_t{1}, std::multiplies<>());
}

std::size_t elem_bytes(DType t) { return t == DType::f32 ? 4 : 8; }

bool is_alias(const Graph& g, const Node& n, const std::vector<std::vector<std::int64_t>>& dims) {
  switch (n.op) {
    case NodeOp::reshape:
    case NodeOp::flatten:
    case NodeOp::squeeze:
    case NodeOp::unsqueeze:
    case NodeOp::identity:
      return g.value(n.inputs[0]).layout == Layout::nchw || dims[static_cast<std::size_t>(n.inputs[0])].size() < 3;
    case NodeOp::cast:
      return g.value(n.inputs[0]).dtype == g.value(n.outputs[0]).dtype ||
             (g.value(n.inputs[0]).dtype != DType::f32 && g.value(n.outputs[0]).dtype != DType::f32 &&
              g.value(n.outputs[0]).dtype == DType::i64);  // boolean -> i64: both stored as i64 0/1
    case NodeOp::layout_convert: return layout_convert_is_view(dims[static_cast<std::size_t>(n.inputs[0])]);
    default: return false;
  }
}

struct UnionFind {
  std::vector<int> parent;
  explicit UnionFind(std::size_t n) : parent(n) { std::iota(parent.begin(), parent.end(), 0); }
  int find(int x) {
    while (parent[static_cast<std::size_t>(x)] != x) {
      parent[static_cast<std::size_t>(x)] = parent[static_cast<std::size_t>(parent[static_cast<std::size_t>(x)])];
      x = parent[static_cast<std::size_t>(x)];
    }
    return x;
  }
};

// NCHW (N, C, HW) <-> NHWC (N, HW, C), in 8 x 8 tiles so that both sides stream; the tiles
// split over `threads` (the graph input's conversion before a stem is the first step of a CNN:
// on one core, the rest of the team waited for it; `opfuse run --profile` shows its time).
void convert_layout(const float* src, float* dst, std::int64_t N, std::int64_t C, std::int64_t HW, bool to_nhwc,
                    int threads) {
  const std::int64_t rows = to_nhwc ? C : HW, cols = to_nhwc ? HW : C;  // src is (rows, cols)
  constexpr std::int64_t T = 8;
  // Every image's HW axis (src's columns to NHWC, its rows back) from h0 to h1, a multiple of T.
  const auto run = [=](std::int64_t h0, std::int64_t h1) {
    const std::int64_t ra = to_nhwc ? 0 : h0, rb = to_nhwc ? rows : h1;
    const std::int64_t ca = to_nhwc ? h0 : 0, cb = to_nhwc ? h1 : cols;
    for (std::int64_t n = 0; n < N; ++n) {
      const float* s = src + n * C * HW;
      float* d = dst + n * C * HW;
      for (std::int64_t r0 = ra; r0 < rb; r0 += T)
        for (std::int64_t c0 = ca; c0 < cb; c0 += T)
          for (std::int64_t r = r0; r < std::min(rb, r0 + T); ++r)
            for (std::int64_t c = c0; c < std::min(cb, c0 + T); ++c) d[c * rows + r] = s[r * cols + c];
    }
  };
#ifdef _OPENMP
  // Below ~64 KB a second thread costs more than it saves.
  if (threads > 1 && N * C * HW >= 16384 && !omp_in_parallel()) {
#pragma omp parallel num_threads(threads)
    {
      const std::int64_t t = omp_get_num_threads(), id = omp_get_thread_num(), blocks = (HW + T - 1) / T;
      run(std::min(HW, blocks * id / t * T), std::min(HW, blocks * (id + 1) / t * T));
    }
    return;
  }
#else
  (void)threads;
#endif
  run(0, HW);
}

}  // namespace

Result<std::shared_ptr<Specialization>> Specialization::build(Graph g, const CompileOptions& options) {
  try {
    auto sp = std::make_shared<Specialization>();
    sp->options_ = options;
    sp->graph = std::move(g);
    auto order = topological_order(sp->graph);
    if (!order) return order.status();
    sp->order = std::move(*order);
    if (Status s = sp->plan_memory(); !s) return s;
    auto first = sp->make_state();
    if (!first) return first.status();
    RunState& rs = **first;
    sp->workspace_bytes = 0;
    sp->flops = sp->bytes_moved = 0;
    for (const Step& st : rs.steps) {
      sp->steps.push_back(StepInfo{st.kind, st.node, st.kernel});
      sp->workspace_bytes = std::max(sp->workspace_bytes, st.workspace_bytes);
      sp->flops += st.flops;
      sp->bytes_moved += st.bytes;
    }
    sp->free_.reserve(1);
    sp->free_.push_back(std::move(*first));
    sp->states_ = 1;
    return sp;
  } catch (const std::bad_alloc&) {
    return Status(StatusCode::out_of_memory, "out of memory while compiling the plan");
  } catch (const std::exception& e) {
    return Status(StatusCode::internal, fmt::format("compiling the plan failed: {}", e.what()));
  }
}

Status Specialization::plan_memory() {
  const CompileOptions& options = options_;
  Graph& g = graph;
  const std::size_t nv = g.values().size();
  dims_.assign(nv, {});
  for (const Value& v : g.values()) {
    if (!v.has_shape) continue;
    auto d = static_dims(v);
    if (d) dims_[static_cast<std::size_t>(v.id)] = *d;
  }
  auto bytes_of = [&](int v) -> std::uint64_t {
    std::uint64_t n = 1;
    for (std::int64_t x : dims_[static_cast<std::size_t>(v)]) {
      if (x < 0 || __builtin_mul_overflow(n, static_cast<std::uint64_t>(x), &n)) return UINT64_MAX;
    }
    std::uint64_t b = 0;
    if (__builtin_mul_overflow(n, elem_bytes(g.value(v).dtype), &b)) return UINT64_MAX;
    return b;
  };
  // Which values each step touches, and the alias groups.
  UnionFind uf(nv);
  for (int id : order) {
    const Node& n = g.node(id);
    if (is_alias(g, n, dims_)) uf.parent[static_cast<std::size_t>(n.outputs[0])] = uf.find(n.inputs[0]);
  }
  constexpr int kForever = std::numeric_limits<int>::max();
  std::vector<int> start(nv, kForever), end(nv, -2);
  auto touch = [&](int v, int s) {
    const int r = uf.find(v);
    start[static_cast<std::size_t>(r)] = std::min(start[static_cast<std::size_t>(r)], s);
    end[static_cast<std::size_t>(r)] = std::max(end[static_cast<std::size_t>(r)], s);
  };
  for (int in : g.inputs()) touch(in, -1);
  for (std::size_t s = 0; s < order.size(); ++s) {
    const Node& n = g.node(order[s]);
    for (int v : n.inputs)
      if (v >= 0) touch(v, static_cast<int>(s));
    for (int v : n.outputs) touch(v, static_cast<int>(s));
  }
  for (int out : g.outputs()) touch(out, kForever - 1);
  // In place: the output takes over an input's slot when this node is the input's last reader.
  for (std::size_t s = 0; s < order.size(); ++s) {
    const Node& n = g.node(order[s]);
    if (!runs_on_registry(g, n) || n.outputs.size() != 1 || is_packed_attention(n)) continue;
    auto desc = registry_desc(g, n);
    if (!desc) continue;
    const int out = n.outputs[0];
    const int oroot = uf.find(out);
    if (oroot != out) continue;
    for (std::size_t k = 0; k < n.inputs.size(); ++k) {
      const int r = uf.find(n.inputs[k]);
      if (g.value(r).is_constant() || end[static_cast<std::size_t>(r)] != static_cast<int>(s)) continue;
      if (!allows_inplace(*desc, static_cast<int>(k), 0)) continue;
      if (bytes_of(r) != bytes_of(out) || g.value(n.inputs[k]).layout != g.value(out).layout) continue;
      if (dims_[static_cast<std::size_t>(n.inputs[k])] != dims_[static_cast<std::size_t>(out)]) continue;
      bool shared = false;
      for (std::size_t j = 0; j < n.inputs.size(); ++j)
        shared = shared || (j != k && n.inputs[j] >= 0 && uf.find(n.inputs[j]) == r);
      if (shared) continue;
      uf.parent[static_cast<std::size_t>(oroot)] = r;
      end[static_cast<std::size_t>(r)] =
          std::max(end[static_cast<std::size_t>(r)], end[static_cast<std::size_t>(oroot)]);
      break;
    }
  }
  // Slots: one per root that is not a constant.
  struct Slot {
    int root;
    std::uint64_t bytes, offset;
  };
  std::vector<Slot> slots;
  for (std::size_t v = 0; v < nv; ++v) {
    const int r = uf.find(static_cast<int>(v));
    if (r != static_cast<int>(v) || end[v] == -2) continue;  // not a root, or unused
    if (g.value(r).is_constant()) continue;
    const std::uint64_t b = bytes_of(r);
    if (b == UINT64_MAX)
      return {StatusCode::invalid_argument, fmt::format("value '{}' of dims {} has a byte size that overflows",
                                                        g.value(r).name, fmt::join(dims_[v], "x"))};
    slots.push_back({r, (b + kAlignment - 1) / kAlignment * kAlignment, 0});
  }
  std::sort(slots.begin(), slots.end(), [&](const Slot& a, const Slot& b) {
    return a.bytes != b.bytes ? a.bytes > b.bytes
                              : start[static_cast<std::size_t>(a.root)] < start[static_cast<std::size_t>(b.root)];
  });
  std::uint64_t total = 0;
  std::vector<const Slot*> placed;
  for (Slot& sl : slots) {
    const int s0 = start[static_cast<std::size_t>(sl.root)], e0 = end[static_cast<std::size_t>(sl.root)];
    std::vector<std::pair<std::uint64_t, std::uint64_t>> busy;
    for (const Slot* p : placed) {
      const int s1 = start[static_cast<std::size_t>(p->root)], e1 = end[static_cast<std::size_t>(p->root)];
      if (s0 <= e1 && s1 <= e0) busy.emplace_back(p->offset, p->offset + p->bytes);
    }
    std::sort(busy.begin(), busy.end());
    std::uint64_t off = 0;
    for (const auto& [b, e] : busy) {
      if (off + sl.bytes <= b) break;
      off = std::max(off, e);
    }
    sl.offset = off;
    total = std::max(total, off + sl.bytes);
    placed.push_back(&sl);
  }
  // Weights: the constant payloads live nodes read.
  std::vector<bool> counted(nv, false);
  weight_bytes = 0;
  for (int id : order)
    for (int v : g.node(id).inputs)
      if (v >= 0 && g.value(v).is_constant() && !counted[static_cast<std::size_t>(v)]) {
        counted[static_cast<std::size_t>(v)] = true;
        weight_bytes += g.value(v).payload_bytes();
      }
  arena_bytes = total;
  if (weight_bytes + arena_bytes > options.memory_budget)
    return {StatusCode::out_of_memory,
            fmt::format("the plan needs {} bytes of weights and {} bytes of activations, over the memory budget "
                        "of {} bytes",
                        weight_bytes, arena_bytes, options.memory_budget)};
  root_.assign(nv, -1);
  offset_.assign(nv, UINT64_MAX);
  for (std::size_t v = 0; v < nv; ++v) root_[v] = uf.find(static_cast<int>(v));
  for (const Slot& sl : slots) offset_[static_cast<std::size_t>(sl.root)] = sl.offset;
  auto binding = [&](int v) {
    Binding b;
    b.value = v;
    const Value& val = g.value(v);
    b.type = val.dtype == DType::f32   ? ElementType::f32
             : val.dtype == DType::i64 ? ElementType::i64
                                       : ElementType::boolean;
    b.dims = dims_[static_cast<std::size_t>(v)];
    b.numel = product(b.dims);
    return b;
  };
  inputs.clear();
  outputs.clear();
  for (int v : g.inputs()) inputs.push_back(binding(v));
  for (int v : g.outputs()) outputs.push_back(binding(v));
  return Status::ok();
}

Result<std::unique_ptr<RunState>> Specialization::make_state() const {
  auto rs = std::make_unique<RunState>();
  if (arena_bytes > 0) {
    float* p = alloc_buffer(static_cast<std::size_t>(arena_bytes));
    if (!p)
      return Status(StatusCode::out_of_memory, fmt::format("cannot allocate a {}-byte activation arena", arena_bytes));
    std::memset(p, 0, static_cast<std::size_t>(arena_bytes));
    rs->arena.reset(p);
  }
  const std::size_t nv = graph.values().size();
  rs->data.assign(nv, nullptr);
  for (std::size_t v = 0; v < nv; ++v) {
    const Value& rv = graph.value(root_[v]);
    const std::uint64_t off = offset_[static_cast<std::size_t>(root_[v])];
    if (rv.is_constant()) {
      rs->data[v] = rv.dtype == DType::f32 ? static_cast<void*>(const_cast<float*>(rv.f32_data->data()))
                                           : static_cast<void*>(const_cast<std::int64_t*>(rv.i64_data->data()));
    } else if (off != UINT64_MAX && rs->arena) {
      rs->data[v] = reinterpret_cast<char*>(rs->arena.get()) + off;
    }
  }
  if (Status s = build_steps(*rs); !s) return s;
  std::uint64_t ws = 0;
  for (const Step& st : rs->steps) ws = std::max(ws, st.workspace_bytes);
  if (weight_bytes + arena_bytes + ws > options_.memory_budget)
    return Status(StatusCode::out_of_memory,
                  fmt::format("the plan needs {} bytes of weights, {} of activations and {} of kernel workspace, over "
                              "the memory budget of {} bytes",
                              weight_bytes, arena_bytes, ws, options_.memory_budget));
  if (ws > 0) {
    rs->workspace.reset(alloc_buffer(static_cast<std::size_t>(ws)));
    if (!rs->workspace)
      return Status(StatusCode::out_of_memory, fmt::format("cannot allocate a {}-byte workspace", ws));
  }
  for (Step& st : rs->steps) st.workspace = rs->workspace.get();
  return rs;
}

Status Specialization::build_steps(RunState& rs) const {
  const Graph& g = graph;
  const CompileOptions& options = options_;
  const std::vector<void*>& data = rs.data;
  Context ctx;
  ctx.stage = options.stage;
  ctx.threads = options.threads;
  ctx.max_isa = options.max_isa;
  ctx.own_workspace = false;  // the steps run one at a time: they share one workspace
  ctx.excluded_kernels = options.excluded_kernels;
  ctx.memory_budget = options.memory_budget;  // packed weights count against the plan's budget
  auto view = [&](int v, const TensorDesc& d, bool writable, std::int64_t offset = 0) -> Result<const Tensor*> {
    void* p = data[static_cast<std::size_t>(v)];
    if (!p) return Status(StatusCode::internal, fmt::format("value '{}' has no storage", g.value(v).name));
    auto t = writable ? Tensor::view(static_cast<float*>(p) + offset, d.shape, d.layout)
                      : Tensor::view(static_cast<const float*>(p) + offset, d.shape, d.layout);
    if (!t) return t.status();
    rs.views.push_back(std::make_unique<Tensor>(*t));
    return rs.views.back().get();
  };
  auto host = [&](int v) {
    HostTensor h;
    if (v < 0) return h;
    h.dtype = g.value(v).dtype;
    h.dims = dims_[static_cast<std::size_t>(v)];
    h.data = data[static_cast<std::size_t>(v)];
    return h;
  };
  std::vector<Step>& steps = rs.steps;
  steps.clear();
  for (int id : order) {
    const Node& n = g.node(id);
    Step st;
    st.node = id;
    if (is_alias(g, n, dims_)) {
      st.kind = Step::Kind::alias;
      st.kernel = "alias";
    } else if (runs_on_registry(g, n)) {
      st.kind = Step::Kind::registry;
      auto desc = registry_desc(g, n);
      if (!desc) return desc.status();
      std::vector<const Tensor*> constants(desc->inputs.size(), nullptr);
      bool any_const = false;
      for (std::size_t k = 0; k < desc->inputs.size(); ++k) {
        const auto [value, offset] = desc_operand(n, *desc, k);
        const bool c = g.value(value).is_constant();
        auto t = view(value, desc->inputs[k], !c, offset);
        if (!t) return node_error(n, t.status().code(), t.status().message());
        st.in.push_back(*t);
        if (c) {
          constants[k] = *t;
          any_const = true;
        }
      }
      auto prim =
          prepare(*desc, ctx, any_const ? std::span<const Tensor* const>(constants) : std::span<const Tensor* const>{});
      if (!prim) return node_error(n, prim.status().code(), prim.status().message());
      st.prim = std::move(*prim);
      const auto& od = st.prim.output_descs();
      for (std::size_t o = 0; o < od.size(); ++o) {
        auto t = view(n.outputs[o], od[o], true);
        if (!t) return node_error(n, t.status().code(), t.status().message());
        st.out.push_back(*t);
      }
      st.kernel = std::string(st.prim.kernel().name);
      st.workspace_bytes = st.prim.workspace_size() * sizeof(float);
      const OpCost c = op_cost(*desc);
      st.flops = c.flops;
      st.bytes = c.bytes;
    } else if (n.op == NodeOp::matmul) {
      st.kind = Step::Kind::matmul;
      std::vector<std::int64_t> a = dims_[static_cast<std::size_t>(n.inputs[0])];
      std::vector<std::int64_t> b = dims_[static_cast<std::size_t>(n.inputs[1])];
      if (a.size() == 1) a.insert(a.begin(), 1);
      if (b.size() == 1) b.push_back(1);
      const std::int64_t M = a[a.size() - 2], K = a.back(), N = b.back();
      const std::int64_t batch_a = product(a, 0, a.size() - 2), batch_b = product(b, 0, b.size() - 2);
      const auto* pa = static_cast<float*>(data[static_cast<std::size_t>(n.inputs[0])]);
      const auto* pb = static_cast<float*>(data[static_cast<std::size_t>(n.inputs[1])]);
      auto* py = static_cast<float*>(data[static_cast<std::size_t>(n.outputs[0])]);
      if (!pa || !pb || !py) return node_error(n, StatusCode::internal, "operand without storage");
      const bool b_const = g.value(n.inputs[1]).is_constant();
      OpDesc d;
      d.op = OpKind::gemm;
      d.params = GemmParams{};
      auto add_call = [&](const float* xa, const float* xb, float* xy, std::int64_t m) -> Status {
        auto ta = Tensor::view(xa, Shape{m, K});
        auto tb = Tensor::view(xb, Shape{K, N});
        auto ty = Tensor::view(xy, Shape{m, N});
        if (!ta || !tb || !ty) return node_error(n, StatusCode::invalid_argument, "bad matmul view");
        st.mm.push_back(*ta);
        st.mm.push_back(*tb);
        st.mm.push_back(*ty);
        return Status::ok();
      };
      if (batch_b == 1) {
        // The batch folds into M: one gemm, and a constant b is packed once.
        const std::int64_t m = batch_a * M;
        d.inputs = {TensorDesc{Shape{m, K}}, TensorDesc{Shape{K, N}}};
        if (Status s = add_call(pa, pb, py, m); !s) return s;
        const Tensor* consts[2] = {nullptr, b_const ? &st.mm[1] : nullptr};
        auto prim =
            prepare(d, ctx, b_const ? std::span<const Tensor* const>(consts, 2) : std::span<const Tensor* const>{});
        if (!prim) return node_error(n, prim.status().code(), prim.status().message());
        st.prim = std::move(*prim);
      } else {
        // One gemm per output batch; size-1 batch dims of either operand repeat.
        const MatmulGeometry mg =
            matmul_geometry(dims_[static_cast<std::size_t>(n.inputs[0])], dims_[static_cast<std::size_t>(n.inputs[1])]);
        d.inputs = {TensorDesc{Shape{M, K}}, TensorDesc{Shape{K, N}}};
        st.mm.reserve(mg.batches.size() * 3);
        for (std::size_t bi = 0; bi < mg.batches.size(); ++bi) {
          const auto [ao, bo] = mg.batches[bi];
          if (Status s = add_call(pa + ao * M * K, pb + bo * K * N, py + static_cast<std::int64_t>(bi) * M * N, M); !s)
            return s;
        }
        auto prim = prepare(d, ctx);
        if (!prim) return node_error(n, prim.status().code(), prim.status().message());
        st.prim = std::move(*prim);
      }
      st.kernel = std::string(st.prim.kernel().name);
      st.workspace_bytes = st.prim.workspace_size() * sizeof(float);
      const OpCost c = op_cost(d);
      const double calls = static_cast<double>(st.mm.size() / 3);
      st.flops = c.flops * calls;
      st.bytes = c.bytes * calls;
    } else if (n.op == NodeOp::layout_convert) {
      st.kind = Step::Kind::convert;
      st.kernel = "convert";
      const auto& d = dims_[static_cast<std::size_t>(n.inputs[0])];
      st.src = static_cast<const float*>(data[static_cast<std::size_t>(n.inputs[0])]);
      st.dst = static_cast<float*>(data[static_cast<std::size_t>(n.outputs[0])]);
      st.n = d[0];
      st.c = d[1];
      st.hw = d[2] * d[3];
      st.to_nhwc = g.value(n.outputs[0]).layout == Layout::nhwc;
      st.threads = detail::resolve_threads(options.threads);
      st.bytes = 2.0 * static_cast<double>(st.n * st.c * st.hw) * sizeof(float);
    } else if (is_host_op(n.op)) {
      st.kind = Step::Kind::host;
      st.kernel = "host";
      for (int v : n.inputs) st.hin.push_back(host(v));
      for (int v : n.outputs) st.hout.push_back(host(v));
      // Shape-like i64 operands are a few bytes; the data tensors are what a host op moves.
      for (const auto* side : {&st.hin, &st.hout})
        for (const HostTensor& h : *side) {
          double e = 1;
          for (std::int64_t d : h.dims) e *= static_cast<double>(d);
          st.bytes += e * (h.dtype == DType::f32 ? 4.0 : 8.0);
        }
    } else {
      return node_error(n, StatusCode::unsupported, "the runtime cannot execute this op");
    }
    steps.push_back(std::move(st));
  }
  return Status::ok();
}

namespace {
Status run_step(const Graph& g, const Step& st) {
  switch (st.kind) {
    case Step::Kind::alias: return Status::ok();
    case Step::Kind::registry:
      if (Status s = st.prim.execute(st.in, st.out, st.workspace); !s)
        return node_error(g.node(st.node), s.code(), s.message());
      return Status::ok();
    case Step::Kind::matmul:
      for (std::size_t i = 0; i + 2 < st.mm.size(); i += 3) {
        const Tensor* in[2] = {&st.mm[i], &st.mm[i + 1]};
        const Tensor* out[1] = {&st.mm[i + 2]};
        if (Status s = st.prim.execute(std::span<const Tensor* const>(in, 2), std::span<const Tensor* const>(out, 1),
                                       st.workspace);
            !s)
          return node_error(g.node(st.node), s.code(), s.message());
      }
      return Status::ok();
    case Step::Kind::convert:
      convert_layout(st.src, st.dst, st.n, st.c, st.hw, st.to_nhwc, st.threads);
      return Status::ok();
    case Step::Kind::host: return run(g.node(st.node), st.hin, st.hout);
  }
  return Status::ok();
}
}  // namespace

Result<Specialization::Lease> Specialization::acquire() const {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    if (!free_.empty()) {
      std::unique_ptr<RunState> s = std::move(free_.back());
      free_.pop_back();
      return Lease(this, std::move(s));
    }
    // One more state costs what the first does: its arena, its workspace and its kernels
    // prepared again (which may pack their own copy of the weights).
    const std::uint64_t per_state = weight_bytes + arena_bytes + workspace_bytes;
    std::uint64_t all = 0;
    const bool fits = !__builtin_mul_overflow(per_state, static_cast<std::uint64_t>(states_) + 1, &all) &&
                      all <= options_.memory_budget;
    if (fits && !no_more_states_) {
      free_.reserve(static_cast<std::size_t>(states_) + 1);
      ++states_;
      lock.unlock();
      auto s = make_state();
      if (s) return Lease(this, std::move(*s));
      lock.lock();
      --states_;
      no_more_states_ = true;
      if (states_ == 0) return s.status();
      continue;
    }
    if (states_ == 0) return Status(StatusCode::internal, "the plan has no run state");
    returned_.wait(lock);
  }
}

void Specialization::release(std::unique_ptr<RunState> s) const noexcept {
  {
    std::lock_guard<std::mutex> lock(mu_);
    free_.push_back(std::move(s));  // capacity reserved when the state was made
  }
  returned_.notify_one();
}

Status Specialization::run(const RunState& rs) const {
  for (const Step& st : rs.steps)
    if (Status s = run_step(graph, st); !s) return s;
  return Status::ok();
}

Result<std::vector<NodeTime>> Specialization::profile(const RunState& rs, int repeat) const {
  const std::vector<Step>& steps = rs.steps;
  const auto reps = static_cast<std::size_t>(std::max(repeat, 1));
  using clock = std::chrono::steady_clock;
  auto ms = [](clock::time_point a, clock::time_point b) {
    return std::chrono::duration<double, std::milli>(b - a).count();
  };
  // In the plan: whole runs, each step timed where it stands (caches as the previous step left
  // them). Alone: each step run `repeat` times in a row, like a kernel benchmark.
  std::vector<std::vector<double>> in_plan(steps.size(), std::vector<double>(reps));
  for (std::size_t r = 0; r < reps; ++r) {
    auto t0 = clock::now();
    for (std::size_t i = 0; i < steps.size(); ++i) {
      if (Status s = run_step(graph, steps[i]); !s) return s;
      const auto t1 = clock::now();
      in_plan[i][r] = ms(t0, t1);
      t0 = t1;
    }
  }
  // Alone with the caches flushed before each run: a write pass over as many bytes as the plan
  // touches (weights + arena, at least 16 MiB) evicts what one run of the plan would have
  // evicted since this node last ran - its weights above all - and its inputs too, which the
  // plan would have left warm: the plan lies between this and the warm figure. At most 5 runs,
  // as the flush dominates the time.
  const std::size_t flush_bytes = std::max<std::size_t>(16u << 20, weight_bytes + arena_bytes);
  std::vector<std::uint64_t> flush(flush_bytes / sizeof(std::uint64_t));
  std::uint64_t sink = 0;
  std::vector<NodeTime> times;
  std::vector<double> t(reps), tc(std::min<std::size_t>(reps, 5));
  for (std::size_t i = 0; i < steps.size(); ++i) {
    const Step& st = steps[i];
    const Node& n = graph.node(st.node);
    // A step that writes over its input would, run again and again, compute on its own output
    // (a batch norm applied 20 times, x^2 squared into denormals that slow every later node):
    // that input is restored before each run, outside the timer.
    std::vector<std::pair<float*, std::vector<float>>> saved;
    if (st.kind == Step::Kind::registry)
      for (const Tensor* o : st.out)
        for (const Tensor* in : st.in)
          if (in->data() == o->data())
            saved.emplace_back(o->mutable_data(), std::vector<float>(in->data(), in->data() + in->numel()));
    auto restore = [&] {
      for (auto& [p, v] : saved) std::memcpy(p, v.data(), v.size() * sizeof(float));
    };
    for (double& x : t) {
      restore();
      const auto t0 = clock::now();
      if (Status s = run_step(graph, st); !s) return s;
      x = ms(t0, clock::now());
    }
    for (double& x : tc) {
      restore();
      for (std::size_t k = 0; k < flush.size(); k += 8) sink += (flush[k] += k);
      const auto t0 = clock::now();
      if (Status s = run_step(graph, st); !s) return s;
      x = ms(t0, clock::now());
    }
    std::sort(t.begin(), t.end());
    std::sort(tc.begin(), tc.end());
    std::sort(in_plan[i].begin(), in_plan[i].end());
    times.push_back(NodeTime{n.name, std::string(graph::name(n.op)), st.kernel, t[t.size() / 2], in_plan[i][reps / 2],
                             tc[tc.size() / 2], st.flops, st.bytes});
  }
  if (sink == 42) std::fputs("", stderr);  // keeps the flush pass from being optimized away
  return times;
}

}  // namespace opfuse::runtime
