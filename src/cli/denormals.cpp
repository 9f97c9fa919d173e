// src/cli/denormals.cpp - `opfuse denormals`: what denormal inputs cost each kernel, with the
// flush-to-zero policy (src/denormal.hpp) off and on.
//
// For every case of the benchmark's quick suite (bench::quick_cases(): every op, including the
// direct, 1x1, depthwise and stem+pool convolutions) and every stage, the kernel the stage
// selects runs on two sets of inputs of the same shapes:
//   normal     the check engine's domains: data uniform in [-1, 1], variances and scales in
//              [0.5, 1.5], masks in [-2, 0];
//   denormal   the same weights, but every input that carries data (x, gemm's a, biases, means,
//              additive operands, attention's v) is uniform in [-1, 1] * 2^-130, so it is
//              denormal and so are the products and sums made from it; softmax rows are
//              0, then values in [-100, -88], so exp produces denormals.
// Each (inputs, policy) gets --repeats timed samples, each sample as many executions as fill
// ~2 ms, the samples of the normal and denormal inputs interleaved; the median is reported.
// The ratio is the median of the back-to-back pairs' ratios, not the ratio of the medians.
// Output: per kernel, normal ms, denormal ms and their ratio, with IEEE denormals (policy off,
// the "before") and with FTZ + DAZ (policy on, what every call does). --json FILE writes the
// same table for reports/HARDENING.md.
#include "src/cli/denormals.hpp"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "bench/cases.hpp"
#include "opfuse/opfuse.hpp"
#include "src/denormal.hpp"

namespace opfuse::cli {

namespace {

using Clock = std::chrono::steady_clock;

// 2^-130: below FLT_MIN (2^-126), so |x| * this is denormal for |x| <= 1.
constexpr float kTiny = 0x1p-130f;

bool ends_with(const std::string& s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// Whether input `name` of desc d carries data (denormal in the denormal set) or is a weight or
// a multiplicative parameter (normal in both sets).
bool carries_data(const OpDesc& d, std::size_t i, const std::string& name) {
  if (d.op == OpKind::attention) return name == "v";
  if (i == 0) return true;
  if (ends_with(name, "var") || ends_with(name, "scale")) return false;
  if (ends_with(name, "bias") || ends_with(name, "mean") || ends_with(name, "add") || ends_with(name, "sub"))
    return true;
  if (name == "residual") return true;
  if (is_binary(d.op) && i == 1) return d.op == OpKind::add || d.op == OpKind::sub;
  return false;
}

// Fills input i of d: normal or denormal (see the top of this file).
void fill_input(const OpDesc& d, std::size_t i, const std::string& name, bool denormal, std::mt19937& rng, float* p,
                std::int64_t n) {
  std::uniform_real_distribution<float> sym(-1.f, 1.f), pos(0.5f, 1.5f), mask(-2.f, 0.f), low(-100.f, -88.f);
  const bool positive = ends_with(name, "var") || ends_with(name, "scale") || ends_with(name, "mul") ||
                        ends_with(name, "div") || (d.op == OpKind::div && i == 1);
  if (d.op == OpKind::softmax && i == 0 && denormal) {
    // Rows along the last axis: one 0, the rest far below it, so exp(z - max) is denormal.
    const std::int64_t row = d.inputs[0].shape[d.inputs[0].shape.rank - 1];
    for (std::int64_t j = 0; j < n; ++j) p[j] = j % row == 0 ? 0.f : low(rng);
    return;
  }
  for (std::int64_t j = 0; j < n; ++j) {
    float v = name == "mask" ? mask(rng) : positive ? pos(rng) : sym(rng);
    if (denormal && carries_data(d, i, name)) v *= kTiny;
    p[j] = v;
  }
}

struct Sample {
  double normal_ms = 0, denormal_ms = 0;
  // The median over r of denormal[r] / normal[r]: each pair ran back to back, so a machine that
  // drifts between samples (a shared VM does, 10-40% within minutes) moves both alike.
  double ratio = 0;
};

// Milliseconds of one execution of prim: the median of `repeats` samples of enough executions
// to fill ~2 ms, the two input sets interleaved.
Result<Sample> time_pair(const Primitive& prim, const std::vector<const Tensor*>& normal_in,
                         const std::vector<const Tensor*>& denormal_in, const std::vector<const Tensor*>& out,
                         int repeats) {
  auto once = [&](const std::vector<const Tensor*>& in) -> Result<double> {
    const auto t0 = Clock::now();
    if (Status s = prim.execute(in, out); !s) return s;
    return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  };
  // Warm up both, and size the samples from the slower one.
  double slowest = 0;
  for (const auto* in : {&normal_in, &denormal_in}) {
    auto t = once(*in);
    if (!t) return t.status();
    t = once(*in);
    if (!t) return t.status();
    slowest = std::max(slowest, *t);
  }
  const int iters = std::max(1, static_cast<int>(2.0 / std::max(slowest, 1e-6)));
  std::vector<double> a, b;
  for (int r = 0; r < repeats; ++r) {
    for (int which = 0; which < 2; ++which) {
      const auto& in = which == 0 ? normal_in : denormal_in;
      const auto t0 = Clock::now();
      for (int k = 0; k < iters; ++k)
        if (Status s = prim.execute(in, out); !s) return s;
      const double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count() / iters;
      (which == 0 ? a : b).push_back(ms);
    }
  }
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
  };
  std::vector<double> ratios;
  for (std::size_t r = 0; r < a.size(); ++r) ratios.push_back(a[r] > 0 ? b[r] / a[r] : 0.0);
  return Sample{median(a), median(b), median(ratios)};
}

struct Row {
  std::string op, stage, kernel, case_name;
  Sample ieee, ftz;
};

}  // namespace

int cmd_denormals(const DenormalArgs& args) {
  std::vector<Stage> stages;
  for (const std::string& s : args.stages) {
    auto st = stage_from_name(s);
    if (!st || *st == Stage::cuda) {
      std::fprintf(stderr, "opfuse denormals: unknown stage '%s' (expected naive, simd or fused)\n", s.c_str());
      return 2;
    }
    stages.push_back(*st);
  }
  if (stages.empty()) stages = {Stage::naive, Stage::simd, Stage::fused};
  if (!args.op.empty() && !op_from_name(args.op)) {
    std::fprintf(stderr, "opfuse denormals: unknown op '%s'\n", args.op.c_str());
    return 2;
  }

  std::vector<Row> rows;
  for (const OpDesc& d : bench::quick_cases()) {
    if (!args.op.empty() && op_name(d.op) != args.op) continue;
    auto outs = infer_outputs(d);
    if (!outs) {
      std::fprintf(stderr, "opfuse denormals: %s\n", outs.status().to_string().c_str());
      return 1;
    }
    const auto names = input_names(d);
    // The two input sets and the outputs, shared by every stage.
    std::vector<Tensor> normal, denormal, out;
    std::mt19937 rng(12345);
    for (std::size_t i = 0; i < d.inputs.size(); ++i) {
      for (bool den : {false, true}) {
        Tensor t = Tensor::create(d.inputs[i].shape, d.inputs[i].layout).value();
        std::mt19937 r = rng;  // the same weights in both sets
        fill_input(d, i, names[i], den, r, t.mutable_data(), t.numel());
        (den ? denormal : normal).push_back(t);
      }
      rng.discard(1);
    }
    for (const TensorDesc& od : *outs) out.push_back(Tensor::create(od.shape, od.layout).value());
    std::vector<const Tensor*> np, dp, op;
    for (const Tensor& t : normal) np.push_back(&t);
    for (const Tensor& t : denormal) dp.push_back(&t);
    for (const Tensor& t : out) op.push_back(&t);

    for (Stage s : stages) {
      Context ctx;
      ctx.stage = s;
      ctx.fallback = false;
      ctx.threads = args.threads;
      auto prim = prepare(d, ctx);
      if (!prim) continue;  // this stage has no kernel for the case: nothing to time
      Row row{std::string(op_name(d.op)),
              std::string(stage_name(s)),
              std::string(prim->kernel().name),
              case_name(d),
              {},
              {}};
      for (bool flush : {false, true}) {
        detail::set_flush_denormals(flush);
        auto t = time_pair(*prim, np, dp, op, args.repeats);
        detail::set_flush_denormals(true);
        if (!t) {
          std::fprintf(stderr, "opfuse denormals: %s: %s\n", row.kernel.c_str(), t.status().to_string().c_str());
          return 1;
        }
        (flush ? row.ftz : row.ieee) = *t;
      }
      rows.push_back(std::move(row));
    }
  }

  // The table.
  std::string txt = fmt::format("{:<40} {:<34} | {:>10} {:>10} {:>6} | {:>10} {:>10} {:>6}\n", "kernel", "case",
                                "IEEE norm", "IEEE den", "ratio", "FTZ norm", "FTZ den", "ratio");
  int over = 0;
  double worst = 0;
  std::string worst_kernel;
  for (const Row& r : rows) {
    txt += fmt::format("{:<40} {:<34} | {:>10.4f} {:>10.4f} {:>6.2f} | {:>10.4f} {:>10.4f} {:>6.2f}\n", r.kernel,
                       r.case_name.substr(0, 34), r.ieee.normal_ms, r.ieee.denormal_ms, r.ieee.ratio, r.ftz.normal_ms,
                       r.ftz.denormal_ms, r.ftz.ratio);
    if (r.ftz.ratio > worst) worst = r.ftz.ratio, worst_kernel = r.kernel;
    if (args.max_ratio > 0 && r.ftz.ratio > args.max_ratio) ++over;
  }
  txt += fmt::format(
      "\n{} kernels; times in ms (median of {} samples); ratio = median of denormal / normal over the back-to-back "
      "pairs. Worst with FTZ+DAZ: {:.2f} "
      "({}).\n",
      rows.size(), args.repeats, worst, worst_kernel);
  std::fputs(txt.c_str(), stdout);

  if (!args.json_file.empty()) {
    nlohmann::json j;
    j["cpu_isa"] = std::string(isa_name(effective_isa(Context{})));
    j["threads"] = args.threads;
    j["repeats"] = args.repeats;
    j["policy"] = "FTZ+DAZ (MXCSR 0x9FC0) inside every call; IEEE = policy off";
    nlohmann::json arr = nlohmann::json::array();
    for (const Row& r : rows)
      arr.push_back(
          {{"op", r.op},
           {"stage", r.stage},
           {"kernel", r.kernel},
           {"case", r.case_name},
           {"ieee", {{"normal_ms", r.ieee.normal_ms}, {"denormal_ms", r.ieee.denormal_ms}, {"ratio", r.ieee.ratio}}},
           {"ftz", {{"normal_ms", r.ftz.normal_ms}, {"denormal_ms", r.ftz.denormal_ms}, {"ratio", r.ftz.ratio}}}});
    j["kernels"] = arr;
    std::ofstream f(args.json_file);
    f << j.dump(2) << "\n";
    if (!f) {
      std::fprintf(stderr, "opfuse denormals: cannot write %s\n", args.json_file.c_str());
      return 1;
    }
  }
  if (over > 0) {
    std::fprintf(stderr, "opfuse denormals: %d kernels are over %.2fx with FTZ+DAZ\n", over, args.max_ratio);
    return 1;
  }
  return 0;
}

}  // namespace opfuse::cli
