// python/opfuse_module.cpp - the Python module `opfuse`: whole models and single ops on numpy.
//
//   import numpy as np, opfuse
//   sess = opfuse.Session("mobilenet_v2", stage="fused")         # or "model.onnx", or bytes
//   [x] = sess.inputs                                             # NodeArg(name, shape, dtype, type)
//   y = sess.run({x.name: np.zeros(x.shape, np.float32)})         # {output name: ndarray}
//   y = sess.run(None, {x.name: ...})                             # ONNX Runtime style: a list
//   z = opfuse.ops.conv2d(x, w, padding=1, post_ops=["relu"], stage="simd")
//
// Session mirrors ONNX Runtime's InferenceSession over a Plan (model.hpp); ops calls one
// Primitive (primitive.hpp) per call. How the data gets in and out:
// - inputs: a C-contiguous array of exactly the declared dtype (float32, int64 or bool) is
//   passed by pointer, no copy on this side (the plan itself copies inputs into its arena, as
//   Plan::run does for every caller). Anything else (Fortran order, a strided view, float64 for
//   a float32 input, a list) is converted once with numpy when numpy's "same_kind" casting
//   allows it, and named in Session.converted_inputs; a cast that would lose the kind (float to
//   int64, complex to float) is refused with an opfuse.Error instead of guessing.
// - outputs: numpy arrays allocated with the shapes Plan::output_infos gives for these inputs,
//   and written by the plan directly (the MutableTensorRef overload of run), so no extra copy.
// - the GIL is released while a plan or a kernel runs (and while a model loads and compiles),
//   so other Python threads go on; the arrays are kept alive by references held here.
// - a Plan is thread-safe (model.hpp), so a Session holds no lock of its own: run() calls from
//   several Python threads on one Session compute in parallel (the GIL is released while the
//   plan runs), each in its own arena. What the Session itself keeps between calls
//   (converted_inputs) is read and written only with the GIL held. The plan's internal lock is
//   held only for a cache lookup and never waits for the GIL, so taking it with the GIL held
//   (the queries) cannot deadlock.
// - errors: a Status that is not ok raises opfuse.Error carrying its message, as the subclass
//   for its code (InvalidArgumentError is also a ValueError, UnsupportedError a
//   NotImplementedError, OutOfMemoryError a MemoryError, InternalError a RuntimeError), with
//   .code ("invalid_argument", ...) and .message attributes.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

#include "opfuse/context.hpp"
#include "opfuse/model.hpp"
#include "opfuse/ops.hpp"
#include "opfuse/primitive.hpp"
#include "opfuse/registry.hpp"
#include "opfuse/status.hpp"
#include "opfuse/tensor.hpp"

#ifndef OPFUSE_VERSION
#define OPFUSE_VERSION "unknown"
#endif

namespace py = pybind11;
using namespace opfuse;

namespace {

// ---- errors ---------------------------------------------------------------------------------

// The exception classes, created once at import. They live as long as the interpreter (the
// module holds them too), so raw handles are enough here.
struct Errors {
  py::handle base, invalid_argument, unsupported, out_of_memory, internal;
};
Errors g_errors;

py::handle error_class(StatusCode code) {
  switch (code) {
    case StatusCode::invalid_argument: return g_errors.invalid_argument;
    case StatusCode::unsupported: return g_errors.unsupported;
    case StatusCode::out_of_memory: return g_errors.out_of_memory;
    case StatusCode::internal: return g_errors.internal;
    case StatusCode::ok: break;
  }
  return g_errors.base;
}

// Raises the Python exception of a failed Status. Needs the GIL.
[[noreturn]] void raise_status(const Status& s) {
  py::handle cls = error_class(s.code());
  py::object e = cls(py::str(s.message()));
  e.attr("code") = py::str(to_string(s.code()));
  e.attr("message") = py::str(s.message());
  PyErr_SetObject(cls.ptr(), e.ptr());
  throw py::error_already_set();
}
[[noreturn]] void raise_invalid(const std::string& message) {
  raise_status(Status(StatusCode::invalid_argument, message));
}

template <class T>
T value_or_raise(Result<T>&& r) {
  if (!r) raise_status(r.status());
  return std::move(r).value();
}

// ---- numpy helpers ----------------------------------------------------------------------------

py::module_& numpy() {
  // Leaked on purpose: a static py::object would be destroyed after the interpreter is gone.
  static auto* np = new py::module_(py::module_::import("numpy"));
  return *np;
}

const char* numpy_dtype_name(ElementType t) {
  switch (t) {
    case ElementType::f32: return "float32";
    case ElementType::i64: return "int64";
    case ElementType::boolean: return "bool";
  }
  return "float32";
}
// ONNX Runtime's NodeArg.type strings.
const char* ort_type_name(ElementType t) {
  switch (t) {
    case ElementType::f32: return "tensor(float)";
    case ElementType::i64: return "tensor(int64)";
    case ElementType::boolean: return "tensor(bool)";
  }
  return "tensor(float)";
}

// True when `a` is C-contiguous with exactly the dtype of T (native byte order): the arrays
// whose buffer is passed on as it is.
template <class T>
bool is_exact(const py::array& a) {
  return py::isinstance<py::array_t<T, py::array::c_style>>(a);
}
bool is_exact(const py::array& a, ElementType t) {
  switch (t) {
    case ElementType::f32: return is_exact<float>(a);
    case ElementType::i64: return is_exact<std::int64_t>(a);
    case ElementType::boolean: return is_exact<bool>(a);
  }
  return false;
}
// The ElementType whose buffer `a` already is, if any.
std::optional<ElementType> exact_type(const py::array& a) {
  for (ElementType t : {ElementType::f32, ElementType::i64, ElementType::boolean})
    if (is_exact(a, t)) return t;
  return std::nullopt;
}

std::string dtype_str(const py::array& a) { return py::str(a.dtype()); }

std::vector<std::int64_t> dims_of(const py::array& a) {
  std::vector<std::int64_t> d(static_cast<std::size_t>(a.ndim()));
  for (py::ssize_t i = 0; i < a.ndim(); ++i) d[static_cast<std::size_t>(i)] = a.shape(i);
  return d;
}

// `obj` as a C-contiguous array of dtype `t`: the same array when it already is one (no copy);
// otherwise a converted copy when numpy's same_kind casting allows it (converted = true).
// A refused cast raises InvalidArgumentError naming `what` unless `exact_or_raise` is false,
// in which case an array that already has an opfuse element type is returned unconverted so
// the library can report the mismatch in its own words.
py::array as_type(py::handle obj, ElementType t, const std::string& what, bool& converted, bool exact_or_raise = true) {
  converted = false;
  py::array a =
      py::isinstance<py::array>(obj) ? py::reinterpret_borrow<py::array>(obj) : py::array(numpy().attr("asarray")(obj));
  if (is_exact(a, t)) return a;
  py::dtype want(numpy_dtype_name(t));
  if (!numpy().attr("can_cast")(a.dtype(), want, "same_kind").cast<bool>()) {
    if (!exact_or_raise && exact_type(a)) {
      // A C-contiguous float32/int64/bool array: the library's own type check speaks.
      return a;
    }
    raise_invalid(what + " is " + dtype_str(a) + ", expected " + numpy_dtype_name(t) +
                  " (or a dtype numpy casts to it with casting='same_kind')");
  }
  converted = true;
  return py::array(numpy().attr("ascontiguousarray")(a, want));
}

py::array as_f32(py::handle obj, const std::string& what) {
  bool converted = false;
  return as_type(obj, ElementType::f32, what, converted);
}

// ---- names -------------------------------------------------------------------------------------

std::string join_names(const std::vector<std::string>& names) {
  std::string s;
  for (const std::string& n : names) s += (s.empty() ? "" : ", ") + n;
  return s;
}

Stage parse_stage(const std::string& name) {
  if (auto s = stage_from_name(name)) return *s;
  std::vector<std::string> known;
  for (int i = 0; i < kStageCount; ++i) known.emplace_back(stage_name(static_cast<Stage>(i)));
  raise_invalid("stage '" + name + "' is unknown; known stages: " + join_names(known));
}

constexpr FusionLevel kFusionLevels[] = {FusionLevel::none, FusionLevel::basic, FusionLevel::advanced,
                                         FusionLevel::full};

FusionLevel parse_fusion(const std::string& name) {
  std::vector<std::string> known;
  for (FusionLevel f : kFusionLevels) {
    if (fusion_level_name(f) == name) return f;
    known.emplace_back(fusion_level_name(f));
  }
  raise_invalid("fusion level '" + name + "' is unknown; known levels: " + join_names(known));
}

int check_threads(int threads) {
  if (threads < 0) raise_invalid("threads is " + std::to_string(threads) + ", must be >= 0 (0: all cores)");
  return threads;
}

// ---- Session -----------------------------------------------------------------------------------

// collections.namedtuple("NodeArg", "name shape dtype type"), made at import. Leaked like
// numpy() above.
py::object* g_node_arg = nullptr;

py::object node_arg(const ValueInfo& v) {
  py::list shape;
  for (const DimInfo& d : v.dims) {
    if (d.value >= 0)
      shape.append(py::int_(d.value));
    else if (!d.symbol.empty())
      shape.append(py::str(d.symbol));
    else
      shape.append(py::none());  // a dim the file left unknown, as ONNX Runtime shows it
  }
  return (*g_node_arg)(v.name, shape, py::dtype(numpy_dtype_name(v.type)), ort_type_name(v.type));
}

class Session {
 public:
  Session(py::object model, const std::string& stage, const std::string& fusion, int threads,
          std::optional<std::uint64_t> memory_budget, std::optional<std::string> isa,
          std::vector<std::string> excluded_kernels) {
    CompileOptions opt;
    opt.stage = parse_stage(stage);
    opt.fusion = parse_fusion(fusion);
    opt.threads = check_threads(threads);
    if (memory_budget) opt.memory_budget = *memory_budget;
    if (isa) {
      auto level = isa_from_name(*isa);
      if (!level) raise_invalid("isa '" + *isa + "' is unknown; known levels: scalar, sse2, avx2, avx512");
      opt.max_isa = *level;
    }
    opt.excluded_kernels = std::move(excluded_kernels);

    std::optional<Result<Model>> loaded;
    if (py::isinstance<py::bytes>(model) || py::isinstance<py::bytearray>(model) ||
        py::isinstance<py::memoryview>(model)) {
      // The bytes object stays referenced by `model` while the GIL is released.
      auto b = py::reinterpret_steal<py::bytes>(PyBytes_FromObject(model.ptr()));
      if (!b) throw py::error_already_set();
      std::string_view data = b;
      description_ = "<" + std::to_string(data.size()) + " bytes>";
      py::gil_scoped_release nogil;
      loaded.emplace(Model::load_memory(data.data(), data.size()));
    } else {
      // str or os.PathLike. A built-in name wins unless a file of that name exists; a string that
      // is neither, and does not look like a path, is reported as an unknown built-in too.
      const std::string s = py::str(py::module_::import("os").attr("fspath")(model));
      description_ = s;
      std::error_code ec;
      const bool is_file = std::filesystem::exists(s, ec);
      bool builtin = false;
      for (const std::string& n : Model::builtin_names()) builtin = builtin || n == s;
      const bool looks_like_path = s.find('/') != std::string::npos || s.ends_with(".onnx");
      py::gil_scoped_release nogil;
      if (builtin && !is_file) {
        loaded.emplace(Model::load_builtin(s));
      } else if (is_file || looks_like_path) {
        loaded.emplace(Model::load_file(s));
      } else {
        Result<Model> r = Model::load_builtin(s);
        if (!r) r = Status(r.status().code(), r.status().message() + "; and there is no model file '" + s + "'");
        loaded.emplace(std::move(r));
      }
    }
    if (!*loaded) raise_status(loaded->status());
    model_.emplace(std::move(*loaded).value());
    std::optional<Result<Plan>> plan;
    {
      py::gil_scoped_release nogil;
      plan.emplace(Plan::compile(*model_, opt));
    }
    plan_.emplace(value_or_raise(std::move(*plan)));
  }

  py::list inputs() const {
    py::list l;
    for (const ValueInfo& v : model_->inputs()) l.append(node_arg(v));
    return l;
  }
  py::list outputs() const {
    py::list l;
    for (const ValueInfo& v : model_->outputs()) l.append(node_arg(v));
    return l;
  }

  // run(feed) -> dict; run(None | [output names], feed) -> list (ONNX Runtime's order).
  py::object run(py::object first, py::object second) {
    py::dict feed;
    std::optional<std::vector<std::string>> wanted;
    bool as_list = false;
    if (second.is_none()) {
      if (!py::isinstance<py::dict>(first))
        throw py::type_error("Session.run takes a dict {input name: array}, or (output_names, dict)");
      feed = first;
    } else {
      if (!py::isinstance<py::dict>(second))
        throw py::type_error("Session.run(output_names, input_feed): input_feed must be a dict {input name: array}");
      feed = second;
      as_list = true;
      if (!first.is_none()) wanted = first.cast<std::vector<std::string>>();
    }

    // Bind the inputs with the GIL held; `keep` holds every array referenced by `refs`.
    std::vector<py::array> keep;
    std::vector<TensorRef> refs;
    std::vector<std::string> converted;
    for (auto [key, value] : feed) {
      if (!py::isinstance<py::str>(key)) throw py::type_error("Session.run: input names must be str");
      const std::string name = py::str(key);
      const ValueInfo* decl = nullptr;
      for (const ValueInfo& v : model_->inputs())
        if (v.name == name) decl = &v;
      py::array a;
      ElementType type = ElementType::f32;
      if (!decl) {
        // Not an input of the model: the library refuses the name before it reads any data.
        a = py::isinstance<py::array>(value) ? py::reinterpret_borrow<py::array>(value)
                                             : py::array(numpy().attr("asarray")(value));
        type = exact_type(a).value_or(ElementType::f32);
      } else {
        bool copied = false;
        a = as_type(value, decl->type, "input '" + name + "'", copied, /*exact_or_raise=*/false);
        type = exact_type(a).value_or(decl->type);
        if (copied) converted.push_back(name);
      }
      refs.push_back(TensorRef{name, type, dims_of(a), a.data()});
      keep.push_back(std::move(a));
    }

    last_converted_ = converted;  // with the GIL held: the last run() on any thread names them
    std::optional<Result<std::vector<ValueInfo>>> infos;
    {
      py::gil_scoped_release nogil;
      infos.emplace(plan_->output_infos(refs));
    }
    std::vector<ValueInfo> outs = value_or_raise(std::move(*infos));
    std::vector<py::array> arrays;
    std::vector<MutableTensorRef> out_refs;
    for (const ValueInfo& v : outs) {
      std::vector<py::ssize_t> shape;
      std::vector<std::int64_t> dims;
      for (const DimInfo& d : v.dims) {
        shape.push_back(static_cast<py::ssize_t>(d.value));
        dims.push_back(d.value);
      }
      py::array a(py::dtype(numpy_dtype_name(v.type)), shape);
      out_refs.push_back(MutableTensorRef{v.name, v.type, dims, a.mutable_data()});
      arrays.push_back(std::move(a));
    }
    Status s;
    {
      py::gil_scoped_release nogil;
      s = plan_->run(refs, out_refs);
    }
    if (!s) raise_status(s);

    if (!as_list) {
      py::dict result;
      for (std::size_t i = 0; i < outs.size(); ++i) result[py::str(outs[i].name)] = arrays[i];
      return result;
    }
    py::list result;
    if (!wanted) {
      for (const py::array& a : arrays) result.append(a);
      return result;
    }
    for (const std::string& w : *wanted) {
      std::size_t k = outs.size();
      for (std::size_t i = 0; i < outs.size(); ++i)
        if (outs[i].name == w) k = i;
      if (k == outs.size()) {
        std::vector<std::string> names;
        for (const ValueInfo& v : outs) names.push_back(v.name);
        raise_invalid("the model has no output named '" + w + "'; its outputs: " + join_names(names));
      }
      result.append(arrays[k]);
    }
    return result;
  }

  // A query of the plan (thread-safe: it describes the specialization the latest run used).
  template <class F>
  auto query(F f) {
    return f(*plan_);
  }

  std::vector<std::string> converted_inputs() { return last_converted_; }

  const Model& model() const { return *model_; }
  const Plan& plan() const { return *plan_; }
  const std::string& description() const { return description_; }

 private:
  std::optional<Model> model_;
  std::optional<Plan> plan_;
  std::vector<std::string> last_converted_;
  std::string description_;
};

// ---- single ops -----------------------------------------------------------------------------

// What one ops.* call has gathered: the desc and its input arrays (float32, C-contiguous).
struct OpCall {
  OpDesc desc;
  std::vector<py::array> inputs;
  const char* name() const { return op_name(desc.op).data(); }
  void add(py::handle obj, const std::string& what) {
    inputs.push_back(as_f32(obj, std::string(op_name(desc.op)) + ": " + what));
  }
};

// Pairs of ints from an int or a sequence of two ("stride=2" or "stride=(2, 1)").
std::pair<std::int64_t, std::int64_t> int_pair(py::handle v, const char* op, const char* what) {
  if (py::isinstance<py::int_>(v)) {
    const auto x = v.cast<std::int64_t>();
    return {x, x};
  }
  auto l = v.cast<std::vector<std::int64_t>>();
  if (l.size() == 1) return {l[0], l[0]};
  if (l.size() != 2)
    raise_invalid(std::string(op) + ": " + what + " takes an int or 2 ints, got " + std::to_string(l.size()));
  return {l[0], l[1]};
}
// Padding: an int, (ph, pw), or ONNX's (top, left, bottom, right).
std::array<std::int64_t, 4> padding4(py::handle v, const char* op) {
  if (py::isinstance<py::int_>(v)) {
    const auto x = v.cast<std::int64_t>();
    return {x, x, x, x};
  }
  auto l = v.cast<std::vector<std::int64_t>>();
  if (l.size() == 1) return {l[0], l[0], l[0], l[0]};
  if (l.size() == 2) return {l[0], l[1], l[0], l[1]};
  if (l.size() == 4) return {l[0], l[1], l[2], l[3]};
  raise_invalid(std::string(op) + ": padding takes an int, (pad_h, pad_w) or (top, left, bottom, right), got " +
                std::to_string(l.size()) + " values");
}

// Activation names shared by post_ops, eltwise_chain steps and ops.gelu: "relu", "relu6",
// "gelu" (erf), "gelu_tanh", ...; parameters ride in a tuple: ("clip", lo, hi),
// ("leaky_relu", slope), ("linear", alpha, beta).
std::optional<Activation> activation_of(const std::string& name, const py::tuple& args, const std::string& where) {
  auto arg = [&](std::size_t i, float def) { return i < args.size() ? args[i].cast<float>() : def; };
  auto need = [&](std::size_t n) {
    if (args.size() != n)
      raise_invalid(where + ": '" + name + "' takes " + std::to_string(n - 1) + " parameter(s), got " +
                    std::to_string(args.size() - 1));
  };
  if (name == "relu") return Activation::relu();
  if (name == "relu6") return Activation::relu6();
  if (name == "clip") {
    need(3);
    return Activation::clip(arg(1, 0), arg(2, 0));
  }
  if (name == "leaky_relu") return Activation::leaky_relu(arg(1, 0.01f));
  if (name == "linear") {
    need(3);
    return Activation::linear(arg(1, 1), arg(2, 0));
  }
  if (name == "sigmoid") return Activation::of(ActKind::sigmoid);
  if (name == "tanh") return Activation::of(ActKind::tanh);
  if (name == "gelu" || name == "gelu_erf") return Activation::of(ActKind::gelu_erf);
  if (name == "gelu_tanh") return Activation::of(ActKind::gelu_tanh);
  if (name == "silu") return Activation::of(ActKind::silu);
  if (name == "hardswish") return Activation::of(ActKind::hardswish);
  return std::nullopt;
}

std::optional<BinaryKind> binary_of(const std::string& name) {
  if (name == "add") return BinaryKind::add;
  if (name == "sub") return BinaryKind::sub;
  if (name == "mul") return BinaryKind::mul;
  if (name == "div") return BinaryKind::div;
  return std::nullopt;
}

constexpr const char* kActivationNames =
    "relu, relu6, clip, leaky_relu, linear, sigmoid, tanh, gelu, gelu_tanh, silu, hardswish";

// One entry of post_ops / steps: its name and the tuple it came in (name first).
std::pair<std::string, py::tuple> entry_of(py::handle item, const std::string& where) {
  if (py::isinstance<py::str>(item)) return {py::str(item), py::make_tuple(item)};
  if (!py::isinstance<py::tuple>(item) && !py::isinstance<py::list>(item))
    raise_invalid(where + ": expected a name or a tuple (name, parameters...), got " +
                  std::string(py::str(py::type::of(item).attr("__name__"))));
  py::tuple t = py::tuple(py::reinterpret_borrow<py::object>(item));
  if (t.empty() || !py::isinstance<py::str>(t[0])) raise_invalid(where + ": a tuple entry starts with its name");
  return {py::str(t[0]), t};
}

// post_ops=[...] of conv2d and gemm: activations as above, plus
//   ("add" | "sub" | "mul" | "div", other)       other broadcastable to the output
//   ("batchnorm", scale, bias, mean, var[, eps])  per output channel (conv2d) or column (gemm)
//   ("maxpool", kernel, stride, pad)              conv2d only, last
// Operands are appended to the call's inputs in chain order, as the OpDesc expects them.
PostOps parse_post_ops(py::handle spec, OpCall& call) {
  PostOps ops;
  if (spec.is_none()) return ops;
  std::size_t i = 0;
  for (py::handle item : spec) {
    const std::string where = std::string(call.name()) + ": post_ops[" + std::to_string(i) + "]";
    auto [name, t] = entry_of(item, where);
    if (auto act = activation_of(name, t, where)) {
      ops.push_back(PostOp::activation(*act));
    } else if (auto bin = binary_of(name)) {
      if (t.size() != 2) raise_invalid(where + ": ('" + name + "', other) takes one operand");
      ops.push_back(PostOp::binary_op(*bin));
      call.add(t[1], "post_ops[" + std::to_string(i) + "] " + name + " operand");
    } else if (name == "batchnorm") {
      if (t.size() != 5 && t.size() != 6)
        raise_invalid(where + ": ('batchnorm', scale, bias, mean, var[, eps]) takes 4 operands");
      ops.push_back(PostOp::batchnorm(t.size() == 6 ? t[5].cast<float>() : 1e-5f));
      const char* names[] = {"scale", "bias", "mean", "var"};
      for (std::size_t k = 0; k < 4; ++k) call.add(t[k + 1], "post_ops[" + std::to_string(i) + "] " + names[k]);
    } else if (name == "maxpool") {
      if (t.size() != 4) raise_invalid(where + ": ('maxpool', kernel, stride, pad) takes 3 parameters");
      ops.push_back(PostOp::maxpool(t[1].cast<std::int64_t>(), t[2].cast<std::int64_t>(), t[3].cast<std::int64_t>()));
    } else {
      raise_invalid(where + ": unknown post-op '" + name + "'; known: " + kActivationNames +
                    ", add, sub, mul, div, batchnorm, maxpool");
    }
    ++i;
  }
  return ops;
}

struct RunOptions {
  std::string stage = "fused";
  int threads = 0;
  std::optional<std::string> kernel;
};

// Infers the outputs, allocates them (or takes `out`), prepares the kernel the stage selects
// (or the named one) and runs it with the GIL released. Returns the output, or a tuple of
// them for the ops with two.
py::object execute(OpCall& call, py::object out, const RunOptions& ro, bool zero_outputs = false) {
  Context ctx;
  ctx.stage = parse_stage(ro.stage);
  ctx.threads = check_threads(ro.threads);
  const KernelDef* kernel = nullptr;
  if (ro.kernel) {
    kernel = find_kernel(*ro.kernel);
    if (!kernel) raise_invalid(std::string(call.name()) + ": kernel '" + *ro.kernel + "' is not in the registry");
  }
  call.desc.inputs.clear();
  for (const py::array& a : call.inputs) {
    const auto d = dims_of(a);
    call.desc.inputs.push_back(TensorDesc{Shape::of(d.data(), static_cast<int>(d.size())), Layout::nchw});
  }
  std::vector<TensorDesc> out_descs = value_or_raise(infer_outputs(call.desc));

  std::vector<py::array> outs;
  if (!out.is_none()) {
    std::vector<py::object> given;
    if (py::isinstance<py::tuple>(out) || py::isinstance<py::list>(out)) {
      for (py::handle h : out) given.push_back(py::reinterpret_borrow<py::object>(h));
    } else {
      given.push_back(out);
    }
    if (given.size() != out_descs.size())
      raise_invalid(std::string(call.name()) + ": out takes " + std::to_string(out_descs.size()) + " array(s), got " +
                    std::to_string(given.size()));
    for (py::object& g : given) {
      if (!py::isinstance<py::array_t<float, py::array::c_style>>(g))
        raise_invalid(std::string(call.name()) + ": out must be a C-contiguous float32 ndarray, got " +
                      (py::isinstance<py::array>(g) ? dtype_str(py::reinterpret_borrow<py::array>(g)) + " array"
                                                    : std::string(py::str(py::type::of(g).attr("__name__")))));
      py::array a = py::reinterpret_borrow<py::array>(g);
      if (!a.writeable()) raise_invalid(std::string(call.name()) + ": out is read-only");
      outs.push_back(std::move(a));
    }
  } else {
    for (const TensorDesc& d : out_descs) {
      std::vector<py::ssize_t> shape(d.shape.dims.begin(), d.shape.dims.begin() + d.shape.rank);
      py::array_t<float> a(shape);
      // gemm with beta != 0 reads y: start from zeros rather than uninitialized memory.
      if (zero_outputs) std::fill(a.mutable_data(), a.mutable_data() + a.size(), 0.f);
      outs.push_back(std::move(a));
    }
  }

  // Views over the numpy buffers: the shapes are the arrays' own, so a wrong `out` shape is
  // reported by execute()'s checks in the library's words.
  std::vector<Tensor> in_t, out_t;
  for (std::size_t i = 0; i < call.inputs.size(); ++i) {
    const auto d = dims_of(call.inputs[i]);
    in_t.push_back(value_or_raise(Tensor::view(static_cast<const float*>(call.inputs[i].data()),
                                               Shape::of(d.data(), static_cast<int>(d.size())))));
  }
  for (py::array& a : outs) {
    const auto d = dims_of(a);
    out_t.push_back(value_or_raise(
        Tensor::view(static_cast<float*>(a.mutable_data()), Shape::of(d.data(), static_cast<int>(d.size())))));
  }
  std::vector<const Tensor*> in_p, out_p;
  for (const Tensor& t : in_t) in_p.push_back(&t);
  for (const Tensor& t : out_t) out_p.push_back(&t);

  Status s;
  {
    py::gil_scoped_release nogil;
    Result<Primitive> prim = kernel ? prepare_kernel(call.desc, *kernel, ctx) : prepare(call.desc, ctx);
    s = prim ? prim->execute(in_p, out_p) : prim.status();
  }
  if (!s) raise_status(s);
  if (outs.size() == 1) return outs[0];
  py::tuple t(outs.size());
  for (std::size_t i = 0; i < outs.size(); ++i) t[i] = outs[i];
  return t;
}

// The keyword arguments every op takes, in this order, after its own.
#define OPFUSE_RUN_ARGS                                                                           \
  py::kw_only(), py::arg("out") = py::none(), py::arg("stage") = "fused", py::arg("threads") = 0, \
                 py::arg("kernel") = py::none()
#define OPFUSE_RUN_PARAMS py::object out, const std::string &stage, int threads, std::optional<std::string> kernel
#define OPFUSE_RUN_OPTIONS \
  RunOptions { stage, threads, kernel }

constexpr const char* kRunDoc =
    "\n\nCommon keywords: out= a C-contiguous float32 array to write into (returned); stage= 'naive', "
    "'simd' or 'fused' (the highest stage to try; lower stages serve what it declines); threads= (0: all "
    "cores); kernel= a registry kernel name (ops.kernels()) to run exactly that kernel. Inputs are float32; "
    "other dtypes numpy casts 'same_kind' are converted (a copy), C-contiguous float32 is used in place.";

std::string doc(const char* text) { return std::string(text) + kRunDoc; }

void def_ops(py::module_& ops) {
  ops.def(
      "gemm",
      [](py::object a, py::object b, py::object bias, float alpha, float beta, bool trans_a, bool trans_b,
         py::object post_ops, OPFUSE_RUN_PARAMS) {
        OpCall c;
        c.desc.op = OpKind::gemm;
        GemmParams p;
        p.alpha = alpha;
        p.beta = beta;
        p.trans_a = trans_a;
        p.trans_b = trans_b;
        p.has_bias = !bias.is_none();
        c.add(a, "a");
        c.add(b, "b");
        if (p.has_bias) c.add(bias, "bias");
        p.post_ops = parse_post_ops(post_ops, c);
        c.desc.params = p;
        return execute(c, out, OPFUSE_RUN_OPTIONS, beta != 0.f);
      },
      py::arg("a"), py::arg("b"), py::arg("bias") = py::none(), py::kw_only(), py::arg("alpha") = 1.f,
      py::arg("beta") = 0.f, py::arg("trans_a") = false, py::arg("trans_b") = false, py::arg("post_ops") = py::none(),
      py::arg("out") = py::none(), py::arg("stage") = "fused", py::arg("threads") = 0, py::arg("kernel") = py::none(),
      doc("y = alpha * op(a) @ op(b) + beta * out + bias, then post_ops.\n"
          "a (M, K) (or (K, M) with trans_a), b (K, N) (or (N, K) with trans_b), bias broadcastable to (M, N). "
          "post_ops: names ('relu', 'relu6', 'gelu', 'gelu_tanh', 'sigmoid', 'tanh', 'silu', 'hardswish') or "
          "tuples (('clip', lo, hi), ('leaky_relu', slope), ('linear', a, b), ('add', other), "
          "('batchnorm', scale, bias, mean, var[, eps])), applied in order. beta != 0 reads out (zeros when "
          "out is not given).")
          .c_str());

  ops.def(
      "conv2d",
      [](py::object x, py::object w, py::object bias, py::object stride, py::object padding, py::object dilation,
         std::int64_t groups, py::object post_ops, OPFUSE_RUN_PARAMS) {
        OpCall c;
        c.desc.op = OpKind::conv2d;
        Conv2dParams p;
        std::tie(p.stride_h, p.stride_w) = int_pair(stride, "conv2d", "stride");
        std::tie(p.dilation_h, p.dilation_w) = int_pair(dilation, "conv2d", "dilation");
        const auto pad = padding4(padding, "conv2d");
        p.pad_top = pad[0];
        p.pad_left = pad[1];
        p.pad_bottom = pad[2];
        p.pad_right = pad[3];
        p.groups = groups;
        p.has_bias = !bias.is_none();
        c.add(x, "x");
        c.add(w, "w");
        if (p.has_bias) c.add(bias, "bias");
        p.post_ops = parse_post_ops(post_ops, c);
        c.desc.params = p;
        return execute(c, out, OPFUSE_RUN_OPTIONS);
      },
      py::arg("x"), py::arg("w"), py::arg("bias") = py::none(), py::arg("stride") = 1, py::arg("padding") = 0,
      py::arg("dilation") = 1, py::arg("groups") = 1, py::kw_only(), py::arg("post_ops") = py::none(),
      py::arg("out") = py::none(), py::arg("stage") = "fused", py::arg("threads") = 0, py::arg("kernel") = py::none(),
      doc("2-D convolution like torch.nn.functional.conv2d: x (N, C, H, W), w (K, C/groups, R, S), bias (K); "
          "stride and dilation an int or (h, w); padding an int, (h, w) or ONNX's (top, left, bottom, right). "
          "post_ops as for gemm, plus ('maxpool', kernel, stride, pad) as the last step; a batchnorm step "
          "takes (K) operands.")
          .c_str());

  ops.def(
      "batchnorm",
      [](py::object x, py::object scale, py::object bias, py::object mean, py::object var, float epsilon,
         OPFUSE_RUN_PARAMS) {
        OpCall c;
        c.desc.op = OpKind::batchnorm;
        c.desc.params = BatchnormParams{epsilon};
        c.add(x, "x");
        c.add(scale, "scale");
        c.add(bias, "bias");
        c.add(mean, "mean");
        c.add(var, "var");
        return execute(c, out, OPFUSE_RUN_OPTIONS);
      },
      py::arg("x"), py::arg("scale"), py::arg("bias"), py::arg("mean"), py::arg("var"), py::arg("epsilon") = 1e-5f,
      OPFUSE_RUN_ARGS,
      doc("Inference batch norm over dim 1: y = scale * (x - mean) / sqrt(var + epsilon) + bias, each (C).").c_str());

  // Unary activations: one function each, with their parameters as keywords.
  auto def_unary = [&](const char* name, OpKind op, const char* text) {
    ops.def(
        name,
        [op](py::object x, OPFUSE_RUN_PARAMS) {
          OpCall c;
          c.desc.op = op;
          c.desc.params = default_params(op);
          c.add(x, "x");
          return execute(c, out, OPFUSE_RUN_OPTIONS);
        },
        py::arg("x"), OPFUSE_RUN_ARGS, doc(text).c_str());
  };
  def_unary("relu", OpKind::relu, "max(x, 0).");
  def_unary("sigmoid", OpKind::sigmoid, "1 / (1 + exp(-x)).");
  def_unary("tanh", OpKind::tanh, "tanh(x).");
  def_unary("silu", OpKind::silu, "x * sigmoid(x).");
  def_unary("hardswish", OpKind::hardswish, "x * clip(x + 3, 0, 6) / 6.");
  auto run_act = [](OpKind op, Activation act, py::object x, py::object out, const RunOptions& ro) {
    OpCall c;
    c.desc.op = op;
    c.desc.params = UnaryParams{act};
    c.add(x, "x");
    return execute(c, out, ro);
  };
  ops.def(
      "clip",
      [run_act](py::object x, float min, float max, OPFUSE_RUN_PARAMS) {
        return run_act(OpKind::clip, Activation::clip(min, max), x, out, OPFUSE_RUN_OPTIONS);
      },
      py::arg("x"), py::arg("min"), py::arg("max"), OPFUSE_RUN_ARGS, doc("min(max(x, min), max).").c_str());
  ops.def(
      "relu6",
      [run_act](py::object x, OPFUSE_RUN_PARAMS) {
        return run_act(OpKind::clip, Activation::relu6(), x, out, OPFUSE_RUN_OPTIONS);
      },
      py::arg("x"), OPFUSE_RUN_ARGS, doc("clip(x, 0, 6) (the clip op).").c_str());
  ops.def(
      "leaky_relu",
      [run_act](py::object x, float alpha, OPFUSE_RUN_PARAMS) {
        return run_act(OpKind::leaky_relu, Activation::leaky_relu(alpha), x, out, OPFUSE_RUN_OPTIONS);
      },
      py::arg("x"), py::arg("alpha") = 0.01f, OPFUSE_RUN_ARGS, doc("x >= 0 ? x : alpha * x.").c_str());
  ops.def(
      "gelu",
      [run_act](py::object x, const std::string& approximate, OPFUSE_RUN_PARAMS) {
        if (approximate != "none" && approximate != "tanh")
          raise_invalid("gelu: approximate '" + approximate + "' is unknown; 'none' (erf) or 'tanh'");
        return run_act(OpKind::gelu, Activation::of(approximate == "tanh" ? ActKind::gelu_tanh : ActKind::gelu_erf), x,
                       out, OPFUSE_RUN_OPTIONS);
      },
      py::arg("x"), py::arg("approximate") = "none", OPFUSE_RUN_ARGS,
      doc("GELU like torch.nn.functional.gelu: approximate='none' is 0.5 x (1 + erf(x / sqrt 2)), 'tanh' the "
          "tanh form.")
          .c_str());

  auto def_binary = [&](const char* name, OpKind op, const char* text) {
    ops.def(
        name,
        [op](py::object a, py::object b, OPFUSE_RUN_PARAMS) {
          OpCall c;
          c.desc.op = op;
          c.desc.params = BinaryParams{};
          c.add(a, "a");
          c.add(b, "b");
          return execute(c, out, OPFUSE_RUN_OPTIONS);
        },
        py::arg("a"), py::arg("b"), OPFUSE_RUN_ARGS, doc(text).c_str());
  };
  def_binary("add", OpKind::add, "a + b with NumPy broadcasting.");
  def_binary("sub", OpKind::sub, "a - b with NumPy broadcasting.");
  def_binary("mul", OpKind::mul, "a * b with NumPy broadcasting.");
  def_binary("div", OpKind::div, "a / b with NumPy broadcasting.");

  auto pool = [](OpKind op, py::object x, py::object kernel_size, py::object stride, py::object padding,
                 py::object dilation, bool ceil_mode, bool count_include_pad, py::object out, const RunOptions& ro) {
    OpCall c;
    c.desc.op = op;
    const char* name = op_name(op).data();
    Pool2dParams p;
    std::tie(p.kernel_h, p.kernel_w) = int_pair(kernel_size, name, "kernel_size");
    if (stride.is_none())
      std::tie(p.stride_h, p.stride_w) = std::pair(p.kernel_h, p.kernel_w);
    else
      std::tie(p.stride_h, p.stride_w) = int_pair(stride, name, "stride");
    std::tie(p.dilation_h, p.dilation_w) = int_pair(dilation, name, "dilation");
    const auto pad = padding4(padding, name);
    p.pad_top = pad[0];
    p.pad_left = pad[1];
    p.pad_bottom = pad[2];
    p.pad_right = pad[3];
    p.ceil_mode = ceil_mode;
    p.count_include_pad = count_include_pad;
    c.desc.params = p;
    c.add(x, "x");
    return execute(c, out, ro);
  };
  ops.def(
      "maxpool2d",
      [pool](py::object x, py::object kernel_size, py::object stride, py::object padding, py::object dilation,
             bool ceil_mode, OPFUSE_RUN_PARAMS) {
        return pool(OpKind::maxpool2d, x, kernel_size, stride, padding, dilation, ceil_mode, false, out,
                    OPFUSE_RUN_OPTIONS);
      },
      py::arg("x"), py::arg("kernel_size"), py::arg("stride") = py::none(), py::arg("padding") = 0,
      py::arg("dilation") = 1, py::arg("ceil_mode") = false, OPFUSE_RUN_ARGS,
      doc("Max pooling like torch.nn.functional.max_pool2d: x (N, C, H, W); stride defaults to kernel_size.").c_str());
  ops.def(
      "avgpool2d",
      [pool](py::object x, py::object kernel_size, py::object stride, py::object padding, bool ceil_mode,
             bool count_include_pad, OPFUSE_RUN_PARAMS) {
        return pool(OpKind::avgpool2d, x, kernel_size, stride, padding, py::int_(1), ceil_mode, count_include_pad, out,
                    OPFUSE_RUN_OPTIONS);
      },
      py::arg("x"), py::arg("kernel_size"), py::arg("stride") = py::none(), py::arg("padding") = 0,
      py::arg("ceil_mode") = false, py::arg("count_include_pad") = false, OPFUSE_RUN_ARGS,
      doc("Average pooling: x (N, C, H, W); stride defaults to kernel_size. count_include_pad defaults to False "
          "(ONNX's default; PyTorch's is True).")
          .c_str());
  ops.def(
      "global_avgpool",
      [](py::object x, OPFUSE_RUN_PARAMS) {
        OpCall c;
        c.desc.op = OpKind::global_avgpool;
        c.desc.params = GlobalPoolParams{};
        c.add(x, "x");
        return execute(c, out, OPFUSE_RUN_OPTIONS);
      },
      py::arg("x"), OPFUSE_RUN_ARGS, doc("Mean over H and W: x (N, C, H, W) -> (N, C, 1, 1).").c_str());

  ops.def(
      "softmax",
      [](py::object x, int axis, float scale, py::object mask, OPFUSE_RUN_PARAMS) {
        OpCall c;
        c.desc.op = OpKind::softmax;
        c.desc.params = SoftmaxParams{axis, scale, !mask.is_none()};
        c.add(x, "x");
        if (!mask.is_none()) c.add(mask, "mask");
        return execute(c, out, OPFUSE_RUN_OPTIONS);
      },
      py::arg("x"), py::arg("axis") = -1, py::kw_only(), py::arg("scale") = 1.f, py::arg("mask") = py::none(),
      py::arg("out") = py::none(), py::arg("stage") = "fused", py::arg("threads") = 0, py::arg("kernel") = py::none(),
      doc("softmax(scale * x + mask) along axis; mask broadcastable to x. A fully masked row gives zeros.").c_str());

  auto norm = [](OpKind op, py::object x, py::object scale, py::object bias, int axis, float epsilon,
                 py::object residual, bool write_sum, py::object out, const RunOptions& ro) {
    OpCall c;
    c.desc.op = op;
    NormParams p;
    p.axis = axis;
    p.epsilon = epsilon;
    p.has_bias = op == OpKind::layernorm && !bias.is_none();
    p.has_residual = !residual.is_none();
    p.write_sum = write_sum;
    c.desc.params = p;
    c.add(x, "x");
    c.add(scale, "scale");
    if (p.has_bias) c.add(bias, "bias");
    if (p.has_residual) c.add(residual, "residual");
    return execute(c, out, ro);
  };
  ops.def(
      "layernorm",
      [norm](py::object x, py::object scale, py::object bias, int axis, float epsilon, py::object residual,
             bool write_sum, OPFUSE_RUN_PARAMS) {
        return norm(OpKind::layernorm, x, scale, bias, axis, epsilon, residual, write_sum, out, OPFUSE_RUN_OPTIONS);
      },
      py::arg("x"), py::arg("scale"), py::arg("bias") = py::none(), py::kw_only(), py::arg("axis") = -1,
      py::arg("epsilon") = 1e-5f, py::arg("residual") = py::none(), py::arg("write_sum") = false,
      py::arg("out") = py::none(), py::arg("stage") = "fused", py::arg("threads") = 0, py::arg("kernel") = py::none(),
      doc("Layer norm over dims [axis, rank) with scale (and bias) of the normalized shape. With residual= it "
          "normalizes x + residual; write_sum=True then also returns that sum: (y, sum).")
          .c_str());
  ops.def(
      "rmsnorm",
      [norm](py::object x, py::object scale, int axis, float epsilon, py::object residual, bool write_sum,
             OPFUSE_RUN_PARAMS) {
        return norm(OpKind::rmsnorm, x, scale, py::none(), axis, epsilon, residual, write_sum, out, OPFUSE_RUN_OPTIONS);
      },
      py::arg("x"), py::arg("scale"), py::kw_only(), py::arg("axis") = -1, py::arg("epsilon") = 1e-5f,
      py::arg("residual") = py::none(), py::arg("write_sum") = false, py::arg("out") = py::none(),
      py::arg("stage") = "fused", py::arg("threads") = 0, py::arg("kernel") = py::none(),
      doc("RMS norm over dims [axis, rank): x / sqrt(mean(x^2) + epsilon) * scale; residual and write_sum as "
          "for layernorm.")
          .c_str());

  ops.def(
      "attention",
      [](py::object q, py::object k, py::object v, py::object mask, std::optional<float> scale, bool causal,
         OPFUSE_RUN_PARAMS) {
        OpCall c;
        c.desc.op = OpKind::attention;
        AttentionParams p;
        p.scale = scale.value_or(0.f);
        p.has_mask = !mask.is_none();
        p.causal = causal;
        c.desc.params = p;
        c.add(q, "q");
        c.add(k, "k");
        c.add(v, "v");
        if (p.has_mask) c.add(mask, "mask");
        return execute(c, out, OPFUSE_RUN_OPTIONS);
      },
      py::arg("q"), py::arg("k"), py::arg("v"), py::arg("mask") = py::none(), py::kw_only(),
      py::arg("scale") = py::none(), py::arg("causal") = false, py::arg("out") = py::none(), py::arg("stage") = "fused",
      py::arg("threads") = 0, py::arg("kernel") = py::none(),
      doc("Scaled dot-product attention: softmax(scale * q @ k^T + mask) @ v with q (B, H, Sq, D), k (B, H, Skv, "
          "D), v (B, H, Skv, Dv), an additive mask broadcastable to (B, H, Sq, Skv); scale defaults to "
          "1/sqrt(D); causal hides key j from query i when j > i + Skv - Sq.")
          .c_str());

  ops.def(
      "eltwise_chain",
      [](py::object x, py::object steps, OPFUSE_RUN_PARAMS) {
        OpCall c;
        c.desc.op = OpKind::eltwise_chain;
        c.add(x, "x");
        ChainParams p;
        std::size_t i = 0;
        for (py::handle item : steps) {
          const std::string where = "eltwise_chain: steps[" + std::to_string(i) + "]";
          auto [name, t] = entry_of(item, where);
          if (auto act = activation_of(name, t, where)) {
            p.steps.push_back(ChainStep::unary_step(*act));
          } else if (auto bin = binary_of(name)) {
            if (t.size() != 2) raise_invalid(where + ": ('" + name + "', other) takes one operand");
            p.steps.push_back(ChainStep::binary_step(*bin));
            c.add(t[1], "steps[" + std::to_string(i) + "] operand");
          } else {
            raise_invalid(where + ": unknown step '" + name + "'; known: " + kActivationNames + ", add, sub, mul, div");
          }
          ++i;
        }
        c.desc.params = p;
        return execute(c, out, OPFUSE_RUN_OPTIONS);
      },
      py::arg("x"), py::arg("steps"), OPFUSE_RUN_ARGS,
      doc("Elementwise steps on x in one pass: activation names/tuples as in post_ops, and ('add' | 'sub' | "
          "'mul' | 'div', other) with other broadcastable to x.")
          .c_str());

  ops.def(
      "kernels",
      [](std::optional<std::string> op) {
        if (op && !op_from_name(*op)) raise_invalid("op '" + *op + "' is unknown");
        py::list rows;
        for (const KernelDef& k : kernels()) {
          if (op && op_name(k.op) != *op) continue;
          py::dict r;
          r["name"] = std::string(k.name);
          r["op"] = std::string(op_name(k.op));
          r["impl"] = std::string(impl_name(k.impl));
          r["isa"] = std::string(k.isa);
          r["summary"] = std::string(k.summary);
          rows.append(r);
        }
        return rows;
      },
      py::arg("op") = py::none(),
      "The registry's kernels (best-first within each op and stage), as dicts with name, op, impl, isa and "
      "summary; op= keeps one op's rows.");
}

// Defines opfuse.Error and its subclasses, each also a subclass of the builtin exception its
// code corresponds to, so `except ValueError` catches a bad argument as Python code expects.
void def_errors(py::module_& m) {
  auto make = [&](const char* name, PyObject* bases, const char* doc_text) {
    const std::string qualified = std::string("opfuse.") + name;
    PyObject* cls = PyErr_NewExceptionWithDoc(qualified.c_str(), doc_text, bases, nullptr);
    if (!cls) throw py::error_already_set();
    py::object o = py::reinterpret_steal<py::object>(cls);
    m.add_object(name, o);
    return o.release();  // the module keeps it alive
  };
  g_errors.base = make("Error", PyExc_Exception,
                       "An opfuse Status that is not ok: .code ('invalid_argument', 'unsupported', 'out_of_memory', "
                       "'internal') and .message (the library's message).");
  g_errors.base.attr("code") = py::none();
  auto sub = [&](const char* name, PyObject* builtin, const char* code, const char* doc_text) {
    py::tuple bases = py::make_tuple(g_errors.base, py::handle(builtin));
    py::handle h = make(name, bases.ptr(), doc_text);
    h.attr("code") = py::str(code);
    return h;
  };
  g_errors.invalid_argument = sub("InvalidArgumentError", PyExc_ValueError, "invalid_argument",
                                  "A bad file, graph, input, shape, dtype or parameter (also a ValueError).");
  g_errors.unsupported =
      sub("UnsupportedError", PyExc_NotImplementedError, "unsupported",
          "A valid request no kernel or importer of this build serves (also a NotImplementedError).");
  g_errors.out_of_memory = sub("OutOfMemoryError", PyExc_MemoryError, "out_of_memory",
                               "An allocation failed or the memory budget is exceeded (also a MemoryError).");
  g_errors.internal =
      sub("InternalError", PyExc_RuntimeError, "internal", "A bug in opfuse; please report it (also a RuntimeError).");
}

}  // namespace

PYBIND11_MODULE(opfuse, m) {
  m.doc() =
      "opfuse: a deep-learning inference engine whose operators come in three stages (naive, simd, fused).\n\n"
      "Session runs a whole ONNX model (a file, bytes, or a built-in name) like onnxruntime.InferenceSession;\n"
      "opfuse.ops runs single operators on numpy arrays at a chosen stage.";
  m.attr("__version__") = OPFUSE_VERSION;
  def_errors(m);

  py::object namedtuple = py::module_::import("collections").attr("namedtuple");
  g_node_arg = new py::object(namedtuple("NodeArg", "name shape dtype type"));
  g_node_arg->attr("__module__") = "opfuse";
  g_node_arg->attr("__doc__") =
      "A model input or output: name; shape, a list of ints, str for symbolic dims ('seq') and None for unknown "
      "ones; dtype, a numpy dtype; type, ONNX Runtime's type string ('tensor(float)').";
  m.add_object("NodeArg", *g_node_arg);

  m.def("builtin_models", &Model::builtin_names, "Names of the built-in models (Session accepts them).");
  m.def(
      "builtin_bytes", [](const std::string& name) { return py::bytes(value_or_raise(Model::builtin_bytes(name))); },
      py::arg("name"), "The serialized ONNX file of a built-in model (what `opfuse export` writes).");
  py::list stages;
  for (Stage s : {Stage::naive, Stage::simd, Stage::fused}) stages.append(std::string(stage_name(s)));
  m.attr("stages") = py::tuple(stages);
  py::list levels;
  for (FusionLevel f : kFusionLevels) levels.append(std::string(fusion_level_name(f)));
  m.attr("fusion_levels") = py::tuple(levels);
  m.def(
      "cpu_isa", [] { return std::string(isa_name(cpu_isa())); }, "The best ISA level of this CPU for the simd stage.");

  py::class_<Session>(m, "Session",
                      "A compiled model, shaped like onnxruntime.InferenceSession.\n\n"
                      "Session(model, stage='fused', fusion='full', threads=0, *, memory_budget=None, isa=None, "
                      "excluded_kernels=[]): model is a path to an .onnx file, a built-in name "
                      "(builtin_models()), or the bytes of an ONNX file. One run at a time per Session: "
                      "concurrent run() calls from several threads are serialized.")
      .def(py::init<py::object, const std::string&, const std::string&, int, std::optional<std::uint64_t>,
                    std::optional<std::string>, std::vector<std::string>>(),
           py::arg("model"), py::arg("stage") = "fused", py::arg("fusion") = "full", py::arg("threads") = 0,
           py::kw_only(), py::arg("memory_budget") = py::none(), py::arg("isa") = py::none(),
           py::arg("excluded_kernels") = std::vector<std::string>{})
      .def_property_readonly("inputs", &Session::inputs, "The model's inputs, as NodeArg (name, shape, dtype, type).")
      .def_property_readonly("outputs", &Session::outputs, "The model's outputs, as NodeArg.")
      .def("get_inputs", &Session::inputs, "ONNX Runtime's spelling of .inputs.")
      .def("get_outputs", &Session::outputs, "ONNX Runtime's spelling of .outputs.")
      .def("run", &Session::run, py::arg("output_names_or_feed"), py::arg("input_feed") = py::none(),
           "run({name: array}) -> {output name: array}; run(output_names, {name: array}) -> list, ONNX Runtime "
           "style (output_names None: all, in model order). Symbolic dims take the inputs' sizes; C-contiguous "
           "arrays of the declared dtype are passed without conversion, others converted once (see "
           "converted_inputs).")
      .def_property_readonly("converted_inputs", &Session::converted_inputs,
                             "Names of the inputs the last run() converted (a copy: another dtype, or not "
                             "C-contiguous) instead of passing their buffer as it is.")
      .def_property_readonly("stage", [](Session& s) { return std::string(stage_name(s.plan().options().stage)); })
      .def_property_readonly("fusion",
                             [](Session& s) { return std::string(fusion_level_name(s.plan().options().fusion)); })
      .def_property_readonly("threads", [](Session& s) { return s.plan().options().threads; })
      .def_property_readonly(
          "metadata", [](Session& s) { return s.model().metadata(); },
          "The model file's metadata_props (built-ins set 'opfuse.default_dims').")
      .def_property_readonly("opset", [](Session& s) { return s.model().opset(); })
      .def_property_readonly(
          "model_node_count", [](Session& s) { return s.model().node_count(); },
          "Nodes of the model as loaded (after load-time folding).")
      // The rest describe the specialization the last run used (zeros before the first run).
      .def_property_readonly(
          "node_count", [](Session& s) { return s.query([](Plan& p) { return p.node_count(); }); },
          "Nodes the last run executed.")
      .def_property_readonly("kernel_launches",
                             [](Session& s) { return s.query([](Plan& p) { return p.kernel_launches(); }); })
      .def_property_readonly("layout_conversions",
                             [](Session& s) { return s.query([](Plan& p) { return p.layout_conversions(); }); })
      .def_property_readonly("nodes_before_fusion",
                             [](Session& s) { return s.query([](Plan& p) { return p.nodes_before_fusion(); }); })
      .def_property_readonly("nodes_after_fusion",
                             [](Session& s) { return s.query([](Plan& p) { return p.nodes_after_fusion(); }); })
      .def_property_readonly("weight_bytes",
                             [](Session& s) { return s.query([](Plan& p) { return p.weight_bytes(); }); })
      .def_property_readonly("arena_bytes", [](Session& s) { return s.query([](Plan& p) { return p.arena_bytes(); }); })
      .def_property_readonly(
          "peak_bytes", [](Session& s) { return s.query([](Plan& p) { return p.peak_bytes(); }); },
          "Weights + arena + kernel workspaces of the last run's specialization.")
      .def_property_readonly("modeled_flops",
                             [](Session& s) { return s.query([](Plan& p) { return p.modeled_flops(); }); })
      .def_property_readonly("modeled_bytes",
                             [](Session& s) { return s.query([](Plan& p) { return p.modeled_bytes(); }); })
      .def_property_readonly("cached_shapes",
                             [](Session& s) { return s.query([](Plan& p) { return p.cached_shapes(); }); })
      .def_property_readonly(
          "fusions_applied", [](Session& s) { return s.query([](Plan& p) { return p.fusions_applied(); }); },
          "(fusion name, groups rewritten) for the last run's specialization, in table order.")
      .def(
          "dump_graph", [](Session& s) { return s.query([](Plan& p) { return p.dump_graph(); }); },
          "The planned graph of the last run: layouts, conversions, kernels.")
      .def(
          "fused_graph_dot", [](Session& s) { return s.query([](Plan& p) { return p.fused_graph_dot(); }); },
          "The fused graph as Graphviz DOT.")
      .def(
          "optimized_model",
          [](Session& s) {
            auto r = s.query([](Plan& p) { return p.optimized_model(); });
            return py::bytes(value_or_raise(std::move(r)));
          },
          "The fused graph as a serialized ONNX model (bytes).")
      .def("__repr__", [](Session& s) {
        return "<opfuse.Session " + s.description() + " stage=" + std::string(stage_name(s.plan().options().stage)) +
               " fusion=" + std::string(fusion_level_name(s.plan().options().fusion)) + ">";
      });

  py::module_ ops = m.def_submodule(
      "ops",
      "Single operators on numpy arrays, at a chosen stage, for teaching and comparison:\n"
      "  for stage in opfuse.stages: y = opfuse.ops.conv2d(x, w, padding=1, post_ops=['relu'], stage=stage)");
  def_ops(ops);
}
