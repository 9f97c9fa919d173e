// src/c_api.cpp - the C API of include/opfuse/opfuse.h, a thin layer over opfuse/model.hpp.
//
// Every entry point runs inside guard(), which turns any C++ exception into a status code and a
// message, so nothing escapes into a C caller. The layer's own work is what C needs and C++ does
// not: NULL checks, the struct_size protocol of the two public structs, and byte_size checks (a C
// buffer carries no size of its own). Everything else - binding by name, dims against the
// declaration, symbolic dims agreeing across inputs, the memory budget - is Plan's, and its
// messages pass through with the function's name in front.
//
// The TensorRef / MutableTensorRef vectors handed to Plan::run are kept per thread between calls
// (thread_local, not per session, since Plan::run may run on one session from several threads at
// once): their strings and dims vectors keep their capacity, so once a set of input dims is
// planned a thread's run allocates nothing here either. A session holds nothing a call writes.
#include "opfuse/opfuse.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <exception>
#include <new>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "opfuse/model.hpp"

// The library's version: the build passes the CMake project version as OPFUSE_VERSION; a build that
// does not falls back on the header's (a test compares the two with the CMake version).
#ifndef OPFUSE_VERSION
#define OPFUSE_VERSION OPFUSE_VERSION_STRING
#endif

struct opfuse_model {
  opfuse::Model model;
};

struct opfuse_session {
  opfuse::Model model;  // a shared handle to the loaded graph: the queries read its declarations
  opfuse::Plan plan;    // thread-safe (opfuse/model.hpp)
};

namespace {

using opfuse::ElementType;
using opfuse::StatusCode;

static_assert(OPFUSE_OK == static_cast<int>(StatusCode::ok) &&
                  OPFUSE_INVALID_ARGUMENT == static_cast<int>(StatusCode::invalid_argument) &&
                  OPFUSE_UNSUPPORTED == static_cast<int>(StatusCode::unsupported) &&
                  OPFUSE_OUT_OF_MEMORY == static_cast<int>(StatusCode::out_of_memory) &&
                  OPFUSE_INTERNAL == static_cast<int>(StatusCode::internal),
              "opfuse_status mirrors opfuse::StatusCode");
static_assert(OPFUSE_STAGE_NAIVE == static_cast<int>(opfuse::Stage::naive) &&
                  OPFUSE_STAGE_SIMD == static_cast<int>(opfuse::Stage::simd) &&
                  OPFUSE_STAGE_FUSED == static_cast<int>(opfuse::Stage::fused),
              "opfuse_stage mirrors opfuse::Stage");
static_assert(OPFUSE_FUSION_NONE == static_cast<int>(opfuse::FusionLevel::none) &&
                  OPFUSE_FUSION_FULL == static_cast<int>(opfuse::FusionLevel::full),
              "opfuse_fusion mirrors opfuse::FusionLevel");
static_assert(OPFUSE_DTYPE_F32 == static_cast<int>(ElementType::f32) &&
                  OPFUSE_DTYPE_I64 == static_cast<int>(ElementType::i64) &&
                  OPFUSE_DTYPE_BOOL == static_cast<int>(ElementType::boolean),
              "opfuse_dtype mirrors opfuse::ElementType");
// The struct_size protocol needs structs without tail padding (a field appended later must make the
// struct larger), and the enums the size of the int the C ABI passes.
static_assert(sizeof(opfuse_session_options) == offsetof(opfuse_session_options, memory_budget) + sizeof(std::uint64_t),
              "opfuse_session_options has tail padding");
static_assert(sizeof(opfuse_tensor) == offsetof(opfuse_tensor, byte_size) + sizeof(std::size_t),
              "opfuse_tensor has tail padding");
static_assert(sizeof(opfuse_dtype) == sizeof(int) && sizeof(opfuse_status) == sizeof(int));

// The first version of each struct: smaller ones are refused.
constexpr std::size_t kOptionsMinSize = sizeof(opfuse_session_options);
constexpr std::size_t kTensorMinSize = sizeof(opfuse_tensor);

// ---- the last error, per thread -------------------------------------------------------------

thread_local std::string t_message;
thread_local const char* t_last = "";

// The refs a call hands to Plan::run or output_infos, reused by the calling thread's next call.
thread_local std::vector<opfuse::TensorRef> t_inputs;
thread_local std::vector<opfuse::MutableTensorRef> t_outputs;

opfuse_status fail(opfuse_status code, std::string_view fn, std::string_view message) noexcept {
  try {
    t_message.assign(fn).append(": ").append(message);
    t_last = t_message.c_str();
  } catch (...) {
    t_last = "opfuse: out of memory while recording an error message";
  }
  return code;
}

opfuse_status fail(std::string_view fn, const opfuse::Status& s) noexcept {
  return fail(static_cast<opfuse_status>(s.code()), fn, s.message());
}

// Runs body() of a getter: an exception becomes `fallback`, with the message recorded.
template <class T, class Body>
T guard(const char* fn, T fallback, Body&& body) noexcept {
  try {
    return body();
  } catch (const std::bad_alloc&) {
    fail(OPFUSE_OUT_OF_MEMORY, fn, "out of memory");
  } catch (const std::exception& e) {
    fail(OPFUSE_INTERNAL, fn, e.what());
  } catch (...) {
    fail(OPFUSE_INTERNAL, fn, "an unknown exception");
  }
  return fallback;
}

// Runs body() of a function returning a status: an exception becomes OUT_OF_MEMORY (std::bad_alloc)
// or INTERNAL (anything else), with the message recorded.
template <class Body>
opfuse_status guard_status(const char* fn, Body&& body) noexcept {
  opfuse_status code = OPFUSE_INTERNAL;
  try {
    return body();
  } catch (const std::bad_alloc&) {
    code = fail(OPFUSE_OUT_OF_MEMORY, fn, "out of memory");
  } catch (const std::exception& e) {
    code = fail(OPFUSE_INTERNAL, fn, e.what());
  } catch (...) {
    code = fail(OPFUSE_INTERNAL, fn, "an unknown exception");
  }
  return code;
}

// The int behind an enum a C caller passed: it may hold any value, which C++ must not load as the
// enum type.
template <class E>
int raw_int(const E& e) noexcept {
  int v;
  static_assert(sizeof(E) == sizeof(int));
  std::memcpy(&v, &e, sizeof v);
  return v;
}

bool valid_dtype(int v) noexcept { return v >= OPFUSE_DTYPE_F32 && v <= OPFUSE_DTYPE_BOOL; }

// A struct a newer caller made larger: the bytes past the fields this library knows must be zero,
// or the caller asked for something this library cannot do. Returns the first nonzero offset, or 0
// when all are zero.
std::size_t first_unknown_nonzero(const void* s, std::size_t known, std::size_t size) noexcept {
  const auto* b = static_cast<const unsigned char*>(s);
  for (std::size_t i = known; i < size; ++i)
    if (b[i] != 0) return i;
  return 0;
}

template <class Out>
opfuse_status check_out(const char* fn, Out** out) noexcept {
  if (!out) return fail(OPFUSE_INVALID_ARGUMENT, fn, "out is NULL");
  *out = nullptr;
  return OPFUSE_OK;
}

// ---- the declared inputs and outputs --------------------------------------------------------

enum class Side { input, output };
const char* side_name(Side side) { return side == Side::input ? "input" : "output"; }
const std::vector<opfuse::ValueInfo>& declared(const opfuse_session* s, Side side) {
  return side == Side::input ? s->model.inputs() : s->model.outputs();
}

// The declared value `index` of a session, or nullptr with the error recorded.
const opfuse::ValueInfo* value_at(const char* fn, const opfuse_session* s, Side side, std::size_t index) {
  if (!s) {
    fail(OPFUSE_INVALID_ARGUMENT, fn, "session is NULL");
    return nullptr;
  }
  const auto& v = declared(s, side);
  if (index >= v.size()) {
    fail(OPFUSE_INVALID_ARGUMENT, fn,
         fmt::format("index {} is out of range (the model has {} {}s)", index, v.size(), side_name(side)));
    return nullptr;
  }
  return &v[index];
}

opfuse_status copy_dims(const char* fn, const std::vector<opfuse::DimInfo>& d, std::int64_t* dims, std::size_t capacity,
                        std::size_t* rank) {
  if (!rank) return fail(OPFUSE_INVALID_ARGUMENT, fn, "rank is NULL");
  *rank = d.size();
  if (capacity == 0) return OPFUSE_OK;
  if (!dims) return fail(OPFUSE_INVALID_ARGUMENT, fn, fmt::format("dims is NULL but capacity is {}", capacity));
  if (capacity < d.size())
    return fail(OPFUSE_INVALID_ARGUMENT, fn,
                fmt::format("capacity {} is less than the rank {} ({})", capacity, d.size(), opfuse::dims_string(d)));
  for (std::size_t k = 0; k < d.size(); ++k) dims[k] = d[k].value;
  return OPFUSE_OK;
}

opfuse_status query_dtype(const char* fn, const opfuse_session* s, Side side, std::size_t index, opfuse_dtype* dtype) {
  return guard_status(fn, [&] {
    const opfuse::ValueInfo* v = value_at(fn, s, side, index);
    if (!v) return OPFUSE_INVALID_ARGUMENT;
    if (!dtype) return fail(OPFUSE_INVALID_ARGUMENT, fn, "dtype is NULL");
    *dtype = static_cast<opfuse_dtype>(v->type);
    return OPFUSE_OK;
  });
}

opfuse_status query_dims(const char* fn, const opfuse_session* s, Side side, std::size_t index, std::int64_t* dims,
                         std::size_t capacity, std::size_t* rank) {
  return guard_status(fn, [&] {
    const opfuse::ValueInfo* v = value_at(fn, s, side, index);
    if (!v) return OPFUSE_INVALID_ARGUMENT;
    return copy_dims(fn, v->dims, dims, capacity, rank);
  });
}

const char* query_symbol(const char* fn, const opfuse_session* s, Side side, std::size_t index, std::size_t dim) {
  return guard(fn, static_cast<const char*>(nullptr), [&]() -> const char* {
    const opfuse::ValueInfo* v = value_at(fn, s, side, index);
    if (!v) return nullptr;
    if (dim >= v->dims.size()) {
      fail(OPFUSE_INVALID_ARGUMENT, fn,
           fmt::format("dim {} is out of range ({} '{}' has rank {})", dim, side_name(side), v->name, v->dims.size()));
      return nullptr;
    }
    return v->dims[dim].symbol.c_str();
  });
}

// ---- caller tensors -------------------------------------------------------------------------

// Checks one array of caller tensors and copies it into the session's refs (TensorRef or
// MutableTensorRef). The array's stride is the caller's struct_size, so a caller compiled against a
// later header (a larger struct) still indexes correctly. `need_data`: every tensor must carry data
// of exactly byte_size (runs); otherwise data may be NULL, and is checked when it is not (resolving
// dims).
template <class Ref, class Data>
opfuse_status read_tensors(const char* fn, const opfuse_session* s, Side side, const opfuse_tensor* array,
                           std::size_t n, bool need_data, std::vector<Ref>& refs) {
  const char* what = side_name(side);
  const char* array_name = side == Side::input ? "inputs" : "outputs";
  if (n > 0 && !array) return fail(OPFUSE_INVALID_ARGUMENT, fn, fmt::format("{} is NULL, {} given", array_name, n));
  refs.resize(n);
  if (n == 0) return OPFUSE_OK;
  const std::size_t stride = array[0].struct_size;
  if (stride < kTensorMinSize)
    return fail(OPFUSE_INVALID_ARGUMENT, fn,
                fmt::format("{}[0].struct_size is {}, at least {} (sizeof(opfuse_tensor)) expected", array_name, stride,
                            kTensorMinSize));
  const auto& decl = declared(s, side);
  const auto* base = reinterpret_cast<const unsigned char*>(array);
  for (std::size_t i = 0; i < n; ++i) {
    const auto* t = reinterpret_cast<const opfuse_tensor*>(base + i * stride);
    if (t->struct_size != stride)
      return fail(OPFUSE_INVALID_ARGUMENT, fn,
                  fmt::format("{}[{}].struct_size is {}, {}[0].struct_size {}: all tensors of one array must agree",
                              array_name, i, t->struct_size, array_name, stride));
    if (const std::size_t off = first_unknown_nonzero(t, kTensorMinSize, stride))
      return fail(
          OPFUSE_UNSUPPORTED, fn,
          fmt::format(
              "{}[{}] has a nonzero byte at offset {}, past the fields of opfuse_tensor this library ({}) knows",
              array_name, i, off, OPFUSE_VERSION));
    // Name it as the model does: by its name, or by the declaration its position binds.
    const bool named = t->name && t->name[0] != '\0';
    const opfuse::ValueInfo* d = nullptr;
    if (named) {
      for (const auto& v : decl)
        if (v.name == t->name) d = &v;
    } else if (i < decl.size()) {
      d = &decl[i];
    }
    // Built only for a message: a run that passes allocates nothing here.
    const auto label = [&] {
      return named ? fmt::format("{} '{}'", what, t->name)
             : d   ? fmt::format("{} '{}' ({}[{}])", what, d->name, array_name, i)
                   : fmt::format("{}[{}]", array_name, i);
    };
    const auto dims_text = [&]() -> std::string {
      return t->rank ? fmt::format("{}", fmt::join(t->dims, t->dims + t->rank, "x")) : "scalar";
    };
    const int dt = raw_int(t->dtype);
    if (!valid_dtype(dt))
      return fail(OPFUSE_INVALID_ARGUMENT, fn,
                  fmt::format("{} dtype {} is not an opfuse_dtype (0 f32, 1 i64, 2 bool)", label(), dt));
    const auto type = static_cast<ElementType>(dt);
    if (d && d->type != type)
      return fail(OPFUSE_INVALID_ARGUMENT, fn,
                  fmt::format("{} dtype is {}, the model declares {}", label(), opfuse_dtype_name(t->dtype),
                              opfuse_dtype_name(static_cast<opfuse_dtype>(d->type))));
    if (t->rank > 0 && !t->dims)
      return fail(OPFUSE_INVALID_ARGUMENT, fn, fmt::format("{} dims is NULL but rank is {}", label(), t->rank));
    std::size_t bytes = opfuse::element_size(type);
    bool overflow = false;
    for (std::size_t k = 0; k < t->rank; ++k) {
      if (t->dims[k] < 0)
        return fail(OPFUSE_INVALID_ARGUMENT, fn, fmt::format("{} dim {} is {}, must be >= 0", label(), k, t->dims[k]));
      overflow = overflow || __builtin_mul_overflow(bytes, static_cast<std::size_t>(t->dims[k]), &bytes);
    }
    if (overflow)
      return fail(OPFUSE_INVALID_ARGUMENT, fn,
                  fmt::format("{} dims {} overflow a size_t of bytes", label(), dims_text()));
    if (need_data || t->data) {
      if (t->byte_size != bytes)
        return fail(OPFUSE_INVALID_ARGUMENT, fn,
                    fmt::format("{} byte_size is {}, expected {} (dims {}, {})", label(), t->byte_size, bytes,
                                dims_text(), opfuse_dtype_name(t->dtype)));
      if (!t->data && bytes > 0)
        return fail(OPFUSE_INVALID_ARGUMENT, fn, fmt::format("{} data is NULL ({} bytes expected)", label(), bytes));
    }
    Ref& r = refs[i];
    r.name.assign(named ? t->name : "");
    r.type = type;
    r.dims.assign(t->dims, t->dims + t->rank);
    r.data = static_cast<Data>(t->data);
  }
  return OPFUSE_OK;
}

// Model::builtin_names() builds strings on each call; this copy keeps them for the pointers
// opfuse_builtin_model_name returns.
const std::vector<std::string>& builtin_names() {
  static const std::vector<std::string> names = opfuse::Model::builtin_names();
  return names;
}

}  // namespace

// ---- library --------------------------------------------------------------------------------

extern "C" {

const char* opfuse_version(void) { return OPFUSE_VERSION; }

const char* opfuse_last_error(void) { return t_last; }

const char* opfuse_status_name(opfuse_status status) {
  const int v = raw_int(status);
  if (v < OPFUSE_OK || v > OPFUSE_INTERNAL) return "unknown";
  return opfuse::to_string(static_cast<StatusCode>(v));
}

size_t opfuse_dtype_size(opfuse_dtype dtype) {
  const int v = raw_int(dtype);
  return valid_dtype(v) ? opfuse::element_size(static_cast<ElementType>(v)) : 0;
}

const char* opfuse_dtype_name(opfuse_dtype dtype) {
  switch (raw_int(dtype)) {
    case OPFUSE_DTYPE_F32: return "f32";
    case OPFUSE_DTYPE_I64: return "i64";
    case OPFUSE_DTYPE_BOOL: return "bool";
    default: return "unknown";
  }
}

size_t opfuse_builtin_model_count(void) {
  return guard("opfuse_builtin_model_count", std::size_t{0}, [] { return builtin_names().size(); });
}

const char* opfuse_builtin_model_name(size_t index) {
  const char* fn = "opfuse_builtin_model_name";
  return guard(fn, static_cast<const char*>(nullptr), [&]() -> const char* {
    const std::vector<std::string>& names = builtin_names();
    if (index >= names.size()) {
      fail(OPFUSE_INVALID_ARGUMENT, fn,
           fmt::format("index {} is out of range ({} built-in models)", index, names.size()));
      return nullptr;
    }
    return names[index].c_str();
  });
}

// ---- models ---------------------------------------------------------------------------------

namespace {
opfuse_status wrap_model(const char* fn, opfuse::Result<opfuse::Model> m, opfuse_model** out) {
  if (!m) return fail(fn, m.status());
  *out = new opfuse_model{std::move(*m)};
  return OPFUSE_OK;
}
}  // namespace

opfuse_status opfuse_model_load_file(const char* path, opfuse_model** out) {
  const char* fn = "opfuse_model_load_file";
  return guard_status(fn, [&] {
    if (opfuse_status s = check_out(fn, out)) return s;
    if (!path) return fail(OPFUSE_INVALID_ARGUMENT, fn, "path is NULL");
    return wrap_model(fn, opfuse::Model::load_file(path), out);
  });
}

opfuse_status opfuse_model_load_memory(const void* data, size_t size, opfuse_model** out) {
  const char* fn = "opfuse_model_load_memory";
  return guard_status(fn, [&] {
    if (opfuse_status s = check_out(fn, out)) return s;
    if (!data) return fail(OPFUSE_INVALID_ARGUMENT, fn, fmt::format("data is NULL (size {})", size));
    return wrap_model(fn, opfuse::Model::load_memory(data, size), out);
  });
}

opfuse_status opfuse_model_load_builtin(const char* name, opfuse_model** out) {
  const char* fn = "opfuse_model_load_builtin";
  return guard_status(fn, [&] {
    if (opfuse_status s = check_out(fn, out)) return s;
    if (!name) return fail(OPFUSE_INVALID_ARGUMENT, fn, "name is NULL");
    return wrap_model(fn, opfuse::Model::load_builtin(name), out);
  });
}

void opfuse_model_destroy(opfuse_model* model) { delete model; }

// ---- sessions -------------------------------------------------------------------------------

namespace {
void default_options(opfuse_session_options* o) noexcept {
  const opfuse::CompileOptions d;
  std::memset(o, 0, sizeof *o);
  o->struct_size = sizeof *o;
  o->stage = static_cast<std::int32_t>(d.stage);
  o->fusion = static_cast<std::int32_t>(d.fusion);
  o->threads = d.threads;
  o->max_cached_shapes = d.max_cached_shapes;
  o->memory_budget = d.memory_budget;
}
}  // namespace

opfuse_status opfuse_session_options_init(opfuse_session_options* options, size_t struct_size) {
  const char* fn = "opfuse_session_options_init";
  return guard_status(fn, [&] {
    if (!options) return fail(OPFUSE_INVALID_ARGUMENT, fn, "options is NULL");
    if (struct_size < kOptionsMinSize)
      return fail(OPFUSE_INVALID_ARGUMENT, fn,
                  fmt::format("struct_size is {}, at least {} (sizeof(opfuse_session_options)) expected", struct_size,
                              kOptionsMinSize));
    // Writes only the caller's struct_size bytes: the fields it knows get their defaults, and the
    // fields of a later header this library does not know are zeroed (which it accepts).
    opfuse_session_options d;
    default_options(&d);
    d.struct_size = struct_size;
    auto* bytes = reinterpret_cast<unsigned char*>(options);
    std::memcpy(bytes, &d, sizeof d);
    std::memset(bytes + sizeof d, 0, struct_size - sizeof d);
    return OPFUSE_OK;
  });
}

opfuse_status opfuse_session_create(const opfuse_model* model, const opfuse_session_options* options,
                                    opfuse_session** out) {
  const char* fn = "opfuse_session_create";
  return guard_status(fn, [&] {
    if (opfuse_status s = check_out(fn, out)) return s;
    if (!model) return fail(OPFUSE_INVALID_ARGUMENT, fn, "model is NULL");
    opfuse_session_options o;
    default_options(&o);
    if (options) {
      if (options->struct_size < kOptionsMinSize)
        return fail(OPFUSE_INVALID_ARGUMENT, fn,
                    fmt::format("options->struct_size is {}, at least {} (sizeof(opfuse_session_options)) expected; "
                                "fill options with opfuse_session_options_init",
                                options->struct_size, kOptionsMinSize));
      if (const std::size_t off = first_unknown_nonzero(options, sizeof o, options->struct_size))
        return fail(OPFUSE_UNSUPPORTED, fn,
                    fmt::format("options has a nonzero byte at offset {}, past the fields of opfuse_session_options "
                                "this library ({}) knows",
                                off, OPFUSE_VERSION));
      // The fields that fit in the caller's struct; a later version's would keep their defaults.
      std::memcpy(&o, options, std::min<std::size_t>(sizeof o, options->struct_size));
    }
    if (o.stage < OPFUSE_STAGE_NAIVE || o.stage > OPFUSE_STAGE_FUSED)
      return fail(OPFUSE_INVALID_ARGUMENT, fn,
                  fmt::format("options->stage {} is not an opfuse_stage (0 naive, 1 simd, 2 fused)", o.stage));
    if (o.fusion < OPFUSE_FUSION_NONE || o.fusion > OPFUSE_FUSION_FULL)
      return fail(
          OPFUSE_INVALID_ARGUMENT, fn,
          fmt::format("options->fusion {} is not an opfuse_fusion (0 none, 1 basic, 2 advanced, 3 full)", o.fusion));
    if (o.threads < 0)
      return fail(OPFUSE_INVALID_ARGUMENT, fn,
                  fmt::format("options->threads {} must be >= 0 (0: all cores)", o.threads));
    if (o.max_cached_shapes < 1)
      return fail(OPFUSE_INVALID_ARGUMENT, fn,
                  fmt::format("options->max_cached_shapes {} must be >= 1", o.max_cached_shapes));
    if (o.memory_budget == 0) return fail(OPFUSE_INVALID_ARGUMENT, fn, "options->memory_budget is 0 bytes");
    opfuse::CompileOptions co;
    co.stage = static_cast<opfuse::Stage>(o.stage);
    co.fusion = static_cast<opfuse::FusionLevel>(o.fusion);
    co.threads = o.threads;
    co.max_cached_shapes = o.max_cached_shapes;
    co.memory_budget = o.memory_budget;
    auto plan = opfuse::Plan::compile(model->model, co);
    if (!plan) return fail(fn, plan.status());
    *out = new opfuse_session{model->model, std::move(*plan)};
    return OPFUSE_OK;
  });
}

void opfuse_session_destroy(opfuse_session* session) { delete session; }

size_t opfuse_session_input_count(const opfuse_session* session) {
  const char* fn = "opfuse_session_input_count";
  if (!session) {
    fail(OPFUSE_INVALID_ARGUMENT, fn, "session is NULL");
    return 0;
  }
  return session->model.inputs().size();
}

size_t opfuse_session_output_count(const opfuse_session* session) {
  const char* fn = "opfuse_session_output_count";
  if (!session) {
    fail(OPFUSE_INVALID_ARGUMENT, fn, "session is NULL");
    return 0;
  }
  return session->model.outputs().size();
}

const char* opfuse_session_input_name(const opfuse_session* session, size_t index) {
  const char* fn = "opfuse_session_input_name";
  return guard(fn, static_cast<const char*>(nullptr), [&]() -> const char* {
    const opfuse::ValueInfo* v = value_at(fn, session, Side::input, index);
    return v ? v->name.c_str() : nullptr;
  });
}

const char* opfuse_session_output_name(const opfuse_session* session, size_t index) {
  const char* fn = "opfuse_session_output_name";
  return guard(fn, static_cast<const char*>(nullptr), [&]() -> const char* {
    const opfuse::ValueInfo* v = value_at(fn, session, Side::output, index);
    return v ? v->name.c_str() : nullptr;
  });
}

opfuse_status opfuse_session_input_dtype(const opfuse_session* session, size_t index, opfuse_dtype* dtype) {
  return query_dtype("opfuse_session_input_dtype", session, Side::input, index, dtype);
}

opfuse_status opfuse_session_output_dtype(const opfuse_session* session, size_t index, opfuse_dtype* dtype) {
  return query_dtype("opfuse_session_output_dtype", session, Side::output, index, dtype);
}

opfuse_status opfuse_session_input_dims(const opfuse_session* session, size_t index, int64_t* dims, size_t capacity,
                                        size_t* rank) {
  return query_dims("opfuse_session_input_dims", session, Side::input, index, dims, capacity, rank);
}

opfuse_status opfuse_session_output_dims(const opfuse_session* session, size_t index, int64_t* dims, size_t capacity,
                                         size_t* rank) {
  return query_dims("opfuse_session_output_dims", session, Side::output, index, dims, capacity, rank);
}

const char* opfuse_session_input_dim_symbol(const opfuse_session* session, size_t index, size_t dim) {
  return query_symbol("opfuse_session_input_dim_symbol", session, Side::input, index, dim);
}

const char* opfuse_session_output_dim_symbol(const opfuse_session* session, size_t index, size_t dim) {
  return query_symbol("opfuse_session_output_dim_symbol", session, Side::output, index, dim);
}

opfuse_status opfuse_session_resolve_output_dims(opfuse_session* session, const opfuse_tensor* inputs, size_t n_inputs,
                                                 size_t output_index, int64_t* dims, size_t capacity, size_t* rank) {
  const char* fn = "opfuse_session_resolve_output_dims";
  return guard_status(fn, [&] {
    if (!session) return fail(OPFUSE_INVALID_ARGUMENT, fn, "session is NULL");
    if (!rank) return fail(OPFUSE_INVALID_ARGUMENT, fn, "rank is NULL");
    if (!value_at(fn, session, Side::output, output_index)) return OPFUSE_INVALID_ARGUMENT;
    if (opfuse_status s =
            read_tensors<opfuse::TensorRef, const void*>(fn, session, Side::input, inputs, n_inputs, false, t_inputs))
      return s;
    auto infos = session->plan.output_infos(t_inputs);
    if (!infos) return fail(fn, infos.status());
    return copy_dims(fn, (*infos)[output_index].dims, dims, capacity, rank);
  });
}

opfuse_status opfuse_session_run(opfuse_session* session, const opfuse_tensor* inputs, size_t n_inputs,
                                 opfuse_tensor* outputs, size_t n_outputs) {
  const char* fn = "opfuse_session_run";
  return guard_status(fn, [&] {
    if (!session) return fail(OPFUSE_INVALID_ARGUMENT, fn, "session is NULL");
    if (opfuse_status s =
            read_tensors<opfuse::TensorRef, const void*>(fn, session, Side::input, inputs, n_inputs, true, t_inputs))
      return s;
    if (opfuse_status s = read_tensors<opfuse::MutableTensorRef, void*>(fn, session, Side::output, outputs, n_outputs,
                                                                        true, t_outputs))
      return s;
    // Plan::run checks the rest (binding, dims against the model, counts) before it writes.
    if (opfuse::Status s = session->plan.run(t_inputs, t_outputs); !s) return fail(fn, s);
    return OPFUSE_OK;
  });
}

}  // extern "C"
