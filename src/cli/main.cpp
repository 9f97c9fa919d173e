// src/cli/main.cpp - the `opfuse` command line: the registry's coverage and the cross-check.
//
//   opfuse ops [--json]                 which kernel implements which op at which stage
//   opfuse check [--stage S] [--op NAME] [--kernel NAME] [--seed N] [--case SUBSTR]
//                [--threads N] [--list] [--verbose] [--json]
//   opfuse --version | --help
//
// Exit codes: 0 success, 1 a check failed, 2 bad usage (unknown op, stage or option).
#include <fmt/format.h>
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <array>
#include <cstdio>
#include <exception>
#include <iostream>
#include <string>
#include <vector>

#include "check/check.hpp"
#include "opfuse/opfuse.hpp"
#include "peers/peers.hpp"

#ifndef OPFUSE_VERSION
#define OPFUSE_VERSION "0.1.0"
#endif

namespace {

constexpr int kExitOk = 0;
constexpr int kExitFailed = 1;
constexpr int kExitUsage = 2;

std::string join(const std::vector<std::string>& v, std::string_view sep) {
  std::string r;
  for (std::size_t i = 0; i < v.size(); ++i) r += (i ? std::string(sep) : std::string()) + v[i];
  return r;
}

std::string stage_list() {
  std::vector<std::string> names;
  for (int i = 0; i < opfuse::kStageCount; ++i) names.emplace_back(opfuse::stage_name(static_cast<opfuse::Stage>(i)));
  return join(names, ", ");
}

// ---- opfuse ops ---------------------------------------------------------------------------------

int cmd_ops(bool json) {
  using opfuse::KernelDef;
  if (json) {
    // One object per kernel: opfuse stages first (registry order), then the peers.
    nlohmann::json a = nlohmann::json::array();
    const auto add = [&](const KernelDef& k) {
      a.push_back(
          {{"op", opfuse::op_name(k.op)}, {"stage", opfuse::impl_name(k.impl)}, {"kernel", k.name}, {"isa", k.isa}});
    };
    for (const KernelDef& k : opfuse::kernels()) add(k);
    for (const KernelDef& k : opfuse::peers::kernels()) add(k);
    std::cout << a.dump(2) << "\n";
    return kExitOk;
  }
  // Table: rows = ops, columns = stages, cells = kernel names ("-" for none).
  std::array<std::array<std::vector<std::string>, opfuse::kStageCount>, opfuse::kOpCount> cells;
  std::array<std::vector<std::string>, opfuse::kOpCount> peer_cells;
  for (const KernelDef& k : opfuse::kernels())
    if (opfuse::is_stage(k.impl))
      cells[static_cast<std::size_t>(k.op)][static_cast<std::size_t>(k.impl)].emplace_back(k.name);
  for (const KernelDef& k : opfuse::peers::kernels()) peer_cells[static_cast<std::size_t>(k.op)].emplace_back(k.name);
  std::array<std::size_t, opfuse::kStageCount> width{};
  for (int s = 0; s < opfuse::kStageCount; ++s)
    width[static_cast<std::size_t>(s)] = opfuse::stage_name(static_cast<opfuse::Stage>(s)).size();
  for (const auto& row : cells)
    for (std::size_t s = 0; s < row.size(); ++s)
      width[s] = std::max(width[s], std::max<std::size_t>(1, join(row[s], ", ").size()));
  std::string out = fmt::format("{:<18}", "op");
  for (int s = 0; s < opfuse::kStageCount; ++s)
    out +=
        fmt::format("  {:<{}}", opfuse::stage_name(static_cast<opfuse::Stage>(s)), width[static_cast<std::size_t>(s)]);
  out += "\n";
  for (int o = 0; o < opfuse::kOpCount; ++o) {
    out += fmt::format("{:<18}", opfuse::op_name(static_cast<opfuse::OpKind>(o)));
    for (std::size_t s = 0; s < width.size(); ++s) {
      const auto& names = cells[static_cast<std::size_t>(o)][s];
      out += fmt::format("  {:<{}}", names.empty() ? std::string("-") : join(names, ", "), width[s]);
    }
    out += "\n";
  }
  out += fmt::format("\npeers ({}):\n", opfuse::peers::versions());
  for (int o = 0; o < opfuse::kOpCount; ++o) {
    const auto& names = peer_cells[static_cast<std::size_t>(o)];
    out += fmt::format("{:<18}  {}\n", opfuse::op_name(static_cast<opfuse::OpKind>(o)),
                       names.empty() ? std::string("-") : join(names, ", "));
  }
  std::fputs(out.c_str(), stdout);
  return kExitOk;
}

// ---- opfuse check -------------------------------------------------------------------------------

struct CheckArgs {
  std::string stage = "naive";
  std::string op;
  std::string kernel;
  std::string case_filter;
  std::uint64_t seed = 1;
  int threads = 0;
  bool json = false;
  bool list = false;
  bool verbose = false;
};

int usage_error(const std::string& msg) {
  std::fprintf(stderr, "opfuse: %s\n", msg.c_str());
  return kExitUsage;
}

int cmd_check(const CheckArgs& a) {
  const auto stage = opfuse::stage_from_name(a.stage);
  if (!stage) return usage_error(fmt::format("unknown stage '{}' (expected one of: {})", a.stage, stage_list()));
  opfuse::check::Options o;
  o.stage = *stage;
  o.op = a.op;
  o.kernel = a.kernel;
  o.seed = a.seed;
  o.case_filter = a.case_filter;
  o.threads = a.threads;
  if (a.list) {
    auto names = opfuse::check::list_cases(o);
    if (!names) return usage_error(names.status().message());
    if (a.json) {
      std::cout << nlohmann::json(*names).dump(2) << "\n";
    } else {
      for (const auto& n : *names) std::cout << n << "\n";
    }
    return kExitOk;
  }
  auto summary = opfuse::check::run_checks(o, a.verbose);
  if (!summary) return usage_error(summary.status().message());
  if (a.json) {
    std::cout << opfuse::check::to_json(*summary).dump(2) << "\n";
  } else {
    std::fputs(opfuse::check::to_text(*summary, a.verbose).c_str(), stdout);
  }
  return summary->failed > 0 ? kExitFailed : kExitOk;
}

int run(int argc, char** argv) {
  CLI::App app{"opfuse - deep-learning inference operators in three stages (naive, simd, fused)", "opfuse"};
  app.set_version_flag("--version", std::string("opfuse ") + OPFUSE_VERSION);
  app.require_subcommand(1);

  bool ops_json = false;
  CLI::App* ops = app.add_subcommand("ops", "Coverage matrix: every op x stage, with kernel names, and the peers");
  ops->add_flag("--json", ops_json, "Print an array of {op, stage, kernel, isa} (peers have stage onednn/eigen)");

  CheckArgs ca;
  CLI::App* check =
      app.add_subcommand("check", "Cross-check kernels: a stage against naive; naive against oneDNN and closed forms");
  check->add_option("--stage", ca.stage, fmt::format("Stage to check: {} (default naive)", stage_list()));
  check->add_option("--op", ca.op, "Only this op (e.g. conv2d)");
  check->add_option("--kernel", ca.kernel, "Only this kernel (e.g. gemm__naive); implies its stage");
  check->add_option("--seed", ca.seed, "Seed for the input data and the seed-drawn shapes (default 1)");
  check->add_option("--case", ca.case_filter, "Only cases whose full name contains SUBSTR")->type_name("SUBSTR");
  check->add_option("--threads", ca.threads, "Threads for the kernels under test (0 = all cores)")
      ->check(CLI::NonNegativeNumber);
  check->add_flag("--json", ca.json, "Print the summary as JSON");
  check->add_flag("--list", ca.list, "List the matching case names without running them");
  check->add_flag("-v,--verbose", ca.verbose, "Print every case with its outcome");

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    app.exit(e);
    return kExitUsage;
  }
  if (ops->parsed()) return cmd_ops(ops_json);
  if (check->parsed()) return cmd_check(ca);
  return usage_error("no command given (try --help)");
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "opfuse: internal error: %s\n", e.what());
  } catch (...) {
    std::fprintf(stderr, "opfuse: internal error\n");
  }
  return kExitFailed;
}
