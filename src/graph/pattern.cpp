// src/graph/pattern.cpp - chain matching and fusion provenance (see pattern.hpp).
#include "pattern.hpp"

#include <algorithm>
#include <set>
#include <string>

namespace opfuse::graph {

bool is_constant_value(const Graph& g, int v) { return v >= 0 && g.valid_value(v) && g.value(v).is_constant(); }

bool is_graph_output(const Graph& g, int v) {
  return std::find(g.outputs().begin(), g.outputs().end(), v) != g.outputs().end();
}

bool fusable(const Graph& g, const std::vector<int>& ids, std::string_view fusion) {
  if (fusion.empty()) return true;
  for (int id : ids) {
    const auto& r = g.node(id).refused;
    if (std::find(r.begin(), r.end(), fusion) != r.end()) return false;
  }
  return true;
}

namespace {

bool step_accepts(const Graph& g, const PatternStep& step, const Node& n, int prev_out) {
  if (n.dead) return false;
  if (!step.ops.empty() && std::find(step.ops.begin(), step.ops.end(), n.op) == step.ops.end()) return false;
  if (prev_out >= 0) {
    // It reads the previous step's output exactly once, through the named slot.
    if (std::count(n.inputs.begin(), n.inputs.end(), prev_out) != 1) return false;
    if (step.slot >= 0 &&
        (step.slot >= static_cast<int>(n.inputs.size()) || n.inputs[static_cast<std::size_t>(step.slot)] != prev_out))
      return false;
  }
  return !step.where || step.where(g, n);
}

}  // namespace

std::optional<std::vector<int>> match_chain(const Graph& g, int node, const ChainPattern& pattern,
                                            const std::vector<std::vector<int>>& consumers, std::string_view fusion) {
  if (pattern.empty() || !g.valid_node(node) || !step_accepts(g, pattern[0], g.node(node), -1)) return std::nullopt;
  std::vector<int> matched = {node};
  for (std::size_t i = 1; i < pattern.size(); ++i) {
    const Node& prev = g.node(matched.back());
    if (prev.outputs.empty()) return std::nullopt;
    const int out = prev.outputs[0];
    if (out < 0 || static_cast<std::size_t>(out) >= consumers.size()) return std::nullopt;  // newer than the lists
    int next = -1;
    for (int r : consumers[static_cast<std::size_t>(out)])
      if (step_accepts(g, pattern[i], g.node(r), out)) {
        next = r;
        break;
      }
    if (next < 0) return std::nullopt;
    matched.push_back(next);
  }
  // The intermediates stay inside the match.
  const std::set<int> inside(matched.begin(), matched.end());
  for (std::size_t i = 0; i + 1 < matched.size(); ++i)
    for (int out : g.node(matched[i]).outputs) {
      if (is_graph_output(g, out) || static_cast<std::size_t>(out) >= consumers.size()) return std::nullopt;
      for (int r : consumers[static_cast<std::size_t>(out)])
        if (!inside.count(r)) return std::nullopt;
    }
  if (!fusable(g, matched, fusion)) return std::nullopt;
  return matched;
}

void record_fusion(Graph& g, std::string_view fusion, const std::vector<int>& matched, const std::vector<int>& result) {
  std::set<int> origin;
  for (int id : matched) {
    const Node& n = g.node(id);
    if (n.origin.empty())
      origin.insert(id);
    else
      origin.insert(n.origin.begin(), n.origin.end());
  }
  for (int id : result) {
    Node& n = g.node(id);
    origin.insert(n.origin.begin(), n.origin.end());
  }
  // The history: every fusion that built a matched node, then this one.
  std::vector<std::string> history;
  const auto add = [&](const std::string& f) {
    if (std::find(history.begin(), history.end(), f) == history.end()) history.push_back(f);
  };
  for (int id : matched)
    for (const std::string& f : g.node(id).fused_by) add(f);
  for (int id : result)
    for (const std::string& f : g.node(id).fused_by) add(f);
  // The latest fusion last (the fallback refuses that one first).
  history.erase(std::remove(history.begin(), history.end(), std::string(fusion)), history.end());
  history.emplace_back(fusion);
  for (int id : result) {
    Node& n = g.node(id);
    n.origin.assign(origin.begin(), origin.end());
    n.fused_by = history;
  }
}

std::optional<float> constant_scalar(const Graph& g, int v) {
  if (!is_constant_value(g, v)) return std::nullopt;
  const Value& x = g.value(v);
  if (x.dtype != DType::f32 || !x.f32_data || x.f32_data->size() != 1) return std::nullopt;
  return (*x.f32_data)[0];
}

int other_input(const Node& n, int v) {
  if (n.inputs.size() != 2) return -1;
  if (n.inputs[0] == v && n.inputs[1] != v) return n.inputs[1];
  if (n.inputs[1] == v && n.inputs[0] != v) return n.inputs[0];
  return -1;
}

}  // namespace opfuse::graph
