// Helpers shared by the compression kernels: a counter-based RNG, key transforms, array checks.
#pragma once
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "common.h"

namespace compcoll {

// murmur3's 32-bit finalizer: a bijective avalanche mix, cheap enough to vectorize.
inline uint32_t mix32(uint32_t h) {
  h ^= h >> 16; h *= 0x85ebca6bu; h ^= h >> 13; h *= 0xc2b2ae35u; h ^= h >> 16;
  return h;
}

// Uniform float in [0, 1) drawn from (seed, index) alone, so a draw does not depend on which
// thread computes it or in what order: results are identical for any thread count.
inline float counter_uniform(uint64_t seed, uint64_t i) {
  uint32_t h = mix32(uint32_t(i) ^ uint32_t(seed));
  h = mix32(h ^ uint32_t(seed >> 32) ^ (uint32_t(i >> 32) * 0x9e3779b9u));
  return float(h >> 8) * (1.0f / 16777216.0f);
}

// |x| as an unsigned key: ordering keys orders magnitudes, and NaN keys sit above +Inf,
// so non-finite values always rank first and are never dropped before finite ones.
inline uint32_t abs_key(float x) { return float_to_bits(x) & 0x7fffffffu; }
inline bool is_finite_bits(uint32_t b) { return (b & 0x7f800000u) != 0x7f800000u; }

inline const float* f32_data(const HostArray& a, const char* what) {
  if (a.dtype() != nb::dtype<float>())
    throw std::invalid_argument(std::string(what) + ": expected a float32 array");
  return static_cast<const float*>(a.data());
}

template <class T>
inline T* typed_data(HostArray& a, size_t need, const char* what) {
  if (a.dtype() != nb::dtype<T>() || a.size() != need)
    throw std::invalid_argument(std::string(what) + ": expected " + std::to_string(need) +
                                " elements of the right dtype, got " + std::to_string(a.size()));
  return static_cast<T*>(a.data());
}

inline bool parallel_ok(int nt, size_t n) { return nt > 1 && n > kParallelGrain; }

void register_quantize(nb::module_& m);
void register_sign(nb::module_& m);
void register_topk(nb::module_& m);
void register_sparse(nb::module_& m);

}  // namespace compcoll
