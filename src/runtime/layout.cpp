// src/runtime/layout.cpp - where each activation lives in memory, NCHW or NHWC.
//
// The simd and fused convolutions work channels-last: their general kernel computes in NHWC
// and, handed NCHW, transposes x in and y out inside every call (simd/conv.cpp). Across a
// network that is two full passes over every activation per convolution. So at those stages
// every 4-D activation a convolution reads is NHWC, and the ops between convolutions (batch
// norm, activations, residual adds, pooling) follow the layout of their input, since their
// kernels take either. A conversion is inserted only where a value meets a consumer that needs
// the other layout - the graph input before the first convolution, a flatten or reshape after
// the last, a graph output - and it is a layout_convert node that --dump-graph shows. One value
// converted for several consumers is converted once. Where C == 1 or H * W == 1 the two layouts
// are the same bytes and the conversion runs as a view (the global-pool output before flatten).
//
// The naive stage keeps everything NCHW: its kernels read through strides, so converting would
// only add passes.
#include <fmt/format.h>

#include <map>

#include "runtime.hpp"

namespace opfuse::runtime {

using graph::DType;
using graph::Graph;
using graph::Node;
using graph::NodeOp;
using graph::Value;

namespace {

bool is_activation_4d(const Value& v) { return v.dtype == DType::f32 && v.dims.size() == 4 && !v.is_constant(); }

// The inputs of a registry op that are activations in the op's layout (the rest - weights,
// per-channel vectors - are not laid out by channel position).
std::vector<std::size_t> layout_inputs(const Node& n) {
  switch (n.op) {
    case NodeOp::conv2d:
    case NodeOp::batchnorm:
    case NodeOp::relu:
    case NodeOp::clip:
    case NodeOp::leaky_relu:
    case NodeOp::sigmoid:
    case NodeOp::tanh:
    case NodeOp::gelu:
    case NodeOp::silu:
    case NodeOp::hardswish:
    case NodeOp::maxpool2d:
    case NodeOp::avgpool2d:
    case NodeOp::global_avgpool:
    case NodeOp::eltwise_chain:
    case NodeOp::inverted_residual: return {0};
    case NodeOp::add:
    case NodeOp::sub:
    case NodeOp::mul:
    case NodeOp::div: return {0, 1};
    default: return {};
  }
}

// Post-op operands (residual adds) of a conv2d or an eltwise_chain's binary operands are laid
// out like the output.
void add_operand_inputs(const Graph& g, const Node& n, std::vector<std::size_t>& slots) {
  if (n.op != NodeOp::conv2d && n.op != NodeOp::eltwise_chain) return;
  const std::size_t first = n.op == NodeOp::conv2d ? (std::get<Conv2dParams>(*n.params).has_bias ? 3 : 2) : 1;
  for (std::size_t k = first; k < n.inputs.size(); ++k)
    if (n.inputs[k] >= 0 && g.value(n.inputs[k]).dims.size() == 4) slots.push_back(k);
}

}  // namespace

Status plan_layouts(Graph& g, Stage stage) {
  if (stage == Stage::naive) return Status::ok();
  auto order = topological_order(g);
  if (!order) return order.status();
  // (value, layout) -> the converted value, so several consumers share one conversion.
  std::map<std::pair<int, Layout>, int> converted;
  int counter = 0;
  auto convert = [&](int value, Layout to) -> Result<int> {
    if (g.value(value).layout == to) return value;
    const auto key = std::make_pair(value, to);
    if (auto it = converted.find(key); it != converted.end()) return it->second;
    const Value src = g.value(value);
    auto v = g.add_value(fmt::format("{}.{}", src.name, to_string(to)), DType::f32, src.dims);
    if (!v) return v.status();
    g.value(*v).layout = to;
    auto node = g.add_node(NodeOp::layout_convert, fmt::format("to_{}_{}", to_string(to), counter++), {value}, {*v},
                           std::nullopt, {{"to", std::string(to_string(to))}});
    if (!node) return node.status();
    converted[key] = *v;
    return *v;
  };
  for (int id : *order) {
    const Node n = g.node(id);
    if (n.dead) continue;
    const bool registry = runs_on_registry(g, n);
    std::vector<std::size_t> slots = registry ? layout_inputs(n) : std::vector<std::size_t>{};
    if (registry) add_operand_inputs(g, n, slots);
    // The layout this node runs in: NHWC for a convolution over a 4-D input, else the layout of
    // its first 4-D activation input (ops between convolutions follow them).
    Layout target = Layout::nchw;
    bool has_4d = false;
    for (std::size_t k : slots) {
      const Value& v = g.value(n.inputs[k]);
      if (v.dims.size() != 4) continue;
      if (!has_4d) target = n.op == NodeOp::conv2d ? Layout::nhwc : v.layout;
      has_4d = true;
    }
    if (registry && has_4d) {
      for (std::size_t k : slots) {
        const Value& v = g.value(n.inputs[k]);
        if (v.dims.size() != 4 || v.is_constant() || v.layout == target) continue;
        auto c = convert(n.inputs[k], target);
        if (!c) return c.status();
        if (Status s = g.set_input(id, static_cast<int>(k), *c); !s) return s;
      }
      for (int out : n.outputs)
        if (g.value(out).dims.size() == 4) g.value(out).layout = target;
      continue;
    }
    // Everything else reads NCHW.
    for (std::size_t k = 0; k < n.inputs.size(); ++k) {
      if (n.inputs[k] < 0) continue;
      const Value& v = g.value(n.inputs[k]);
      if (!is_activation_4d(v) || v.layout == Layout::nchw) continue;
      auto c = convert(n.inputs[k], Layout::nchw);
      if (!c) return c.status();
      if (Status s = g.set_input(id, static_cast<int>(k), *c); !s) return s;
    }
  }
  // Graph outputs leave NCHW: the producer now writes "<name>.nhwc" and a conversion writes the
  // output under its own name.
  for (std::size_t i = 0; i < g.outputs().size(); ++i) {
    const int out = g.outputs()[i];
    Value& v = g.value(out);
    if (v.layout == Layout::nchw || v.producer < 0) continue;
    const Value src = v;
    auto inner = g.add_value(fmt::format("{}.nhwc", src.name), DType::f32, src.dims);
    if (!inner) return inner.status();
    g.value(*inner).layout = Layout::nhwc;
    const Node& p = g.node(src.producer);
    int slot = 0;
    while (p.outputs[static_cast<std::size_t>(slot)] != out) ++slot;
    const int producer = src.producer;
    if (Status s = g.set_output(producer, slot, *inner); !s) return s;
    // Other consumers of the output keep reading the NHWC value.
    for (int c : g.consumers(out))
      for (std::size_t k = 0; k < g.node(c).inputs.size(); ++k)
        if (g.node(c).inputs[k] == out) (void)g.set_input(c, static_cast<int>(k), *inner);
    auto node = g.add_node(NodeOp::layout_convert, fmt::format("to_nchw_out{}", i), {*inner}, {out}, std::nullopt,
                           {{"to", std::string("nchw")}});
    if (!node) return node.status();
    g.value(out).layout = Layout::nchw;
  }
  return verify(g);
}

}  // namespace opfuse::runtime
