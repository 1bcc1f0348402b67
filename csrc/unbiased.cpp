// The unbiased stochastic quantizers: TernGrad (codes 0, +1, -1 as 2-bit 0, 1, 2 with a
// per-bucket max |x| scale) and QSGD (signed codes in [-levels, levels] with a per-bucket L2
// norm scale). Both draw from the counter RNG of compress_common.h, so the codes are identical
// for any thread count, and both leave NaN/Inf out of the scale and code them as 0.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "compress_common.h"

namespace compcoll {
namespace {

inline int32_t ibits(float f) { int32_t b; std::memcpy(&b, &f, 4); return b; }

// |x| with NaN/Inf replaced by 0, as bits; counts the replaced values.
inline uint32_t finite_abs_bits(uint32_t u, uint32_t& bad) {
  const uint32_t fin = (u & 0x7f800000u) != 0x7f800000u;
  bad += 1 - fin;
  return u & 0x7fffffffu & (0u - fin);
}

int64_t terngrad_encode(const float* x, size_t n, size_t bucket, uint64_t seed, uint8_t* codes,
                        float* scales) {
  return for_each_bucket(n, bucket, [&](size_t b, size_t lo, size_t len) -> int64_t {
    const float* __restrict xb = x + lo;
    uint32_t smax = 0, bad = 0;
#pragma omp simd reduction(max : smax) reduction(+ : bad)
    for (size_t i = 0; i < len; ++i) smax = std::max(smax, finite_abs_bits(float_to_bits(xb[i]), bad));
    const float s = bits_to_float(smax);
    scales[b] = s;
    const float safe = s > 0.0f ? s : 1.0f;
    prefetch_next_bucket(x, n, lo + len, len);
    alignas(64) uint8_t q[kTile];
    for (size_t t = 0; t < len;) {
      const size_t m = rng_run(lo + t, std::min(kTile, len - t));
      const RngStream rng = rng_stream(seed, lo + t);
      const uint32_t step = rng.mul;
      uint32_t unused = 0, w = rng.add;
#pragma omp simd reduction(+ : unused) linear(w : step)
      for (size_t j = 0; j < m; ++j) {
        const uint32_t u = float_to_bits(xb[t + j]);
        // Sent with probability |x| / s, as s * sign(x): E[decode] = x. Both sides of the
        // comparison are non-negative, compared as integers.
        const float p = bits_to_float(finite_abs_bits(u, unused)) / safe;
        const uint32_t keep = ibits(rng_unit(mix32(w))) < ibits(p);
        w += step;
        q[j] = uint8_t(keep << (u >> 31));
      }
      std::memset(q + m, 0, (8 - m % 8) % 8);
      pack_codes<2>(q, m, codes + (lo + t) / 4);
      t += m;
    }
    return bad;
  });
}

void terngrad_decode(const uint8_t* codes, const float* scales, size_t n, size_t bucket,
                     float* out) {
  decode_codes<2>(codes, n, bucket, out, [&](size_t b) {
    const uint32_t s = float_to_bits(scales[b]);
    return [s](uint32_t c) {
      const uint32_t sent = (c ^ (c >> 1)) & 1u;  // codes 1 and 2 are sent, 0 (and 3) not
      return bits_to_float((s & (0u - sent)) | ((c >> 1) << 31));
    };
  });
}

// One signed code per value: |x| / norm * levels rounded up with probability equal to its
// fractional part, so E[code] = v and E[decode] = x.
template <class T>
void qsgd_codes(const float* __restrict x, int m, uint64_t first, float norm, int levels,
                uint64_t seed, T* __restrict out) {
  const RngStream rng = rng_stream(seed, first);
  const uint32_t step = rng.mul;
  const float lv = float(levels);
  uint32_t unused = 0, w = rng.add;
#pragma omp simd reduction(+ : unused) linear(w : step)
  for (int j = 0; j < m; ++j) {
    const uint32_t u = float_to_bits(x[j]);
    const float v = bits_to_float(finite_abs_bits(u, unused)) / norm * lv;
    // v is in [0, levels] up to rounding, so truncation is floor; the clamp keeps the
    // conversion in range for the compiler, which then vectorizes the loop.
    const int32_t low = int32_t(bits_to_float(std::min(float_to_bits(v), float_to_bits(lv))));
    const int32_t up = ibits(rng_unit(mix32(w))) < ibits(v - float(low));
    w += step;
    const int32_t q = std::min(low + up, levels), neg = int32_t(u >> 31);
    out[j] = T((q ^ -neg) + neg);  // -q for negative x, without a branch
  }
}

template <class T>
int64_t qsgd_encode(const float* x, size_t n, size_t bucket, int levels, uint64_t seed, T* codes,
                    float* norms) {
  return for_each_bucket(n, bucket, [&](size_t b, size_t lo, size_t len) -> int64_t {
    const float* __restrict xb = x + lo;
    uint32_t bad = 0;
    double sq = 0.0;  // squares of large float32 values would overflow a float32 sum
#pragma omp simd reduction(+ : sq, bad)
    for (size_t i = 0; i < len; ++i) {
      const double a = double(bits_to_float(finite_abs_bits(float_to_bits(xb[i]), bad)));
      sq += a * a;
    }
    const float norm = float(std::sqrt(sq));
    norms[b] = norm;
    prefetch_next_bucket(x, n, lo + len, len);
    for (size_t t = 0; t < len;) {
      const size_t m = rng_run(lo + t, std::min(kTile, len - t));
      qsgd_codes(xb + t, int(m), lo + t, norm > 0.0f ? norm : 1.0f, levels, seed, codes + lo + t);
      t += m;
    }
    return bad;
  });
}

template <class T>
void qsgd_decode(const T* codes, const float* norms, size_t n, size_t bucket, int levels,
                 float* out) {
  for_each_bucket(n, bucket, [&](size_t b, size_t lo, size_t len) -> int64_t {
    const float step = norms[b] / float(levels);
    const T* __restrict cb = codes + lo;
    float* __restrict ob = out + lo;
#pragma omp simd
    for (size_t i = 0; i < len; ++i) ob[i] = float(cb[i]) * step;
    return 0;
  });
}

void check_args(size_t bucket, int levels) {
  if (bucket == 0 || bucket % 8 != 0)
    throw std::invalid_argument("bucket_size must be a positive multiple of 8; got " +
                                std::to_string(bucket));
  if (levels < 1 || levels > 32767)
    throw std::invalid_argument("levels must be in [1, 32767]; got " + std::to_string(levels));
}

float* f32_out(HostArray& a, size_t n, const char* what) { return typed_data<float>(a, n, what); }

// QSGD's codes: int8 while the levels fit, int16 beyond.
template <class A, class F>
auto with_codes(A& codes, size_t n, int levels, const char* what, F&& f) {
  if (levels <= 127) return f(typed_data<int8_t>(codes, n, what));
  return f(typed_data<int16_t>(codes, n, what));
}

}  // namespace

void register_unbiased(nb::module_& m) {
  m.def(
      "terngrad_encode",
      [](HostInput x, HostArray codes, HostArray scales, size_t bucket, uint64_t seed) {
        check_args(bucket, 1);
        const float* xp = f32_data(x, "terngrad_encode");
        const size_t n = x.size();
        auto* cp = typed_data<uint8_t>(codes, (n + 3) / 4, "terngrad_encode codes");
        auto* sp = f32_out(scales, (n + bucket - 1) / bucket, "terngrad_encode scales");
        nb::gil_scoped_release nogil;
        return terngrad_encode(xp, n, bucket, seed, cp, sp);
      },
      nb::arg("x"), nb::arg("codes"), nb::arg("scales"), nb::arg("bucket_size"), nb::arg("seed"),
      "Ternary codes (2 bits each) and per-bucket max |x|; returns the count of non-finite inputs.");
  m.def(
      "terngrad_decode",
      [](HostInput codes, HostInput scales, HostArray out, size_t bucket) {
        check_args(bucket, 1);
        const size_t n = out.size();
        auto* op = f32_out(out, n, "terngrad_decode out");
        auto* cp = typed_data<uint8_t>(codes, (n + 3) / 4, "terngrad_decode codes");
        auto* sp = typed_data<float>(scales, (n + bucket - 1) / bucket, "terngrad_decode scales");
        nb::gil_scoped_release nogil;
        terngrad_decode(cp, sp, n, bucket, op);
      },
      nb::arg("codes"), nb::arg("scales"), nb::arg("out"), nb::arg("bucket_size"),
      "out = {0, +s, -s} for codes {0, 1, 2}.");
  m.def(
      "qsgd_encode",
      [](HostInput x, HostArray codes, HostArray norms, size_t bucket, int levels, uint64_t seed) {
        check_args(bucket, levels);
        const float* xp = f32_data(x, "qsgd_encode");
        const size_t n = x.size();
        auto* np_ = f32_out(norms, (n + bucket - 1) / bucket, "qsgd_encode norms");
        return with_codes(codes, n, levels, "qsgd_encode codes", [&](auto* cp) {
          nb::gil_scoped_release nogil;
          return qsgd_encode(xp, n, bucket, levels, seed, cp, np_);
        });
      },
      nb::arg("x"), nb::arg("codes"), nb::arg("norms"), nb::arg("bucket_size"), nb::arg("levels"),
      nb::arg("seed"),
      "Signed codes in [-levels, levels] (int8 up to 127 levels, else int16) and per-bucket L2 "
      "norms; returns the count of non-finite inputs.");
  m.def(
      "qsgd_decode",
      [](HostInput codes, HostInput norms, HostArray out, size_t bucket, int levels) {
        check_args(bucket, levels);
        const size_t n = out.size();
        auto* op = f32_out(out, n, "qsgd_decode out");
        auto* np_ = typed_data<float>(norms, (n + bucket - 1) / bucket, "qsgd_decode norms");
        with_codes(codes, n, levels, "qsgd_decode codes", [&](auto* cp) {
          nb::gil_scoped_release nogil;
          qsgd_decode(cp, np_, n, bucket, levels, op);
          return 0;
        });
      },
      nb::arg("codes"), nb::arg("norms"), nb::arg("out"), nb::arg("bucket_size"), nb::arg("levels"),
      "out = code * norm / levels per bucket.");
}

}  // namespace compcoll
