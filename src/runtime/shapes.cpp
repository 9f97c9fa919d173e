// src/runtime/shapes.cpp - shape inference and constant folding over the graph IR.
//
// One walk in topological order does both. Each node's output dims come from the rule that runs
// it: registry ops from the registry's own infer_outputs() (so a shape the kernels would refuse
// is refused here, with the registry's message), host ops from host_ops.cpp, matmul from NumPy's
// rule. A node whose inputs are all constants is then evaluated on the spot - host ops by their
// run(), registry ops by the naive kernel, which is the contract - and its outputs become
// constants; Shape of a value with static dims becomes a constant without reading any data.
// Folding this way is what turns an exported model's shape subgraph (Shape -> Gather ->
// Unsqueeze -> Concat -> Reshape) into plain constants once the input dims are known, so the
// plan that runs contains only the work that depends on data.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "host_ops.hpp"
#include "opfuse/primitive.hpp"
#include "runtime.hpp"
#include "src/checked.hpp"

namespace opfuse::runtime {

using graph::DType;
using graph::Graph;
using graph::Node;
using graph::NodeOp;
using graph::Value;

namespace {

bool is_pool_or_conv(NodeOp op) { return op == NodeOp::conv2d || op == NodeOp::maxpool2d || op == NodeOp::avgpool2d; }

graph::Dims to_dims(const std::vector<std::int64_t>& d) {
  graph::Dims out;
  out.reserve(d.size());
  for (std::int64_t x : d) out.emplace_back(x);
  return out;
}

// The MatMul rule (NumPy): 1-D operands are promoted ((K) -> (1, K) for a, (K, 1) for b) and the
// promoted dim dropped again; batch dims broadcast.
Result<std::vector<std::int64_t>> matmul_dims(const Node& n, std::vector<std::int64_t> a, std::vector<std::int64_t> b) {
  if (a.empty() || b.empty()) return node_error(n, StatusCode::invalid_argument, "matmul operands must have rank >= 1");
  const bool a1 = a.size() == 1, b1 = b.size() == 1;
  if (a1) a.insert(a.begin(), 1);
  if (b1) b.push_back(1);
  const std::int64_t M = a[a.size() - 2], K = a.back(), Kb = b[b.size() - 2], N = b.back();
  if (K != Kb)
    return node_error(
        n, StatusCode::invalid_argument,
        fmt::format("a is {} and b is {}: inner dims {} and {} differ", fmt::join(a, "x"), fmt::join(b, "x"), K, Kb));
  const std::size_t ra = a.size() - 2, rb = b.size() - 2, r = std::max(ra, rb);
  std::vector<std::int64_t> out(r);
  for (std::size_t i = 0; i < r; ++i) {
    const std::int64_t da = i + ra >= r ? a[i + ra - r] : 1;
    const std::int64_t db = i + rb >= r ? b[i + rb - r] : 1;
    if (da != db && da != 1 && db != 1)
      return node_error(n, StatusCode::invalid_argument,
                        fmt::format("batch dims {} and {} do not broadcast", fmt::join(a, "x"), fmt::join(b, "x")));
    out[i] = da == 1 ? db : da;
  }
  if (!a1) out.push_back(M);
  if (!b1) out.push_back(N);
  return out;
}

// Naive matmul on constants (folding only; the executor runs gemm primitives).
void matmul_naive(const float* a, const std::vector<std::int64_t>& ad, const float* b,
                  const std::vector<std::int64_t>& bd, float* y) {
  const MatmulGeometry mg = matmul_geometry(ad, bd);
  const std::int64_t M = mg.M, K = mg.K, N = mg.N;
  for (std::size_t bi = 0; bi < mg.batches.size(); ++bi) {
    const float* pa = a + mg.batches[bi].first * M * K;
    const float* pb = b + mg.batches[bi].second * K * N;
    float* py = y + static_cast<std::int64_t>(bi) * M * N;
    // y (M, N) = a (M, K) * b (K, N)
    for (std::int64_t m = 0; m < M; ++m)
      for (std::int64_t j = 0; j < N; ++j) {
        double acc = 0;
        for (std::int64_t k = 0; k < K; ++k) acc += static_cast<double>(pa[m * K + k]) * pb[k * N + j];
        py[m * N + j] = static_cast<float>(acc);
      }
  }
}

// Bytes a folded result of `t` holds (i64 and boolean fold into i64 vectors); nullopt when the
// dims overflow.
std::optional<std::uint64_t> bytes_of(const TensorInfo& t) {
  return detail::checked_bytes(t.dims, t.dtype == DType::f32 ? sizeof(float) : sizeof(std::int64_t));
}

double elements(const std::vector<std::int64_t>& dims) {
  double n = 1;
  for (std::int64_t d : dims) n *= static_cast<double>(d);
  return n;
}

HostTensor host_view(const Value& v, const std::vector<std::int64_t>& dims) {
  HostTensor h;
  h.dtype = v.dtype;
  h.dims = dims;
  h.data = v.dtype == DType::f32
               ? static_cast<void*>(const_cast<float*>(v.f32_data ? v.f32_data->data() : nullptr))
               : static_cast<void*>(const_cast<std::int64_t*>(v.i64_data ? v.i64_data->data() : nullptr));
  return h;
}

}  // namespace

Status node_error(const Node& n, StatusCode code, const std::string& msg) {
  return {code, fmt::format("node '{}' ({}): {}", n.name, graph::name(n.op), msg)};
}

bool runs_on_registry(const Graph& g, const Node& n) {
  if (!graph::registry_op(n.op) || !n.params) return false;
  for (int id : n.inputs)
    if (id < 0 || g.value(id).dtype != DType::f32) return false;
  return true;
}

Result<std::vector<std::int64_t>> static_dims(const Value& v) {
  if (!v.has_shape) return Status(StatusCode::invalid_argument, fmt::format("value '{}' has no shape", v.name));
  std::vector<std::int64_t> d;
  d.reserve(v.dims.size());
  for (const graph::Dim& x : v.dims) {
    if (!x.is_static())
      return Status(StatusCode::invalid_argument,
                    fmt::format("value '{}' has dims {}, not all static", v.name, graph::to_string(v.dims)));
    d.push_back(x.value);
  }
  return d;
}

MatmulGeometry matmul_geometry(std::vector<std::int64_t> a, std::vector<std::int64_t> b) {
  if (a.size() == 1) a.insert(a.begin(), 1);
  if (b.size() == 1) b.push_back(1);
  MatmulGeometry mg;
  mg.M = a[a.size() - 2];
  mg.K = a.back();
  mg.N = b.back();
  const std::size_t ra = a.size() - 2, rb = b.size() - 2, r = std::max(ra, rb);
  // Batch dim i of the output, right-aligned, and each operand's (1 where it has none).
  auto dim_at = [&](const std::vector<std::int64_t>& x, std::size_t rx, std::size_t i) {
    return i + rx >= r ? x[i + rx - r] : std::int64_t{1};
  };
  std::int64_t batches = 1;
  for (std::size_t i = 0; i < r; ++i) batches *= std::max(dim_at(a, ra, i), dim_at(b, rb, i));
  mg.batches.reserve(static_cast<std::size_t>(batches));
  for (std::int64_t bi = 0; bi < batches; ++bi) {
    std::int64_t rem = bi, ao = 0, bo = 0, as = 1, bs = 1;
    for (std::size_t i = r; i-- > 0;) {
      const std::int64_t da = dim_at(a, ra, i), db = dim_at(b, rb, i);
      const std::int64_t idx = rem % std::max(da, db);
      rem /= std::max(da, db);
      ao += (da == 1 ? 0 : idx) * as;
      bo += (db == 1 ? 0 : idx) * bs;
      as *= da;
      bs *= db;
    }
    mg.batches.emplace_back(ao, bo);
  }
  return mg;
}

bool is_packed_attention(const Node& n) {
  if (n.op != NodeOp::attention || !n.params) return false;
  const auto* p = std::get_if<AttentionParams>(&*n.params);
  return p && p->packed_qkv;
}

std::pair<int, std::int64_t> desc_operand(const Node& n, const OpDesc& desc, std::size_t k) {
  if (!is_packed_attention(n)) return {n.inputs[k], 0};
  const Shape& q = desc.inputs[0].shape;
  if (k < 3) return {n.inputs[0], static_cast<std::int64_t>(k) * q[1] * q[3]};
  return {n.inputs[k - 2], 0};
}

Result<OpDesc> registry_desc(const Graph& g, const Node& n) {
  const auto kind = graph::registry_op(n.op);
  if (!kind || !n.params) return node_error(n, StatusCode::internal, "not a registry op");
  OpDesc d;
  d.op = *kind;
  d.params = *n.params;
  if (is_packed_attention(n)) {
    if (n.inputs.empty() || n.outputs.size() != 1 || n.inputs[0] < 0)
      return node_error(n, StatusCode::invalid_argument, "packed attention takes qkv and an optional mask");
    auto od = static_dims(g.value(n.outputs[0]));
    auto qd = static_dims(g.value(n.inputs[0]));
    if (!od || !qd || od->size() != 4)
      return node_error(n, StatusCode::invalid_argument, "packed attention needs a static (B, S, H, D) output");
    const auto& o = *od;
    std::int64_t qn = 1;
    for (std::int64_t x : *qd) qn *= x;
    if (qn != 3 * o[0] * o[1] * o[2] * o[3])
      return node_error(n, StatusCode::invalid_argument,
                        fmt::format("packed qkv holds {} floats, 3 x the output's {}", qn, o[0] * o[1] * o[2] * o[3]));
    const TensorDesc t{Shape{o[0], o[2], o[1], o[3]}, Layout::nchw};
    d.inputs = {t, t, t};
    for (std::size_t k = 1; k < n.inputs.size(); ++k) {
      auto md = static_dims(g.value(n.inputs[k]));
      if (!md) return node_error(n, StatusCode::invalid_argument, md.status().message());
      d.inputs.push_back(TensorDesc{Shape::of(md->data(), static_cast<int>(md->size())), Layout::nchw});
    }
    return d;
  }
  const bool view_1d =
      is_pool_or_conv(n.op) && !n.inputs.empty() && n.inputs[0] >= 0 && g.value(n.inputs[0]).dims.size() == 3;
  for (std::size_t k = 0; k < n.inputs.size(); ++k) {
    if (n.inputs[k] < 0) return node_error(n, StatusCode::invalid_argument, fmt::format("input {} is omitted", k));
    const Value& v = g.value(n.inputs[k]);
    if (v.dtype != DType::f32)
      return node_error(n, StatusCode::unsupported,
                        fmt::format("input '{}' is {}; its kernels take f32", v.name, graph::name(v.dtype)));
    auto dims = static_dims(v);
    if (!dims) return node_error(n, StatusCode::invalid_argument, dims.status().message());
    std::vector<std::int64_t> s = *dims;
    if (s.empty()) s = {1};
    // 1-D conv / pool: x (N, C, L) and w (K, C/g, k) run as (N, C, 1, L) and (K, C/g, 1, k).
    if (view_1d && (k == 0 || (n.op == NodeOp::conv2d && k == 1)) && s.size() == 3) s.insert(s.begin() + 2, 1);
    if (s.size() > static_cast<std::size_t>(kMaxRank))
      return node_error(n, StatusCode::unsupported,
                        fmt::format("input '{}' has rank {}; kernels take rank <= {}", v.name, s.size(), kMaxRank));
    d.inputs.push_back(TensorDesc{Shape::of(s.data(), static_cast<int>(s.size())), v.layout});
  }
  return d;
}

namespace {

// Output dims of a registry node from the registry's output descs, undoing the views.
std::vector<std::int64_t> from_registry(const Graph& g, const Node& n, const Shape& s) {
  std::vector<std::int64_t> d(s.dims.begin(), s.dims.begin() + s.rank);
  if (is_packed_attention(n) && d.size() == 4) std::swap(d[1], d[2]);  // o is (B, S, H, D) memory
  if (is_pool_or_conv(n.op) && g.value(n.inputs[0]).dims.size() == 3 && d.size() == 4) d.erase(d.begin() + 2);
  bool all_scalar = !n.inputs.empty();
  for (int id : n.inputs) all_scalar = all_scalar && id >= 0 && g.value(id).dims.empty();
  if (all_scalar && d.size() == 1 && d[0] == 1) d.clear();
  return d;
}

enum class Inferred { done, skipped };

// Evaluates a node whose inputs are all constants; its outputs become constants.
Status fold_node(Graph& g, int id, const std::vector<TensorInfo>& outs) {
  const Node n = g.node(id);  // a copy: the graph's node vector does not grow here, but be safe
  std::vector<std::vector<float>> f32(outs.size());
  std::vector<std::vector<std::int64_t>> i64(outs.size());
  for (std::size_t o = 0; o < outs.size(); ++o) {
    if (outs[o].dtype == DType::f32)
      f32[o].assign(static_cast<std::size_t>(outs[o].numel()), 0.f);
    else
      i64[o].assign(static_cast<std::size_t>(outs[o].numel()), 0);
  }
  if (runs_on_registry(g, n)) {
    auto desc = registry_desc(g, n);
    if (!desc) return desc.status();
    std::vector<Tensor> in, out;
    for (std::size_t k = 0; k < n.inputs.size(); ++k) {
      auto t = Tensor::view(g.value(n.inputs[k]).f32_data->data(), desc->inputs[k].shape, desc->inputs[k].layout);
      if (!t) return t.status();
      in.push_back(*t);
    }
    auto odesc = infer_outputs(*desc);
    if (!odesc) return odesc.status();
    for (std::size_t o = 0; o < odesc->size(); ++o) {
      auto t = Tensor::view(f32[o].data(), (*odesc)[o].shape, (*odesc)[o].layout);
      if (!t) return t.status();
      out.push_back(*t);
    }
    std::vector<const Tensor*> ip, op;
    for (auto& t : in) ip.push_back(&t);
    for (auto& t : out) op.push_back(&t);
    Context ctx;
    ctx.stage = Stage::naive;
    if (Status s = run(*desc, ip, op, ctx); !s) return node_error(n, s.code(), s.message());
  } else if (n.op == NodeOp::matmul) {
    const Value& a = g.value(n.inputs[0]);
    const Value& b = g.value(n.inputs[1]);
    matmul_naive(a.f32_data->data(), *static_dims(a), b.f32_data->data(), *static_dims(b), f32[0].data());
  } else if (is_host_op(n.op)) {
    // Shape's input need not be a constant: its run reads the dims only (data stays nullptr).
    std::vector<HostTensor> in, out;
    for (int v : n.inputs) in.push_back(v < 0 ? HostTensor{} : host_view(g.value(v), *static_dims(g.value(v))));
    for (std::size_t o = 0; o < outs.size(); ++o) {
      HostTensor h;
      h.dtype = outs[o].dtype;
      h.dims = outs[o].dims;
      h.data = outs[o].dtype == DType::f32 ? static_cast<void*>(f32[o].data()) : static_cast<void*>(i64[o].data());
      out.push_back(h);
    }
    if (Status s = run(n, in, out); !s) return s;
  } else {
    return Status::ok();  // nothing to fold (layout_convert is planned after folding)
  }
  if (Status s = g.remove_node(id); !s) return s;
  for (std::size_t o = 0; o < outs.size(); ++o) {
    Value& v = g.value(n.outputs[o]);
    v.kind = graph::ValueKind::constant;
    v.producer = -1;
    if (outs[o].dtype == DType::f32)
      v.f32_data = std::make_shared<const std::vector<float>>(std::move(f32[o]));
    else
      v.i64_data = std::make_shared<const std::vector<std::int64_t>>(std::move(i64[o]));
  }
  return Status::ok();
}

// The work of folding node n, in element operations (in doubles: an estimate that cannot
// overflow): every element read and written, plus the arithmetic of the ops whose cost is not
// proportional to their data (matmul, convolutions, pools; registry ops by their modeled flops).
double fold_work(const Node& n, const std::vector<TensorInfo>& in, const std::vector<TensorInfo>& out,
                 const OpDesc* desc) {
  double work = 0;
  for (const TensorInfo& t : in) work += elements(t.dims);
  for (const TensorInfo& t : out) work += elements(t.dims);
  const double y = out.empty() ? 0 : elements(out[0].dims);
  if (desc) {
    work += op_cost(*desc).flops;
  } else if (n.op == NodeOp::matmul && in.size() == 2 && !in[0].dims.empty()) {
    work += 2 * y * static_cast<double>(in[0].dims.back());  // each of y's elements is a K-long dot
  } else if (n.op == NodeOp::conv_nd && in.size() >= 2 && in[1].dims.size() >= 2) {
    // w is (K, C/group, k1..kk): each output element reads C/group * k1 * ... * kk taps.
    work += 2 * y * elements(std::vector<std::int64_t>(in[1].dims.begin() + 1, in[1].dims.end()));
  } else if (n.op == NodeOp::pool_nd) {
    const auto* ks = n.attr<std::vector<std::int64_t>>("kernel_shape");
    work += y * (ks ? elements(*ks) : 1.0);
  }
  return work;
}

// What one infer_and_fold pass has folded so far, against FoldOptions' totals.
struct FoldBudget {
  std::uint64_t bytes = 0;
  double work = 0;
};

// Results this small fold whatever the totals: they are shape arithmetic, which the plan needs
// as constants.
constexpr std::uint64_t kSmallFoldBytes = 64u << 10;
constexpr double kSmallFoldWork = 64.0 * 1024;

Result<Inferred> infer_node(Graph& g, int id, const FoldOptions& opt, FoldBudget& budget) {
  const Node& n = g.node(id);
  std::vector<TensorInfo> infos(n.inputs.size());
  std::vector<std::vector<std::int64_t>> dims(n.inputs.size());
  std::vector<HostTensor> consts(n.inputs.size());
  std::vector<const TensorInfo*> ip(n.inputs.size(), nullptr);
  std::vector<const HostTensor*> cp(n.inputs.size(), nullptr);
  bool all_const = true;
  for (std::size_t k = 0; k < n.inputs.size(); ++k) {
    if (n.inputs[k] < 0) continue;
    const Value& v = g.value(n.inputs[k]);
    auto d = static_dims(v);
    if (!d) {
      if (!opt.strict) return Inferred::skipped;
      return node_error(n, StatusCode::invalid_argument, d.status().message());
    }
    infos[k].dtype = v.dtype;
    infos[k].dims = *d;
    ip[k] = &infos[k];
    if (v.is_constant()) {
      consts[k] = host_view(v, *d);
      cp[k] = &consts[k];
    } else {
      all_const = false;
    }
  }
  std::vector<TensorInfo> outs;
  std::optional<OpDesc> reg_desc;
  if (runs_on_registry(g, n)) {
    auto desc = registry_desc(g, n);
    if (!desc) return desc.status();
    reg_desc = *desc;
    auto od = infer_outputs(*desc);
    if (!od) return node_error(n, od.status().code(), od.status().message());
    for (const TensorDesc& t : *od) outs.push_back(TensorInfo{DType::f32, from_registry(g, n, t.shape)});
  } else if (n.op == NodeOp::matmul) {
    if (n.inputs.size() != 2 || !ip[0] || !ip[1])
      return node_error(n, StatusCode::invalid_argument, "matmul takes two inputs");
    if (infos[0].dtype != DType::f32 || infos[1].dtype != DType::f32)
      return node_error(n, StatusCode::unsupported, "matmul takes f32 operands");
    auto d = matmul_dims(n, infos[0].dims, infos[1].dims);
    if (!d) return d.status();
    outs.push_back(TensorInfo{DType::f32, *d});
  } else if (n.op == NodeOp::layout_convert) {
    outs.push_back(infos.at(0));
  } else if (is_host_op(n.op)) {
    if (Status s = infer(n, ip, cp, outs); !s) {
      // A shape-like input computed at run time: not an error until the dims are concrete.
      if (!opt.strict) return Inferred::skipped;
      return s;
    }
  } else {
    return node_error(n, StatusCode::unsupported, "the runtime has no rule for this op");
  }
  if (outs.size() != n.outputs.size())
    return node_error(n, StatusCode::invalid_argument,
                      fmt::format("has {} outputs, its op gives {}", n.outputs.size(), outs.size()));
  // Every output's size, before anything is allocated for it: dims whose byte size overflows
  // are invalid whatever the budget, and a plan may not hold a value over its memory budget.
  std::uint64_t bytes = 0;
  for (std::size_t o = 0; o < outs.size(); ++o) {
    const std::string& name = g.value(n.outputs[o]).name;
    const std::optional<std::uint64_t> b = bytes_of(outs[o]);
    if (!b)
      return node_error(
          n, StatusCode::invalid_argument,
          fmt::format("output '{}' has dims {} whose byte size overflows", name, fmt::join(outs[o].dims, "x")));
    if (opt.strict && *b > opt.memory_budget)
      return node_error(n, StatusCode::out_of_memory,
                        fmt::format("output '{}' of dims {} needs {} bytes, over the memory budget of {} bytes", name,
                                    fmt::join(outs[o].dims, "x"), *b, opt.memory_budget));
    bytes = detail::saturating_add(bytes, *b);
  }
  for (std::size_t o = 0; o < outs.size(); ++o) {
    Value& v = g.value(n.outputs[o]);
    v.dtype = outs[o].dtype;
    v.dims = to_dims(outs[o].dims);
    v.has_shape = true;
  }
  bool foldable = n.op == NodeOp::shape;  // Shape reads dims only: always a constant
  if (!foldable && all_const && !n.inputs.empty() && bytes <= opt.max_fold_bytes) {
    const double work = fold_work(n, infos, outs, reg_desc ? &*reg_desc : nullptr);
    const bool small = bytes <= kSmallFoldBytes && work <= kSmallFoldWork;
    foldable = work <= opt.max_fold_work &&
               (small || (detail::saturating_add(budget.bytes, bytes) <= opt.max_fold_total_bytes &&
                          budget.work + work <= opt.max_fold_total_work));
    if (foldable) {
      budget.bytes = detail::saturating_add(budget.bytes, bytes);
      budget.work += work;
    }
  }
  if (foldable && n.op != NodeOp::layout_convert)
    if (Status s = fold_node(g, id, outs); !s) return s;
  return Inferred::done;
}

}  // namespace

Status infer_and_fold(Graph& g, const FoldOptions& options) {
  try {
    auto order = topological_order(g);
    if (!order) return order.status();
    FoldBudget budget;
    for (int id : *order) {
      auto r = infer_node(g, id, options, budget);
      if (!r) return r.status();
    }
    remove_dead_nodes(g);
    return Status::ok();
  } catch (const std::bad_alloc&) {
    return {StatusCode::out_of_memory, "out of memory while inferring shapes"};
  } catch (const std::exception& e) {
    return {StatusCode::internal, fmt::format("shape inference failed: {}", e.what())};
  }
}

int remove_dead_nodes(Graph& g) {
  int removed = 0;
  auto order = topological_order(g);
  if (!order) return 0;
  std::vector<int> uses(g.values().size(), 0);
  for (int out : g.outputs()) ++uses[static_cast<std::size_t>(out)];
  for (const Node& n : g.nodes())
    if (!n.dead)
      for (int v : n.inputs)
        if (v >= 0) ++uses[static_cast<std::size_t>(v)];
  // Reverse topological order: removing a consumer can free its producers in the same sweep.
  for (auto it = order->rbegin(); it != order->rend(); ++it) {
    const Node& n = g.node(*it);
    bool used = false;
    for (int v : n.outputs) used = used || uses[static_cast<std::size_t>(v)] > 0;
    if (used) continue;
    for (int v : n.inputs)
      if (v >= 0) --uses[static_cast<std::size_t>(v)];
    (void)g.remove_node(*it);
    ++removed;
  }
  return removed;
}

bool layout_convert_is_view(const std::vector<std::int64_t>& d) {
  return d.size() != 4 || d[1] == 1 || d[2] * d[3] == 1;
}

}  // namespace opfuse::runtime
