#include "common.h"

#include <cstring>
#include <stdexcept>
#include <string>

namespace compcoll {

static int g_threads = 1;

int num_threads() { return g_threads; }
void set_num_threads(int n) {
  if (n < 1) throw std::invalid_argument("num_threads must be >= 1, got " + std::to_string(n));
  g_threads = n;
}

size_t dtype_size(DType t) {
  switch (t) {
    case DType::f16: case DType::bf16: return 2;
    case DType::f32: case DType::i32: return 4;
    case DType::f64: case DType::i64: return 8;
    case DType::i8: case DType::u8: return 1;
  }
  return 0;
}

DType dtype_from_int(int code) {
  if (code < 0 || code > 7) throw std::invalid_argument("unknown dtype code " + std::to_string(code));
  return static_cast<DType>(code);
}

void throw_misaligned(size_t align, const char* what) {
  throw std::invalid_argument(std::string(what) + ": the array's data is not aligned to " +
                                std::to_string(align) + " bytes (a view at an odd byte offset); "
                                "pass an aligned copy, e.g. numpy.require(a, requirements='A')");
}

AlignedView::AlignedView(const void* p, size_t nbytes, size_t align)
    : orig_(const_cast<void*>(p)), ptr_(const_cast<void*>(p)), nbytes_(nbytes) {
  if (nbytes == 0 || is_aligned(p, align)) return;
  copy_.reset(new uint64_t[(nbytes + 7) / 8]);  // new[] of uint64_t: aligned for any kernel type
  std::memcpy(copy_.get(), p, nbytes);
  ptr_ = copy_.get();
}

void AlignedView::commit() {
  if (copy_) std::memcpy(orig_, copy_.get(), nbytes_);
}

void check_same_size(size_t na, size_t nb_, DType t, const char* what) {
  size_t es = dtype_size(t);
  if (na != nb_ || na % es != 0)
    throw std::invalid_argument(std::string(what) + ": buffers of " + std::to_string(na) + " and " +
                                std::to_string(nb_) + " bytes do not hold the same whole number of " +
                                std::to_string(es) + "-byte elements");
}

#if !defined(__FLT16_MAX__)
float f16_to_float(uint16_t h) {
  uint32_t sign = uint32_t(h & 0x8000) << 16, exp = (h >> 10) & 0x1f, man = h & 0x3ff;
  if (exp == 0x1f) return bits_to_float(sign | 0x7f800000u | (man << 13));
  if (exp == 0) {
    if (man == 0) return bits_to_float(sign);
    float f = float(man) * (1.0f / 16777216.0f);  // subnormal: man * 2^-24
    return sign ? -f : f;
  }
  return bits_to_float(sign | ((exp + 112) << 23) | (man << 13));
}
uint16_t float_to_f16(float f) {
  uint32_t b = float_to_bits(f), sign = (b >> 16) & 0x8000, a = b & 0x7fffffffu;
  if (a > 0x7f800000u) return uint16_t(sign | 0x7e00 | ((a >> 13) & 0x3ff));
  if (a >= 0x477ff000u) return uint16_t(sign | 0x7c00);  // rounds to inf
  if (a < 0x38800000u) {  // subnormal or zero: scale to units of 2^-24, round to nearest even
    float v = bits_to_float(a) * 16777216.0f;
    uint32_t r = uint32_t(v);  // exact: v < 2^10 fits the 24-bit mantissa
    float frac = v - float(r);
    if (frac > 0.5f || (frac == 0.5f && (r & 1))) ++r;
    return uint16_t(sign | r);
  }
  uint32_t m = a + 0xc8000fffu + ((a >> 13) & 1u);  // rebias exponent and round to nearest even
  return uint16_t(sign | (m >> 13));
}
#endif

}  // namespace compcoll
