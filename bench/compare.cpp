// bench/compare.cpp - the compare mode (see compare.hpp).
#include "compare.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace opfuse::bench {

namespace {

struct Result {
  double time_ns = 0;  // wall-clock per iteration
  double gflops = 0, gbs = 0;
  double ai = 0;  // flop/byte; 0 when the file predates the counter
};

struct Run {
  std::vector<std::string> order;  // names in file order
  std::map<std::string, Result> results;
};

double to_ns(double v, const std::string& unit) {
  if (unit == "us") return v * 1e3;
  if (unit == "ms") return v * 1e6;
  if (unit == "s") return v * 1e9;
  return v;
}

// The benchmarks of one file: the median aggregate of each when there are repetitions,
// otherwise the mean of its iteration runs. Errored runs are left out.
std::optional<Run> load(const std::string& path) {
  std::ifstream in(path);
  if (!in) {
    std::fprintf(stderr, "opfuse-bench --compare: cannot open %s\n", path.c_str());
    return std::nullopt;
  }
  nlohmann::json j = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object() || !j.contains("benchmarks") || !j["benchmarks"].is_array()) {
    std::fprintf(stderr, "opfuse-bench --compare: %s is not a Google Benchmark JSON file\n", path.c_str());
    return std::nullopt;
  }
  bool has_median = false;
  for (const auto& b : j["benchmarks"])
    if (b.value("aggregate_name", "") == "median") has_median = true;
  Run run;
  std::map<std::string, int> counts;
  for (const auto& b : j["benchmarks"]) {
    if (!b.is_object() || b.value("error_occurred", false)) continue;
    const bool aggregate = b.value("run_type", "iteration") == "aggregate";
    if (has_median ? b.value("aggregate_name", "") != "median" : aggregate) continue;
    const std::string name = b.value("run_name", b.value("name", ""));
    if (name.empty() || !b.contains("real_time")) continue;
    Result r;
    // opfuse's own per-call wall time where the run has it (with --cold-cache, real_time also
    // holds the timer pauses), Google Benchmark's real_time otherwise.
    r.time_ns = b.contains("wall_ns") && b["wall_ns"].get<double>() > 0
                    ? b["wall_ns"].get<double>()
                    : to_ns(b["real_time"].get<double>(), b.value("time_unit", "ns"));
    r.gflops = b.value("GFLOP/s", 0.0);
    r.gbs = b.value("GB/s", 0.0);
    r.ai = b.value("AI", 0.0);
    auto [it, inserted] = run.results.try_emplace(name, r);
    const int n = ++counts[name];
    if (inserted) {
      run.order.push_back(name);
    } else {  // repetitions without aggregates: running mean
      it->second.time_ns += (r.time_ns - it->second.time_ns) / n;
      it->second.gflops += (r.gflops - it->second.gflops) / n;
      it->second.gbs += (r.gbs - it->second.gbs) / n;
    }
  }
  return run;
}

std::string fmt_time(double ns) {
  if (ns >= 1e9) return fmt::format("{:.3g} s", ns / 1e9);
  if (ns >= 1e6) return fmt::format("{:.3g} ms", ns / 1e6);
  if (ns >= 1e3) return fmt::format("{:.3g} us", ns / 1e3);
  return fmt::format("{:.3g} ns", ns);
}

}  // namespace

int compare_runs(const std::string& old_path, const std::string& new_path, double threshold) {
  const std::optional<Run> old_run = load(old_path), new_run = load(new_path);
  if (!old_run || !new_run) return 2;

  std::size_t width = 9;
  for (const std::string& name : new_run->order)
    if (old_run->results.count(name)) width = std::max(width, name.size());
  fmt::print("old: {}\nnew: {}\n", old_path, new_path);
  fmt::print("time and rate ratios are NEW/OLD: time above 1 is slower; flagged beyond +-{:.0f}%\n\n", threshold * 100);
  fmt::print("{:<{}}  {:>10}  {:>10}  {:>9}  {:>9}  {}\n", "benchmark", width, "old time", "new time", "time", "rate",
             "");
  int compared = 0, slower = 0, faster = 0;
  std::vector<std::string> regressions;
  for (const std::string& name : new_run->order) {
    auto it = old_run->results.find(name);
    if (it == old_run->results.end()) continue;
    const Result &o = it->second, &n = new_run->results.at(name);
    const double time_ratio = o.time_ns > 0 ? n.time_ns / o.time_ns : 0;
    // GFLOP/s, except for ops below 1 flop/byte (elementwise, norms): their rate is GB/s.
    const bool by_flops = n.ai >= 1.0 && o.gflops > 0 && n.gflops > 0;
    const double rate_ratio = by_flops ? n.gflops / o.gflops : o.gbs > 0 ? n.gbs / o.gbs : 0;
    std::string flag;
    if (time_ratio > 1 + threshold) {
      flag = "REGRESSION";
      ++slower;
      regressions.push_back(name);
    } else if (time_ratio > 0 && time_ratio < 1 - threshold) {
      flag = "faster";
      ++faster;
    }
    ++compared;
    fmt::print("{:<{}}  {:>10}  {:>10}  {:>8.3f}x  {:>8.3f}x  {}\n", name, width, fmt_time(o.time_ns),
               fmt_time(n.time_ns), time_ratio, rate_ratio, flag);
  }
  int only_old = 0, only_new = 0;
  for (const std::string& name : old_run->order)
    if (!new_run->results.count(name)) ++only_old;
  for (const std::string& name : new_run->order)
    if (!old_run->results.count(name)) ++only_new;
  fmt::print("\n{} compared: {} slower by more than {:.0f}% (REGRESSION), {} faster, {} unchanged", compared, slower,
             threshold * 100, faster, compared - slower - faster);
  fmt::print("; {} only in old, {} only in new\n", only_old, only_new);
  for (const std::string& name : regressions) fmt::print("REGRESSION {}\n", name);
  return 0;
}

}  // namespace opfuse::bench
