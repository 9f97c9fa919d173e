// bench/compare.hpp - `opfuse-bench --compare OLD.json NEW.json`: two runs side by side.
//
// Reads two Google Benchmark JSON files written by opfuse-bench (--json / --benchmark_out) and
// prints, per benchmark present in both, the old and new time, NEW/OLD time and NEW/OLD rate
// (GFLOP/s, or GB/s where the op does no arithmetic to speak of), flagging every benchmark more
// than `threshold` slower as a REGRESSION and more than `threshold` faster as faster. When a
// file holds repetitions, their median aggregate is compared. Benchmarks in only one file are
// counted and listed at the end.
#pragma once

#include <string>

namespace opfuse::bench {

// Returns the process exit status: 0 when both files were read (regressions or not), 2 when a
// file is missing or not a Google Benchmark JSON.
int compare_runs(const std::string& old_path, const std::string& new_path, double threshold = 0.05);

}  // namespace opfuse::bench
