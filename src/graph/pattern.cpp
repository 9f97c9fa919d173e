// src/graph/pattern.cpp - chain matching (see pattern.hpp).
#include "pattern.hpp"

#include <algorithm>

namespace opfuse::graph {

bool is_constant_value(const Graph& g, int v) { return v >= 0 && g.valid_value(v) && g.value(v).is_constant(); }

std::optional<std::vector<int>> match_chain(const Graph& g, int node, const ChainPattern& pattern,
                                            const std::vector<std::vector<int>>& consumers) {
  std::vector<int> matched;
  int current = node;
  for (std::size_t i = 0; i < pattern.size(); ++i) {
    const PatternStep& step = pattern[i];
    if (!g.valid_node(current) || g.node(current).dead) return std::nullopt;
    const Node& n = g.node(current);
    if (!step.ops.empty() && std::find(step.ops.begin(), step.ops.end(), n.op) == step.ops.end()) return std::nullopt;
    if (i > 0) {
      // It must read the previous step's output through the named slot.
      const int prev_out = g.node(matched.back()).outputs[0];
      if (step.slot < 0) {
        if (std::find(n.inputs.begin(), n.inputs.end(), prev_out) == n.inputs.end()) return std::nullopt;
      } else if (step.slot >= static_cast<int>(n.inputs.size()) ||
                 n.inputs[static_cast<std::size_t>(step.slot)] != prev_out) {
        return std::nullopt;
      }
    }
    if (step.where && !step.where(g, n)) return std::nullopt;
    matched.push_back(current);
    if (i + 1 == pattern.size()) break;
    // The link to the next step: a single-output node whose output has exactly one reader,
    // which reads it once, and which is not a graph output.
    if (n.outputs.size() != 1) return std::nullopt;
    const int out = n.outputs[0];
    const auto& readers = consumers[static_cast<std::size_t>(out)];
    if (readers.size() != 1) return std::nullopt;
    if (std::find(g.outputs().begin(), g.outputs().end(), out) != g.outputs().end()) return std::nullopt;
    const Node& next = g.node(readers[0]);
    if (std::count(next.inputs.begin(), next.inputs.end(), out) != 1) return std::nullopt;
    current = readers[0];
  }
  return matched;
}

}  // namespace opfuse::graph
