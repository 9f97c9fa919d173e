// src/threads.hpp - the machine's hardware thread count, read once per process.
#pragma once

namespace opfuse::detail {

// std::thread::hardware_concurrency() (at least 1), read on the first call and kept. glibc
// answers hardware_concurrency() by opening and parsing /sys/devices/system/cpu/online every
// time: system calls and a file parse, which the GEMM and 1x1 convolution kernels had paid on
// every execute (an openat under strace per call of it; on the batch-1 classifier GEMV a
// measurable share of the call, see the gemm rows of reports/REPORT.md). One value per process
// also keeps a kernel's workspace, sized at prepare for this many threads (prepare has no
// context), consistent with the team it clamps to this count at execute.
int hardware_threads() noexcept;

// A requested thread count as run: itself when positive, 0 (or less) meaning all cores.
int resolve_threads(int requested) noexcept;

}  // namespace opfuse::detail
