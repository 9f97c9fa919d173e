// naive/naive.hpp - the naive stage: plain scalar C++, the reference every other stage is
// checked against. No intrinsics, no OpenMP; one file per op family.
#pragma once

#include <cstddef>

#include "opfuse/ops.hpp"
#include "opfuse/registry.hpp"

namespace opfuse::naive {

void gemm(const KernelArgs& a);            // gemm.cpp
void conv2d(const KernelArgs& a);          // conv.cpp
void batchnorm(const KernelArgs& a);       // batchnorm.cpp
void unary(const KernelArgs& a);           // eltwise.cpp: relu .. hardswish
void binary(const KernelArgs& a);          // eltwise.cpp: add, sub, mul, div
void eltwise_chain(const KernelArgs& a);   // eltwise.cpp
void pool2d(const KernelArgs& a);          // pool.cpp: maxpool2d, avgpool2d
void global_avgpool(const KernelArgs& a);  // pool.cpp
void softmax(const KernelArgs& a);         // softmax.cpp
void layernorm(const KernelArgs& a);       // norm.cpp
void rmsnorm(const KernelArgs& a);         // norm.cpp
void attention(const KernelArgs& a);       // attention.cpp
std::size_t attention_workspace(const OpDesc& d);
void inverted_residual(const KernelArgs& a);  // inverted_residual.cpp
std::size_t inverted_residual_workspace(const OpDesc& d);
std::size_t conv2d_workspace(const OpDesc& d);  // conv.cpp: the conv output before a pool post-op

}  // namespace opfuse::naive
