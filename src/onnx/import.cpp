// src/onnx/import.cpp - ModelProto -> graph::Graph, one function per ONNX op family.
//
// The import runs in four steps:
//   1. bytes: the size is checked against max_model_bytes before protobuf sees them, and a
//      parse failure is a plain invalid_argument (a truncated download looks like that);
//   2. ONNX's checker and shape inference, for opsets the linked libonnx knows: the checker
//      catches malformed graphs early with ONNX's own wording, and shape inference writes
//      value_info for intermediate values, which is where their dims come from;
//   3. values: initializers (each size checked before its payload is copied), graph inputs
//      that are not initializers (older exporters list their weights as inputs too: those
//      stay constants), and value_info for everything else;
//   4. nodes, in file order, each through the handler of its op_type. A handler checks the
//      attributes, converts the opset-specific spelling into the opset-13+ form of the op
//      contract (ir.hpp) and adds one node, or a few where ONNX's op has no single NodeOp
//      (Gemm's beta, old Softmax's 2-D coercion, Clip with runtime bounds).
// verify() has the last word: a dangling input, a value produced twice or a cycle is whatever
// it says, since those are properties of the whole graph, not of one node.
//
// Names: graph values keep their ONNX names. Values the importer makes (axes initializers,
// Gemm's scaled bias, ...) and nodes with no name in the file get fresh names that avoid every
// name the file uses, so a later ONNX value can never collide with one of them.
#include "src/onnx/import.hpp"

#include <fmt/format.h>
#include <onnx/checker.h>
#include <onnx/defs/schema.h>
#include <onnx/onnx_pb.h>
#include <onnx/shape_inference/implementation.h>

#include <algorithm>
#include <bit>
#include <climits>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <new>
#include <optional>
#include <set>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <utility>

namespace opfuse::onnx {
namespace {

namespace pb = ::onnx;
using graph::Attr;
using graph::Dim;
using graph::Dims;
using graph::DType;
using graph::NodeOp;

// Error propagation for the many small checks below: every helper returns a Status or a
// Result, and a failure goes straight back to the caller.
#define OPFUSE_CONCAT_INNER(a, b) a##b
#define OPFUSE_CONCAT(a, b) OPFUSE_CONCAT_INNER(a, b)
#define RETURN_IF_ERROR(expr)               \
  do {                                      \
    if (Status s_ = (expr); !s_) return s_; \
  } while (0)
#define ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                          \
  if (!tmp) return tmp.status();              \
  lhs = std::move(tmp).value()
#define ASSIGN_OR_RETURN(lhs, expr) ASSIGN_OR_RETURN_IMPL(OPFUSE_CONCAT(result_, __LINE__), lhs, expr)

constexpr std::int64_t kMinOpset = 6;
constexpr std::int64_t kMaxOpset = 18;

Status invalid(std::string msg) { return {StatusCode::invalid_argument, "onnx: " + std::move(msg)}; }
Status unsupported(std::string msg) { return {StatusCode::unsupported, "onnx: " + std::move(msg)}; }
// Graph-building errors already say "graph: ..."; keep them, under this layer's prefix.
Status from_graph(const Status& s) { return s ? s : Status(s.code(), "onnx: " + s.message()); }

std::string elem_type_name(std::int32_t t) {
  return pb::TensorProto_DataType_IsValid(t) ? pb::TensorProto_DataType_Name(t) : fmt::format("data type {}", t);
}

// "[1, 2, 3]"; a hostile list of millions is cut short rather than copied into a message.
std::string list(const std::vector<std::int64_t>& xs) {
  constexpr std::size_t kShown = 16;
  std::string s = "[";
  for (std::size_t i = 0; i < xs.size() && i < kShown; ++i) s += fmt::format("{}{}", i ? ", " : "", xs[i]);
  if (xs.size() > kShown) s += fmt::format(", ... ({} values)", xs.size());
  return s + "]";
}

Dims to_dims(const std::vector<std::int64_t>& xs) { return Dims(xs.begin(), xs.end()); }

// The element type of a graph input, output or value_info entry. Kernels compute in f32, and
// i64 / bool carry shapes, indices and masks; anything else (DOUBLE, FLOAT16, INT8, STRING,
// and INT32 at run time) has no kernel, so the model cannot run and says so up front.
Result<DType> value_dtype(std::int32_t elem, const std::string& what) {
  switch (elem) {
    case pb::TensorProto::FLOAT: return DType::f32;
    case pb::TensorProto::INT64: return DType::i64;
    case pb::TensorProto::BOOL: return DType::boolean;
    default:
      return unsupported(
          fmt::format("{} has element type {}; opfuse runs FLOAT, INT64 and BOOL tensors", what, elem_type_name(elem)));
  }
}

// ---- tensors -------------------------------------------------------------------------------

// Little-endian element i of a raw_data buffer (ONNX stores raw_data little-endian).
template <class T>
T read_le(const char* p, std::size_t i) {
  T v;
  std::memcpy(&v, p + i * sizeof(T), sizeof(T));
  if constexpr (std::endian::native == std::endian::big) {
    auto* b = reinterpret_cast<unsigned char*>(&v);
    std::reverse(b, b + sizeof(T));
  }
  return v;
}

template <class T>
void append_le(std::string& out, T v) {
  char b[sizeof(T)];
  std::memcpy(b, &v, sizeof(T));
  if constexpr (std::endian::native == std::endian::big) std::reverse(b, b + sizeof(T));
  out.append(b, sizeof(T));
}

// A TensorProto's payload, every size checked before anything is allocated: dims must be
// non-negative, their product must not overflow, the decoded bytes must fit max_bytes, and the
// payload must hold exactly that many elements. `what` names the tensor in messages
// ("initializer 'conv1.weight'").
Result<TensorData> decode_tensor(const pb::TensorProto& t, std::uint64_t max_bytes, const std::string& what) {
  if (t.data_location() == pb::TensorProto::EXTERNAL || t.external_data_size() > 0)
    return unsupported(
        fmt::format("{} keeps its data in an external file; opfuse imports self-contained models only", what));
  if (t.has_segment()) return unsupported(fmt::format("{} is a segment of a larger tensor", what));

  TensorData d;
  d.name = t.name();
  std::size_t stored = 0;  // bytes per element in raw_data
  switch (t.data_type()) {
    case pb::TensorProto::FLOAT: d.dtype = DType::f32, stored = 4; break;
    case pb::TensorProto::INT64: d.dtype = DType::i64, stored = 8; break;
    case pb::TensorProto::INT32: d.dtype = DType::i64, stored = 4; break;  // widened: i64 is the index type
    case pb::TensorProto::BOOL: d.dtype = DType::boolean, stored = 1; break;
    case pb::TensorProto::UNDEFINED: return invalid(fmt::format("{} has no data type", what));
    default:
      return unsupported(fmt::format("{} has data type {}; opfuse supports FLOAT, INT64, INT32 and BOOL tensors", what,
                                     elem_type_name(t.data_type())));
  }

  std::int64_t n = 1;
  for (int i = 0; i < t.dims_size(); ++i) {
    const std::int64_t dim = t.dims(i);
    if (dim < 0)
      return invalid(
          fmt::format("{} has dims {} with negative dim {}", what, list({t.dims().begin(), t.dims().end()}), i));
    if (__builtin_mul_overflow(n, dim, &n))
      return invalid(
          fmt::format("{} has dims {} whose element count overflows", what, list({t.dims().begin(), t.dims().end()})));
  }
  d.dims.assign(t.dims().begin(), t.dims().end());
  const std::size_t dst = d.dtype == DType::f32 ? sizeof(float) : sizeof(std::int64_t);
  std::uint64_t bytes = 0;
  if (__builtin_mul_overflow(static_cast<std::uint64_t>(n), dst, &bytes) || bytes > max_bytes)
    return invalid(fmt::format("{} has dims {} ({} elements), more than the {} bytes max_tensor_bytes allows", what,
                               list(d.dims), n, max_bytes));

  int typed = 0;
  const char* field = "";
  switch (t.data_type()) {
    case pb::TensorProto::FLOAT: typed = t.float_data_size(), field = "float_data"; break;
    case pb::TensorProto::INT64: typed = t.int64_data_size(), field = "int64_data"; break;
    default: typed = t.int32_data_size(), field = "int32_data"; break;
  }
  const auto count = static_cast<std::size_t>(n);
  const bool raw = t.has_raw_data();
  if (raw && typed > 0) return invalid(fmt::format("{} holds both raw_data and {}", what, field));
  if (raw && t.raw_data().size() != count * stored)
    return invalid(fmt::format("{} has dims {} ({} elements, {} bytes) but its raw_data holds {} bytes", what,
                               list(d.dims), n, count * stored, t.raw_data().size()));
  if (!raw && static_cast<std::size_t>(typed) != count)
    return invalid(
        fmt::format("{} has dims {} ({} elements) but its {} holds {} elements", what, list(d.dims), n, field, typed));

  const char* p = t.raw_data().data();
  switch (t.data_type()) {
    case pb::TensorProto::FLOAT:
      if (!raw) {
        d.f32.assign(t.float_data().begin(), t.float_data().end());
      } else {
        d.f32.resize(count);
        for (std::size_t i = 0; i < count; ++i) d.f32[i] = read_le<float>(p, i);
      }
      break;
    case pb::TensorProto::INT64:
      if (!raw) {
        d.i64.assign(t.int64_data().begin(), t.int64_data().end());
      } else {
        d.i64.resize(count);
        for (std::size_t i = 0; i < count; ++i) d.i64[i] = read_le<std::int64_t>(p, i);
      }
      break;
    case pb::TensorProto::INT32:
      d.i64.resize(count);
      for (std::size_t i = 0; i < count; ++i)
        d.i64[i] = raw ? read_le<std::int32_t>(p, i) : t.int32_data(static_cast<int>(i));
      break;
    default:  // BOOL: one byte per element in raw_data, one int32 per element otherwise
      d.i64.resize(count);
      for (std::size_t i = 0; i < count; ++i)
        d.i64[i] = (raw ? p[i] != 0 : t.int32_data(static_cast<int>(i)) != 0) ? 1 : 0;
      break;
  }
  return d;
}

// What a ValueInfoProto says about a value: either may be unknown (no elem_type, no shape).
struct ValueType {
  std::optional<DType> dtype;
  std::optional<Dims> dims;
};

// `annotation`: the entry only annotates a value a node produces (value_info and graph outputs,
// much of it written by ONNX's shape inference, and re-derived by opfuse anyway). A negative dim
// there means the producing node is invalid - ONNX's inference writes what a kernel larger than
// its input gives - so the dims are dropped and opfuse's own shape checks, which name the node
// and the parameter, refuse it.
Result<ValueType> value_type(const pb::ValueInfoProto& vi, const std::string& what, bool annotation = false) {
  ValueType t;
  if (!vi.has_type() || vi.type().value_case() == pb::TypeProto::VALUE_NOT_SET) return t;
  const pb::TypeProto& tp = vi.type();
  if (!tp.has_tensor_type()) {
    const char* kind = tp.has_sequence_type()        ? "a sequence"
                       : tp.has_map_type()           ? "a map"
                       : tp.has_optional_type()      ? "an optional"
                       : tp.has_sparse_tensor_type() ? "a sparse tensor"
                                                     : "a non-tensor";
    return unsupported(fmt::format("{} has {} type; opfuse runs dense tensors only", what, kind));
  }
  const pb::TypeProto::Tensor& tt = tp.tensor_type();
  if (tt.elem_type() != pb::TensorProto::UNDEFINED) {
    ASSIGN_OR_RETURN(t.dtype, value_dtype(tt.elem_type(), what));
  }
  if (tt.has_shape()) {
    Dims dims;
    for (int i = 0; i < tt.shape().dim_size(); ++i) {
      const pb::TensorShapeProto::Dimension& d = tt.shape().dim(i);
      if (d.has_dim_value()) {
        if (d.dim_value() < 0 && annotation) return t;  // dims unknown; see above
        if (d.dim_value() < 0) return invalid(fmt::format("{} has negative dim {} (dim {})", what, d.dim_value(), i));
        dims.emplace_back(d.dim_value());
      } else {
        dims.push_back(Dim::sym(d.has_dim_param() ? d.dim_param() : std::string()));  // "" = unknown
      }
    }
    t.dims = std::move(dims);
  }
  return t;
}

// ---- attributes ----------------------------------------------------------------------------

// Typed access to a node's attributes. A wrong type is an error naming node and attribute;
// an attribute written with type UNDEFINED (some old exporters) is accepted when the field
// the caller wants is the one that is set.
class Attrs {
 public:
  Attrs(const pb::NodeProto& n, std::string label) : label_(std::move(label)) {
    for (const pb::AttributeProto& a : n.attribute()) map_.emplace(a.name(), &a);
  }

  bool has(const std::string& key) const { return map_.count(key) > 0; }

  Result<std::optional<std::int64_t>> opt_i(const std::string& key) const {
    ASSIGN_OR_RETURN(const pb::AttributeProto* a, get(key, pb::AttributeProto::INT));
    if (!a) return std::optional<std::int64_t>();
    return std::optional<std::int64_t>(a->i());
  }
  Result<std::int64_t> i(const std::string& key, std::int64_t dflt) const {
    ASSIGN_OR_RETURN(std::optional<std::int64_t> v, opt_i(key));
    return v.value_or(dflt);
  }
  // A 0 / 1 flag (transA, keepdims, ceil_mode, ...).
  Result<bool> flag(const std::string& key, bool dflt) const {
    ASSIGN_OR_RETURN(std::int64_t v, i(key, dflt ? 1 : 0));
    if (v != 0 && v != 1) return invalid(fmt::format("{}: attribute '{}' is {}; must be 0 or 1", label_, key, v));
    return v == 1;
  }
  Result<float> f(const std::string& key, float dflt) const {
    ASSIGN_OR_RETURN(const pb::AttributeProto* a, get(key, pb::AttributeProto::FLOAT));
    return a ? a->f() : dflt;
  }
  Result<std::string> s(const std::string& key, std::string dflt) const {
    ASSIGN_OR_RETURN(const pb::AttributeProto* a, get(key, pb::AttributeProto::STRING));
    return a ? a->s() : dflt;
  }
  Result<std::optional<std::vector<std::int64_t>>> ints(const std::string& key) const {
    ASSIGN_OR_RETURN(const pb::AttributeProto* a, get(key, pb::AttributeProto::INTS));
    if (!a) return std::optional<std::vector<std::int64_t>>();
    return std::optional<std::vector<std::int64_t>>(std::vector<std::int64_t>(a->ints().begin(), a->ints().end()));
  }
  Result<std::vector<float>> floats(const std::string& key) const {
    ASSIGN_OR_RETURN(const pb::AttributeProto* a, get(key, pb::AttributeProto::FLOATS));
    if (!a) return std::vector<float>();
    return std::vector<float>(a->floats().begin(), a->floats().end());
  }
  Result<const pb::TensorProto*> tensor(const std::string& key) const {
    ASSIGN_OR_RETURN(const pb::AttributeProto* a, get(key, pb::AttributeProto::TENSOR));
    return a ? &a->t() : nullptr;
  }

 private:
  // The attribute, nullptr when absent, an error when it has another type.
  Result<const pb::AttributeProto*> get(const std::string& key, pb::AttributeProto::AttributeType want) const {
    const auto it = map_.find(key);
    if (it == map_.end()) return static_cast<const pb::AttributeProto*>(nullptr);
    const pb::AttributeProto* a = it->second;
    if (a->type() == want) return a;
    if (a->type() == pb::AttributeProto::UNDEFINED) {
      const bool set =
          (want == pb::AttributeProto::INT && a->has_i()) || (want == pb::AttributeProto::FLOAT && a->has_f()) ||
          (want == pb::AttributeProto::STRING && a->has_s()) || (want == pb::AttributeProto::TENSOR && a->has_t()) ||
          (want == pb::AttributeProto::INTS && a->ints_size() > 0) ||
          (want == pb::AttributeProto::FLOATS && a->floats_size() > 0);
      if (set) return a;
    }
    return invalid(fmt::format("{}: attribute '{}' has type {}, expected {}", label_, key,
                               pb::AttributeProto_AttributeType_Name(a->type()),
                               pb::AttributeProto_AttributeType_Name(want)));
  }

  std::string label_;
  std::unordered_map<std::string, const pb::AttributeProto*> map_;
};

// The node being imported: its proto, its (unique) graph name and the label messages use.
struct NodeCtx {
  const pb::NodeProto& n;
  std::string name;
  std::string label;  // "node 'conv1' (Conv)"
  Attrs attrs;
};

// ---- the importer --------------------------------------------------------------------------

class Importer {
 public:
  Importer(const pb::ModelProto& model, const ImportOptions& options, std::int64_t opset)
      : model_(model), options_(options), opset_(opset) {}

  Result<graph::Graph> run();
  static bool supports(const std::string& op_type) { return handlers().count(op_type) > 0; }

 private:
  using Handler = std::function<Status(Importer&, const NodeCtx&)>;
  static const std::unordered_map<std::string, Handler>& handlers();

  // -- messages
  Status bad(const NodeCtx& c, const std::string& msg) const { return invalid(fmt::format("{}: {}", c.label, msg)); }
  Status unsup(const NodeCtx& c, const std::string& msg) const {
    return unsupported(fmt::format("node '{}' ({}, opset {}): {}", c.name, c.n.op_type(), opset_, msg));
  }

  // -- names
  std::string fresh_value_name(const std::string& base) const;
  std::string fresh_node_name(const std::string& base);

  // -- values
  Result<int> make_value(const std::string& name, DType fallback);
  Result<int> use(const std::string& name);
  Status add_constant(TensorData d);
  Result<int> const_i64(const std::string& base, std::vector<std::int64_t> data);
  Result<int> const_f32(const std::string& base, Dims dims, std::vector<float> data);
  std::optional<int> rank(int v) const {
    if (v < 0 || !g_.value(v).has_shape) return std::nullopt;
    return static_cast<int>(g_.value(v).dims.size());
  }
  DType dtype(int v) const { return v >= 0 ? g_.value(v).dtype : DType::f32; }
  // NumPy broadcasting of two values' dims, for the intermediates the importer makes; nullopt
  // when either is unknown or a pair of dims does not say which wins (symbols, mismatches).
  std::optional<Dims> broadcast(int a, int b) const;
  bool used(const std::string& name) const { return !name.empty() && consumed_.count(name) > 0; }
  // The single f32 element of a constant (Clip bounds), nullopt for anything else.
  std::optional<float> scalar_f32(int v) const;

  // -- node plumbing
  Status import_node(const pb::NodeProto& n, int index);
  Status arity(const NodeCtx& c, int min_in, int max_in, int min_out, int max_out) const;
  std::string in_name(const NodeCtx& c, int i) const { return i < c.n.input_size() ? c.n.input(i) : std::string(); }
  Result<int> input(const NodeCtx& c, int i, const char* what);
  Result<int> opt_input(const NodeCtx& c, int i);
  Result<int> output(const NodeCtx& c, int i, DType fallback);
  Status emit(NodeOp op, const std::string& name, std::vector<int> in, std::vector<int> out,
              std::optional<OpParams> params = std::nullopt, std::map<std::string, Attr> attrs = {});

  // -- attribute checks
  Status check_axis(const NodeCtx& c, const char* key, std::int64_t axis, std::optional<int> rank,
                    bool allow_end = false) const;
  // A conv / pool input must be (N, C, spatial...) with the spatial rank of the kernel.
  Status check_spatial_rank(const NodeCtx& c, int x, std::size_t nsp) const;
  Status check_axes(const NodeCtx& c, const char* key, const std::vector<std::int64_t>& axes,
                    std::optional<int> rank) const;
  Result<std::vector<std::int64_t>> window_attr(const NodeCtx& c, const char* key, std::size_t nsp,
                                                std::optional<std::int64_t> dflt) const;
  Result<std::vector<std::int64_t>> pads(const NodeCtx& c, int x, const std::vector<std::int64_t>& kernel,
                                         const std::vector<std::int64_t>& strides,
                                         const std::vector<std::int64_t>& dilations) const;
  // An opset<N attribute list turned into the i64 input the op contract wants.
  Result<int> attr_as_input(const NodeCtx& c, const char* key, bool required);
  // A fresh intermediate value of the importer's own (name derived from base).
  Result<int> new_value(const std::string& base, DType dtype = DType::f32, std::optional<Dims> dims = std::nullopt);

  // -- op families
  Status constant(const NodeCtx& c);
  Status conv(const NodeCtx& c);
  Status pool(const NodeCtx& c, bool is_max);
  Status batchnorm(const NodeCtx& c);
  Status unary(const NodeCtx& c, NodeOp op, std::optional<OpParams> params);
  Status hard_sigmoid(const NodeCtx& c);
  Status clip(const NodeCtx& c);
  Status binary(const NodeCtx& c, NodeOp op);
  Status variadic(const NodeCtx& c, NodeOp op);
  Status gemm(const NodeCtx& c);
  Status softmax(const NodeCtx& c);
  Status layernorm(const NodeCtx& c);
  Status reduce_mean(const NodeCtx& c);
  Status passthrough(const NodeCtx& c, NodeOp op, int min_in, int max_in, std::map<std::string, Attr> attrs = {},
                     std::optional<DType> out_dtype = std::nullopt);
  Status flatten(const NodeCtx& c);
  Status reshape(const NodeCtx& c);
  Status transpose(const NodeCtx& c);
  Status concat(const NodeCtx& c);
  Status gather(const NodeCtx& c);
  Status slice(const NodeCtx& c);
  Status squeeze(const NodeCtx& c, bool un);
  Status split(const NodeCtx& c);
  Status shape(const NodeCtx& c);
  Status cast(const NodeCtx& c);
  Status constant_of_shape(const NodeCtx& c);
  Status dropout(const NodeCtx& c);

  const pb::ModelProto& model_;
  const ImportOptions& options_;
  const std::int64_t opset_;
  graph::Graph g_;
  std::unordered_map<std::string, const pb::ValueInfoProto*> info_;
  std::unordered_set<std::string> file_values_;  // every value name the file uses
  std::unordered_set<std::string> file_nodes_;   // every node name the file uses
  std::unordered_set<std::string> taken_nodes_;  // node names given out so far
  std::unordered_set<std::string> consumed_;     // values some node reads or the graph outputs
};

// ---- names and values ----------------------------------------------------------------------

std::string Importer::fresh_value_name(const std::string& base) const {
  const auto free = [&](const std::string& s) { return !file_values_.count(s) && !g_.find_value(s); };
  if (free(base)) return base;
  for (int k = 1;; ++k)
    if (std::string s = fmt::format("{}_{}", base, k); free(s)) return s;
}

std::string Importer::fresh_node_name(const std::string& base) {
  const auto free = [&](const std::string& s) { return !file_nodes_.count(s) && !taken_nodes_.count(s); };
  std::string s = base;
  for (int k = 2; !free(s); ++k) s = fmt::format("{}_{}", base, k);
  taken_nodes_.insert(s);
  return s;
}

Result<int> Importer::make_value(const std::string& name, DType fallback) {
  ValueType t;
  if (const auto it = info_.find(name); it != info_.end()) {
    ASSIGN_OR_RETURN(t, value_type(*it->second, fmt::format("value '{}'", name), true));
  }
  Result<int> id = g_.add_value(name, t.dtype.value_or(fallback), std::move(t.dims));
  return id ? id : from_graph(id.status());
}

// A value read by a node. One not seen yet is a forward reference (an unsorted file, a
// dangling input, a cycle): it is created now, and verify() names the problem if no node
// ends up producing it.
Result<int> Importer::use(const std::string& name) {
  if (const auto id = g_.find_value(name)) return *id;
  return make_value(name, DType::f32);
}

Status Importer::add_constant(TensorData d) {
  Result<int> id = d.dtype == DType::f32 ? g_.add_initializer(d.name, to_dims(d.dims), std::move(d.f32))
                                         : g_.add_initializer(d.name, to_dims(d.dims), std::move(d.i64), d.dtype);
  return id ? Status::ok() : from_graph(id.status());
}

Result<int> Importer::const_i64(const std::string& base, std::vector<std::int64_t> data) {
  const Dims dims{static_cast<std::int64_t>(data.size())};
  Result<int> id = g_.add_initializer(fresh_value_name(base), dims, std::move(data), DType::i64);
  return id ? id : from_graph(id.status());
}

Result<int> Importer::const_f32(const std::string& base, Dims dims, std::vector<float> data) {
  Result<int> id = g_.add_initializer(fresh_value_name(base), std::move(dims), std::move(data));
  return id ? id : from_graph(id.status());
}

std::optional<Dims> Importer::broadcast(int a, int b) const {
  if (a < 0 || b < 0 || !g_.value(a).has_shape || !g_.value(b).has_shape) return std::nullopt;
  const Dims& da = g_.value(a).dims;
  const Dims& db = g_.value(b).dims;
  Dims out(std::max(da.size(), db.size()));
  for (std::size_t i = 0; i < out.size(); ++i) {  // aligned from the right
    const Dim x = i < da.size() ? da[da.size() - 1 - i] : Dim(1);
    const Dim y = i < db.size() ? db[db.size() - 1 - i] : Dim(1);
    Dim& o = out[out.size() - 1 - i];
    if (x == y || y == Dim(1))
      o = x;
    else if (x == Dim(1))
      o = y;
    else
      return std::nullopt;
  }
  return out;
}

std::optional<float> Importer::scalar_f32(int v) const {
  if (v < 0) return std::nullopt;
  const graph::Value& val = g_.value(v);
  if (!val.is_constant() || val.dtype != DType::f32 || !val.f32_data || val.f32_data->size() != 1) return std::nullopt;
  return val.f32_data->front();
}

// ---- node plumbing -------------------------------------------------------------------------

Status Importer::arity(const NodeCtx& c, int min_in, int max_in, int min_out, int max_out) const {
  const auto range = [](int lo, int hi) { return lo == hi ? std::to_string(lo) : fmt::format("{} to {}", lo, hi); };
  if (c.n.input_size() < min_in || c.n.input_size() > max_in)
    return bad(c, fmt::format("has {} inputs; {} (opset {}) takes {}", c.n.input_size(), c.n.op_type(), opset_,
                              range(min_in, max_in)));
  if (c.n.output_size() < min_out || c.n.output_size() > max_out)
    return bad(c, fmt::format("has {} outputs; {} (opset {}) gives {}", c.n.output_size(), c.n.op_type(), opset_,
                              range(min_out, max_out)));
  return Status::ok();
}

Result<int> Importer::input(const NodeCtx& c, int i, const char* what) {
  const std::string name = in_name(c, i);
  if (name.empty()) return bad(c, fmt::format("input {} ({}) is required but missing", i, what));
  return use(name);
}

Result<int> Importer::opt_input(const NodeCtx& c, int i) {
  const std::string name = in_name(c, i);
  if (name.empty()) return -1;
  return use(name);
}

Result<int> Importer::output(const NodeCtx& c, int i, DType fallback) {
  const std::string name = i < c.n.output_size() ? c.n.output(i) : std::string();
  if (name.empty()) return bad(c, fmt::format("output {} is required but has no name", i));
  if (const auto id = g_.find_value(name)) return *id;  // read before it was written: verify() will judge
  return make_value(name, fallback);
}

Status Importer::emit(NodeOp op, const std::string& name, std::vector<int> in, std::vector<int> out,
                      std::optional<OpParams> params, std::map<std::string, Attr> attrs) {
  Result<int> id = g_.add_node(op, name, std::move(in), std::move(out), std::move(params), std::move(attrs));
  return id ? Status::ok() : from_graph(id.status());
}

// ---- attribute checks ----------------------------------------------------------------------

Status Importer::check_axis(const NodeCtx& c, const char* key, std::int64_t axis, std::optional<int> r,
                            bool allow_end) const {
  if (!r) {
    // Unknown rank: the runtime judges it, but it has to fit the int of SoftmaxParams / NormParams.
    if (axis < INT_MIN || axis > INT_MAX)
      return bad(c, fmt::format("attribute '{}' is {}, out of range for any tensor", key, axis));
    return Status::ok();
  }
  const std::int64_t hi = allow_end ? *r : *r - 1;
  if (axis < -*r || axis > hi)
    return bad(c, fmt::format("attribute '{}' is {}; the input has rank {}, so it must be in [{}, {}]", key, axis, *r,
                              -*r, hi));
  return Status::ok();
}

Status Importer::check_spatial_rank(const NodeCtx& c, int x, std::size_t nsp) const {
  if (const auto r = rank(x); r && static_cast<std::size_t>(*r) != nsp + 2)
    return bad(c, fmt::format("input '{}' has rank {}; {} spatial dims need (N, C) and rank {}", g_.value(x).name, *r,
                              nsp, nsp + 2));
  return Status::ok();
}

Status Importer::check_axes(const NodeCtx& c, const char* key, const std::vector<std::int64_t>& axes,
                            std::optional<int> r) const {
  std::vector<std::int64_t> seen;
  for (std::int64_t a : axes) {
    RETURN_IF_ERROR(check_axis(c, key, a, r));
    const std::int64_t norm = r && a < 0 ? a + *r : a;
    if (std::find(seen.begin(), seen.end(), norm) != seen.end())
      return bad(c, fmt::format("attribute '{}' {} names axis {} twice", key, list(axes), a));
    seen.push_back(norm);
  }
  return Status::ok();
}

// kernel_shape / strides / dilations: one value per spatial dim, each >= 1.
Result<std::vector<std::int64_t>> Importer::window_attr(const NodeCtx& c, const char* key, std::size_t nsp,
                                                        std::optional<std::int64_t> dflt) const {
  ASSIGN_OR_RETURN(std::optional<std::vector<std::int64_t>> v, c.attrs.ints(key));
  if (!v) {
    if (!dflt) return bad(c, fmt::format("attribute '{}' is required", key));
    return std::vector<std::int64_t>(nsp, *dflt);
  }
  if (v->size() != nsp)
    return bad(
        c, fmt::format("attribute '{}' {} has {} values; the node has {} spatial dims", key, list(*v), v->size(), nsp));
  for (std::size_t i = 0; i < v->size(); ++i)
    if ((*v)[i] < 1)
      return bad(c, fmt::format("attribute '{}' {} has {} at index {}; must be >= 1", key, list(*v), (*v)[i], i));
  return *v;
}

// Padding in ONNX order (every begin, then every end), from 'pads' or 'auto_pad'. SAME_* needs
// the input's spatial dims: total = max(0, (ceil(in / s) - 1) * s + (k - 1) * d + 1 - in), and
// SAME_UPPER puts the odd pixel at the end, SAME_LOWER at the beginning.
Result<std::vector<std::int64_t>> Importer::pads(const NodeCtx& c, int x, const std::vector<std::int64_t>& kernel,
                                                 const std::vector<std::int64_t>& strides,
                                                 const std::vector<std::int64_t>& dilations) const {
  const std::size_t nsp = strides.size();
  ASSIGN_OR_RETURN(const std::string auto_pad, c.attrs.s("auto_pad", "NOTSET"));
  if (auto_pad == "NOTSET" || auto_pad.empty()) {
    ASSIGN_OR_RETURN(std::optional<std::vector<std::int64_t>> p, c.attrs.ints("pads"));
    if (!p) return std::vector<std::int64_t>(2 * nsp, 0);
    if (p->size() != 2 * nsp)
      return bad(c, fmt::format("attribute 'pads' {} has {} values; {} spatial dims need {}", list(*p), p->size(), nsp,
                                2 * nsp));
    for (std::size_t i = 0; i < p->size(); ++i)
      if ((*p)[i] < 0)
        return bad(c, fmt::format("attribute 'pads' {} has {} at index {}; must be >= 0", list(*p), (*p)[i], i));
    return *p;
  }
  if (auto_pad == "VALID") return std::vector<std::int64_t>(2 * nsp, 0);
  if (auto_pad != "SAME_UPPER" && auto_pad != "SAME_LOWER")
    return bad(c,
               fmt::format("attribute 'auto_pad' is '{}'; must be NOTSET, VALID, SAME_UPPER or SAME_LOWER", auto_pad));

  const graph::Value& xv = g_.value(x);
  bool known = xv.has_shape && xv.dims.size() == nsp + 2;
  for (std::size_t i = 0; known && i < nsp; ++i) known = xv.dims[2 + i].is_static() && kernel[i] >= 1;
  if (!known)
    return unsup(c, fmt::format("auto_pad {} needs static spatial dims of input '{}' (it is {}) and a known kernel",
                                auto_pad, xv.name, xv.has_shape ? graph::to_string(xv.dims) : "of unknown shape"));
  std::vector<std::int64_t> p(2 * nsp, 0);
  for (std::size_t i = 0; i < nsp; ++i) {
    const std::int64_t in = xv.dims[2 + i].value, s = strides[i];
    std::int64_t span = 0, total = 0;  // (k - 1) * d + 1: the dilated window
    if (__builtin_mul_overflow(kernel[i] - 1, dilations[i], &span) || __builtin_add_overflow(span, 1, &span) ||
        __builtin_mul_overflow(in / s + (in % s != 0) - 1, s, &total) ||  // (ceil(in / s) - 1) * s
        __builtin_add_overflow(total, span - in, &total))
      return bad(c, fmt::format("auto_pad {}: the padding of spatial dim {} overflows", auto_pad, i));
    total = std::max<std::int64_t>(0, total);
    const std::int64_t small = total / 2, large = total - small;
    p[i] = auto_pad == "SAME_UPPER" ? small : large;
    p[nsp + i] = auto_pad == "SAME_UPPER" ? large : small;
  }
  return p;
}

// Older opsets gave shape-like operands (axes, starts, split sizes) as attributes; the op
// contract takes them as i64 inputs, so they become initializers. -1 when absent and optional.
Result<int> Importer::attr_as_input(const NodeCtx& c, const char* key, bool required) {
  ASSIGN_OR_RETURN(std::optional<std::vector<std::int64_t>> v, c.attrs.ints(key));
  if (!v) {
    if (required) return bad(c, fmt::format("attribute '{}' is required", key));
    return -1;
  }
  return const_i64(fmt::format("{}.{}", c.name, key), std::move(*v));
}

Result<int> Importer::new_value(const std::string& base, DType dtype, std::optional<Dims> dims) {
  Result<int> id = g_.add_value(fresh_value_name(base), dtype, std::move(dims));
  return id ? id : from_graph(id.status());
}

// ---- op families ---------------------------------------------------------------------------

// Constant nodes become initializers: the graph has no constant nodes after import.
Status Importer::constant(const NodeCtx& c) {
  RETURN_IF_ERROR(arity(c, 0, 0, 1, 1));
  const std::string out = c.n.output(0);
  if (out.empty()) return bad(c, "output 0 has no name");
  if (c.n.attribute_size() != 1)
    return bad(c, fmt::format("has {} attributes; Constant takes exactly one value attribute", c.n.attribute_size()));
  const std::string key = c.n.attribute(0).name();
  TensorData d;
  d.name = out;
  if (key == "value") {
    ASSIGN_OR_RETURN(const pb::TensorProto* t, c.attrs.tensor(key));
    ASSIGN_OR_RETURN(d, decode_tensor(*t, options_.max_tensor_bytes, fmt::format("{}: attribute 'value'", c.label)));
    d.name = out;
  } else if (key == "value_float") {
    ASSIGN_OR_RETURN(const float f, c.attrs.f(key, 0.f));
    d.f32 = {f};
  } else if (key == "value_floats") {
    ASSIGN_OR_RETURN(d.f32, c.attrs.floats(key));
    d.dims = {static_cast<std::int64_t>(d.f32.size())};
  } else if (key == "value_int") {
    ASSIGN_OR_RETURN(const std::int64_t i, c.attrs.i(key, 0));
    d.dtype = DType::i64;
    d.i64 = {i};
  } else if (key == "value_ints") {
    ASSIGN_OR_RETURN(std::optional<std::vector<std::int64_t>> v, c.attrs.ints(key));
    d.dtype = DType::i64;
    d.i64 = v.value_or(std::vector<std::int64_t>{});
    d.dims = {static_cast<std::int64_t>(d.i64.size())};
  } else if (key == "sparse_value" || key == "value_string" || key == "value_strings") {
    return unsup(c, fmt::format("attribute '{}' (sparse or string constants) is not supported", key));
  } else {
    return bad(c, fmt::format("attribute '{}' is not a Constant value attribute", key));
  }
  return add_constant(std::move(d));
}

// Conv: 2 spatial dims -> conv2d; 1 -> conv2d with a trivial H side (the runtime views
// (N, C, L) as (N, C, 1, L)); 3 or more -> conv_nd. The spatial rank comes from the weight's
// dims when known, else from kernel_shape, else from the input's rank.
Status Importer::conv(const NodeCtx& c) {
  RETURN_IF_ERROR(arity(c, 2, 3, 1, 1));
  ASSIGN_OR_RETURN(const int x, input(c, 0, "X"));
  ASSIGN_OR_RETURN(const int w, input(c, 1, "W"));
  ASSIGN_OR_RETURN(const int b, opt_input(c, 2));
  ASSIGN_OR_RETURN(const std::optional<std::vector<std::int64_t>> ks, c.attrs.ints("kernel_shape"));
  const graph::Value& wv = g_.value(w);
  std::size_t nsp = 0;
  if (wv.has_shape) {
    if (wv.dims.size() < 3)
      return bad(c, fmt::format("weight '{}' has dims {}; Conv weights are (M, C/group, k1, ...)", wv.name,
                                graph::to_string(wv.dims)));
    nsp = wv.dims.size() - 2;
  } else if (ks) {
    nsp = ks->size();
  } else if (const auto r = rank(x); r && *r >= 3) {
    nsp = static_cast<std::size_t>(*r - 2);
  } else {
    return unsup(c,
                 "the spatial rank is unknown: the weight's dims, kernel_shape and the input's rank are all missing");
  }
  if (nsp == 0) return bad(c, "attribute 'kernel_shape' is empty; Conv needs at least one spatial dim");
  RETURN_IF_ERROR(check_spatial_rank(c, x, nsp));

  std::vector<std::int64_t> kernel(nsp, -1);
  if (ks) {
    ASSIGN_OR_RETURN(kernel, window_attr(c, "kernel_shape", nsp, std::nullopt));
  }
  if (wv.has_shape)
    for (std::size_t i = 0; i < nsp; ++i) {
      const Dim& d = wv.dims[2 + i];
      if (!d.is_static()) continue;
      if (ks && kernel[i] != d.value)
        return bad(c, fmt::format("attribute 'kernel_shape' {} does not match weight '{}' dims {}", list(kernel),
                                  wv.name, graph::to_string(wv.dims)));
      kernel[i] = d.value;
    }
  ASSIGN_OR_RETURN(const std::vector<std::int64_t> strides, window_attr(c, "strides", nsp, 1));
  ASSIGN_OR_RETURN(const std::vector<std::int64_t> dilations, window_attr(c, "dilations", nsp, 1));
  ASSIGN_OR_RETURN(const std::int64_t group, c.attrs.i("group", 1));
  if (group < 1) return bad(c, fmt::format("attribute 'group' is {}; must be >= 1", group));
  ASSIGN_OR_RETURN(const std::vector<std::int64_t> p, pads(c, x, kernel, strides, dilations));
  ASSIGN_OR_RETURN(const int y, output(c, 0, DType::f32));
  std::vector<int> in{x, w};
  if (b >= 0) in.push_back(b);

  if (nsp >= 3)
    return emit(NodeOp::conv_nd, c.name, std::move(in), {y}, std::nullopt,
                {{"strides", strides}, {"pads", p}, {"dilations", dilations}, {"group", group}});
  Conv2dParams cp;
  if (nsp == 2) {
    cp.stride_h = strides[0], cp.stride_w = strides[1];
    cp.dilation_h = dilations[0], cp.dilation_w = dilations[1];
    cp.pad_top = p[0], cp.pad_left = p[1], cp.pad_bottom = p[2], cp.pad_right = p[3];
  } else {  // 1-D: everything on the W side
    cp.stride_w = strides[0], cp.dilation_w = dilations[0];
    cp.pad_left = p[0], cp.pad_right = p[1];
  }
  cp.groups = group;
  cp.has_bias = b >= 0;
  return emit(NodeOp::conv2d, c.name, std::move(in), {y}, cp);
}

// MaxPool / AveragePool: 1 or 2 spatial dims -> the 2-D registry ops; 3 or more, a MaxPool
// Indices output, or storage_order 1 (which only orders the indices) -> pool_nd.
Status Importer::pool(const NodeCtx& c, bool is_max) {
  RETURN_IF_ERROR(arity(c, 1, 1, 1, is_max ? 2 : 1));
  ASSIGN_OR_RETURN(const int x, input(c, 0, "X"));
  ASSIGN_OR_RETURN(const std::optional<std::vector<std::int64_t>> ks, c.attrs.ints("kernel_shape"));
  if (!ks || ks->empty()) return bad(c, "attribute 'kernel_shape' is required and must not be empty");
  const std::size_t nsp = ks->size();
  RETURN_IF_ERROR(check_spatial_rank(c, x, nsp));
  ASSIGN_OR_RETURN(const std::vector<std::int64_t> kernel, window_attr(c, "kernel_shape", nsp, std::nullopt));
  ASSIGN_OR_RETURN(const std::vector<std::int64_t> strides, window_attr(c, "strides", nsp, 1));
  std::vector<std::int64_t> dilations(nsp, 1);
  if (is_max) {
    ASSIGN_OR_RETURN(dilations, window_attr(c, "dilations", nsp, 1));
  } else if (c.attrs.has("dilations")) {  // AveragePool has dilations only from opset 19
    ASSIGN_OR_RETURN(const std::vector<std::int64_t> d, window_attr(c, "dilations", nsp, 1));
    if (std::any_of(d.begin(), d.end(), [](std::int64_t v) { return v != 1; }))
      return unsup(c, fmt::format("attribute 'dilations' {} on AveragePool is not supported", list(d)));
  }
  ASSIGN_OR_RETURN(const bool ceil_mode, c.attrs.flag("ceil_mode", false));
  ASSIGN_OR_RETURN(const bool count_include_pad, c.attrs.flag("count_include_pad", false));
  ASSIGN_OR_RETURN(const bool storage_order, c.attrs.flag("storage_order", false));
  ASSIGN_OR_RETURN(const std::vector<std::int64_t> p, pads(c, x, kernel, strides, dilations));
  ASSIGN_OR_RETURN(const int y, output(c, 0, DType::f32));
  const bool indices = is_max && c.n.output_size() > 1 && !c.n.output(1).empty();
  // The registry's pools take padding up to half the (dilated) window, so that every window
  // sees an element; ONNX allows more (a window of padding only), which pool_nd computes.
  bool wide_pads = false;
  for (std::size_t i = 0; i < nsp; ++i) {
    const std::int64_t e = dilations[i] * (kernel[i] - 1) + 1;
    wide_pads = wide_pads || p[i] > e / 2 || p[i + nsp] > e / 2;
  }

  if (nsp >= 3 || indices || (is_max && storage_order) || wide_pads) {
    std::vector<int> out{y};
    if (indices) {
      ASSIGN_OR_RETURN(const int i, output(c, 1, DType::i64));
      out.push_back(i);
    }
    return emit(NodeOp::pool_nd, c.name, {x}, std::move(out), std::nullopt,
                {{"mode", std::string(is_max ? "max" : "avg")},
                 {"kernel_shape", kernel},
                 {"strides", strides},
                 {"pads", p},
                 {"dilations", dilations},
                 {"ceil_mode", std::int64_t{ceil_mode}},
                 {"count_include_pad", std::int64_t{!is_max && count_include_pad}},
                 {"storage_order", std::int64_t{storage_order}}});
  }
  Pool2dParams pp;
  if (nsp == 2) {
    pp.kernel_h = kernel[0], pp.kernel_w = kernel[1];
    pp.stride_h = strides[0], pp.stride_w = strides[1];
    pp.dilation_h = dilations[0], pp.dilation_w = dilations[1];
    pp.pad_top = p[0], pp.pad_left = p[1], pp.pad_bottom = p[2], pp.pad_right = p[3];
  } else {  // 1-D: a 1-high window on the W side
    pp.kernel_h = 1, pp.kernel_w = kernel[0];
    pp.stride_h = 1, pp.stride_w = strides[0];
    pp.dilation_h = 1, pp.dilation_w = dilations[0];
    pp.pad_top = 0, pp.pad_left = p[0], pp.pad_bottom = 0, pp.pad_right = p[1];
  }
  pp.ceil_mode = ceil_mode;
  pp.count_include_pad = !is_max && count_include_pad;
  return emit(is_max ? NodeOp::maxpool2d : NodeOp::avgpool2d, c.name, {x}, {y}, pp);
}

// Inference batchnorm only: the running-statistics outputs of training mode cannot be given.
Status Importer::batchnorm(const NodeCtx& c) {
  RETURN_IF_ERROR(arity(c, 5, 5, 1, 5));
  ASSIGN_OR_RETURN(const bool training, c.attrs.flag("training_mode", false));
  if (training) return unsup(c, "training_mode=1 is not supported (inference only)");
  if (opset_ < 9) {
    ASSIGN_OR_RETURN(const std::int64_t spatial, c.attrs.i("spatial", 1));
    if (spatial == 0) return unsup(c, "spatial=0 (per-activation statistics) is not supported");
  }
  for (int i = 1; i < c.n.output_size(); ++i)
    if (used(c.n.output(i)))
      return unsup(c,
                   fmt::format("output {} ('{}') is training-mode statistics; only Y is supported", i, c.n.output(i)));
  ASSIGN_OR_RETURN(const float eps, c.attrs.f("epsilon", 1e-5f));
  std::vector<int> in;
  const char* names[] = {"X", "scale", "B", "mean", "var"};
  for (int i = 0; i < 5; ++i) {
    ASSIGN_OR_RETURN(const int v, input(c, i, names[i]));
    in.push_back(v);
  }
  ASSIGN_OR_RETURN(const int y, output(c, 0, DType::f32));
  return emit(NodeOp::batchnorm, c.name, std::move(in), {y}, BatchnormParams{eps});
}

Status Importer::unary(const NodeCtx& c, NodeOp op, std::optional<OpParams> params) {
  RETURN_IF_ERROR(arity(c, 1, 1, 1, 1));
  ASSIGN_OR_RETURN(const int x, input(c, 0, "X"));
  ASSIGN_OR_RETURN(const int y, output(c, 0, dtype(x)));
  return emit(op, c.name, {x}, {y}, std::move(params));
}

// HardSigmoid = clip(alpha * x + beta, 0, 1): a two-step elementwise chain.
Status Importer::hard_sigmoid(const NodeCtx& c) {
  ASSIGN_OR_RETURN(const float alpha, c.attrs.f("alpha", 0.2f));
  ASSIGN_OR_RETURN(const float beta, c.attrs.f("beta", 0.5f));
  ChainParams p;
  p.steps = {ChainStep::unary_step(Activation::linear(alpha, beta)), ChainStep::unary_step(Activation::clip(0.f, 1.f))};
  return unary(c, NodeOp::eltwise_chain, p);
}

// Clip: bounds are attributes before opset 11 and optional inputs from 11. Constant bounds (or
// none) make a clip op; a bound known only at run time makes max(x, min) then min(., max).
// An absent bound is infinite (the registry accepts infinite clip bounds), so an input +-inf
// stays +-inf as ONNX specifies.
Status Importer::clip(const NodeCtx& c) {
  float lo = -INFINITY, hi = INFINITY;
  int min_v = -1, max_v = -1;
  if (opset_ < 11) {
    RETURN_IF_ERROR(arity(c, 1, 1, 1, 1));
    ASSIGN_OR_RETURN(lo, c.attrs.f("min", -INFINITY));
    ASSIGN_OR_RETURN(hi, c.attrs.f("max", INFINITY));
  } else {
    RETURN_IF_ERROR(arity(c, 1, 3, 1, 1));
    ASSIGN_OR_RETURN(min_v, opt_input(c, 1));
    ASSIGN_OR_RETURN(max_v, opt_input(c, 2));
  }
  ASSIGN_OR_RETURN(const int x, input(c, 0, "input"));
  ASSIGN_OR_RETURN(const int y, output(c, 0, dtype(x)));
  const auto min_c = scalar_f32(min_v), max_c = scalar_f32(max_v);
  if ((min_v < 0 || min_c) && (max_v < 0 || max_c)) {
    if (min_c) lo = *min_c;
    if (max_c) hi = *max_c;
    if (std::isnan(lo) || std::isnan(hi))
      return unsup(c, fmt::format("a NaN clip bound ({}, {}) is not supported", lo, hi));
    // ONNX computes min(max(x, lo), hi): with lo > hi every element becomes hi.
    if (lo > hi) lo = hi;
    return emit(NodeOp::clip, c.name, {x}, {y}, UnaryParams{Activation::clip(lo, hi)});
  }
  int cur = x;
  if (min_v >= 0) {
    int out = y;
    if (max_v >= 0) {
      ASSIGN_OR_RETURN(out, new_value(c.n.output(0) + ".lower", dtype(x), broadcast(cur, min_v)));
    }
    RETURN_IF_ERROR(emit(NodeOp::max, max_v >= 0 ? fresh_node_name(c.name + "/max") : c.name, {cur, min_v}, {out}));
    cur = out;
  }
  if (max_v >= 0) RETURN_IF_ERROR(emit(NodeOp::min, c.name, {cur, max_v}, {y}));
  return Status::ok();
}

// Add, Sub, Mul, Div, Pow, and the two-input Max / Min. Before opset 7 'broadcast' with an
// explicit 'axis' aligned b at that axis, which NumPy broadcasting cannot express.
Status Importer::binary(const NodeCtx& c, NodeOp op) {
  RETURN_IF_ERROR(arity(c, 2, 2, 1, 1));
  if (opset_ < 7) {
    ASSIGN_OR_RETURN(const std::int64_t broadcast, c.attrs.i("broadcast", 0));
    if (broadcast != 0 && c.attrs.has("axis"))
      return unsup(c, "legacy broadcast=1 with an explicit 'axis' is not supported");
  }
  ASSIGN_OR_RETURN(const int a, input(c, 0, "A"));
  ASSIGN_OR_RETURN(const int b, input(c, 1, "B"));
  ASSIGN_OR_RETURN(const int y, output(c, 0, dtype(a)));
  std::optional<OpParams> p;
  if (registry_op(op)) p = BinaryParams{};
  return emit(op, c.name, {a, b}, {y}, p);
}

// Max / Min take any number of inputs in ONNX: one is the identity, more a left-to-right
// chain of the two-operand host op (NumPy broadcasting at every step gives ONNX's result).
Status Importer::variadic(const NodeCtx& c, NodeOp op) {
  RETURN_IF_ERROR(arity(c, 1, INT_MAX, 1, 1));
  ASSIGN_OR_RETURN(int cur, input(c, 0, "data_0"));
  ASSIGN_OR_RETURN(const int y, output(c, 0, dtype(cur)));
  if (c.n.input_size() == 1) return emit(NodeOp::identity, c.name, {cur}, {y});
  for (int i = 1; i < c.n.input_size(); ++i) {
    ASSIGN_OR_RETURN(const int b, input(c, i, "data_i"));
    const bool last = i + 1 == c.n.input_size();
    int out = y;
    if (!last) {
      ASSIGN_OR_RETURN(out, new_value(fmt::format("{}.partial{}", c.n.output(0), i), dtype(cur), broadcast(cur, b)));
    }
    RETURN_IF_ERROR(emit(op, last ? c.name : fresh_node_name(fmt::format("{}/{}", c.name, i)), {cur, b}, {out}));
    cur = out;
  }
  return Status::ok();
}

// Gemm: y = alpha * op(A) op(B) + beta * C. The registry's beta accumulates into y, which is
// not ONNX's beta, so it stays 0 and C (scaled by a mul node when beta != 1) is the bias.
Status Importer::gemm(const NodeCtx& c) {
  RETURN_IF_ERROR(arity(c, 2, 3, 1, 1));
  ASSIGN_OR_RETURN(const float alpha, c.attrs.f("alpha", 1.f));
  ASSIGN_OR_RETURN(const float beta, c.attrs.f("beta", 1.f));
  ASSIGN_OR_RETURN(const bool trans_a, c.attrs.flag("transA", false));
  ASSIGN_OR_RETURN(const bool trans_b, c.attrs.flag("transB", false));
  if (!std::isfinite(alpha) || !std::isfinite(beta))
    return bad(c, fmt::format("attributes alpha {} and beta {} must be finite", alpha, beta));
  ASSIGN_OR_RETURN(const int a, input(c, 0, "A"));
  ASSIGN_OR_RETURN(const int b, input(c, 1, "B"));
  ASSIGN_OR_RETURN(int bias, opt_input(c, 2));
  for (const int v : {a, b})
    if (const auto r = rank(v); r && *r != 2)
      return bad(c, fmt::format("input '{}' has rank {}; Gemm multiplies matrices", g_.value(v).name, *r));
  ASSIGN_OR_RETURN(const int y, output(c, 0, DType::f32));
  if (beta == 0.f) bias = -1;  // 0 * C contributes nothing (ONNX does not read C then)
  if (bias >= 0 && beta != 1.f) {
    ASSIGN_OR_RETURN(const int scale, const_f32(c.name + ".beta", Dims{1}, {beta}));
    const graph::Value& cv = g_.value(bias);
    ASSIGN_OR_RETURN(const int scaled, new_value(cv.name + ".scaled", DType::f32,
                                                 cv.has_shape ? std::optional<Dims>(cv.dims) : std::nullopt));
    RETURN_IF_ERROR(emit(NodeOp::mul, fresh_node_name(c.name + "/beta"), {bias, scale}, {scaled}, BinaryParams{}));
    bias = scaled;
  }
  GemmParams p;
  p.alpha = alpha;
  p.trans_a = trans_a;
  p.trans_b = trans_b;
  p.has_bias = bias >= 0;
  std::vector<int> in{a, b};
  if (bias >= 0) in.push_back(bias);
  return emit(NodeOp::gemm, c.name, std::move(in), {y}, p);
}

// Softmax from opset 13 normalizes along one axis. Before 13 it coerced x to 2-D at 'axis'
// (default 1) and normalized each row of the flattened [axis, rank) dims: that is one axis
// only when axis is the last; otherwise it is flatten -> softmax(-1) -> reshape(shape(x)).
Status Importer::softmax(const NodeCtx& c) {
  RETURN_IF_ERROR(arity(c, 1, 1, 1, 1));
  ASSIGN_OR_RETURN(const int x, input(c, 0, "input"));
  ASSIGN_OR_RETURN(const int y, output(c, 0, DType::f32));
  const std::optional<int> r = rank(x);
  ASSIGN_OR_RETURN(const std::int64_t axis, c.attrs.i("axis", opset_ >= 13 ? -1 : 1));
  RETURN_IF_ERROR(check_axis(c, "axis", axis, r));
  SoftmaxParams p;
  if (opset_ >= 13) {
    p.axis = static_cast<int>(axis);
    return emit(NodeOp::softmax, c.name, {x}, {y}, p);
  }
  const bool last = r ? (axis < 0 ? axis + *r : axis) == *r - 1 : axis == -1;
  p.axis = -1;
  if (last) return emit(NodeOp::softmax, c.name, {x}, {y}, p);

  const std::string base = c.n.output(0);
  // The 2-D view's dims when x's are static: (prod dims[0, axis), prod dims[axis, rank)).
  std::optional<Dims> flat_dims;
  const graph::Value& xv = g_.value(x);
  if (xv.has_shape && graph::all_static(xv.dims)) {
    const auto split = static_cast<std::size_t>(axis < 0 ? axis + *r : axis);
    std::int64_t rows_n = 1, cols_n = 1;
    bool ok = true;
    for (std::size_t i = 0; i < xv.dims.size(); ++i)
      ok = ok && !__builtin_mul_overflow(i < split ? rows_n : cols_n, xv.dims[i].value, i < split ? &rows_n : &cols_n);
    if (ok) flat_dims = Dims{rows_n, cols_n};
  }
  const std::optional<Dims> shape_dims = r ? std::optional<Dims>(Dims{*r}) : std::nullopt;
  ASSIGN_OR_RETURN(const int flat, new_value(base + ".flat", DType::f32, flat_dims));
  ASSIGN_OR_RETURN(const int rows, new_value(base + ".rows", DType::f32, flat_dims));
  ASSIGN_OR_RETURN(const int shape, new_value(base + ".shape", DType::i64, shape_dims));
  RETURN_IF_ERROR(
      emit(NodeOp::flatten, fresh_node_name(c.name + "/flatten"), {x}, {flat}, std::nullopt, {{"axis", axis}}));
  RETURN_IF_ERROR(emit(NodeOp::softmax, c.name, {flat}, {rows}, p));
  RETURN_IF_ERROR(emit(NodeOp::shape, fresh_node_name(c.name + "/shape"), {x}, {shape}));
  return emit(NodeOp::reshape, fresh_node_name(c.name + "/reshape"), {rows, shape}, {y}, std::nullopt,
              {{"allowzero", std::int64_t{0}}});
}

// LayerNormalization (opset 17): layernorm, plus layernorm_stats when Mean / InvStdDev are
// asked for. stash_type only picks the precision ONNX computes in; opfuse computes in f32.
Status Importer::layernorm(const NodeCtx& c) {
  RETURN_IF_ERROR(arity(c, 2, 3, 1, 3));
  ASSIGN_OR_RETURN(const int x, input(c, 0, "X"));
  ASSIGN_OR_RETURN(const int scale, input(c, 1, "Scale"));
  ASSIGN_OR_RETURN(const int b, opt_input(c, 2));
  ASSIGN_OR_RETURN(const std::int64_t axis, c.attrs.i("axis", -1));
  RETURN_IF_ERROR(check_axis(c, "axis", axis, rank(x)));
  ASSIGN_OR_RETURN(const float eps, c.attrs.f("epsilon", 1e-5f));
  ASSIGN_OR_RETURN(const int y, output(c, 0, DType::f32));
  NormParams p;
  p.axis = static_cast<int>(axis);
  p.epsilon = eps;
  p.has_bias = b >= 0;
  std::vector<int> in{x, scale};
  if (b >= 0) in.push_back(b);
  RETURN_IF_ERROR(emit(NodeOp::layernorm, c.name, std::move(in), {y}, p));

  const auto named = [&](int i) { return i < c.n.output_size() && !c.n.output(i).empty(); };
  if (!named(1) && !named(2)) return Status::ok();
  std::vector<int> stats;
  for (int i = 1; i <= 2; ++i) {
    if (named(i)) {
      ASSIGN_OR_RETURN(const int v, output(c, i, DType::f32));
      stats.push_back(v);
    } else {  // layernorm_stats always gives both
      ASSIGN_OR_RETURN(const int v, new_value(c.n.output(0) + (i == 1 ? ".mean" : ".inv_std_dev")));
      stats.push_back(v);
    }
  }
  return emit(NodeOp::layernorm_stats, fresh_node_name(c.name + "/stats"), {x}, std::move(stats), std::nullopt,
              {{"axis", axis}, {"epsilon", eps}});
}

// ReduceMean: axes is an attribute before opset 18 and an optional input from 18.
Status Importer::reduce_mean(const NodeCtx& c) {
  RETURN_IF_ERROR(arity(c, 1, opset_ >= 18 ? 2 : 1, 1, 1));
  ASSIGN_OR_RETURN(const int x, input(c, 0, "data"));
  ASSIGN_OR_RETURN(const bool keepdims, c.attrs.flag("keepdims", true));
  ASSIGN_OR_RETURN(const bool noop, c.attrs.flag("noop_with_empty_axes", false));
  int axes = -1;
  if (opset_ >= 18) {
    ASSIGN_OR_RETURN(axes, opt_input(c, 1));
  } else {
    ASSIGN_OR_RETURN(const std::optional<std::vector<std::int64_t>> a, c.attrs.ints("axes"));
    if (a && !a->empty()) {  // an empty list reduces everything, as no list does
      RETURN_IF_ERROR(check_axes(c, "axes", *a, rank(x)));
      ASSIGN_OR_RETURN(axes, attr_as_input(c, "axes", false));
    }
  }
  ASSIGN_OR_RETURN(const int y, output(c, 0, dtype(x)));
  std::vector<int> in{x};
  if (axes >= 0) in.push_back(axes);
  return emit(NodeOp::reduce_mean, c.name, std::move(in), {y}, std::nullopt,
              {{"keepdims", std::int64_t{keepdims}}, {"noop_with_empty_axes", std::int64_t{noop}}});
}

// Ops whose inputs map one to one and whose attributes (if any) the caller already knows.
Status Importer::passthrough(const NodeCtx& c, NodeOp op, int min_in, int max_in, std::map<std::string, Attr> attrs,
                             std::optional<DType> out_dtype) {
  RETURN_IF_ERROR(arity(c, min_in, max_in, 1, 1));
  std::vector<int> in;
  for (int i = 0; i < c.n.input_size(); ++i) {
    ASSIGN_OR_RETURN(const int v, i < min_in ? input(c, i, "operand") : opt_input(c, i));
    in.push_back(v);
  }
  // Where's result has the type of its second operand; everything else that of its first.
  const int like = op == NodeOp::where ? in[1] : (in.empty() ? -1 : in[0]);
  ASSIGN_OR_RETURN(const int y, output(c, 0, out_dtype.value_or(dtype(like))));
  return emit(op, c.name, std::move(in), {y}, std::nullopt, std::move(attrs));
}

Status Importer::flatten(const NodeCtx& c) {
  ASSIGN_OR_RETURN(const std::int64_t axis, c.attrs.i("axis", 1));
  if (c.n.input_size() > 0 && !c.n.input(0).empty()) {
    ASSIGN_OR_RETURN(const int x, use(c.n.input(0)));
    RETURN_IF_ERROR(check_axis(c, "axis", axis, rank(x), /*allow_end=*/true));
  }
  return passthrough(c, NodeOp::flatten, 1, 1, {{"axis", axis}});
}

Status Importer::reshape(const NodeCtx& c) {
  ASSIGN_OR_RETURN(const bool allowzero, c.attrs.flag("allowzero", false));
  return passthrough(c, NodeOp::reshape, 2, 2, {{"allowzero", std::int64_t{allowzero}}});
}

Status Importer::transpose(const NodeCtx& c) {
  RETURN_IF_ERROR(arity(c, 1, 1, 1, 1));
  ASSIGN_OR_RETURN(const int x, input(c, 0, "data"));
  ASSIGN_OR_RETURN(const std::optional<std::vector<std::int64_t>> perm, c.attrs.ints("perm"));
  std::map<std::string, Attr> attrs;
  if (perm) {
    const auto n = static_cast<std::int64_t>(perm->size());
    std::vector<bool> seen(perm->size(), false);
    for (std::int64_t v : *perm) {
      if (v < 0 || v >= n || seen[static_cast<std::size_t>(v)])
        return bad(c, fmt::format("attribute 'perm' {} is not a permutation of 0..{}", list(*perm), n - 1));
      seen[static_cast<std::size_t>(v)] = true;
    }
    if (const auto r = rank(x); r && *r != n)
      return bad(c, fmt::format("attribute 'perm' {} has {} entries; the input has rank {}", list(*perm), n, *r));
    attrs["perm"] = *perm;
  }
  ASSIGN_OR_RETURN(const int y, output(c, 0, dtype(x)));
  return emit(NodeOp::transpose, c.name, {x}, {y}, std::nullopt, std::move(attrs));
}

Status Importer::concat(const NodeCtx& c) {
  ASSIGN_OR_RETURN(const std::optional<std::int64_t> axis, c.attrs.opt_i("axis"));
  if (!axis) return bad(c, "attribute 'axis' is required");
  if (c.n.input_size() > 0 && !c.n.input(0).empty()) {
    ASSIGN_OR_RETURN(const int x, use(c.n.input(0)));
    RETURN_IF_ERROR(check_axis(c, "axis", *axis, rank(x)));
  }
  return passthrough(c, NodeOp::concat, 1, INT_MAX, {{"axis", *axis}});
}

// Gather: indices must be i64 (INT32 initializers were widened on load; a runtime INT32 input
// was refused with the graph inputs).
Status Importer::gather(const NodeCtx& c) {
  RETURN_IF_ERROR(arity(c, 2, 2, 1, 1));
  ASSIGN_OR_RETURN(const int data, input(c, 0, "data"));
  ASSIGN_OR_RETURN(const int indices, input(c, 1, "indices"));
  ASSIGN_OR_RETURN(const std::int64_t axis, c.attrs.i("axis", 0));
  RETURN_IF_ERROR(check_axis(c, "axis", axis, rank(data)));
  if (dtype(indices) != DType::i64)
    return bad(c, fmt::format("indices '{}' are {}; Gather takes INT64 (or INT32) indices", g_.value(indices).name,
                              graph::name(dtype(indices))));
  ASSIGN_OR_RETURN(const int y, output(c, 0, dtype(data)));
  return emit(NodeOp::gather, c.name, {data, indices}, {y}, std::nullopt, {{"axis", axis}});
}

// Slice: starts / ends / axes are attributes before opset 10 and inputs from 10.
Status Importer::slice(const NodeCtx& c) {
  if (opset_ >= 10) return passthrough(c, NodeOp::slice, 3, 5);
  RETURN_IF_ERROR(arity(c, 1, 1, 1, 1));
  ASSIGN_OR_RETURN(const int x, input(c, 0, "data"));
  ASSIGN_OR_RETURN(const std::optional<std::vector<std::int64_t>> starts, c.attrs.ints("starts"));
  ASSIGN_OR_RETURN(const std::optional<std::vector<std::int64_t>> ends, c.attrs.ints("ends"));
  ASSIGN_OR_RETURN(const std::optional<std::vector<std::int64_t>> axes, c.attrs.ints("axes"));
  if (!starts || !ends) return bad(c, "attributes 'starts' and 'ends' are required");
  if (starts->size() != ends->size() || (axes && axes->size() != starts->size()))
    return bad(c, fmt::format("attributes 'starts' {}, 'ends' {}{} differ in length", list(*starts), list(*ends),
                              axes ? ", 'axes' " + list(*axes) : ""));
  if (axes) RETURN_IF_ERROR(check_axes(c, "axes", *axes, rank(x)));
  std::vector<int> in{x};
  for (const char* key : {"starts", "ends", "axes"}) {
    ASSIGN_OR_RETURN(const int v, attr_as_input(c, key, false));
    if (v >= 0) in.push_back(v);
  }
  ASSIGN_OR_RETURN(const int y, output(c, 0, dtype(x)));
  return emit(NodeOp::slice, c.name, std::move(in), {y});
}

// Squeeze / Unsqueeze: axes is an attribute before opset 13 and an input from 13.
Status Importer::squeeze(const NodeCtx& c, bool un) {
  const NodeOp op = un ? NodeOp::unsqueeze : NodeOp::squeeze;
  if (opset_ >= 13) return passthrough(c, op, un ? 2 : 1, 2);
  RETURN_IF_ERROR(arity(c, 1, 1, 1, 1));
  ASSIGN_OR_RETURN(const int x, input(c, 0, "data"));
  ASSIGN_OR_RETURN(const std::optional<std::vector<std::int64_t>> list_, c.attrs.ints("axes"));
  if (list_) {  // Unsqueeze's axes index the output, whose rank grows by one per axis
    std::optional<int> r = rank(x);
    if (r && un) *r += static_cast<int>(list_->size());
    RETURN_IF_ERROR(check_axes(c, "axes", *list_, r));
  }
  ASSIGN_OR_RETURN(const int axes, attr_as_input(c, "axes", un));
  ASSIGN_OR_RETURN(const int y, output(c, 0, dtype(x)));
  std::vector<int> in{x};
  if (axes >= 0) in.push_back(axes);
  return emit(op, c.name, std::move(in), {y});
}

// Split: sizes are the 'split' attribute before opset 13, an optional input from 13; opset 18
// adds num_outputs, whose uneven case (the last chunk smaller) becomes explicit sizes when the
// split dim is static.
Status Importer::split(const NodeCtx& c) {
  RETURN_IF_ERROR(arity(c, 1, opset_ >= 13 ? 2 : 1, 1, INT_MAX));
  ASSIGN_OR_RETURN(const int x, input(c, 0, "input"));
  ASSIGN_OR_RETURN(const std::int64_t axis, c.attrs.i("axis", 0));
  RETURN_IF_ERROR(check_axis(c, "axis", axis, rank(x)));
  const int n_out = c.n.output_size();
  int sizes = -1;
  if (opset_ < 13) {
    ASSIGN_OR_RETURN(const std::optional<std::vector<std::int64_t>> s, c.attrs.ints("split"));
    if (s && static_cast<int>(s->size()) != n_out)
      return bad(c, fmt::format("attribute 'split' {} has {} sizes for {} outputs", list(*s), s->size(), n_out));
    if (s && std::any_of(s->begin(), s->end(), [](std::int64_t v) { return v < 0; }))
      return bad(c, fmt::format("attribute 'split' {} has a negative size", list(*s)));
    ASSIGN_OR_RETURN(sizes, attr_as_input(c, "split", false));
  } else {
    ASSIGN_OR_RETURN(sizes, opt_input(c, 1));
  }
  ASSIGN_OR_RETURN(const std::optional<std::int64_t> num_outputs, c.attrs.opt_i("num_outputs"));
  if (num_outputs && opset_ >= 18) {
    if (sizes >= 0) return bad(c, "input 'split' and attribute 'num_outputs' are mutually exclusive");
    if (*num_outputs != n_out)
      return bad(c, fmt::format("attribute 'num_outputs' is {} but the node has {} outputs", *num_outputs, n_out));
    const graph::Value& xv = g_.value(x);
    const std::optional<int> r = rank(x);
    const std::int64_t ax = r && axis < 0 ? axis + *r : axis;
    if (r && xv.dims[static_cast<std::size_t>(ax)].is_static()) {
      const std::int64_t d = xv.dims[static_cast<std::size_t>(ax)].value, chunk = d / n_out + (d % n_out != 0);
      if (d % n_out != 0) {
        std::vector<std::int64_t> s(static_cast<std::size_t>(n_out), chunk);
        std::int64_t head = 0;
        if (__builtin_mul_overflow(chunk, n_out - 1, &head) || d - head < 0)
          return bad(c, fmt::format("dim {} of size {} cannot be split into {} chunks", ax, d, n_out));
        s.back() = d - head;
        ASSIGN_OR_RETURN(sizes, const_i64(c.name + ".split", std::move(s)));
      }
    }
  }
  std::vector<int> in{x};
  if (sizes >= 0) in.push_back(sizes);
  std::vector<int> out;
  for (int i = 0; i < n_out; ++i) {
    if (c.n.output(i).empty()) {  // an unused chunk still has to land somewhere
      ASSIGN_OR_RETURN(const int v, new_value(fmt::format("{}.out{}", c.name, i), dtype(x)));
      out.push_back(v);
    } else {
      ASSIGN_OR_RETURN(const int v, output(c, i, dtype(x)));
      out.push_back(v);
    }
  }
  return emit(NodeOp::split, c.name, std::move(in), std::move(out), std::nullopt, {{"axis", axis}});
}

Status Importer::shape(const NodeCtx& c) {
  std::map<std::string, Attr> attrs;
  for (const char* key : {"start", "end"}) {
    ASSIGN_OR_RETURN(const std::optional<std::int64_t> v, c.attrs.opt_i(key));
    if (v) attrs[key] = *v;
  }
  return passthrough(c, NodeOp::shape, 1, 1, std::move(attrs), DType::i64);
}

Status Importer::cast(const NodeCtx& c) {
  ASSIGN_OR_RETURN(const std::optional<std::int64_t> to, c.attrs.opt_i("to"));
  if (!to) return bad(c, "attribute 'to' is required");
  std::string name;
  DType dt = DType::f32;
  switch (*to) {
    case pb::TensorProto::FLOAT: name = "f32", dt = DType::f32; break;
    case pb::TensorProto::INT64: name = "i64", dt = DType::i64; break;
    case pb::TensorProto::BOOL: name = "boolean", dt = DType::boolean; break;
    default:
      return unsup(c, fmt::format("Cast to {} is not supported; opfuse runs FLOAT, INT64 and BOOL tensors",
                                  elem_type_name(static_cast<std::int32_t>(*to))));
  }
  return passthrough(c, NodeOp::cast, 1, 1, {{"to", name}}, dt);
}

Status Importer::constant_of_shape(const NodeCtx& c) {
  ASSIGN_OR_RETURN(const pb::TensorProto* t, c.attrs.tensor("value"));
  if (!t) return passthrough(c, NodeOp::constant_of_shape, 1, 1, {{"value_f32", 0.f}}, DType::f32);
  if (t->data_type() != pb::TensorProto::FLOAT && t->data_type() != pb::TensorProto::INT64)
    return unsup(c, fmt::format("attribute 'value' has data type {}; opfuse fills FLOAT or INT64",
                                elem_type_name(t->data_type())));
  ASSIGN_OR_RETURN(const TensorData d,
                   decode_tensor(*t, options_.max_tensor_bytes, fmt::format("{}: attribute 'value'", c.label)));
  const std::size_t n = d.dtype == DType::f32 ? d.f32.size() : d.i64.size();
  if (n != 1) return bad(c, fmt::format("attribute 'value' holds {} elements; ConstantOfShape takes one", n));
  if (d.dtype == DType::f32)
    return passthrough(c, NodeOp::constant_of_shape, 1, 1, {{"value_f32", d.f32[0]}}, DType::f32);
  return passthrough(c, NodeOp::constant_of_shape, 1, 1, {{"value_i64", d.i64[0]}}, DType::i64);
}

// Dropout at inference is the identity of its first output. The mask output, or training mode
// switched on (or left to a runtime input), would need a random generator.
Status Importer::dropout(const NodeCtx& c) {
  RETURN_IF_ERROR(arity(c, 1, 3, 1, 2));
  if (c.n.output_size() > 1 && used(c.n.output(1)))
    return unsup(c,
                 fmt::format("output 1 ('{}', the mask) is used; only inference Dropout is supported", c.n.output(1)));
  ASSIGN_OR_RETURN(const int training, opt_input(c, 2));
  if (training >= 0) {
    const graph::Value& t = g_.value(training);
    const bool off = t.is_constant() && t.i64_data && t.i64_data->size() == 1 && t.i64_data->front() == 0;
    if (!off) return unsup(c, fmt::format("training_mode '{}' is not a constant false; inference only", t.name));
  }
  ASSIGN_OR_RETURN(const int x, input(c, 0, "data"));
  ASSIGN_OR_RETURN(const int y, output(c, 0, dtype(x)));
  return emit(NodeOp::identity, c.name, {x}, {y});
}

// ---- dispatch ------------------------------------------------------------------------------

const std::unordered_map<std::string, Importer::Handler>& Importer::handlers() {
  using I = Importer;
  using C = const NodeCtx&;
  static const auto* table = new std::unordered_map<std::string, Handler>{
      {"Constant", [](I& i, C c) { return i.constant(c); }},
      {"Conv", [](I& i, C c) { return i.conv(c); }},
      {"BatchNormalization", [](I& i, C c) { return i.batchnorm(c); }},
      {"Relu", [](I& i, C c) { return i.unary(c, NodeOp::relu, std::nullopt); }},
      {"Sigmoid", [](I& i, C c) { return i.unary(c, NodeOp::sigmoid, std::nullopt); }},
      {"Tanh", [](I& i, C c) { return i.unary(c, NodeOp::tanh, std::nullopt); }},
      {"HardSwish", [](I& i, C c) { return i.unary(c, NodeOp::hardswish, std::nullopt); }},
      {"LeakyRelu",
       [](I& i, C c) -> Status {
         ASSIGN_OR_RETURN(const float alpha, c.attrs.f("alpha", 0.01f));
         return i.unary(c, NodeOp::leaky_relu, UnaryParams{Activation::leaky_relu(alpha)});
       }},
      {"HardSigmoid", [](I& i, C c) { return i.hard_sigmoid(c); }},
      {"Clip", [](I& i, C c) { return i.clip(c); }},
      {"Add", [](I& i, C c) { return i.binary(c, NodeOp::add); }},
      {"Sub", [](I& i, C c) { return i.binary(c, NodeOp::sub); }},
      {"Mul", [](I& i, C c) { return i.binary(c, NodeOp::mul); }},
      {"Div", [](I& i, C c) { return i.binary(c, NodeOp::div); }},
      {"Pow", [](I& i, C c) { return i.binary(c, NodeOp::pow); }},
      {"Max", [](I& i, C c) { return i.variadic(c, NodeOp::max); }},
      {"Min", [](I& i, C c) { return i.variadic(c, NodeOp::min); }},
      {"Sqrt", [](I& i, C c) { return i.passthrough(c, NodeOp::sqrt, 1, 1); }},
      {"Erf", [](I& i, C c) { return i.passthrough(c, NodeOp::erf, 1, 1); }},
      {"MaxPool", [](I& i, C c) { return i.pool(c, true); }},
      {"AveragePool", [](I& i, C c) { return i.pool(c, false); }},
      {"GlobalAveragePool", [](I& i, C c) { return i.unary(c, NodeOp::global_avgpool, GlobalPoolParams{}); }},
      {"Flatten", [](I& i, C c) { return i.flatten(c); }},
      {"Gemm", [](I& i, C c) { return i.gemm(c); }},
      {"MatMul", [](I& i, C c) { return i.passthrough(c, NodeOp::matmul, 2, 2); }},
      {"Reshape", [](I& i, C c) { return i.reshape(c); }},
      {"Transpose", [](I& i, C c) { return i.transpose(c); }},
      {"Softmax", [](I& i, C c) { return i.softmax(c); }},
      {"LayerNormalization", [](I& i, C c) { return i.layernorm(c); }},
      {"ReduceMean", [](I& i, C c) { return i.reduce_mean(c); }},
      {"Shape", [](I& i, C c) { return i.shape(c); }},
      {"Gather", [](I& i, C c) { return i.gather(c); }},
      {"Slice", [](I& i, C c) { return i.slice(c); }},
      {"Concat", [](I& i, C c) { return i.concat(c); }},
      {"Unsqueeze", [](I& i, C c) { return i.squeeze(c, true); }},
      {"Squeeze", [](I& i, C c) { return i.squeeze(c, false); }},
      {"Identity", [](I& i, C c) { return i.passthrough(c, NodeOp::identity, 1, 1); }},
      {"Cast", [](I& i, C c) { return i.cast(c); }},
      {"Expand", [](I& i, C c) { return i.passthrough(c, NodeOp::expand, 2, 2); }},
      {"Where", [](I& i, C c) { return i.passthrough(c, NodeOp::where, 3, 3); }},
      {"Equal", [](I& i, C c) { return i.passthrough(c, NodeOp::equal, 2, 2, {}, DType::boolean); }},
      {"Split", [](I& i, C c) { return i.split(c); }},
      {"ConstantOfShape", [](I& i, C c) { return i.constant_of_shape(c); }},
      {"Dropout", [](I& i, C c) { return i.dropout(c); }},
  };
  return *table;
}

bool supported_op(const std::string& op_type) { return Importer::supports(op_type); }

// The opset an op first appears in, for the ones newer than opfuse's oldest opset: a node
// using one in an older model is not ONNX at all.
std::int64_t introduced_in(const std::string& op) {
  static const std::unordered_map<std::string, std::int64_t> kSince = {
      {"HardSwish", 14}, {"LayerNormalization", 17}, {"Expand", 8}, {"Where", 9}, {"ConstantOfShape", 9}, {"Erf", 9}};
  const auto it = kSince.find(op);
  return it == kSince.end() ? 1 : it->second;
}

Status Importer::import_node(const pb::NodeProto& n, int index) {
  const std::string base = n.name().empty() ? fmt::format("{}_{}", n.op_type(), index) : n.name();
  std::string name;
  if (!n.name().empty() && !taken_nodes_.count(base)) {  // the file's own name, when it is unique
    taken_nodes_.insert(base);
    name = base;
  } else {
    name = fresh_node_name(base);
  }
  if (!n.domain().empty() && n.domain() != "ai.onnx")
    return unsupported(
        fmt::format("node '{}' ({}, domain '{}') is not supported: opfuse imports the default ONNX "
                    "domain only",
                    name, n.op_type(), n.domain()));
  const auto it = handlers().find(n.op_type());
  if (it == handlers().end())
    return unsupported(fmt::format("node '{}' ({}, opset {}) is not supported", name, n.op_type(), opset_));
  std::string label = fmt::format("node '{}' ({})", name, n.op_type());
  const NodeCtx c{n, name, label, Attrs(n, label)};
  if (const std::int64_t since = introduced_in(n.op_type()); opset_ < since)
    return bad(
        c, fmt::format("{} does not exist in opset {} (it was introduced in opset {})", n.op_type(), opset_, since));
  return it->second(*this, c);
}

Result<graph::Graph> Importer::run() {
  const pb::GraphProto& gp = model_.graph();
  g_ = graph::Graph(gp.name().empty() ? "graph" : gp.name());
  if (gp.sparse_initializer_size() > 0)
    return unsupported(fmt::format("the graph has {} sparse initializers; opfuse imports dense tensors only",
                                   gp.sparse_initializer_size()));

  // Every name the file uses, so that generated names avoid them all; and what is read.
  for (const pb::TensorProto& t : gp.initializer()) file_values_.insert(t.name());
  for (const pb::ValueInfoProto& vi : gp.input()) file_values_.insert(vi.name());
  for (const pb::ValueInfoProto& vi : gp.output()) {
    file_values_.insert(vi.name());
    consumed_.insert(vi.name());
  }
  for (const pb::ValueInfoProto& vi : gp.value_info()) file_values_.insert(vi.name());
  for (const pb::NodeProto& n : gp.node()) {
    if (!n.name().empty()) file_nodes_.insert(n.name());
    for (const std::string& s : n.input()) {
      file_values_.insert(s);
      consumed_.insert(s);
    }
    for (const std::string& s : n.output()) file_values_.insert(s);
  }
  // value_info first, so that a graph input's or output's own type wins.
  for (const pb::ValueInfoProto& vi : gp.value_info()) info_[vi.name()] = &vi;
  for (const pb::ValueInfoProto& vi : gp.output()) info_[vi.name()] = &vi;
  for (const pb::ValueInfoProto& vi : gp.input()) info_[vi.name()] = &vi;

  std::unordered_set<std::string> init_names;
  for (const pb::TensorProto& t : gp.initializer()) {
    if (t.name().empty()) return invalid("an initializer has no name");
    ASSIGN_OR_RETURN(TensorData d,
                     decode_tensor(t, options_.max_tensor_bytes, fmt::format("initializer '{}'", t.name())));
    RETURN_IF_ERROR(add_constant(std::move(d)));
    init_names.insert(t.name());
  }
  for (const pb::ValueInfoProto& vi : gp.input()) {
    if (init_names.count(vi.name())) continue;  // a weight listed as an input too: it stays a constant
    const std::string what = fmt::format("graph input '{}'", vi.name());
    if (vi.name().empty()) return invalid("a graph input has no name");
    ASSIGN_OR_RETURN(ValueType t, value_type(vi, what));
    if (!t.dtype) return invalid(fmt::format("{} has no tensor element type", what));
    Result<int> id = g_.add_input(vi.name(), *t.dtype, t.dims.value_or(Dims{}));
    if (!id) return from_graph(id.status());
    if (!t.dims) g_.value(*id).has_shape = false;  // rank unknown: bound at run time
  }
  for (int i = 0; i < gp.node_size(); ++i) RETURN_IF_ERROR(import_node(gp.node(i), i));

  std::vector<int> outputs;
  for (const pb::ValueInfoProto& vi : gp.output()) {
    if (vi.name().empty()) return invalid("a graph output has no name");
    // Checked for its element type. Its dims annotate the value like value_info does (ONNX's
    // inference writes an invalid node's negative dims here too), and opfuse derives its own.
    ASSIGN_OR_RETURN(const ValueType t, value_type(vi, fmt::format("graph output '{}'", vi.name()), true));
    (void)t;
    ASSIGN_OR_RETURN(const int id, use(vi.name()));
    outputs.push_back(id);
  }
  RETURN_IF_ERROR(from_graph(g_.set_outputs(std::move(outputs))));
  RETURN_IF_ERROR(from_graph(graph::verify(g_)));
  return std::move(g_);
}

// ---- checker and shape inference -----------------------------------------------------------

// The highest default-domain opset the linked libonnx has schemas for (17 for 1.12).
std::int64_t known_opset() {
  const auto& map = pb::OpSchemaRegistry::DomainToVersionRange::Instance().Map();
  const auto it = map.find("");
  return it == map.end() ? 0 : it->second.second;
}

Status run_checker(pb::ModelProto& model) {
  // Two rules of the 1.12 checker that valid models break, relaxed for the check only:
  //  - a model written by a newer ONNX may carry an IR version this checker refuses on
  //    principle; everything it can judge (nodes of known opsets) is judged the same at its own;
  //  - it requires a shape on every graph input and output, while the ONNX spec lets a tensor
  //    type leave its shape out (rank unknown; exporters do for dynamic outputs). Those get an
  //    empty shape while the checker runs, and lose it again before shape inference, where an
  //    empty shape would mean rank 0.
  if (model.ir_version() > pb::IR_VERSION) model.set_ir_version(pb::IR_VERSION);
  std::vector<pb::TypeProto::Tensor*> shapeless;
  pb::GraphProto* g = model.mutable_graph();
  for (auto* list : {g->mutable_input(), g->mutable_output()})
    for (pb::ValueInfoProto& vi : *list)
      if (vi.has_type() && vi.type().has_tensor_type() && !vi.type().tensor_type().has_shape())
        shapeless.push_back(vi.mutable_type()->mutable_tensor_type());
  for (pb::TypeProto::Tensor* t : shapeless) t->mutable_shape();
  Status status;
  try {
    pb::checker::check_model(model);
  } catch (const pb::checker::ValidationError& e) {
    status = invalid(fmt::format("model check failed: {}", e.what()));
  } catch (const std::bad_alloc&) {
    throw;
  } catch (const std::exception& e) {  // the checker's helpers throw their own kinds too
    status = invalid(fmt::format("model check failed: {}", e.what()));
  }
  for (pb::TypeProto::Tensor* t : shapeless) t->clear_shape();
  return status;
}

// ---- the inference guard -------------------------------------------------------------------
//
// libonnx 1.12's shape inference is not hardened against hostile files: it divides by Conv and
// pool strides (a stride of 0 is a SIGFPE), indexes the weight's spatial dims into the input's
// shape (a weight of higher rank than the input reads past the end), indexes Gemm-6's inputs as
// matrices whatever their rank, and LayerNormalization-17 writes dims from an unchecked axis.
// Those were found by fuzzing the test models' attributes and declared dims; the other ops
// opfuse imports check their own preconditions. Inference is a crash-free convenience only if
// those preconditions hold, so before it runs, ranks are propagated through the graph with
// the simple rules of the ops opfuse imports, and inference is skipped (the import then goes on
// with the dims the file declares) when a guarded precondition fails or cannot be shown. A graph
// with any node opfuse does not import is refused later anyway and skips inference as well.
class RankGuard {
 public:
  explicit RankGuard(const pb::GraphProto& g) : g_(g) {}

  bool safe(std::int64_t opset) {
    for (const pb::TensorProto& t : g_.initializer()) {
      set(t.name(), t.dims_size());
      if (t.dims_size() == 1) length_[t.name()] = t.dims(0);
    }
    for (const auto* list : {&g_.value_info(), &g_.output(), &g_.input()})
      for (const pb::ValueInfoProto& vi : *list)
        if (vi.type().has_tensor_type() && vi.type().tensor_type().has_shape())
          declared_[vi.name()] = vi.type().tensor_type().shape().dim_size();
    for (const pb::ValueInfoProto& vi : g_.input())
      if (const auto it = declared_.find(vi.name()); it != declared_.end() && !rank_.count(vi.name()))
        set(vi.name(), it->second);
    for (const pb::NodeProto& n : g_.node())
      if (!node(n, opset)) return false;
    return consistent_;
  }

 private:
  using Rank = std::optional<int>;

  Rank rank(const std::string& v) const {
    if (const auto it = rank_.find(v); it != rank_.end()) return it->second;
    if (const auto it = declared_.find(v); it != declared_.end()) return it->second;
    return std::nullopt;
  }
  std::optional<std::int64_t> length(const std::string& v) const {
    const auto it = length_.find(v);
    return it == length_.end() ? std::nullopt : std::optional<std::int64_t>(it->second);
  }
  // A computed rank that contradicts the declared one makes inference throw (merge) at best.
  void set(const std::string& v, Rank r) {
    if (v.empty() || !r) return;
    if (const auto it = declared_.find(v); it != declared_.end() && it->second != *r) consistent_ = false;
    rank_[v] = *r;
  }
  static const pb::AttributeProto* attr(const pb::NodeProto& n, const char* key) {
    for (const pb::AttributeProto& a : n.attribute())
      if (a.name() == key) return &a;
    return nullptr;
  }
  std::string in(const pb::NodeProto& n, int i) const { return i < n.input_size() ? n.input(i) : std::string(); }

  bool node(const pb::NodeProto& n, std::int64_t opset) {
    const std::string& op = n.op_type();
    if ((!n.domain().empty() && n.domain() != "ai.onnx") || !supported_op(op)) return false;
    const Rank r0 = n.input_size() > 0 ? rank(n.input(0)) : std::nullopt;
    if (op == "Conv" || op == "MaxPool" || op == "AveragePool") {
      for (const char* key : {"strides", "dilations", "kernel_shape"})
        if (const auto* a = attr(n, key))
          for (std::int64_t v : a->ints())
            if (v < 1) return false;
      if (op == "Conv") {
        const Rank rw = rank(in(n, 1));
        if (!r0 || !rw || *r0 != *rw || *r0 < 3) return false;
      }
    }
    if (op == "Gemm" && opset < 7 && (rank(in(n, 0)) != 2 || rank(in(n, 1)) != 2)) return false;
    if (op == "LayerNormalization") {
      const auto* a = attr(n, "axis");
      const std::int64_t axis = a ? a->i() : -1;
      if (!r0 || axis < -*r0 || axis >= *r0) return false;
    }

    // Output ranks, as far as the rules below know them.
    Rank out = r0;
    const auto max_rank = [&]() -> Rank {
      int m = 0;
      for (const std::string& v : n.input()) {
        const Rank r = rank(v);
        if (!r) return std::nullopt;
        m = std::max(m, *r);
      }
      return m;
    };
    const auto axes_count = [&]() -> std::optional<std::int64_t> {
      if (const auto* a = attr(n, "axes")) return a->ints_size();
      return n.input_size() > 1 ? length(n.input(1)) : std::nullopt;
    };
    if (op == "Add" || op == "Sub" || op == "Mul" || op == "Div" || op == "Pow" || op == "Max" || op == "Min" ||
        op == "Equal" || op == "Where") {
      out = max_rank();
    } else if (op == "Flatten" || op == "Gemm") {
      out = 2;
    } else if (op == "MatMul") {
      const Rank a = r0, b = rank(in(n, 1));
      out = !a || !b ? Rank() : *a == 1 && *b == 1 ? 0 : *a == 1 ? *b - 1 : *b == 1 ? *a - 1 : std::max(*a, *b);
    } else if (op == "Shape") {
      out = 1;
      if (r0 && !attr(n, "start") && !attr(n, "end")) length_[n.output(0)] = *r0;
    } else if (op == "Gather") {
      const Rank q = rank(in(n, 1));
      out = r0 && q ? Rank(*r0 + *q - 1) : Rank();
    } else if (op == "Unsqueeze" || op == "Squeeze") {
      const auto k = axes_count();
      out = r0 && k ? Rank(static_cast<int>(*r0 + (op == "Unsqueeze" ? *k : -*k))) : Rank();
    } else if (op == "ReduceMean") {
      const auto* keep = attr(n, "keepdims");
      const auto k = axes_count();
      out = !keep || keep->i() != 0 ? r0 : r0 && k && *k > 0 ? Rank(static_cast<int>(*r0 - *k)) : Rank(0);
      if (keep && keep->i() == 0 && !k) out = std::nullopt;
    } else if (op == "Reshape" || op == "ConstantOfShape") {
      const auto len = length(in(n, op == "Reshape" ? 1 : 0));
      out = len ? Rank(static_cast<int>(*len)) : Rank();
    } else if (op == "Expand") {
      const auto len = length(in(n, 1));
      out = r0 && len ? Rank(std::max<int>(*r0, static_cast<int>(*len))) : Rank();
    } else if (op == "Constant") {
      out = std::nullopt;
      if (const auto* t = attr(n, "value")) out = t->t().dims_size();
      if (attr(n, "value_float") || attr(n, "value_int")) out = 0;
      if (attr(n, "value_floats") || attr(n, "value_ints")) out = 1;
      if (const auto* t = attr(n, "value"); t && t->t().dims_size() == 1 && n.output_size() > 0)
        length_[n.output(0)] = t->t().dims(0);
      if (const auto* a = attr(n, "value_ints"); a && n.output_size() > 0) length_[n.output(0)] = a->ints_size();
    }
    for (const std::string& o : n.output()) set(o, out);  // extra outputs (stats, indices, chunks) keep the rank

    // Lengths of 1-D shape tensors, for the Reshape / Expand / ConstantOfShape that read them:
    // the Shape -> Gather -> Unsqueeze -> Concat chains exporters build.
    if (n.output_size() == 0) return true;
    if ((op == "Identity" || op == "Cast") && length(in(n, 0))) length_[n.output(0)] = *length(in(n, 0));
    if (op == "Unsqueeze" && r0 == 0 && axes_count() == 1) length_[n.output(0)] = 1;
    if (op == "Concat") {
      std::int64_t total = 0;
      bool all = n.input_size() > 0;
      for (const std::string& v : n.input()) {
        const auto len = length(v);
        all = all && len && rank(v) == 1;
        all = all && !__builtin_add_overflow(total, *len, &total);
      }
      if (all) length_[n.output(0)] = total;
    }
    return true;
  }

  const pb::GraphProto& g_;
  std::unordered_map<std::string, int> rank_, declared_;
  std::unordered_map<std::string, std::int64_t> length_;
  bool consistent_ = true;
};

// libonnx 1.12's data propagation (the partial evaluation that resolves Shape -> Gather ->
// Reshape chains) reads its node's input types without a null check: Shape's propagator
// dereferences the type of its input, which is null when no type is known for it (the node
// that makes it failed its own inference, an error mode 0 swallows). A fuzzed Cast to an
// invalid type id in front of a Shape is a SIGSEGV inside libonnx. So inference runs twice:
// first without data propagation, which records every type it can as value_info; then, only
// if every input of every node that has a data propagator got a type, again with it. The
// second pass preloads that value_info, so no propagator sees a null type.
bool propagators_have_typed_inputs(const pb::ModelProto& model) {
  const pb::GraphProto& g = model.graph();
  std::unordered_set<std::string> typed;
  for (const auto* list : {&g.input(), &g.output(), &g.value_info()})
    for (const pb::ValueInfoProto& vi : *list)
      if (vi.type().value_case() != pb::TypeProto::VALUE_NOT_SET) typed.insert(vi.name());
  // Initializers have a type of their own from IR version 4 on (before, only through an input).
  if (model.ir_version() >= 4)
    for (const pb::TensorProto& t : g.initializer()) typed.insert(t.name());
  // Whichever of the file's opset versions libonnx picks for a node (it maps "" and "ai.onnx"
  // onto each other), a propagator at any of them counts.
  const auto propagates = [&](const pb::NodeProto& n) {
    for (const pb::OperatorSetIdProto& o : model.opset_import()) {
      if (o.version() < 1 || o.version() > INT_MAX) continue;
      const pb::OpSchema* s = pb::OpSchemaRegistry::Schema(n.op_type(), static_cast<int>(o.version()), "");
      if (s != nullptr && s->has_data_propagation_function()) return true;
    }
    return false;
  };
  for (const pb::NodeProto& n : g.node())
    if (propagates(n))
      for (const std::string& in : n.input())
        if (!in.empty() && !typed.count(in)) return false;
  return true;
}

Status run_shape_inference(pb::ModelProto& model) {
  try {
    // Node-level inference errors are skipped (error_mode 0): an op ONNX cannot infer just
    // leaves its outputs without value_info.
    pb::shape_inference::InferShapes(model, pb::OpSchemaRegistry::Instance(),
                                     pb::ShapeInferenceOptions(false, 0, false));
    // Data propagation resolves Shape -> Gather -> Reshape chains, which gives static dims to
    // many more intermediates.
    if (propagators_have_typed_inputs(model))
      pb::shape_inference::InferShapes(model, pb::OpSchemaRegistry::Instance(),
                                       pb::ShapeInferenceOptions(false, 0, true));
  } catch (const std::bad_alloc&) {
    throw;
  } catch (const std::exception& e) {
    return invalid(fmt::format("shape inference failed: {}", e.what()));
  }
  return Status::ok();
}

Result<ImportedModel> import_impl(const void* data, std::size_t size, const ImportOptions& options) {
  if (size > options.max_model_bytes)
    return invalid(fmt::format("model is {} bytes, more than max_model_bytes ({})", size, options.max_model_bytes));
  if (size > static_cast<std::size_t>(INT_MAX))
    return unsupported(fmt::format("model is {} bytes; protobuf cannot parse a message of 2 GiB or more", size));
  if (data == nullptr && size > 0) return invalid("model data is null");
  pb::ModelProto model;
  if (!model.ParseFromArray(data, static_cast<int>(size)))
    return invalid(fmt::format("cannot parse model (truncated or not an ONNX file, {} bytes)", size));
  if (!model.has_graph())
    return invalid(fmt::format("cannot parse model (no graph: truncated or not an ONNX file, {} bytes)", size));

  std::int64_t opset = -1;
  for (const pb::OperatorSetIdProto& o : model.opset_import())
    if (o.domain().empty() || o.domain() == "ai.onnx") opset = std::max(opset, o.version());
  if (opset < 0) {
    // Models of other domains only (the training optimizers, ML-only pipelines).
    std::string domains;
    for (const pb::OperatorSetIdProto& o : model.opset_import())
      domains += fmt::format("{}'{}' {}", domains.empty() ? "" : ", ", o.domain(), o.version());
    return unsupported(
        fmt::format("model imports no opset of the default ONNX domain ({}); opfuse imports opsets {} "
                    "to {} of it",
                    domains.empty() ? "no opset_import at all" : "only " + domains, kMinOpset, kMaxOpset));
  }
  if (opset < 1 || opset > kMaxOpset)
    return unsupported(
        fmt::format("opset {} is not supported (opfuse imports opsets {} to {})", opset, kMinOpset, kMaxOpset));
  if (opset < kMinOpset) {
    // Before opset 6 many ops carried legacy attributes (consumed_inputs, broadcast/axis) with
    // their own meaning. A model of those opsets is imported only when each of its ops means
    // the same at opset 1 as at 6 (legacy consumed_inputs aside).
    static const std::set<std::string> kUnchanged = {
        "GlobalAveragePool", "Identity", "MatMul", "Transpose", "Flatten", "Conv", "Relu", "Sigmoid", "Tanh"};
    for (const auto& n : model.graph().node())
      if (!kUnchanged.count(n.op_type()))
        return unsupported(
            fmt::format("opset {}: node '{}' ({}) has a pre-opset-6 definition; opfuse imports opsets "
                        "{} to {} (and, below {}, only ops whose meaning did not change)",
                        opset, n.name(), n.op_type(), kMinOpset, kMaxOpset, kMinOpset));
  }

  // libonnx's checker and inference only know the opsets it shipped with: on a newer opset they
  // would judge nodes against older schemas (ReduceMean-18's axes input against ReduceMean-13's
  // attribute) and reject valid models, so those are imported on opfuse's own checks.
  const bool known = opset <= known_opset();
  if (options.run_checker && known) RETURN_IF_ERROR(run_checker(model));
  if (options.run_shape_inference && known && RankGuard(model.graph()).safe(opset))
    RETURN_IF_ERROR(run_shape_inference(model));

  Importer importer(model, options, opset);
  ASSIGN_OR_RETURN(graph::Graph g, importer.run());
  ImportedModel out;
  out.graph = std::move(g);
  for (const pb::StringStringEntryProto& p : model.metadata_props()) out.metadata[p.key()] = p.value();
  out.opset = opset;
  out.producer = model.producer_name();
  if (!model.producer_version().empty()) out.producer += (out.producer.empty() ? "" : " ") + model.producer_version();
  return out;
}

// The whole file, refusing one larger than `limit` before reading it.
Result<std::string> read_file(const std::string& path, std::uint64_t limit, const char* limit_name) {
  std::error_code ec;
  const std::uintmax_t size = std::filesystem::file_size(path, ec);
  if (ec) return invalid(fmt::format("cannot open '{}': {}", path, ec.message()));
  if (size > limit) return invalid(fmt::format("'{}' is {} bytes, more than {} ({})", path, size, limit_name, limit));
  std::ifstream f(path, std::ios::binary);
  if (!f) return invalid(fmt::format("cannot open '{}'", path));
  std::string bytes(static_cast<std::size_t>(size), '\0');
  if (!f.read(bytes.data(), static_cast<std::streamsize>(size)))
    return invalid(fmt::format("cannot read '{}' ({} bytes expected)", path, size));
  return bytes;
}

Result<TensorData> parse_tensor_impl(const void* data, std::size_t size, std::uint64_t max_bytes) {
  if (size > static_cast<std::size_t>(INT_MAX))
    return unsupported(fmt::format("tensor is {} bytes; protobuf cannot parse a message of 2 GiB or more", size));
  if (data == nullptr && size > 0) return invalid("tensor data is null");
  pb::TensorProto t;
  if (!t.ParseFromArray(data, static_cast<int>(size)))
    return invalid(fmt::format("cannot parse tensor (truncated or not a TensorProto, {} bytes)", size));
  return decode_tensor(t, max_bytes, t.name().empty() ? std::string("tensor") : fmt::format("tensor '{}'", t.name()));
}

Status write_tensor_impl(const std::string& path, const TensorData& t) {
  std::int64_t n = 1;
  for (std::size_t i = 0; i < t.dims.size(); ++i)
    if (t.dims[i] < 0 || __builtin_mul_overflow(n, t.dims[i], &n))
      return invalid(fmt::format("tensor '{}' has invalid dims {}", t.name, list(t.dims)));
  const std::size_t have = t.dtype == DType::f32 ? t.f32.size() : t.i64.size();
  if (have != static_cast<std::size_t>(n))
    return invalid(fmt::format("tensor '{}' ({}) has dims {} ({} elements) but holds {}", t.name, graph::name(t.dtype),
                               list(t.dims), n, have));
  pb::TensorProto p;
  p.set_name(t.name);
  for (std::int64_t d : t.dims) p.add_dims(d);
  std::string raw;
  switch (t.dtype) {
    case DType::f32:
      p.set_data_type(pb::TensorProto::FLOAT);
      raw.reserve(have * sizeof(float));
      for (float v : t.f32) append_le(raw, v);
      break;
    case DType::i64:
      p.set_data_type(pb::TensorProto::INT64);
      raw.reserve(have * sizeof(std::int64_t));
      for (std::int64_t v : t.i64) append_le(raw, v);
      break;
    case DType::boolean:
      p.set_data_type(pb::TensorProto::BOOL);
      for (std::int64_t v : t.i64) {
        if (v != 0 && v != 1) return invalid(fmt::format("tensor '{}' is bool but holds {}", t.name, v));
        raw.push_back(static_cast<char>(v));
      }
      break;
  }
  p.set_raw_data(std::move(raw));
  std::string bytes;
  if (!p.SerializeToString(&bytes)) return invalid(fmt::format("tensor '{}' cannot be serialized", t.name));
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  if (!f) return invalid(fmt::format("cannot open '{}' for writing", path));
  if (!f.write(bytes.data(), static_cast<std::streamsize>(bytes.size())) || !f.flush())
    return invalid(fmt::format("cannot write '{}'", path));
  return Status::ok();
}

// Runs f, turning any exception into a Status: nothing may unwind into the caller.
template <class F>
auto guarded(const char* what, F&& f) noexcept -> decltype(f()) {
  try {
    return f();
  } catch (const std::bad_alloc&) {
    return Status(StatusCode::out_of_memory, fmt::format("onnx: out of memory while {}", what));
  } catch (const std::exception& e) {
    return Status(StatusCode::internal, fmt::format("onnx: unexpected exception while {}: {}", what, e.what()));
  } catch (...) {
    return Status(StatusCode::internal, fmt::format("onnx: unexpected exception while {}", what));
  }
}

#undef ASSIGN_OR_RETURN
#undef ASSIGN_OR_RETURN_IMPL
#undef RETURN_IF_ERROR
#undef OPFUSE_CONCAT
#undef OPFUSE_CONCAT_INNER

}  // namespace

Result<ImportedModel> import_model(const void* data, std::size_t size, const ImportOptions& options) noexcept {
  return guarded("importing a model", [&] { return import_impl(data, size, options); });
}

Result<ImportedModel> import_file(const std::string& path, const ImportOptions& options) noexcept {
  return guarded("importing a model file", [&]() -> Result<ImportedModel> {
    Result<std::string> bytes = read_file(path, options.max_model_bytes, "max_model_bytes");
    if (!bytes) return bytes.status();
    return import_impl(bytes->data(), bytes->size(), options);
  });
}

Result<TensorData> parse_tensor(const void* data, std::size_t size, std::uint64_t max_bytes) noexcept {
  return guarded("parsing a tensor", [&] { return parse_tensor_impl(data, size, max_bytes); });
}

Result<TensorData> read_tensor_file(const std::string& path, std::uint64_t max_bytes) noexcept {
  return guarded("reading a tensor file", [&]() -> Result<TensorData> {
    // The serialized form of a tensor within max_bytes can be somewhat larger than its decoded
    // payload (varint int64_data), never by more than a quarter plus a header.
    std::uint64_t limit = max_bytes + max_bytes / 4;
    if (limit < max_bytes || __builtin_add_overflow(limit, std::uint64_t{1} << 20, &limit)) limit = UINT64_MAX;
    Result<std::string> bytes = read_file(path, limit, "what max_bytes allows");
    if (!bytes) return bytes.status();
    return parse_tensor_impl(bytes->data(), bytes->size(), max_bytes);
  });
}

Status write_tensor_file(const std::string& path, const TensorData& t) noexcept {
  return guarded("writing a tensor file", [&] { return write_tensor_impl(path, t); });
}

}  // namespace opfuse::onnx
