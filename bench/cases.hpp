// bench/cases.hpp - the curated problems opfuse-bench measures, one list for every op.
//
// Each case is a plain OpDesc; its name is case_name(desc), so a benchmark name
// `<op>/<impl>/<case>/t<threads>` is a reproducer. Shapes come from real models (ResNet-50,
// MobileNetV2, BERT-base) so the numbers say something about inference, not about toys.
#pragma once

#include <vector>

#include "opfuse/ops.hpp"

namespace opfuse::bench {

// Every curated case of the default suite, grouped by op in OpKind order. Descs are not
// validated here.
std::vector<OpDesc> bench_cases();

// The --quick smoke suite: one or a few small cases per op (every op, every stage), each a few
// milliseconds at most on the naive stage, so the whole run takes seconds.
std::vector<OpDesc> quick_cases();

}  // namespace opfuse::bench
