// src/graph/passes/norm.cpp - a residual Add into the LayerNorm after it (skip-layernorm,
// advanced level).
//
// Post-LN transformers end each sublayer in LayerNorm(x + sublayer(x)). Run apart, the Add
// writes the sum and the LayerNorm reads it back; the registry's layernorm takes the residual
// as an input and forms the sum while it computes the statistics (ONNX Runtime's
// SkipLayerNormalization). When something else reads the sum too, the layernorm writes it as
// its second output (write_sum), so the sum is still stored once and never re-read.
#include <algorithm>

#include "fusion.hpp"
#include "src/graph/pattern.hpp"

namespace opfuse::graph {

Result<int> skip_layernorm(Graph& g) {
  int rewritten = 0;
  const std::size_t count = g.nodes().size();
  for (std::size_t id = 0; id < count; ++id) {
    const Node& add = g.node(static_cast<int>(id));
    if (add.dead || add.op != NodeOp::add || add.inputs.size() != 2 || add.outputs.size() != 1) continue;
    const int sum = add.outputs[0];
    const Value& sv = g.value(sum);
    if (sv.dtype != DType::f32 || !sv.has_shape || !all_static(sv.dims)) continue;
    // Both operands have the sum's dims (no broadcast): the kernel reads them row by row.
    bool same = true;
    for (int v : add.inputs) same = same && g.value(v).dtype == DType::f32 && g.value(v).dims == sv.dims;
    if (!same || add.inputs[0] == add.inputs[1]) continue;
    const auto readers = g.consumers(sum);
    int ln = -1;
    for (int r : readers) {
      const Node& n = g.node(r);
      if (n.op != NodeOp::layernorm || n.inputs.empty() || n.inputs[0] != sum) continue;
      if (std::count(n.inputs.begin(), n.inputs.end(), sum) != 1) continue;
      const auto& p = std::get<NormParams>(*n.params);
      if (p.has_residual || p.write_sum || n.outputs.size() != 1) continue;
      ln = r;
      break;
    }
    if (ln < 0 || !fusable(g, {add.id, ln}, "skip_layernorm")) continue;
    const bool write_sum = readers.size() > 1 || is_graph_output(g, sum);
    const std::vector<int> matched = {add.id, ln};
    const int a = add.inputs[0], b = add.inputs[1];
    if (Status s = g.remove_node(add.id); !s) return s;
    Node& n = g.node(ln);
    auto& p = std::get<NormParams>(*n.params);
    p.has_residual = true;
    p.write_sum = write_sum;
    n.inputs[0] = a;
    n.inputs.push_back(b);
    if (write_sum) n.outputs.push_back(sum);
    g.value(sum).producer = write_sum ? ln : -1;
    record_fusion(g, "skip_layernorm", matched, {ln});
    ++rewritten;
  }
  return rewritten;
}

}  // namespace opfuse::graph
