// src/graph/ir.cpp - building, editing, ordering, verifying and printing the graph IR.
//
// Building checks only what would make an id meaningless (out-of-range references, a payload
// that does not fit its dims, params of the wrong op); everything structural is verify()'s.
// The producer of each value is recorded on the value when a node is added and cleared when it
// is removed; verify() recomputes it from the live nodes and insists the two agree, so an edit
// that went around the Graph calls is caught instead of silently misordering the graph.
//
// topological_order() is Kahn's algorithm over the producer edges with a min-heap of ready
// node ids: no recursion, O(E log N), and a graph built in dataflow order (as an importer
// builds it) is returned in exactly that order, so dumps read like the model file. When nodes
// are left over, each of them still waits on a producer that is also left over; walking those
// producers backwards must revisit a node, and the walk from there names one actual cycle.
//
// print() is --dump-graph: registry nodes show the parameters that tell two instances of an op
// apart (a conv's kernel, stride, padding, groups and post-op chain), attribute ops show their
// attributes, and every value shows its dims, so a fusion or layout pass can be read off a
// before/after diff.
#include <fmt/format.h>

#include <algorithm>
#include <functional>
#include <iterator>
#include <queue>
#include <sstream>

#include "ir.hpp"

namespace opfuse::graph {

namespace {

// clang-format off
constexpr std::string_view kNodeOpNames[] = {
    "gemm", "conv2d", "batchnorm", "relu", "clip", "leaky_relu", "sigmoid", "tanh", "gelu", "silu", "hardswish",
    "add", "sub", "mul", "div", "maxpool2d", "avgpool2d", "global_avgpool", "softmax", "layernorm", "rmsnorm",
    "attention", "inverted_residual", "eltwise_chain",
    "reshape", "transpose", "concat", "flatten", "slice", "gather", "squeeze", "unsqueeze", "split", "identity",
    "constant", "constant_of_shape", "shape", "expand", "cast",
    "matmul", "pow", "sqrt", "erf", "reduce_mean", "where", "equal", "min", "max", "conv_nd", "pool_nd",
    "layernorm_stats",
    "layout_convert"};
// clang-format on
static_assert(std::size(kNodeOpNames) == kNodeOpCount, "kNodeOpNames must name every NodeOp");

// Indexed like OpParams' alternatives, for "takes Conv2dParams" messages.
constexpr std::string_view kParamsNames[] = {
    "GemmParams",       "Conv2dParams",  "BatchnormParams", "UnaryParams",     "BinaryParams",           "Pool2dParams",
    "GlobalPoolParams", "SoftmaxParams", "NormParams",      "AttentionParams", "InvertedResidualParams", "ChainParams"};
static_assert(std::size(kParamsNames) == std::variant_size_v<OpParams>, "kParamsNames must name every OpParams");

// Appends x to s, after sep unless s is empty.
void join(std::string& s, std::string_view sep, std::string_view x) {
  if (!s.empty()) s += sep;
  s += x;
}

Status bad(const std::string& msg) { return {StatusCode::invalid_argument, "graph: " + msg}; }

// Elements of all-static dims; nullopt when a dim is symbolic or the product overflows.
std::optional<std::int64_t> static_numel(const Dims& dims) {
  std::int64_t n = 1;
  for (const Dim& d : dims)
    if (!d.is_static() || __builtin_mul_overflow(n, d.value, &n)) return std::nullopt;
  return n;
}

Status check_payload(const std::string& name, const Dims& dims, std::size_t size) {
  const auto n = static_numel(dims);
  if (!n) return bad(fmt::format("constant \"{}\" has dims {}, which are not all static", name, to_string(dims)));
  if (static_cast<std::size_t>(*n) != size)
    return bad(fmt::format("constant \"{}\" holds {} elements, its dims {} need {}", name, size, to_string(dims), *n));
  return {};
}

// A registry op's params must be its own kind; other ops take attributes only.
Status check_params(const std::string& node, NodeOp op, const std::optional<OpParams>& params) {
  const auto kind = registry_op(op);
  if (!kind && params)
    return bad(fmt::format("node \"{}\" ({}) takes attributes, not OpParams ({})", node, name(op),
                           kParamsNames[params->index()]));
  if (!kind) return {};
  const std::size_t want = default_params(*kind).index();
  if (!params) return bad(fmt::format("node \"{}\" ({}) has no params", node, name(op)));
  if (params->index() != want)
    return bad(fmt::format("node \"{}\" ({}) has {}; {} takes {}", node, name(op), kParamsNames[params->index()],
                           name(op), kParamsNames[want]));
  return {};
}

std::string value_ref(const Value& v) { return fmt::format("value \"{}\" (id {})", v.name, v.id); }

// The live node producing value v per its producer field, or -1.
int live_producer(const Graph& g, int v) {
  if (v < 0) return -1;
  const int p = g.value(v).producer;
  return g.valid_node(p) && !g.node(p).dead ? p : -1;
}

// Every id stored in the graph is in range. Building guarantees it; direct edits may not, and
// everything after this check indexes by those ids.
Status check_refs(const Graph& g) {
  const auto ok = [&](int v, bool allow_omitted) { return (v == -1 && allow_omitted) || g.valid_value(v); };
  const auto fail = [&](const std::string& what, int v) {
    return bad(fmt::format("{} refers to value id {} (graph has {} values)", what, v, g.values().size()));
  };
  for (const Node& n : g.nodes()) {
    if (n.dead) continue;
    for (std::size_t i = 0; i < n.inputs.size(); ++i)
      if (!ok(n.inputs[i], true)) return fail(fmt::format("node \"{}\" input {}", n.name, i), n.inputs[i]);
    for (std::size_t i = 0; i < n.outputs.size(); ++i)
      if (!ok(n.outputs[i], false)) return fail(fmt::format("node \"{}\" output {}", n.name, i), n.outputs[i]);
  }
  for (std::size_t i = 0; i < g.inputs().size(); ++i)
    if (!ok(g.inputs()[i], false)) return fail(fmt::format("graph input {}", i), g.inputs()[i]);
  for (std::size_t i = 0; i < g.outputs().size(); ++i)
    if (!ok(g.outputs()[i], false)) return fail(fmt::format("graph output {}", i), g.outputs()[i]);
  for (const Value& v : g.values())
    if (v.producer != -1 && !g.valid_node(v.producer))
      return bad(
          fmt::format("{} names producer node id {} (graph has {} nodes)", value_ref(v), v.producer, g.nodes().size()));
  return {};
}

// ---- printing helpers ----------------------------------------------------------------------

std::string pair(std::string_view tag, std::int64_t a, std::int64_t b) {
  return a == b ? fmt::format("{}{}", tag, a) : fmt::format("{}{}x{}", tag, a, b);
}

std::string pads(std::int64_t t, std::int64_t l, std::int64_t b, std::int64_t r) {
  return t == l && l == b && b == r ? fmt::format("p{}", t) : fmt::format("p{}_{}_{}_{}", t, l, b, r);
}

std::string act_str(const Activation& a) {
  switch (a.kind) {
    case ActKind::clip:
      return a.alpha == 0.f && a.beta == 6.f ? "relu6" : fmt::format("clip{:g}_{:g}", a.alpha, a.beta);
    case ActKind::leaky_relu: return fmt::format("leaky_relu{:g}", a.alpha);
    case ActKind::linear: return fmt::format("linear{:g}_{:g}", a.alpha, a.beta);
    default: return std::string(act_name(a.kind));
  }
}

// "+bn+add+relu", "+maxpool3s2p1": the chain the node's kernel runs after its main loop.
std::string post_ops_str(const PostOps& post_ops) {
  std::string s;
  for (const PostOp& p : post_ops) {
    switch (p.kind) {
      case PostOp::Kind::batchnorm: s += "+bn"; break;
      case PostOp::Kind::binary: s += fmt::format("+{}", binary_name(p.binary)); break;
      case PostOp::Kind::activation: s += fmt::format("+{}", act_str(p.act)); break;
      case PostOp::Kind::pool: {
        const PostOp::Window& w = p.window;
        s += fmt::format("+{}{}{}", pair("maxpool", w.kernel_h, w.kernel_w), pair("s", w.stride_h, w.stride_w),
                         pads(w.pad_top, w.pad_left, w.pad_bottom, w.pad_right));
        break;
      }
    }
  }
  return s;
}

// The parameters that distinguish this node from another of its op, space separated.
std::vector<std::string> key_params(const Graph& g, const Node& n, OpKind op) {
  std::vector<std::string> t;
  const auto flag = [&](bool on, const char* s) {
    if (on) t.emplace_back(s);
  };
  const auto chain = [&](bool bias, const PostOps& post) {
    const std::string s = fmt::format("{}{}", bias ? "+bias" : "", post_ops_str(post));
    if (!s.empty()) t.push_back(s);
  };
  const OpParams& params = *n.params;
  switch (op) {
    case OpKind::gemm: {
      const auto& p = std::get<GemmParams>(params);
      flag(p.trans_a, "ta");
      flag(p.trans_b, "tb");
      if (p.alpha != 1.f) t.push_back(fmt::format("alpha{:g}", p.alpha));
      if (p.beta != 0.f) t.push_back(fmt::format("beta{:g}", p.beta));
      chain(p.has_bias, p.post_ops);
      break;
    }
    case OpKind::conv2d: {
      const auto& p = std::get<Conv2dParams>(params);
      // The kernel size lives in the weight's dims (K, C/groups, R, S), not in the params.
      const int w = n.inputs.size() > 1 ? n.inputs[1] : -1;
      const bool known = g.valid_value(w) && g.value(w).has_shape && g.value(w).dims.size() == 4;
      t.push_back(known ? fmt::format("k{}", to_string(Dims(g.value(w).dims.begin() + 2, g.value(w).dims.end())))
                        : "k?");
      t.push_back(pair("s", p.stride_h, p.stride_w));
      t.push_back(pads(p.pad_top, p.pad_left, p.pad_bottom, p.pad_right));
      if (p.dilation_h != 1 || p.dilation_w != 1) t.push_back(pair("d", p.dilation_h, p.dilation_w));
      t.push_back(fmt::format("g{}", p.groups));
      chain(p.has_bias, p.post_ops);
      break;
    }
    case OpKind::batchnorm: t.push_back(fmt::format("eps{:g}", std::get<BatchnormParams>(params).epsilon)); break;
    case OpKind::maxpool2d:
    case OpKind::avgpool2d: {
      const auto& p = std::get<Pool2dParams>(params);
      t.push_back(fmt::format("k{}x{}", p.kernel_h, p.kernel_w));  // a window reads as RxS, like a conv kernel
      t.push_back(pair("s", p.stride_h, p.stride_w));
      t.push_back(pads(p.pad_top, p.pad_left, p.pad_bottom, p.pad_right));
      if (op == OpKind::maxpool2d && (p.dilation_h != 1 || p.dilation_w != 1))
        t.push_back(pair("d", p.dilation_h, p.dilation_w));
      flag(p.ceil_mode, "ceil");
      flag(op == OpKind::avgpool2d && p.count_include_pad, "incpad");
      break;
    }
    case OpKind::softmax: {
      const auto& p = std::get<SoftmaxParams>(params);
      t.push_back(fmt::format("axis{}", p.axis));
      if (p.scale != 1.f) t.push_back(fmt::format("scale{:g}", p.scale));
      flag(p.has_mask, "+mask");
      break;
    }
    case OpKind::layernorm:
    case OpKind::rmsnorm: {
      const auto& p = std::get<NormParams>(params);
      t.push_back(fmt::format("axis{}", p.axis));
      t.push_back(fmt::format("eps{:g}", p.epsilon));
      flag(op == OpKind::layernorm && !p.has_bias, "nobias");
      if (p.has_residual) t.push_back(p.write_sum ? "+residual+sum" : "+residual");
      break;
    }
    case OpKind::attention: {
      const auto& p = std::get<AttentionParams>(params);
      if (p.scale != 0.f) t.push_back(fmt::format("scale{:g}", p.scale));
      flag(p.has_mask, "+mask");
      flag(p.causal, "+causal");
      flag(p.packed_qkv, "+packed_qkv");
      break;
    }
    case OpKind::inverted_residual: {
      const auto& p = std::get<InvertedResidualParams>(params);
      t.push_back(fmt::format("s{}", p.stride));
      flag(!p.has_expand, "noexpand");
      flag(p.residual, "+res");
      break;
    }
    case OpKind::eltwise_chain: {
      std::string s;
      for (const ChainStep& st : std::get<ChainParams>(params).steps)
        join(s, "+", st.kind == ChainStep::Kind::unary ? act_str(st.act) : std::string(binary_name(st.binary)));
      t.push_back(s.empty() ? "(empty)" : s);
      break;
    }
    default:
      // A unary op shows its activation only where the op name does not say it all (relu6, a
      // leaky slope, gelu's tanh form); binary ops and global_avgpool have nothing to show.
      if (is_unary(op)) {
        const std::string a = act_str(std::get<UnaryParams>(params).act);
        if (a != name(n.op) && a != "gelu_erf") t.push_back(a);
      }
      break;
  }
  return t;
}

std::string key_attrs(const Graph& g, const Node& n) {
  std::vector<std::string> t;
  if (const auto op = registry_op(n.op); op && n.params)
    t = key_params(g, n, *op);
  else
    for (const auto& [k, v] : n.attrs) t.push_back(k + "=" + to_string(v));
  std::string s;
  for (const std::string& x : t) join(s, " ", x);
  return s;
}

// "w[64x3x7x7]", "ids[batchx128 i64]", "y[1x64x56x56 nhwc]", "t[?]" (no shape yet), "-" (omitted).
std::string value_label(const Graph& g, int id) {
  if (id < 0) return "-";
  if (!g.valid_value(id)) return fmt::format("<value id {}>", id);
  const Value& v = g.value(id);
  std::string s = v.name + "[" + (v.has_shape ? to_string(v.dims) : "?");
  if (v.dtype != DType::f32) s += fmt::format(" {}", name(v.dtype));
  if (v.layout == Layout::nhwc) s += " nhwc";
  return s + "]";
}

}  // namespace

// ---- dtypes, dims, ops, attributes ---------------------------------------------------------

std::string_view name(DType dtype) noexcept {
  switch (dtype) {
    case DType::f32: return "f32";
    case DType::i64: return "i64";
    case DType::boolean: return "bool";
  }
  return "unknown";
}

bool all_static(const Dims& dims) noexcept {
  return std::all_of(dims.begin(), dims.end(), [](const Dim& d) { return d.is_static(); });
}

Result<Shape> to_shape(const Dims& dims, std::string_view what) {
  if (dims.size() > static_cast<std::size_t>(kMaxRank))
    return bad(fmt::format("{} has rank {}; a Shape holds at most {} (dims {})", what, dims.size(), kMaxRank,
                           to_string(dims)));
  Shape s;
  s.rank = static_cast<int>(dims.size());
  for (int i = 0; i < s.rank; ++i) {
    const Dim& d = dims[static_cast<std::size_t>(i)];
    if (!d.is_static())
      return bad(fmt::format("{} dim {} is symbolic \"{}\" (dims {}); bind it to a size first", what, i,
                             d.symbol.empty() ? "?" : d.symbol, to_string(dims)));
    s[i] = d.value;
  }
  return s;
}

Dims dims_of(const Shape& shape) {
  Dims d;
  for (int i = 0; i < shape.rank; ++i) d.emplace_back(shape[i]);
  return d;
}

std::string to_string(const Dims& dims) {
  if (dims.empty()) return "scalar";
  std::string s;
  for (const Dim& d : dims) join(s, "x", d.is_static() ? std::to_string(d.value) : d.symbol.empty() ? "?" : d.symbol);
  return s;
}

std::size_t Value::payload_bytes() const noexcept {
  return (f32_data ? f32_data->size() * sizeof(float) : 0) + (i64_data ? i64_data->size() * sizeof(std::int64_t) : 0);
}

std::string_view name(NodeOp op) noexcept {
  const auto i = static_cast<std::size_t>(op);
  return i < std::size(kNodeOpNames) ? kNodeOpNames[i] : std::string_view("unknown");
}

std::optional<NodeOp> node_op_from_name(std::string_view name) noexcept {
  for (std::size_t i = 0; i < std::size(kNodeOpNames); ++i)
    if (kNodeOpNames[i] == name) return static_cast<NodeOp>(i);
  return std::nullopt;
}

std::optional<OpKind> registry_op(NodeOp op) noexcept {
  if (static_cast<int>(op) >= kOpCount) return std::nullopt;
  return static_cast<OpKind>(op);
}

NodeOp node_op(OpKind op) noexcept { return static_cast<NodeOp>(op); }

std::string to_string(const Attr& attr) {
  const auto list = [](const auto& xs) {
    std::string s;
    for (const auto& x : xs) s += fmt::format("{}{}", s.empty() ? "" : ",", x);
    return s.empty() ? std::string("[]") : s;
  };
  if (const auto* i = std::get_if<std::int64_t>(&attr)) return std::to_string(*i);
  if (const auto* f = std::get_if<float>(&attr)) return fmt::format("{:g}", *f);
  if (const auto* s = std::get_if<std::string>(&attr)) return *s;
  if (const auto* is = std::get_if<std::vector<std::int64_t>>(&attr)) return list(*is);
  return list(std::get<std::vector<float>>(attr));
}

// ---- building and editing ------------------------------------------------------------------

Result<int> Graph::push_value(Value v) {
  if (v.name.empty()) return bad(fmt::format("value id {} needs a name", values_.size()));
  if (const auto it = value_index_.find(v.name); it != value_index_.end())
    return bad(fmt::format("value name \"{}\" is taken (value id {})", v.name, it->second));
  v.id = static_cast<int>(values_.size());
  value_index_.emplace(v.name, v.id);
  values_.push_back(std::move(v));
  return values_.back().id;
}

Result<int> Graph::add_value(std::string name, DType dtype, std::optional<Dims> dims) {
  Value v;
  v.name = std::move(name);
  v.dtype = dtype;
  v.has_shape = dims.has_value();
  v.dims = std::move(dims).value_or(Dims{});
  return push_value(std::move(v));
}

namespace {
// A value with known dims: a graph input or a constant.
Value shaped_value(std::string name, DType dtype, Dims dims, ValueKind kind) {
  Value v;
  v.name = std::move(name);
  v.dtype = dtype;
  v.has_shape = true;
  v.dims = std::move(dims);
  v.kind = kind;
  return v;
}
}  // namespace

Result<int> Graph::add_input(std::string name, DType dtype, Dims dims) {
  Value v = shaped_value(std::move(name), dtype, std::move(dims), ValueKind::input);
  Result<int> id = push_value(std::move(v));
  if (id) inputs_.push_back(*id);
  return id;
}

Result<int> Graph::add_initializer(std::string name, Dims dims, std::vector<float> data) {
  if (Status s = check_payload(name, dims, data.size()); !s) return s;
  Value v = shaped_value(std::move(name), DType::f32, std::move(dims), ValueKind::constant);
  v.f32_data = std::make_shared<const std::vector<float>>(std::move(data));
  return push_value(std::move(v));
}

Result<int> Graph::add_initializer(std::string name, Dims dims, std::vector<std::int64_t> data, DType dtype) {
  if (dtype == DType::f32) return bad(fmt::format("constant \"{}\" is f32 but holds int64 data", name));
  if (Status s = check_payload(name, dims, data.size()); !s) return s;
  if (dtype == DType::boolean)
    for (std::int64_t x : data)
      if (x != 0 && x != 1) return bad(fmt::format("constant \"{}\" is bool but holds {}", name, x));
  Value v = shaped_value(std::move(name), dtype, std::move(dims), ValueKind::constant);
  v.i64_data = std::make_shared<const std::vector<std::int64_t>>(std::move(data));
  return push_value(std::move(v));
}

Status Graph::check_value_ref(const std::string& what, int id, bool allow_omitted) const {
  if ((id == -1 && allow_omitted) || valid_value(id)) return {};
  return bad(fmt::format("{} refers to value id {} (graph has {} values)", what, id, values_.size()));
}

Result<int> Graph::add_node(NodeOp op, std::string name, std::vector<int> inputs, std::vector<int> outputs,
                            std::optional<OpParams> params, std::map<std::string, Attr> attrs) {
  const int id = static_cast<int>(nodes_.size());
  if (static_cast<int>(op) >= kNodeOpCount) return bad(fmt::format("node id {} has op {}", id, static_cast<int>(op)));
  if (name.empty()) return bad(fmt::format("node id {} ({}) needs a name", id, graph::name(op)));
  if (outputs.empty()) return bad(fmt::format("node \"{}\" ({}) has no outputs", name, graph::name(op)));
  for (std::size_t i = 0; i < inputs.size(); ++i)
    if (Status s = check_value_ref(fmt::format("node \"{}\" input {}", name, i), inputs[i], true); !s) return s;
  for (std::size_t i = 0; i < outputs.size(); ++i)
    if (Status s = check_value_ref(fmt::format("node \"{}\" output {}", name, i), outputs[i], false); !s) return s;
  if (const auto kind = registry_op(op); kind && !params) params = default_params(*kind);
  if (Status s = check_params(name, op, params); !s) return s;
  for (int v : outputs) values_[static_cast<std::size_t>(v)].producer = id;
  nodes_.push_back(Node{id,
                        std::move(name),
                        op,
                        std::move(params),
                        std::move(attrs),
                        std::move(inputs),
                        std::move(outputs),
                        false,
                        {},
                        {},
                        {}});
  return id;
}

Status Graph::set_outputs(std::vector<int> outputs) {
  for (std::size_t i = 0; i < outputs.size(); ++i)
    if (Status s = check_value_ref(fmt::format("graph output {}", i), outputs[i], false); !s) return s;
  outputs_ = std::move(outputs);
  return {};
}

Status Graph::set_input(int node, int slot, int value) {
  if (!valid_node(node) || nodes_[static_cast<std::size_t>(node)].dead)
    return bad(fmt::format("set_input: node id {} is not a live node", node));
  Node& n = nodes_[static_cast<std::size_t>(node)];
  if (slot < 0 || slot >= static_cast<int>(n.inputs.size()))
    return bad(fmt::format("set_input: node \"{}\" has {} inputs, no input {}", n.name, n.inputs.size(), slot));
  if (Status s = check_value_ref(fmt::format("node \"{}\" input {}", n.name, slot), value, true); !s) return s;
  n.inputs[static_cast<std::size_t>(slot)] = value;
  return {};
}

Result<int> Graph::replace_all_uses(int old_value, int new_value) {
  if (Status s = check_value_ref("replace_all_uses: the old value", old_value, false); !s) return s;
  if (Status s = check_value_ref("replace_all_uses: the new value", new_value, false); !s) return s;
  int replaced = 0;
  for (Node& n : nodes_) {
    if (n.dead) continue;
    for (int& v : n.inputs)
      if (v == old_value) {
        v = new_value;
        ++replaced;
      }
  }
  for (int& v : outputs_)
    if (v == old_value) {
      v = new_value;
      ++replaced;
    }
  return replaced;
}

Status Graph::set_output(int node, int slot, int value) {
  if (!valid_node(node) || nodes_[static_cast<std::size_t>(node)].dead)
    return bad(fmt::format("set_output: node id {} is not a live node", node));
  Node& n = nodes_[static_cast<std::size_t>(node)];
  if (slot < 0 || slot >= static_cast<int>(n.outputs.size()))
    return bad(fmt::format("set_output: node \"{}\" has {} outputs, no output {}", n.name, n.outputs.size(), slot));
  if (Status s = check_value_ref(fmt::format("set_output: node \"{}\" output {}", n.name, slot), value, false); !s)
    return s;
  Value& old = values_[static_cast<std::size_t>(n.outputs[static_cast<std::size_t>(slot)])];
  if (old.producer == node) old.producer = -1;
  n.outputs[static_cast<std::size_t>(slot)] = value;
  values_[static_cast<std::size_t>(value)].producer = node;
  return {};
}

Status Graph::remove_node(int node) {
  if (!valid_node(node) || nodes_[static_cast<std::size_t>(node)].dead)
    return bad(fmt::format("remove_node: node id {} is not a live node ({} nodes)", node, nodes_.size()));
  Node& n = nodes_[static_cast<std::size_t>(node)];
  n.dead = true;
  for (int v : n.outputs)
    if (values_[static_cast<std::size_t>(v)].producer == node) values_[static_cast<std::size_t>(v)].producer = -1;
  return {};
}

int Graph::live_node_count() const noexcept {
  return static_cast<int>(std::count_if(nodes_.begin(), nodes_.end(), [](const Node& n) { return !n.dead; }));
}

std::optional<int> Graph::find_value(std::string_view name) const {
  const auto it = value_index_.find(std::string(name));
  return it == value_index_.end() ? std::nullopt : std::optional<int>(it->second);
}

std::optional<int> Graph::find_node(std::string_view name) const {
  for (const Node& n : nodes_)
    if (!n.dead && n.name == name) return n.id;
  return std::nullopt;
}

std::vector<int> Graph::consumers(int value) const {
  std::vector<int> r;
  for (const Node& n : nodes_)
    if (!n.dead && std::find(n.inputs.begin(), n.inputs.end(), value) != n.inputs.end()) r.push_back(n.id);
  return r;
}

std::vector<std::vector<int>> Graph::consumer_lists() const {
  std::vector<std::vector<int>> r(values_.size());
  for (const Node& n : nodes_) {
    if (n.dead) continue;
    for (int v : n.inputs) {
      if (!valid_value(v)) continue;
      auto& list = r[static_cast<std::size_t>(v)];
      if (list.empty() || list.back() != n.id) list.push_back(n.id);  // nodes come in id order
    }
  }
  return r;
}

// ---- order and verification ----------------------------------------------------------------

Result<std::vector<int>> topological_order(const Graph& g) {
  if (Status s = check_refs(g); !s) return s;
  const std::size_t n = g.nodes().size();
  std::vector<int> waiting(n, 0);  // producer edges of each node not yet emitted
  std::vector<std::vector<int>> next(n);
  for (const Node& node : g.nodes()) {
    if (node.dead) continue;
    for (int v : node.inputs)
      if (const int p = live_producer(g, v); p >= 0) {
        ++waiting[static_cast<std::size_t>(node.id)];
        next[static_cast<std::size_t>(p)].push_back(node.id);
      }
  }
  std::priority_queue<int, std::vector<int>, std::greater<>> ready;
  for (const Node& node : g.nodes())
    if (!node.dead && waiting[static_cast<std::size_t>(node.id)] == 0) ready.push(node.id);
  std::vector<int> order;
  order.reserve(n);
  while (!ready.empty()) {
    const int id = ready.top();
    ready.pop();
    order.push_back(id);
    for (int c : next[static_cast<std::size_t>(id)])
      if (--waiting[static_cast<std::size_t>(c)] == 0) ready.push(c);
  }
  const int live = g.live_node_count();
  if (static_cast<int>(order.size()) == live) return order;

  // Every node left waits on a producer that is also left: follow those backwards until a node
  // repeats. The stretch of the walk from its first visit is a cycle (in reverse dataflow).
  int cur = -1;
  for (const Node& node : g.nodes())
    if (!node.dead && waiting[static_cast<std::size_t>(node.id)] > 0) {
      cur = node.id;
      break;
    }
  std::vector<int> seen_at(n, -1), walk;
  while (seen_at[static_cast<std::size_t>(cur)] < 0) {
    seen_at[static_cast<std::size_t>(cur)] = static_cast<int>(walk.size());
    walk.push_back(cur);
    for (int v : g.node(cur).inputs)
      if (const int p = live_producer(g, v); p >= 0 && waiting[static_cast<std::size_t>(p)] > 0) {
        cur = p;
        break;
      }
  }
  std::vector<int> cycle(walk.begin() + seen_at[static_cast<std::size_t>(cur)], walk.end());
  std::reverse(cycle.begin(), cycle.end());
  std::string names;
  constexpr std::size_t kShown = 8;  // a cycle through a whole model would drown the message
  for (std::size_t i = 0; i < cycle.size() && i < kShown; ++i)
    names += fmt::format("\"{}\" -> ", g.node(cycle[i]).name);
  names += cycle.size() > kShown ? fmt::format("... ({} nodes) -> ", cycle.size()) : "";
  names += fmt::format("\"{}\"", g.node(cycle.front()).name);
  return bad(fmt::format("cycle through nodes {}; {} of {} live nodes cannot be ordered", names,
                         static_cast<std::size_t>(live) - order.size(), live));
}

Status verify(const Graph& g) {
  if (Status s = check_refs(g); !s) return s;
  // Names: the name index keys values by name, and dumps and error messages key nodes by name.
  std::unordered_map<std::string_view, int> names;
  for (const Value& v : g.values()) {
    if (v.name.empty()) return bad(fmt::format("value id {} has no name", v.id));
    if (const auto [it, fresh] = names.emplace(v.name, v.id); !fresh)
      return bad(fmt::format("value name \"{}\" is used by value ids {} and {}", v.name, it->second, v.id));
  }
  for (const Value& v : g.values()) {
    if (!v.is_constant()) continue;
    const auto* f = v.f32_data.get();
    const auto* i = v.i64_data.get();
    if ((v.dtype == DType::f32 && !f) || (v.dtype != DType::f32 && !i))
      return bad(fmt::format("constant {} ({}) has no {} payload", value_ref(v), name(v.dtype),
                             v.dtype == DType::f32 ? "f32" : "int64"));
    if (v.has_shape)
      if (Status s = check_payload(v.name, v.dims, f ? f->size() : i->size()); !s) return s;
  }
  for (int id : g.inputs())
    if (g.value(id).kind != ValueKind::input)
      return bad(fmt::format("graph input {} is not of kind input", value_ref(g.value(id))));

  // Producers: one live node per intermediate, none for inputs and constants.
  names.clear();
  std::vector<int> producer(g.values().size(), -1);
  for (const Node& n : g.nodes()) {
    if (n.dead) continue;
    if (n.name.empty()) return bad(fmt::format("node id {} ({}) has no name", n.id, name(n.op)));
    if (const auto [it, fresh] = names.emplace(n.name, n.id); !fresh)
      return bad(fmt::format("node name \"{}\" is used by node ids {} and {}", n.name, it->second, n.id));
    if (Status s = check_params(n.name, n.op, n.params); !s) return s;
    for (std::size_t k = 0; k < n.outputs.size(); ++k) {
      const Value& v = g.value(n.outputs[k]);
      if (v.kind != ValueKind::intermediate)
        return bad(fmt::format("node \"{}\" output {} is {}, a graph {}; nodes produce intermediates only", n.name, k,
                               value_ref(v), v.kind == ValueKind::input ? "input" : "constant"));
      int& p = producer[static_cast<std::size_t>(v.id)];
      if (p >= 0)
        return bad(fmt::format("{} is produced twice: by node \"{}\" and by node \"{}\"", value_ref(v), g.node(p).name,
                               n.name));
      p = n.id;
    }
  }
  for (const Value& v : g.values())
    if (v.kind == ValueKind::intermediate && live_producer(g, v.id) != producer[static_cast<std::size_t>(v.id)])
      return bad(
          fmt::format("{} names producer node id {} but is output by node id {} (outputs changed outside "
                      "add_node / remove_node)",
                      value_ref(v), v.producer, producer[static_cast<std::size_t>(v.id)]));

  // Availability: everything read exists before the graph runs or is produced by a live node.
  const auto available = [&](int v) {
    return g.value(v).kind != ValueKind::intermediate || producer[static_cast<std::size_t>(v)] >= 0;
  };
  for (const Node& n : g.nodes()) {
    if (n.dead) continue;
    for (std::size_t k = 0; k < n.inputs.size(); ++k)
      if (n.inputs[k] >= 0 && !available(n.inputs[k]))
        return bad(
            fmt::format("node \"{}\" input {} is {}, which no live node produces and which is not a graph "
                        "input or constant",
                        n.name, k, value_ref(g.value(n.inputs[k]))));
  }
  if (g.outputs().empty()) return bad("the graph has no outputs");
  for (std::size_t k = 0; k < g.outputs().size(); ++k)
    if (!available(g.outputs()[k]))
      return bad(
          fmt::format("graph output {} is {}, which no live node produces and which is not a graph input or "
                      "constant",
                      k, value_ref(g.value(g.outputs()[k]))));

  const auto order = topological_order(g);
  return order ? Status::ok() : order.status();
}

Result<OpDesc> op_desc(const Graph& g, int node) {
  if (!g.valid_node(node) || g.node(node).dead) return bad(fmt::format("op_desc: node id {} is not a live node", node));
  const Node& n = g.node(node);
  const auto kind = registry_op(n.op);
  if (!kind || !n.params) return bad(fmt::format("node \"{}\" ({}) is not a registry op", n.name, name(n.op)));
  OpDesc d;
  d.op = *kind;
  d.params = *n.params;
  for (std::size_t k = 0; k < n.inputs.size(); ++k) {
    const std::string what = fmt::format("node \"{}\" input {}", n.name, k);
    if (!g.valid_value(n.inputs[k]))
      return bad(what + " is omitted; a registry op's inputs are positional, its params say which exist");
    const Value& v = g.value(n.inputs[k]);
    if (v.dtype != DType::f32) return bad(fmt::format("{} ({}) is {}; kernels take f32", what, v.name, name(v.dtype)));
    if (!v.has_shape) return bad(fmt::format("{} ({}) has no shape yet", what, v.name));
    Result<Shape> s = to_shape(v.dims, fmt::format("{} (value \"{}\")", what, v.name));
    if (!s) return s.status();
    d.inputs.push_back(TensorDesc{*s, v.layout});
  }
  return d;
}

// ---- printing ------------------------------------------------------------------------------

void print(const Graph& g, std::ostream& os) {
  const Result<std::vector<int>> sorted = topological_order(g);
  std::vector<int> order;
  if (sorted) {
    order = *sorted;
  } else {
    for (const Node& n : g.nodes())
      if (!n.dead) order.push_back(n.id);
  }
  std::size_t width = 0;
  for (int id : order) width = std::max(width, g.node(id).name.size());
  for (int id : order) {
    const Node& n = g.node(id);
    std::string line = fmt::format("{:<{}}  {}", n.name, width, name(n.op));
    if (std::string a = key_attrs(g, n); !a.empty()) line += fmt::format(" {}", a);
    line += " ";
    for (int v : n.inputs) line += fmt::format(" {}", value_label(g, v));
    line += " ->";
    for (int v : n.outputs) line += fmt::format(" {}", value_label(g, v));
    os << line << '\n';
  }

  // Counts cover what the graph still uses: a rewrite leaves replaced values and folded-away
  // weights behind in the vectors, and they should not inflate the footer.
  std::vector<bool> used(g.values().size(), false);
  const auto mark = [&](int v) {
    if (g.valid_value(v)) used[static_cast<std::size_t>(v)] = true;
  };
  for (const Node& n : g.nodes()) {
    if (n.dead) continue;
    for (int v : n.inputs) mark(v);
    for (int v : n.outputs) mark(v);
  }
  for (int v : g.inputs()) mark(v);
  for (int v : g.outputs()) mark(v);
  std::size_t values = 0, constants = 0, bytes = 0;
  for (const Value& v : g.values()) {
    if (!used[static_cast<std::size_t>(v.id)]) continue;
    ++values;
    if (v.is_constant()) {
      ++constants;
      bytes += v.payload_bytes();
    }
  }
  const auto names = [&](const std::vector<int>& ids) {
    std::string s;
    for (int v : ids) join(s, ", ", g.valid_value(v) ? g.value(v).name : "?");
    return s;
  };
  os << fmt::format("# {} nodes, {} values, {} initializers ({} bytes); inputs: {}; outputs: {}\n", order.size(),
                    values, constants, bytes, names(g.inputs()), names(g.outputs()));
  if (!sorted) os << "# not in topological order: " << sorted.status().message() << '\n';
}

std::string to_string(const Graph& g) {
  std::ostringstream os;
  print(g, os);
  return os.str();
}

// ---- DOT -----------------------------------------------------------------------------------

namespace {

// A DOT string literal's body: quotes and backslashes escaped.
std::string dot_escape(const std::string& x) {
  std::string r;
  for (char c : x) {
    if (c == '"' || c == '\\') r += '\\';
    r += c;
  }
  return r;
}

}  // namespace

std::string to_dot(const Graph& g, const std::vector<DotCluster>& clusters) {
  std::string s =
      fmt::format("digraph \"{}\" {{\n  rankdir=TB;\n  node [shape=box, fontsize=10];\n", dot_escape(g.name()));
  std::vector<int> in_cluster(g.nodes().size(), -1);
  for (std::size_t c = 0; c < clusters.size(); ++c)
    for (int id : clusters[c].nodes)
      if (g.valid_node(id)) in_cluster[static_cast<std::size_t>(id)] = static_cast<int>(c);
  const auto node_line = [&](const Node& n) {
    std::string label = fmt::format("{}\\n{}", dot_escape(n.name), name(n.op));
    if (std::string a = key_attrs(g, n); !a.empty()) label += "\\n" + dot_escape(a);
    return fmt::format("    n{} [label=\"{}\"];\n", n.id, label);
  };
  for (std::size_t c = 0; c < clusters.size(); ++c) {
    s += fmt::format("  subgraph cluster_{} {{\n    label=\"{}\"; style=filled; color=lightblue;\n", c,
                     dot_escape(clusters[c].label));
    for (int id : clusters[c].nodes)
      if (g.valid_node(id) && !g.node(id).dead) s += node_line(g.node(id));
    s += "  }\n";
  }
  for (const Node& n : g.nodes())
    if (!n.dead && in_cluster[static_cast<std::size_t>(n.id)] < 0) s += node_line(n).substr(2);
  for (int v : g.inputs()) s += fmt::format("  v{} [shape=ellipse, label=\"{}\"];\n", v, dot_escape(value_label(g, v)));
  for (int v : g.outputs())
    s += fmt::format("  o{} [shape=ellipse, label=\"{}\"];\n", v, dot_escape(value_label(g, v)));
  for (const Node& n : g.nodes()) {
    if (n.dead) continue;
    for (int v : n.inputs) {
      if (v < 0 || g.value(v).is_constant()) continue;
      const Value& x = g.value(v);
      const std::string dims = x.has_shape ? to_string(x.dims) : "?";
      if (x.producer >= 0)
        s += fmt::format("  n{} -> n{} [label=\"{}\", fontsize=8];\n", x.producer, n.id, dims);
      else if (x.kind == ValueKind::input)
        s += fmt::format("  v{} -> n{};\n", v, n.id);
    }
  }
  for (int v : g.outputs())
    if (g.value(v).producer >= 0) s += fmt::format("  n{} -> o{};\n", g.value(v).producer, v);
  s += "}\n";
  return s;
}

}  // namespace opfuse::graph
