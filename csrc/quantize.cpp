// Bucketed min-max quantization to 1/2/4/8-bit codes with stochastic or nearest rounding,
// packed little-endian inside each byte (code j of a byte sits at bits [j*b, j*b+b)).
// Each bucket is quantized independently, so buckets are the unit of parallel work; bucket
// sizes are multiples of 8 so every bucket starts on a byte boundary.
#include <algorithm>
#include <cmath>

#include "compress_common.h"

namespace compcoll {
namespace {

constexpr size_t kTile = 256;

template <int BITS>
void quantize_bucket(const float* x, size_t len, size_t base, float mn, float inv, uint64_t seed,
                     bool stochastic, uint8_t* out) {
  constexpr int per = 8 / BITS;
  constexpr float top = float((1 << BITS) - 1);
  uint8_t q[kTile];
  for (size_t t = 0; t < len; t += kTile) {
    size_t m = std::min(kTile, len - t);
    for (size_t j = 0; j < m; ++j) {
      float xv = x[t + j];
      float v = (xv - mn) * inv;
      float f = std::floor(v);
      // Round up with probability equal to the fractional part: E[code] = v (unbiased).
      float up = stochastic ? float(counter_uniform(seed, base + t + j) < v - f)
                            : float(v - f >= 0.5f);
      float c = std::min(std::max(f + up, 0.0f), top);
      q[j] = is_finite_bits(float_to_bits(xv)) ? uint8_t(c) : uint8_t(0);
    }
    uint8_t* o = out + (t / per);
    if constexpr (BITS == 8) {
      std::copy(q, q + m, o);
    } else {
      for (size_t j = 0; j < (m + per - 1) / per; ++j) {
        uint8_t byte = 0;
        for (int s = 0; s < per && j * per + s < m; ++s) byte |= uint8_t(q[j * per + s] << (s * BITS));
        o[j] = byte;
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
    for (size_t i = 0; i < len; ++i) {
      float v = xb[i];
      bool fin = is_finite_bits(float_to_bits(v));
      mn = fin ? std::min(mn, v) : mn;
      mx = fin ? std::max(mx, v) : mx;
      bad += !fin;
    }
    if (mn > mx) mn = mx = 0.0f;  // nothing finite in the bucket: every code decodes to 0
    // The step is computed in double so a range near FLT_MAX does not overflow before dividing.
    float scale = float((double(mx) - double(mn)) / double((1 << BITS) - 1));
    float inv = scale > 0.0f ? 1.0f / scale : 0.0f;
    mins[b] = mn;
    scales[b] = scale;
    nonfinite += bad;
    quantize_bucket<BITS>(xb, len, lo, mn, inv, seed, stochastic, codes + lo / per);
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
