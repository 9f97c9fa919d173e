// src/onnx/export.cpp - the graph IR as an ONNX model (see export.hpp).
#include "export.hpp"

#include <fmt/format.h>
#include <onnx/onnx_pb.h>

#include <cstring>
#include <map>
#include <set>
#include <variant>

namespace opfuse::onnx {

namespace {

using graph::DType;
using graph::Graph;
using graph::Node;
using graph::NodeOp;
using graph::Value;

// IR ops that are the ONNX op of this name with the same inputs and attributes.
const std::map<NodeOp, const char*>& standard_ops() {
  static const std::map<NodeOp, const char*> m = {
      {NodeOp::reshape, "Reshape"},   {NodeOp::transpose, "Transpose"},
      {NodeOp::concat, "Concat"},     {NodeOp::flatten, "Flatten"},
      {NodeOp::slice, "Slice"},       {NodeOp::gather, "Gather"},
      {NodeOp::squeeze, "Squeeze"},   {NodeOp::unsqueeze, "Unsqueeze"},
      {NodeOp::identity, "Identity"}, {NodeOp::expand, "Expand"},
      {NodeOp::matmul, "MatMul"},     {NodeOp::pow, "Pow"},
      {NodeOp::sqrt, "Sqrt"},         {NodeOp::erf, "Erf"},
      {NodeOp::where, "Where"},       {NodeOp::equal, "Equal"},
      {NodeOp::min, "Min"},           {NodeOp::max, "Max"},
      {NodeOp::add, "Add"},           {NodeOp::sub, "Sub"},
      {NodeOp::mul, "Mul"},           {NodeOp::div, "Div"},
      {NodeOp::relu, "Relu"},         {NodeOp::sigmoid, "Sigmoid"},
      {NodeOp::tanh, "Tanh"},         {NodeOp::global_avgpool, "GlobalAveragePool"},
  };
  return m;
}

int onnx_type(DType d) {
  switch (d) {
    case DType::f32: return ::onnx::TensorProto::FLOAT;
    case DType::i64: return ::onnx::TensorProto::INT64;
    case DType::boolean: return ::onnx::TensorProto::BOOL;
  }
  return ::onnx::TensorProto::UNDEFINED;
}

void set_ints(::onnx::NodeProto* n, const std::string& name, std::vector<std::int64_t> v) {
  auto* a = n->add_attribute();
  a->set_name(name);
  a->set_type(::onnx::AttributeProto::INTS);
  for (auto x : v) a->add_ints(x);
}
void set_int(::onnx::NodeProto* n, const std::string& name, std::int64_t v) {
  auto* a = n->add_attribute();
  a->set_name(name);
  a->set_type(::onnx::AttributeProto::INT);
  a->set_i(v);
}
void set_float(::onnx::NodeProto* n, const std::string& name, float v) {
  auto* a = n->add_attribute();
  a->set_name(name);
  a->set_type(::onnx::AttributeProto::FLOAT);
  a->set_f(v);
}
void set_strings(::onnx::NodeProto* n, const std::string& name, const std::vector<std::string>& v) {
  auto* a = n->add_attribute();
  a->set_name(name);
  a->set_type(::onnx::AttributeProto::STRINGS);
  for (const auto& x : v) a->add_strings(x);
}
void set_attr(::onnx::NodeProto* n, const std::string& name, const graph::Attr& v) {
  auto* a = n->add_attribute();
  a->set_name(name);
  if (const auto* i = std::get_if<std::int64_t>(&v)) {
    a->set_type(::onnx::AttributeProto::INT);
    a->set_i(*i);
  } else if (const auto* f = std::get_if<float>(&v)) {
    a->set_type(::onnx::AttributeProto::FLOAT);
    a->set_f(*f);
  } else if (const auto* s = std::get_if<std::string>(&v)) {
    a->set_type(::onnx::AttributeProto::STRING);
    a->set_s(*s);
  } else if (const auto* is = std::get_if<std::vector<std::int64_t>>(&v)) {
    a->set_type(::onnx::AttributeProto::INTS);
    for (auto x : *is) a->add_ints(x);
  } else if (const auto* fs = std::get_if<std::vector<float>>(&v)) {
    a->set_type(::onnx::AttributeProto::FLOATS);
    for (auto x : *fs) a->add_floats(x);
  }
}

std::string activation_string(const Activation& a) {
  std::string s(act_name(a.kind));
  if (a.kind == ActKind::clip || a.kind == ActKind::leaky_relu || a.kind == ActKind::linear)
    s += fmt::format("({},{})", a.alpha, a.beta);
  return s;
}

std::vector<std::string> post_op_strings(const PostOps& ops) {
  std::vector<std::string> r;
  for (const PostOp& p : ops) {
    switch (p.kind) {
      case PostOp::Kind::batchnorm: r.push_back(fmt::format("batchnorm(eps={})", p.epsilon)); break;
      case PostOp::Kind::binary: r.push_back(fmt::format("binary:{}", binary_name(p.binary))); break;
      case PostOp::Kind::activation: r.push_back("activation:" + activation_string(p.act)); break;
      case PostOp::Kind::pool: {
        const auto& w = p.window;
        r.push_back(fmt::format("maxpool:{}x{}/{}x{} pads {},{},{},{}", w.kernel_h, w.kernel_w, w.stride_h, w.stride_w,
                                w.pad_top, w.pad_left, w.pad_bottom, w.pad_right));
        break;
      }
    }
  }
  return r;
}

// The registry op's parameters as attributes.
void write_params(::onnx::NodeProto* n, const OpParams& params) {
  std::visit(
      [&](const auto& p) {
        using P = std::decay_t<decltype(p)>;
        if constexpr (std::is_same_v<P, GemmParams>) {
          set_float(n, "alpha", p.alpha);
          set_float(n, "beta", p.beta);
          set_int(n, "transA", p.trans_a);
          set_int(n, "transB", p.trans_b);
          set_int(n, "has_bias", p.has_bias);
          if (!p.post_ops.empty()) set_strings(n, "post_ops", post_op_strings(p.post_ops));
        } else if constexpr (std::is_same_v<P, Conv2dParams>) {
          set_ints(n, "strides", {p.stride_h, p.stride_w});
          set_ints(n, "dilations", {p.dilation_h, p.dilation_w});
          set_ints(n, "pads", {p.pad_top, p.pad_left, p.pad_bottom, p.pad_right});
          set_int(n, "group", p.groups);
          set_int(n, "has_bias", p.has_bias);
          if (!p.post_ops.empty()) set_strings(n, "post_ops", post_op_strings(p.post_ops));
        } else if constexpr (std::is_same_v<P, BatchnormParams>) {
          set_float(n, "epsilon", p.epsilon);
        } else if constexpr (std::is_same_v<P, UnaryParams>) {
          set_strings(n, "activation", {activation_string(p.act)});
        } else if constexpr (std::is_same_v<P, Pool2dParams>) {
          set_ints(n, "kernel_shape", {p.kernel_h, p.kernel_w});
          set_ints(n, "strides", {p.stride_h, p.stride_w});
          set_ints(n, "dilations", {p.dilation_h, p.dilation_w});
          set_ints(n, "pads", {p.pad_top, p.pad_left, p.pad_bottom, p.pad_right});
          set_int(n, "ceil_mode", p.ceil_mode);
          set_int(n, "count_include_pad", p.count_include_pad);
        } else if constexpr (std::is_same_v<P, SoftmaxParams>) {
          set_int(n, "axis", p.axis);
          set_float(n, "scale", p.scale);
          set_int(n, "has_mask", p.has_mask);
        } else if constexpr (std::is_same_v<P, NormParams>) {
          set_int(n, "axis", p.axis);
          set_float(n, "epsilon", p.epsilon);
          set_int(n, "has_bias", p.has_bias);
          set_int(n, "has_residual", p.has_residual);
          set_int(n, "write_sum", p.write_sum);
        } else if constexpr (std::is_same_v<P, AttentionParams>) {
          set_float(n, "scale", p.scale);
          set_int(n, "has_mask", p.has_mask);
          set_int(n, "causal", p.causal);
          set_int(n, "packed_qkv", p.packed_qkv);
        } else if constexpr (std::is_same_v<P, InvertedResidualParams>) {
          set_int(n, "has_expand", p.has_expand);
          set_int(n, "stride", p.stride);
          set_int(n, "residual", p.residual);
          set_float(n, "epsilon", p.epsilon);
        } else if constexpr (std::is_same_v<P, ChainParams>) {
          std::vector<std::string> steps;
          for (const ChainStep& st : p.steps)
            steps.push_back(st.kind == ChainStep::Kind::unary ? "unary:" + activation_string(st.act)
                                                              : fmt::format("binary:{}", binary_name(st.binary)));
          set_strings(n, "steps", steps);
        }
      },
      params);
}

void write_value_info(::onnx::ValueInfoProto* vi, const Value& v) {
  vi->set_name(v.name);
  auto* t = vi->mutable_type()->mutable_tensor_type();
  t->set_elem_type(onnx_type(v.dtype));
  auto* shape = t->mutable_shape();
  for (const graph::Dim& d : v.dims) {
    auto* dim = shape->add_dim();
    if (d.is_static())
      dim->set_dim_value(d.value);
    else
      dim->set_dim_param(d.symbol);
  }
}

}  // namespace

Result<std::string> export_graph(const Graph& g, std::int64_t opset) noexcept {
  try {
    ::onnx::ModelProto m;
    m.set_ir_version(8);
    m.set_producer_name("opfuse");
    auto* std_op = m.add_opset_import();
    std_op->set_domain("");
    std_op->set_version(opset > 0 ? opset : 17);
    auto* own = m.add_opset_import();
    own->set_domain("opfuse");
    own->set_version(1);
    ::onnx::GraphProto* gp = m.mutable_graph();
    gp->set_name(g.name());
    auto order = graph::topological_order(g);
    if (!order) return order.status();
    std::set<int> constants;
    for (int id : *order) {
      const Node& n = g.node(id);
      ::onnx::NodeProto* np = gp->add_node();
      np->set_name(n.name);
      const auto std_it = standard_ops().find(n.op);
      // A registry op keeps its ONNX name only without params beyond ONNX's (plain relu, add...).
      const bool plain_registry =
          n.params && (std::holds_alternative<BinaryParams>(*n.params) ||
                       (std::holds_alternative<UnaryParams>(*n.params) && n.op != NodeOp::clip &&
                        n.op != NodeOp::leaky_relu && n.op != NodeOp::gelu) ||
                       std::holds_alternative<GlobalPoolParams>(*n.params));
      if (std_it != standard_ops().end() && (!n.params || plain_registry)) {
        np->set_op_type(std_it->second);
      } else {
        np->set_domain("opfuse");
        np->set_op_type(std::string(graph::name(n.op)));
        if (n.params) write_params(np, *n.params);
      }
      for (const auto& [k, v] : n.attrs) set_attr(np, k, v);
      if (!n.fused_by.empty()) set_strings(np, "opfuse_fused_by", n.fused_by);
      for (int v : n.inputs) {
        np->add_input(v < 0 ? "" : g.value(v).name);
        if (v >= 0 && g.value(v).is_constant()) constants.insert(v);
      }
      for (int v : n.outputs) np->add_output(g.value(v).name);
    }
    for (int v : constants) {
      const Value& x = g.value(v);
      ::onnx::TensorProto* t = gp->add_initializer();
      t->set_name(x.name);
      t->set_data_type(onnx_type(x.dtype));
      for (const graph::Dim& d : x.dims) t->add_dims(d.value);
      std::string& raw = *t->mutable_raw_data();
      if (x.dtype == DType::f32 && x.f32_data) {
        raw.resize(x.f32_data->size() * sizeof(float));
        std::memcpy(raw.data(), x.f32_data->data(), raw.size());
      } else if (x.i64_data && x.dtype == DType::i64) {
        raw.resize(x.i64_data->size() * sizeof(std::int64_t));
        std::memcpy(raw.data(), x.i64_data->data(), raw.size());
      } else if (x.i64_data) {  // boolean: one byte each
        for (std::int64_t b : *x.i64_data) raw.push_back(static_cast<char>(b != 0));
      }
    }
    for (int v : g.inputs()) write_value_info(gp->add_input(), g.value(v));
    for (int v : g.outputs()) write_value_info(gp->add_output(), g.value(v));
    std::string bytes;
    if (!m.SerializeToString(&bytes)) return Status(StatusCode::internal, "export: cannot serialize the model");
    return bytes;
  } catch (const std::bad_alloc&) {
    return Status(StatusCode::out_of_memory, "out of memory while exporting the graph");
  } catch (const std::exception& e) {
    return Status(StatusCode::internal, fmt::format("exporting the graph failed: {}", e.what()));
  }
}

}  // namespace opfuse::onnx
