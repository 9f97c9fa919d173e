// src/primitive.cpp - kernel selection, prepare once / execute many, tensor validation.
#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "opfuse/primitive.hpp"
#include "src/checked.hpp"
#include "src/denormal.hpp"
#include "src/threads.hpp"

namespace opfuse {

namespace {
struct AlignedFree {
  void operator()(float* p) const noexcept { free_buffer(p); }
};

Status op_error(StatusCode code, const OpDesc& d, const std::string& msg) {
  return {code, fmt::format("{}: {}", op_name(d.op), msg)};
}

bool overlaps(const Tensor& a, const Tensor& b) {
  const float* a0 = a.data();
  const float* b0 = b.data();
  return a0 < b0 + b.numel() && b0 < a0 + a.numel();
}

Status check_context(const OpDesc& d, const Context& ctx) {
  if (static_cast<int>(ctx.stage) >= kStageCount)
    return op_error(StatusCode::invalid_argument, d,
                    fmt::format("context stage {} is unknown", static_cast<int>(ctx.stage)));
  if (static_cast<int>(ctx.max_isa) > static_cast<int>(Isa::avx512))
    return op_error(StatusCode::invalid_argument, d,
                    fmt::format("context max_isa {} is unknown", static_cast<int>(ctx.max_isa)));
  if (ctx.threads < 0)
    return op_error(StatusCode::invalid_argument, d, fmt::format("context threads {} must be >= 0", ctx.threads));
  return Status::ok();
}
}  // namespace

struct Primitive::Impl {
  OpDesc desc;
  const KernelDef* kernel = nullptr;
  std::vector<TensorDesc> outputs;
  std::shared_ptr<void> state;
  std::unique_ptr<float, AlignedFree> workspace;
  std::size_t workspace_floats = 0;
  int threads = 1;
  std::vector<Tensor> constants;             // bound at prepare; empty Tensor for runtime inputs
  mutable std::vector<const Tensor*> bound;  // execute's input pointers (sized at prepare)
  // Derived once at prepare so that execute's checks allocate nothing on the success path.
  std::vector<std::string> in_names, out_names;
  std::vector<std::vector<bool>> inplace;  // [output][input]: allows_inplace(desc, input, output)
};

const OpDesc& Primitive::desc() const noexcept { return impl_->desc; }
std::size_t Primitive::workspace_size() const noexcept { return impl_ ? impl_->workspace_floats : 0; }
const KernelDef& Primitive::kernel() const noexcept { return *impl_->kernel; }
const std::vector<TensorDesc>& Primitive::output_descs() const noexcept { return impl_->outputs; }

const KernelDef* select_kernel(const OpDesc& desc, const Context& ctx) noexcept {
  // Stages from ctx.stage down to naive; within a stage the table is best-first.
  const Isa isa = effective_isa(ctx);
  for (int s = static_cast<int>(ctx.stage); s >= 0; --s) {
    for (const KernelDef& k : kernels()) {
      if (k.op != desc.op || k.impl != static_cast<Impl>(s) || kernel_isa(k) > isa) continue;
      if (std::find(ctx.excluded_kernels.begin(), ctx.excluded_kernels.end(), k.name) != ctx.excluded_kernels.end())
        continue;
      bool ok = true;
      try {
        ok = !k.supports || k.supports(desc);
      } catch (...) {
        ok = false;
      }
      if (ok) return &k;
    }
    if (!ctx.fallback) break;
  }
  return nullptr;
}

Result<Primitive> prepare_kernel(const OpDesc& desc, const KernelDef& kernel, const Context& ctx,
                                 std::span<const Tensor* const> constants) noexcept {
  try {
    auto outs = infer_outputs(desc);
    if (!outs) return outs.status();
    if (Status s = check_context(desc, ctx); !s) return s;
    if (!constants.empty() && constants.size() != desc.inputs.size())
      return op_error(
          StatusCode::invalid_argument, desc,
          fmt::format("constants has {} entries, expected one per input ({})", constants.size(), desc.inputs.size()));
    const auto names = input_names(desc);
    for (std::size_t i = 0; i < constants.size(); ++i) {
      const Tensor* c = constants[i];
      if (!c) continue;
      if (c->empty())
        return op_error(StatusCode::invalid_argument, desc, fmt::format("constant input '{}' has no data", names[i]));
      if (!(c->desc() == desc.inputs[i]))
        return op_error(
            StatusCode::invalid_argument, desc,
            fmt::format("constant input '{}' is {} ({}) but the desc says {} ({})", names[i], c->shape().str(),
                        to_string(c->layout()), desc.inputs[i].shape.str(), to_string(desc.inputs[i].layout)));
    }
    if (kernel.op != desc.op)
      return op_error(StatusCode::invalid_argument, desc,
                      fmt::format("kernel {} implements {}, not this op", kernel.name, op_name(kernel.op)));
    if (!kernel.execute)
      return op_error(StatusCode::internal, desc, fmt::format("kernel {} has no execute", kernel.name));
    if (kernel_isa(kernel) > effective_isa(ctx))
      return op_error(StatusCode::unsupported, desc,
                      fmt::format("kernel {} needs {}, but this CPU / OPFUSE_ISA / context allow only {}", kernel.name,
                                  kernel.isa, isa_name(effective_isa(ctx))));
    if (kernel.supports && !kernel.supports(desc))
      return op_error(StatusCode::unsupported, desc,
                      fmt::format("kernel {} does not support case {}", kernel.name, case_name(desc)));
    auto impl = std::make_shared<Primitive::Impl>();
    impl->desc = desc;
    impl->kernel = &kernel;
    impl->outputs = std::move(*outs);
    impl->threads = detail::resolve_threads(ctx.threads);
    // The memory budget, before anything is allocated: the workspace prepare allocates and the
    // packed copies of the bound constants (a kernel's prepare step keeps about their size).
    const std::size_t ws_floats = kernel.workspace ? kernel.workspace(desc) : 0;
    std::uint64_t need =
        ctx.own_workspace
            ? detail::checked_mul(std::uint64_t{ws_floats}, std::uint64_t{sizeof(float)}).value_or(UINT64_MAX)
            : 0;
    if (kernel.prepare)
      for (const Tensor* c : constants)
        if (c) need = detail::saturating_add(need, static_cast<std::uint64_t>(c->bytes()));
    if (need > ctx.memory_budget)
      return op_error(
          StatusCode::out_of_memory, desc,
          fmt::format("kernel {} needs {} bytes at prepare ({} floats of workspace{}), over the context's "
                      "memory budget of {} bytes",
                      kernel.name, need, ctx.own_workspace ? ws_floats : 0,
                      kernel.prepare && !constants.empty() ? " and the bound constants" : "", ctx.memory_budget));
    if (kernel.workspace) {
      const std::size_t floats = ws_floats;
      impl->workspace_floats = floats;
      if (floats > 0 && ctx.own_workspace) {
        if (floats > (SIZE_MAX - kAlignment) / sizeof(float))
          return op_error(StatusCode::out_of_memory, desc, fmt::format("workspace of {} floats is too large", floats));
        const std::size_t bytes = (floats * sizeof(float) + kAlignment - 1) / kAlignment * kAlignment;
        float* p = alloc_buffer(bytes);
        if (!p)
          return op_error(StatusCode::out_of_memory, desc,
                          fmt::format("cannot allocate a {}-byte workspace for {}", bytes, kernel.name));
        impl->workspace.reset(p);
      }
    }
    impl->constants.resize(desc.inputs.size());
    impl->bound.resize(desc.inputs.size());
    impl->in_names = names;
    impl->out_names = output_names(desc);
    impl->inplace.assign(impl->outputs.size(), std::vector<bool>(desc.inputs.size()));
    for (std::size_t o = 0; o < impl->outputs.size(); ++o)
      for (std::size_t i = 0; i < desc.inputs.size(); ++i)
        impl->inplace[o][i] = allows_inplace(desc, static_cast<int>(i), static_cast<int>(o));
    std::vector<const Tensor*> const_ptrs;
    if (!constants.empty()) {
      const_ptrs.resize(constants.size());
      for (std::size_t i = 0; i < constants.size(); ++i)
        if (constants[i]) {
          impl->constants[i] = *constants[i];
          const_ptrs[i] = &impl->constants[i];
        }
    }
    if (kernel.prepare) {
      Context c = ctx;
      c.threads = impl->threads;
      if (Status s = kernel.prepare(desc, c, const_ptrs.empty() ? nullptr : const_ptrs.data(), impl->state); !s)
        return s;
    }
    Primitive prim;
    prim.impl_ = std::move(impl);
    return prim;
  } catch (const std::bad_alloc&) {
    return op_error(StatusCode::out_of_memory, desc, "out of memory while preparing");
  } catch (const std::exception& e) {
    return op_error(StatusCode::internal, desc, fmt::format("prepare failed: {}", e.what()));
  } catch (...) {
    return op_error(StatusCode::internal, desc, "prepare failed with an unknown exception");
  }
}

Result<Primitive> prepare(const OpDesc& desc, const Context& ctx, std::span<const Tensor* const> constants) noexcept {
  try {
    if (Status s = validate(desc); !s) return s;
    if (Status s = check_context(desc, ctx); !s) return s;
    const KernelDef* k = select_kernel(desc, ctx);
    if (!k)
      return op_error(StatusCode::unsupported, desc,
                      fmt::format("no {} kernel{} accepts case {}", stage_name(ctx.stage),
                                  ctx.fallback ? " (or lower stage)" : "", case_name(desc)));
    return prepare_kernel(desc, *k, ctx, constants);
  } catch (...) {
    return op_error(StatusCode::out_of_memory, desc, "out of memory while preparing");
  }
}

Status Primitive::execute(std::span<const Tensor* const> in, std::span<const Tensor* const> out) const noexcept {
  return execute(in, out, nullptr);
}

Status Primitive::execute(std::span<const Tensor* const> in, std::span<const Tensor* const> out,
                          float* workspace) const noexcept {
  if (!impl_) return {StatusCode::invalid_argument, "execute on an empty Primitive (prepare failed or was not called)"};
  const Impl& im = *impl_;
  const OpDesc& d = im.desc;
  try {
    if (in.size() != d.inputs.size())
      return op_error(StatusCode::invalid_argument, d,
                      fmt::format("expected {} input tensors, got {}", d.inputs.size(), in.size()));
    if (out.size() != im.outputs.size())
      return op_error(StatusCode::invalid_argument, d,
                      fmt::format("expected {} output tensors, got {}", im.outputs.size(), out.size()));
    const std::vector<std::string>& in_names = im.in_names;
    const std::vector<std::string>& out_names = im.out_names;
    // Labels are formatted only on the error path: execute allocates nothing when it succeeds.
    auto check_tensor = [&](const Tensor* t, const TensorDesc& want, const char* kind,
                            const std::string& name) -> Status {
      if (!t) return op_error(StatusCode::invalid_argument, d, fmt::format("{} '{}' is a null pointer", kind, name));
      if (t->empty()) return op_error(StatusCode::invalid_argument, d, fmt::format("{} '{}' has no data", kind, name));
      if (!(t->desc() == want))
        return op_error(
            StatusCode::invalid_argument, d,
            fmt::format("{} '{}' is {} ({}) but the op was prepared for {} ({})", kind, name, t->shape().str(),
                        to_string(t->layout()), want.shape.str(), to_string(want.layout)));
      return Status::ok();
    };
    for (std::size_t i = 0; i < in.size(); ++i) {
      const Tensor& bound = im.constants[i];
      if (!bound.empty()) {
        // Bound at prepare: nullptr or the very same tensor.
        if (in[i] && (in[i]->data() != bound.data() || !(in[i]->desc() == bound.desc())))
          return op_error(StatusCode::invalid_argument, d,
                          fmt::format("input '{}' was bound as a constant at prepare; pass nullptr or the same tensor",
                                      in_names[i]));
        im.bound[i] = &bound;
        continue;
      }
      if (Status s = check_tensor(in[i], d.inputs[i], "input", in_names[i]); !s) return s;
      im.bound[i] = in[i];
    }
    if (d.op == OpKind::attention && d.p<AttentionParams>().packed_qkv) {
      // One packed (B, S, 3, H, D) buffer: k and v start H*D and 2*H*D floats after q.
      const std::int64_t hd = d.inputs[0].shape[1] * d.inputs[0].shape[3];
      if (im.bound[1]->data() != im.bound[0]->data() + hd || im.bound[2]->data() != im.bound[0]->data() + 2 * hd)
        return op_error(StatusCode::invalid_argument, d,
                        fmt::format("packed_qkv: k and v must view q's buffer {} and {} floats after q", hd, 2 * hd));
    }
    for (std::size_t o = 0; o < out.size(); ++o) {
      if (Status s = check_tensor(out[o], im.outputs[o], "output", out_names[o]); !s) return s;
      if (out[o]->read_only())
        return op_error(StatusCode::invalid_argument, d, fmt::format("output '{}' is a read-only view", out_names[o]));
      for (std::size_t p = 0; p < o; ++p)
        if (overlaps(*out[o], *out[p]))
          return op_error(StatusCode::invalid_argument, d,
                          fmt::format("output '{}' overlaps output '{}'", out_names[o], out_names[p]));
      for (std::size_t i = 0; i < in.size(); ++i) {
        const Tensor& src = *im.bound[i];
        if (!overlaps(*out[o], src)) continue;
        const bool same = out[o]->data() == src.data() && out[o]->desc() == src.desc();
        if (!same || !im.inplace[o][i])
          return op_error(StatusCode::invalid_argument, d,
                          fmt::format("output '{}' overlaps input '{}' and this op cannot run in place on it",
                                      out_names[o], in_names[i]));
      }
    }
    KernelArgs args;
    args.desc = &d;
    args.in = im.bound.data();
    args.out = out.data();
    args.workspace = workspace ? workspace : im.workspace.get();
    if (im.workspace_floats > 0 && !args.workspace)
      return op_error(StatusCode::invalid_argument, d,
                      fmt::format("kernel {} needs a workspace of {} floats: it was prepared without its own "
                                  "(own_workspace = false), so execute must be given one",
                                  im.kernel->name, im.workspace_floats));
    if (workspace && reinterpret_cast<std::uintptr_t>(workspace) % kAlignment != 0)
      return op_error(StatusCode::invalid_argument, d, "the workspace given to execute is not 64-byte aligned");
    args.state = im.state.get();
    args.threads = im.threads;
    // The flush-to-zero policy for this thread, restored on return (src/denormal.hpp).
    const detail::DenormalGuard denormals;
    im.kernel->execute(args);
    return Status::ok();
  } catch (const std::bad_alloc&) {
    return op_error(StatusCode::out_of_memory, d, "out of memory while executing");
  } catch (...) {
    return op_error(StatusCode::internal, d, "a kernel threw an exception");
  }
}

Status run(const OpDesc& desc, std::span<const Tensor* const> inputs, std::span<const Tensor* const> outputs,
           const Context& ctx) noexcept {
  auto prim = prepare(desc, ctx);
  if (!prim) return prim.status();
  return prim->execute(inputs, outputs);
}

Status run(const OpDesc& desc, std::initializer_list<const Tensor*> inputs,
           std::initializer_list<const Tensor*> outputs, const Context& ctx) noexcept {
  return run(desc, std::span<const Tensor* const>(inputs.begin(), inputs.size()),
             std::span<const Tensor* const>(outputs.begin(), outputs.size()), ctx);
}

}  // namespace opfuse
