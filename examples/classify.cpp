// examples/classify.cpp - classify an input with opfuse's C++ API (opfuse/model.hpp).
//
//   classify_cpp [--threads N] [--stage naive|simd|fused] MODEL [INPUT]
//
// The same program as classify.c, in C++: MODEL is a built-in model name (resnet50, mobilenet_v2,
// bert_layer) or the path of an .onnx file; INPUT, for the first model input, an ONNX TensorProto
// file (.pb) or raw little-endian float32 (.raw or .bin, exactly the input's size); without it the
// input is generated (the numbers classify_c generates, so both print the same answer). Symbolic
// dims are bound to 1 unless the .pb file gives them; other inputs get zeros. It prints the model's
// inputs and outputs and the five largest values of the first output with their indices.
//
// Every call that can fail returns a Status or a Result (a value or a Status); nothing throws.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "opfuse/model.hpp"

namespace {

int fail(const std::string& what, const opfuse::Status& s) {
  std::fprintf(stderr, "classify_cpp: error: %s: %s\n", what.c_str(), s.to_string().c_str());
  return 1;
}

int usage() {
  std::fprintf(stderr, "usage: classify_cpp [--threads N] [--stage naive|simd|fused] MODEL [INPUT.pb|INPUT.raw]\n");
  return 2;
}

// The generated input: a 64-bit LCG, its top 24 bits scaled to [-1, 1) (as in classify.c).
std::vector<float> generate(std::size_t n, std::uint64_t seed) {
  std::vector<float> x(n);
  std::uint64_t s = seed;
  for (float& v : x) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    v = static_cast<float>(static_cast<double>(s >> 40) / 16777216.0 * 2.0 - 1.0);
  }
  return x;
}

// Reads INPUT into t, whose name, type and dims the model's first input set: a .pb file brings its
// own dims and type, a raw file must hold exactly t's elements.
opfuse::Status read_input(const std::string& path, opfuse::TensorData& t) {
  if (path.size() >= 3 && path.compare(path.size() - 3, 3, ".pb") == 0) {
    auto file = opfuse::read_tensor_file(path);
    if (!file) return file.status();
    file->name = t.name;  // bind it to the first input, whatever the file calls it
    t = std::move(*file);
    return opfuse::Status::ok();
  }
  std::ifstream f(path, std::ios::binary);
  if (!f) return {opfuse::StatusCode::invalid_argument, "cannot open input file '" + path + "'"};
  const std::vector<char> bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  if (bytes.size() != t.f32.size() * 4)
    return {opfuse::StatusCode::invalid_argument, "'" + path + "' has " + std::to_string(bytes.size()) +
                                                      " bytes, input '" + t.name + "' takes " +
                                                      std::to_string(t.f32.size() * 4) + " (float32)"};
  for (std::size_t i = 0; i < t.f32.size(); ++i) {
    const auto* b = reinterpret_cast<const unsigned char*>(bytes.data() + 4 * i);
    const std::uint32_t u =
        std::uint32_t{b[0]} | std::uint32_t{b[1]} << 8 | std::uint32_t{b[2]} << 16 | std::uint32_t{b[3]} << 24;
    std::memcpy(&t.f32[i], &u, 4);
  }
  return opfuse::Status::ok();
}

void print_value(const char* kind, std::size_t i, const opfuse::ValueInfo& v) {
  std::printf("%s %zu: %s %s %s\n", kind, i, v.name.c_str(), std::string(opfuse::element_type_name(v.type)).c_str(),
              opfuse::dims_string(v.dims).c_str());
}

// The five largest values, largest first (ties: the lower index first), as classify.c does.
void print_top5(const std::string& name, const std::vector<float>& y) {
  std::printf("top-5 of output '%s' (%zu values):\n", name.c_str(), y.size());
  std::vector<std::size_t> best;
  for (std::size_t k = 0; k < 5 && k < y.size(); ++k) {
    std::size_t b = y.size();
    for (std::size_t i = 0; i < y.size(); ++i) {
      bool taken = false;
      for (std::size_t j : best) taken = taken || j == i;
      if (!taken && (b == y.size() || y[i] > y[b])) b = i;
    }
    best.push_back(b);
    std::printf("  %zu: index %zu  score %.6f\n", k + 1, b, static_cast<double>(y[b]));
  }
}

}  // namespace

int main(int argc, char** argv) {
  std::string model_arg, input_path;
  opfuse::CompileOptions options;
  for (int a = 1; a < argc; ++a) {
    const std::string arg = argv[a];
    if (arg == "--threads" && a + 1 < argc) {
      options.threads = std::atoi(argv[++a]);
    } else if (arg == "--stage" && a + 1 < argc) {
      const auto stage = opfuse::stage_from_name(argv[++a]);
      if (!stage || *stage == opfuse::Stage::cuda) return usage();
      options.stage = *stage;
    } else if (!arg.empty() && arg[0] == '-') {
      return usage();
    } else if (model_arg.empty()) {
      model_arg = arg;
    } else if (input_path.empty()) {
      input_path = arg;
    } else {
      return usage();
    }
  }
  if (model_arg.empty()) return usage();

  // A built-in name, or else a file.
  bool builtin = false;
  for (const std::string& name : opfuse::Model::builtin_names()) builtin = builtin || name == model_arg;
  auto model = builtin ? opfuse::Model::load_builtin(model_arg) : opfuse::Model::load_file(model_arg);
  if (!model) return fail("loading the model", model.status());
  auto plan = opfuse::Plan::compile(*model, options);
  if (!plan) return fail("compiling the model", plan.status());

  std::printf("model: %s (%s)\n", model_arg.c_str(), builtin ? "built-in" : "file");
  for (std::size_t i = 0; i < model->inputs().size(); ++i) print_value("input ", i, model->inputs()[i]);
  for (std::size_t i = 0; i < model->outputs().size(); ++i) print_value("output", i, model->outputs()[i]);

  // The inputs: declared dims with each symbolic one bound to 1; zeros but for the first.
  std::vector<opfuse::TensorData> inputs;
  for (const opfuse::ValueInfo& v : model->inputs()) {
    opfuse::TensorData t;
    t.name = v.name;
    t.type = v.type;
    for (const opfuse::DimInfo& d : v.dims) t.dims.push_back(d.value >= 0 ? d.value : 1);
    const auto n = static_cast<std::size_t>(t.numel());
    if (t.type == opfuse::ElementType::f32) t.f32 = inputs.empty() ? generate(n, 42) : std::vector<float>(n, 0.f);
    if (t.type == opfuse::ElementType::i64) t.i64.assign(n, 0);
    if (t.type == opfuse::ElementType::boolean) t.boolean.assign(n, 0);
    inputs.push_back(std::move(t));
  }
  if (!input_path.empty() && !inputs.empty())
    if (opfuse::Status s = read_input(input_path, inputs[0]); !s) return fail("reading the input", s);
  std::printf("input: %s\n", input_path.empty() ? "generated (deterministic)" : input_path.c_str());

  std::vector<opfuse::TensorRef> refs;
  for (const opfuse::TensorData& t : inputs) refs.push_back(t.ref());
  auto outputs = plan->run(refs);  // the allocating run: it returns the outputs
  if (!outputs) return fail("running the model", outputs.status());
  if (outputs->empty()) return fail("running the model", {opfuse::StatusCode::internal, "no outputs"});
  const opfuse::TensorData& y = (*outputs)[0];
  if (y.type == opfuse::ElementType::f32)
    print_top5(y.name, y.f32);
  else
    std::printf("output '%s' is %s, not scores\n", y.name.c_str(),
                std::string(opfuse::element_type_name(y.type)).c_str());
  return 0;
}
