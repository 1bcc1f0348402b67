// 1-bit sign packing with one scale per bucket (the mean |x| of the bucket's finite values),
// as in signSGD with majority-free scaling / EF-signSGD. Bit j of byte i holds signbit(x[8i+j]):
// zeros pack as "+", so an all-zero bucket decodes to +0 * 0 = 0, never NaN.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "compress_common.h"

namespace compcoll {
namespace {

int64_t sign_pack(const float* x, size_t n, size_t bucket, uint8_t* bits, float* scales) {
  return for_each_bucket(n, bucket, [&](size_t b, size_t lo, size_t len) -> int64_t {
    const float* __restrict xb = x + lo;
    float sum = 0.0f;
    uint32_t bad = 0;
    alignas(64) uint8_t q[kTile];
    for (size_t t = 0; t < len; t += kTile) {
      const size_t m = std::min(kTile, len - t);
      // Masks instead of branches so the loop vectorizes (the sum's order is fixed per build).
#pragma omp simd reduction(+ : sum, bad)
      for (size_t i = 0; i < m; ++i) {
        const uint32_t u = float_to_bits(xb[t + i]);
        const uint32_t fin = (u & 0x7f800000u) != 0x7f800000u;
        sum += bits_to_float(u & 0x7fffffffu & (0u - fin));
        bad += 1 - fin;
        q[i] = uint8_t(u >> 31);
      }
      std::memset(q + m, 0, (8 - m % 8) % 8);
      pack_codes<1>(q, m, bits + (lo + t) / 8);
    }
    const size_t good = len - bad;
    scales[b] = good ? sum / float(good) : 0.0f;
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
