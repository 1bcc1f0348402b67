// Shared helpers for compcoll kernels: dtype codes, half-precision conversion, threading.
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstring>

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>

#ifdef COMPCOLL_HAVE_OPENMP
#include <omp.h>
#endif

namespace compcoll {

namespace nb = nanobind;
// Any C-contiguous host array; the logical element type travels separately as a DType code
// because numpy has no bfloat16 (bf16 buffers arrive as their uint16 bit patterns).
using HostArray = nb::ndarray<nb::c_contig, nb::device::cpu>;

enum class DType : int {
  f16 = 0, bf16 = 1, f32 = 2, f64 = 3, i8 = 4, u8 = 5, i32 = 6, i64 = 7,
};
enum class Op : int { sum = 0, prod = 1, min = 2, max = 3 };

size_t dtype_size(DType t);

// Kernel threads: one per rank by default, since MPI runs one rank per core.
int num_threads();
void set_num_threads(int n);
// Below this many elements a kernel runs on one thread: forking costs more than it saves.
constexpr size_t kParallelGrain = 1 << 16;

inline float bits_to_float(uint32_t b) { float f; std::memcpy(&f, &b, 4); return f; }
inline uint32_t float_to_bits(float f) { uint32_t b; std::memcpy(&b, &f, 4); return b; }

inline float bf16_to_float(uint16_t h) { return bits_to_float(uint32_t(h) << 16); }
inline uint16_t float_to_bf16(float f) {
  uint32_t b = float_to_bits(f);
  if ((b & 0x7fffffffu) > 0x7f800000u) return uint16_t((b >> 16) | 0x40);  // quiet NaN, sign kept
  b += 0x7fffu + ((b >> 16) & 1u);  // round to nearest, ties to even
  return uint16_t(b >> 16);
}

#if defined(__FLT16_MAX__)
inline float f16_to_float(uint16_t h) { _Float16 x; std::memcpy(&x, &h, 2); return float(x); }
inline uint16_t float_to_f16(float f) { _Float16 x = _Float16(f); uint16_t h; std::memcpy(&h, &x, 2); return h; }
#else
float f16_to_float(uint16_t h);
uint16_t float_to_f16(float f);
#endif

DType dtype_from_int(int code);
void check_same_size(const HostArray& a, const HostArray& b, DType t, const char* what);

}  // namespace compcoll
