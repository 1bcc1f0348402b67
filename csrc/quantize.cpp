// Bucketed min-max quantization to 1/2/4/8-bit codes with stochastic or nearest rounding,
// packed little-endian inside each byte (code j of a byte sits at bits [j*b, j*b+b)).
// Each bucket is quantized independently, so buckets are the unit of parallel work; bucket
// sizes are multiples of 8 so every bucket starts on a byte boundary.
#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <vector>

#include "compress_common.h"

namespace compcoll {
namespace {

inline int32_t float_to_ibits(float f) { int32_t b; std::memcpy(&b, &f, 4); return b; }
inline float ibits_to_float(int32_t b) { float f; std::memcpy(&f, &b, 4); return f; }

// Finite min and max of a bucket and its count of non-finite values, on integer keys that order
// like the floats (sign-magnitude flipped to two's complement): integer min/max vectorize
// exactly, with no NaN rules to respect.
inline int32_t order_key(uint32_t u) { return int32_t(u ^ ((uint32_t(int32_t(u) >> 31)) >> 1)); }
inline float key_to_float(int32_t k) { return bits_to_float(uint32_t(k) ^ (uint32_t(k >> 31) >> 1)); }

uint32_t finite_range(const float* __restrict x, size_t len, float& mn, float& mx) {
  int32_t lo = INT32_MAX, hi = INT32_MIN;
  uint32_t bad = 0;
#pragma omp simd reduction(min : lo) reduction(max : hi) reduction(+ : bad)
  for (size_t i = 0; i < len; ++i) {
    const uint32_t u = float_to_bits(x[i]);
    const bool fin = (u & 0x7f800000u) != 0x7f800000u;
    const int32_t k = order_key(u);
    lo = std::min(lo, fin ? k : INT32_MAX);
    hi = std::max(hi, fin ? k : INT32_MIN);
    bad += fin ? 0u : 1u;
  }
  if (lo > hi) lo = hi = 0;  // nothing finite in the bucket: every code decodes to 0
  mn = key_to_float(lo);
  mx = key_to_float(hi);
  return bad;
}

// A bucket's grid: its first value (mn), step and the step's inverse, and the code that
// decodes to exactly zero (zc; -1 where zero is not inside the grid). Where the range spans
// zero (4 bits and up), the grid is shifted so that zero is one of its points, at one level
// fewer: an exact zero (a dead unit's gradient, an embedding row no sample used) is sent as
// zero, not as rounding noise that an Adam-type optimizer would turn into a full-size step.
// With contractions off, mn + zc * step is -(zc * step) + (zc * step): exactly 0.
struct Grid {
  float mn, scale, inv;
  int32_t zc;
};

inline Grid bucket_grid(float mn, float mx, int32_t top) {
  // The step is computed in double so a range near FLT_MAX does not overflow before dividing.
  Grid g{mn, float((double(mx) - double(mn)) / double(top)), 0.0f, mn == 0.0f ? 0 : -1};
  if (mn < 0.0f && mx >= 0.0f && top >= 15) {
    const double step = mx == 0.0f ? -double(mn) / top : (double(mx) - double(mn)) / (top - 1);
    const float scale = float(step);
    const int32_t k = mx == 0.0f ? top
                                 : std::min(std::max(int32_t(std::ceil(-double(mn) / step)), 1),
                                            top - 1);
    const float kscale = float(k) * scale;
    if (std::isfinite(kscale) && scale > 0.0f) g = Grid{-kscale, scale, 0.0f, k};
  }
  g.inv = g.scale > 0.0f ? 1.0f / g.scale : 0.0f;
  if (g.inv > FLT_MAX) g.inv = FLT_MAX;  // a subnormal step: keep (x - min) * inv finite
  return g;
}

// One code per value, written as a byte into q: floor((x - mn) * inv) rounded up with probability
// equal to the fractional part (stochastic) or at >= 0.5 (nearest); non-finite values get 0,
// and zeros the grid's zero code zc (when it has one, zc >= 0) whatever the rounding.
template <int BITS, bool STOCHASTIC>
void bucket_codes(const float* __restrict x, int m, uint64_t first, float mn, float inv,
                  int32_t zc, uint64_t seed, uint8_t* __restrict q) {
  const int32_t top = (1 << BITS) - 1;
  const int32_t zon = -int32_t(zc >= 0), zcode = std::max(zc, 0);
  const int32_t top_b = float_to_ibits(float(top));
  const RngStream rng = rng_stream(seed, first);
  const uint32_t step = rng.mul;
  uint32_t w = rng.add;  // the Weyl sequence, stepped by an add per value
  // Comparisons between non-negative floats are done on their bit patterns as integers: the
  // same order, and the loop vectorizes under the default -ftrapping-math.
#pragma omp simd linear(w : step)
  for (int j = 0; j < m; ++j) {
    const float xv = x[j];
    // Clamped to [0, top] first (NaN -> 0 or top; such inputs are masked below), so
    // truncation is floor.
    const float v = ibits_to_float(std::min(std::max(float_to_ibits((xv - mn) * inv), 0), top_b));
    const int32_t fi = int32_t(v);
    const int32_t frac = float_to_ibits(v - float(fi));
    int32_t up;
    if constexpr (STOCHASTIC) {
      // Round up with probability equal to the fractional part: E[code] = v (unbiased).
      up = float_to_ibits(rng_unit(mix32(w))) < frac;
      w += step;
    } else {
      up = frac >= float_to_ibits(0.5f);
    }
    const int32_t xb = float_to_ibits(xv);
    const int32_t fin = (xb & 0x7f800000) != 0x7f800000;
    const int32_t zero = -int32_t((xb & 0x7fffffff) == 0) & zon;  // +-0 on a grid with 0
    q[j] = uint8_t(((std::min(fi + up, top) & -fin) & ~zero) | (zcode & zero));
  }
}

template <int BITS, bool STOCHASTIC>
void quantize_bucket(const float* x, size_t len, uint64_t base, const Grid& g, uint64_t seed,
                     uint8_t* out) {
  alignas(64) uint8_t q[kTile];
  for (size_t t = 0; t < len;) {
    // Tiles stop at 2^32 index boundaries so the RNG's high word is fixed in each.
    const size_t m = rng_run(base + t, std::min(kTile, len - t));
    if constexpr (BITS == 8) {
      bucket_codes<8, STOCHASTIC>(x + t, int(m), base + t, g.mn, g.inv, g.zc, seed, out + t);
    } else {
      bucket_codes<BITS, STOCHASTIC>(x + t, int(m), base + t, g.mn, g.inv, g.zc, seed, q);
      std::memset(q + m, 0, (8 - m % 8) % 8);
      pack_codes<BITS>(q, m, out + t * BITS / 8);
    }
    t += m;
  }
}

template <int BITS>
int64_t quantize_all(const float* x, size_t n, size_t bucket, uint64_t seed, bool stochastic,
                     uint8_t* codes, float* mins, float* scales) {
  return for_each_bucket(n, bucket, [&](size_t b, size_t lo, size_t len) -> int64_t {
    float mn, mx;
    // Range and codes in one visit of the bucket: the second pass reads it from L1.
    const uint32_t bad = finite_range(x + lo, len, mn, mx);
    const Grid g = bucket_grid(mn, mx, (1 << BITS) - 1);
    mins[b] = g.mn;
    scales[b] = g.scale;
    uint8_t* out = codes + lo * BITS / 8;
    prefetch_next_bucket(x, n, lo + len, len);
    if (stochastic) quantize_bucket<BITS, true>(x + lo, len, lo, g, seed, out);
    else quantize_bucket<BITS, false>(x + lo, len, lo, g, seed, out);
    return bad;
  });
}

// Error feedback fused into quantization: per bucket, c = x + residual (kept in cache),
// c is quantized exactly as quantize_all would quantize it, and residual_out = c - decoded
// codes, so one visit of the data replaces compensate, quantize, decode and update.
// residual_out may be residual itself (each bucket is read before it is written). Where c is
// not finite, residual_out gets c itself (NaN/Inf), for the caller to move into the payload's
// side list; returns how many such values there are.
template <int BITS>
int64_t quantize_feedback_all(const float* x, const float* res, float* res_out, size_t n,
                              size_t bucket, uint64_t seed, bool stochastic, uint8_t* codes,
                              float* mins, float* scales) {
  return for_each_bucket(n, bucket, [&](size_t b, size_t lo, size_t len) -> int64_t {
    thread_local std::vector<float> work;
    if (work.size() < len) work.resize(len);
    float* __restrict c = work.data();
    const float* __restrict xb = x + lo;
    const float* __restrict rb = res + lo;
#pragma omp simd
    for (size_t i = 0; i < len; ++i) c[i] = xb[i] + rb[i];
    float mn, mx;
    const uint32_t bad = finite_range(c, len, mn, mx);
    const Grid g = bucket_grid(mn, mx, (1 << BITS) - 1);
    const float gmn = g.mn, scale = g.scale;
    mins[b] = gmn;
    scales[b] = scale;
    uint8_t* out = codes + lo * BITS / 8;
    prefetch_next_bucket(x, n, lo + len, len);
    prefetch_next_bucket(res, n, lo + len, len);
    if (stochastic) quantize_bucket<BITS, true>(c, len, lo, g, seed, out);
    else quantize_bucket<BITS, false>(c, len, lo, g, seed, out);
    float* __restrict ob = res_out + lo;
    alignas(64) uint8_t q[kTile];
    for (size_t t = 0; t < len; t += kTile) {
      const size_t m = std::min(kTile, len - t);
      if constexpr (BITS < 8) unpack_codes<BITS>(out + t * BITS / 8, m, q);
      else std::memcpy(q, out + t, m);
#pragma omp simd
      for (size_t i = 0; i < m; ++i) {
        const float ci = c[t + i];
        const int32_t cb = float_to_ibits(ci);
        // Computed for every lane and selected on the bits: a subtraction under the condition
        // would be control flow that -ftrapping-math keeps from vectorizing.
        const int32_t keep = -int32_t((cb & 0x7f800000) != 0x7f800000);  // finite: all ones
        const int32_t db = float_to_ibits(ci - (gmn + float(q[i]) * scale));
        ob[t + i] = ibits_to_float((db & keep) | (cb & ~keep));
      }
    }
    return bad;
  });
}

template <int BITS, bool ACC>
void dequantize_all(const uint8_t* codes, const float* mins, const float* scales, size_t n,
                    size_t bucket, float* out) {
  decode_codes<BITS, ACC>(codes, n, bucket, out, [&](size_t b) {
    const float mn = mins[b], sc = scales[b];
    return [mn, sc](uint32_t c) { return mn + float(c) * sc; };
  });
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
      [](HostInput x, HostArray codes, HostArray mins, HostArray scales, int bits,
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
      "quantize_feedback",
      [](HostInput x, HostArray res, HostArray res_out, HostArray codes, HostArray mins,
         HostArray scales, int bits, size_t bucket, uint64_t seed, bool stochastic) {
        check_bits_bucket(bits, bucket);
        const float* xp = f32_data(x, "quantize_feedback");
        size_t n = x.size(), nb = (n + bucket - 1) / bucket;
        const float* rp = typed_data<float>(res, n, "quantize_feedback residual");
        float* op = typed_data<float>(res_out, n, "quantize_feedback residual_out");
        auto* cp = typed_data<uint8_t>(codes, packed_bytes(n, bits), "quantize codes");
        auto* mp = typed_data<float>(mins, nb, "quantize mins");
        auto* sp = typed_data<float>(scales, nb, "quantize scales");
        nb::gil_scoped_release nogil;
        switch (bits) {
          case 1: return quantize_feedback_all<1>(xp, rp, op, n, bucket, seed, stochastic, cp, mp, sp);
          case 2: return quantize_feedback_all<2>(xp, rp, op, n, bucket, seed, stochastic, cp, mp, sp);
          case 4: return quantize_feedback_all<4>(xp, rp, op, n, bucket, seed, stochastic, cp, mp, sp);
          default: return quantize_feedback_all<8>(xp, rp, op, n, bucket, seed, stochastic, cp, mp, sp);
        }
      },
      nb::arg("x"), nb::arg("residual"), nb::arg("residual_out"), nb::arg("codes"),
      nb::arg("mins"), nb::arg("scales"), nb::arg("bits"), nb::arg("bucket_size"),
      nb::arg("seed"), nb::arg("stochastic"),
      "Quantize c = x + residual as quantize(c) would, writing residual_out = c - decoded in "
      "the same pass (residual_out may be residual); non-finite c are copied to residual_out "
      "and counted in the return value.");
  m.def(
      "dequantize",
      [](HostInput codes, HostInput mins, HostInput scales, HostArray out, int bits, size_t bucket,
         bool accumulate) {
        check_bits_bucket(bits, bucket);
        size_t n = out.size(), nb = (n + bucket - 1) / bucket;
        auto* op = typed_data<float>(out, n, "dequantize out");
        auto* cp = typed_data<uint8_t>(codes, packed_bytes(n, bits), "dequantize codes");
        auto* mp = typed_data<float>(mins, nb, "dequantize mins");
        auto* sp = typed_data<float>(scales, nb, "dequantize scales");
        nb::gil_scoped_release nogil;
        switch (bits) {
          case 1: return accumulate ? dequantize_all<1, true>(cp, mp, sp, n, bucket, op)
                                    : dequantize_all<1, false>(cp, mp, sp, n, bucket, op);
          case 2: return accumulate ? dequantize_all<2, true>(cp, mp, sp, n, bucket, op)
                                    : dequantize_all<2, false>(cp, mp, sp, n, bucket, op);
          case 4: return accumulate ? dequantize_all<4, true>(cp, mp, sp, n, bucket, op)
                                    : dequantize_all<4, false>(cp, mp, sp, n, bucket, op);
          default: return accumulate ? dequantize_all<8, true>(cp, mp, sp, n, bucket, op)
                                     : dequantize_all<8, false>(cp, mp, sp, n, bucket, op);
        }
      },
      nb::arg("codes"), nb::arg("mins"), nb::arg("scales"), nb::arg("out"), nb::arg("bits"),
      nb::arg("bucket_size"), nb::arg("accumulate") = false,
      "out = min + code * scale per bucket (out += ... with accumulate=True).");
}

}  // namespace compcoll
