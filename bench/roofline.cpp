// bench/roofline.cpp - the roofline probe (see roofline.hpp).
#include "roofline.hpp"

#include "opfuse/tensor.hpp"

#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <memory>
#include <thread>
#include <vector>

#include "roofline_fma.hpp"

namespace opfuse::bench {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

volatile float g_sink = 0.f;  // keeps the probe loops' results alive

// One timed run of `loop` on `threads` threads, each running `iters` steps.
double time_fma(const FmaLoop& loop, int threads, std::int64_t iters) {
  // a and b come through a volatile so the compiler cannot fold the chains.
  volatile float vb = 1e-6f;
  const float b = vb, a = 1.f - b;
  const auto t0 = Clock::now();
  if (threads == 1) {
    g_sink = g_sink + loop.run(iters, a, b);
  } else {
#pragma omp parallel num_threads(threads)
    {
      const float r = loop.run(iters, a, b);
#pragma omp critical
      g_sink = g_sink + r;
    }
  }
  return seconds_since(t0);
}

// GFLOP/s of `loop` on `threads` threads. The clocks are warmed first: the loop runs on every
// thread for `warm_s`, so a core still ramping up its frequency (or leaving a lower AVX licence)
// does not read as a lower peak. The iteration count is then calibrated on one thread to last
// about `target_s`, and the best of `reps` runs counts: thread start-up, frequency ramps and
// a neighbour's interference only ever make a run slower, so the fastest run is the closest to
// what the core can do.
double measure_peak(const FmaLoop& loop, int threads, double target_s, double warm_s, int reps) {
  std::int64_t iters = 1 << 12;
  double t = time_fma(loop, 1, iters);
  while (t < 0.01) {
    iters *= 4;
    t = time_fma(loop, 1, iters);
  }
  const auto steps_for = [&](double s) {
    return std::max<std::int64_t>(1, static_cast<std::int64_t>(static_cast<double>(iters) * s / t));
  };
  const auto warm0 = Clock::now();
  while (seconds_since(warm0) < warm_s) time_fma(loop, threads, steps_for(0.05));
  iters = steps_for(target_s);
  double best = std::numeric_limits<double>::infinity();
  for (int rep = 0; rep < reps; ++rep) best = std::min(best, time_fma(loop, threads, iters));
  return static_cast<double>(threads) * static_cast<double>(iters) * loop.flops_per_iter / best * 1e-9;
}

// The arrays come from opfuse's own allocator (alloc_buffer: huge pages for large buffers), as
// the benchmarked tensors do, so the probe's bandwidth and theirs are measured on equal terms.
struct FloatArray {
  struct Free {
    void operator()(float* p) const { opfuse::free_buffer(p); }
  };
  std::unique_ptr<float, Free> p;
  float* get() const { return p.get(); }
};

FloatArray alloc_floats(std::size_t n) {
  return {std::unique_ptr<float, FloatArray::Free>(opfuse::alloc_buffer(n * sizeof(float)))};
}

// STREAM's copy and triad kernels; static scheduling gives every thread the same contiguous
// chunk on every call, the one it first touched.
void copy_kernel(float* a, const float* b, std::int64_t n, int threads) {
#pragma omp parallel for schedule(static) num_threads(threads)
  for (std::int64_t i = 0; i < n; ++i) a[i] = b[i];
}

void triad_kernel(float* a, const float* b, const float* c, float s, std::int64_t n, int threads) {
#pragma omp parallel for schedule(static) num_threads(threads)
  for (std::int64_t i = 0; i < n; ++i) a[i] = b[i] + s * c[i];
}

}  // namespace

double Roofline::peak_gflops(Isa isa, int t) const {
  const auto& p = peak[static_cast<std::size_t>(isa)];
  if (t <= 1 || threads <= 1) return p[0];
  if (t >= threads) return p[1];
  return p[0] + (p[1] - p[0]) * static_cast<double>(t - 1) / static_cast<double>(threads - 1);
}

double Roofline::bandwidth_gbs(int t) const {
  if (t <= 1 || threads <= 1) return triad[0];
  if (t >= threads) return triad[1];
  return triad[0] + (triad[1] - triad[0]) * static_cast<double>(t - 1) / static_cast<double>(threads - 1);
}

double Roofline::bound_gflops(Isa isa, int t, double ai) const {
  return std::min(peak_gflops(isa, t), ai * bandwidth_gbs(t));
}

Roofline probe_roofline(bool quick, std::size_t llc_bytes) {
  const auto t_start = Clock::now();
  Roofline r;
  r.threads = std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  // Full probe: 0.3 s of warm-up, then the best of 5 runs of 0.2 s each, per ISA and thread
  // count; quick: 0.1 s and 3 x 0.05 s.
  const double target_s = quick ? 0.05 : 0.2, warm_s = quick ? 0.1 : 0.3;
  const int peak_reps = quick ? 3 : 5;

  const Isa cpu = cpu_isa();
  const FmaLoop loops[4] = {fma_loop_scalar(), fma_loop_sse2(), fma_loop_avx2(), fma_loop_avx512()};
  for (int i = 0; i < 4; ++i) {
    if (!loops[i].run || static_cast<Isa>(i) > cpu) continue;
    r.peak[static_cast<std::size_t>(i)][0] = measure_peak(loops[i], 1, target_s, warm_s, peak_reps);
    r.peak[static_cast<std::size_t>(i)][1] = r.threads > 1
                                                 ? measure_peak(loops[i], r.threads, target_s, warm_s, peak_reps)
                                                 : r.peak[static_cast<std::size_t>(i)][0];
  }

  // Arrays 4x (quick: 2x) the last-level cache, at least 64 (quick: 32) MiB, at most 512 MiB.
  const std::size_t min_bytes = quick ? (std::size_t{32} << 20) : (std::size_t{64} << 20);
  const std::size_t bytes = std::min(std::size_t{512} << 20, std::max(min_bytes, llc_bytes * (quick ? 2 : 4)));
  const auto n = static_cast<std::int64_t>(bytes / sizeof(float));
  r.array_mib = static_cast<double>(bytes) / (1 << 20);
  FloatArray a = alloc_floats(static_cast<std::size_t>(n)), b = alloc_floats(static_cast<std::size_t>(n)),
             c = alloc_floats(static_cast<std::size_t>(n));
  if (a.get() && b.get() && c.get()) {
    float *pa = a.get(), *pb = b.get(), *pc = c.get();
    // First touch by all threads, in the chunks the kernels use.
#pragma omp parallel for schedule(static) num_threads(r.threads)
    for (std::int64_t i = 0; i < n; ++i) {
      pa[i] = 0.f;
      pb[i] = 1.f;
      pc[i] = 2.f;
    }
    const int reps = quick ? 3 : 5;
    const int thread_counts[2] = {1, r.threads};
    for (int ti = 0; ti < 2; ++ti) {
      const int t = thread_counts[ti];
      if (ti == 1 && r.threads == 1) {
        r.copy[1] = r.copy[0];
        r.triad[1] = r.triad[0];
        break;
      }
      double best_copy = std::numeric_limits<double>::infinity(), best_triad = best_copy;
      for (int rep = 0; rep < reps; ++rep) {
        auto t0 = Clock::now();
        copy_kernel(pa, pb, n, t);
        best_copy = std::min(best_copy, seconds_since(t0));
        t0 = Clock::now();
        triad_kernel(pa, pb, pc, 3.f, n, t);
        best_triad = std::min(best_triad, seconds_since(t0));
      }
      g_sink = g_sink + pa[n / 2];
      // STREAM's byte counts: copy reads b and writes a, triad reads b and c and writes a.
      r.copy[static_cast<std::size_t>(ti)] = 2.0 * static_cast<double>(bytes) / best_copy * 1e-9;
      r.triad[static_cast<std::size_t>(ti)] = 3.0 * static_cast<double>(bytes) / best_triad * 1e-9;
    }
  }
  r.seconds = seconds_since(t_start);
  return r;
}

Isa baseline_isa() {
#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512DQ__) && defined(__AVX512VL__)
  return Isa::avx512;
#elif defined(__AVX2__) && defined(__FMA__)
  return Isa::avx2;
#elif defined(__SSE2__)
  return Isa::sse2;
#else
  return Isa::scalar;
#endif
}

Isa roof_isa(const KernelDef& k) {
  if (k.impl == Impl::naive) return baseline_isa();
  // Peers dispatch at run time on the CPU, capped as opfuse is (opfuse-bench --isa).
  if (!is_stage(k.impl)) return effective_isa(Context{});
  return kernel_isa(k);
}

}  // namespace opfuse::bench
