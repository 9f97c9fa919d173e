// src/onnx/export.hpp - a graph IR written back as an ONNX model (--save-optimized).
#pragma once

#include <cstdint>
#include <string>

#include "opfuse/status.hpp"
#include "src/graph/ir.hpp"

namespace opfuse::onnx {

// The live graph as a serialized ModelProto: ops ONNX has with the same meaning keep their ONNX
// names (Reshape, Transpose, MatMul, ...); every other node - the registry ops with their
// post-op chains, the fused ones among them - is a node of the "opfuse" domain named like the
// IR op, its parameters written as attributes (post_ops as strings such as "activation:relu",
// "binary:add", "maxpool:3x3/2"). Constants become initializers; graph inputs and outputs keep
// their names and dims. Netron opens it; opfuse cannot import the opfuse domain back.
Result<std::string> export_graph(const graph::Graph& g, std::int64_t opset) noexcept;

}  // namespace opfuse::onnx
