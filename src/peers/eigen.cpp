// src/peers/eigen.cpp - Eigen 3.4 peers: gemm, and conv2d as im2col + Eigen GEMM.
//
// What it does. gemm maps the row-major user buffers as Eigen matrices (a transposed operand
// is the transpose() of its stored shape, no copy), lets Eigen's blocked GEMM compute
// y = alpha*op(a)*op(b) (+ beta*y), then applies bias and the post-op chain as Eigen array
// expressions over y (one pass per step, like the naive stage). conv2d unrolls each image
// into a (C*R*S, P*Q) column matrix in the workspace (skipped for 1x1 / stride 1 / no pad,
// where the image itself is that matrix), multiplies the (K, C*R*S) weights by it and runs
// bias and post-ops on the (K, P*Q) result while it is still in cache.
//
// Scope: fp32; conv2d takes NCHW x/y/w and groups == 1 only; post-op operands (bias, binary,
// batchnorm) must broadcast in one of the patterns listed at bcast_gemm / bcast_conv.
// Threads: Eigen's GEMM uses OpenMP only when this file is compiled with -fopenmp; then
// ThreadScope sets the count per call. Otherwise it runs on one thread, whatever
// KernelArgs::threads says (supports() declines nothing because of threads).
// ISA: Eigen picks its SIMD path at compile time from the __AVX512F__/__FMA__/... macros, and
// the default x86-64 flags give SSE2 only, far below what Eigen does with AVX-512 + FMA. So,
// like the simd stage, this file is compiled once per ISA (avx512, avx2+fma, sse2;
// CMakeLists.txt), each copy in its own namespace eigen::isa_<ISA> with only that ISA's flags,
// and peers.cpp, compiled for the baseline, runs the best copy effective_isa() allows: every
// x86-64 CPU has an Eigen peer, at the same ISA level as the opfuse kernels it is compared with.
// GCC 12 reports its own _mm512_undefined_* intrinsics (avx512fintrin.h) as "used
// uninitialized" wherever Eigen's AVX-512 path inlines them: false positives, silenced here.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

// One copy per ISA means three instantiations of every Eigen template (the GEMM kernels above
// all), under the same names and compiled for different ISAs; the linker keeps one of each, so
// the AVX2 rows would run the AVX-512 kernels (SIGILL on an AVX2 CPU). Renaming Eigen's namespace
// per copy (Eigen -> Eigen_isa_avx2, ...) gives every copy templates of its own. The macro is
// set before any Eigen header and applies to every use of `Eigen` in this file and in them.
#ifndef OPFUSE_EIGEN_ISA
#error "src/peers/eigen.cpp is compiled once per ISA with OPFUSE_EIGEN_ISA set (CMakeLists.txt)"
#endif
#define OPFUSE_EIGEN_CAT2(a, b) a##b
#define OPFUSE_EIGEN_CAT(a, b) OPFUSE_EIGEN_CAT2(a, b)
#define Eigen OPFUSE_EIGEN_CAT(Eigen_isa_, OPFUSE_EIGEN_ISA)
#include <Eigen/Core>
#include <cassert>
#include <cmath>
#include <cstdint>

#include "peers/peers.hpp"

// This copy's namespace: isa_avx512, isa_avx2 or isa_sse2.
#define OPFUSE_EIGEN_NS OPFUSE_EIGEN_CAT(isa_, OPFUSE_EIGEN_ISA)

namespace opfuse::peers::eigen::OPFUSE_EIGEN_NS {

namespace {

using RowMat = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using MapC = Eigen::Map<const RowMat>;
using MapM = Eigen::Map<RowMat>;
using RowVecC = Eigen::Map<const Eigen::Array<float, 1, Eigen::Dynamic>>;
using ColVecC = Eigen::Map<const Eigen::Array<float, Eigen::Dynamic, 1>>;
using Index = Eigen::Index;

// y = act(y) for an Eigen array expression y; the formulas of ActKind, NaN-propagating.
template <class A>
void apply_act(A&& y, const Activation& act) {
  switch (act.kind) {
    case ActKind::relu: y = (y < 0.f).select(0.f, y); break;
    case ActKind::clip: y = (y < act.alpha).select(act.alpha, (y > act.beta).select(act.beta, y)); break;
    case ActKind::leaky_relu: y = (y < 0.f).select(act.alpha * y, y); break;
    case ActKind::sigmoid: y = (1.f + (-y).exp()).inverse(); break;
    case ActKind::tanh: y = y.tanh(); break;
    case ActKind::gelu_erf:
      y = y.unaryExpr([](float x) { return 0.5f * x * (1.f + std::erf(x * 0.70710678118654752f)); });
      break;
    case ActKind::gelu_tanh: y = 0.5f * y * (1.f + (0.79788456080286536f * (y + 0.044715f * y * y * y)).tanh()); break;
    case ActKind::silu: y = y / (1.f + (-y).exp()); break;
    case ActKind::hardswish: {
      const auto r = y + 3.f;
      y = y * (r < 0.f).select(0.f, (r > 6.f).select(6.f, r)) / 6.f;
      break;
    }
    case ActKind::linear: y = act.alpha * y + act.beta; break;
  }
}

// y <op>= b elementwise; y may be a rowwise() / colwise() view, which broadcasts b along it.
template <class Y, class B>
void apply_binary(Y&& y, const B& b, BinaryKind k) {
  switch (k) {
    case BinaryKind::add: y += b; break;
    case BinaryKind::sub: y -= b; break;
    case BinaryKind::mul: y *= b; break;
    case BinaryKind::div: y /= b; break;
  }
}

// How an operand broadcasts over a (rows, cols) result.
enum class Bcast : std::uint8_t { full, row, col, scalar, none };

// gemm: operand of rank <= 2 over (M, N): (M,N), (1,N) or (N), (M,1), (1,1) or (1).
Bcast bcast_gemm(const TensorDesc& t, std::int64_t m, std::int64_t n) {
  if (t.shape.rank > 2) return Bcast::none;
  const std::int64_t r = t.shape.rank == 2 ? t.shape[0] : 1, c = t.shape[t.shape.rank - 1];
  if (r == m && c == n) return Bcast::full;
  if (r == 1 && c == n) return Bcast::row;
  if (r == m && c == 1) return Bcast::col;
  if (r == 1 && c == 1) return Bcast::scalar;
  return Bcast::none;
}

// Applies y <op>= operand over a (rows, cols) row-major block.
void apply_operand(MapM& y, const float* b, Bcast bc, BinaryKind k) {
  const Index rows = y.rows(), cols = y.cols();
  switch (bc) {
    case Bcast::full: apply_binary(y.array(), MapC(b, rows, cols).array(), k); break;
    case Bcast::row: apply_binary(y.array().rowwise(), RowVecC(b, cols), k); break;
    case Bcast::col: apply_binary(y.array().colwise(), ColVecC(b, rows), k); break;
    case Bcast::scalar: apply_binary(y.array(), b[0], k); break;
    case Bcast::none: assert(false && "eigen peer: unsupported broadcast"); break;
  }
}

// s = g / sqrt(v + eps), t = b - m * s per channel (in double), into s and t.
void fold_bn(const KernelArgs& a, int first, float eps, std::int64_t c, float* s, float* t) {
  const float* g = a.in[first]->data();
  const float* b = a.in[first + 1]->data();
  const float* m = a.in[first + 2]->data();
  const float* v = a.in[first + 3]->data();
  for (std::int64_t i = 0; i < c; ++i) {
    const double si = static_cast<double>(g[i]) / std::sqrt(static_cast<double>(v[i]) + eps);
    s[i] = static_cast<float>(si);
    t[i] = static_cast<float>(static_cast<double>(b[i]) - static_cast<double>(m[i]) * si);
  }
}

// ---- conv2d geometry ---------------------------------------------------------------------------

struct ConvGeom {
  std::int64_t n, c, h, w, k, r, s, p, q;
  bool direct;  // 1x1, stride 1, no padding: the image is its own column matrix
};

ConvGeom conv_geom(const OpDesc& d) {
  const auto& p = d.p<Conv2dParams>();
  const Shape& x = d.inputs[0].shape;
  const Shape& w = d.inputs[1].shape;
  ConvGeom g{};
  g.n = x[0];
  g.c = x[1];
  g.h = x[2];
  g.w = x[3];
  g.k = w[0];
  g.r = w[2];
  g.s = w[3];
  g.p = (g.h + p.pad_top + p.pad_bottom - (g.r - 1) * p.dilation_h - 1) / p.stride_h + 1;
  g.q = (g.w + p.pad_left + p.pad_right - (g.s - 1) * p.dilation_w - 1) / p.stride_w + 1;
  g.direct = g.r == 1 && g.s == 1 && p.stride_h == 1 && p.stride_w == 1 && p.pad_top == 0 && p.pad_left == 0 &&
             p.pad_bottom == 0 && p.pad_right == 0;
  return g;
}

// conv2d operand over the (N, K, P, Q) output, per image: a (K, P*Q) block for the full
// pattern, a (K) column for per-channel, a scalar; `image_step` is 0 when the operand has
// no batch dim (or batch 1), else the elements between images.
struct ConvOperand {
  Bcast bc = Bcast::none;
  std::int64_t image_step = 0;
};

ConvOperand bcast_conv(const TensorDesc& t, const ConvGeom& g) {
  const Shape& s = t.shape;
  if (s.rank > 4) return {};
  std::int64_t d[4];
  for (int i = 0; i < 4; ++i) d[i] = i < 4 - s.rank ? 1 : s[i - (4 - s.rank)];
  if (d[0] != 1 && d[0] != g.n) return {};
  const bool batched = d[0] == g.n && g.n != 1;
  if (d[1] == g.k && d[2] == g.p && d[3] == g.q) {
    if (s.rank >= 3 && t.layout != Layout::nchw) return {};  // channels-last operand
    return {Bcast::full, batched ? g.k * g.p * g.q : 0};
  }
  if (d[1] == g.k && d[2] == 1 && d[3] == 1) return {Bcast::col, batched ? g.k : 0};
  if (d[1] == 1 && d[2] == 1 && d[3] == 1) return {Bcast::scalar, batched ? 1 : 0};
  return {};
}

}  // namespace

// ---- gemm --------------------------------------------------------------------------------------

bool supports_gemm(const OpDesc& d) {
  const auto& p = d.p<GemmParams>();
  const Shape& a = d.inputs[0].shape;
  const Shape& b = d.inputs[1].shape;
  const std::int64_t m = p.trans_a ? a[1] : a[0], n = p.trans_b ? b[0] : b[1];
  std::size_t i = 2;
  if (p.has_bias && bcast_gemm(d.inputs[i++], m, n) == Bcast::none) return false;
  for (const PostOp& op : p.post_ops) {
    if (op.kind == PostOp::Kind::binary && bcast_gemm(d.inputs[i], m, n) == Bcast::none) return false;
    i += static_cast<std::size_t>(post_op_operands(op));
  }
  return true;  // every ActKind has an Eigen expression
}

std::size_t gemm_workspace(const OpDesc& d) {
  const auto& p = d.p<GemmParams>();
  for (const PostOp& op : p.post_ops)
    if (op.kind == PostOp::Kind::batchnorm) {
      const Shape& b = d.inputs[1].shape;
      return static_cast<std::size_t>(2 * (p.trans_b ? b[0] : b[1]));
    }
  return 0;
}

void gemm(const KernelArgs& args) {
  const ThreadScope threads(args.threads);
  const OpDesc& d = *args.desc;
  const auto& p = d.p<GemmParams>();
  const Shape& as = d.inputs[0].shape;
  const Shape& bs = d.inputs[1].shape;
  const Index m = p.trans_a ? as[1] : as[0], n = p.trans_b ? bs[0] : bs[1];
  const MapC a(args.in[0]->data(), as[0], as[1]);
  const MapC b(args.in[1]->data(), bs[0], bs[1]);
  MapM y(args.out[0]->mutable_data(), m, n);
  const auto product = [&](const auto& op_a, const auto& op_b) {
    if (p.beta == 0.f) {
      y.noalias() = p.alpha * op_a * op_b;  // y is never read: it may hold NaN
    } else {
      y *= p.beta;
      y.noalias() += p.alpha * op_a * op_b;
    }
  };
  if (!p.trans_a && !p.trans_b)
    product(a, b);
  else if (p.trans_a && !p.trans_b)
    product(a.transpose(), b);
  else if (!p.trans_a && p.trans_b)
    product(a, b.transpose());
  else
    product(a.transpose(), b.transpose());

  int i = 2;
  if (p.has_bias) {
    apply_operand(y, args.in[i]->data(), bcast_gemm(d.inputs[2], m, n), BinaryKind::add);
    ++i;
  }
  for (const PostOp& op : p.post_ops) {
    switch (op.kind) {
      case PostOp::Kind::activation: apply_act(y.array(), op.act); break;
      case PostOp::Kind::binary:
        apply_operand(y, args.in[i]->data(), bcast_gemm(d.inputs[static_cast<std::size_t>(i)], m, n), op.binary);
        break;
      case PostOp::Kind::batchnorm: {
        // Per column: y = y * s + t.
        float* s = args.workspace;
        float* t = args.workspace + n;
        fold_bn(args, i, op.epsilon, n, s, t);
        y.array().rowwise() *= RowVecC(s, n);
        y.array().rowwise() += RowVecC(t, n);
        break;
      }
      case PostOp::Kind::pool: break;  // conv2d only: validate() rejects it on gemm
    }
    i += post_op_operands(op);
  }
}

// ---- conv2d ------------------------------------------------------------------------------------

bool supports_conv2d(const OpDesc& d) {
  const auto& p = d.p<Conv2dParams>();
  if (p.groups != 1) return false;
  for (std::size_t i = 0; i < 2; ++i)
    if (d.inputs[i].layout != Layout::nchw) return false;  // x, w (and so y) NCHW
  const ConvGeom g = conv_geom(d);
  std::size_t i = p.has_bias ? 3 : 2;
  for (const PostOp& op : p.post_ops) {
    if (op.kind == PostOp::Kind::pool) return false;  // conv + maxpool: no Eigen expression here
    if (op.kind == PostOp::Kind::binary && bcast_conv(d.inputs[i], g).bc == Bcast::none) return false;
    i += static_cast<std::size_t>(post_op_operands(op));
  }
  auto outs = infer_outputs(d);
  return outs && (*outs)[0].layout == Layout::nchw;
}

std::size_t conv2d_workspace(const OpDesc& d) {
  const auto& p = d.p<Conv2dParams>();
  const ConvGeom g = conv_geom(d);
  std::size_t ws = g.direct ? 0 : static_cast<std::size_t>(g.c * g.r * g.s * g.p * g.q);
  for (const PostOp& op : p.post_ops)
    if (op.kind == PostOp::Kind::batchnorm) ws += static_cast<std::size_t>(2 * g.k);
  return ws;
}

void conv2d(const KernelArgs& args) {
  const ThreadScope threads(args.threads);
  const OpDesc& d = *args.desc;
  const auto& p = d.p<Conv2dParams>();
  const ConvGeom g = conv_geom(d);
  const std::int64_t crs = g.c * g.r * g.s, pq = g.p * g.q;
  const float* x = args.in[0]->data();
  const MapC w(args.in[1]->data(), g.k, crs);  // (K, C, R, S) row-major = (K, C*R*S)
  float* y = args.out[0]->mutable_data();
  float* col = args.workspace;
  float* bn = args.workspace + (g.direct ? 0 : crs * pq);

  // Fold every batchnorm of the chain once: (s, t) pairs in chain order.
  {
    int i = p.has_bias ? 3 : 2;
    float* f = bn;
    for (const PostOp& op : p.post_ops) {
      if (op.kind == PostOp::Kind::batchnorm) {
        fold_bn(args, i, op.epsilon, g.k, f, f + g.k);
        f += 2 * g.k;
      }
      i += post_op_operands(op);
    }
  }

  for (std::int64_t img = 0; img < g.n; ++img) {
    // x[img] is (C, H, W); col is (C*R*S, P*Q).
    const float* xi = x + img * g.c * g.h * g.w;
    if (!g.direct) {
      for (std::int64_t c = 0; c < g.c; ++c)
        for (std::int64_t r = 0; r < g.r; ++r)
          for (std::int64_t s = 0; s < g.s; ++s) {
            float* row = col + ((c * g.r + r) * g.s + s) * pq;
            for (std::int64_t op = 0; op < g.p; ++op) {
              const std::int64_t ih = op * p.stride_h - p.pad_top + r * p.dilation_h;
              float* out = row + op * g.q;
              if (ih < 0 || ih >= g.h) {
                for (std::int64_t oq = 0; oq < g.q; ++oq) out[oq] = 0.f;
                continue;
              }
              const float* in = xi + (c * g.h + ih) * g.w;
              for (std::int64_t oq = 0; oq < g.q; ++oq) {
                const std::int64_t iw = oq * p.stride_w - p.pad_left + s * p.dilation_w;
                out[oq] = iw >= 0 && iw < g.w ? in[iw] : 0.f;
              }
            }
          }
    }
    // y[img] is (K, P*Q) = w (K, C*R*S) * col (C*R*S, P*Q).
    MapM yi(y + img * g.k * pq, g.k, pq);
    yi.noalias() = w * MapC(g.direct ? xi : col, crs, pq);

    int i = 2;
    if (p.has_bias) {
      yi.array().colwise() += ColVecC(args.in[2]->data(), g.k);
      ++i;
    }
    const float* f = bn;
    for (const PostOp& op : p.post_ops) {
      switch (op.kind) {
        case PostOp::Kind::activation: apply_act(yi.array(), op.act); break;
        case PostOp::Kind::binary: {
          const ConvOperand o = bcast_conv(d.inputs[static_cast<std::size_t>(i)], g);
          apply_operand(yi, args.in[i]->data() + img * o.image_step, o.bc, op.binary);
          break;
        }
        case PostOp::Kind::batchnorm:
          yi.array().colwise() *= ColVecC(f, g.k);
          yi.array().colwise() += ColVecC(f + g.k, g.k);
          f += 2 * g.k;
          break;
        case PostOp::Kind::pool: break;  // never here: supports_conv2d declines a pool post-op
      }
      i += post_op_operands(op);
    }
  }
}

const Variant variant = {Isa::OPFUSE_EIGEN_ISA, supports_gemm,    gemm_workspace, gemm,
                         supports_conv2d,       conv2d_workspace, conv2d};

}  // namespace opfuse::peers::eigen::OPFUSE_EIGEN_NS
