// Helpers shared by the compression kernels: a counter-based RNG, key transforms, array checks.
#pragma once
#include <algorithm>
#include <cstdint>
#include <deque>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "common.h"

#ifdef __BMI2__
#include <immintrin.h>
#endif

namespace compcoll {

// murmur3's 32-bit finalizer: a bijective avalanche mix, cheap enough to vectorize.
inline uint32_t mix32(uint32_t h) {
  h ^= h >> 16; h *= 0x85ebca6bu; h ^= h >> 13; h *= 0xc2b2ae35u; h ^= h >> 16;
  return h;
}

// The counter RNG: for each seed and each 2^32 block of indices, a Weyl sequence
// add + i * mul (mod 2^32, mul odd, so it visits every value once) through murmur3's
// finalizer, as SplitMix does: one hash per value. The stream's constants come from the whole
// seed and the index's high word, so they are fixed over any run of indices below a 2^32
// boundary and the per-index part runs on 32-bit lanes and vectorizes. Different seeds get
// different multipliers, not only shifted copies of one stream.
struct RngStream {
  uint32_t add, mul;  // the sequence's value at the run's first index, and its step
};
// The stream positioned at index i: mix32(add) is the hash of index i, and stepping add by mul
// gives the next index's (a loop carries it as `linear(w : step)`: one vector add per step).
inline RngStream rng_stream(uint64_t seed, uint64_t i) {
  const uint32_t a = mix32(uint32_t(seed) ^ mix32(uint32_t(seed >> 32) ^
                                                  (uint32_t(i >> 32) * 0x9e3779b9u)));
  const uint32_t mul = mix32(a + 0x6a09e667u) | 1u;
  return {a + uint32_t(i) * mul, mul};
}
// 24 random bits as a float in [0, 1), exact; the int32 detour lets the conversion vectorize.
inline float rng_unit(uint32_t h) { return float(int32_t(h >> 8)) * (1.0f / 16777216.0f); }

// Uniform float in [0, 1) drawn from (seed, index) alone, so a draw does not depend on which
// thread computes it or in what order: results are identical for any thread count.
inline float counter_uniform(uint64_t seed, uint64_t i) {
  return rng_unit(mix32(rng_stream(seed, i).add));
}

// Length of the run starting at index `first` (at most `want`) that does not cross a 2^32
// boundary; within it rng_stream is constant. A multiple of 8 whenever first and want are.
inline size_t rng_run(uint64_t first, size_t want) {
  const uint64_t to_boundary = (uint64_t(1) << 32) - (first & 0xffffffffu);
  return size_t(std::min<uint64_t>(want, to_boundary));
}

// |x| as an unsigned key: ordering keys orders magnitudes, and NaN keys sit above +Inf,
// so non-finite values always rank first and are never dropped before finite ones.
inline uint32_t abs_key(float x) { return float_to_bits(x) & 0x7fffffffu; }
inline bool is_finite_bits(uint32_t b) { return (b & 0x7f800000u) != 0x7f800000u; }

template <class A>
inline const float* f32_data(const A& a, const char* what) {
  if (a.dtype() != nb::dtype<float>())
    throw std::invalid_argument(std::string(what) + ": expected a float32 array");
  require_aligned(a, alignof(float), what);
  return static_cast<const float*>(a.data());
}

// The array's data as T* (const T* for a read-only HostInput), checked for dtype, size and
// alignment.
template <class T, class A>
inline auto* typed_data(A& a, size_t need, const char* what) {
  using P = std::conditional_t<std::is_const_v<std::remove_pointer_t<decltype(a.data())>>,
                               const T*, T*>;
  if (a.dtype() != nb::dtype<T>() || a.size() != need)
    throw std::invalid_argument(std::string(what) + ": expected " + std::to_string(need) +
                                " elements of the right dtype, got " + std::to_string(a.size()));
  require_aligned(a, alignof(T), what);
  return static_cast<P>(a.data());
}

// A read-only input that may come straight from received bytes, at any offset: its data as
// const T* when aligned, else an aligned copy kept alive in `keep` (kernels never see a
// misaligned pointer). Checked for dtype and size as typed_data does.
template <class T>
inline const T* aligned_input(const HostInput& a, size_t need, const char* what,
                              std::deque<AlignedView>& keep) {
  if (a.dtype() != nb::dtype<T>() || a.size() != need)
    throw std::invalid_argument(std::string(what) + ": expected " + std::to_string(need) +
                                " elements of the right dtype, got " + std::to_string(a.size()));
  if (need == 0 || is_aligned(a.data(), alignof(T))) return static_cast<const T*>(a.data());
  keep.emplace_back(a.data(), need * sizeof(T), alignof(T));
  return static_cast<const T*>(keep.back().get());
}

inline bool parallel_ok(int nt, size_t n) { return nt > 1 && n > kParallelGrain; }

// Elements per unit of parallel work in the bucket loops: large enough that the loop overhead
// is nothing, small enough that a thread that starts late (the cores are shared with other
// processes) finds the work already taken by the others instead of holding up the join.
constexpr size_t kChunkElems = size_t(1) << 15;

// Runs f(bucket index, first element, length) over every bucket, in parallel above the grain,
// and returns the sum of what f returns (a count of non-finite inputs). Buckets are handed out
// dynamically; results do not depend on which thread ran a bucket.
template <class F>
int64_t for_each_bucket(size_t n, size_t bucket, F&& f) {
  const size_t nb = (n + bucket - 1) / bucket;
  const int nt = num_threads();
  const int chunk = int(std::max<size_t>(1, kChunkElems / bucket));
  int64_t total = 0;
#pragma omp parallel for num_threads(nt) if (parallel_ok(nt, n)) schedule(dynamic, chunk) \
    reduction(+ : total)
  for (ptrdiff_t b = 0; b < ptrdiff_t(nb); ++b) {
    const size_t lo = size_t(b) * bucket;
    total += f(size_t(b), lo, std::min(bucket, n - lo));
  }
  return total;
}

// Values per tile: kernels visit a bucket a tile at a time, through small L1 buffers.
constexpr size_t kTile = 256;

// Asks for x[from, from + len) (clipped to n) to be brought into cache. Kernels that read a
// bucket twice (its scale, then its codes) call it before the compute-bound second pass, so the
// next bucket's memory traffic overlaps that work instead of following it.
inline void prefetch_next_bucket(const float* x, size_t n, size_t from, size_t len) {
  const size_t end = std::min(n, from + len);
  for (size_t k = from; k < end; k += 64 / sizeof(float)) __builtin_prefetch(x + k);
}

// Codes of BITS (1, 2 or 4) bits packed little-endian inside each byte: code j of a byte sits at
// bits [j*BITS, j*BITS+BITS). pack_codes reads m one-byte codes (padded with zeros to a multiple
// of 8) and writes ceil(m*BITS/8) bytes; unpack_codes is its inverse. With BMI2 each group of
// eight codes is one pext/pdep.
template <int BITS>
constexpr uint64_t code_lanes() { return 0x0101010101010101ull * ((1u << BITS) - 1); }

template <int BITS>
inline uint64_t pack8(uint64_t w) {
#ifdef __BMI2__
  return _pext_u64(w, code_lanes<BITS>());
#else
  uint64_t r = 0;
  for (int s = 0; s < 8; ++s) r |= ((w >> (8 * s)) & ((1u << BITS) - 1)) << (s * BITS);
  return r;
#endif
}

template <int BITS>
inline uint64_t unpack8(uint64_t r) {
#ifdef __BMI2__
  return _pdep_u64(r, code_lanes<BITS>());
#else
  uint64_t w = 0;
  for (int s = 0; s < 8; ++s) w |= ((r >> (s * BITS)) & ((1u << BITS) - 1)) << (8 * s);
  return w;
#endif
}

// Whole groups copy a compile-time BITS bytes (one load or store); only a ragged last group
// copies fewer.
template <int BITS>
inline void pack_codes(const uint8_t* q, size_t m, uint8_t* out) {
  const size_t nbytes = (m * BITS + 7) / 8, whole = m / 8;
  for (size_t g = 0; g < whole; ++g) {
    uint64_t w;
    std::memcpy(&w, q + 8 * g, 8);
    const uint64_t r = pack8<BITS>(w);
    std::memcpy(out + g * BITS, &r, BITS);
  }
  if (m % 8) {
    uint64_t w;
    std::memcpy(&w, q + 8 * whole, 8);
    const uint64_t r = pack8<BITS>(w);
    std::memcpy(out + whole * BITS, &r, nbytes - whole * BITS);
  }
}

template <int BITS>
inline void unpack_codes(const uint8_t* in, size_t m, uint8_t* q) {
  const size_t nbytes = (m * BITS + 7) / 8, whole = m / 8;
  for (size_t g = 0; g < whole; ++g) {
    uint64_t r = 0;
    std::memcpy(&r, in + g * BITS, BITS);
    const uint64_t w = unpack8<BITS>(r);
    std::memcpy(q + 8 * g, &w, 8);
  }
  if (m % 8) {
    uint64_t r = 0;
    std::memcpy(&r, in + whole * BITS, nbytes - whole * BITS);
    const uint64_t w = unpack8<BITS>(r);
    std::memcpy(q + 8 * whole, &w, 8);
  }
}

// Decodes BITS-bit codes (8: one per byte) bucket by bucket into float32: with
// decode = for_bucket(b), out[i] = decode(code i) for every value of bucket b. Codes are unpacked
// a tile at a time into L1, and the per-value loop vectorizes once decode is inlined.
// ACC adds the decoded values to out instead of overwriting it (a sum of payloads decoded
// without a scratch array and a second pass).
template <int BITS, bool ACC = false, class ForBucket>
void decode_codes(const uint8_t* codes, size_t n, size_t bucket, float* out,
                  ForBucket&& for_bucket) {
  for_each_bucket(n, bucket, [&](size_t b, size_t lo, size_t len) -> int64_t {
    const auto decode = for_bucket(b);
    float* __restrict ob = out + lo;
    alignas(64) uint8_t q[kTile];
    for (size_t t = 0; t < len; t += kTile) {
      const size_t m = std::min(kTile, len - t);
      // Even whole bytes go through the L1 tile: reading them inside the conversion loop was
      // a quarter slower.
      if constexpr (BITS < 8) unpack_codes<BITS>(codes + (lo + t) * BITS / 8, m, q);
      else std::memcpy(q, codes + lo + t, m);
#pragma omp simd
      for (size_t i = 0; i < m; ++i) {
        if constexpr (ACC) ob[t + i] += decode(uint32_t(q[i]));
        else ob[t + i] = decode(uint32_t(q[i]));
      }
    }
    return 0;
  });
}

void register_quantize(nb::module_& m);
void register_sign(nb::module_& m);
void register_topk(nb::module_& m);
void register_sparse(nb::module_& m);
void register_unbiased(nb::module_& m);
void register_checksum(nb::module_& m);

}  // namespace compcoll
