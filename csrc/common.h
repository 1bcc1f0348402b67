// Shared helpers for compcoll kernels: dtype codes, half-precision conversion, threading.
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>

#ifdef COMPCOLL_HAVE_OPENMP
#include <omp.h>
#endif
#if defined(__F16C__) && defined(__AVX__)
#include <immintrin.h>
#define COMPCOLL_F16C 1
#endif

namespace compcoll {

namespace nb = nanobind;
// Any C-contiguous host array; the logical element type travels separately as a DType code
// because numpy has no bfloat16 (bf16 buffers arrive as their uint16 bit patterns).
using HostArray = nb::ndarray<nb::c_contig, nb::device::cpu>;
// The same for arrays a kernel only reads: read-only ones too (views of received bytes).
using HostInput = nb::ndarray<nb::ro, nb::c_contig, nb::device::cpu>;

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

// n values at a time: fp16/bf16 bit patterns widened to float32, float32 rounded to them
// (nearest, ties to even). Where the build has the F16C instructions (-march=native on x86),
// fp16 goes 8 values per instruction: IEEE conversions, so the same bits as the scalar forms
// above for every number and infinity, and a quiet NaN for a NaN, as they give.
inline void f16_to_float_n(const uint16_t* s, float* d, size_t n) {
  size_t i = 0;
#ifdef COMPCOLL_F16C
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(d + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i))));
#endif
  for (; i < n; ++i) d[i] = f16_to_float(s[i]);
}
inline void float_to_f16_n(const float* s, uint16_t* d, size_t n) {
  size_t i = 0;
#ifdef COMPCOLL_F16C
  for (; i + 8 <= n; i += 8)
    _mm_storeu_si128(reinterpret_cast<__m128i*>(d + i),
                     _mm256_cvtps_ph(_mm256_loadu_ps(s + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
#endif
  for (; i < n; ++i) d[i] = float_to_f16(s[i]);
}
inline void bf16_to_float_n(const uint16_t* s, float* d, size_t n) {
  for (size_t i = 0; i < n; ++i) d[i] = bf16_to_float(s[i]);
}
inline void float_to_bf16_n(const float* s, uint16_t* d, size_t n) {
  for (size_t i = 0; i < n; ++i) d[i] = float_to_bf16(s[i]);
}

DType dtype_from_int(int code);

inline bool is_aligned(const void* p, size_t align) {
  return reinterpret_cast<uintptr_t>(p) % align == 0;
}
// Kernels read arrays through typed pointers, and a load through a misaligned one (a numpy view
// at an odd byte offset of a byte buffer) is undefined behaviour: they refuse such arrays.
void throw_misaligned(size_t align, const char* what);
template <class A>
void require_aligned(const A& a, size_t align, const char* what) {
  if (a.size() != 0 && !is_aligned(a.data(), align)) throw_misaligned(align, what);
}

// An aligned stand-in for raw memory that may sit at an odd byte offset: the memory itself when
// it is aligned, else a copy; commit() writes a copy back (for outputs).
class AlignedView {
 public:
  AlignedView(const void* p, size_t nbytes, size_t align);
  AlignedView(const AlignedView&) = delete;
  AlignedView& operator=(const AlignedView&) = delete;
  void* get() const { return ptr_; }
  void commit();  // only for a view of writable memory

 private:
  void* orig_;
  void* ptr_;
  size_t nbytes_;
  std::unique_ptr<uint64_t[]> copy_;
};
void check_same_size(size_t na, size_t nb_, DType t, const char* what);

}  // namespace compcoll
