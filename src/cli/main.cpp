// src/cli/main.cpp - the `opfuse` command line: the registry's coverage and the cross-check.
//
//   opfuse ops [--json]                 which kernel implements which op at which stage
//   opfuse check [--stage S] [--op NAME] [--kernel NAME] [--seed N] [--case SUBSTR]
//                [--threads N] [--list] [--verbose] [--json]
//   opfuse explain OP [CASE] [--json]   the stages, kernels and modeled memory traffic of a case
//   opfuse run MODEL [...]              a whole model (run_model.cpp)
//   opfuse export NAME FILE             a built-in model as an ONNX file
//   opfuse fusions [--json]             the graph fusions and their levels
//   opfuse denormals [--stage S] [--op NAME] [--json FILE]
//                                       denormal vs normal inputs per kernel, FTZ off and on
//   opfuse --version | --help
//
// Exit codes: 0 success, 1 a check failed, 2 bad usage (unknown op, stage or option); `run`
// adds 3 for an unsupported op or attribute (run_model.hpp).
#include <fmt/format.h>
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <array>
#include <cstdio>
#include <exception>
#include <iostream>
#include <string>
#include <vector>

#include "bench/cases.hpp"
#include "check/check.hpp"
#include "opfuse/explain.hpp"
#include "opfuse/opfuse.hpp"
#include "peers/peers.hpp"
#include "run_model.hpp"
#include "src/cli/denormals.hpp"

#ifndef OPFUSE_VERSION
#define OPFUSE_VERSION "0.1.0"
#endif

namespace {

constexpr int kExitOk = 0;
constexpr int kExitFailed = 1;
constexpr int kExitUsage = 2;

// A count option: a whole number of at least `min`. CLI11's own NonNegativeNumber /
// PositiveNumber print their range up to the largest double ("not in range 0.000000 to
// 1797693...") for a value such as "1,2"; this names what is expected and what was given.
CLI::Validator whole_number(long min) {
  return CLI::Validator(
      [min](std::string& v) -> std::string {
        std::size_t used = 0;
        long n = 0;
        try {
          n = std::stol(v, &used);
        } catch (const std::exception&) {
          used = 0;
        }
        if (used == 0 || used != v.size() || n < min)
          return "expected one whole number >= " + std::to_string(min) + ", got '" + v + "'";
        return {};
      },
      "INT>=" + std::to_string(min));
}

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

// ---- opfuse explain -----------------------------------------------------------------------------

// The benchmark's curated cases (bench/cases.cpp) are the cases `explain` knows by name.
int cmd_explain(const std::string& op_arg, const std::string& case_arg, bool json) {
  const auto op = opfuse::op_from_name(op_arg);
  if (!op) return usage_error(fmt::format("unknown op '{}'", op_arg));
  std::vector<opfuse::OpDesc> cases;
  for (opfuse::OpDesc& d : opfuse::bench::bench_cases())
    if (d.op == *op) cases.push_back(std::move(d));
  const opfuse::OpDesc* desc = nullptr;
  for (const opfuse::OpDesc& d : cases) {
    const std::string name = opfuse::case_name(d);
    if (case_arg.empty() || name == case_arg) {
      desc = &d;
      break;
    }
  }
  if (!desc)
    for (const opfuse::OpDesc& d : cases)
      if (opfuse::case_name(d).find(case_arg) != std::string::npos) {
        desc = &d;
        break;
      }
  if (!desc) {
    std::vector<std::string> names;
    for (const opfuse::OpDesc& d : cases) names.push_back(opfuse::case_name(d));
    return usage_error(fmt::format("no {} case matches '{}' (cases: {})", op_arg, case_arg, join(names, ", ")));
  }
  auto model = opfuse::fusion_model(*desc);
  if (!model) {
    std::fprintf(stderr, "opfuse: %s\n", model.status().message().c_str());
    return kExitFailed;
  }
  const opfuse::OpCost cost = opfuse::op_cost(*desc);
  // The kernel each stage would run on this case (no fallback: '-' where the stage has none).
  std::vector<std::pair<std::string, const opfuse::KernelDef*>> chosen;
  for (opfuse::Stage s : {opfuse::Stage::naive, opfuse::Stage::simd, opfuse::Stage::fused}) {
    opfuse::Context ctx;
    ctx.stage = s;
    ctx.threads = 1;
    ctx.fallback = false;
    chosen.emplace_back(std::string(opfuse::stage_name(s)), opfuse::select_kernel(*desc, ctx));
  }
  const std::string cname = opfuse::case_name(*desc);
  if (json) {
    const auto steps = [](const std::vector<opfuse::TrafficStep>& v) {
      nlohmann::json a = nlohmann::json::array();
      for (const opfuse::TrafficStep& t : v)
        a.push_back(
            {{"name", t.name}, {"read_bytes", t.read_bytes}, {"write_bytes", t.write_bytes}, {"detail", t.detail}});
      return a;
    };
    nlohmann::json kj = nlohmann::json::object();
    for (const auto& [stage, k] : chosen)
      kj[stage] = k ? nlohmann::json{{"kernel", k->name}, {"summary", k->summary}} : nlohmann::json(nullptr);
    const nlohmann::json j = {{"op", op_arg},
                              {"case", cname},
                              {"flops", cost.flops},
                              {"kernels", kj},
                              {"unfused", steps(model->unfused)},
                              {"fused", steps(model->fused)},
                              {"unfused_bytes", model->unfused_bytes()},
                              {"fused_bytes", model->fused_bytes()},
                              {"saved", model->saved()},
                              {"unfused_intermediate_bytes", model->unfused_intermediate_bytes}};
    std::cout << j.dump(2) << "\n";
    return kExitOk;
  }
  std::string out = fmt::format("{} {}\n\nkernels (single thread, best ISA this CPU allows):\n", op_arg, cname);
  for (const auto& [stage, k] : chosen)
    out += k ? fmt::format("  {:<6} {}\n         {}\n", stage, k->name, k->summary)
             : fmt::format("  {:<6} -  (no kernel of its own; a request falls back to the stage below)\n", stage);
  const auto table = [&](const char* title, const std::vector<opfuse::TrafficStep>& v, double total) {
    out += fmt::format("\n{}\n  {:<34} {:>10} {:>10}  {}\n", title, "step", "read MB", "write MB", "what stays where");
    for (const opfuse::TrafficStep& t : v)
      out +=
          fmt::format("  {:<34} {:>10.2f} {:>10.2f}  {}\n", t.name, t.read_bytes / 1e6, t.write_bytes / 1e6, t.detail);
    out += fmt::format("  {:<34} {:>21.2f}  (arithmetic intensity {:.2f} flop/byte)\n", "total", total / 1e6,
                       total > 0 ? cost.flops / total : 0.0);
  };
  table("unfused sequence (naive and simd stages: one pass per step)", model->unfused, model->unfused_bytes());
  table("fused pipeline (fused stage: one pass)", model->fused, model->fused_bytes());
  out += fmt::format("\nmodeled traffic: {:.2f} MB unfused -> {:.2f} MB fused ({:.0f}% less)",
                     model->unfused_bytes() / 1e6, model->fused_bytes() / 1e6, 100.0 * model->saved());
  if (model->unfused_intermediate_bytes > 0)
    out += fmt::format("; the unfused sequence also needs {:.2f} MB of intermediates",
                       model->unfused_intermediate_bytes / 1e6);
  out += "\n(compulsory traffic: every tensor a step touches counted once; cache re-reads not modeled)\n";
  std::fputs(out.c_str(), stdout);
  return kExitOk;
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
      ->check(whole_number(0));
  check->add_flag("--json", ca.json, "Print the summary as JSON");
  check->add_flag("--list", ca.list, "List the matching case names without running them");
  check->add_flag("-v,--verbose", ca.verbose, "Print every case with its outcome");

  std::string explain_op, explain_case;
  bool explain_json = false;
  CLI::App* explain = app.add_subcommand(
      "explain", "The stages, kernels and modeled memory traffic (unfused vs fused) of one benchmark case");
  explain->add_option("op", explain_op, "Op name (e.g. conv2d)")->required();
  explain->add_option("case", explain_case, "Case name or substring (default: the op's first benchmark case)");
  explain->add_flag("--json", explain_json, "Print the model as JSON");

  opfuse::cli::RunArgs ra;
  CLI::App* runc = app.add_subcommand("run",
                                      "Run a whole model (an .onnx file or a built-in: resnet50, mobilenet_v2, "
                                      "bert_layer): latency, peak memory, --check against test data");
  runc->add_option("model", ra.model, "Model file or built-in name")->required();
  runc->add_option("--stage", ra.stage, fmt::format("Highest stage: {} (default fused)", stage_list()));
  runc->add_option("--threads", ra.threads, "Kernel threads (0 = all cores)")->check(whole_number(0));
  runc->add_option("--fusion", ra.fusion, "Graph fusion level: none, basic, advanced, full (default)");
  runc->add_option("--inputs", ra.inputs_dir, "Directory with input_<i>.pb (ONNX test-data layout)")->type_name("DIR");
  runc->add_option("--outputs", ra.outputs_dir, "Write output_<i>.pb here")->type_name("DIR");
  runc->add_flag("--check", ra.check, "Compare with the output_<i>.pb of --inputs (exit 1 on a mismatch)");
  runc->add_option("--warmup", ra.warmup, "Untimed runs first (default 3)")->check(whole_number(0));
  runc->add_option("--repeat", ra.repeat, "Timed runs; median and min reported (default 10)")->check(whole_number(1));
  runc->add_option("--dim", ra.dims, "Bind a symbolic dim for generated inputs, e.g. seq=384 (repeatable)")
      ->type_name("SYM=N");
  runc->add_option("--memory-budget", ra.memory_budget, "Bytes of weights + activations allowed (default 16 GiB)")
      ->type_name("BYTES");
  runc->add_flag("--dump-graph", ra.dump_graph,
                 "Print the graph before fusion, then the planned one: one line per node, layouts, kernels");
  runc->add_flag("--verify-fusion", ra.verify_fusion,
                 "Run every fused group against its unfused nodes on the same inputs (exit 1 over tolerance)");
  runc->add_option("--dot", ra.dot_file, "Write the fused graph as Graphviz DOT (and FILE.svg with graphviz)")
      ->type_name("FILE");
  runc->add_option("--save-optimized", ra.save_optimized,
                   "Write the fused graph as an ONNX model (fused nodes in the opfuse domain)")
      ->type_name("FILE");
  runc->add_option("--exclude-kernel", ra.excluded_kernels, "Never select this kernel (repeatable)")->type_name("NAME");
  runc->add_flag("--profile", ra.profile,
                 "Time every node (hottest first: share, GFLOP/s, GB/s, % of roofline) and compare with the plan");
  runc->add_flag("--json", ra.json, "Print latency_ms, latency_min_ms, peak_bytes, nodes, stage, ... as JSON");
  bool fusions_json = false;
  CLI::App* fusionsc = app.add_subcommand("fusions", "The graph fusions: name, level, what each rewrites");
  fusionsc->add_flag("--json", fusions_json, "Print an array of {name, level, summary}");
  std::string export_name, export_file;
  CLI::App* exportc = app.add_subcommand("export", "Write a built-in model as an ONNX file");
  exportc->add_option("name", export_name, "resnet50, mobilenet_v2 or bert_layer")->required();
  exportc->add_option("file", export_file, "Output .onnx path")->required();

  opfuse::cli::DenormalArgs da;
  CLI::App* denormalsc = app.add_subcommand(
      "denormals", "Time every kernel on normal vs denormal inputs, with IEEE denormals and with FTZ+DAZ");
  denormalsc->add_option("--stage", da.stages, "Only this stage: naive, simd, fused (repeatable; default all)");
  denormalsc->add_option("--op", da.op, "Only this op (e.g. conv2d)");
  denormalsc->add_option("--threads", da.threads, "Kernel threads (0 = all cores)")->check(whole_number(0));
  denormalsc->add_option("--repeats", da.repeats, "Timed samples per measurement; the median is reported (default 9)")
      ->check(whole_number(1));
  denormalsc->add_option("--json", da.json_file, "Also write the table as JSON")->type_name("FILE");
  denormalsc->add_option("--max-ratio", da.max_ratio, "Exit 1 if a kernel's FTZ+DAZ ratio is above this")
      ->type_name("X");

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
  if (explain->parsed()) return cmd_explain(explain_op, explain_case, explain_json);
  if (runc->parsed()) return opfuse::cli::cmd_run(ra);
  if (exportc->parsed()) return opfuse::cli::cmd_export(export_name, export_file);
  if (fusionsc->parsed()) return opfuse::cli::cmd_fusions(fusions_json);
  if (denormalsc->parsed()) return opfuse::cli::cmd_denormals(da);
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
