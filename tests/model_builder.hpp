// tests/model_builder.hpp - small ONNX models written in a test, as serialized bytes.
#pragma once

#include <onnx/onnx_pb.h>

#include <cmath>
#include <cstdint>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "check/check.hpp"
#include "opfuse/model.hpp"

namespace opfuse::testing {

// Deep random networks accumulate rounding through 50+ layers: whole-model outputs are compared
// with the model comparator's rtol and an atol scaled to the reference's magnitude (1e-3 of its
// RMS), not the per-op atol.
inline check::OutputCheck compare_deep(const TensorData& out, const TensorData& ref) {
  double rms = 0;
  for (float x : ref.f32) rms += double(x) * x;
  rms = std::sqrt(rms / static_cast<double>(ref.f32.empty() ? 1 : ref.f32.size()));
  return check::compare_output(out, ref, check::Tolerance{1e-3 * rms, 1e-3});
}

// Deterministic inputs for a model: f32 uniform in [-1, 1) from `seed`; symbolic dims from `dims`.
inline std::vector<TensorData> random_inputs(const Model& m, const std::map<std::string, std::int64_t>& dims,
                                             std::uint64_t seed) {
  std::vector<TensorData> v;
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  for (const ValueInfo& in : m.inputs()) {
    TensorData t;
    t.name = in.name;
    t.type = in.type;
    for (const DimInfo& d : in.dims) t.dims.push_back(d.value >= 0 ? d.value : dims.at(d.symbol));
    t.f32.resize(static_cast<std::size_t>(t.numel()));
    for (float& x : t.f32) x = u(rng);
    v.push_back(std::move(t));
  }
  return v;
}

// The TensorRefs of owned tensors, in order.
inline std::vector<TensorRef> refs_of(const std::vector<TensorData>& v) {
  std::vector<TensorRef> r;
  for (const auto& t : v) r.push_back(t.ref());
  return r;
}

// Opset 17, FLOAT by default; every node named <op><index> unless renamed.
struct ModelBuilder {
  ::onnx::ModelProto m;
  ModelBuilder() {
    m.set_ir_version(8);
    auto* op = m.add_opset_import();
    op->set_domain("");
    op->set_version(17);
    m.mutable_graph()->set_name("g");
  }
  void input(const std::string& name, std::vector<std::int64_t> dims, int type = ::onnx::TensorProto::FLOAT,
             bool output = false) {
    auto* v = output ? m.mutable_graph()->add_output() : m.mutable_graph()->add_input();
    v->set_name(name);
    auto* t = v->mutable_type()->mutable_tensor_type();
    t->set_elem_type(type);
    for (auto d : dims) t->mutable_shape()->add_dim()->set_dim_value(d);
  }
  void output(const std::string& name, std::vector<std::int64_t> dims) { input(name, dims, 1, true); }
  ::onnx::NodeProto* node(const std::string& op, std::vector<std::string> in, std::vector<std::string> out) {
    auto* n = m.mutable_graph()->add_node();
    n->set_op_type(op);
    n->set_name(op + std::to_string(m.graph().node_size()));
    for (auto& s : in) n->add_input(s);
    for (auto& s : out) n->add_output(s);
    return n;
  }
  void weight(const std::string& name, std::vector<std::int64_t> dims, float value) {
    auto* t = m.mutable_graph()->add_initializer();
    t->set_name(name);
    t->set_data_type(::onnx::TensorProto::FLOAT);
    std::int64_t n = 1;
    for (auto d : dims) {
      t->add_dims(d);
      n *= d;
    }
    for (std::int64_t i = 0; i < n; ++i) t->add_float_data(value);
  }
  void weight(const std::string& name, std::vector<std::int64_t> dims, const std::vector<float>& values) {
    auto* t = m.mutable_graph()->add_initializer();
    t->set_name(name);
    t->set_data_type(::onnx::TensorProto::FLOAT);
    for (auto d : dims) t->add_dims(d);
    for (float v : values) t->add_float_data(v);
  }
  std::string bytes() const { return m.SerializeAsString(); }
};

}  // namespace opfuse::testing
