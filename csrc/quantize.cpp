// Bucketed min-max quantization to 1/2/4/8-bit codes with stochastic or nearest rounding,
// packed little-endian inside each byte (code j of a byte sits at bits [j*b, j*b+b)).
// Each bucket is quantized independently, so buckets are the unit of parallel work; bucket
// sizes are multiples of 8 so every bucket starts on a byte boundary.
#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>

#include "compress_common.h"

namespace compcoll {
namespace {

constexpr size_t kTile = 256;

inline int32_t float_to_ibits(float f) { int32_t b; std::memcpy(&b, &f, 4); return b; }
inline float ibits_to_float(int32_t b) { float f; std::memcpy(&f, &b, 4); return f; }

template <int BITS, bool STOCHASTIC>
void quantize_bucket(const float* x, size_t len, size_t base, float mn, float inv, uint64_t seed,
                     uint8_t* out) {
  constexpr int per = 8 / BITS;
  constexpr float top = float((1 << BITS) - 1);
  const int32_t top_b = float_to_ibits(top);
  const uint32_t s_lo = uint32_t(seed), s_hi = uint32_t(seed >> 32);
  alignas(64) int32_t q[kTile];
  for (size_t t = 0; t < len; t += kTile) {
    const size_t m = std::min(kTile, len - t);
    const float* xt = x + t;
    const uint64_t first = base + t;
    if (STOCHASTIC && (first >> 32) != ((first + m - 1) >> 32)) {
      // A tile across a 2^32 index boundary (tensors beyond 4G elements): the scalar path.
      for (size_t j = 0; j < m; ++j) {
        float v = ibits_to_float(std::min(std::max(float_to_ibits((xt[j] - mn) * inv), 0), top_b));
        float f = float(int32_t(v));
        float c = std::min(f + float(counter_uniform(seed, first + j) < v - f), top);
        q[j] = is_finite_bits(float_to_bits(xt[j])) ? int32_t(c) : 0;
      }
    } else {
    // Within a tile the index's high word is constant, so the hash of (seed, index) runs on
    // 32-bit lanes and vectorizes.
    const uint32_t i_lo = uint32_t(first), key_hi = s_hi ^ (uint32_t(first >> 32) * 0x9e3779b9u);
    const int mi = int(m);
    // Every comparison below is between non-negative floats, done on their bit patterns as
    // integers: the same order, and the loop vectorizes under the default -ftrapping-math.
#pragma omp simd
    for (int j = 0; j < mi; ++j) {
      const float xv = xt[j];
      // Clamped to [0, top] first (NaN -> 0 or top; such inputs are masked below), so
      // truncation is floor.
      const float v = ibits_to_float(std::min(std::max(float_to_ibits((xv - mn) * inv), 0), top_b));
      const int32_t fi = int32_t(v);
      const float frac = v - float(fi);
      int32_t up;
      if constexpr (STOCHASTIC) {
        // Same value as counter_uniform(seed, base + t + j), written so it vectorizes.
        const uint32_t h = mix32(mix32((i_lo + uint32_t(j)) ^ s_lo) ^ key_hi);
        const float u = float(int32_t(h >> 8)) * (1.0f / 16777216.0f);
        // Round up with probability equal to the fractional part: E[code] = v (unbiased).
        up = float_to_ibits(u) < float_to_ibits(frac);
      } else {
        up = float_to_ibits(frac) >= float_to_ibits(0.5f);
      }
      const int32_t fin = (float_to_ibits(xv) & 0x7f800000) != 0x7f800000;
      q[j] = std::min(fi + up, int32_t(top)) & -fin;
    }
    }
    uint8_t* o = out + (t / per);
    if constexpr (BITS == 8) {
      for (size_t j = 0; j < m; ++j) o[j] = uint8_t(q[j]);
    } else {
      for (size_t j = 0; j < (m + per - 1) / per; ++j) {
        uint32_t byte = 0;
        for (int s = 0; s < per; ++s)
          byte |= (j * per + s < m ? uint32_t(q[j * per + s]) : 0u) << (s * BITS);
        o[j] = uint8_t(byte);
      }
    }
  }
}

template <int BITS>
int64_t quantize_all(const float* x, size_t n, size_t bucket, uint64_t seed, bool stochastic,
                     uint8_t* codes, float* mins, float* scales) {
  constexpr int per = 8 / BITS;
  const size_t nb = (n + bucket - 1) / bucket;
  int64_t nonfinite = 0;
  int nt = num_threads();
#pragma omp parallel for num_threads(nt) if (parallel_ok(nt, n)) schedule(static) reduction(+ : nonfinite)
  for (ptrdiff_t b = 0; b < ptrdiff_t(nb); ++b) {
    const size_t lo = size_t(b) * bucket, len = std::min(bucket, n - lo);
    const float* xb = x + lo;
    float mn = INFINITY, mx = -INFINITY;
    int64_t bad = 0;
#pragma omp simd reduction(min : mn) reduction(max : mx) reduction(+ : bad)
    for (size_t i = 0; i < len; ++i) {
      const float v = xb[i];
      const bool fin = std::fabs(v) <= FLT_MAX;
      mn = std::min(mn, fin ? v : INFINITY);
      mx = std::max(mx, fin ? v : -INFINITY);
      bad += fin ? 0 : 1;
    }
    if (mn > mx) mn = mx = 0.0f;  // nothing finite in the bucket: every code decodes to 0
    // The step is computed in double so a range near FLT_MAX does not overflow before dividing.
    float scale = float((double(mx) - double(mn)) / double((1 << BITS) - 1));
    float inv = scale > 0.0f ? 1.0f / scale : 0.0f;
    if (inv > FLT_MAX) inv = FLT_MAX;  // a subnormal step: keep (x - min) * inv finite
    mins[b] = mn;
    scales[b] = scale;
    nonfinite += bad;
    if (stochastic) quantize_bucket<BITS, true>(xb, len, lo, mn, inv, seed, codes + lo / per);
    else quantize_bucket<BITS, false>(xb, len, lo, mn, inv, seed, codes + lo / per);
  }
  return nonfinite;
}

template <int BITS>
void dequantize_all(const uint8_t* codes, const float* mins, const float* scales, size_t n,
                    size_t bucket, float* out) {
  constexpr int per = 8 / BITS;
  constexpr uint32_t mask = (1u << BITS) - 1;
  const size_t nb = (n + bucket - 1) / bucket;
  int nt = num_threads();
#pragma omp parallel for num_threads(nt) if (parallel_ok(nt, n)) schedule(static)
  for (ptrdiff_t b = 0; b < ptrdiff_t(nb); ++b) {
    const size_t lo = size_t(b) * bucket, len = std::min(bucket, n - lo);
    const float mn = mins[b], sc = scales[b];
    const uint8_t* cb = codes + lo / per;
    float* ob = out + lo;
    for (size_t i = 0; i < len; ++i) {
      uint32_t c = (uint32_t(cb[i / per]) >> ((i % per) * BITS)) & mask;
      ob[i] = mn + float(c) * sc;
    }
  }
}

size_t packed_bytes(size_t n, int bits) { return (n * size_t(bits) + 7) / 8; }

void check_bits_bucket(int bits, size_t bucket) {
  if (bits != 1 && bits != 2 && bits != 4 && bits != 8)
    throw std::invalid_argument("bits must be one of 1, 2, 4, 8; got " + std::to_string(bits));
  if (bucket == 0 || bucket % 8 != 0)
    throw std::invalid_argument("bucket_size must be a positive multiple of 8; got " +
                                std::to_string(bucket));
}

}  // namespace

void register_quantize(nb::module_& m) {
  m.def(
      "quantize",
      [](HostArray x, HostArray codes, HostArray mins, HostArray scales, int bits,
         size_t bucket, uint64_t seed, bool stochastic) {
        check_bits_bucket(bits, bucket);
        const float* xp = f32_data(x, "quantize");
        size_t n = x.size(), nb = (n + bucket - 1) / bucket;
        auto* cp = typed_data<uint8_t>(codes, packed_bytes(n, bits), "quantize codes");
        auto* mp = typed_data<float>(mins, nb, "quantize mins");
        auto* sp = typed_data<float>(scales, nb, "quantize scales");
        nb::gil_scoped_release nogil;
        switch (bits) {
          case 1: return quantize_all<1>(xp, n, bucket, seed, stochastic, cp, mp, sp);
          case 2: return quantize_all<2>(xp, n, bucket, seed, stochastic, cp, mp, sp);
          case 4: return quantize_all<4>(xp, n, bucket, seed, stochastic, cp, mp, sp);
          default: return quantize_all<8>(xp, n, bucket, seed, stochastic, cp, mp, sp);
        }
      },
      nb::arg("x"), nb::arg("codes"), nb::arg("mins"), nb::arg("scales"), nb::arg("bits"),
      nb::arg("bucket_size"), nb::arg("seed"), nb::arg("stochastic"),
      "Quantize float32 x per bucket to packed codes; returns the count of non-finite inputs "
      "(encoded as code 0, to be sent separately).");
  m.def(
      "dequantize",
      [](HostArray codes, HostArray mins, HostArray scales, HostArray out, int bits, size_t bucket) {
        check_bits_bucket(bits, bucket);
        size_t n = out.size(), nb = (n + bucket - 1) / bucket;
        if (out.dtype() != nb::dtype<float>()) throw std::invalid_argument("dequantize: out must be float32");
        auto* op = static_cast<float*>(out.data());
        auto* cp = typed_data<uint8_t>(codes, packed_bytes(n, bits), "dequantize codes");
        auto* mp = typed_data<float>(mins, nb, "dequantize mins");
        auto* sp = typed_data<float>(scales, nb, "dequantize scales");
        nb::gil_scoped_release nogil;
        switch (bits) {
          case 1: return dequantize_all<1>(cp, mp, sp, n, bucket, op);
          case 2: return dequantize_all<2>(cp, mp, sp, n, bucket, op);
          case 4: return dequantize_all<4>(cp, mp, sp, n, bucket, op);
          default: return dequantize_all<8>(cp, mp, sp, n, bucket, op);
        }
      },
      nb::arg("codes"), nb::arg("mins"), nb::arg("scales"), nb::arg("out"), nb::arg("bits"),
      nb::arg("bucket_size"), "out = min + code * scale per bucket.");
}

}  // namespace compcoll
