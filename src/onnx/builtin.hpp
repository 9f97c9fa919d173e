// src/onnx/builtin.hpp - models that ship inside opfuse, written as ONNX by opfuse itself.
//
// A fusion compiler needs whole real networks to be tested on, and a test suite cannot download
// them. So opfuse writes its own: ResNet-50, MobileNetV2 and one BERT-base encoder layer, each
// laid out node for node the way torch.onnx.export (opset 17) writes the torchvision or Hugging
// Face module, down to the node names ("/layer1/layer1.0/conv1/Conv"), the split Conv and
// BatchNormalization, ReLU6 as Clip with initializer bounds, the in-graph Shape/Gather/Concat
// arithmetic of a dynamic-axes export and the LayerNorm and GELU decomposed into primitive ops.
// A pattern that matches these graphs therefore matches what users export.
//
// The weights are pseudo-random but deterministic (a fixed-seed splitmix64 stream per tensor, so
// the bytes are the same on every call) and scaled like a fresh initialisation - He/fan-in for
// convolutions, N(0, 0.02)-sized for BERT - so activations stay O(1) through 50 layers instead
// of overflowing or vanishing, and numeric comparisons between fused and unfused runs mean
// something.
#pragma once

#include <span>
#include <string>
#include <string_view>

#include "opfuse/status.hpp"

namespace opfuse::onnx {

struct BuiltinModel {
  std::string_view name;     // "resnet50", "mobilenet_v2", "bert_layer"
  std::string_view summary;  // one line for `opfuse models` and error messages
};

// Every built-in model, in a fixed order.
std::span<const BuiltinModel> builtin_models() noexcept;

// The serialized ModelProto of the named model (the same bytes on every call), or
// invalid_argument naming the unknown model and listing the known ones, or out_of_memory.
Result<std::string> builtin_model_bytes(std::string_view name) noexcept;

}  // namespace opfuse::onnx
