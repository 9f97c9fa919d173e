// src/check/engine.cpp - runs kernels on cases, against their references, and summarizes.
//
// Per (kernel, case): validate the desc, ask the kernel's supports(), compute the reference
// (the naive kernel; for the naive stage a peer or the closed form), run the kernel under test
// with the case's variants (unaligned views with guard floats, in-place aliasing, NaN/Inf
// data), check that it wrote nothing outside its outputs, then compare every output.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>

#include "check/check.hpp"
#include "opfuse/primitive.hpp"
#include "peers/peers.hpp"

namespace opfuse::check {

std::string_view outcome_name(Outcome o) noexcept {
  switch (o) {
    case Outcome::passed: return "passed";
    case Outcome::failed: return "failed";
    case Outcome::skipped: return "skipped";
  }
  return "unknown";
}

namespace {

using Data = std::vector<std::vector<float>>;

constexpr std::size_t kGuardFloats = 16;
constexpr float kGuardValue = -1.234567e30f;

// ---- tensors over logical data ----------------------------------------------------------------

// Calls f(logical flat index, memory offset) for every element of a dense tensor of desc d.
template <class F>
void for_each_element(const TensorDesc& d, F&& f) {
  const auto strides = dense_strides(d.shape, d.layout);
  const int rank = d.shape.rank;
  std::array<std::int64_t, kMaxRank> idx{};
  const std::int64_t n = d.shape.numel();
  for (std::int64_t i = 0; i < n; ++i) {
    std::int64_t off = 0;
    for (int k = 0; k < rank; ++k) off += idx[static_cast<std::size_t>(k)] * strides[static_cast<std::size_t>(k)];
    f(static_cast<std::size_t>(i), off);
    for (int k = rank - 1; k >= 0; --k) {
      const auto u = static_cast<std::size_t>(k);
      if (++idx[u] < d.shape.dims[u]) break;
      idx[u] = 0;
    }
  }
}

void scatter(const std::vector<float>& logical, const TensorDesc& d, float* mem) {
  for_each_element(d, [&](std::size_t i, std::int64_t off) { mem[off] = logical[i]; });
}

std::vector<float> gather(const float* mem, const TensorDesc& d) {
  std::vector<float> v(static_cast<std::size_t>(d.shape.numel()));
  for_each_element(d, [&](std::size_t i, std::int64_t off) { v[i] = mem[off]; });
  return v;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// An operand buffer: an owning aligned Tensor, or (+unaligned) a view at a +1-float offset into
// a vector with guard floats on both sides.
struct Buffer {
  std::vector<float> mem;
  Tensor tensor;
  bool guarded = false;
  float* data() { return guarded ? mem.data() + 1 : tensor.mutable_data(); }
  bool guards_intact() const {
    if (!guarded) return true;
    const std::size_t n = static_cast<std::size_t>(tensor.numel());
    if (std::memcmp(&mem[0], &kGuardValue, sizeof(float)) != 0) return false;
    for (std::size_t i = n + 1; i < mem.size(); ++i)
      if (std::memcmp(&mem[i], &kGuardValue, sizeof(float)) != 0) return false;
    return true;
  }
};

Result<Buffer> make_buffer(const TensorDesc& d, bool unaligned, bool read_only) {
  Buffer b;
  if (unaligned) {
    b.mem.assign(static_cast<std::size_t>(d.shape.numel()) + 1 + kGuardFloats, kGuardValue);
    b.guarded = true;
    auto t = read_only ? Tensor::view(static_cast<const float*>(b.mem.data() + 1), d.shape, d.layout)
                       : Tensor::view(b.mem.data() + 1, d.shape, d.layout);
    if (!t) return t.status();
    b.tensor = *t;
  } else {
    auto t = Tensor::create(d.shape, d.layout);
    if (!t) return t.status();
    b.tensor = *t;
  }
  return b;
}

// ---- running one kernel ---------------------------------------------------------------------------

struct Run {
  Status status;        // prepare / execute / setup error
  std::string problem;  // wrote outside its outputs
  Data outputs;         // logical order
};

Run run_kernel(const KernelDef& k, const OpDesc& desc, const Data& inputs, const Data& initial, unsigned variants,
               int threads) {
  Run r;
  Context ctx;
  ctx.stage = is_stage(k.impl) ? static_cast<Stage>(k.impl) : Stage::naive;
  ctx.threads = threads;
  ctx.fallback = false;
  const bool unaligned = variants & kUnaligned;
  const bool inplace = variants & kInplace;
  const bool bound = variants & kConst;
  const auto in_names = input_names(desc);
  const auto out_names = output_names(desc);
  std::vector<Buffer> in(desc.inputs.size());
  for (std::size_t i = 0; i < in.size(); ++i) {
    auto b = make_buffer(desc.inputs[i], unaligned, /*read_only=*/!(inplace && i == 0));
    if (!b) {
      r.status = b.status();
      return r;
    }
    in[i] = std::move(*b);
    scatter(inputs[i], desc.inputs[i], in[i].data());
  }
  // +const: every input but x is bound at prepare (weights, bias, BN vectors, post-op operands)
  // and passed as nullptr at execute, the path of a deployed model.
  std::vector<const Tensor*> constants;
  if (bound) {
    constants.assign(in.size(), nullptr);
    for (std::size_t i = 1; i < in.size(); ++i) constants[i] = &in[i].tensor;
  }
  auto prim = prepare_kernel(desc, k, ctx, constants);
  if (!prim) {
    r.status = prim.status();
    return r;
  }
  const std::vector<TensorDesc>& out_descs = prim->output_descs();
  std::vector<Buffer> out(out_descs.size());
  for (std::size_t o = 0; o < out.size(); ++o) {
    if (inplace && o == 0) continue;  // aliases input 0
    auto b = make_buffer(out_descs[o], unaligned, false);
    if (!b) {
      r.status = b.status();
      return r;
    }
    out[o] = std::move(*b);
    // Outputs start as NaN, so an element a kernel forgets to write cannot pass by accident;
    // gemm with beta != 0 starts from the case's prior y instead.
    if (o < initial.size()) {
      scatter(initial[o], out_descs[o], out[o].data());
    } else {
      std::fill_n(out[o].data(), static_cast<std::size_t>(out_descs[o].shape.numel()),
                  std::numeric_limits<float>::quiet_NaN());
    }
  }
  std::vector<const Tensor*> in_ptrs, out_ptrs;
  for (std::size_t i = 0; i < in.size(); ++i) in_ptrs.push_back(bound && i > 0 ? nullptr : &in[i].tensor);
  for (std::size_t o = 0; o < out.size(); ++o) out_ptrs.push_back(inplace && o == 0 ? &in[0].tensor : &out[o].tensor);

  r.status = prim->execute(in_ptrs, out_ptrs);
  if (!r.status) return r;

  for (std::size_t i = 0; i < in.size(); ++i) {
    if (!in[i].guards_intact()) r.problem = fmt::format("wrote outside the buffer of input '{}'", in_names[i]);
    if (inplace && i == 0) continue;
    if (!same_bits(gather(in[i].data(), desc.inputs[i]), inputs[i]))
      r.problem = fmt::format("modified input '{}'", in_names[i]);
  }
  for (std::size_t o = 0; o < out.size(); ++o)
    if (!(inplace && o == 0) && !out[o].guards_intact())
      r.problem = fmt::format("wrote outside the buffer of output '{}'", out_names[o]);
  for (std::size_t o = 0; o < out.size(); ++o)
    r.outputs.push_back(gather(inplace && o == 0 ? in[0].data() : out[o].data(), out_descs[o]));
  return r;
}

std::string coordinates(const Shape& s, std::int64_t index) {
  if (index < 0) return "-";
  std::array<std::int64_t, kMaxRank> c{};
  for (int d = s.rank - 1; d >= 0; --d) {
    c[static_cast<std::size_t>(d)] = index % s[d];
    index /= s[d];
  }
  std::string r;
  for (int d = 0; d < s.rank; ++d) r += fmt::format("{}{}", d ? "," : "", c[static_cast<std::size_t>(d)]);
  return r;
}

// ---- one case -----------------------------------------------------------------------------------

const KernelDef* naive_kernel(OpKind op) {
  for (const KernelDef& k : kernels())
    if (k.op == op && k.impl == Impl::naive) return &k;
  return nullptr;
}

bool accepts(const KernelDef& k, const OpDesc& d) {
  try {
    return !k.supports || k.supports(d);
  } catch (...) {
    return false;
  }
}

// The peer the naive stage is checked against: oneDNN, else Eigen.
const KernelDef* pick_peer(const OpDesc& d) {
  const KernelDef* onednn = peers::onednn_reference(d.op);
  if (!onednn) onednn = peers::find(fmt::format("{}__onednn", op_name(d.op)));
  if (onednn && accepts(*onednn, d)) return onednn;
  const KernelDef* eigen = peers::find(fmt::format("{}__eigen", op_name(d.op)));
  if (eigen && accepts(*eigen, d)) return eigen;
  return nullptr;
}

CaseResult check_one(const KernelDef& k, const Case& c, const Options& o) {
  CaseResult r;
  r.name = c.name(impl_name(k.impl));
  r.kernel = std::string(k.name);
  const auto fail = [&](std::string why) {
    r.outcome = Outcome::failed;
    r.reason = std::move(why);
    return r;
  };
  const auto skip = [&](std::string why) {
    r.outcome = Outcome::skipped;
    r.reason = std::move(why);
    return r;
  };
  auto outs = infer_outputs(c.desc);
  if (!outs) return fail("invalid case: " + outs.status().to_string());
  r.tol = tolerance(c.desc);
  if (kernel_isa(k) > effective_isa(Context{}))
    return skip(
        fmt::format("kernel needs {}; this CPU / OPFUSE_ISA allow {}", k.isa, isa_name(effective_isa(Context{}))));
  if (!accepts(k, c.desc)) return skip("kernel declines (supports() is false)");

  const Data inputs = make_inputs(c, o.seed);
  const Data initial = make_initial_outputs(c, o.seed);
  Data ref;
  if (k.impl == Impl::naive && c.closed_form()) {
    r.reference = "closed form: " + c.formula;
    ref = c.expected;
  } else {
    const KernelDef* rk = nullptr;
    if (k.impl == Impl::naive) {
      if (c.variants & (kNan | kInf))
        return skip("NaN/Inf semantics differ between libraries: not compared against peers");
      rk = pick_peer(c.desc);
      if (!rk) return skip("no peer supports this case");
    } else {
      rk = naive_kernel(c.desc.op);
      if (!rk) return fail("no naive kernel to compare against");
    }
    r.reference = std::string(rk->name);
    Run rr = run_kernel(*rk, c.desc, inputs, initial, 0, o.threads);
    if (rr.status.code() == StatusCode::unsupported)
      return skip(fmt::format("reference {} declines: {}", rk->name, rr.status.message()));
    if (!rr.status) return fail(fmt::format("reference {} failed: {}", rk->name, rr.status.to_string()));
    if (!rr.problem.empty()) return fail(fmt::format("reference {} {}", rk->name, rr.problem));
    ref = std::move(rr.outputs);
  }

  Run run = run_kernel(k, c.desc, inputs, initial, c.variants, o.threads);
  if (run.status.code() == StatusCode::unsupported) return skip("kernel declines: " + run.status.message());
  if (!run.status) return fail(run.status.to_string());
  if (!run.problem.empty()) return fail(run.problem);
  if (run.outputs.size() != ref.size())
    return fail(fmt::format("{} outputs, reference has {}", run.outputs.size(), ref.size()));

  // Compare every output; report the first failing one (else the one with the worst ratio).
  const auto names = output_names(c.desc);
  bool have = false;
  std::int64_t mismatches = 0, count = 0;
  for (std::size_t i = 0; i < ref.size(); ++i) {
    CompareResult cr = compare(run.outputs[i], ref[i], r.tol);
    mismatches += cr.mismatches;
    count += cr.count;
    const bool take = !have || (r.cmp.ok && !cr.ok) || (r.cmp.ok == cr.ok && cr.worst_ratio > r.cmp.worst_ratio);
    if (take) {
      if (!cr.ok) cr.reason = fmt::format("{}: {}", i < names.size() ? names[i] : "out", cr.reason);
      r.where =
          fmt::format("{}[{}]", i < names.size() ? names[i] : "out", coordinates((*outs)[i].shape, cr.worst.index));
      r.cmp = std::move(cr);
      have = true;
    }
  }
  r.cmp.mismatches = mismatches;
  r.cmp.count = count;
  r.compared = true;
  r.outcome = r.cmp.ok ? Outcome::passed : Outcome::failed;
  r.reason = r.cmp.ok ? "" : r.cmp.reason;
  return r;
}

struct Selection {
  Stage stage = Stage::naive;
  std::vector<const KernelDef*> kernels;
  std::string note;
};

Result<Selection> select(const Options& o) {
  Selection s;
  s.stage = o.stage;
  std::optional<OpKind> op;
  if (!o.op.empty()) {
    op = op_from_name(o.op);
    if (!op) {
      std::string known;
      for (int i = 0; i < kOpCount; ++i) known += fmt::format("{}{}", i ? ", " : "", op_name(static_cast<OpKind>(i)));
      return Status(StatusCode::invalid_argument, fmt::format("unknown op '{}' (known ops: {})", o.op, known));
    }
  }
  if (!o.kernel.empty()) {
    const KernelDef* k = find_kernel(o.kernel);
    if (!k) return Status(StatusCode::invalid_argument, fmt::format("unknown kernel '{}'", o.kernel));
    if (op && k->op != *op)
      return Status(StatusCode::invalid_argument,
                    fmt::format("kernel {} implements {}, not {}", k->name, op_name(k->op), o.op));
    s.stage = static_cast<Stage>(k->impl);
    s.kernels.push_back(k);
    return s;
  }
  for (const KernelDef& k : kernels())
    if (k.impl == impl_of(s.stage) && (!op || k.op == *op)) s.kernels.push_back(&k);
  if (s.kernels.empty())
    s.note = op ? fmt::format("stage {} has no {} kernel yet", stage_name(s.stage), o.op)
                : fmt::format("stage {} has no kernels yet", stage_name(s.stage));
  return s;
}

}  // namespace

Result<std::vector<std::string>> list_cases(const Options& o) {
  auto sel = select(o);
  if (!sel) return sel.status();
  std::vector<std::string> names;
  std::map<OpKind, std::vector<Case>> cache;
  for (const KernelDef* k : sel->kernels) {
    auto it = cache.find(k->op);
    if (it == cache.end()) it = cache.emplace(k->op, make_cases(k->op, o.seed)).first;
    for (const Case& c : it->second) {
      std::string n = c.name(impl_name(k->impl));
      if (o.case_filter.empty() || n.find(o.case_filter) != std::string::npos) names.push_back(std::move(n));
    }
  }
  return names;
}

Summary check_kernels(std::span<const KernelDef* const> kernels, const Options& o, bool keep_results) {
  const auto t0 = std::chrono::steady_clock::now();
  Summary s;
  s.stage = std::string(stage_name(o.stage));
  s.seed = o.seed;
  std::vector<CaseResult> compared;
  std::map<OpKind, std::vector<Case>> cache;
  for (const KernelDef* k : kernels) {
    KernelSummary ks;
    ks.kernel = std::string(k->name);
    ks.op = std::string(op_name(k->op));
    ks.stage = std::string(impl_name(k->impl));
    auto it = cache.find(k->op);
    if (it == cache.end()) it = cache.emplace(k->op, make_cases(k->op, o.seed)).first;
    for (const Case& c : it->second) {
      if (!o.case_filter.empty() && c.name(ks.stage).find(o.case_filter) == std::string::npos) continue;
      CaseResult r;
      try {
        r = check_one(*k, c, o);
      } catch (const std::exception& e) {
        r.name = c.name(ks.stage);
        r.kernel = ks.kernel;
        r.outcome = Outcome::failed;
        r.reason = fmt::format("exception: {}", e.what());
      }
      ++ks.cases;
      switch (r.outcome) {
        case Outcome::passed: ++ks.passed; break;
        case Outcome::failed: ++ks.failed; break;
        case Outcome::skipped:
          ++ks.skipped;
          ++s.skip_reasons[r.reason.substr(0, r.reason.find(':'))];  // the reason without its details
          break;
      }
      if (r.compared) ks.worst_ratio = std::max(ks.worst_ratio, r.cmp.worst_ratio);
      if (r.outcome == Outcome::failed) s.failures.push_back(r);
      if (r.compared) compared.push_back(r);
      if (keep_results) s.results.push_back(std::move(r));
    }
    s.cases += ks.cases;
    s.passed += ks.passed;
    s.failed += ks.failed;
    s.skipped += ks.skipped;
    s.kernels.push_back(std::move(ks));
  }
  const std::size_t n = std::min(compared.size(), kWorstReported);
  std::partial_sort(compared.begin(), compared.begin() + static_cast<std::ptrdiff_t>(n), compared.end(),
                    [](const CaseResult& a, const CaseResult& b) { return a.cmp.worst_ratio > b.cmp.worst_ratio; });
  s.worst.assign(compared.begin(), compared.begin() + static_cast<std::ptrdiff_t>(n));
  s.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return s;
}

Result<Summary> run_checks(const Options& o, bool keep_results) {
  auto sel = select(o);
  if (!sel) return sel.status();
  Options eff = o;
  eff.stage = sel->stage;
  Summary s = check_kernels(sel->kernels, eff, keep_results);
  s.note = sel->note;
  if (s.note.empty() && s.cases == 0 && !o.case_filter.empty())
    s.note = fmt::format("no case name contains '{}'", o.case_filter);
  return s;
}

Result<std::vector<std::vector<float>>> run_case(const KernelDef& kernel, const Case& c, std::uint64_t seed,
                                                 bool with_variants, int threads) {
  try {
    Run r = run_kernel(kernel, c.desc, make_inputs(c, seed), make_initial_outputs(c, seed),
                       with_variants ? c.variants : 0u, threads);
    if (!r.status) return r.status;
    if (!r.problem.empty()) return Status(StatusCode::internal, fmt::format("{}: {}", kernel.name, r.problem));
    return std::move(r.outputs);
  } catch (const std::exception& e) {
    return Status(StatusCode::internal, fmt::format("{}: exception {}", kernel.name, e.what()));
  }
}

// ---- reports --------------------------------------------------------------------------------

namespace {
nlohmann::json mismatch_json(const Mismatch& m) {
  return {{"index", m.index}, {"out", m.out}, {"ref", m.ref}, {"err", m.err}, {"allowed", m.allowed}};
}

nlohmann::json result_json(const CaseResult& r) {
  nlohmann::json j = {
      {"name", r.name},     {"kernel", r.kernel}, {"reference", r.reference}, {"outcome", outcome_name(r.outcome)},
      {"reason", r.reason}, {"atol", r.tol.atol}, {"rtol", r.tol.rtol}};
  if (r.compared) {
    j["ratio"] = r.cmp.worst_ratio;  // null when infinite
    j["where"] = r.where;
    j["worst"] = mismatch_json(r.cmp.worst);
    j["mismatches"] = r.cmp.mismatches;
    j["elements"] = r.cmp.count;
    nlohmann::json first = nlohmann::json::array();
    for (const Mismatch& m : r.cmp.first) first.push_back(mismatch_json(m));
    j["first_mismatches"] = first;
  }
  return j;
}
}  // namespace

nlohmann::json to_json(const Summary& s) {
  nlohmann::json j = {{"stage", s.stage},   {"seed", s.seed},       {"cases", s.cases},    {"passed", s.passed},
                      {"failed", s.failed}, {"skipped", s.skipped}, {"seconds", s.seconds}};
  if (!s.note.empty()) j["note"] = s.note;
  nlohmann::json kernels = nlohmann::json::array();
  for (const KernelSummary& k : s.kernels)
    kernels.push_back({{"kernel", k.kernel},
                       {"op", k.op},
                       {"stage", k.stage},
                       {"cases", k.cases},
                       {"passed", k.passed},
                       {"failed", k.failed},
                       {"skipped", k.skipped},
                       {"worst_ratio", k.worst_ratio}});
  j["kernels"] = kernels;
  nlohmann::json worst = nlohmann::json::array();
  for (const CaseResult& r : s.worst) worst.push_back(result_json(r));
  j["worst"] = worst;
  nlohmann::json failures = nlohmann::json::array();
  for (const CaseResult& r : s.failures) failures.push_back(result_json(r));
  j["failures"] = failures;
  j["skip_reasons"] = s.skip_reasons;
  return j;
}

namespace {
std::string ratio_str(double r) { return std::isinf(r) ? std::string("inf") : fmt::format("{:.3g}", r); }

std::string detail(const CaseResult& r) {
  const Mismatch& w = r.cmp.worst;
  return fmt::format("at {}: out {:.9g} ref {:.9g} |err| {:.3g} allowed {:.3g} (atol {:.3g}, rtol {:.3g})", r.where,
                     w.out, w.ref, w.err, w.allowed, r.tol.atol, r.tol.rtol);
}
}  // namespace

std::string to_text(const Summary& s, bool verbose) {
  std::string t = fmt::format("opfuse check: stage {}, seed {}\n", s.stage, s.seed);
  if (!s.note.empty()) t += fmt::format("note: {}\n", s.note);
  if (!s.kernels.empty()) {
    t += fmt::format("\n{:<32} {:>6} {:>7} {:>7} {:>8} {:>12}\n", "kernel", "cases", "passed", "failed", "skipped",
                     "worst ratio");
    for (const KernelSummary& k : s.kernels)
      t += fmt::format("{:<32} {:>6} {:>7} {:>7} {:>8} {:>12}\n", k.kernel, k.cases, k.passed, k.failed, k.skipped,
                       ratio_str(k.worst_ratio));
  }
  if (verbose) {
    t += "\ncases:\n";
    for (const CaseResult& r : s.results) {
      t += fmt::format("  {:<7} {} [{} vs {}]", outcome_name(r.outcome), r.name, r.kernel,
                       r.reference.empty() ? "-" : r.reference);
      if (r.compared) t += fmt::format(" ratio {}", ratio_str(r.cmp.worst_ratio));
      if (!r.reason.empty()) t += fmt::format(" - {}", r.reason);
      t += "\n";
    }
  }
  if (!s.worst.empty()) {
    t += "\nworst cases (err / allowed):\n";
    for (const CaseResult& r : s.worst)
      t += fmt::format("  {:>8}  {}  [vs {}]\n            {}\n", ratio_str(r.cmp.worst_ratio), r.name, r.reference,
                       detail(r));
  }
  if (!s.failures.empty()) {
    t += fmt::format("\nfailures ({}):\n", s.failures.size());
    for (const CaseResult& r : s.failures) {
      t += fmt::format("  FAIL {}  [{} vs {}]\n       {}\n", r.name, r.kernel, r.reference.empty() ? "-" : r.reference,
                       r.reason);
      if (r.compared) {
        t += fmt::format("       worst {}\n", detail(r));
        for (const Mismatch& m : r.cmp.first)
          t += fmt::format("       [{}] out {:.9g} ref {:.9g} |err| {:.3g} allowed {:.3g}\n", m.index, m.out, m.ref,
                           m.err, m.allowed);
      }
    }
  }
  if (!s.skip_reasons.empty()) {
    t += "\nskipped:\n";
    for (const auto& [why, n] : s.skip_reasons) t += fmt::format("  {:>5}  {}\n", n, why);
  }
  t += fmt::format("\n{} cases: {} passed, {} failed, {} skipped ({:.2f} s)\n", s.cases, s.passed, s.failed, s.skipped,
                   s.seconds);
  return t;
}

}  // namespace opfuse::check
