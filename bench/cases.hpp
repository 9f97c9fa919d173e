// bench/cases.hpp - the curated problems opfuse-bench measures, one list for every op.
//
// Each case is a plain OpDesc; its name is case_name(desc), so a benchmark name
// `<op>/<impl>/<case>/t<threads>` is a reproducer. Shapes come from real models (ResNet-50,
// MobileNetV2, BERT-base) so the numbers say something about inference, not about toys.
#pragma once

#include <vector>

#include "opfuse/ops.hpp"

namespace opfuse::bench {

// Every curated case, grouped by op in OpKind order. Descs are not validated here.
std::vector<OpDesc> bench_cases();

}  // namespace opfuse::bench
