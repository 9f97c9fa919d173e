// src/runtime/groups.cpp - fused groups: naming them, falling back from them, verifying them.
//
// Every rewrite leaves provenance on the nodes it builds (graph::Node::origin: the ids of the
// unfused graph's nodes whose work a node now does). A fused group is a set of fused-graph
// nodes whose origins overlap - bias_into_matmul leaves a reshape, a gemm and a reshape that
// together replace a MatMul and an Add - and its boundary is the unfused subgraph's: the
// values its original nodes read from outside, and the values they produced that something
// outside reads. The rewrites keep those boundary values (a fused node takes over the output
// value of the last node it absorbs), so the same value ids exist in both graphs, and a group
// can be run alone on exactly the inputs its unfused subgraph saw.
//
// Fallback: after layout planning each fused registry node is offered to the registry at the
// plan's stage. When no kernel of a stage above naive accepts it (the fused conv has no kernel
// for that post-op chain on that layout, say) the fusion is not worth its slow kernel: the
// last fusion that built it is refused for its origin nodes and the graph is fused again, so
// that part of the graph runs as it was (or as the smaller fusions left it).
#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <set>

#include "executor.hpp"
#include "groups.hpp"
#include "opfuse/primitive.hpp"
#include "opfuse/registry.hpp"
#include "runtime.hpp"
#include "src/check/compare.hpp"

namespace opfuse::runtime {

using graph::DType;
using graph::Graph;
using graph::Node;
using graph::Value;

std::vector<Group> fused_groups(const Graph& fused) {
  std::vector<Group> groups;
  std::map<int, std::size_t> owner;  // origin node id -> group
  for (const Node& n : fused.nodes()) {
    if (n.dead || n.origin.empty()) continue;
    // Every group this node's origin touches merges into one.
    std::set<std::size_t> hit;
    for (int o : n.origin)
      if (auto it = owner.find(o); it != owner.end()) hit.insert(it->second);
    std::size_t into;
    if (hit.empty()) {
      into = groups.size();
      groups.emplace_back();
    } else {
      into = *hit.begin();
      for (auto it = std::next(hit.begin()); it != hit.end(); ++it) {
        Group& from = groups[*it];
        groups[into].nodes.insert(groups[into].nodes.end(), from.nodes.begin(), from.nodes.end());
        groups[into].origin.insert(from.origin.begin(), from.origin.end());
        for (int o : from.origin) owner[o] = into;
        from.nodes.clear();
        from.origin.clear();
      }
    }
    groups[into].nodes.push_back(n.id);
    for (int o : n.origin) {
      groups[into].origin.insert(o);
      owner[o] = into;
    }
  }
  std::vector<Group> out;
  for (Group& g : groups) {
    if (g.nodes.empty()) continue;
    std::sort(g.nodes.begin(), g.nodes.end());
    std::vector<std::string> patterns;
    for (int id : g.nodes)
      for (const std::string& p : fused.node(id).fused_by)
        if (std::find(patterns.begin(), patterns.end(), p) == patterns.end()) patterns.push_back(p);
    g.pattern = fmt::format("{}", fmt::join(patterns, "+"));
    out.push_back(std::move(g));
  }
  return out;
}

FusedGroup describe(const Group& grp, const Graph& fused, const Graph& unfused) {
  FusedGroup d;
  d.pattern = grp.pattern;
  for (int id : grp.nodes) d.nodes.push_back(fused.node(id).name);
  for (int id : grp.origin) d.replaced.push_back(unfused.node(id).name);
  return d;
}

std::vector<Declined> declined_fused_nodes(const Graph& planned, const CompileOptions& options) {
  std::vector<Declined> out;
  if (options.stage == Stage::naive) return out;
  Context ctx;
  ctx.stage = options.stage;
  ctx.threads = options.threads;
  ctx.max_isa = options.max_isa;
  ctx.excluded_kernels = options.excluded_kernels;
  for (const Node& n : planned.nodes()) {
    if (n.dead || n.fused_by.empty() || !runs_on_registry(planned, n)) continue;
    auto desc = registry_desc(planned, n);
    if (!desc) {
      out.push_back({n.id, desc.status().message()});
      continue;
    }
    const KernelDef* k = select_kernel(*desc, ctx);
    if (!k)
      out.push_back({n.id, fmt::format("no kernel accepts {} here", op_name(desc->op))});
    else if (k->impl == Impl::naive)
      out.push_back(
          {n.id, fmt::format("no {} kernel accepts it; only {} would",
                             options.stage == Stage::fused ? "fused or simd" : stage_name(options.stage), k->name)});
  }
  return out;
}

namespace {

// The boundary of a group in the unfused graph.
struct Boundary {
  std::vector<int> inputs;   // values the original nodes read from outside the group
  std::vector<int> outputs;  // values they produce that are read outside or are graph outputs
};

Boundary boundary_of(const Group& grp, const Graph& unfused, const std::vector<std::vector<int>>& consumers) {
  Boundary b;
  for (int id : grp.origin) {
    const Node& n = unfused.node(id);
    for (int v : n.inputs) {
      if (v < 0) continue;
      const int p = unfused.value(v).producer;
      if ((p < 0 || !grp.origin.count(p)) && std::find(b.inputs.begin(), b.inputs.end(), v) == b.inputs.end())
        b.inputs.push_back(v);
    }
    for (int v : n.outputs) {
      bool outside = std::find(unfused.outputs().begin(), unfused.outputs().end(), v) != unfused.outputs().end();
      for (int r : consumers[static_cast<std::size_t>(v)]) outside = outside || !grp.origin.count(r);
      if (outside) b.outputs.push_back(v);
    }
  }
  return b;
}

TensorData read_binding(const Binding& bd, const void* data, const std::string& name) {
  TensorData t;
  t.name = name;
  t.type = bd.type;
  t.dims = bd.dims;
  const auto n = static_cast<std::size_t>(bd.numel);
  if (bd.type == ElementType::f32) {
    const auto* p = static_cast<const float*>(data);
    t.f32.assign(p, p + n);
  } else if (bd.type == ElementType::i64) {
    const auto* p = static_cast<const std::int64_t*>(data);
    t.i64.assign(p, p + n);
  } else {
    const auto* p = static_cast<const std::int64_t*>(data);
    t.boolean.resize(n);
    for (std::size_t i = 0; i < n; ++i) t.boolean[i] = p[i] != 0;
  }
  return t;
}

Status write_binding(const Binding& bd, void* data, const TensorData& t) {
  if (t.numel() != bd.numel || t.type != bd.type)
    return Status(StatusCode::internal, fmt::format("verify: input '{}' does not fit its slot", t.name));
  const auto n = static_cast<std::size_t>(bd.numel);
  if (bd.type == ElementType::f32)
    std::memcpy(data, t.f32.data(), n * sizeof(float));
  else if (bd.type == ElementType::i64)
    std::memcpy(data, t.i64.data(), n * sizeof(std::int64_t));
  else
    for (std::size_t i = 0; i < n; ++i) static_cast<std::int64_t*>(data)[i] = t.boolean[i];
  return Status::ok();
}

// Plans and runs `g` (static dims) at `options`' stage with no fusion; inputs by value id.
Result<std::map<int, TensorData>> run_graph(Graph g, const CompileOptions& options,
                                            const std::map<int, TensorData>& in) {
  if (Status s = plan_layouts(g, options.stage); !s) return s;
  auto sp = Specialization::build(std::move(g), options);
  if (!sp) return sp.status();
  const Specialization& s = **sp;
  auto lease = s.acquire();
  if (!lease) return lease.status();
  const RunState& rs = lease->state();
  for (const Binding& bd : s.inputs) {
    if (!rs.at(bd) || bd.numel == 0 || s.graph.value(bd.value).is_constant()) continue;
    auto it = in.find(bd.value);
    if (it == in.end())
      return Status(StatusCode::internal, fmt::format("verify: no data for '{}'", s.graph.value(bd.value).name));
    if (Status st = write_binding(bd, rs.at(bd), it->second); !st) return st;
  }
  if (Status st = s.run(rs); !st) return st;
  std::map<int, TensorData> out;
  for (const Binding& bd : s.outputs) out[bd.value] = read_binding(bd, rs.at(bd), s.graph.value(bd.value).name);
  return out;
}

// The group's nodes alone as a graph: its outside inputs become graph inputs (constants stay
// constants), `outputs` its graph outputs. Value and node ids map to new ones; `ids` maps the
// new graph's value ids back to the fused graph's.
Result<Graph> extract(const Graph& fused, const std::vector<int>& nodes, const std::vector<int>& outputs,
                      std::map<int, int>& back) {
  Graph m("group");
  std::map<int, int> to;  // fused value id -> new id
  std::set<int> made;
  for (int id : nodes)
    for (int v : fused.node(id).outputs) made.insert(v);
  const auto map_value = [&](int v) -> Result<int> {
    if (v < 0) return -1;
    if (auto it = to.find(v); it != to.end()) return it->second;
    const Value& x = fused.value(v);
    std::vector<graph::Dim> dims = x.dims;
    Result<int> r = Status(StatusCode::internal, "");
    if (made.count(v))
      r = m.add_value(x.name, x.dtype, dims);
    else if (x.is_constant() && x.dtype == DType::f32)
      r = m.add_initializer(x.name, dims, std::vector<float>(*x.f32_data));
    else if (x.is_constant())
      r = m.add_initializer(x.name, dims, std::vector<std::int64_t>(*x.i64_data), x.dtype);
    else
      r = m.add_input(x.name, x.dtype, dims);
    if (!r) return r.status();
    to[v] = *r;
    back[*r] = v;
    return *r;
  };
  auto order = graph::topological_order(fused);
  if (!order) return order.status();
  for (int id : *order) {
    if (std::find(nodes.begin(), nodes.end(), id) == nodes.end()) continue;
    const Node& n = fused.node(id);
    std::vector<int> ins, outs;
    for (int v : n.inputs) {
      auto r = map_value(v);
      if (!r) return r.status();
      ins.push_back(*r);
    }
    for (int v : n.outputs) {
      auto r = map_value(v);
      if (!r) return r.status();
      outs.push_back(*r);
    }
    auto r = m.add_node(n.op, n.name, ins, outs, n.params, n.attrs);
    if (!r) return r.status();
  }
  std::vector<int> outs;
  for (int v : outputs) {
    auto it = to.find(v);
    if (it == to.end())
      return Status(StatusCode::internal, fmt::format("verify: the group does not produce '{}'", fused.value(v).name));
    outs.push_back(it->second);
  }
  if (Status s = m.set_outputs(outs); !s) return s;
  return m;
}

// The tolerance a group is held to: opfuse check's for each fused registry node's problem (it
// grows with the reduction length: a folded conv over 2048 channels rounds differently from
// the conv and the batch norm apart), and never tighter than the whole-model tolerance.
check::Tolerance group_tolerance(const Graph& fused, const Group& grp) {
  check::Tolerance t = check::kModelTolerance;
  for (int id : grp.nodes) {
    const Node& n = fused.node(id);
    if (!runs_on_registry(fused, n)) continue;
    auto desc = registry_desc(fused, n);
    if (!desc) continue;
    const check::Tolerance k = check::tolerance(*desc);
    t.atol = std::max(t.atol, k.atol);
    t.rtol = std::max(t.rtol, k.rtol);
  }
  return t;
}

}  // namespace

Result<std::vector<GroupCheck>> verify_groups(const Graph& unfused, const Graph& fused, const CompileOptions& options,
                                              const std::map<int, TensorData>& inputs) {
  const auto groups = fused_groups(fused);
  const auto consumers = unfused.consumer_lists();
  std::vector<Boundary> bounds;
  // The unfused run keeps every boundary value: they become extra graph outputs.
  Graph g0 = unfused;
  std::vector<int> outs = g0.outputs();
  for (const Group& grp : groups) {
    bounds.push_back(boundary_of(grp, unfused, consumers));
    for (const std::vector<int>* vs : {&bounds.back().inputs, &bounds.back().outputs})
      for (int v : *vs)
        if (unfused.value(v).kind == graph::ValueKind::intermediate &&
            std::find(outs.begin(), outs.end(), v) == outs.end())
          outs.push_back(v);
  }
  if (Status s = g0.set_outputs(outs); !s) return s;
  auto ref = run_graph(std::move(g0), options, inputs);
  if (!ref) return ref.status();
  std::vector<GroupCheck> checks;
  for (std::size_t i = 0; i < groups.size(); ++i) {
    GroupCheck c;
    c.group = describe(groups[i], fused, unfused);
    std::map<int, int> back;
    auto m = extract(fused, groups[i].nodes, bounds[i].outputs, back);
    if (!m) {
      c.reason = m.status().message();
      checks.push_back(std::move(c));
      continue;
    }
    std::map<int, TensorData> in;
    for (int v : m->inputs()) {
      const int orig = back[v];
      if (auto it = ref->find(orig); it != ref->end()) {
        in[v] = it->second;
      } else if (auto jt = inputs.find(orig); jt != inputs.end()) {
        in[v] = jt->second;
      } else {
        c.reason = fmt::format("the unfused run has no value '{}'", m->value(v).name);
        break;
      }
    }
    if (!c.reason.empty()) {
      checks.push_back(std::move(c));
      continue;
    }
    auto got = run_graph(std::move(*m), options, in);
    if (!got) {
      c.reason = got.status().message();
      checks.push_back(std::move(c));
      continue;
    }
    c.ok = true;
    for (const auto& [v, t] : *got) {
      const TensorData& want = ref->at(back[v]);
      const check::OutputCheck oc = check::compare_output(t, want, group_tolerance(fused, groups[i]));
      c.max_abs_error = std::max(c.max_abs_error, oc.max_abs);
      c.max_normalized_error = std::max(c.max_normalized_error, oc.max_norm);
      if (!oc.ok && c.ok) c.reason = fmt::format("{}: {}", t.name, oc.reason);
      c.ok = c.ok && oc.ok;
    }
    checks.push_back(std::move(c));
  }
  return checks;
}

}  // namespace opfuse::runtime
