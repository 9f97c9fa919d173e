// src/cli/run_model.hpp - `opfuse run` / `opfuse export` (see run_model.cpp).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace opfuse::cli {

// Exit codes of `opfuse run`.
inline constexpr int kRunOk = 0;
inline constexpr int kRunMismatch = 1;     // --check or --verify-fusion found a difference
inline constexpr int kRunInvalid = 2;      // a bad model, input, option, or over the memory budget
inline constexpr int kRunUnsupported = 3;  // an op, attribute or type opfuse does not handle
inline constexpr int kRunInternal = 4;     // a bug in opfuse: please report it

struct RunArgs {
  std::string model;
  std::string stage = "fused";
  std::string fusion = "full";
  int threads = 0;
  std::string inputs_dir, outputs_dir;
  bool check = false;
  int warmup = 3;
  int repeat = 10;
  std::vector<std::string> dims;  // "seq=128", "batch=2,seq=64"
  std::uint64_t memory_budget = 16ull << 30;
  bool dump_graph = false;
  bool profile = false;
  bool json = false;
  bool verify_fusion = false;
  std::string dot_file;        // --dot: the fused graph as Graphviz DOT (+ .svg when `dot` exists)
  std::string save_optimized;  // --save-optimized: the fused graph as an ONNX model
  std::vector<std::string> excluded_kernels;
};

int cmd_run(const RunArgs& args);
int cmd_export(const std::string& name, const std::string& file);
int cmd_fusions(bool json);

}  // namespace opfuse::cli
