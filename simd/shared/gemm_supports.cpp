// simd/shared/gemm_supports.cpp - ISA-independent parts of the simd gemm: its supports()
// predicate and the cache sizes its blocking is derived from (compiled once, not per ISA).
#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <fstream>
#include <string>

#include "simd/simd.hpp"

namespace opfuse::simd {

namespace {

// Size in bytes of the data or unified cache of `level` of cpu0 from sysfs; 0 if unknown.
std::size_t sysfs_cache(int level) {
  for (int index = 0; index < 8; ++index) {
    const std::string dir = "/sys/devices/system/cpu/cpu0/cache/index" + std::to_string(index) + "/";
    std::ifstream lv(dir + "level"), ty(dir + "type"), sz(dir + "size");
    int l = 0;
    std::string type, size;
    if (!(lv >> l) || !(ty >> type) || !(sz >> size)) break;
    if (l != level || type == "Instruction") continue;
    std::size_t v = 0, i = 0;
    for (; i < size.size() && size[i] >= '0' && size[i] <= '9'; ++i)
      v = v * 10 + static_cast<std::size_t>(size[i] - '0');
    if (i < size.size() && (size[i] == 'K' || size[i] == 'k')) v *= 1024;
    if (i < size.size() && (size[i] == 'M' || size[i] == 'm')) v *= 1024 * 1024;
    return v;
  }
  return 0;
}

std::size_t sysconf_cache(int name) {
  const long v = sysconf(name);
  return v > 0 ? static_cast<std::size_t>(v) : 0;
}

// sysfs first (a hypervisor's CPUID, which sysconf reads, may report nonsense such as a 320 MiB
// L3), then sysconf, then the default; each clamped to a plausible range.
std::size_t pick(std::size_t sysfs, std::size_t conf, std::size_t fallback, std::size_t lo, std::size_t hi) {
  const std::size_t v = sysfs ? sysfs : (conf ? conf : fallback);
  return std::clamp(v, lo, hi);
}

CacheSizes detect() {
  CacheSizes c;
  c.l1 = pick(sysfs_cache(1), sysconf_cache(_SC_LEVEL1_DCACHE_SIZE), c.l1, 16 << 10, 256 << 10);
  c.l2 = pick(sysfs_cache(2), sysconf_cache(_SC_LEVEL2_CACHE_SIZE), c.l2, 256 << 10, 16 << 20);
  c.l3 = pick(sysfs_cache(3), sysconf_cache(_SC_LEVEL3_CACHE_SIZE), c.l3, 1 << 20, 256 << 20);
  return c;
}

}  // namespace

const CacheSizes& cache_sizes() noexcept {
  static const CacheSizes sizes = detect();
  return sizes;
}

bool gemm_supports(const OpDesc& desc) {
  for (const PostOp& p : desc.p<GemmParams>().post_ops)
    if (p.kind == PostOp::Kind::activation && !act_supported(p.act.kind)) return false;  // activation.hpp's kinds
  return true;
}

}  // namespace opfuse::simd
