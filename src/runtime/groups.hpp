// src/runtime/groups.hpp - fused groups from fusion provenance: naming them, the fallback from
// a fused node no fast kernel accepts, and --verify-fusion (see groups.cpp).
#pragma once

#include <map>
#include <set>
#include <string>
#include <vector>

#include "opfuse/model.hpp"
#include "src/graph/ir.hpp"

namespace opfuse::runtime {

struct Group {
  std::vector<int> nodes;  // fused-graph node ids
  std::set<int> origin;    // unfused-graph node ids it replaced
  std::string pattern;     // the fusions that built it, "+"-joined in order
};
// The fused groups of a fused graph (before layout planning), in node order.
std::vector<Group> fused_groups(const graph::Graph& fused);
FusedGroup describe(const Group& group, const graph::Graph& fused, const graph::Graph& unfused);

struct Declined {
  int node = -1;  // planned-graph node id (a fused registry node)
  std::string reason;
};
// Fused registry nodes of a planned graph that no kernel above naive accepts at the stage.
std::vector<Declined> declined_fused_nodes(const graph::Graph& planned, const CompileOptions& options);

// Runs `unfused` on `inputs` (by value id; the graph inputs), then each fused group of `fused`
// alone on the values its unfused nodes read in that run, comparing the group's outputs.
Result<std::vector<GroupCheck>> verify_groups(const graph::Graph& unfused, const graph::Graph& fused,
                                              const CompileOptions& options, const std::map<int, TensorData>& inputs);

}  // namespace opfuse::runtime
