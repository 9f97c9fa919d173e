// fuzz/fuzz_tensor.cpp - libFuzzer target: one serialized TensorProto, as in the input_<i>.pb
// files of ONNX's test data that `opfuse run --inputs DIR` and the examples read.
//
// Any dims, data type, raw_data or typed-data length, external-data reference or segment must
// come back as a TensorData whose payload matches its dims, or as a Status; the decoded size is
// bounded (64 MiB here) before anything is allocated.
#include <cstddef>
#include <cstdint>
#include <cstdlib>

#include "src/onnx/import.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  opfuse::Result<opfuse::onnx::TensorData> t = opfuse::onnx::parse_tensor(data, size, 64ull << 20);
  if (!t) return 0;
  // Accepted: the payload must be exactly what the dims say.
  std::int64_t n = 1;
  for (std::int64_t d : t->dims)
    if (d < 0 || __builtin_mul_overflow(n, d, &n)) std::abort();
  const std::size_t held = t->f32.size() + t->i64.size();
  if (held != static_cast<std::size_t>(n)) std::abort();
  return 0;
}
