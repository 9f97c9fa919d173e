// fuzz/make_seeds.cpp - writes the seed corpora the fuzz targets start from (scripts/fuzz.sh).
//
//   opfuse_fuzz_seeds OUTDIR    -> OUTDIR/model/*.onnx, OUTDIR/ops/*, OUTDIR/tensor/*.pb
//
// model/: the built-in models (ResNet-50, MobileNetV2, the BERT layer) with every initializer
// of more than 64 elements replaced by a ConstantOfShape node of the same shape, so each seed
// keeps the whole real graph - every node, attribute and shape subgraph a fuzzer should mutate -
// in a few kilobytes instead of up to a hundred megabytes. (scripts/fuzz.sh adds ONNX's
// conformance models.) ops/: for every op and stage, the input that makes fuzz_ops run the op's
// valid sample unmutated. tensor/: the built-ins' inputs and a few edge tensors as TensorProto
// files (scripts/fuzz.sh adds the conformance data's input_<i>.pb).
#include <onnx/onnx_pb.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include "opfuse/ops.hpp"
#include "src/onnx/builtin.hpp"

namespace fs = std::filesystem;

namespace {

bool write(const fs::path& p, const std::string& bytes) {
  std::ofstream f(p, std::ios::binary);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  return static_cast<bool>(f);
}

std::int64_t numel(const ::onnx::TensorProto& t) {
  std::int64_t n = 1;
  for (std::int64_t d : t.dims()) n *= d;
  return n;
}

// Replaces large FLOAT initializers by ConstantOfShape(shape) -> same name, value 0.01.
std::string slim(const std::string& bytes) {
  ::onnx::ModelProto m;
  if (!m.ParseFromString(bytes)) return {};
  ::onnx::GraphProto* g = m.mutable_graph();
  ::onnx::GraphProto kept;
  std::vector<::onnx::NodeProto> makers;
  for (const ::onnx::TensorProto& t : g->initializer()) {
    if (t.data_type() != ::onnx::TensorProto::FLOAT || numel(t) <= 64) {
      *kept.add_initializer() = t;
      continue;
    }
    ::onnx::TensorProto* shape = kept.add_initializer();
    shape->set_name(t.name() + "__shape");
    shape->set_data_type(::onnx::TensorProto::INT64);
    shape->add_dims(t.dims_size());
    for (std::int64_t d : t.dims()) shape->add_int64_data(d);
    ::onnx::NodeProto n;
    n.set_op_type("ConstantOfShape");
    n.set_name(t.name() + "__fill");
    n.add_input(shape->name());
    n.add_output(t.name());
    ::onnx::AttributeProto* a = n.add_attribute();
    a->set_name("value");
    a->set_type(::onnx::AttributeProto::TENSOR);
    ::onnx::TensorProto* v = a->mutable_t();
    v->set_data_type(::onnx::TensorProto::FLOAT);
    v->add_dims(1);
    v->add_float_data(0.01f);
    makers.push_back(n);
  }
  g->mutable_initializer()->Swap(kept.mutable_initializer());
  // The fills first: a node list in topological order stays one.
  google::protobuf::RepeatedPtrField<::onnx::NodeProto> nodes;
  for (const ::onnx::NodeProto& n : makers) *nodes.Add() = n;
  for (const ::onnx::NodeProto& n : g->node()) *nodes.Add() = n;
  g->mutable_node()->Swap(&nodes);
  return m.SerializeAsString();
}

std::string tensor(const std::vector<std::int64_t>& dims, int dtype, const std::string& raw) {
  ::onnx::TensorProto t;
  for (std::int64_t d : dims) t.add_dims(d);
  t.set_data_type(dtype);
  t.set_name("x");
  t.set_raw_data(raw);
  return t.SerializeAsString();
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s OUTDIR\n", argv[0]);
    return 2;
  }
  const fs::path out = argv[1];
  for (const char* sub : {"model", "ops", "tensor"}) fs::create_directories(out / sub);
  int written = 0;
  for (const opfuse::onnx::BuiltinModel& b : opfuse::onnx::builtin_models()) {
    opfuse::Result<std::string> bytes = opfuse::onnx::builtin_model_bytes(b.name);
    if (!bytes) {
      std::fprintf(stderr, "%s: %s\n", std::string(b.name).c_str(), bytes.status().message().c_str());
      return 1;
    }
    const std::string s = slim(*bytes);
    if (s.empty() || !write(out / "model" / (std::string(b.name) + ".onnx"), s)) return 1;
    ++written;
  }
  // fuzz_ops reads its choices from the end of the input (FuzzedDataProvider): op, then "mutate
  // params?", "mutate inputs?", stage, threads, ISA cap, alias. Zeros for the two questions run
  // the sample as it is.
  for (int op = 0; op < opfuse::kOpCount; ++op)
    for (int stage = 0; stage < 3; ++stage) {
      const std::string seed = {char(0), char(3), char(1), char(stage), char(0), char(0), char(op)};
      const std::string name =
          std::string(opfuse::op_name(static_cast<opfuse::OpKind>(op))) + "_" + std::to_string(stage);
      if (!write(out / "ops" / name, seed)) return 1;
      ++written;
    }
  const std::string four_floats(16, '\0');
  struct Seed {
    const char* name;
    std::string bytes;
  } tensors[] = {
      {"f32_2x2.pb", tensor({2, 2}, ::onnx::TensorProto::FLOAT, four_floats)},
      {"i64_2.pb", tensor({2}, ::onnx::TensorProto::INT64, four_floats)},
      {"bool_4.pb", tensor({4}, ::onnx::TensorProto::BOOL, std::string(4, '\1'))},
      {"scalar.pb", tensor({}, ::onnx::TensorProto::FLOAT, std::string(4, '\0'))},
      {"empty.pb", tensor({0, 3}, ::onnx::TensorProto::FLOAT, "")},
  };
  for (const Seed& t : tensors) {
    if (!write(out / "tensor" / t.name, t.bytes)) return 1;
    ++written;
  }
  std::printf("opfuse_fuzz_seeds: %d seeds in %s\n", written, out.c_str());
  return 0;
}
