// tests/test_conformance.cpp - ONNX's own backend tests, run through the model runtime.
//
// Debian's libonnx-testdata ships ONNX's backend test suite: for each test a model.onnx and one
// or more test_data_set_N/ with input_*.pb and the expected output_*.pb. A test is in scope when
// every op it uses is one the importer is specified to handle (the list below, the issue's). Of
// those, the "typed" ones also use an element type opfuse does not compute in (double, float16,
// uint8, string, ...): they must pass or be refused as unsupported. Every other in-scope test
// must pass with the model comparator at every stage, except the ones named in kRefused with
// the reason they are refused. A wrong answer, an invalid_argument on a valid model or a crash
// fails the test, whatever the counts.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <onnx/onnx_pb.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <string>

#include "check/check.hpp"
#include "opfuse/model.hpp"

namespace {

namespace fs = std::filesystem;
using namespace opfuse;

const fs::path kData = "/usr/share/libonnx-testdata/data";

const std::set<std::string> kImporterOps = {"Conv",
                                            "BatchNormalization",
                                            "Relu",
                                            "Clip",
                                            "LeakyRelu",
                                            "Sigmoid",
                                            "Tanh",
                                            "HardSwish",
                                            "HardSigmoid",
                                            "Add",
                                            "Sub",
                                            "Mul",
                                            "Div",
                                            "Pow",
                                            "Sqrt",
                                            "Erf",
                                            "MaxPool",
                                            "AveragePool",
                                            "GlobalAveragePool",
                                            "Flatten",
                                            "Gemm",
                                            "MatMul",
                                            "Reshape",
                                            "Transpose",
                                            "Softmax",
                                            "LayerNormalization",
                                            "ReduceMean",
                                            "Shape",
                                            "Gather",
                                            "Slice",
                                            "Concat",
                                            "Unsqueeze",
                                            "Squeeze",
                                            "Constant",
                                            "Identity",
                                            "Cast",
                                            "Expand",
                                            "Where",
                                            "Equal"};

// In-scope tests of supported types that opfuse refuses, and why. Each is an inference engine's
// honest "no", reported with exit code 3 by `opfuse run`.
const std::map<std::string, std::string> kRefused = {
    {"test_batchnorm_epsilon_training_mode", "BatchNormalization training_mode=1 (batch statistics)"},
    {"test_batchnorm_example_training_mode", "BatchNormalization training_mode=1 (batch statistics)"},
    {"test_identity_opt", "an optional-typed input (sequence/optional types)"},
    {"test_identity_sequence", "a sequence-typed input"},
};

struct TestModel {
  std::string suite, name;
  fs::path dir;
  bool typed = false;  // uses an element type outside f32 / i64 / bool
};

bool supported_type(int t) {
  return t == ::onnx::TensorProto::FLOAT || t == ::onnx::TensorProto::INT64 || t == ::onnx::TensorProto::BOOL;
}

// In-scope tests, found by reading each model's op types and element types.
const std::vector<TestModel>& in_scope() {
  static const std::vector<TestModel> tests = [] {
    std::vector<TestModel> v;
    for (const char* suite : {"node", "pytorch-converted", "pytorch-operator", "simple"}) {
      if (!fs::exists(kData / suite)) continue;
      std::vector<fs::path> dirs;
      for (const auto& e : fs::directory_iterator(kData / suite)) dirs.push_back(e.path());
      std::sort(dirs.begin(), dirs.end());
      for (const fs::path& d : dirs) {
        std::ifstream f(d / "model.onnx", std::ios::binary);
        ::onnx::ModelProto m;
        if (!f || !m.ParseFromIstream(&f)) continue;
        bool ops_ok = true, typed = false;
        auto check_type = [&](const ::onnx::TypeProto& t) {
          if (t.has_tensor_type()) {
            typed = typed || !supported_type(t.tensor_type().elem_type());
          } else {
            typed = true;  // sequence, optional, map: not tensors
          }
        };
        for (const auto& n : m.graph().node()) {
          ops_ok = ops_ok && kImporterOps.count(n.op_type()) && (n.domain().empty() || n.domain() == "ai.onnx");
          for (const auto& a : n.attribute()) {
            if (n.op_type() == "Cast" && a.name() == "to") typed = typed || !supported_type(static_cast<int>(a.i()));
            if (a.has_t()) typed = typed || !supported_type(a.t().data_type());
          }
        }
        for (const auto& x : m.graph().input()) check_type(x.type());
        for (const auto& x : m.graph().output()) check_type(x.type());
        for (const auto& t : m.graph().initializer()) typed = typed || !supported_type(t.data_type());
        if (ops_ok) v.push_back({suite, d.filename().string(), d, typed});
      }
    }
    return v;
  }();
  return tests;
}

enum class Outcome { pass, refused, mismatch, error };

struct Result1 {
  Outcome outcome;
  std::string message;
};

Result1 run_test(const TestModel& t, Stage stage) {
  auto model = Model::load_file((t.dir / "model.onnx").string());
  if (!model) {
    const bool refused = model.status().code() == StatusCode::unsupported;
    return {refused ? Outcome::refused : Outcome::error, model.status().to_string()};
  }
  CompileOptions co;
  co.stage = stage;
  co.threads = 2;
  auto plan = Plan::compile(*model, co);
  if (!plan)
    return {plan.status().code() == StatusCode::unsupported ? Outcome::refused : Outcome::error,
            plan.status().to_string()};
  int sets = 0;
  for (int s = 0; fs::exists(t.dir / fmt::format("test_data_set_{}", s)); ++s, ++sets) {
    const fs::path set = t.dir / fmt::format("test_data_set_{}", s);
    std::vector<TensorData> in;
    for (int i = 0; fs::exists(set / fmt::format("input_{}.pb", i)); ++i) {
      auto x = read_tensor_file((set / fmt::format("input_{}.pb", i)).string());
      if (!x) return {Outcome::error, x.status().to_string()};
      x->name.clear();  // bind by position, as ONNX's runner does
      in.push_back(std::move(*x));
    }
    std::vector<TensorRef> refs;
    for (const auto& x : in) refs.push_back(x.ref());
    auto out = plan->run(refs);
    if (!out)
      return {out.status().code() == StatusCode::unsupported ? Outcome::refused : Outcome::error,
              out.status().to_string()};
    for (std::size_t o = 0; o < out->size(); ++o) {
      auto ref = read_tensor_file((set / fmt::format("output_{}.pb", o)).string());
      if (!ref) return {Outcome::error, ref.status().to_string()};
      const check::OutputCheck c = check::compare_output((*out)[o], *ref);
      if (!c.ok)
        return {Outcome::mismatch,
                fmt::format("data set {} output {}: {} (max abs error {:.3g})", s, o, c.reason, c.max_abs)};
    }
  }
  if (sets == 0) return {Outcome::error, "no test_data_set_0"};
  return {Outcome::pass, ""};
}

class Conformance : public ::testing::TestWithParam<Stage> {};

TEST_P(Conformance, OnnxBackendTests) {
  const auto& tests = in_scope();
  if (tests.empty()) GTEST_SKIP() << "libonnx-testdata is not installed (" << kData << ")";
  int pass = 0, refused = 0, typed = 0, typed_pass = 0, typed_refused = 0;
  for (const TestModel& t : tests) {
    const Result1 r = run_test(t, GetParam());
    const bool expected_refusal = kRefused.count(t.name) > 0;
    if (t.typed) {
      ++typed;
      typed_pass += r.outcome == Outcome::pass;
      typed_refused += r.outcome == Outcome::refused;
      EXPECT_TRUE(r.outcome == Outcome::pass || r.outcome == Outcome::refused)
          << t.suite << "/" << t.name << ": " << r.message;
      continue;
    }
    pass += r.outcome == Outcome::pass;
    refused += r.outcome == Outcome::refused;
    if (expected_refusal)
      EXPECT_NE(r.outcome, Outcome::mismatch) << t.suite << "/" << t.name << ": " << r.message;
    else
      EXPECT_EQ(r.outcome, Outcome::pass) << t.suite << "/" << t.name << ": " << r.message;
  }
  const int supported = static_cast<int>(tests.size()) - typed;
  std::printf(
      "conformance (%s): %zu in-scope tests; %d of f32/i64/bool types: %d pass, %d refused; %d typed variants: %d "
      "pass, %d refused\n",
      std::string(stage_name(GetParam())).c_str(), tests.size(), supported, pass, refused, typed, typed_pass,
      typed_refused);
  EXPECT_GE(pass, supported - static_cast<int>(kRefused.size()));
}

INSTANTIATE_TEST_SUITE_P(Stages, Conformance, ::testing::Values(Stage::naive, Stage::simd, Stage::fused),
                         [](const auto& info) { return std::string(stage_name(info.param)); });

}  // namespace
