// src/cli/run_model.cpp - `opfuse run` and `opfuse export`: whole models from the command line.
//
//   opfuse run MODEL [--stage S] [--threads N] [--inputs DIR] [--outputs DIR] [--check]
//                    [--warmup W] [--repeat R] [--dim SYM=N]... [--memory-budget BYTES]
//                    [--dump-graph] [--profile] [--json]
//   opfuse export NAME FILE            writes a built-in model as an ONNX file
//
// MODEL is an .onnx file or a built-in name (resnet50, mobilenet_v2, bert_layer). DIR follows
// ONNX's test-data layout: input_0.pb ... and output_0.pb ..., one serialized TensorProto each.
// Without --inputs the inputs are deterministic random of the declared dims (symbolic dims from
// --dim, else the model's "opfuse.default_dims" metadata, else 1). --check compares the outputs
// with DIR's output_<i>.pb using opfuse check's comparator.
//
// This file is a thin user of opfuse/model.hpp: everything it does, a program linking the
// library can do.
#include "run_model.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <nlohmann/json.hpp>
#include <random>

#include "bench/roofline.hpp"
#include "check/check.hpp"
#include "opfuse/model.hpp"
#include "opfuse/registry.hpp"
#include "src/graph/passes/fusion.hpp"
#include "src/threads.hpp"

namespace opfuse::cli {

namespace {

namespace fs = std::filesystem;

int exit_code(const Status& s) {
  switch (s.code()) {
    case StatusCode::ok: return kRunOk;
    case StatusCode::unsupported: return kRunUnsupported;
    case StatusCode::invalid_argument:
    case StatusCode::out_of_memory: return kRunInvalid;
    case StatusCode::internal: return kRunInternal;
  }
  return kRunInternal;
}

int fail(const Status& s) {
  std::fprintf(stderr, "opfuse run: %s\n", s.to_string().c_str());
  return exit_code(s);
}

bool on_terminal() { return isatty(STDERR_FILENO) != 0; }

// Per-node rates of a profile: share of the plan's in-plan time, GFLOP/s and GB/s from the
// node's modeled work, and % of the roofline bound at its arithmetic intensity (the bandwidth
// for a node with no arithmetic).
struct NodeRates {
  double share = 0, gflops = 0, gbs = 0, roof_pct = 0;
};

std::size_t llc_bytes() {
  const long l3 = sysconf(_SC_LEVEL3_CACHE_SIZE);
  return l3 > 0 ? static_cast<std::size_t>(l3) : std::size_t{32} << 20;
}

Status write_file(const std::string& path, const std::string& bytes) {
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) return {StatusCode::invalid_argument, fmt::format("cannot write '{}'", path)};
  const bool ok = std::fwrite(bytes.data(), 1, bytes.size(), f) == bytes.size();
  if (std::fclose(f) != 0 || !ok) return {StatusCode::invalid_argument, fmt::format("cannot write '{}'", path)};
  return Status::ok();
}

// The fused graph as DOT, then rendered to FILE.svg by Graphviz's `dot` when it is installed.
Status write_dot(const Plan& plan, const std::string& path, bool quiet) {
  if (Status s = write_file(path, plan.fused_graph_dot()); !s) return s;
  const std::string svg = path + ".svg";
  const bool have_dot = std::system("command -v dot >/dev/null 2>&1") == 0;
  bool rendered = false;
  if (have_dot) {
    const std::string cmd = fmt::format("dot -Tsvg '{}' -o '{}'", path, svg);
    rendered = path.find('\'') == std::string::npos && std::system(cmd.c_str()) == 0;
  }
  if (!quiet)
    std::fprintf(stderr, "wrote %s%s\n", path.c_str(),
                 rendered ? fmt::format(" and {}", svg).c_str()
                          : (have_dot ? " (dot failed to render it)" : " (install graphviz to render it)"));
  return Status::ok();
}

// The process's peak resident memory, as the kernel counts it: what the plan's own figure
// (weights + arena + workspace) leaves out - the kernels' packed weight copies, the loader's
// protobuf - shows here.
std::uint64_t max_rss_bytes() {
  struct rusage ru {};
  return getrusage(RUSAGE_SELF, &ru) == 0 ? static_cast<std::uint64_t>(ru.ru_maxrss) * 1024 : 0;
}

// "batch=1,seq=128" -> {batch: 1, seq: 128}; malformed entries are reported.
Status parse_dims(const std::string& spec, std::map<std::string, std::int64_t>& out) {
  std::size_t pos = 0;
  while (pos < spec.size()) {
    const std::size_t comma = std::min(spec.find(',', pos), spec.size());
    const std::string item = spec.substr(pos, comma - pos);
    pos = comma + 1;
    if (item.empty()) continue;
    const std::size_t eq = item.find('=');
    if (eq == std::string::npos || eq == 0)
      return {StatusCode::invalid_argument, fmt::format("--dim '{}' must look like NAME=VALUE", item)};
    try {
      std::size_t used = 0;
      const long long v = std::stoll(item.substr(eq + 1), &used);
      if (used != item.size() - eq - 1 || v < 1) throw std::invalid_argument("bad");
      out[item.substr(0, eq)] = v;
    } catch (...) {
      return {StatusCode::invalid_argument, fmt::format("--dim '{}': the value must be a positive integer", item)};
    }
  }
  return Status::ok();
}

Result<std::vector<TensorData>> make_inputs(const Model& model, const RunArgs& a) {
  std::map<std::string, std::int64_t> dims;
  if (auto it = model.metadata().find("opfuse.default_dims"); it != model.metadata().end())
    if (Status s = parse_dims(it->second, dims); !s) return s;
  for (const std::string& d : a.dims)
    if (Status s = parse_dims(d, dims); !s) return s;
  std::vector<TensorData> in;
  if (!a.inputs_dir.empty()) {
    for (std::size_t i = 0; i < model.inputs().size(); ++i) {
      const fs::path p = fs::path(a.inputs_dir) / fmt::format("input_{}.pb", i);
      if (!fs::exists(p))
        return Status(StatusCode::invalid_argument,
                      fmt::format("{} is missing (the model has {} inputs)", p.string(), model.inputs().size()));
      auto t = read_tensor_file(p.string());
      if (!t) return t.status();
      // Test data may name its tensors; bind by position when the name is not an input.
      bool known = false;
      for (const auto& v : model.inputs()) known = known || v.name == t->name;
      if (!known) t->name.clear();
      in.push_back(std::move(*t));
    }
    return in;
  }
  for (const ValueInfo& v : model.inputs()) {
    TensorData t;
    t.name = v.name;
    t.type = v.type;
    for (const DimInfo& d : v.dims) {
      std::int64_t x = d.value;
      if (x < 0) x = dims.count(d.symbol) ? dims[d.symbol] : 1;
      t.dims.push_back(x);
    }
    std::uint64_t n = 1;
    for (std::int64_t x : t.dims)
      if (__builtin_mul_overflow(n, static_cast<std::uint64_t>(x), &n) || n > (a.memory_budget / 4))
        return Status(StatusCode::out_of_memory,
                      fmt::format("input '{}' of dims {} exceeds the memory budget", v.name, fmt::join(t.dims, "x")));
    // Deterministic per input name: uniform in [-1, 1] for f32, zeros for indices and masks.
    std::mt19937_64 rng(std::hash<std::string>{}(v.name) ^ 0x6f7066757365ull);
    std::uniform_real_distribution<float> u(-1.f, 1.f);
    if (t.type == ElementType::f32) {
      t.f32.resize(n);
      for (float& x : t.f32) x = u(rng);
    } else if (t.type == ElementType::i64) {
      t.i64.assign(n, 0);
    } else {
      t.boolean.assign(n, 0);
    }
    in.push_back(std::move(t));
  }
  return in;
}

}  // namespace

int cmd_export(const std::string& name, const std::string& file) {
  auto bytes = Model::builtin_bytes(name);
  if (!bytes) return fail(bytes.status());
  FILE* f = std::fopen(file.c_str(), "wb");
  if (!f) return fail({StatusCode::invalid_argument, fmt::format("cannot write '{}'", file)});
  const bool ok = std::fwrite(bytes->data(), 1, bytes->size(), f) == bytes->size();
  if (std::fclose(f) != 0 || !ok) return fail({StatusCode::invalid_argument, fmt::format("cannot write '{}'", file)});
  std::printf("wrote %s (%zu bytes)\n", file.c_str(), bytes->size());
  return kRunOk;
}

int cmd_fusions(bool json) {
  if (json) {
    nlohmann::json j = nlohmann::json::array();
    for (const graph::Fusion& f : graph::fusions())
      j.push_back({{"name", f.name}, {"level", graph::name(f.level)}, {"summary", f.summary}});
    std::cout << j.dump(2) << "\n";
    return kRunOk;
  }
  std::printf("%-28s %-9s %s\n", "fusion", "level", "what it does");
  for (const graph::Fusion& f : graph::fusions())
    std::printf("%-28s %-9s %s\n", std::string(f.name).c_str(), std::string(graph::name(f.level)).c_str(),
                std::string(f.summary).c_str());
  return kRunOk;
}

int cmd_run(const RunArgs& a) {
  auto stage = stage_from_name(a.stage);
  if (!stage) return fail({StatusCode::invalid_argument, fmt::format("unknown stage '{}'", a.stage)});
  auto fusion = graph::fusion_level_from_name(a.fusion);
  if (!fusion)
    return fail({StatusCode::invalid_argument,
                 fmt::format("unknown fusion level '{}' (none, basic, advanced, full)", a.fusion)});
  if (a.repeat < 1 || a.warmup < 0)
    return fail({StatusCode::invalid_argument, "--repeat must be >= 1 and --warmup >= 0"});
  const bool tty = on_terminal() && !a.json;
  Result<Model> model = Status(StatusCode::internal, "not loaded");
  if (fs::exists(a.model)) {
    model = Model::load_file(a.model);
  } else {
    const auto names = Model::builtin_names();
    if (std::find(names.begin(), names.end(), a.model) == names.end())
      return fail({StatusCode::invalid_argument,
                   fmt::format("'{}' is neither a file nor a built-in model ({})", a.model, fmt::join(names, ", "))});
    model = Model::load_builtin(a.model);
  }
  if (!model) return fail(model.status());
  if (tty) std::fprintf(stderr, "compiling %s for the %s stage...\r", a.model.c_str(), a.stage.c_str());
  CompileOptions co;
  co.stage = *stage;
  co.fusion = static_cast<FusionLevel>(*fusion);
  co.threads = a.threads;
  co.memory_budget = a.memory_budget;
  co.excluded_kernels = a.excluded_kernels;
  auto plan = Plan::compile(*model, co);
  if (!plan) return fail(plan.status());
  auto inputs = make_inputs(*model, a);
  if (!inputs) return fail(inputs.status());
  std::vector<TensorRef> refs;
  for (const TensorData& t : *inputs) refs.push_back(t.ref());
  auto first = plan->run(refs);  // specializes (when the dims are symbolic) and gives the outputs
  if (!first) return fail(first.status());
  if (tty) std::fprintf(stderr, "%60s\r", "");
  if (a.dump_graph) {
    if (*fusion != graph::FusionLevel::none) {
      std::printf("# before fusion\n%s# after fusion (%s), planned\n", plan->dump_graph_before_fusion().c_str(),
                  a.fusion.c_str());
    }
    std::fputs(plan->dump_graph().c_str(), stdout);
  }
  std::vector<MutableTensorRef> outs;
  for (TensorData& t : *first) outs.push_back(MutableTensorRef{t.name, t.type, t.dims, const_cast<void*>(t.data())});
  for (int i = 0; i < a.warmup; ++i)
    if (Status s = plan->run(refs, outs); !s) return fail(s);
  std::vector<double> ms;
  for (int i = 0; i < a.repeat; ++i) {
    if (tty && a.repeat > 1) std::fprintf(stderr, "run %d/%d\r", i + 1, a.repeat);
    const auto t0 = std::chrono::steady_clock::now();
    if (Status s = plan->run(refs, outs); !s) return fail(s);
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  if (tty) std::fprintf(stderr, "%30s\r", "");
  std::sort(ms.begin(), ms.end());
  const double median = ms[ms.size() / 2], best = ms.front();

  std::vector<check::OutputCheck> checks;
  bool check_ok = true;
  if (a.check) {
    if (a.inputs_dir.empty())
      return fail({StatusCode::invalid_argument, "--check needs --inputs DIR with output_*.pb"});
    for (std::size_t i = 0; i < first->size(); ++i) {
      const fs::path p = fs::path(a.inputs_dir) / fmt::format("output_{}.pb", i);
      if (!fs::exists(p)) return fail({StatusCode::invalid_argument, fmt::format("{} is missing", p.string())});
      auto ref = read_tensor_file(p.string());
      if (!ref) return fail(ref.status());
      check::OutputCheck c = check::compare_output((*first)[i], *ref);
      c.name = (*first)[i].name;
      check_ok = check_ok && c.ok;
      checks.push_back(std::move(c));
    }
  }
  if (!a.outputs_dir.empty()) {
    std::error_code ec;
    fs::create_directories(a.outputs_dir, ec);
    for (std::size_t i = 0; i < first->size(); ++i)
      if (Status s =
              write_tensor_file((fs::path(a.outputs_dir) / fmt::format("output_{}.pb", i)).string(), (*first)[i]);
          !s)
        return fail(s);
  }
  std::vector<GroupCheck> verified;
  bool verify_ok = true;
  if (a.verify_fusion) {
    auto v = plan->verify_fusion(refs);
    if (!v) return fail(v.status());
    verified = std::move(*v);
    for (const GroupCheck& c : verified) verify_ok = verify_ok && c.ok;
  }
  if (!a.dot_file.empty())
    if (Status s = write_dot(*plan, a.dot_file, a.json); !s) return fail(s);
  if (!a.save_optimized.empty()) {
    auto bytes = plan->optimized_model();
    if (!bytes) return fail(bytes.status());
    if (Status s = write_file(a.save_optimized, *bytes); !s) return fail(s);
  }
  // The process's peak before --profile, whose cache-flush buffer would dominate it.
  const std::uint64_t rss = max_rss_bytes();
  std::vector<NodeTime> profile;
  double profile_sum = 0, in_plan_sum = 0, cold_sum = 0;
  bench::Roofline roof;
  if (a.profile) {
    auto p = plan->profile(std::max(a.repeat, 5));
    if (!p) return fail(p.status());
    profile = std::move(*p);
    for (const NodeTime& t : profile) {
      profile_sum += t.median_ms;
      in_plan_sum += t.in_plan_median_ms;
      cold_sum += t.cold_median_ms;
    }
    // Hottest first, by the time each node takes where it stands in the plan.
    std::stable_sort(profile.begin(), profile.end(),
                     [](const NodeTime& x, const NodeTime& y) { return x.in_plan_median_ms > y.in_plan_median_ms; });
    roof = bench::probe_roofline(true, llc_bytes());
  }
  const int threads_used = a.threads > 0 ? a.threads : detail::hardware_threads();
  const auto rates = [&](const NodeTime& t) {
    NodeRates r;
    const double s = t.in_plan_median_ms * 1e-3;
    r.share = in_plan_sum > 0 ? 100.0 * t.in_plan_median_ms / in_plan_sum : 0;
    r.gflops = s > 0 ? t.flops / s * 1e-9 : 0;
    r.gbs = s > 0 ? t.bytes / s * 1e-9 : 0;
    const KernelDef* k = find_kernel(t.kernel);
    const Isa isa = k ? bench::roof_isa(*k) : Isa::scalar;
    if (t.flops > 0 && t.bytes > 0) {
      const double bound = roof.bound_gflops(isa, threads_used, t.flops / t.bytes);
      r.roof_pct = bound > 0 ? 100.0 * r.gflops / bound : 0;
    } else if (t.bytes > 0) {
      const double bw = roof.bandwidth_gbs(threads_used);
      r.roof_pct = bw > 0 ? 100.0 * r.gbs / bw : 0;
    }
    return r;
  };
  int before = plan->nodes_before_fusion(), after = plan->nodes_after_fusion();
  const auto fallbacks = plan->fallbacks();
  const auto removed = plan->fusion_nodes_removed();
  if (a.json) {
    nlohmann::json j;
    j["model"] = a.model;
    j["stage"] = a.stage;
    j["fusion"] = a.fusion;
    j["nodes_before"] = before;
    j["nodes_after"] = after;
    j["fused"] = nlohmann::json::object();
    for (const auto& [name, groups] : plan->fusions_applied()) {
      j["fusions"][name] = groups;
      if (groups > 0) j["fused"][name] = groups;
    }
    for (const auto& [name, n] : removed)
      if (n != 0) j["nodes_removed"][name] = n;
    j["fallbacks"] = nlohmann::json::array();
    for (const FusionFallback& f : fallbacks)
      j["fallbacks"].push_back(
          {{"pattern", f.pattern}, {"node", f.node}, {"replaced", f.replaced}, {"reason", f.reason}});
    j["modeled_flops"] = plan->modeled_flops();
    j["modeled_bytes"] = plan->modeled_bytes();
    if (a.verify_fusion) {
      j["verify_fusion"] = verify_ok;
      j["groups"] = nlohmann::json::array();
      for (const GroupCheck& c : verified)
        j["groups"].push_back({{"pattern", c.group.pattern},
                               {"nodes", c.group.nodes},
                               {"replaced", c.group.replaced},
                               {"ok", c.ok},
                               {"max_abs_error", c.max_abs_error},
                               {"max_normalized_error", c.max_normalized_error},
                               {"reason", c.reason}});
    }
    j["threads"] = a.threads;
    j["latency_ms"] = median;
    j["latency_min_ms"] = best;
    j["repeat"] = a.repeat;
    j["peak_bytes"] = plan->peak_bytes();
    j["weight_bytes"] = plan->weight_bytes();
    j["arena_bytes"] = plan->arena_bytes();
    j["max_rss_bytes"] = rss;
    j["times_ms"] = ms;
    j["nodes"] = plan->node_count();
    j["kernels"] = plan->kernel_launches();
    j["layout_conversions"] = plan->layout_conversions();
    if (a.check) {
      j["check"] = check_ok;
      for (const check::OutputCheck& c : checks)
        j["outputs"].push_back({{"name", c.name},
                                {"ok", c.ok},
                                {"reason", c.reason},
                                {"max_abs_error", c.max_abs},
                                {"max_normalized_error", c.max_norm}});
    }
    if (a.profile) {
      j["profile_sum_ms"] = profile_sum;
      j["profile_in_plan_sum_ms"] = in_plan_sum;
      j["profile_cold_sum_ms"] = cold_sum;
      for (const NodeTime& t : profile) {
        const NodeRates r = rates(t);
        j["profile"].push_back({{"node", t.node},
                                {"op", t.op},
                                {"kernel", t.kernel},
                                {"median_ms", t.median_ms},
                                {"in_plan_median_ms", t.in_plan_median_ms},
                                {"cold_median_ms", t.cold_median_ms},
                                {"share_pct", r.share},
                                {"flops", t.flops},
                                {"bytes", t.bytes},
                                {"gflops", r.gflops},
                                {"gbs", r.gbs},
                                {"roofline_pct", r.roof_pct}});
      }
    }
    std::cout << j.dump(2) << "\n";
  } else {
    const std::string threads =
        a.threads > 0 ? std::to_string(a.threads) : fmt::format("all ({})", detail::hardware_threads());
    std::printf("%s  stage %s  threads %s: latency %.3f ms median, %.3f ms min over %d runs\n", a.model.c_str(),
                a.stage.c_str(), threads.c_str(), median, best, a.repeat);
    std::printf(
        "  nodes %d (%d kernels, the rest views), peak memory %.2f MB (weights %.2f MB, arena %.2f MB, workspace %.2f "
        "MB); process max RSS %.2f "
        "MB\n",
        plan->node_count(), plan->kernel_launches(), plan->peak_bytes() / 1e6, plan->weight_bytes() / 1e6,
        plan->arena_bytes() / 1e6, (plan->peak_bytes() - plan->weight_bytes() - plan->arena_bytes()) / 1e6, rss / 1e6);
    if (*fusion != graph::FusionLevel::none) {
      std::string applied;
      const auto groups = plan->fusions_applied();
      for (std::size_t i = 0; i < groups.size(); ++i)
        if (groups[i].second > 0)
          applied += fmt::format("\n    {:<28} x{:<3} {:+d} nodes", groups[i].first, groups[i].second,
                                 i < removed.size() ? -removed[i].second : 0);
      std::printf("  fusion %s: %d -> %d graph nodes%s\n", a.fusion.c_str(), before, after,
                  applied.empty() ? " (nothing matched)" : applied.c_str());
      for (const FusionFallback& f : fallbacks)
        std::printf("  fallback: %s on %s: %s; runs unfused as %s\n", f.pattern.c_str(), f.node.c_str(),
                    f.reason.c_str(), fmt::format("{}", fmt::join(f.replaced, ", ")).c_str());
    }
    for (const check::OutputCheck& c : checks)
      std::printf("  check %-24s %s  max abs error %.3g, max normalized error %.3g%s%s\n", c.name.c_str(),
                  c.ok ? "ok" : "MISMATCH", c.max_abs, c.max_norm, c.reason.empty() ? "" : ": ", c.reason.c_str());
    if (a.verify_fusion) {
      std::printf("  verify-fusion: %zu groups, each against its unfused nodes on the same inputs\n", verified.size());
      for (const GroupCheck& c : verified)
        std::printf("    %-4s %-52s max abs %.3g, normalized %.3g  %s <- %s%s%s\n", c.ok ? "ok" : "FAIL",
                    c.group.pattern.c_str(), c.max_abs_error, c.max_normalized_error,
                    fmt::format("{}", fmt::join(c.group.nodes, ", ")).c_str(),
                    fmt::format("{}", fmt::join(c.group.replaced, ", ")).c_str(), c.reason.empty() ? "" : ": ",
                    c.reason.c_str());
    }
    if (a.profile) {
      std::printf("  %-40s %-16s %-32s %9s %6s %9s %9s %8s %9s %9s\n", "node (hottest first)", "op", "kernel",
                  "in plan ms", "share", "GFLOP/s", "GB/s", "% roof", "alone ms", "cold ms");
      for (const NodeTime& t : profile) {
        const NodeRates r = rates(t);
        std::printf("  %-40s %-16s %-32s %9.4f %5.1f%% %9.2f %9.2f %7.1f%% %9.4f %9.4f\n", t.node.c_str(), t.op.c_str(),
                    t.kernel.c_str(), t.in_plan_median_ms, r.share, r.gflops, r.gbs, r.roof_pct, t.median_ms,
                    t.cold_median_ms);
      }
      std::printf(
          "  sum of the nodes run on their own: %.3f ms (caches flushed: %.3f ms); timed in the plan: "
          "%.3f ms; the plan: %.3f ms (%+.1f%% over the nodes alone)\n",
          profile_sum, cold_sum, in_plan_sum, median, 100.0 * (median - profile_sum) / profile_sum);
      std::printf("  roof: %.1f GFLOP/s fp32 FMA peak, %.1f GB/s triad at %d thread(s) (quick probe)\n",
                  roof.peak_gflops(effective_isa(Context{}), threads_used), roof.bandwidth_gbs(threads_used),
                  threads_used);
    }
  }
  if (!verify_ok) return kRunMismatch;
  return check_ok ? kRunOk : kRunMismatch;
}

}  // namespace opfuse::cli
