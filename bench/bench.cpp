// bench/bench.cpp - opfuse-bench: every kernel on every curated case, one Google Benchmark run.
//
// The benchmarks are generated, never listed by hand: for each case of bench_cases() (in
// cases.cpp; quick_cases() with --quick) and each implementation that can run it - every
// opfuse stage that has a kernel of its own for the case (select_kernel with fallback off, so
// naive, simd and fused alike), and the first peer kernel of each peer library (oneDNN,
// Eigen) whose supports() accepts it - one benchmark
//
//   <op>/<impl>/<case>/t<threads>        e.g. conv2d/onednn/n1_c64_h56_w56_k64_r3_s1_p1/t2
//
// naive runs single-threaded by definition (t1 only); every other impl runs at t1 and at
// t<nproc> (or the --threads list). The label is the kernel's registry name.
//
// The roofline: before the benchmarks, a probe measures this machine's fp32 multiply-add peak
// per ISA and its STREAM copy / triad bandwidth, on 1 thread and on all cores (roofline.hpp),
// and writes them into the JSON context (keys roofline.*). Counters of every benchmark:
//   wall_ns             wall-clock time per call, as the rates use it (with --cold-cache it
//                       leaves out the flushes and the timer pauses; the report reads it)
//   GFLOP/s, GB/s       rates from op_cost(desc) and the wall-clock time of the timed loop
//   flops, bytes        op_cost(desc) per iteration
//   AI                  arithmetic intensity, flops / bytes
//   roof_GFLOP/s        the roofline bound: min(peak of the kernel's ISA at its thread count,
//                       AI x triad bandwidth at its thread count)
//   roofline_pct        GFLOP/s / roof_GFLOP/s x 100 (for a memory-bound op that is GB/s over
//                       the triad bandwidth); above 100 where the working set fits in a cache
//   bytes_unfused, bytes_fused, traffic_saved_pct
//                       the fusion_model(desc) traffic (explain.hpp), on fused benchmarks
// The context also carries, per kernel benchmarked, its ISA, roof ISA and registry summary
// (kernel.<name>.*), so scripts/report.py writes the teaching ladder from data alone.
//
// Timing: the primitive is prepared outside the timed loop (weight packing, oneDNN
// primitive creation and BN folding are not measured) and executed once as a warm-up (not
// for naive: a scalar loop has no lazy state, and the slowest naive runs take seconds); the
// inputs are random with a fixed seed and shared by every impl of a case, the outputs are
// allocated once. Rates are computed from wall-clock time measured around the timed loop,
// so a threaded kernel is measured fairly and every ratio inside one run compares like with
// like (Google Benchmark's "Time" column and the JSON real_time are wall-clock too; cpu_time
// is the main thread's). UseRealTime() is not used because it appends "/real_time" to every
// name, and the names are a contract: <op>/<impl>/<case>/t<threads>.
//
// Repetitions: 3 unless --benchmark_repetitions says otherwise (1 with --quick), back to back;
// the JSON keeps every repetition and their aggregates, the report uses the median, the console
// shows only the aggregates. --benchmark_enable_random_interleaving=true spreads them over the
// run instead (a drift of the shared machine's speed then hits every impl alike), but every run
// then regenerates its case's data and re-prepares its primitive: the default suite took ~14
// instead of ~5 minutes that way. Progress counts each interleaved repetition as a run.
// Budget: without --benchmark_min_time, each repetition runs iterations for
// min_time = budget / (1.5 x benchmarks selected x repetitions), clamped to [0.05, 0.5] s
// ([0.01, 0.05] s with --quick), or one iteration where that takes longer (naive attention at
// 2048 tokens).
// The value is passed as the flag itself, before the user's flags, so it leaves no
// "/min_time:" in the names and an explicit flag always wins.
//
// Cold cache (--cold-cache): before every iteration, with the timer paused, a buffer of twice
// the last-level cache is read and written, so every operand and packed weight starts in DRAM.
// The flush costs milliseconds per iteration, so such runs are slower; min_time drops to a
// tenth.
//
// Progress goes to stderr, one line per benchmark as it starts:
//   [k/N] <name> ... elapsed mm:ss
// Every Google Benchmark flag works (--benchmark_filter, --benchmark_out,
// --benchmark_format=json, --benchmark_repetitions, --benchmark_list_tests, ...).
#include <benchmark/benchmark.h>
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <optional>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "cases.hpp"
#include "compare.hpp"
#include "opfuse/explain.hpp"
#include "opfuse/opfuse.hpp"
#include "peers/peers.hpp"
#include "roofline.hpp"

namespace opfuse::bench {
namespace {

constexpr std::uint64_t kSeed = 0x6f7066757365ULL;
using Clock = std::chrono::steady_clock;

// ---- options -----------------------------------------------------------------------------

struct Options {
  std::vector<OpKind> ops;           // empty: every op
  std::vector<Impl> impls;           // empty: every impl
  std::vector<int> threads;          // thread counts; naive only ever runs at 1
  bool quick = false;                // quick_cases(), short min_time, short probe
  bool cold_cache = false;           // flush the last-level cache before every iteration
  double budget_s = 240;             // target seconds of timed loops (sets min_time)
  std::string json;                  // --benchmark_out=<json> --benchmark_out_format=json
  std::vector<std::string> compare;  // OLD.json NEW.json
  double compare_threshold = 0.05;
  std::string isa;                          // --isa: the level opfuse and both peers are capped to
  std::vector<std::string> benchmark_args;  // everything else, for Google Benchmark
};

// ---- run state ---------------------------------------------------------------------------

struct RunState {
  Roofline roof;
  bool cold_cache = false;
  std::vector<std::uint64_t> flush_buffer;  // 2 x LLC, for --cold-cache
  std::uint64_t flush_round = 0;
  int total = 0;    // benchmarks selected by the filter
  int started = 0;  // benchmarks started so far
  int last_id = -1;
  Clock::time_point t0 = Clock::now();
};
RunState g_run;

// Touches every cache line of the flush buffer (read-modify-write, so it cannot become
// non-temporal stores that bypass the cache, as memset does for large sizes).
void flush_caches() {
  ++g_run.flush_round;
  std::uint64_t* p = g_run.flush_buffer.data();
  const std::size_t n = g_run.flush_buffer.size();
  for (std::size_t i = 0; i < n; i += 8) p[i] += g_run.flush_round;
  benchmark::DoNotOptimize(p);
  benchmark::ClobberMemory();
}

std::size_t llc_bytes() {
  std::size_t r = 0;
  for (const auto& c : benchmark::CPUInfo::Get().caches)
    if (c.type != "Instruction") r = std::max(r, static_cast<std::size_t>(c.size));
  return r ? r : std::size_t{32} << 20;
}

// ---- inputs ------------------------------------------------------------------------------

// splitmix64: fast, and the same stream on every platform.
std::uint64_t next_random(std::uint64_t& s) {
  std::uint64_t z = (s += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

// Uniform values in [lo, hi). Variances and divisors stay away from zero so no case
// measures NaN or Inf arithmetic.
void fill_random(const Tensor& t, std::uint64_t seed, float lo, float hi) {
  float* p = t.mutable_data();
  std::uint64_t s = seed;
  for (std::int64_t i = 0, n = t.numel(); i < n; ++i) {
    const float u = static_cast<float>(next_random(s) >> 40) * 0x1p-24f;  // [0, 1)
    p[i] = lo + (hi - lo) * u;
  }
}

bool positive_operand(const OpDesc& d, const std::string& name) {
  if (name.ends_with("var")) return true;  // batchnorm variances
  if (d.op == OpKind::div) return name == "b";
  return name.ends_with(".div");  // a div post-op or chain step
}

// The tensors of the case being measured. One slot: benchmarks of one case run one after
// another, so the inputs are built once per case and every impl sees the same values.
struct CaseData {
  int case_index = -1;
  std::vector<Tensor> in, out;
  std::vector<const Tensor*> in_ptrs, out_ptrs;
};

Status make_case_data(const OpDesc& desc, int case_index, CaseData& data) {
  data = {};
  const std::vector<std::string> names = input_names(desc);
  for (std::size_t i = 0; i < desc.inputs.size(); ++i) {
    auto t = Tensor::create(desc.inputs[i].shape, desc.inputs[i].layout);
    if (!t) return t.status();
    const bool positive = i < names.size() && positive_operand(desc, names[i]);
    fill_random(*t, kSeed + i, positive ? 0.5f : -1.f, positive ? 1.5f : 1.f);
    data.in.push_back(std::move(*t));
  }
  auto outs = infer_outputs(desc);
  if (!outs) return outs.status();
  for (const TensorDesc& od : *outs) {
    auto t = Tensor::create(od.shape, od.layout);
    if (!t) return t.status();
    data.out.push_back(std::move(*t));
  }
  for (const Tensor& t : data.in) data.in_ptrs.push_back(&t);
  for (const Tensor& t : data.out) data.out_ptrs.push_back(&t);
  data.case_index = case_index;
  return Status::ok();
}

// The prepared primitive of the benchmark being measured. Google Benchmark calls a
// benchmark function several times (iteration-count probes, repetitions); preparing once
// keeps oneDNN primitive creation and weight packing out of the measurement.
struct PrimSlot {
  int case_index = -1;
  const KernelDef* kernel = nullptr;
  int threads = 0;
  std::optional<Primitive> prim;
};

// ---- one benchmark -----------------------------------------------------------------------

struct Variant {
  int id = 0;  // registration order
  std::string name;
  const std::vector<OpDesc>* cases = nullptr;
  int case_index = 0;
  const KernelDef* kernel = nullptr;
  int threads = 1;
  OpCost cost;
  std::optional<FusionModel> traffic;  // fused benchmarks
};

std::string mm_ss(double seconds) {
  const auto s = static_cast<long>(seconds);
  return fmt::format("{:02}:{:02}", s / 60, s % 60);
}

void report_progress(const Variant& v) {
  if (v.id == g_run.last_id) return;  // the same benchmark again (iteration probes, repetitions)
  g_run.last_id = v.id;
  ++g_run.started;
  const double elapsed = std::chrono::duration<double>(Clock::now() - g_run.t0).count();
  std::fprintf(stderr, "[%d/%d] %s ... elapsed %s\n", g_run.started, std::max(g_run.total, g_run.started),
               v.name.c_str(), mm_ss(elapsed).c_str());
  std::fflush(stderr);
}

void run_variant(benchmark::State& state, const Variant& v) {
  static CaseData data;
  static PrimSlot slot;
  const OpDesc& desc = (*v.cases)[static_cast<std::size_t>(v.case_index)];
  report_progress(v);

  if (data.case_index != v.case_index) {
    slot = {};
    if (Status s = make_case_data(desc, v.case_index, data); !s) {
      data = {};
      state.SkipWithError(s.to_string().c_str());
      return;
    }
  }
  if (slot.case_index != v.case_index || slot.kernel != v.kernel || slot.threads != v.threads) {
    slot = {};
    Context ctx;
    ctx.stage = is_stage(v.kernel->impl) ? static_cast<Stage>(v.kernel->impl) : Stage::fused;
    ctx.threads = v.threads;
    ctx.fallback = false;
    auto prim = prepare_kernel(desc, *v.kernel, ctx);
    if (!prim) {
      state.SkipWithError(prim.status().to_string().c_str());
      return;
    }
    // Warm-up: first touch of workspaces, lazily created peer state, thread-pool start.
    if (v.kernel->impl != Impl::naive) {
      if (Status s = prim->execute(data.in_ptrs, data.out_ptrs); !s) {
        state.SkipWithError(s.to_string().c_str());
        return;
      }
    }
    slot.prim = std::move(*prim);
    slot.case_index = v.case_index;
    slot.kernel = v.kernel;
    slot.threads = v.threads;
  }

  const Primitive& prim = *slot.prim;
  double wall = 0;
  if (!g_run.cold_cache) {
    const auto t0 = Clock::now();
    for (auto _ : state) {
      Status s = prim.execute(data.in_ptrs, data.out_ptrs);
      if (!s) {
        state.SkipWithError(s.to_string().c_str());
        break;
      }
    }
    wall = std::chrono::duration<double>(Clock::now() - t0).count();
  } else {
    for (auto _ : state) {
      state.PauseTiming();
      flush_caches();
      state.ResumeTiming();
      const auto t0 = Clock::now();
      Status s = prim.execute(data.in_ptrs, data.out_ptrs);
      wall += std::chrono::duration<double>(Clock::now() - t0).count();
      if (!s) {
        state.SkipWithError(s.to_string().c_str());
        break;
      }
    }
  }
  benchmark::DoNotOptimize(data.out.front().data());

  using C = benchmark::Counter;
  const double iters = static_cast<double>(state.iterations());
  const double gflops = wall > 0 ? v.cost.flops * iters / wall * 1e-9 : 0.0;
  const double gbs = wall > 0 ? v.cost.bytes * iters / wall * 1e-9 : 0.0;
  const double ai = v.cost.bytes > 0 ? v.cost.flops / v.cost.bytes : 0.0;
  const Isa isa = roof_isa(*v.kernel);
  double roof = 0, pct = 0;
  if (v.cost.flops > 0) {
    roof = g_run.roof.bound_gflops(isa, v.threads, ai);
    pct = roof > 0 ? 100.0 * gflops / roof : 0.0;
  } else {  // no arithmetic: the bandwidth is the roof
    const double bw = g_run.roof.bandwidth_gbs(v.threads);
    pct = bw > 0 ? 100.0 * gbs / bw : 0.0;
  }
  state.counters["wall_ns"] = C(iters > 0 ? wall / iters * 1e9 : 0.0);
  state.counters["GFLOP/s"] = C(gflops);
  state.counters["GB/s"] = C(gbs);
  state.counters["flops"] = C(v.cost.flops);
  state.counters["bytes"] = C(v.cost.bytes);
  state.counters["AI"] = C(ai);
  state.counters["roof_GFLOP/s"] = C(roof);
  state.counters["roofline_pct"] = C(pct);
  if (v.traffic) {
    state.counters["bytes_unfused"] = C(v.traffic->unfused_bytes());
    state.counters["bytes_fused"] = C(v.traffic->fused_bytes());
    state.counters["traffic_saved_pct"] = C(100.0 * v.traffic->saved());
  }
  state.SetLabel(std::string(v.kernel->name));
}

// ---- generation --------------------------------------------------------------------------

// The kernels to measure on `desc`, at most one per impl: each opfuse stage's own best
// kernel (no fallback: a fused benchmark exists exactly when a fused kernel accepts the case),
// then the first accepting kernel of each peer library.
std::vector<const KernelDef*> kernels_for(const OpDesc& desc) {
  std::vector<const KernelDef*> r;
  const auto has_impl = [&](Impl i) {
    return std::any_of(r.begin(), r.end(), [&](const KernelDef* k) { return k->impl == i; });
  };
  for (int s = 0; s < kStageCount; ++s) {
    Context ctx;
    ctx.stage = static_cast<Stage>(s);
    ctx.threads = 1;
    ctx.fallback = false;
    if (const KernelDef* k = select_kernel(desc, ctx); k && !has_impl(k->impl)) r.push_back(k);
  }
  for (const KernelDef& k : peers::kernels())
    if (k.op == desc.op && !has_impl(k.impl) && (!k.supports || k.supports(desc))) r.push_back(&k);
  return r;
}

struct Generated {
  std::vector<std::string> names;         // every benchmark registered, in order
  std::vector<const KernelDef*> kernels;  // every kernel benchmarked, once each
  int invalid_cases = 0;
};

template <class T>
bool selected(const std::vector<T>& filter, T value) {
  return filter.empty() || std::find(filter.begin(), filter.end(), value) != filter.end();
}

Generated register_all(const std::vector<OpDesc>& cases, const Options& opt) {
  Generated g;
  for (std::size_t i = 0; i < cases.size(); ++i) {
    const OpDesc& desc = cases[i];
    if (!selected(opt.ops, desc.op)) continue;
    if (Status s = validate(desc); !s) {
      std::fprintf(stderr, "opfuse-bench: skipping an invalid case: %s\n", s.to_string().c_str());
      ++g.invalid_cases;
      continue;
    }
    const OpCost cost = op_cost(desc);
    const std::string name = case_name(desc);
    for (const KernelDef* k : kernels_for(desc)) {
      if (!selected(opt.impls, k->impl)) continue;
      std::optional<FusionModel> traffic;
      if (k->impl == Impl::fused)
        if (auto m = fusion_model(desc)) traffic = std::move(*m);
      bool any = false;
      for (int t : opt.threads) {
        if (k->impl == Impl::naive && t != 1) continue;
        Variant v{static_cast<int>(g.names.size()),
                  fmt::format("{}/{}/{}/t{}", op_name(desc.op), impl_name(k->impl), name, t),
                  &cases,
                  static_cast<int>(i),
                  k,
                  t,
                  cost,
                  traffic};
        auto* b = benchmark::RegisterBenchmark(v.name.c_str(), [v](benchmark::State& st) { run_variant(st, v); });
        b->Unit(cost.flops >= 1e8 ? benchmark::kMillisecond : benchmark::kMicrosecond);
        g.names.push_back(v.name);
        any = true;
      }
      if (any && std::find(g.kernels.begin(), g.kernels.end(), k) == g.kernels.end()) g.kernels.push_back(k);
    }
  }
  return g;
}

// ---- Google Benchmark flags this program reads too ---------------------------------------

// The value of --benchmark_<name>=VALUE among args (the last one wins, as in Google Benchmark).
std::optional<std::string> flag_value(const std::vector<std::string>& args, const std::string& name) {
  std::optional<std::string> r;
  const std::string prefix = "--benchmark_" + name;
  for (const std::string& a : args) {
    if (a == prefix) r = "true";
    if (a.starts_with(prefix + "=")) r = a.substr(prefix.size() + 1);
  }
  return r;
}

bool flag_true(const std::vector<std::string>& args, const std::string& name) {
  const auto v = flag_value(args, name);
  return v && *v != "false" && *v != "0" && *v != "no";
}

// How many registered names the --benchmark_filter selects, with Google Benchmark's rules:
// an extended regex searched anywhere in the name, "all" for everything, a leading '-' to negate.
int count_selected(const std::vector<std::string>& names, std::string filter) {
  if (filter.empty() || filter == "all") return static_cast<int>(names.size());
  bool negate = false;
  if (filter[0] == '-') {
    negate = true;
    filter.erase(0, 1);
  }
  try {
    const std::regex re(filter, std::regex::extended);
    return static_cast<int>(std::count_if(names.begin(), names.end(),
                                          [&](const std::string& n) { return std::regex_search(n, re) != negate; }));
  } catch (const std::regex_error&) {
    return static_cast<int>(names.size());  // Google Benchmark reports the bad regex itself
  }
}

// ---- the report header -------------------------------------------------------------------

std::string compiler() {
#if defined(__clang__)
  return fmt::format("clang {}.{}.{}", __clang_major__, __clang_minor__, __clang_patchlevel__);
#elif defined(__GNUC__)
  return fmt::format("gcc {}.{}.{}", __GNUC__, __GNUC_MINOR__, __GNUC_PATCHLEVEL__);
#else
  return "unknown";
#endif
}

std::string cpu_features() {
  std::string r;
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();
  const auto add = [&](bool has, const char* name) {
    if (has) r += r.empty() ? name : fmt::format(" {}", name);
  };
  add(__builtin_cpu_supports("avx512f"), "avx512f");
  add(__builtin_cpu_supports("avx512bw"), "avx512bw");
  add(__builtin_cpu_supports("avx512vnni"), "avx512vnni");
  add(__builtin_cpu_supports("avx2"), "avx2");
  add(__builtin_cpu_supports("fma"), "fma");
  add(__builtin_cpu_supports("sse4.2"), "sse4.2");
#endif
  return r.empty() ? "scalar" : r;
}

std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);) {
    if (line.starts_with("model name")) {
      const auto colon = line.find(':');
      if (colon != std::string::npos) return line.substr(line.find_first_not_of(" \t", colon + 1));
    }
  }
  return "unknown";
}

std::string num(double v) { return fmt::format("{:.4g}", v); }

void add_context(const Options& opt, const Generated& g, int cases, double min_time) {
  const Roofline& r = g_run.roof;
  using benchmark::AddCustomContext;
  AddCustomContext("opfuse_suite", opt.quick ? "quick" : "default");
  AddCustomContext("opfuse_cases", std::to_string(cases));
  AddCustomContext("opfuse_benchmarks", std::to_string(g_run.total));
  AddCustomContext("opfuse_threads", std::to_string(r.threads));
  AddCustomContext("opfuse_compiler", compiler());
  AddCustomContext("opfuse_cpu_model", cpu_model());
  AddCustomContext("opfuse_isa", cpu_features());
  AddCustomContext("opfuse_simd_isa", std::string(isa_name(effective_isa(Context{}))));
  AddCustomContext("opfuse_isa_cap", opt.isa);  // empty: the CPU's best
  AddCustomContext("onednn_isa", peers::onednn_isa());
  AddCustomContext("eigen_isa", std::string(isa_name(peers::eigen::active().isa)));
  AddCustomContext("opfuse_peers", peers::versions());
  AddCustomContext("opfuse_cold_cache", opt.cold_cache ? fmt::format("on ({} MiB flushed before every iteration)",
                                                                     g_run.flush_buffer.size() * 8 >> 20)
                                                       : "off");
  AddCustomContext("opfuse_min_time", min_time > 0 ? num(min_time) : "from --benchmark_min_time");
#ifdef NDEBUG
  AddCustomContext("opfuse_build_type", "release");
#else
  AddCustomContext("opfuse_build_type", "debug (assertions on)");
#endif
  // The measured roofline.
  for (int i = 0; i < 4; ++i) {
    const auto isa = static_cast<Isa>(i);
    const auto& p = r.peak[static_cast<std::size_t>(i)];
    if (p[0] <= 0) continue;
    AddCustomContext(fmt::format("roofline.peak.{}.t1", isa_name(isa)), num(p[0]));
    AddCustomContext(fmt::format("roofline.peak.{}.t{}", isa_name(isa), r.threads), num(p[1]));
  }
  AddCustomContext("roofline.copy.t1", num(r.copy[0]));
  AddCustomContext("roofline.triad.t1", num(r.triad[0]));
  AddCustomContext(fmt::format("roofline.copy.t{}", r.threads), num(r.copy[1]));
  AddCustomContext(fmt::format("roofline.triad.t{}", r.threads), num(r.triad[1]));
  AddCustomContext("roofline.threads", std::to_string(r.threads));
  AddCustomContext("roofline.array_mib", num(r.array_mib));
  AddCustomContext("roofline.probe_seconds", num(r.seconds));
  AddCustomContext("roofline.naive_isa", std::string(isa_name(baseline_isa())));
  AddCustomContext("roofline.peer_isa", std::string(isa_name(effective_isa(Context{}))));
  // What each benchmarked kernel is, for the teaching ladder.
  for (const KernelDef* k : g.kernels) {
    const std::string key = fmt::format("kernel.{}", k->name);
    AddCustomContext(key + ".impl", std::string(impl_name(k->impl)));
    AddCustomContext(key + ".isa", std::string(k->isa));
    AddCustomContext(key + ".roof_isa", std::string(isa_name(roof_isa(*k))));
    AddCustomContext(key + ".summary", std::string(k->summary));
  }
}

void print_roofline(const Roofline& r) {
  std::fprintf(stderr, "roofline probe (%.1f s): fp32 peak GFLOP/s at 1 / %d threads:", r.seconds, r.threads);
  for (int i = 3; i >= 0; --i) {
    const auto& p = r.peak[static_cast<std::size_t>(i)];
    if (p[0] > 0)
      std::fprintf(stderr, " %s %.0f / %.0f;", std::string(isa_name(static_cast<Isa>(i))).c_str(), p[0], p[1]);
  }
  std::fprintf(stderr, " triad GB/s %.1f / %.1f, copy GB/s %.1f / %.1f\n", r.triad[0], r.triad[1], r.copy[0],
               r.copy[1]);
}

// ---- options -----------------------------------------------------------------------------

// Parses opfuse-bench's own options; the rest (Google Benchmark's flags) end up in
// opt.benchmark_args. Returns an exit status when the program should stop (help, bad usage).
std::optional<int> parse_options(int argc, char** argv, Options& opt) {
  CLI::App app{"opfuse-bench - every opfuse stage and peer on curated real-model shapes, with roofline counters",
               "opfuse-bench"};
  app.allow_extras();
  std::vector<std::string> ops, impls;
  app.add_option("--op", ops, "Only these ops (comma-separated), e.g. gemm,conv2d")->delimiter(',');
  app.add_option("--impl,--stage", impls, "Only these impls (comma-separated): naive, simd, fused, onednn, eigen")
      ->delimiter(',');
  app.add_option("--threads", opt.threads,
                 "Thread counts (comma-separated; 0 = all cores; default 1 and all cores). naive runs at 1 only")
      ->delimiter(',')
      ->check(CLI::NonNegativeNumber);
  app.add_flag("--quick", opt.quick, "Smoke suite: small cases, short timings (well under a minute)");
  app.add_flag("--cold-cache", opt.cold_cache,
               "Flush the last-level cache before every iteration (timer paused); slower runs");
  app.add_option("--budget", opt.budget_s,
                 "Target seconds of timed loops for the whole run; sets the per-benchmark min_time "
                 "(default 240, 15 with --quick)")
      ->check(CLI::PositiveNumber);
  app.add_option("--json", opt.json, "Write the results as Google Benchmark JSON to FILE")->type_name("FILE");
  app.add_option("--compare", opt.compare, "Compare two JSON runs: per-benchmark NEW/OLD time and rate, then exit")
      ->expected(2)
      ->type_name("OLD.json NEW.json");
  app.add_option("--threshold", opt.compare_threshold, "--compare flags changes beyond this fraction (default 0.05)")
      ->check(CLI::PositiveNumber);
  app.add_option("--isa", opt.isa,
                 "Cap opfuse's kernels and both peers to this level: avx512, avx2 or sse2 (oneDNN at its closest "
                 "level, sse41 for sse2; Eigen's copy built for it), to see a lower tier on this machine")
      ->type_name("LEVEL");
  app.footer(
      "Every other argument goes to Google Benchmark: --benchmark_filter=REGEX, --benchmark_min_time=S,\n"
      "--benchmark_repetitions=N, --benchmark_out=FILE, --benchmark_format=json, --benchmark_list_tests, ...\n"
      "Benchmarks are named <op>/<impl>/<case>/t<threads>.");
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    app.exit(e);
    return 2;
  }
  for (const std::string& name : ops) {
    auto op = op_from_name(name);
    if (!op) {
      std::fprintf(stderr, "opfuse-bench: unknown op '%s'\n", name.c_str());
      return 2;
    }
    opt.ops.push_back(*op);
  }
  for (const std::string& name : impls) {
    std::optional<Impl> impl;
    for (Impl i : {Impl::naive, Impl::simd, Impl::fused, Impl::cuda, Impl::onednn, Impl::eigen})
      if (impl_name(i) == name) impl = i;
    if (!impl) {
      std::fprintf(stderr, "opfuse-bench: unknown impl '%s' (naive, simd, fused, onednn, eigen)\n", name.c_str());
      return 2;
    }
    opt.impls.push_back(*impl);
  }
  if (!opt.isa.empty()) {
    const std::optional<Isa> level = isa_from_name(opt.isa);
    if (!level || *level == Isa::scalar) {
      std::fprintf(stderr, "opfuse-bench: --isa '%s' is not a level (avx512, avx2, sse2)\n", opt.isa.c_str());
      return 2;
    }
    if (*level > cpu_isa()) {
      std::fprintf(stderr, "opfuse-bench: --isa %s is above this CPU, which runs at most %s\n", opt.isa.c_str(),
                   std::string(isa_name(cpu_isa())).c_str());
      return 2;
    }
    // The cap is OPFUSE_ISA's: read once per process, by the first kernel selection, which has
    // not happened yet; the check below catches a cap that was read before this point.
    setenv("OPFUSE_ISA", opt.isa.c_str(), 1);
    if (env_isa_cap() != *level || !peers::cap_onednn_isa(*level)) {
      std::fprintf(stderr, "opfuse-bench: internal error: the ISA cap could not be set to %s\n", opt.isa.c_str());
      return 1;
    }
  }
  const int nproc = std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  if (opt.threads.empty()) opt.threads = {1, nproc};
  for (int& t : opt.threads)
    if (t == 0) t = nproc;
  std::sort(opt.threads.begin(), opt.threads.end());
  opt.threads.erase(std::unique(opt.threads.begin(), opt.threads.end()), opt.threads.end());
  if (opt.quick && app.count("--budget") == 0) opt.budget_s = 15;
  opt.benchmark_args = app.remaining();
  for (const std::string& a : opt.benchmark_args) {
    if (!a.starts_with("--benchmark_")) {
      std::fprintf(stderr, "opfuse-bench: unknown argument '%s' (try --help)\n", a.c_str());
      return 2;
    }
  }
  return std::nullopt;
}

}  // namespace
}  // namespace opfuse::bench

int main(int argc, char** argv) {
  using namespace opfuse;
  using namespace opfuse::bench;
  g_run.t0 = Clock::now();
  Options opt;
  if (auto exit_code = parse_options(argc, argv, opt)) return *exit_code;
  if (!opt.compare.empty()) return compare_runs(opt.compare[0], opt.compare[1], opt.compare_threshold);

  static const std::vector<OpDesc> cases = opt.quick ? quick_cases() : bench_cases();
  const Generated g = register_all(cases, opt);

  std::vector<std::string> args = opt.benchmark_args;
  g_run.total = count_selected(g.names, flag_value(args, "filter").value_or(""));
  // Three repetitions by default (the report shows their median; the console the aggregates),
  // one with --quick; the budget below splits min_time across them, so the run takes no longer.
  int repetitions = opt.quick ? 1 : 3;
  if (auto r = flag_value(args, "repetitions")) {
    repetitions = std::max(1, std::atoi(r->c_str()));
  } else if (repetitions > 1) {
    args.insert(args.begin(), fmt::format("--benchmark_repetitions={}", repetitions));
    if (!flag_value(args, "display_aggregates_only") && !flag_value(args, "report_aggregates_only"))
      args.insert(args.begin(), "--benchmark_display_aggregates_only=true");
  }
  // With random interleaving every repetition is a run of its own (progress counts runs), and
  // Google Benchmark gives each one min_time / repetitions.
  const bool interleaved = repetitions > 1 && flag_true(args, "enable_random_interleaving");
  const int benchmarks = g_run.total;
  if (interleaved) g_run.total *= repetitions;
  // The budget-derived min_time goes first, so a --benchmark_min_time given by the user wins.
  // Per repetition: budget / (1.5 x benchmarks x repetitions), clamped.
  double min_time = 0;
  if (!flag_value(args, "min_time")) {
    const double lo = opt.quick ? 0.01 : 0.05, hi = opt.quick ? 0.05 : 0.5;
    min_time = std::clamp(opt.budget_s / (1.5 * std::max(1, benchmarks * repetitions)), lo, hi);
    if (opt.cold_cache) min_time /= 10;
    if (interleaved) min_time *= repetitions;  // the flag's value; each repetition gets a share
    args.insert(args.begin(), fmt::format("--benchmark_min_time={:.4f}", min_time));
  }
  if (!opt.json.empty()) {
    args.push_back("--benchmark_out=" + opt.json);
    args.push_back("--benchmark_out_format=json");
  }
  std::vector<char*> argv2{argv[0]};
  for (std::string& a : args) argv2.push_back(a.data());
  int nargs = static_cast<int>(argv2.size());
  argv2.push_back(nullptr);
  benchmark::Initialize(&nargs, argv2.data());
  if (benchmark::ReportUnrecognizedArguments(nargs, argv2.data())) return 2;

  const bool listing = flag_true(args, "list_tests");
  if (!listing) {
    g_run.roof = probe_roofline(opt.quick, llc_bytes());
    print_roofline(g_run.roof);
    if (opt.cold_cache) {
      g_run.cold_cache = true;
      g_run.flush_buffer.assign(2 * llc_bytes() / sizeof(std::uint64_t), 1);
    }
    std::fprintf(stderr, "opfuse-bench: %d benchmarks x %d repetitions, min_time %s s per %s\n", benchmarks,
                 repetitions, min_time > 0 ? fmt::format("{:.3g}", min_time).c_str() : "(from --benchmark_min_time)",
                 interleaved ? "benchmark (split over its interleaved repetitions)" : "repetition");
  }
  if (!listing) add_context(opt, g, static_cast<int>(cases.size()), min_time);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  if (!listing)
    std::fprintf(stderr, "opfuse-bench: %d runs in %s\n", g_run.started,
                 mm_ss(std::chrono::duration<double>(Clock::now() - g_run.t0).count()).c_str());
  // A curated case that no longer validates is a bug in the case list or in validate().
  return g.invalid_cases ? 1 : 0;
}
