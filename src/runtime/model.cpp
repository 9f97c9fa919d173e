// src/runtime/model.cpp - the public Model and Plan (opfuse/model.hpp).
//
// Model owns the imported graph after load-time folding (weights and whatever shape arithmetic
// the declared dims already allow). Plan owns a small cache of specializations keyed by the
// input dims: a run whose dims match the last one goes straight to its steps; a new set of dims
// copies the graph, makes the input dims static, folds the rest of the shape arithmetic, plans
// layouts and memory and prepares the kernels (executor.cpp). An i64 input whose values decide
// a shape (the 'shape' of a Reshape fed by a graph input, as in ONNX's own reshape tests) is
// part of the key by value, since the plan's dims depend on it.
//
// Threads. One mutex guards the cache, the LRU ticks and `current` (the specialization the
// latest run or output_infos looked up, which the queries describe); it is held only to look
// up, insert or evict, never while a specialization is built or a run computes. A miss builds
// outside the lock and inserts after looking again, so a thread that lost the race to build
// the same dims drops its copy and uses the winner's. Specializations are shared_ptrs: an
// evicted one lives on until the runs that hold it end. Everything a run writes is its own:
// the caller-to-model index maps are on its stack and the arena, workspace and primitives come
// from the specialization's pool of run states (executor.hpp), so runs on one Plan proceed in
// parallel.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <map>
#include <mutex>
#include <set>

#include "executor.hpp"
#include "groups.hpp"
#include "opfuse/model.hpp"
#include "opfuse/registry.hpp"
#include "runtime.hpp"
#include "src/denormal.hpp"
#include "src/graph/passes/fusion.hpp"
#include "src/onnx/builtin.hpp"
#include "src/onnx/export.hpp"
#include "src/onnx/import.hpp"

namespace opfuse {

using graph::DType;
using runtime::Specialization;
using SpecPtr = std::shared_ptr<Specialization>;

std::string_view element_type_name(ElementType t) noexcept {
  switch (t) {
    case ElementType::f32: return "f32";
    case ElementType::i64: return "i64";
    case ElementType::boolean: return "boolean";
  }
  return "?";
}

static_assert(static_cast<int>(FusionLevel::full) == static_cast<int>(graph::FusionLevel::full),
              "the public FusionLevel mirrors graph::FusionLevel");

std::string_view fusion_level_name(FusionLevel level) noexcept {
  return graph::name(static_cast<graph::FusionLevel>(level));
}

std::size_t element_size(ElementType t) noexcept { return t == ElementType::f32 ? 4 : t == ElementType::i64 ? 8 : 1; }

std::string dims_string(const std::vector<DimInfo>& dims) {
  if (dims.empty()) return "scalar";
  std::string s;
  for (std::size_t i = 0; i < dims.size(); ++i) {
    if (i) s += "x";
    s += dims[i].value >= 0 ? std::to_string(dims[i].value) : (dims[i].symbol.empty() ? "?" : dims[i].symbol);
  }
  return s;
}

std::int64_t TensorData::numel() const noexcept {
  std::int64_t n = 1;
  for (std::int64_t d : dims) n *= d;
  return n;
}
const void* TensorData::data() const noexcept {
  return type == ElementType::f32   ? static_cast<const void*>(f32.data())
         : type == ElementType::i64 ? static_cast<const void*>(i64.data())
                                    : static_cast<const void*>(boolean.data());
}
TensorRef TensorData::ref() const { return TensorRef{name, type, dims, data()}; }

namespace {

ElementType element_type(DType d) {
  return d == DType::f32 ? ElementType::f32 : d == DType::i64 ? ElementType::i64 : ElementType::boolean;
}

}  // namespace

Result<TensorData> read_tensor_file(const std::string& path) noexcept {
  try {
    auto t = onnx::read_tensor_file(path);
    if (!t) return Status(t.status().code(), fmt::format("{}: {}", path, t.status().message()));
    TensorData d;
    d.name = t->name;
    d.type = element_type(t->dtype);
    d.dims = t->dims;
    if (d.type == ElementType::f32) d.f32 = std::move(t->f32);
    if (d.type == ElementType::i64) d.i64 = std::move(t->i64);
    if (d.type == ElementType::boolean)
      for (std::int64_t v : t->i64) d.boolean.push_back(v != 0);
    return d;
  } catch (const std::bad_alloc&) {
    return Status(StatusCode::out_of_memory, fmt::format("out of memory reading '{}'", path));
  }
}

Status write_tensor_file(const std::string& path, const TensorData& d) noexcept {
  try {
    onnx::TensorData t;
    t.name = d.name;
    t.dtype = d.type == ElementType::f32 ? DType::f32 : d.type == ElementType::i64 ? DType::i64 : DType::boolean;
    t.dims = d.dims;
    t.f32 = d.f32;
    t.i64 = d.i64;
    for (std::uint8_t b : d.boolean) t.i64.push_back(b);
    return onnx::write_tensor_file(path, t);
  } catch (const std::bad_alloc&) {
    return {StatusCode::out_of_memory, fmt::format("out of memory writing '{}'", path)};
  }
}

namespace {

ValueInfo info_of(const graph::Value& v) {
  ValueInfo i;
  i.name = v.name;
  i.type = element_type(v.dtype);
  for (const graph::Dim& d : v.dims) i.dims.push_back(DimInfo{d.value, d.symbol});
  return i;
}

// Operand slots whose values decide shapes (the op contract's shape-like inputs).
bool is_shape_slot(graph::NodeOp op, std::size_t slot) {
  using graph::NodeOp;
  switch (op) {
    case NodeOp::reshape:
    case NodeOp::expand:
    case NodeOp::squeeze:
    case NodeOp::unsqueeze:
    case NodeOp::split:
    case NodeOp::reduce_mean: return slot == 1;
    case NodeOp::slice: return slot >= 1;
    case NodeOp::constant_of_shape: return slot == 0;
    default: return false;
  }
}

}  // namespace

struct Model::Impl {
  graph::Graph graph;
  std::vector<ValueInfo> inputs, outputs;
  std::map<std::string, std::string> metadata;
  std::int64_t opset = 0;
  std::vector<bool> steering;  // per graph input: its values decide shapes
};

namespace {

Status finish_load(onnx::ImportedModel im, Model::Impl* impl) {
  impl->graph = std::move(im.graph);
  impl->metadata = std::move(im.metadata);
  impl->opset = im.opset;
  runtime::FoldOptions fo;
  fo.strict = false;
  if (Status s = runtime::infer_and_fold(impl->graph, fo); !s) return s;
  if (Status s = graph::verify(impl->graph); !s) return s;
  const graph::Graph& g = impl->graph;
  for (int v : g.inputs()) impl->inputs.push_back(info_of(g.value(v)));
  for (int v : g.outputs()) impl->outputs.push_back(info_of(g.value(v)));
  // Steering inputs: walk back from every shape-like operand through producers.
  std::vector<bool> steer_value(g.values().size(), false);
  std::vector<int> stack;
  for (const graph::Node& n : g.nodes()) {
    if (n.dead) continue;
    for (std::size_t k = 0; k < n.inputs.size(); ++k)
      if (n.inputs[k] >= 0 && is_shape_slot(n.op, k)) stack.push_back(n.inputs[k]);
  }
  while (!stack.empty()) {
    const int v = stack.back();
    stack.pop_back();
    if (steer_value[static_cast<std::size_t>(v)]) continue;
    steer_value[static_cast<std::size_t>(v)] = true;
    const int p = g.value(v).producer;
    if (p < 0 || g.node(p).dead || g.node(p).op == graph::NodeOp::shape) continue;  // Shape reads dims only
    for (int in : g.node(p).inputs)
      if (in >= 0) stack.push_back(in);
  }
  for (int v : g.inputs())
    impl->steering.push_back(steer_value[static_cast<std::size_t>(v)] && g.value(v).dtype != DType::f32);
  return Status::ok();
}

}  // namespace

Result<Model> Model::load_memory(const void* data, std::size_t size, const LoadOptions& options) noexcept {
  try {
    onnx::ImportOptions io;
    io.max_model_bytes = options.max_model_bytes;
    io.max_tensor_bytes = options.max_tensor_bytes;
    auto im = onnx::import_model(data, size, io);
    if (!im) return im.status();
    auto impl = std::make_shared<Impl>();
    if (Status s = finish_load(std::move(*im), impl.get()); !s) return s;
    Model m;
    m.impl_ = std::move(impl);
    return m;
  } catch (const std::bad_alloc&) {
    return Status(StatusCode::out_of_memory, "out of memory while loading the model");
  } catch (const std::exception& e) {
    return Status(StatusCode::internal, fmt::format("loading the model failed: {}", e.what()));
  }
}

Result<Model> Model::load_file(const std::string& path, const LoadOptions& options) noexcept {
  try {
    FILE* f = std::fopen(path.c_str(), "rb");
    if (!f) return Status(StatusCode::invalid_argument, fmt::format("cannot open model file '{}'", path));
    std::string bytes;
    std::fseek(f, 0, SEEK_END);
    const long size = std::ftell(f);
    std::fseek(f, 0, SEEK_SET);
    if (size < 0 || static_cast<std::uint64_t>(size) > options.max_model_bytes) {
      std::fclose(f);
      return Status(StatusCode::invalid_argument, fmt::format("model file '{}' has {} bytes, over the limit of {}",
                                                              path, size, options.max_model_bytes));
    }
    bytes.resize(static_cast<std::size_t>(size));
    const std::size_t got = size ? std::fread(bytes.data(), 1, bytes.size(), f) : 0;
    std::fclose(f);
    if (got != bytes.size()) return Status(StatusCode::invalid_argument, fmt::format("cannot read '{}'", path));
    auto m = load_memory(bytes.data(), bytes.size(), options);
    if (!m) return Status(m.status().code(), fmt::format("{}: {}", path, m.status().message()));
    return m;
  } catch (const std::bad_alloc&) {
    return Status(StatusCode::out_of_memory, fmt::format("out of memory reading '{}'", path));
  }
}

std::vector<std::string> Model::builtin_names() {
  std::vector<std::string> v;
  for (const auto& b : onnx::builtin_models()) v.emplace_back(b.name);
  return v;
}

Result<std::string> Model::builtin_bytes(std::string_view name) noexcept { return onnx::builtin_model_bytes(name); }

Result<Model> Model::load_builtin(std::string_view name) noexcept {
  auto bytes = onnx::builtin_model_bytes(name);
  if (!bytes) return bytes.status();
  return load_memory(bytes->data(), bytes->size());
}

const std::vector<ValueInfo>& Model::inputs() const noexcept { return impl_->inputs; }
const std::vector<ValueInfo>& Model::outputs() const noexcept { return impl_->outputs; }
const std::map<std::string, std::string>& Model::metadata() const noexcept { return impl_->metadata; }
std::int64_t Model::opset() const noexcept { return impl_->opset; }
int Model::node_count() const noexcept { return impl_->graph.live_node_count(); }
std::string Model::dump_graph() const { return graph::to_string(impl_->graph); }

// ---- Plan ------------------------------------------------------------------------------------

namespace {

// For each model input (or output), the position of the caller's tensor bound to it: inline for
// the handful a model has, on the heap past that, so that matching allocates nothing. One per
// call: concurrent runs never share one.
class IndexMap {
 public:
  explicit IndexMap(std::size_t n) : n_(n) {
    if (n > small_.size()) big_.resize(n);
  }
  int& operator[](std::size_t i) noexcept { return n_ > small_.size() ? big_[i] : small_[i]; }
  int operator[](std::size_t i) const noexcept { return n_ > small_.size() ? big_[i] : small_[i]; }
  std::size_t size() const noexcept { return n_; }
  void fill(int v) noexcept {
    for (std::size_t i = 0; i < n_; ++i) (*this)[i] = v;
  }

 private:
  std::size_t n_;
  std::array<int, 16> small_{};
  std::vector<int> big_;
};

}  // namespace

struct Plan::Impl {
  Model model;
  CompileOptions options;
  mutable std::mutex mu;  // guards cache, current, tick and every Specialization::last_use
  std::vector<SpecPtr> cache;
  SpecPtr current;
  std::uint64_t tick = 0;

  Status match(std::span<const TensorRef> in, bool need_data, IndexMap& index) const;
  template <class Emit>
  bool walk_key(std::span<const TensorRef> in, const IndexMap& index, Emit emit) const;
  bool key_matches(const Specialization& sp, std::span<const TensorRef> in, const IndexMap& index) const;
  std::vector<std::int64_t> make_key(std::span<const TensorRef> in, const IndexMap& index) const;
  // The specialization for these inputs (matched into `index`), built on a miss.
  Result<SpecPtr> specialize(std::span<const TensorRef> in, const IndexMap& index);
  SpecPtr lookup(std::span<const TensorRef> in, const IndexMap& index);  // null on a miss
  SpecPtr current_spec() const {
    std::lock_guard<std::mutex> lock(mu);
    return current;
  }
};

Result<Plan> Plan::compile(const Model& model, const CompileOptions& options) noexcept {
  try {
    if (!model.impl_) return Status(StatusCode::invalid_argument, "compile: the model is empty (load failed?)");
    if (static_cast<int>(options.stage) >= kStageCount)
      return Status(StatusCode::invalid_argument,
                    fmt::format("compile: stage {} is unknown", static_cast<int>(options.stage)));
    if (options.threads < 0)
      return Status(StatusCode::invalid_argument, fmt::format("compile: threads {} must be >= 0", options.threads));
    if (static_cast<int>(options.fusion) > static_cast<int>(FusionLevel::full))
      return Status(StatusCode::invalid_argument,
                    fmt::format("compile: fusion level {} is unknown", static_cast<int>(options.fusion)));
    for (const std::string& k : options.excluded_kernels)
      if (!find_kernel(k))
        return Status(
            StatusCode::invalid_argument,
            fmt::format("compile: excluded kernel '{}' is not a registered kernel (opfuse ops lists them)", k));
    if (options.max_cached_shapes < 1)
      return Status(StatusCode::invalid_argument,
                    fmt::format("compile: max_cached_shapes {} must be >= 1", options.max_cached_shapes));
    Plan p;
    p.impl_ = std::make_shared<Impl>();
    p.impl_->model = model;
    p.impl_->options = options;
    // A model with static inputs (and no steering i64 input) is specialized now, so that a
    // compile error shows at compile and the first run is as fast as the others.
    bool all_static = true;
    for (std::size_t i = 0; i < model.inputs().size(); ++i) {
      all_static = all_static && !model.impl_->steering[i];
      for (const DimInfo& d : model.inputs()[i].dims) all_static = all_static && d.value >= 0;
    }
    if (all_static) {
      std::vector<TensorRef> refs;
      for (const ValueInfo& v : model.inputs()) {
        TensorRef r;
        r.name = v.name;
        r.type = v.type;
        for (const DimInfo& d : v.dims) r.dims.push_back(d.value);
        refs.push_back(std::move(r));
      }
      IndexMap index(refs.size());
      if (Status s = p.impl_->match(refs, false, index); !s) return s;
      auto sp = p.impl_->specialize(refs, index);
      if (!sp) return sp.status();
    }
    return p;
  } catch (const std::bad_alloc&) {
    return Status(StatusCode::out_of_memory, "out of memory while compiling");
  }
}

const Model& Plan::model() const noexcept { return impl_->model; }
const CompileOptions& Plan::options() const noexcept { return impl_->options; }

Status Plan::Impl::match(std::span<const TensorRef> in, bool need_data, IndexMap& input_index) const {
  const auto& decl = model.inputs();
  if (in.size() != decl.size())
    return {StatusCode::invalid_argument, fmt::format(
                                              "the model takes {} inputs ({}), {} given", decl.size(),
                                              [&] {
                                                std::string s;
                                                for (const auto& d : decl) s += (s.empty() ? "" : ", ") + d.name;
                                                return s;
                                              }(),
                                              in.size())};
  input_index.fill(-1);
  for (std::size_t i = 0; i < in.size(); ++i) {
    std::size_t m = i;
    if (!in[i].name.empty()) {
      m = decl.size();
      for (std::size_t j = 0; j < decl.size(); ++j)
        if (decl[j].name == in[i].name) m = j;
      if (m == decl.size())
        return {StatusCode::invalid_argument, fmt::format("the model has no input named '{}'", in[i].name)};
    }
    if (input_index[m] >= 0)
      return {StatusCode::invalid_argument, fmt::format("input '{}' is given twice", decl[m].name)};
    input_index[m] = static_cast<int>(i);
  }
  // Dims: static ones must match; a symbol takes one value across all inputs (checked against
  // the inputs before this one, so nothing is allocated on the way).
  for (std::size_t m = 0; m < decl.size(); ++m) {
    const TensorRef& t = in[static_cast<std::size_t>(input_index[m])];
    const ValueInfo& d = decl[m];
    if (t.type != d.type)
      return {StatusCode::invalid_argument, fmt::format("input '{}' is {}, the model declares {}", d.name,
                                                        element_type_name(t.type), element_type_name(d.type))};
    if (t.dims.size() != d.dims.size())
      return {StatusCode::invalid_argument,
              fmt::format("input '{}' has rank {} ({}), the model declares rank {} ({})", d.name, t.dims.size(),
                          fmt::join(t.dims, "x"), d.dims.size(), dims_string(d.dims))};
    bool empty = false;
    for (std::int64_t x : t.dims) empty = empty || x == 0;
    if (need_data && !t.data && !empty)
      return {StatusCode::invalid_argument, fmt::format("input '{}' has no data (null pointer)", d.name)};
    std::uint64_t elems = 1;
    for (std::size_t k = 0; k < t.dims.size(); ++k) {
      const std::int64_t x = t.dims[k];
      if (x < 0)
        return {StatusCode::invalid_argument, fmt::format("input '{}' dim {} is {}, must be >= 0", d.name, k, x)};
      if (__builtin_mul_overflow(elems, static_cast<std::uint64_t>(x), &elems) ||
          elems > options.memory_budget / element_size(t.type))
        return {StatusCode::out_of_memory, fmt::format("input '{}' of dims {} exceeds the memory budget of {} bytes",
                                                       d.name, fmt::join(t.dims, "x"), options.memory_budget)};
      const DimInfo& di = d.dims[k];
      if (di.value >= 0 && di.value != x)
        return {StatusCode::invalid_argument, fmt::format("input '{}' dim {} is {}, the model declares {} (dims {})",
                                                          d.name, k, x, di.value, dims_string(d.dims))};
      if (di.value >= 0 || di.symbol.empty()) continue;
      for (std::size_t m2 = 0; m2 <= m; ++m2) {
        const TensorRef& t2 = in[static_cast<std::size_t>(input_index[m2])];
        const ValueInfo& d2 = decl[m2];
        for (std::size_t k2 = 0; k2 < d2.dims.size() && k2 < t2.dims.size() && (m2 < m || k2 < k); ++k2)
          if (d2.dims[k2].value < 0 && d2.dims[k2].symbol == di.symbol && t2.dims[k2] != x)
            return {StatusCode::invalid_argument,
                    fmt::format("input '{}' dim {} ('{}') is {}, but input '{}' dim {} binds '{}' to {}", d.name, k,
                                di.symbol, x, d2.name, k2, di.symbol, t2.dims[k2])};
      }
    }
  }
  return Status::ok();
}

// The cache key of these inputs, one value at a time: per input its rank, its dims and, when
// its values decide shapes, those values. emit(v) returns false to stop early.
template <class Emit>
bool Plan::Impl::walk_key(std::span<const TensorRef> in, const IndexMap& input_index, Emit emit) const {
  for (std::size_t m = 0; m < input_index.size(); ++m) {
    const TensorRef& t = in[static_cast<std::size_t>(input_index[m])];
    if (!emit(static_cast<std::int64_t>(t.dims.size()))) return false;
    std::int64_t n = 1;
    for (std::int64_t d : t.dims) {
      if (!emit(d)) return false;
      n *= d;
    }
    if (!model.impl_->steering[m]) continue;
    for (std::int64_t i = 0; i < n; ++i)
      if (!emit(t.type == ElementType::i64 ? static_cast<const std::int64_t*>(t.data)[i]
                                           : static_cast<const std::uint8_t*>(t.data)[i]))
        return false;
  }
  return true;
}

bool Plan::Impl::key_matches(const Specialization& sp, std::span<const TensorRef> in, const IndexMap& index) const {
  std::size_t p = 0;
  const auto& key = sp.key;
  return walk_key(in, index, [&](std::int64_t v) { return p < key.size() && key[p++] == v; }) && p == key.size();
}

std::vector<std::int64_t> Plan::Impl::make_key(std::span<const TensorRef> in, const IndexMap& index) const {
  std::vector<std::int64_t> key;
  walk_key(in, index, [&](std::int64_t v) {
    key.push_back(v);
    return true;
  });
  return key;
}

SpecPtr Plan::Impl::lookup(std::span<const TensorRef> in, const IndexMap& index) {
  std::lock_guard<std::mutex> lock(mu);
  if (current && key_matches(*current, in, index)) return current;
  for (const SpecPtr& sp : cache)
    if (key_matches(*sp, in, index)) {
      current = sp;
      current->last_use = ++tick;
      return current;
    }
  return SpecPtr();
}

Result<SpecPtr> Plan::Impl::specialize(std::span<const TensorRef> in, const IndexMap& input_index) {
  for (std::size_t m = 0; m < input_index.size(); ++m)
    if (model.impl_->steering[m] && !in[static_cast<std::size_t>(input_index[m])].data)
      return Status(
          StatusCode::invalid_argument,
          fmt::format("input '{}' decides a shape in the model, so it needs data to compile", model.inputs()[m].name));
  if (SpecPtr hit = lookup(in, input_index)) return hit;
  graph::Graph g = model.impl_->graph;
  for (std::size_t m = 0; m < input_index.size(); ++m) {
    const TensorRef& t = in[static_cast<std::size_t>(input_index[m])];
    graph::Value& v = g.value(g.inputs()[m]);
    v.dims.clear();
    for (std::int64_t d : t.dims) v.dims.emplace_back(d);
    v.has_shape = true;
    if (model.impl_->steering[m]) {
      // Its values decide shapes: it becomes a constant of this specialization.
      std::int64_t n = 1;
      for (std::int64_t d : t.dims) n *= d;
      std::vector<std::int64_t> vals(static_cast<std::size_t>(n));
      for (std::int64_t i = 0; i < n; ++i)
        vals[static_cast<std::size_t>(i)] = t.type == ElementType::i64 ? static_cast<const std::int64_t*>(t.data)[i]
                                                                       : static_cast<const std::uint8_t*>(t.data)[i];
      // The input itself stays (it is still bound); its readers read a constant copy.
      const std::string cname = v.name + "#value";
      const graph::Dims cd = v.dims;
      const graph::DType dt = v.dtype;
      auto c = g.add_initializer(cname, cd, std::move(vals), dt);
      if (!c) return c.status();
      auto r = g.replace_all_uses(g.inputs()[m], *c);
      if (!r) return r.status();
    }
  }
  // Values whose dims came from the file's annotations are re-derived from the real input dims.
  for (graph::Value& v : const_cast<std::vector<graph::Value>&>(g.values()))
    if (v.kind == graph::ValueKind::intermediate && v.producer >= 0) v.has_shape = false;
  runtime::FoldOptions fo;
  fo.strict = true;
  fo.memory_budget = options.memory_budget;  // a value over it fails here, naming its node
  if (Status s = runtime::infer_and_fold(g, fo); !s) return s;
  // Fuse, plan the layouts, and offer each fused node to the registry at the plan's stage; a
  // fused node only the naive kernel accepts is a fallback: its last fusion is refused for its
  // origin nodes and the graph is fused again. Each round refuses at least one more (fusion,
  // node) pair, so this ends; the bound is a guard.
  std::vector<FusionFallback> fallbacks;
  std::vector<graph::FusionStats> stats;
  graph::Graph fused_graph, planned;
  for (int round = 0;; ++round) {
    planned = g;
    auto fused = graph::apply_fusions(planned, static_cast<graph::FusionLevel>(options.fusion));
    if (!fused) return fused.status();
    stats = std::move(*fused);
    runtime::remove_dead_nodes(planned);
    fused_graph = planned;
    if (Status s = runtime::plan_layouts(planned, options.stage); !s) return s;
    const auto declined = runtime::declined_fused_nodes(planned, options);
    if (declined.empty() || round >= 64) break;
    for (const runtime::Declined& d : declined) {
      const graph::Node& n = planned.node(d.node);
      FusionFallback f;
      f.pattern = n.fused_by.back();
      f.node = n.name;
      f.reason = d.reason;
      for (int o : n.origin) {
        g.node(o).refused.push_back(f.pattern);
        f.replaced.push_back(g.node(o).name);
      }
      fallbacks.push_back(std::move(f));
    }
  }
  auto sp = Specialization::build(std::move(planned), options);
  if (!sp) return sp.status();
  for (const auto& f : stats) {
    (*sp)->fusions.emplace_back(f.name, f.groups);
    (*sp)->fusion_removed.emplace_back(f.name, f.nodes_removed);
  }
  for (graph::Node& n : const_cast<std::vector<graph::Node>&>(g.nodes())) n.refused.clear();
  (*sp)->unfused_graph = std::move(g);
  (*sp)->fused_graph = std::move(fused_graph);
  (*sp)->fallbacks = std::move(fallbacks);
  (*sp)->key = make_key(in, input_index);
  SpecPtr evicted;  // freed after the lock is released (a large graph takes a while to free)
  std::lock_guard<std::mutex> lock(mu);
  // Another thread may have built these dims meanwhile: its specialization is the one cached.
  for (const SpecPtr& c : cache)
    if (key_matches(*c, in, input_index)) {
      current = c;
      current->last_use = ++tick;
      evicted = std::move(*sp);
      return current;
    }
  (*sp)->last_use = ++tick;
  if (static_cast<int>(cache.size()) >= options.max_cached_shapes) {
    auto lru = std::min_element(cache.begin(), cache.end(),
                                [](const auto& a, const auto& b) { return a->last_use < b->last_use; });
    evicted = std::move(*lru);
    cache.erase(lru);
  }
  cache.push_back(std::move(*sp));
  current = cache.back();
  return current;
}

Result<std::vector<ValueInfo>> Plan::output_infos(std::span<const TensorRef> inputs) noexcept {
  try {
    IndexMap index(impl_->model.inputs().size());
    if (Status s = impl_->match(inputs, false, index); !s) return s;
    auto sp = impl_->specialize(inputs, index);
    if (!sp) return sp.status();
    std::vector<ValueInfo> out;
    for (const auto& b : (*sp)->outputs) {
      ValueInfo v = info_of((*sp)->graph.value(b.value));
      out.push_back(std::move(v));
    }
    return out;
  } catch (const std::bad_alloc&) {
    return Status(StatusCode::out_of_memory, "out of memory while specializing");
  }
}

Status Plan::run(std::span<const TensorRef> inputs, std::span<const MutableTensorRef> outputs) noexcept {
  // FTZ + DAZ for the whole run, host ops included; the caller's MXCSR comes back at return.
  const detail::DenormalGuard denormals;
  try {
    Impl& im = *impl_;
    IndexMap input_index(im.model.inputs().size()), output_index(im.model.outputs().size());
    if (Status s = im.match(inputs, true, input_index); !s) return s;
    auto spr = im.specialize(inputs, input_index);
    if (!spr) return spr.status();
    const Specialization& sp = **spr;  // *spr keeps it alive should another run evict it
    // Outputs are checked before anything runs, so an error leaves them untouched.
    const auto& decl = im.model.outputs();
    if (outputs.size() != decl.size())
      return {StatusCode::invalid_argument,
              fmt::format("the model has {} outputs, {} buffers given", decl.size(), outputs.size())};
    for (std::size_t i = 0; i < outputs.size(); ++i) {
      std::size_t m = i;
      if (!outputs[i].name.empty()) {
        m = decl.size();
        for (std::size_t j = 0; j < decl.size(); ++j)
          if (decl[j].name == outputs[i].name) m = j;
        if (m == decl.size())
          return {StatusCode::invalid_argument, fmt::format("the model has no output named '{}'", outputs[i].name)};
      }
      output_index[i] = static_cast<int>(m);
      const runtime::Binding& b = sp.outputs[m];
      if (outputs[i].type != b.type)
        return {StatusCode::invalid_argument,
                fmt::format("output '{}' is {}, the buffer is {}", decl[m].name, element_type_name(b.type),
                            element_type_name(outputs[i].type))};
      if (outputs[i].dims != b.dims)
        return {StatusCode::invalid_argument,
                fmt::format("output '{}' has dims {} for these inputs, the buffer {}", decl[m].name,
                            fmt::join(b.dims, "x"), fmt::join(outputs[i].dims, "x"))};
      if (!outputs[i].data && b.numel > 0)
        return {StatusCode::invalid_argument, fmt::format("output '{}' buffer is a null pointer", decl[m].name)};
    }
    auto lease = sp.acquire();
    if (!lease) return lease.status();
    const runtime::RunState& rs = lease->state();
    for (std::size_t m = 0; m < sp.inputs.size(); ++m) {
      const runtime::Binding& b = sp.inputs[m];
      void* slot = rs.at(b);
      if (!slot || b.numel == 0 || sp.graph.value(b.value).is_constant()) continue;
      const TensorRef& t = inputs[static_cast<std::size_t>(input_index[m])];
      if (b.type == ElementType::boolean) {
        const auto* src = static_cast<const std::uint8_t*>(t.data);
        auto* dst = static_cast<std::int64_t*>(slot);
        for (std::int64_t i = 0; i < b.numel; ++i) dst[i] = src[i] != 0;
      } else {
        std::memcpy(slot, t.data, static_cast<std::size_t>(b.numel) * element_size(b.type));
      }
    }
    if (Status s = sp.run(rs); !s) return s;
    for (std::size_t i = 0; i < outputs.size(); ++i) {
      const runtime::Binding& b = sp.outputs[static_cast<std::size_t>(output_index[i])];
      if (b.numel == 0) continue;
      if (b.type == ElementType::boolean) {
        const auto* src = static_cast<const std::int64_t*>(rs.at(b));
        auto* dst = static_cast<std::uint8_t*>(outputs[i].data);
        for (std::int64_t k = 0; k < b.numel; ++k) dst[k] = src[k] != 0;
      } else {
        std::memcpy(outputs[i].data, rs.at(b), static_cast<std::size_t>(b.numel) * element_size(b.type));
      }
    }
    return Status::ok();
  } catch (const std::bad_alloc&) {
    return {StatusCode::out_of_memory, "out of memory while running"};
  } catch (const std::exception& e) {
    return {StatusCode::internal, fmt::format("run failed: {}", e.what())};
  }
}

Result<std::vector<TensorData>> Plan::run(std::span<const TensorRef> inputs) noexcept {
  try {
    auto infos = output_infos(inputs);
    if (!infos) return infos.status();
    std::vector<TensorData> out(infos->size());
    std::vector<MutableTensorRef> refs(infos->size());
    for (std::size_t i = 0; i < infos->size(); ++i) {
      TensorData& t = out[i];
      t.name = (*infos)[i].name;
      t.type = (*infos)[i].type;
      for (const DimInfo& d : (*infos)[i].dims) t.dims.push_back(d.value);
      const auto n = static_cast<std::size_t>(t.numel());
      if (t.type == ElementType::f32) t.f32.resize(n);
      if (t.type == ElementType::i64) t.i64.resize(n);
      if (t.type == ElementType::boolean) t.boolean.resize(n);
      refs[i] = MutableTensorRef{t.name, t.type, t.dims, const_cast<void*>(t.data())};
    }
    if (Status s = run(inputs, refs); !s) return s;
    return out;
  } catch (const std::bad_alloc&) {
    return Status(StatusCode::out_of_memory, "out of memory while running");
  }
}

// The queries read one snapshot of `current` (a shared_ptr copy under the lock): a run on
// another thread may make another specialization current meanwhile, never free this one.

std::string Plan::dump_graph() const {
  const SpecPtr sp = impl_->current_spec();
  if (!sp) return "(not specialized yet: run the plan or call output_infos first)\n";
  std::string s = graph::to_string(sp->graph);
  s += "kernels:\n";
  for (const auto& st : sp->steps) s += fmt::format("  {:<32} {}\n", sp->graph.node(st.node).name, st.kernel);
  return s;
}
int Plan::node_count() const noexcept {
  const SpecPtr sp = impl_->current_spec();
  return sp ? static_cast<int>(sp->steps.size()) : 0;
}
int Plan::kernel_launches() const noexcept {
  const SpecPtr sp = impl_->current_spec();
  if (!sp) return 0;
  int n = 0;
  for (const auto& st : sp->steps) n += st.kind != runtime::Step::Kind::alias;
  return n;
}
int Plan::layout_conversions() const noexcept {
  const SpecPtr sp = impl_->current_spec();
  if (!sp) return 0;
  int n = 0;
  for (const auto& st : sp->steps) n += st.kind == runtime::Step::Kind::convert;
  return n;
}
std::uint64_t Plan::weight_bytes() const noexcept {
  const SpecPtr sp = impl_->current_spec();
  return sp ? sp->weight_bytes : 0;
}
std::uint64_t Plan::arena_bytes() const noexcept {
  const SpecPtr sp = impl_->current_spec();
  return sp ? sp->arena_bytes : 0;
}
std::uint64_t Plan::peak_bytes() const noexcept {
  const SpecPtr sp = impl_->current_spec();
  return sp ? sp->weight_bytes + sp->arena_bytes + sp->workspace_bytes : 0;
}
double Plan::modeled_flops() const noexcept {
  const SpecPtr sp = impl_->current_spec();
  return sp ? sp->flops : 0;
}
double Plan::modeled_bytes() const noexcept {
  const SpecPtr sp = impl_->current_spec();
  return sp ? sp->bytes_moved : 0;
}
int Plan::cached_shapes() const noexcept {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return static_cast<int>(impl_->cache.size());
}
std::vector<std::pair<std::string, int>> Plan::fusions_applied() const {
  const SpecPtr sp = impl_->current_spec();
  return sp ? sp->fusions : std::vector<std::pair<std::string, int>>{};
}

std::vector<std::pair<std::string, int>> Plan::fusion_nodes_removed() const {
  const SpecPtr sp = impl_->current_spec();
  return sp ? sp->fusion_removed : std::vector<std::pair<std::string, int>>{};
}
std::vector<FusedGroup> Plan::fused_groups() const {
  std::vector<FusedGroup> out;
  const SpecPtr sp = impl_->current_spec();
  if (!sp) return out;
  for (const runtime::Group& g : runtime::fused_groups(sp->fused_graph))
    out.push_back(runtime::describe(g, sp->fused_graph, sp->unfused_graph));
  return out;
}
std::vector<FusionFallback> Plan::fallbacks() const {
  const SpecPtr sp = impl_->current_spec();
  return sp ? sp->fallbacks : std::vector<FusionFallback>{};
}
int Plan::nodes_before_fusion() const noexcept {
  const SpecPtr sp = impl_->current_spec();
  return sp ? sp->unfused_graph.live_node_count() : 0;
}
int Plan::nodes_after_fusion() const noexcept {
  const SpecPtr sp = impl_->current_spec();
  return sp ? sp->fused_graph.live_node_count() : 0;
}
std::string Plan::dump_graph_before_fusion() const {
  const SpecPtr sp = impl_->current_spec();
  if (!sp) return "(not specialized yet: run the plan or call output_infos first)\n";
  return graph::to_string(sp->unfused_graph);
}

std::string Plan::fused_graph_dot() const {
  const SpecPtr sp = impl_->current_spec();
  if (!sp) return "digraph empty {}\n";
  std::vector<graph::DotCluster> clusters;
  for (const runtime::Group& g : runtime::fused_groups(sp->fused_graph)) clusters.push_back({g.pattern, g.nodes});
  return graph::to_dot(sp->fused_graph, clusters);
}

Result<std::string> Plan::optimized_model() const noexcept {
  const SpecPtr sp = impl_->current_spec();
  if (!sp) return Status(StatusCode::invalid_argument, "optimized_model: run the plan first");
  return onnx::export_graph(sp->fused_graph, impl_->model.opset());
}

Result<std::vector<GroupCheck>> Plan::verify_fusion(std::span<const TensorRef> inputs) noexcept {
  try {
    Impl& im = *impl_;
    IndexMap input_index(im.model.inputs().size());
    if (Status s = im.match(inputs, true, input_index); !s) return s;
    auto spr = im.specialize(inputs, input_index);
    if (!spr) return spr.status();
    const Specialization& sp = **spr;
    // The graph inputs' data, by value id (booleans as bytes, like TensorData).
    std::map<int, TensorData> data;
    for (std::size_t m = 0; m < sp.unfused_graph.inputs().size(); ++m) {
      const TensorRef& t = inputs[static_cast<std::size_t>(input_index[m])];
      TensorData d;
      d.name = t.name.empty() ? im.model.inputs()[m].name : t.name;
      d.type = t.type;
      d.dims = t.dims;
      const auto n = static_cast<std::size_t>(d.numel());
      if (t.type == ElementType::f32)
        d.f32.assign(static_cast<const float*>(t.data), static_cast<const float*>(t.data) + n);
      else if (t.type == ElementType::i64)
        d.i64.assign(static_cast<const std::int64_t*>(t.data), static_cast<const std::int64_t*>(t.data) + n);
      else
        d.boolean.assign(static_cast<const std::uint8_t*>(t.data), static_cast<const std::uint8_t*>(t.data) + n);
      data[sp.unfused_graph.inputs()[m]] = std::move(d);
    }
    CompileOptions plain = im.options;
    plain.fusion = FusionLevel::none;
    return runtime::verify_groups(sp.unfused_graph, sp.fused_graph, plain, data);
  } catch (const std::bad_alloc&) {
    return Status(StatusCode::out_of_memory, "out of memory while verifying the fusion");
  } catch (const std::exception& e) {
    return Status(StatusCode::internal, fmt::format("verifying the fusion failed: {}", e.what()));
  }
}

Result<std::vector<NodeTime>> Plan::profile(int repeat) noexcept {
  try {
    const SpecPtr sp = impl_->current_spec();
    if (!sp) return Status(StatusCode::invalid_argument, "profile: run the plan first");
    // The state the last run returned: its arena holds that run's values.
    auto lease = sp->acquire();
    if (!lease) return lease.status();
    return sp->profile(lease->state(), repeat);
  } catch (const std::bad_alloc&) {
    return Status(StatusCode::out_of_memory, "out of memory while profiling");
  }
}

}  // namespace opfuse
