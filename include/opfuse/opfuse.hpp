/// @file
/// opfuse - deep-learning inference operators in three stages: naive, simd, fused.
#pragma once

#include "opfuse/context.hpp"
#include "opfuse/explain.hpp"
#include "opfuse/ops.hpp"
#include "opfuse/primitive.hpp"
#include "opfuse/registry.hpp"
#include "opfuse/status.hpp"
#include "opfuse/tensor.hpp"
