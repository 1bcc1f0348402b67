// 1-bit sign packing with one scale per bucket (the mean |x| of the bucket's finite values),
// as in signSGD with majority-free scaling / EF-signSGD. Bit j of byte i holds signbit(x[8i+j]):
// zeros pack as "+", so an all-zero bucket decodes to +0 * 0 = 0, never NaN.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "compress_common.h"

namespace compcoll {
namespace {

// Lanes of the bucket sum: lane l adds |x[i]| for i = l (mod kLanes) in index order, and the
// lanes are added as a fixed tree. The order is the same on every build (vectorized across the
// lanes, no reassociation inside one) and it is the CUDA twin's (csrc/cuda/sign.cu), so the
// scales are the same bits on a CPU and on a GPU.
constexpr size_t kLanes = 16;

// The sum of |x| over a bucket's finite values, and their count's complement: the one loop
// both packers run, so a fused pack sums in the same order as a plain one.
inline float finite_abs_sum(const float* __restrict xb, size_t len, uint32_t& bad_out) {
  alignas(64) float lane[kLanes] = {};
  uint32_t bad = 0;
  size_t i = 0;
  for (; i + kLanes <= len; i += kLanes) {
    // Masks instead of branches so the loop vectorizes across the lanes.
#pragma omp simd reduction(+ : bad)
    for (size_t l = 0; l < kLanes; ++l) {
      const uint32_t u = float_to_bits(xb[i + l]);
      const uint32_t fin = (u & 0x7f800000u) != 0x7f800000u;
      lane[l] += bits_to_float(u & 0x7fffffffu & (0u - fin));
      bad += 1 - fin;
    }
  }
  for (size_t l = 0; i + l < len; ++l) {
    const uint32_t u = float_to_bits(xb[i + l]);
    const uint32_t fin = (u & 0x7f800000u) != 0x7f800000u;
    lane[l] += bits_to_float(u & 0x7fffffffu & (0u - fin));
    bad += 1 - fin;
  }
  for (size_t w = kLanes / 2; w > 0; w /= 2)
    for (size_t l = 0; l < w; ++l) lane[l] += lane[l + w];
  bad_out = bad;
  return lane[0];
}

// Bits of xb's signs packed from bit offset lo; with ``res``, also res = x - (+-scale) where
// x is finite (non-finite x stay in res as they are, for the side list).
inline void pack_signs(const float* xb, size_t lo, size_t len, float scale, uint8_t* bits,
                       float* res) {
  alignas(64) uint8_t q[kTile];
  const uint32_t su = float_to_bits(scale);
  for (size_t t = 0; t < len; t += kTile) {
    const size_t m = std::min(kTile, len - t);
#pragma omp simd
    for (size_t i = 0; i < m; ++i) {
      const float x = xb[t + i];
      const uint32_t u = float_to_bits(x);
      q[i] = uint8_t(u >> 31);
      if (res != nullptr) {
        const uint32_t fin = (u & 0x7f800000u) != 0x7f800000u;
        const float sent = bits_to_float(su ^ (u & 0x80000000u));
        res[t + i] = fin ? x - sent : x;
      }
    }
    std::memset(q + m, 0, (8 - m % 8) % 8);
    pack_codes<1>(q, m, bits + (lo + t) / 8);
  }
}

int64_t sign_pack(const float* x, size_t n, size_t bucket, uint8_t* bits, float* scales) {
  return for_each_bucket(n, bucket, [&](size_t b, size_t lo, size_t len) -> int64_t {
    uint32_t bad = 0;
    const float sum = finite_abs_sum(x + lo, len, bad);
    const size_t good = len - bad;
    scales[b] = good ? sum / float(good) : 0.0f;
    pack_signs(x + lo, lo, len, scales[b], bits, nullptr);
    return bad;
  });
}

// sign_pack(x + res) and res_out = x + res - decoded, one bucket at a time (the bucket's sums
// are kept in res_out between the two passes, in cache); res_out may be res.
int64_t sign_pack_feedback(const float* x, const float* res, float* res_out, size_t n,
                           size_t bucket, uint8_t* bits, float* scales) {
  return for_each_bucket(n, bucket, [&](size_t b, size_t lo, size_t len) -> int64_t {
    float* __restrict yb = res_out + lo;
    const float* __restrict xb = x + lo;
    const float* rb = res + lo;
#pragma omp simd
    for (size_t i = 0; i < len; ++i) yb[i] = xb[i] + rb[i];
    uint32_t bad = 0;
    const float sum = finite_abs_sum(yb, len, bad);
    const size_t good = len - bad;
    scales[b] = good ? sum / float(good) : 0.0f;
    pack_signs(yb, lo, len, scales[b], bits, yb);
    return bad;
  });
}

void sign_unpack(const uint8_t* bits, const float* scales, size_t n, size_t bucket, float* out) {
  decode_codes<1>(bits, n, bucket, out, [&](size_t b) {
    const uint32_t s = float_to_bits(scales[b]);
    return [s](uint32_t bit) { return bits_to_float(s ^ (bit << 31)); };
  });
}

void check_bucket(size_t bucket) {
  if (bucket == 0 || bucket % 8 != 0)
    throw std::invalid_argument("bucket_size must be a positive multiple of 8; got " +
                                std::to_string(bucket));
}

}  // namespace

void register_sign(nb::module_& m) {
  m.def(
      "sign_pack",
      [](HostInput x, HostArray bits, HostArray scales, size_t bucket) {
        check_bucket(bucket);
        const float* xp = f32_data(x, "sign_pack");
        size_t n = x.size();
        auto* bp = typed_data<uint8_t>(bits, (n + 7) / 8, "sign_pack bits");
        auto* sp = typed_data<float>(scales, (n + bucket - 1) / bucket, "sign_pack scales");
        nb::gil_scoped_release nogil;
        return sign_pack(xp, n, bucket, bp, sp);
      },
      nb::arg("x"), nb::arg("bits"), nb::arg("scales"), nb::arg("bucket_size"),
      "Pack sign bits and per-bucket mean |x|; returns the count of non-finite inputs.");
  m.def(
      "sign_pack_feedback",
      [](HostInput x, HostArray res, HostArray res_out, HostArray bits, HostArray scales,
         size_t bucket) {
        check_bucket(bucket);
        const float* xp = f32_data(x, "sign_pack_feedback");
        size_t n = x.size();
        const float* rp = typed_data<float>(res, n, "sign_pack_feedback residual");
        float* op = typed_data<float>(res_out, n, "sign_pack_feedback residual_out");
        auto* bp = typed_data<uint8_t>(bits, (n + 7) / 8, "sign_pack bits");
        auto* sp = typed_data<float>(scales, (n + bucket - 1) / bucket, "sign_pack scales");
        nb::gil_scoped_release nogil;
        return sign_pack_feedback(xp, rp, op, n, bucket, bp, sp);
      },
      nb::arg("x"), nb::arg("residual"), nb::arg("residual_out"), nb::arg("bits"),
      nb::arg("scales"), nb::arg("bucket_size"),
      "Pack c = x + residual as sign_pack(c) would, writing residual_out = c - decoded in the "
      "same pass over each bucket (residual_out may be residual); non-finite c are copied to "
      "residual_out and counted in the return value.");
  m.def(
      "sign_unpack",
      [](HostInput bits, HostInput scales, HostArray out, size_t bucket) {
        check_bucket(bucket);
        size_t n = out.size();
        auto* op = typed_data<float>(out, n, "sign_unpack out");
        auto* bp = typed_data<uint8_t>(bits, (n + 7) / 8, "sign_unpack bits");
        auto* sp = typed_data<float>(scales, (n + bucket - 1) / bucket, "sign_unpack scales");
        nb::gil_scoped_release nogil;
        sign_unpack(bp, sp, n, bucket, op);
      },
      nb::arg("bits"), nb::arg("scales"), nb::arg("out"), nb::arg("bucket_size"),
      "out = (bit ? -scale : +scale) per bucket.");
}

}  // namespace compcoll
