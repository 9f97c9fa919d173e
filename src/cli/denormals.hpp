// src/cli/denormals.hpp - `opfuse denormals` (see denormals.cpp).
#pragma once

#include <string>
#include <vector>

namespace opfuse::cli {

struct DenormalArgs {
  std::vector<std::string> stages;  // empty: naive, simd, fused
  std::string op;                   // empty: every op
  int threads = 0;
  int repeats = 9;
  std::string json_file;
  double max_ratio = 0;  // > 0: exit 1 when a kernel's FTZ ratio is above it
};

int cmd_denormals(const DenormalArgs& args);

}  // namespace opfuse::cli
