// src/runtime/host_ops.cpp - the host ops: shape and data-movement ops, i64 arithmetic and the
// ONNX-level compute that has no registry kernel, run naively on dense row-major buffers.
//
// The story. Every op has one shape function, <op>_shape(), that reads the node's attributes and
// inputs, checks them and derives each output's dtype and dims (plus whatever run needs: slice's
// clamped starts, conv's pads, ...). infer() and run() both call it: infer() sees TensorInfos and
// the payloads of constant inputs and collects the outputs it derives; run() sees the buffers and
// has the shape function compare its outputs against them. So there is one check path, run()
// re-validates what it reads (an index out of range is caught there, where the data is), and
// run() can size nothing wrongly. Shape functions build dims in fixed arrays (FixedDims, up to
// kHostMaxRank dims), so run() allocates nothing.
//
// The compute is the naive stage: two helpers carry every loop nest that walks tensors of any
// rank. broadcast_shapes() turns NumPy broadcasting into output dims plus, per operand, strides
// that are 0 on broadcast dims; NdIter walks an index space in row-major order and keeps strided
// offsets in step, so a transpose, a slice, an expand and a broadcast add are the same loop with
// different strides. conv_nd and pool_nd iterate output positions and kernel taps with NdIter too,
// so one loop nest covers 1-, 2- and 3-D.
#include "src/runtime/host_ops.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <limits>
#include <optional>
#include <string>
#include <string_view>

#include "src/checked.hpp"

namespace opfuse::runtime {
namespace {

using graph::DType;
using graph::Node;
using graph::NodeOp;
using I64Span = std::span<const std::int64_t>;

// The highest rank a host op accepts on any input or output (ONNX allows more than the registry's
// kMaxRank; run() needs a bound for its fixed-size index arrays).
constexpr int kHostMaxRank = 8;
using DimArray = std::array<std::int64_t, kHostMaxRank>;

constexpr std::int64_t kI64Max = std::numeric_limits<std::int64_t>::max();
constexpr std::int64_t kI64Min = std::numeric_limits<std::int64_t>::min();

// ---- messages ----------------------------------------------------------------------------------

// "transpose 'Transpose_3': perm 0,0,1 is not a permutation of 3 dims".
template <class... A>
Status bad(const Node& node, fmt::format_string<A...> format, A&&... args) {
  return Status(StatusCode::invalid_argument, fmt::format("{} '{}': {}", graph::name(node.op), node.name,
                                                          fmt::format(format, std::forward<A>(args)...)));
}

template <class... A>
Status internal(const Node& node, fmt::format_string<A...> format, A&&... args) {
  return Status(StatusCode::internal, fmt::format("{} '{}': {}", graph::name(node.op), node.name,
                                                  fmt::format(format, std::forward<A>(args)...)));
}

std::string join(I64Span v) { return v.empty() ? "[]" : fmt::format("{}", fmt::join(v, ",")); }
std::string dims_str(I64Span d) { return d.empty() ? "scalar" : fmt::format("{}", fmt::join(d, "x")); }

// ---- dims --------------------------------------------------------------------------------------

int rank_of(I64Span dims) { return static_cast<int>(dims.size()); }

// Elements of validated dims (1 for rank 0).
std::int64_t product(I64Span dims) {
  std::int64_t n = 1;
  for (const std::int64_t d : dims) n *= d;
  return n;
}

// The element count of `dims`, false when a dim is negative or the count overflows; capped so
// that the byte size of an 8-byte element fits in int64 too.
bool checked_count(I64Span dims, std::int64_t& n) {
  const std::optional<std::int64_t> c = detail::checked_numel(dims);
  n = c.value_or(0);
  return c && n <= kI64Max / 8;
}

std::size_t elem_size(DType dtype) { return dtype == DType::f32 ? sizeof(float) : sizeof(std::int64_t); }

// Row-major strides of `dims`, in elements.
DimArray dense_strides(I64Span dims) {
  DimArray s{};
  std::int64_t run = 1;
  for (int d = rank_of(dims) - 1; d >= 0; --d) {
    s[static_cast<std::size_t>(d)] = run;
    run *= dims[static_cast<std::size_t>(d)];
  }
  return s;
}

// Output dims under construction; callers check the rank against kHostMaxRank before filling.
struct FixedDims {
  int rank = 0;
  DimArray d{};
  I64Span span() const { return {d.data(), static_cast<std::size_t>(rank)}; }
};

// `what` and `index` name the tensor ("input", 1 -> "input 1"; index -1 for none); formatted only on
// error, so run() does not allocate.
Status rank_limit(const Node& node, std::string_view what, std::int64_t index, std::int64_t rank) {
  if (rank <= kHostMaxRank) return {};
  if (index < 0) return bad(node, "{} has rank {}, above the host ops' limit of {}", what, rank, kHostMaxRank);
  return bad(node, "{} {} has rank {}, above the host ops' limit of {}", what, index, rank, kHostMaxRank);
}

// `axis` in [-rank, rank) made non-negative.
Status norm_axis(const Node& node, std::string_view what, std::int64_t axis, std::int64_t rank, int& out) {
  if (axis < -rank || axis >= rank) return bad(node, "{} {} is out of range for rank {}", what, axis, rank);
  out = static_cast<int>(axis < 0 ? axis + rank : axis);
  return {};
}

// ---- the N-d index iterator ----------------------------------------------------------------------

// Walks every index of `dims` in row-major order and keeps K strided offsets in step: after
// next(), off[k] == base[k] + sum over d of idx[d] * strides[k][d]. After the last index it wraps to
// all zeros. Callers count the elements themselves (a rank-0 space has one).
template <int K>
struct NdIter {
  int rank = 0;
  DimArray dims{};
  DimArray idx{};
  std::array<DimArray, K> strides{};
  std::array<std::int64_t, K> off{};

  void next() {
    for (int d = rank - 1; d >= 0; --d) {
      const auto u = static_cast<std::size_t>(d);
      ++idx[u];
      for (int k = 0; k < K; ++k) off[static_cast<std::size_t>(k)] += strides[static_cast<std::size_t>(k)][u];
      if (idx[u] < dims[u]) return;
      for (int k = 0; k < K; ++k) off[static_cast<std::size_t>(k)] -= strides[static_cast<std::size_t>(k)][u] * dims[u];
      idx[u] = 0;
    }
  }
};

template <int K>
NdIter<K> iter_over(I64Span dims) {
  NdIter<K> it;
  it.rank = rank_of(dims);
  std::copy(dims.begin(), dims.end(), it.dims.begin());
  return it;
}

// ---- NumPy broadcasting ----------------------------------------------------------------------------

// Output dims of up to three operands broadcast together and, per operand, its strides over the
// output index space: 0 where it broadcasts (a missing leading dim or a dim of 1).
struct Broadcast {
  int rank = 0;
  DimArray dims{};
  std::array<DimArray, 3> strides{};
  I64Span span() const { return {dims.data(), static_cast<std::size_t>(rank)}; }
};

Status broadcast_shapes(const Node& node, std::span<const I64Span> shapes, Broadcast& b) {
  b = Broadcast{};
  for (const I64Span s : shapes) b.rank = std::max(b.rank, rank_of(s));
  if (Status s = rank_limit(node, "the broadcast output", -1, b.rank); !s) return s;
  std::fill(b.dims.begin(), b.dims.end(), 1);
  // Dims align on the right; each is equal to the output's or 1.
  for (const I64Span s : shapes) {
    const int lead = b.rank - rank_of(s);
    for (int j = 0; j < rank_of(s); ++j) {
      const std::int64_t d = s[static_cast<std::size_t>(j)];
      std::int64_t& o = b.dims[static_cast<std::size_t>(lead + j)];
      if (o == 1) {
        o = d;
      } else if (d != 1 && d != o) {
        std::string all;
        for (const I64Span t : shapes) all += (all.empty() ? "" : " and ") + dims_str(t);
        return bad(node, "input dims {} do not broadcast (dim {}: {} vs {})", all, lead + j - b.rank, o, d);
      }
    }
  }
  for (std::size_t k = 0; k < shapes.size(); ++k) {
    const I64Span s = shapes[k];
    const int lead = b.rank - rank_of(s);
    std::int64_t run = 1;
    for (int j = rank_of(s) - 1; j >= 0; --j) {
      const std::int64_t d = s[static_cast<std::size_t>(j)];
      b.strides[k][static_cast<std::size_t>(lead + j)] = d == 1 ? 0 : run;
      // Inputs were checked; expand's shape operand is only dims and may not fit.
      if (__builtin_mul_overflow(run, d, &run)) return bad(node, "dims {} hold too many elements", dims_str(s));
    }
  }
  return {};
}

// An iterator over the broadcast output with the first K operands' strides.
template <int K>
NdIter<K> broadcast_iter(const Broadcast& b) {
  NdIter<K> it = iter_over<K>(b.span());
  for (int k = 0; k < K; ++k) it.strides[static_cast<std::size_t>(k)] = b.strides[static_cast<std::size_t>(k)];
  return it;
}

// ---- attributes -----------------------------------------------------------------------------------

// By a linear scan with string_view keys: std::map::find would build a std::string key, and
// long keys ("count_include_pad") allocate, which run() must not.
const graph::Attr* find_attr(const Node& node, std::string_view key) {
  for (const auto& [k, v] : node.attrs)
    if (k == key) return &v;
  return nullptr;
}

Status attr_int(const Node& node, std::string_view key, std::int64_t fallback, std::int64_t& v) {
  v = fallback;
  const graph::Attr* a = find_attr(node, key);
  if (!a) return {};
  if (const auto* p = std::get_if<std::int64_t>(a)) {
    v = *p;
    return {};
  }
  return bad(node, "attribute {} must be an integer, not {}", key, graph::to_string(*a));
}

Status attr_flag(const Node& node, std::string_view key, bool fallback, bool& v) {
  std::int64_t i = 0;
  if (Status s = attr_int(node, key, fallback ? 1 : 0, i); !s) return s;
  if (i != 0 && i != 1) return bad(node, "{} {} must be 0 or 1", key, i);
  v = i == 1;
  return {};
}

Status attr_ints(const Node& node, std::string_view key, I64Span& v, bool& present) {
  v = {};
  const graph::Attr* a = find_attr(node, key);
  present = a != nullptr;
  if (!a) return {};
  if (const auto* p = std::get_if<std::vector<std::int64_t>>(a)) {
    v = *p;
    return {};
  }
  return bad(node, "attribute {} must be a list of integers, not {}", key, graph::to_string(*a));
}

Status attr_float(const Node& node, std::string_view key, float fallback, float& v, bool& present) {
  v = fallback;
  const graph::Attr* a = find_attr(node, key);
  present = a != nullptr;
  if (!a) return {};
  if (const auto* p = std::get_if<float>(a)) {
    v = *p;
    return {};
  }
  return bad(node, "attribute {} must be a float, not {}", key, graph::to_string(*a));
}

Status attr_string(const Node& node, std::string_view key, std::string_view& v, bool& present) {
  v = {};
  const graph::Attr* a = find_attr(node, key);
  present = a != nullptr;
  if (!a) return {};
  if (const auto* p = std::get_if<std::string>(a)) {
    v = *p;
    return {};
  }
  return bad(node, "attribute {} must be a string, not {}", key, graph::to_string(*a));
}

// A per-spatial-dim list (strides, dilations, kernel_shape): `n` values, each >= `min`; absent
// means all `fallback`.
Status spatial_ints(const Node& node, std::string_view key, int n, std::int64_t fallback, std::int64_t min,
                    DimArray& v) {
  I64Span a;
  bool present = false;
  if (Status s = attr_ints(node, key, a, present); !s) return s;
  std::fill(v.begin(), v.end(), fallback);
  if (!present) return {};
  if (rank_of(a) != n) return bad(node, "{} {} has {} values for {} spatial dims", key, join(a), a.size(), n);
  for (int i = 0; i < n; ++i) {
    if (a[static_cast<std::size_t>(i)] < min) return bad(node, "{} {} has a value below {}", key, join(a), min);
    v[static_cast<std::size_t>(i)] = a[static_cast<std::size_t>(i)];
  }
  return {};
}

// pads: n begins then n ends, each >= 0; absent means 0.
Status pads_attr(const Node& node, int n, DimArray& begin, DimArray& end) {
  I64Span a;
  bool present = false;
  if (Status s = attr_ints(node, "pads", a, present); !s) return s;
  begin.fill(0);
  end.fill(0);
  if (!present) return {};
  if (rank_of(a) != 2 * n)
    return bad(node, "pads {} has {} values for {} spatial dims (needs {})", join(a), a.size(), n, 2 * n);
  for (int i = 0; i < n; ++i) {
    begin[static_cast<std::size_t>(i)] = a[static_cast<std::size_t>(i)];
    end[static_cast<std::size_t>(i)] = a[static_cast<std::size_t>(n + i)];
    if (begin[static_cast<std::size_t>(i)] < 0 || end[static_cast<std::size_t>(i)] < 0)
      return bad(node, "pads {} has a negative value", join(a));
  }
  return {};
}

// ---- inputs and outputs, the same to infer() and run() -----------------------------------------------

// An input is omitted when the node's input id is -1.
class Inputs {
 public:
  Inputs(const Node& node, std::span<const TensorInfo* const> info, std::span<const HostTensor* const> constant)
      : node_(node), info_(info), constant_(constant) {}
  Inputs(const Node& node, std::span<const HostTensor> tensors) : node_(node), tensors_(tensors), running_(true) {}

  std::size_t size() const { return running_ ? tensors_.size() : info_.size(); }
  bool has(std::size_t i) const { return i < size() && i < node_.inputs.size() && node_.inputs[i] >= 0; }
  DType dtype(std::size_t i) const { return running_ ? tensors_[i].dtype : info_[i]->dtype; }
  I64Span dims(std::size_t i) const { return running_ ? I64Span(tensors_[i].dims) : I64Span(info_[i]->dims); }
  int rank(std::size_t i) const { return rank_of(dims(i)); }
  // The elements of input i: its buffer at run time; at infer time the constant payload, or
  // nullptr when the input is not a constant.
  const HostTensor* values(std::size_t i) const {
    if (!has(i)) return nullptr;
    return running_ ? &tensors_[i] : constant_[i];
  }

 private:
  const Node& node_;
  std::span<const TensorInfo* const> info_;
  std::span<const HostTensor* const> constant_;
  std::span<const HostTensor> tensors_;
  bool running_ = false;
};

// Where a shape function delivers the outputs it derives: infer() collects them (checking rank
// and size), run() checks the buffers it was handed against them.
class Outputs {
 public:
  explicit Outputs(std::vector<TensorInfo>& infos) : infos_(&infos) {}
  explicit Outputs(std::span<const HostTensor> tensors) : tensors_(tensors) {}

  Status set(const Node& node, std::size_t i, DType dtype, I64Span dims) {
    if (infos_) {
      std::int64_t n = 0;
      if (Status s = rank_limit(node, "output", static_cast<std::int64_t>(i), rank_of(dims)); !s) return s;
      if (!checked_count(dims, n)) return bad(node, "output {} dims {} hold too many elements", i, dims_str(dims));
      if (infos_->size() != i) return internal(node, "output {} derived out of order", i);
      infos_->push_back(TensorInfo{dtype, std::vector<std::int64_t>(dims.begin(), dims.end())});
      return {};
    }
    const HostTensor& t = tensors_[i];
    if (t.dtype != dtype || !std::ranges::equal(t.dims, dims))
      return internal(node, "output {} buffer is {} {}, the op gives {} {}", i, graph::name(t.dtype), dims_str(t.dims),
                      graph::name(dtype), dims_str(dims));
    return {};
  }

 private:
  std::vector<TensorInfo>* infos_ = nullptr;
  std::span<const HostTensor> tensors_;
};

// The values of shape-like input i (i64, rank 0 or 1). At infer time they must be constant.
Status shape_input(const Node& node, const Inputs& in, std::size_t i, std::string_view param, I64Span& v) {
  if (in.dtype(i) != DType::i64) return bad(node, "'{}' input must be i64, not {}", param, graph::name(in.dtype(i)));
  if (in.rank(i) > 1) return bad(node, "'{}' input must be 1-D, not {}", param, dims_str(in.dims(i)));
  const HostTensor* t = in.values(i);
  if (!t) return bad(node, "needs a constant '{}' input", param);
  v = t->numel() == 0 ? I64Span() : I64Span(t->i64(), static_cast<std::size_t>(t->numel()));
  return {};
}

Status need_dtype(const Node& node, const Inputs& in, std::size_t i, std::string_view what, DType dtype) {
  if (in.dtype(i) != dtype)
    return bad(node, "input {} ({}) must be {}, not {}", i, what, graph::name(dtype), graph::name(in.dtype(i)));
  return {};
}

// How many inputs and outputs each op takes; the first min_in inputs are required.
struct Arity {
  std::size_t min_in, max_in, min_out, max_out;
};
constexpr std::size_t kAny = 1u << 20;

Arity arity_of(NodeOp op) {
  switch (op) {
    case NodeOp::concat: return {1, kAny, 1, 1};
    case NodeOp::slice: return {3, 5, 1, 1};
    case NodeOp::squeeze: return {1, 2, 1, 1};
    case NodeOp::split: return {1, 2, 1, kAny};
    case NodeOp::reduce_mean: return {1, 2, 1, 1};
    case NodeOp::where: return {3, 3, 1, 1};
    case NodeOp::conv_nd: return {2, 3, 1, 1};
    case NodeOp::pool_nd: return {1, 1, 1, 2};
    case NodeOp::layernorm_stats: return {1, 1, 1, 2};
    case NodeOp::transpose:
    case NodeOp::flatten:
    case NodeOp::identity:
    case NodeOp::constant_of_shape:
    case NodeOp::shape:
    case NodeOp::cast:
    case NodeOp::sqrt:
    case NodeOp::erf: return {1, 1, 1, 1};
    default: return {2, 2, 1, 1};  // reshape gather unsqueeze expand pow equal min max add sub mul div
  }
}

// Counts, omitted inputs and ranks, shared by infer() and run().
Status check_arity(const Node& node, std::size_t n_in, std::size_t n_out, const Inputs& in) {
  const Arity a = arity_of(node.op);
  if (n_in != node.inputs.size()) return internal(node, "got {} inputs for the node's {}", n_in, node.inputs.size());
  if (n_out != node.outputs.size())
    return internal(node, "got {} outputs for the node's {}", n_out, node.outputs.size());
  if (n_in < a.min_in || n_in > a.max_in) {
    if (a.max_in == kAny) return bad(node, "takes at least {} inputs, not {}", a.min_in, n_in);
    if (a.min_in == a.max_in) return bad(node, "takes {} inputs, not {}", a.min_in, n_in);
    return bad(node, "takes {} to {} inputs, not {}", a.min_in, a.max_in, n_in);
  }
  if (n_out < a.min_out || n_out > a.max_out) {
    if (a.max_out == kAny) return bad(node, "needs at least {} output, not {}", a.min_out, n_out);
    if (a.min_out == a.max_out) return bad(node, "has {} output, not {}", a.min_out, n_out);
    return bad(node, "has {} to {} outputs, not {}", a.min_out, a.max_out, n_out);
  }
  const std::size_t required = a.max_in == kAny ? n_in : a.min_in;
  for (std::size_t i = 0; i < n_in; ++i) {
    if (!in.has(i)) {
      if (i < required) return bad(node, "input {} is required", i);
      continue;
    }
    std::int64_t n = 0;
    if (Status s = rank_limit(node, "input", static_cast<std::int64_t>(i), in.rank(i)); !s) return s;
    if (!checked_count(in.dims(i), n)) return bad(node, "input {} has invalid dims {}", i, dims_str(in.dims(i)));
  }
  return {};
}

// ---- shape functions and runs: data movement ---------------------------------------------------------

// Copies all of x into y (same dtype and element count: reshape, flatten, squeeze, ...).
void copy_all(const HostTensor& x, const HostTensor& y) {
  const std::int64_t n = y.numel();
  if (n > 0) std::memcpy(y.data, x.data, static_cast<std::size_t>(n) * elem_size(y.dtype));
}

// y[i] = x[it.off[0]] over y's elements in order (transpose, slice, expand).
void strided_copy(const HostTensor& x, const HostTensor& y, NdIter<1> it) {
  const std::int64_t n = y.numel();
  if (y.dtype == DType::f32) {
    for (std::int64_t i = 0; i < n; ++i, it.next()) y.f32()[i] = x.f32()[it.off[0]];
  } else {
    for (std::int64_t i = 0; i < n; ++i, it.next()) y.i64()[i] = x.i64()[it.off[0]];
  }
}

Status reshape_shape(const Node& node, const Inputs& in, Outputs& out) {
  I64Span shape;
  bool allowzero = false;
  if (Status s = shape_input(node, in, 1, "shape", shape); !s) return s;
  if (Status s = attr_flag(node, "allowzero", false, allowzero); !s) return s;
  if (Status s = rank_limit(node, "the 'shape' input", -1, rank_of(shape)); !s) return s;
  const I64Span d = in.dims(0);
  FixedDims o;
  o.rank = rank_of(shape);
  int minus_one = -1;  // where the -1 is
  bool has_zero = false;
  std::int64_t known = 1;  // product of the other dims
  for (int i = 0; i < o.rank; ++i) {
    std::int64_t v = shape[static_cast<std::size_t>(i)];
    if (v == -1) {
      if (minus_one >= 0) return bad(node, "shape {} has more than one -1", join(shape));
      minus_one = i;
      continue;
    }
    if (v < -1) return bad(node, "shape {} has a negative dim {}", join(shape), v);
    if (v == 0 && allowzero) has_zero = true;
    if (v == 0 && !allowzero) {  // 0 copies the data's dim
      if (i >= rank_of(d))
        return bad(node, "shape {} copies dim {} with a 0, but the data is {}", join(shape), i, dims_str(d));
      v = d[static_cast<std::size_t>(i)];
    }
    o.d[static_cast<std::size_t>(i)] = v;
    if (__builtin_mul_overflow(known, v, &known)) return bad(node, "shape {} overflows int64", join(shape));
  }
  if (has_zero && minus_one >= 0) return bad(node, "shape {} has both 0 and -1 with allowzero 1", join(shape));
  const std::int64_t n = product(d);
  if (minus_one >= 0) {
    if (known == 0 || n % known != 0)
      return bad(node, "shape {} cannot take the {} elements of data {}", join(shape), n, dims_str(d));
    o.d[static_cast<std::size_t>(minus_one)] = n / known;
  } else if (known != n) {
    return bad(node, "shape {} holds {} elements, data {} has {}", join(shape), known, dims_str(d), n);
  }
  return out.set(node, 0, in.dtype(0), o.span());
}

Status transpose_shape(const Node& node, const Inputs& in, Outputs& out, DimArray& perm) {
  const I64Span d = in.dims(0);
  const int r = rank_of(d);
  I64Span p;
  bool present = false;
  if (Status s = attr_ints(node, "perm", p, present); !s) return s;
  if (!present) {
    for (int i = 0; i < r; ++i) perm[static_cast<std::size_t>(i)] = r - 1 - i;  // default: reverse the dims
  } else {
    std::array<bool, kHostMaxRank> seen{};
    bool ok = rank_of(p) == r;
    for (int i = 0; ok && i < r; ++i) {
      const std::int64_t v = p[static_cast<std::size_t>(i)];
      ok = v >= 0 && v < r && !seen[static_cast<std::size_t>(v)];
      if (ok) seen[static_cast<std::size_t>(v)] = true;
      perm[static_cast<std::size_t>(i)] = v;
    }
    if (!ok) return bad(node, "perm {} is not a permutation of {} dims", join(p), r);
  }
  FixedDims o;
  o.rank = r;
  for (int i = 0; i < r; ++i)
    o.d[static_cast<std::size_t>(i)] = d[static_cast<std::size_t>(perm[static_cast<std::size_t>(i)])];
  return out.set(node, 0, in.dtype(0), o.span());
}

Status run_transpose(const Node& node, std::span<const HostTensor> in, std::span<const HostTensor> out) {
  DimArray perm{};
  Inputs ins(node, in);
  Outputs outs(out);
  if (Status s = transpose_shape(node, ins, outs, perm); !s) return s;
  // y dim i is x dim perm[i]: walking y in order steps x by x's stride of dim perm[i].
  const DimArray xs = dense_strides(in[0].dims);
  NdIter<1> it = iter_over<1>(out[0].dims);
  for (int i = 0; i < it.rank; ++i)
    it.strides[0][static_cast<std::size_t>(i)] = xs[static_cast<std::size_t>(perm[static_cast<std::size_t>(i)])];
  strided_copy(in[0], out[0], it);
  return {};
}

Status concat_shape(const Node& node, const Inputs& in, Outputs& out, int& axis) {
  std::int64_t a = 0;
  if (!find_attr(node, "axis")) return bad(node, "needs an axis attribute");
  if (Status s = attr_int(node, "axis", 0, a); !s) return s;
  const I64Span d0 = in.dims(0);
  const int r = rank_of(d0);
  if (r == 0) return bad(node, "cannot concatenate scalars (input 0 has rank 0)");
  if (Status s = norm_axis(node, "axis", a, r, axis); !s) return s;
  FixedDims o;
  o.rank = r;
  std::copy(d0.begin(), d0.end(), o.d.begin());
  o.d[static_cast<std::size_t>(axis)] = 0;
  for (std::size_t i = 0; i < in.size(); ++i) {
    const I64Span d = in.dims(i);
    if (in.dtype(i) != in.dtype(0))
      return bad(node, "input {} is {}, input 0 is {}", i, graph::name(in.dtype(i)), graph::name(in.dtype(0)));
    bool match = rank_of(d) == r;
    for (int j = 0; match && j < r; ++j)
      match = j == axis || d[static_cast<std::size_t>(j)] == d0[static_cast<std::size_t>(j)];
    if (!match)
      return bad(node, "input {} dims {} do not match input 0 dims {} outside axis {}", i, dims_str(d), dims_str(d0),
                 a);
    if (__builtin_add_overflow(o.d[static_cast<std::size_t>(axis)], d[static_cast<std::size_t>(axis)],
                               &o.d[static_cast<std::size_t>(axis)]))
      return bad(node, "axis {} sizes overflow int64", a);
  }
  return out.set(node, 0, in.dtype(0), o.span());
}

Status run_concat(const Node& node, std::span<const HostTensor> in, std::span<const HostTensor> out) {
  int axis = 0;
  Inputs ins(node, in);
  Outputs outs(out);
  if (Status s = concat_shape(node, ins, outs, axis); !s) return s;
  // Each tensor is (outer, D_i, inner) around the axis; y is (outer, sum D_i, inner).
  const I64Span yd(out[0].dims);
  const std::int64_t outer = product(yd.first(static_cast<std::size_t>(axis)));
  const std::int64_t inner = product(yd.subspan(static_cast<std::size_t>(axis) + 1));
  const std::size_t es = elem_size(out[0].dtype);
  char* dst = static_cast<char*>(out[0].data);
  for (std::int64_t o = 0; o < outer; ++o) {
    for (const HostTensor& x : in) {
      const auto block = static_cast<std::size_t>(x.dims[static_cast<std::size_t>(axis)] * inner) * es;
      if (block == 0) continue;
      std::memcpy(dst, static_cast<const char*>(x.data) + static_cast<std::size_t>(o) * block, block);
      dst += block;
    }
  }
  return {};
}

Status flatten_shape(const Node& node, const Inputs& in, Outputs& out) {
  std::int64_t axis = 0;
  if (Status s = attr_int(node, "axis", 1, axis); !s) return s;
  const I64Span d = in.dims(0);
  const std::int64_t r = rank_of(d);
  if (axis < -r || axis > r) return bad(node, "axis {} is out of range [{}, {}]", axis, -r, r);
  if (axis < 0) axis += r;
  // y is (d0 * ... * d[axis-1], d[axis] * ... * d[r-1]); axis 0 gives (1, n).
  const std::array<std::int64_t, 2> o{product(d.first(static_cast<std::size_t>(axis))),
                                      product(d.subspan(static_cast<std::size_t>(axis)))};
  return out.set(node, 0, in.dtype(0), o);
}

// Slice's per-dim start and step after ONNX's clamping (dims not sliced: start 0, step 1).
struct SliceParams {
  DimArray start{}, step{};
};

Status slice_shape(const Node& node, const Inputs& in, Outputs& out, SliceParams& p) {
  const I64Span d = in.dims(0);
  const int r = rank_of(d);
  I64Span starts, ends, axes, steps;
  if (Status s = shape_input(node, in, 1, "starts", starts); !s) return s;
  if (Status s = shape_input(node, in, 2, "ends", ends); !s) return s;
  if (in.has(3))
    if (Status s = shape_input(node, in, 3, "axes", axes); !s) return s;
  if (in.has(4))
    if (Status s = shape_input(node, in, 4, "steps", steps); !s) return s;
  if (ends.size() != starts.size())
    return bad(node, "starts {} and ends {} differ in length", join(starts), join(ends));
  if (in.has(3) && axes.size() != starts.size())
    return bad(node, "axes {} and starts {} differ in length", join(axes), join(starts));
  if (in.has(4) && steps.size() != starts.size())
    return bad(node, "steps {} and starts {} differ in length", join(steps), join(starts));
  FixedDims o;
  o.rank = r;
  std::copy(d.begin(), d.end(), o.d.begin());
  p.start.fill(0);
  p.step.fill(1);
  std::array<bool, kHostMaxRank> seen{};
  for (std::size_t i = 0; i < starts.size(); ++i) {
    int axis = 0;
    const std::int64_t a = in.has(3) ? axes[i] : static_cast<std::int64_t>(i);
    if (Status s = norm_axis(node, "axes value", a, r, axis); !s) return s;
    const auto u = static_cast<std::size_t>(axis);
    if (seen[u]) return bad(node, "axes {} repeats axis {}", join(axes), a);
    seen[u] = true;
    const std::int64_t step = in.has(4) ? steps[i] : 1;
    if (step == 0) return bad(node, "steps {} has a zero step", join(steps));
    const std::int64_t dim = d[u];
    std::int64_t start = starts[i], end = ends[i];
    if (start < 0) start += dim;  // cannot overflow: dim >= 0 > start
    if (end < 0) end += dim;
    std::int64_t count = 0;
    if (dim == 0) {
      start = 0;
    } else if (step > 0) {  // start and end clamp to [0, dim]
      start = std::clamp<std::int64_t>(start, 0, dim);
      end = std::clamp<std::int64_t>(end, 0, dim);
      count = end > start ? (end - start - 1) / step + 1 : 0;
    } else {  // start clamps to [0, dim-1], end to [-1, dim-1]
      start = std::clamp<std::int64_t>(start, 0, dim - 1);
      end = std::clamp<std::int64_t>(end, -1, dim - 1);
      const std::uint64_t magnitude = static_cast<std::uint64_t>(-(step + 1)) + 1;  // |step|, even for INT64_MIN
      count =
          start > end ? static_cast<std::int64_t>((static_cast<std::uint64_t>(start - end) - 1) / magnitude + 1) : 0;
    }
    o.d[u] = count;
    p.start[u] = count > 0 ? start : 0;
    p.step[u] = count > 1 ? step : 1;  // a huge step taken at most once never enters an offset
  }
  return out.set(node, 0, in.dtype(0), o.span());
}

Status run_slice(const Node& node, std::span<const HostTensor> in, std::span<const HostTensor> out) {
  SliceParams p;
  Inputs ins(node, in);
  Outputs outs(out);
  if (Status s = slice_shape(node, ins, outs, p); !s) return s;
  if (out[0].numel() == 0) return {};
  // y[i0, i1, ...] = x[start0 + i0*step0, start1 + i1*step1, ...].
  const DimArray xs = dense_strides(in[0].dims);
  NdIter<1> it = iter_over<1>(out[0].dims);
  for (int d = 0; d < it.rank; ++d) {
    const auto u = static_cast<std::size_t>(d);
    it.strides[0][u] = xs[u] * p.step[u];
    it.off[0] += xs[u] * p.start[u];
  }
  strided_copy(in[0], out[0], it);
  return {};
}

Status gather_shape(const Node& node, const Inputs& in, Outputs& out, int& axis) {
  std::int64_t a = 0;
  if (Status s = attr_int(node, "axis", 0, a); !s) return s;
  if (Status s = need_dtype(node, in, 1, "indices", DType::i64); !s) return s;
  const I64Span d = in.dims(0), q = in.dims(1);
  const int r = rank_of(d);
  if (r == 0) return bad(node, "data must have rank >= 1, not a scalar");
  if (Status s = norm_axis(node, "axis", a, r, axis); !s) return s;
  // y is data dims [0, axis) + indices dims + data dims (axis, r).
  if (Status s = rank_limit(node, "output", 0, r - 1 + rank_of(q)); !s) return s;
  FixedDims o;
  for (int j = 0; j < axis; ++j) o.d[static_cast<std::size_t>(o.rank++)] = d[static_cast<std::size_t>(j)];
  for (const std::int64_t v : q) o.d[static_cast<std::size_t>(o.rank++)] = v;
  for (int j = axis + 1; j < r; ++j) o.d[static_cast<std::size_t>(o.rank++)] = d[static_cast<std::size_t>(j)];
  // Indices in [-dim, dim), checked wherever they are known: constant at infer time, always at run.
  if (const HostTensor* t = in.values(1)) {
    const std::int64_t dim = d[static_cast<std::size_t>(axis)];
    for (std::int64_t i = 0; i < t->numel(); ++i) {
      const std::int64_t v = t->i64()[i];
      if (v < -dim || v >= dim)
        return bad(node, "indices value {} (element {}) is out of range for axis {} of size {}", v, i, a, dim);
    }
  }
  return out.set(node, 0, in.dtype(0), o.span());
}

Status run_gather(const Node& node, std::span<const HostTensor> in, std::span<const HostTensor> out) {
  int axis = 0;
  Inputs ins(node, in);
  Outputs outs(out);
  if (Status s = gather_shape(node, ins, outs, axis); !s) return s;
  // data is (outer, D, inner) around the axis, indices has M elements, y is (outer, M, inner).
  const I64Span d(in[0].dims);
  const std::int64_t outer = product(d.first(static_cast<std::size_t>(axis)));
  const std::int64_t D = d[static_cast<std::size_t>(axis)];
  const std::int64_t inner = product(d.subspan(static_cast<std::size_t>(axis) + 1));
  const std::int64_t M = in[1].numel();
  const std::size_t es = elem_size(out[0].dtype);
  const auto block = static_cast<std::size_t>(inner) * es;
  if (block == 0) return {};
  const char* x = static_cast<const char*>(in[0].data);
  char* y = static_cast<char*>(out[0].data);
  for (std::int64_t o = 0; o < outer; ++o) {
    for (std::int64_t m = 0; m < M; ++m) {
      std::int64_t idx = in[1].i64()[m];
      if (idx < 0) idx += D;  // in range: gather_shape checked
      std::memcpy(y + static_cast<std::size_t>(o * M + m) * block, x + static_cast<std::size_t>(o * D + idx) * block,
                  block);
    }
  }
  return {};
}

Status squeeze_shape(const Node& node, const Inputs& in, Outputs& out) {
  const I64Span d = in.dims(0);
  const int r = rank_of(d);
  I64Span axes;
  if (in.has(1))
    if (Status s = shape_input(node, in, 1, "axes", axes); !s) return s;
  std::array<bool, kHostMaxRank> drop{};
  if (axes.empty()) {  // no axes (or an empty list): every dim of size 1
    for (int j = 0; j < r; ++j) drop[static_cast<std::size_t>(j)] = d[static_cast<std::size_t>(j)] == 1;
  } else {
    for (const std::int64_t a : axes) {
      int axis = 0;
      if (Status s = norm_axis(node, "axes value", a, r, axis); !s) return s;
      if (drop[static_cast<std::size_t>(axis)]) return bad(node, "axes {} repeats axis {}", join(axes), a);
      if (d[static_cast<std::size_t>(axis)] != 1)
        return bad(node, "axes {} selects dim {} of size {}, not 1", join(axes), a, d[static_cast<std::size_t>(axis)]);
      drop[static_cast<std::size_t>(axis)] = true;
    }
  }
  FixedDims o;
  for (int j = 0; j < r; ++j)
    if (!drop[static_cast<std::size_t>(j)]) o.d[static_cast<std::size_t>(o.rank++)] = d[static_cast<std::size_t>(j)];
  return out.set(node, 0, in.dtype(0), o.span());
}

Status unsqueeze_shape(const Node& node, const Inputs& in, Outputs& out) {
  const I64Span d = in.dims(0);
  I64Span axes;
  if (Status s = shape_input(node, in, 1, "axes", axes); !s) return s;
  const std::int64_t r = rank_of(d) + rank_of(axes);  // axes index the output
  if (Status s = rank_limit(node, "output", 0, r); !s) return s;
  std::array<bool, kHostMaxRank> inserted{};
  for (const std::int64_t a : axes) {
    int axis = 0;
    if (Status s = norm_axis(node, "axes value", a, r, axis); !s) return s;
    if (inserted[static_cast<std::size_t>(axis)]) return bad(node, "axes {} repeats axis {}", join(axes), a);
    inserted[static_cast<std::size_t>(axis)] = true;
  }
  FixedDims o;
  o.rank = static_cast<int>(r);
  std::size_t next = 0;  // the data dim that fills the next non-inserted position
  for (int j = 0; j < o.rank; ++j)
    o.d[static_cast<std::size_t>(j)] = inserted[static_cast<std::size_t>(j)] ? 1 : d[next++];
  return out.set(node, 0, in.dtype(0), o.span());
}

Status split_shape(const Node& node, const Inputs& in, Outputs& out, int& axis) {
  std::int64_t a = 0;
  if (Status s = attr_int(node, "axis", 0, a); !s) return s;
  const I64Span d = in.dims(0);
  const int r = rank_of(d);
  if (r == 0) return bad(node, "cannot split a scalar");
  if (Status s = norm_axis(node, "axis", a, r, axis); !s) return s;
  const std::int64_t dim = d[static_cast<std::size_t>(axis)];
  const auto n = static_cast<std::int64_t>(node.outputs.size());
  I64Span sizes;
  std::int64_t chunk = 0, last = 0;  // the equal split: n-1 chunks, then the rest
  if (in.has(1)) {
    if (Status s = shape_input(node, in, 1, "split", sizes); !s) return s;
    if (rank_of(sizes) != n) return bad(node, "split {} has {} sizes for {} outputs", join(sizes), sizes.size(), n);
    std::int64_t sum = 0;
    for (const std::int64_t v : sizes)
      if (v < 0 || __builtin_add_overflow(sum, v, &sum)) return bad(node, "split {} has a negative size", join(sizes));
    if (sum != dim) return bad(node, "split {} sums to {}, axis {} has size {}", join(sizes), sum, a, dim);
  } else {  // ceil(dim / n) each, the last one smaller when dim does not divide (opset 18)
    chunk = dim / n + (dim % n != 0 ? 1 : 0);
    last = dim - chunk * (n - 1);
    if (last < 0) return bad(node, "axis {} of size {} cannot split into {} outputs", a, dim, n);
  }
  FixedDims o;
  o.rank = r;
  std::copy(d.begin(), d.end(), o.d.begin());
  for (std::int64_t i = 0; i < n; ++i) {
    o.d[static_cast<std::size_t>(axis)] = in.has(1) ? sizes[static_cast<std::size_t>(i)] : (i + 1 < n ? chunk : last);
    if (Status s = out.set(node, static_cast<std::size_t>(i), in.dtype(0), o.span()); !s) return s;
  }
  return {};
}

Status run_split(const Node& node, std::span<const HostTensor> in, std::span<const HostTensor> out) {
  int axis = 0;
  Inputs ins(node, in);
  Outputs outs(out);
  if (Status s = split_shape(node, ins, outs, axis); !s) return s;
  // x is (outer, D, inner) around the axis; output i is (outer, D_i, inner).
  const I64Span d(in[0].dims);
  const std::int64_t outer = product(d.first(static_cast<std::size_t>(axis)));
  const std::int64_t inner = product(d.subspan(static_cast<std::size_t>(axis) + 1));
  const std::size_t es = elem_size(in[0].dtype);
  const auto row = static_cast<std::size_t>(d[static_cast<std::size_t>(axis)] * inner) * es;  // one outer slice of x
  std::size_t at = 0;  // byte offset of output i's part within a row
  for (const HostTensor& y : out) {
    const auto block = static_cast<std::size_t>(y.dims[static_cast<std::size_t>(axis)] * inner) * es;
    for (std::int64_t o = 0; block > 0 && o < outer; ++o)
      std::memcpy(static_cast<char*>(y.data) + static_cast<std::size_t>(o) * block,
                  static_cast<const char*>(in[0].data) + static_cast<std::size_t>(o) * row + at, block);
    at += block;
  }
  return {};
}

Status constant_of_shape_shape(const Node& node, const Inputs& in, Outputs& out, float& f, std::int64_t& i) {
  I64Span shape;
  if (Status s = shape_input(node, in, 0, "shape", shape); !s) return s;
  if (Status s = rank_limit(node, "the 'shape' input", -1, rank_of(shape)); !s) return s;
  for (const std::int64_t v : shape)
    if (v < 0) return bad(node, "shape {} has a negative dim {}", join(shape), v);
  bool has_f = false, has_i = false;
  if (Status s = attr_float(node, "value_f32", 0.f, f, has_f); !s) return s;
  const graph::Attr* vi = find_attr(node, "value_i64");
  has_i = vi != nullptr;
  if (Status s = attr_int(node, "value_i64", 0, i); !s) return s;
  if (has_f && has_i) return bad(node, "has both value_f32 and value_i64");
  return out.set(node, 0, has_i ? DType::i64 : DType::f32, shape);
}

Status shape_range(const Node& node, const Inputs& in, std::int64_t& start, std::int64_t& count) {
  const std::int64_t r = in.rank(0);
  std::int64_t end = r;
  if (Status s = attr_int(node, "start", 0, start); !s) return s;
  if (Status s = attr_int(node, "end", r, end); !s) return s;
  // Negative values count from the back; both clamp to [0, rank].
  if (start < 0) start += r;
  if (end < 0) end += r;
  start = std::clamp<std::int64_t>(start, 0, r);
  end = std::clamp<std::int64_t>(end, 0, r);
  count = std::max<std::int64_t>(0, end - start);
  return {};
}

Status shape_shape(const Node& node, const Inputs& in, Outputs& out, std::int64_t& start) {
  std::int64_t count = 0;
  if (Status s = shape_range(node, in, start, count); !s) return s;
  const std::array<std::int64_t, 1> o{count};
  return out.set(node, 0, DType::i64, o);
}

Status expand_shape(const Node& node, const Inputs& in, Outputs& out, Broadcast& b) {
  I64Span shape;
  if (Status s = shape_input(node, in, 1, "shape", shape); !s) return s;
  for (const std::int64_t v : shape)
    if (v < 0) return bad(node, "shape {} has a negative dim {}", join(shape), v);
  // Bidirectional: the output is data and shape broadcast together.
  const std::array<I64Span, 2> shapes{in.dims(0), shape};
  if (Status s = broadcast_shapes(node, shapes, b); !s) return s;
  return out.set(node, 0, in.dtype(0), b.span());
}

Status cast_shape(const Node& node, const Inputs& in, Outputs& out, DType& to) {
  std::string_view name;
  bool present = false;
  if (Status s = attr_string(node, "to", name, present); !s) return s;
  if (!present) return bad(node, "needs a 'to' attribute");
  if (name == "f32") {
    to = DType::f32;
  } else if (name == "i64") {
    to = DType::i64;
  } else if (name == "boolean") {
    to = DType::boolean;
  } else {
    return bad(node, "to '{}' is not f32, i64 or boolean", name);
  }
  return out.set(node, 0, to, in.dims(0));
}

// f32 -> i64 truncates toward zero as ONNX Cast does. Where C++ leaves the conversion undefined
// (NaN, beyond int64) it is defined here: NaN gives 0, out-of-range values saturate.
std::int64_t f32_to_i64(float v) {
  if (std::isnan(v)) return 0;
  if (v >= 9223372036854775808.f) return kI64Max;  // 2^63
  if (v < -9223372036854775808.f) return kI64Min;
  return static_cast<std::int64_t>(v);
}

Status run_cast(const Node& node, std::span<const HostTensor> in, std::span<const HostTensor> out) {
  DType to = DType::f32;
  Inputs ins(node, in);
  Outputs outs(out);
  if (Status s = cast_shape(node, ins, outs, to); !s) return s;
  const HostTensor& x = in[0];
  const HostTensor& y = out[0];
  const std::int64_t n = y.numel();
  const DType from = x.dtype;
  for (std::int64_t i = 0; i < n; ++i) {
    if (to == DType::f32) {
      y.f32()[i] = from == DType::f32 ? x.f32()[i] : static_cast<float>(x.i64()[i]);
    } else if (to == DType::i64) {
      y.i64()[i] = from == DType::f32 ? f32_to_i64(x.f32()[i]) : x.i64()[i];
    } else {  // boolean: x != 0 (NaN is true)
      y.i64()[i] = from == DType::f32 ? (x.f32()[i] != 0.f ? 1 : 0) : (x.i64()[i] != 0 ? 1 : 0);
    }
  }
  return {};
}

// ---- shape functions and runs: elementwise ---------------------------------------------------------

// Two or three operands broadcast together, each of an allowed dtype.
Status elementwise_shape(const Node& node, const Inputs& in, Outputs& out, DType out_dtype, Broadcast& b) {
  const std::size_t n = in.size();
  std::array<I64Span, 3> shapes{};
  for (std::size_t i = 0; i < n; ++i) shapes[i] = in.dims(i);
  if (Status s = broadcast_shapes(node, std::span<const I64Span>(shapes.data(), n), b); !s) return s;
  return out.set(node, 0, out_dtype, b.span());
}

bool is_f32_or_i64(DType t) { return t == DType::f32 || t == DType::i64; }

// The dtype checks of every elementwise op, then the output dtype.
Status elementwise_dtypes(const Node& node, const Inputs& in, DType& out_dtype) {
  const DType a = in.dtype(0);
  switch (node.op) {
    case NodeOp::sqrt:
    case NodeOp::erf: out_dtype = DType::f32; return need_dtype(node, in, 0, "x", DType::f32);
    case NodeOp::pow:
      // The output has the base's type (an i64 base gives i64, truncated toward zero).
      if (!is_f32_or_i64(a)) return bad(node, "input 0 (base) must be f32 or i64, not {}", graph::name(a));
      if (!is_f32_or_i64(in.dtype(1)))
        return bad(node, "input 1 (exponent) must be f32 or i64, not {}", graph::name(in.dtype(1)));
      out_dtype = a;
      return {};
    case NodeOp::min:
    case NodeOp::max:
      out_dtype = DType::f32;
      if (Status s = need_dtype(node, in, 0, "a", DType::f32); !s) return s;
      return need_dtype(node, in, 1, "b", DType::f32);
    case NodeOp::where:
      if (Status s = need_dtype(node, in, 0, "cond", DType::boolean); !s) return s;
      if (!is_f32_or_i64(in.dtype(1)) || in.dtype(2) != in.dtype(1))
        return bad(node, "x and y must both be f32 or both i64, not {} and {}", graph::name(in.dtype(1)),
                   graph::name(in.dtype(2)));
      out_dtype = in.dtype(1);
      return {};
    case NodeOp::equal:
      if (!is_f32_or_i64(a) || in.dtype(1) != a)
        return bad(node, "a and b must both be f32 or both i64, not {} and {}", graph::name(a),
                   graph::name(in.dtype(1)));
      out_dtype = DType::boolean;
      return {};
    default:  // add sub mul div
      if (!is_f32_or_i64(a) || in.dtype(1) != a)
        return bad(node, "a and b must both be f32 or both i64, not {} and {}", graph::name(a),
                   graph::name(in.dtype(1)));
      out_dtype = a;
      return {};
  }
}

Status elementwise_op_shape(const Node& node, const Inputs& in, Outputs& out, Broadcast& b) {
  DType out_dtype = DType::f32;
  if (Status s = elementwise_dtypes(node, in, out_dtype); !s) return s;
  return elementwise_shape(node, in, out, out_dtype, b);
}

// y[i] = f(a[...], b[...]) over the broadcast output.
template <class A, class B, class Y, class F>
void binary_loop(const Broadcast& bc, const A* a, const B* b, Y* y, F f) {
  NdIter<2> it = broadcast_iter<2>(bc);
  const std::int64_t n = product(bc.span());
  for (std::int64_t i = 0; i < n; ++i, it.next()) y[i] = f(a[it.off[0]], b[it.off[1]]);
}

// i64 arithmetic wraps (two's complement) instead of overflowing, which C++ leaves undefined.
std::int64_t wrap(std::uint64_t v) { return static_cast<std::int64_t>(v); }

float pow_f32(float x, float e) { return std::pow(x, e); }
// std::pow(float, integer) computes in double; rounding once to float keeps it within float rounding.
float pow_i64(float x, std::int64_t e) {
  return static_cast<float>(std::pow(static_cast<double>(x), static_cast<double>(e)));
}
// pow(x, 0.5) differs from sqrt(x) at -0 (pow gives +0) and -inf (pow gives +inf).
float pow_half(float x) { return x == 0.f ? 0.f : std::isinf(x) ? INFINITY : std::sqrt(x); }

Status run_elementwise(const Node& node, std::span<const HostTensor> in, std::span<const HostTensor> out) {
  Broadcast bc;
  Inputs ins(node, in);
  Outputs outs(out);
  if (Status s = elementwise_op_shape(node, ins, outs, bc); !s) return s;
  const HostTensor& y = out[0];
  const std::int64_t n = y.numel();
  if (n == 0) return {};
  const HostTensor& a = in[0];
  switch (node.op) {
    case NodeOp::sqrt:
      for (std::int64_t i = 0; i < n; ++i) y.f32()[i] = std::sqrt(a.f32()[i]);
      return {};
    case NodeOp::erf:
      for (std::int64_t i = 0; i < n; ++i) y.f32()[i] = std::erf(a.f32()[i]);
      return {};
    case NodeOp::where: {
      // cond, x and y broadcast together: out[i] = cond ? x : y.
      NdIter<3> it = broadcast_iter<3>(bc);
      const bool f32 = in[1].dtype == DType::f32;
      for (std::int64_t i = 0; i < n; ++i, it.next()) {
        const bool c = a.i64()[it.off[0]] != 0;
        if (f32) {
          y.f32()[i] = c ? in[1].f32()[it.off[1]] : in[2].f32()[it.off[2]];
        } else {
          y.i64()[i] = c ? in[1].i64()[it.off[1]] : in[2].i64()[it.off[2]];
        }
      }
      return {};
    }
    default: break;
  }
  const HostTensor& b = in[1];
  const bool f32 = a.dtype == DType::f32;
  switch (node.op) {
    case NodeOp::pow:
      if (!f32) {  // i64 base: computed in double, truncated as a cast to int64 does
        auto ipow = [](double x, double e) -> std::int64_t {
          const double r = std::trunc(std::pow(x, e));
          return std::isfinite(r) && std::fabs(r) < 9.2e18 ? static_cast<std::int64_t>(r) : 0;
        };
        if (b.dtype == DType::f32) {
          binary_loop(bc, a.i64(), b.f32(), y.i64(),
                      [&](std::int64_t x, float e) { return ipow(static_cast<double>(x), e); });
        } else {
          binary_loop(bc, a.i64(), b.i64(), y.i64(), [&](std::int64_t x, std::int64_t e) {
            return ipow(static_cast<double>(x), static_cast<double>(e));
          });
        }
        return {};
      }
      if (b.numel() == 1) {  // one exponent: y has x's elements in x's order
        const double e = b.dtype == DType::f32 ? b.f32()[0] : static_cast<double>(b.i64()[0]);
        if (e == 2.0) {
          for (std::int64_t i = 0; i < n; ++i) y.f32()[i] = a.f32()[i] * a.f32()[i];
          return {};
        }
        if (e == 0.5) {
          for (std::int64_t i = 0; i < n; ++i) y.f32()[i] = pow_half(a.f32()[i]);
          return {};
        }
      }
      if (b.dtype == DType::f32) {
        binary_loop(bc, a.f32(), b.f32(), y.f32(), pow_f32);
      } else {
        binary_loop(bc, a.f32(), b.i64(), y.f32(), pow_i64);
      }
      return {};
    case NodeOp::min:  // NaN in either operand gives NaN
      binary_loop(bc, a.f32(), b.f32(), y.f32(),
                  [](float u, float v) { return std::isnan(u) || std::isnan(v) ? u + v : std::min(u, v); });
      return {};
    case NodeOp::max:
      binary_loop(bc, a.f32(), b.f32(), y.f32(),
                  [](float u, float v) { return std::isnan(u) || std::isnan(v) ? u + v : std::max(u, v); });
      return {};
    case NodeOp::equal:
      if (f32) {
        binary_loop(bc, a.f32(), b.f32(), y.i64(), [](float u, float v) -> std::int64_t { return u == v ? 1 : 0; });
      } else {
        binary_loop(bc, a.i64(), b.i64(), y.i64(),
                    [](std::int64_t u, std::int64_t v) -> std::int64_t { return u == v ? 1 : 0; });
      }
      return {};
    case NodeOp::add:
      if (f32) {
        binary_loop(bc, a.f32(), b.f32(), y.f32(), [](float u, float v) { return u + v; });
      } else {
        binary_loop(bc, a.i64(), b.i64(), y.i64(), [](std::int64_t u, std::int64_t v) {
          return wrap(static_cast<std::uint64_t>(u) + static_cast<std::uint64_t>(v));
        });
      }
      return {};
    case NodeOp::sub:
      if (f32) {
        binary_loop(bc, a.f32(), b.f32(), y.f32(), [](float u, float v) { return u - v; });
      } else {
        binary_loop(bc, a.i64(), b.i64(), y.i64(), [](std::int64_t u, std::int64_t v) {
          return wrap(static_cast<std::uint64_t>(u) - static_cast<std::uint64_t>(v));
        });
      }
      return {};
    case NodeOp::mul:
      if (f32) {
        binary_loop(bc, a.f32(), b.f32(), y.f32(), [](float u, float v) { return u * v; });
      } else {
        binary_loop(bc, a.i64(), b.i64(), y.i64(), [](std::int64_t u, std::int64_t v) {
          return wrap(static_cast<std::uint64_t>(u) * static_cast<std::uint64_t>(v));
        });
      }
      return {};
    case NodeOp::div:
      if (f32) {
        binary_loop(bc, a.f32(), b.f32(), y.f32(), [](float u, float v) { return u / v; });
        return {};
      }
      for (std::int64_t i = 0; i < b.numel(); ++i)
        if (b.i64()[i] == 0) return bad(node, "i64 division by zero (divisor element {})", i);
      // Truncates toward zero like C++; INT64_MIN / -1 wraps to INT64_MIN.
      binary_loop(bc, a.i64(), b.i64(), y.i64(), [](std::int64_t u, std::int64_t v) {
        return v == -1 ? wrap(0u - static_cast<std::uint64_t>(u)) : u / v;
      });
      return {};
    default: return internal(node, "not an elementwise op");
  }
}

// ---- shape functions and runs: reductions and normalization ------------------------------------------

// Which data dims reduce_mean reduces; none when noop_with_empty_axes applies.
struct ReduceParams {
  std::array<bool, kHostMaxRank> reduce{};
  bool noop = false;
};

Status reduce_mean_shape(const Node& node, const Inputs& in, Outputs& out, ReduceParams& p) {
  if (Status s = need_dtype(node, in, 0, "data", DType::f32); !s) return s;
  const I64Span d = in.dims(0);
  const int r = rank_of(d);
  bool keepdims = true, noop_empty = false;
  if (Status s = attr_flag(node, "keepdims", true, keepdims); !s) return s;
  if (Status s = attr_flag(node, "noop_with_empty_axes", false, noop_empty); !s) return s;
  I64Span axes;
  if (in.has(1))
    if (Status s = shape_input(node, in, 1, "axes", axes); !s) return s;
  p = ReduceParams{};
  if (axes.empty()) {  // no axes: reduce everything, or nothing with noop_with_empty_axes
    p.noop = noop_empty;
    for (int j = 0; j < r; ++j) p.reduce[static_cast<std::size_t>(j)] = !noop_empty;
  }
  for (const std::int64_t a : axes) {
    int axis = 0;
    if (Status s = norm_axis(node, "axes value", a, r, axis); !s) return s;
    if (p.reduce[static_cast<std::size_t>(axis)]) return bad(node, "axes {} repeats axis {}", join(axes), a);
    p.reduce[static_cast<std::size_t>(axis)] = true;
  }
  FixedDims o;
  for (int j = 0; j < r; ++j) {
    if (!p.reduce[static_cast<std::size_t>(j)]) {
      o.d[static_cast<std::size_t>(o.rank++)] = d[static_cast<std::size_t>(j)];
    } else if (keepdims) {
      o.d[static_cast<std::size_t>(o.rank++)] = 1;
    }
  }
  return out.set(node, 0, DType::f32, o.span());
}

Status run_reduce_mean(const Node& node, std::span<const HostTensor> in, std::span<const HostTensor> out) {
  ReduceParams p;
  Inputs ins(node, in);
  Outputs outs(out);
  if (Status s = reduce_mean_shape(node, ins, outs, p); !s) return s;
  if (p.noop) {
    copy_all(in[0], out[0]);
    return {};
  }
  // Kept dims index y (in order, with or without the 1s); reduced dims index one y element's
  // window of x. Two walks over x's strides: outer over kept dims, inner over reduced dims.
  const I64Span d(in[0].dims);
  const DimArray xs = dense_strides(d);
  NdIter<1> outer = iter_over<1>(d), inner = iter_over<1>(d);
  std::int64_t window = 1;  // elements averaged per output
  for (int j = 0; j < outer.rank; ++j) {
    const auto u = static_cast<std::size_t>(j);
    (p.reduce[u] ? outer : inner).dims[u] = 1;
    outer.strides[0][u] = xs[u];
    inner.strides[0][u] = xs[u];
    if (p.reduce[u]) window *= d[u];
  }
  const std::int64_t n = out[0].numel();
  for (std::int64_t i = 0; i < n; ++i, outer.next()) {
    double sum = 0.0;
    NdIter<1> w = inner;
    w.off[0] = outer.off[0];
    for (std::int64_t k = 0; k < window; ++k, w.next()) sum += in[0].f32()[w.off[0]];
    out[0].f32()[i] = static_cast<float>(sum / static_cast<double>(window));  // an empty window gives NaN
  }
  return {};
}

Status layernorm_stats_shape(const Node& node, const Inputs& in, Outputs& out, int& axis, float& eps) {
  if (Status s = need_dtype(node, in, 0, "x", DType::f32); !s) return s;
  const I64Span d = in.dims(0);
  const int r = rank_of(d);
  if (r == 0) return bad(node, "x must have rank >= 1, not a scalar");
  std::int64_t a = 0;
  bool present = false;
  if (Status s = attr_int(node, "axis", -1, a); !s) return s;
  if (Status s = norm_axis(node, "axis", a, r, axis); !s) return s;
  if (Status s = attr_float(node, "epsilon", 1e-5f, eps, present); !s) return s;
  // mean and inv_std_dev are x's dims with [axis, r) set to 1.
  FixedDims o;
  o.rank = r;
  for (int j = 0; j < r; ++j) o.d[static_cast<std::size_t>(j)] = j < axis ? d[static_cast<std::size_t>(j)] : 1;
  for (std::size_t i = 0; i < node.outputs.size(); ++i)
    if (Status s = out.set(node, i, DType::f32, o.span()); !s) return s;
  return {};
}

Status run_layernorm_stats(const Node& node, std::span<const HostTensor> in, std::span<const HostTensor> out) {
  int axis = 0;
  float eps = 0.f;
  Inputs ins(node, in);
  Outputs outs(out);
  if (Status s = layernorm_stats_shape(node, ins, outs, axis, eps); !s) return s;
  // x is (outer, inner) with inner = dims [axis, r); mean and inv_std_dev are (outer).
  const I64Span d(in[0].dims);
  const std::int64_t outer = product(d.first(static_cast<std::size_t>(axis)));
  const std::int64_t inner = product(d.subspan(static_cast<std::size_t>(axis)));
  for (std::int64_t o = 0; o < outer; ++o) {
    const float* x = in[0].f32() + o * inner;
    double sum = 0.0;
    for (std::int64_t j = 0; j < inner; ++j) sum += x[j];
    const double mean = sum / static_cast<double>(inner);
    double sq = 0.0;  // population variance: divide by inner, not inner - 1
    for (std::int64_t j = 0; j < inner; ++j) sq += (x[j] - mean) * (x[j] - mean);
    const double var = sq / static_cast<double>(inner);
    out[0].f32()[o] = static_cast<float>(mean);
    if (out.size() > 1) out[1].f32()[o] = static_cast<float>(1.0 / std::sqrt(var + static_cast<double>(eps)));
  }
  return {};
}

// ---- shape functions and runs: convolution and pooling -------------------------------------------------

// The window geometry along each spatial dim, shared by conv_nd and pool_nd.
struct Window {
  int sp = 0;  // spatial rank
  DimArray kernel{}, stride{}, dilation{}, pad_begin{}, pad_end{}, out{};
};

// Checks one spatial dim's window and gives its floor-mode output size and the room it needs.
Status window_size(const Node& node, int i, std::int64_t in, const Window& w, std::int64_t& span,
                   std::int64_t& padded) {
  const auto u = static_cast<std::size_t>(i);
  // The dilated kernel covers (k - 1) * d + 1 positions.
  if (__builtin_mul_overflow(w.kernel[u] - 1, w.dilation[u], &span) || __builtin_add_overflow(span, 1, &span) ||
      __builtin_add_overflow(in, w.pad_begin[u], &padded) || __builtin_add_overflow(padded, w.pad_end[u], &padded))
    return bad(node, "spatial dim {} window overflows int64", i);
  if (padded < span)
    return bad(node, "spatial dim {} of size {} (padded {}) is smaller than the dilated kernel {}", i, in, padded,
               span);
  return {};
}

// Reads strides, pads, dilations and derives floor-mode output sizes (conv_nd; pool_nd adds ceil).
Status window_attrs(const Node& node, I64Span spatial, Window& w) {
  w.sp = rank_of(spatial);
  if (Status s = spatial_ints(node, "strides", w.sp, 1, 1, w.stride); !s) return s;
  if (Status s = spatial_ints(node, "dilations", w.sp, 1, 1, w.dilation); !s) return s;
  return pads_attr(node, w.sp, w.pad_begin, w.pad_end);
}

Status conv_shape(const Node& node, const Inputs& in, Outputs& out, Window& w, std::int64_t& group) {
  if (Status s = need_dtype(node, in, 0, "x", DType::f32); !s) return s;
  if (Status s = need_dtype(node, in, 1, "w", DType::f32); !s) return s;
  const I64Span x = in.dims(0), wd = in.dims(1);
  const int r = rank_of(x);
  // x is (N, C, D1..Dk); w is (K, C/group, k1..kk); b is (K).
  if (r < 3) return bad(node, "x {} needs rank >= 3 (N, C, spatial...)", dims_str(x));
  if (rank_of(wd) != r) return bad(node, "w {} must have x's rank {}", dims_str(wd), r);
  if (Status s = attr_int(node, "group", 1, group); !s) return s;
  if (group < 1) return bad(node, "group {} must be >= 1", group);
  const std::int64_t C = x[1], K = wd[0];
  if (C % group != 0) return bad(node, "input channels {} are not divisible by group {}", C, group);
  if (K % group != 0) return bad(node, "output channels {} (w dim 0) are not divisible by group {}", K, group);
  if (wd[1] != C / group)
    return bad(node, "w {} has {} channels per group, x has {} channels and group {}", dims_str(wd), wd[1], C, group);
  if (in.has(2)) {
    if (Status s = need_dtype(node, in, 2, "b", DType::f32); !s) return s;
    if (in.rank(2) != 1 || in.dims(2)[0] != K) return bad(node, "b {} must be ({})", dims_str(in.dims(2)), K);
  }
  const I64Span spatial = x.subspan(2);
  if (Status s = window_attrs(node, spatial, w); !s) return s;
  I64Span ks;
  bool has_ks = false;
  if (Status s = attr_ints(node, "kernel_shape", ks, has_ks); !s) return s;
  if (has_ks && !std::ranges::equal(ks, wd.subspan(2)))
    return bad(node, "kernel_shape {} does not match w {}", join(ks), dims_str(wd));
  FixedDims o;
  o.rank = r;
  o.d[0] = x[0];
  o.d[1] = K;
  for (int i = 0; i < w.sp; ++i) {
    const auto u = static_cast<std::size_t>(i);
    w.kernel[u] = wd[u + 2];
    if (w.kernel[u] < 1) return bad(node, "w {} has an empty kernel", dims_str(wd));
    std::int64_t span = 0, padded = 0;
    if (Status s = window_size(node, i, spatial[u], w, span, padded); !s) return s;
    w.out[u] = (padded - span) / w.stride[u] + 1;
    o.d[u + 2] = w.out[u];
  }
  return out.set(node, 0, DType::f32, o.span());
}

Status run_conv_nd(const Node& node, std::span<const HostTensor> in, std::span<const HostTensor> out) {
  Window win;
  std::int64_t group = 1;
  Inputs ins(node, in);
  Outputs outs(out);
  if (Status s = conv_shape(node, ins, outs, win, group); !s) return s;
  const HostTensor& x = in[0];
  const HostTensor& w = in[1];
  const HostTensor& y = out[0];
  const float* bias = ins.has(2) ? in[2].f32() : nullptr;
  const std::size_t sp = static_cast<std::size_t>(win.sp);
  const I64Span xd = I64Span(x.dims).subspan(2), kd = I64Span(w.dims).subspan(2), yd = I64Span(y.dims).subspan(2);
  const std::int64_t N = x.dims[0], C = x.dims[1], K = w.dims[0];
  const std::int64_t Cg = C / group, Kg = K / group;
  const std::int64_t x_plane = product(xd), k_plane = product(kd), y_plane = product(yd);
  const DimArray xs = dense_strides(xd);
  // x is (N, C, D1..Dk); w is (K, C/group, k1..kk); y is (N, K, O1..Ok).
  // Output channel k belongs to group k / Kg and reads input channels [g*Cg, (g+1)*Cg); output
  // position o, tap t reads x at o*stride - pad_begin + t*dilation (zero in the padding).
  for (std::int64_t n = 0; n < N; ++n) {
    for (std::int64_t k = 0; k < K; ++k) {
      const std::int64_t c0 = (k / Kg) * Cg;  // first input channel of k's group
      NdIter<0> o = iter_over<0>(yd);
      for (std::int64_t j = 0; j < y_plane; ++j, o.next()) {
        float acc = 0.f;
        for (std::int64_t c = 0; c < Cg; ++c) {
          const float* xp = x.f32() + (n * C + c0 + c) * x_plane;
          const float* wp = w.f32() + (k * Cg + c) * k_plane;
          NdIter<0> t = iter_over<0>(kd);
          for (std::int64_t tap = 0; tap < k_plane; ++tap, t.next()) {
            std::int64_t off = 0;
            bool inside = true;
            for (std::size_t i = 0; inside && i < sp; ++i) {
              const std::int64_t pos = o.idx[i] * win.stride[i] - win.pad_begin[i] + t.idx[i] * win.dilation[i];
              inside = pos >= 0 && pos < xd[i];
              off += pos * xs[i];
            }
            if (inside) acc += xp[off] * wp[tap];
          }
        }
        if (bias) acc += bias[k];
        y.f32()[(n * K + k) * y_plane + j] = acc;
      }
    }
  }
  return {};
}

struct PoolParams {
  Window w;
  bool max = true;
  bool include_pad = false;
  bool column_major = false;  // storage_order 1: indices count the spatial dims first-fastest
};

Status pool_shape(const Node& node, const Inputs& in, Outputs& out, PoolParams& p) {
  if (Status s = need_dtype(node, in, 0, "x", DType::f32); !s) return s;
  const I64Span x = in.dims(0);
  const int r = rank_of(x);
  if (r < 3) return bad(node, "x {} needs rank >= 3 (N, C, spatial...)", dims_str(x));
  std::string_view mode;
  bool present = false;
  if (Status s = attr_string(node, "mode", mode, present); !s) return s;
  if (mode != "max" && mode != "avg") return bad(node, "mode '{}' is not max or avg", mode);
  p.max = mode == "max";
  if (node.outputs.size() > 1 && !p.max) return bad(node, "mode avg has no indices output");
  const I64Span spatial = x.subspan(2);
  Window& w = p.w;
  if (Status s = window_attrs(node, spatial, w); !s) return s;
  I64Span ks;
  bool has_ks = false;
  if (Status s = attr_ints(node, "kernel_shape", ks, has_ks); !s) return s;
  if (!has_ks) return bad(node, "needs a kernel_shape attribute");
  if (Status s = spatial_ints(node, "kernel_shape", w.sp, 1, 1, w.kernel); !s) return s;
  bool ceil_mode = false, column_major = false;
  if (Status s = attr_flag(node, "ceil_mode", false, ceil_mode); !s) return s;
  if (Status s = attr_flag(node, "count_include_pad", false, p.include_pad); !s) return s;
  if (Status s = attr_flag(node, "storage_order", false, column_major); !s) return s;
  p.column_major = column_major;
  FixedDims o;
  o.rank = r;
  o.d[0] = x[0];
  o.d[1] = x[1];
  for (int i = 0; i < w.sp; ++i) {
    const auto u = static_cast<std::size_t>(i);
    std::int64_t span = 0, padded = 0;
    if (Status s = window_size(node, i, spatial[u], w, span, padded); !s) return s;
    const std::int64_t room = padded - span;
    std::int64_t n = room / w.stride[u] + 1;
    if (ceil_mode && room % w.stride[u] != 0) {
      ++n;  // ceil((padded - span) / stride) + 1 windows ...
      // ... but the last one must start inside the input or its begin padding.
      std::int64_t last_start = 0;
      if (__builtin_mul_overflow(n - 1, w.stride[u], &last_start) || last_start >= spatial[u] + w.pad_begin[u]) --n;
    }
    w.out[u] = n;
    o.d[u + 2] = n;
  }
  for (std::size_t i = 0; i < node.outputs.size(); ++i)
    if (Status s = out.set(node, i, i == 0 ? DType::f32 : DType::i64, o.span()); !s) return s;
  return {};
}

Status run_pool_nd(const Node& node, std::span<const HostTensor> in, std::span<const HostTensor> out) {
  PoolParams p;
  Inputs ins(node, in);
  Outputs outs(out);
  if (Status s = pool_shape(node, ins, outs, p); !s) return s;
  const Window& win = p.w;
  const HostTensor& x = in[0];
  const HostTensor& y = out[0];
  std::int64_t* indices = out.size() > 1 ? out[1].i64() : nullptr;
  const std::size_t sp = static_cast<std::size_t>(win.sp);
  const I64Span xd = I64Span(x.dims).subspan(2), yd = I64Span(y.dims).subspan(2);
  const I64Span kd(win.kernel.data(), sp);
  const std::int64_t planes = x.dims[0] * x.dims[1];
  const std::int64_t x_plane = product(xd), k_plane = product(kd), y_plane = product(yd);
  const DimArray xs = dense_strides(xd);
  DimArray cs{};  // column-major spatial strides, for storage_order 1 indices
  for (std::size_t i = 0; i < sp; ++i) cs[i] = i == 0 ? 1 : cs[i - 1] * xd[i - 1];
  // x is (N, C, D1..Dk), each (n, c) plane pooled on its own; y and indices are (N, C, O1..Ok).
  // Output position o, tap t covers x at o*stride - pad_begin + t*dilation. A tap in the padding
  // is skipped; for avg with count_include_pad it still counts if it lies inside the padded input
  // [-pad_begin, D + pad_end), which ceil mode can overrun.
  for (std::int64_t nc = 0; nc < planes; ++nc) {
    const float* xp = x.f32() + nc * x_plane;
    NdIter<0> o = iter_over<0>(yd);
    for (std::int64_t j = 0; j < y_plane; ++j, o.next()) {
      float best = std::numeric_limits<float>::lowest();  // a window with no input taps (as ONNX Runtime)
      std::int64_t best_at = -1;
      bool found = false;
      double sum = 0.0;
      std::int64_t count = 0;
      NdIter<0> t = iter_over<0>(kd);
      for (std::int64_t tap = 0; tap < k_plane; ++tap, t.next()) {
        std::int64_t off = 0, col = 0;
        bool inside = true, in_padded = true;
        for (std::size_t i = 0; i < sp; ++i) {
          const std::int64_t pos = o.idx[i] * win.stride[i] - win.pad_begin[i] + t.idx[i] * win.dilation[i];
          inside = inside && pos >= 0 && pos < xd[i];
          in_padded = in_padded && pos < xd[i] + win.pad_end[i];  // pos >= -pad_begin always holds
          off += pos * xs[i];
          col += pos * cs[i];
        }
        if (p.include_pad && in_padded) ++count;
        if (!inside) continue;
        const float v = xp[off];
        if (!p.include_pad) ++count;
        sum += v;
        // NaN propagates: the first NaN wins and nothing replaces it.
        if (!found || v > best || (std::isnan(v) && !std::isnan(best))) {
          best = v;
          best_at = nc * x_plane + (p.column_major ? col : off);
          found = true;
        }
      }
      const std::int64_t at = nc * y_plane + j;
      if (p.max) {
        y.f32()[at] = best;
        if (indices) indices[at] = best_at;
      } else {
        y.f32()[at] = static_cast<float>(sum / static_cast<double>(count));  // no counted taps: NaN
      }
    }
  }
  return {};
}

// ---- dispatch -------------------------------------------------------------------------------------

// The shape function of every host op whose run needs nothing but the outputs it checks.
Status shape_of(const Node& node, const Inputs& in, Outputs& out) {
  switch (node.op) {
    case NodeOp::reshape: return reshape_shape(node, in, out);
    case NodeOp::transpose: {
      DimArray perm{};
      return transpose_shape(node, in, out, perm);
    }
    case NodeOp::concat: {
      int axis = 0;
      return concat_shape(node, in, out, axis);
    }
    case NodeOp::flatten: return flatten_shape(node, in, out);
    case NodeOp::slice: {
      SliceParams p;
      return slice_shape(node, in, out, p);
    }
    case NodeOp::gather: {
      int axis = 0;
      return gather_shape(node, in, out, axis);
    }
    case NodeOp::squeeze: return squeeze_shape(node, in, out);
    case NodeOp::unsqueeze: return unsqueeze_shape(node, in, out);
    case NodeOp::split: {
      int axis = 0;
      return split_shape(node, in, out, axis);
    }
    case NodeOp::identity: return out.set(node, 0, in.dtype(0), in.dims(0));
    case NodeOp::constant_of_shape: {
      float f = 0.f;
      std::int64_t i = 0;
      return constant_of_shape_shape(node, in, out, f, i);
    }
    case NodeOp::shape: {
      std::int64_t start = 0;
      return shape_shape(node, in, out, start);
    }
    case NodeOp::expand: {
      Broadcast b;
      return expand_shape(node, in, out, b);
    }
    case NodeOp::cast: {
      DType to = DType::f32;
      return cast_shape(node, in, out, to);
    }
    case NodeOp::reduce_mean: {
      ReduceParams p;
      return reduce_mean_shape(node, in, out, p);
    }
    case NodeOp::conv_nd: {
      Window w;
      std::int64_t group = 1;
      return conv_shape(node, in, out, w, group);
    }
    case NodeOp::pool_nd: {
      PoolParams p;
      return pool_shape(node, in, out, p);
    }
    case NodeOp::layernorm_stats: {
      int axis = 0;
      float eps = 0.f;
      return layernorm_stats_shape(node, in, out, axis, eps);
    }
    default: {  // pow sqrt erf where equal min max add sub mul div
      Broadcast b;
      return elementwise_op_shape(node, in, out, b);
    }
  }
}

Status run_op(const Node& node, std::span<const HostTensor> in, std::span<const HostTensor> out) {
  Inputs ins(node, in);
  Outputs outs(out);
  switch (node.op) {
    case NodeOp::reshape:
    case NodeOp::flatten:
    case NodeOp::squeeze:
    case NodeOp::unsqueeze:
    case NodeOp::identity:  // same elements in the same order
      if (Status s = shape_of(node, ins, outs); !s) return s;
      copy_all(in[0], out[0]);
      return {};
    case NodeOp::transpose: return run_transpose(node, in, out);
    case NodeOp::concat: return run_concat(node, in, out);
    case NodeOp::slice: return run_slice(node, in, out);
    case NodeOp::gather: return run_gather(node, in, out);
    case NodeOp::split: return run_split(node, in, out);
    case NodeOp::constant_of_shape: {
      float f = 0.f;
      std::int64_t v = 0;
      if (Status s = constant_of_shape_shape(node, ins, outs, f, v); !s) return s;
      const std::int64_t n = out[0].numel();
      for (std::int64_t i = 0; i < n; ++i) {
        if (out[0].dtype == DType::f32) {
          out[0].f32()[i] = f;
        } else {
          out[0].i64()[i] = v;
        }
      }
      return {};
    }
    case NodeOp::shape: {
      std::int64_t start = 0;
      if (Status s = shape_shape(node, ins, outs, start); !s) return s;
      for (std::int64_t i = 0; i < out[0].numel(); ++i)
        out[0].i64()[i] = in[0].dims[static_cast<std::size_t>(start + i)];
      return {};
    }
    case NodeOp::expand: {
      Broadcast b;
      if (Status s = expand_shape(node, ins, outs, b); !s) return s;
      strided_copy(in[0], out[0], broadcast_iter<1>(b));
      return {};
    }
    case NodeOp::cast: return run_cast(node, in, out);
    case NodeOp::reduce_mean: return run_reduce_mean(node, in, out);
    case NodeOp::conv_nd: return run_conv_nd(node, in, out);
    case NodeOp::pool_nd: return run_pool_nd(node, in, out);
    case NodeOp::layernorm_stats: return run_layernorm_stats(node, in, out);
    default: return run_elementwise(node, in, out);
  }
}

}  // namespace

std::int64_t TensorInfo::numel() const noexcept { return product(dims); }
std::int64_t HostTensor::numel() const noexcept { return product(dims); }

bool is_host_op(NodeOp op) noexcept {
  switch (op) {
    case NodeOp::matmul:
    case NodeOp::constant:
    case NodeOp::layout_convert: return false;
    case NodeOp::add:
    case NodeOp::sub:
    case NodeOp::mul:
    case NodeOp::div: return true;
    default: return !graph::registry_op(op).has_value();
  }
}

Status infer(const Node& node, std::span<const TensorInfo* const> in, std::span<const HostTensor* const> constant,
             std::vector<TensorInfo>& out) {
  out.clear();
  if (!is_host_op(node.op))
    return Status(StatusCode::unsupported, fmt::format("{} '{}': not a host op", graph::name(node.op), node.name));
  if (constant.size() != in.size())
    return internal(node, "got {} constant slots for {} inputs", constant.size(), in.size());
  const Inputs ins(node, in, constant);
  for (std::size_t i = 0; i < in.size() && i < node.inputs.size(); ++i)
    if ((in[i] != nullptr) != ins.has(i))
      return internal(node, "input {} info is {} but the node's input id is {}", i, in[i] ? "set" : "missing",
                      node.inputs[i]);
  if (Status s = check_arity(node, in.size(), node.outputs.size(), ins); !s) return s;
  // A constant's payload must be the tensor its info describes.
  for (std::size_t i = 0; i < in.size(); ++i) {
    const HostTensor* c = constant[i];
    if (!c || !in[i]) continue;
    if (c->dtype != in[i]->dtype || c->dims != in[i]->dims || (c->numel() > 0 && !c->data))
      return internal(node, "constant input {} payload does not match its info {} {}", i, graph::name(in[i]->dtype),
                      dims_str(in[i]->dims));
  }
  Outputs outs(out);
  Status s = shape_of(node, ins, outs);
  if (!s) out.clear();
  return s;
}

Status run(const Node& node, std::span<const HostTensor> in, std::span<const HostTensor> out) {
  if (!is_host_op(node.op))
    return Status(StatusCode::unsupported, fmt::format("{} '{}': not a host op", graph::name(node.op), node.name));
  const Inputs ins(node, in);
  if (Status s = check_arity(node, in.size(), out.size(), ins); !s) return s;
  for (std::size_t i = 0; i < in.size(); ++i)  // shape reads only dims
    if (ins.has(i) && node.op != NodeOp::shape && in[i].numel() > 0 && !in[i].data)
      return bad(node, "input {} has no data", i);
  for (std::size_t i = 0; i < out.size(); ++i) {
    std::int64_t n = 0;
    if (Status s = rank_limit(node, "output", static_cast<std::int64_t>(i), rank_of(out[i].dims)); !s) return s;
    if (!checked_count(out[i].dims, n)) return bad(node, "output {} has invalid dims {}", i, dims_str(out[i].dims));
    if (n > 0 && !out[i].data) return bad(node, "output {} has no buffer", i);
  }
  return run_op(node, in, out);
}

}  // namespace opfuse::runtime
