// fuzz/fuzz_model.cpp - libFuzzer target: ONNX bytes -> import -> compile -> one run.
//
// The path a model file from a stranger takes through a program that links opfuse: parse and
// check the ModelProto, import it into the graph IR, fold its constants, compile a plan (the
// fusion level and stage picked by the input's last byte, so every pass sees hostile graphs),
// bind every input with symbolic dims set to small sizes, and run once. Limits are small (a
// 16 MiB file, 64 MiB of weights plus arena) so an absurd model must fail up front with a
// Status instead of allocating; the run's inputs are filled with a pattern. A plan that models
// more than kMaxFlops of work is specialized but not run: a real network at the naive stage under
// ASan takes seconds per inference, which is slow, not wrong. Any crash, hang, leak or
// sanitizer report is a finding.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "opfuse/model.hpp"

namespace {

using namespace opfuse;

constexpr std::uint64_t kBudget = 64ull << 20;
constexpr double kMaxFlops = 5e7;

// Elements of dims, or -1 past kBudget's worth (or on a negative dim).
std::int64_t elements(const std::vector<std::int64_t>& dims) {
  std::int64_t n = 1;
  for (std::int64_t d : dims)
    if (d < 0 || __builtin_mul_overflow(n, d, &n) || n > static_cast<std::int64_t>(kBudget / 8)) return -1;
  return n;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  LoadOptions lo;
  lo.max_model_bytes = 16ull << 20;
  lo.max_tensor_bytes = kBudget;
  Result<Model> model = Model::load_memory(data, size, lo);
  if (!model) return 0;

  const std::uint8_t knobs = size ? data[size - 1] : 0;
  CompileOptions co;
  co.stage = static_cast<Stage>(knobs % 3);
  co.fusion = static_cast<FusionLevel>((knobs / 3) % 4);
  co.threads = 1;
  co.memory_budget = kBudget;
  co.max_cached_shapes = 1;
  Result<Plan> plan = Plan::compile(*model, co);
  if (!plan) return 0;

  // Inputs: declared dims, symbolic ones bound to 2; data a fixed pattern (0/1 for booleans,
  // small non-negative integers for i64 so that index inputs have a chance to be valid).
  std::vector<TensorData> inputs;
  for (const ValueInfo& vi : model->inputs()) {
    TensorData t;
    t.name = vi.name;
    t.type = vi.type;
    for (const DimInfo& d : vi.dims) t.dims.push_back(d.value >= 0 ? d.value : 2);
    const std::int64_t n = elements(t.dims);
    if (n < 0) return 0;
    switch (t.type) {
      case ElementType::f32:
        t.f32.resize(static_cast<std::size_t>(n));
        for (std::int64_t i = 0; i < n; ++i) t.f32[i] = static_cast<float>(i % 7) * 0.25f - 0.75f;
        break;
      case ElementType::i64:
        t.i64.resize(static_cast<std::size_t>(n));
        for (std::int64_t i = 0; i < n; ++i) t.i64[i] = i % 3;
        break;
      case ElementType::boolean:
        t.boolean.resize(static_cast<std::size_t>(n));
        for (std::int64_t i = 0; i < n; ++i) t.boolean[i] = static_cast<std::uint8_t>(i & 1);
        break;
    }
    inputs.push_back(std::move(t));
  }
  std::vector<TensorRef> refs;
  for (const TensorData& t : inputs) refs.push_back(t.ref());
  // Specialize first (shape inference, planning, kernel preparation), then run if small.
  if (!plan->output_infos(refs) || plan->modeled_flops() > kMaxFlops) return 0;
  (void)plan->run(refs);  // the allocating overload sizes the outputs itself
  return 0;
}
