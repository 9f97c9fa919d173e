// bench/bench.cpp - opfuse-bench: every kernel on every curated case, one Google Benchmark run.
//
// The benchmarks are generated, never listed by hand: for each case of bench_cases() (in
// cases.cpp) and each implementation that can run it - every opfuse stage that has a
// kernel of its own for the case (select_kernel with fallback off), and the first peer
// kernel of each peer library (oneDNN, Eigen) whose supports() accepts it - one benchmark
//
//   <op>/<impl>/<case>/t<threads>        e.g. conv2d/onednn/n1_c64_h56_w56_k64_r3_s1_p1/t2
//
// naive runs single-threaded by definition (t1 only); every other impl runs at t1 and at
// t<nproc>. Counters: GFLOP/s and GB/s (rates from op_cost(desc) per iteration) and the
// per-iteration `flops` and `bytes` they come from; the label is the kernel's registry name.
//
// Timing: the primitive is prepared outside the timed loop (weight packing, oneDNN
// primitive creation and BN folding are not measured) and executed once as a warm-up; the
// inputs are random with a fixed seed and shared by every impl of a case, the outputs are
// allocated once. Rates are computed from wall-clock time measured around the timed loop,
// so a threaded kernel is measured fairly and every ratio inside one run compares like with
// like (Google Benchmark's "Time" column and the JSON real_time are wall-clock too; cpu_time
// is the main thread's). UseRealTime() is not used because it appends "/real_time" to every
// name, and the names are a contract: <op>/<impl>/<case>/t<threads>.
//
// Every Google Benchmark flag works (--benchmark_filter, --benchmark_out,
// --benchmark_format=json, --benchmark_repetitions, --benchmark_list_tests, ...). Without
// --benchmark_min_time each benchmark runs for kDefaultMinTime seconds of iterations, or one
// iteration where that takes longer (the naive 1024^3 GEMM), which keeps the whole default
// run to a few minutes; the default is passed as that flag, not as a per-benchmark MinTime,
// so it leaves no "/min_time:" in the names and the flag always wins.
#include <benchmark/benchmark.h>
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "cases.hpp"
#include "opfuse/opfuse.hpp"
#include "peers/peers.hpp"

namespace opfuse::bench {
namespace {

constexpr const char* kDefaultMinTime = "--benchmark_min_time=0.25";  // seconds per benchmark
constexpr std::uint64_t kSeed = 0x6f7066757365ULL;

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
  const std::vector<OpDesc>* cases = nullptr;
  int case_index = 0;
  const KernelDef* kernel = nullptr;
  int threads = 1;
  OpCost cost;
};

void run_variant(benchmark::State& state, const Variant& v) {
  static CaseData data;
  static PrimSlot slot;
  const OpDesc& desc = (*v.cases)[static_cast<std::size_t>(v.case_index)];

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
    if (Status s = prim->execute(data.in_ptrs, data.out_ptrs); !s) {
      state.SkipWithError(s.to_string().c_str());
      return;
    }
    slot.prim = std::move(*prim);
    slot.case_index = v.case_index;
    slot.kernel = v.kernel;
    slot.threads = v.threads;
  }

  const Primitive& prim = *slot.prim;
  const auto t0 = std::chrono::steady_clock::now();
  for (auto _ : state) {
    Status s = prim.execute(data.in_ptrs, data.out_ptrs);
    if (!s) {
      state.SkipWithError(s.to_string().c_str());
      break;
    }
  }
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  benchmark::DoNotOptimize(data.out.front().data());

  using C = benchmark::Counter;
  const double iters = static_cast<double>(state.iterations());
  state.counters["GFLOP/s"] = C(wall > 0 ? v.cost.flops * iters / wall * 1e-9 : 0.0);
  state.counters["GB/s"] = C(wall > 0 ? v.cost.bytes * iters / wall * 1e-9 : 0.0);
  state.counters["flops"] = C(v.cost.flops);
  state.counters["bytes"] = C(v.cost.bytes);
  state.SetLabel(std::string(v.kernel->name));
}

// ---- generation --------------------------------------------------------------------------

// The kernels to measure on `desc`, at most one per impl: each opfuse stage's own best
// kernel (no fallback), then the first accepting kernel of each peer library.
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
  int benchmarks = 0;
  int invalid_cases = 0;
};

Generated register_all(const std::vector<OpDesc>& cases) {
  Generated g;
  const int nproc = std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  for (std::size_t i = 0; i < cases.size(); ++i) {
    const OpDesc& desc = cases[i];
    if (Status s = validate(desc); !s) {
      std::fprintf(stderr, "opfuse-bench: skipping an invalid case: %s\n", s.to_string().c_str());
      ++g.invalid_cases;
      continue;
    }
    const OpCost cost = op_cost(desc);
    const std::string name = case_name(desc);
    for (const KernelDef* k : kernels_for(desc)) {
      std::vector<int> threads{1};
      if (k->impl != Impl::naive && nproc > 1) threads.push_back(nproc);
      for (int t : threads) {
        const Variant v{&cases, static_cast<int>(i), k, t, cost};
        const std::string bench_name = fmt::format("{}/{}/{}/t{}", op_name(desc.op), impl_name(k->impl), name, t);
        auto* b = benchmark::RegisterBenchmark(bench_name.c_str(), [v](benchmark::State& st) { run_variant(st, v); });
        b->Unit(cost.flops >= 1e8 ? benchmark::kMillisecond : benchmark::kMicrosecond);
        ++g.benchmarks;
      }
    }
  }
  return g;
}

// What the report header shows about this build and machine.
std::string compiler() {
#if defined(__clang__)
  return fmt::format("clang {}.{}.{}", __clang_major__, __clang_minor__, __clang_patchlevel__);
#elif defined(__GNUC__)
  return fmt::format("gcc {}.{}.{}", __GNUC__, __GNUC_MINOR__, __GNUC_PATCHLEVEL__);
#else
  return "unknown";
#endif
}

std::string cpu_isa() {
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

}  // namespace
}  // namespace opfuse::bench

int main(int argc, char** argv) {
  using namespace opfuse;
  // The default minimum time goes in as the flag itself, placed first so that a
  // --benchmark_min_time given by the user (parsed later) overrides it.
  std::vector<char*> args(argv, argv + argc);
  std::string default_min_time = bench::kDefaultMinTime;
  args.insert(args.begin() + 1, default_min_time.data());
  int nargs = static_cast<int>(args.size());
  args.push_back(nullptr);

  static const std::vector<OpDesc> cases = bench::bench_cases();
  const bench::Generated g = bench::register_all(cases);

  benchmark::Initialize(&nargs, args.data());
  if (benchmark::ReportUnrecognizedArguments(nargs, args.data())) return 1;
  const unsigned nproc = std::max(1u, std::thread::hardware_concurrency());
  benchmark::AddCustomContext("opfuse_cases", std::to_string(cases.size()));
  benchmark::AddCustomContext("opfuse_benchmarks", std::to_string(g.benchmarks));
  benchmark::AddCustomContext("opfuse_threads", std::to_string(nproc));
  benchmark::AddCustomContext("opfuse_compiler", bench::compiler());
  benchmark::AddCustomContext("opfuse_isa", bench::cpu_isa());
#ifdef NDEBUG
  benchmark::AddCustomContext("opfuse_build_type", "release");
#else
  benchmark::AddCustomContext("opfuse_build_type", "debug (assertions on)");
#endif
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  // A curated case that no longer validates is a bug in the case list or in validate().
  return g.invalid_cases ? 1 : 0;
}
