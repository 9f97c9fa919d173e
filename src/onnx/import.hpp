// src/onnx/import.hpp - ONNX model files in, graph IR out.
//
// import_model() parses a serialized ModelProto, runs ONNX's own checker and shape inference
// (when the model's opset is one the linked libonnx knows), and maps every node onto a NodeOp
// following the op contract in src/graph/ir.hpp: registry ops get their OpParams filled from
// the ONNX attributes, every other op gets the attribute map the runtime reads, and attributes
// that older opsets used for shape-like operands (Unsqueeze axes, Slice starts, ...) become i64
// initializers so that the graph always looks like opset 13+. The result has passed verify().
//
// Everything a file says is untrusted: sizes are checked before anything is allocated, every
// attribute is range-checked, and an op, dtype or opset opfuse cannot run comes back as
// StatusCode::unsupported naming it, while a malformed file is invalid_argument. No exception
// leaves this interface.
//
// The tensor-file functions read and write the one-TensorProto files of ONNX's test data
// (test_data_set_0/input_0.pb, ...), so `opfuse` can run the ONNX node tests.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "opfuse/status.hpp"
#include "src/graph/ir.hpp"

namespace opfuse::onnx {

struct ImportedModel {
  graph::Graph graph;
  std::map<std::string, std::string> metadata;  // the model's metadata_props
  std::int64_t opset = 0;                       // of the default ("" / "ai.onnx") domain
  std::string producer;                         // producer_name, then producer_version if any
};

struct ImportOptions {
  std::uint64_t max_model_bytes = 2ull << 30;   // a larger file is refused before parsing
  std::uint64_t max_tensor_bytes = 4ull << 30;  // per initializer / constant, as stored in the graph
  // ONNX's checker and shape inference run only for opsets the linked libonnx knows (1.12
  // knows up to 17); newer models are imported on opfuse's own checks alone.
  bool run_checker = true;
  bool run_shape_inference = true;
};

Result<ImportedModel> import_model(const void* data, std::size_t size, const ImportOptions& options = {}) noexcept;
Result<ImportedModel> import_file(const std::string& path, const ImportOptions& options = {}) noexcept;

// One tensor of an ONNX test-data file. f32 holds FLOAT data; i64 holds INT64 (and INT32,
// widened) data, and BOOL data as 0 / 1 with dtype boolean.
struct TensorData {
  std::string name;
  graph::DType dtype = graph::DType::f32;
  std::vector<std::int64_t> dims;
  std::vector<float> f32;
  std::vector<std::int64_t> i64;
};

// max_bytes bounds the decoded payload (elements times 4 for f32, 8 for i64 and boolean).
Result<TensorData> read_tensor_file(const std::string& path, std::uint64_t max_bytes = 4ull << 30) noexcept;
Result<TensorData> parse_tensor(const void* data, std::size_t size, std::uint64_t max_bytes = 4ull << 30) noexcept;
// Writes t as one serialized TensorProto (raw_data, little-endian), the format ONNX test data
// uses; invalid_argument when the payload does not match dims and dtype.
Status write_tensor_file(const std::string& path, const TensorData& t) noexcept;

}  // namespace opfuse::onnx
