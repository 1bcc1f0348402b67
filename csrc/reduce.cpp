// Elementwise reductions used by every allreduce algorithm: dst = dst (op) src.
// fp16 and bf16 are widened to fp32, combined, and rounded once (fp32 accumulation);
// the operation is commutative bit for bit, which keeps results identical on all ranks.
#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <type_traits>

#include "common.h"

namespace compcoll {
namespace {

template <class T>
inline T combine(T a, T b, Op op) {
  if constexpr (std::is_integral_v<T>) {
    using U = std::make_unsigned_t<T>;  // wrap-around like MPI, without signed-overflow UB
    switch (op) {
      case Op::sum: return T(U(a) + U(b));
      case Op::prod: return T(U(a) * U(b));
      case Op::min: return std::min(a, b);
      case Op::max: return std::max(a, b);
    }
  } else {
    switch (op) {
      case Op::sum: return a + b;
      case Op::prod: return a * b;
      // NaN propagates (numpy.minimum semantics), whichever side it is on.
      case Op::min: return (a != a) ? a : ((b != b) ? b : (b < a ? b : a));
      case Op::max: return (a != a) ? a : ((b != b) ? b : (b > a ? b : a));
    }
  }
  return a;
}

template <class T, Op OP>
void reduce_native(T* __restrict dst, const T* __restrict src, size_t n) {
  int nt = num_threads();
#pragma omp parallel for num_threads(nt) if (nt > 1 && n > kParallelGrain) schedule(static)
  for (ptrdiff_t i = 0; i < ptrdiff_t(n); ++i) dst[i] = combine<T>(dst[i], src[i], OP);
}

// Widen and round a block at a time (the bulk conversions vectorize; the combine between
// them is plain fp32): the same bits as converting element by element.
using LoadN = void (*)(const uint16_t*, float*, size_t);
using StoreN = void (*)(const float*, uint16_t*, size_t);
constexpr size_t kHalfBlock = 512;

// body(lo, m) for each block [lo, lo + m) of n elements, on the kernel threads for large n.
template <class Body>
void for_half_blocks(size_t n, Body body) {
  int nt = num_threads();
  ptrdiff_t blocks = ptrdiff_t((n + kHalfBlock - 1) / kHalfBlock);
#pragma omp parallel for num_threads(nt) if (nt > 1 && n > kParallelGrain) schedule(static)
  for (ptrdiff_t b = 0; b < blocks; ++b) {
    size_t lo = size_t(b) * kHalfBlock;
    body(lo, std::min(kHalfBlock, n - lo));
  }
}

template <LoadN Load, StoreN Store, Op OP>
void reduce_half(uint16_t* __restrict dst, const uint16_t* __restrict src, size_t n) {
  for_half_blocks(n, [&](size_t lo, size_t m) {
    float a[kHalfBlock], c[kHalfBlock];
    Load(dst + lo, a, m);
    Load(src + lo, c, m);
    for (size_t i = 0; i < m; ++i) a[i] = combine<float>(a[i], c[i], OP);
    Store(a, dst + lo, m);
  });
}

template <class T>
void dispatch_native(void* d, const void* s, size_t n, Op op) {
  auto* dst = static_cast<T*>(d);
  auto* src = static_cast<const T*>(s);
  switch (op) {
    case Op::sum: return reduce_native<T, Op::sum>(dst, src, n);
    case Op::prod: return reduce_native<T, Op::prod>(dst, src, n);
    case Op::min: return reduce_native<T, Op::min>(dst, src, n);
    case Op::max: return reduce_native<T, Op::max>(dst, src, n);
  }
}

template <LoadN Load, StoreN Store>
void dispatch_half(void* d, const void* s, size_t n, Op op) {
  auto* dst = static_cast<uint16_t*>(d);
  auto* src = static_cast<const uint16_t*>(s);
  switch (op) {
    case Op::sum: return reduce_half<Load, Store, Op::sum>(dst, src, n);
    case Op::prod: return reduce_half<Load, Store, Op::prod>(dst, src, n);
    case Op::min: return reduce_half<Load, Store, Op::min>(dst, src, n);
    case Op::max: return reduce_half<Load, Store, Op::max>(dst, src, n);
  }
}

void reduce_raw(void* dst, const void* src, size_t n, DType t, Op op) {
  switch (t) {
    case DType::f16: return dispatch_half<f16_to_float_n, float_to_f16_n>(dst, src, n, op);
    case DType::bf16: return dispatch_half<bf16_to_float_n, float_to_bf16_n>(dst, src, n, op);
    case DType::f32: return dispatch_native<float>(dst, src, n, op);
    case DType::f64: return dispatch_native<double>(dst, src, n, op);
    case DType::i8: return dispatch_native<int8_t>(dst, src, n, op);
    case DType::u8: return dispatch_native<uint8_t>(dst, src, n, op);
    case DType::i32: return dispatch_native<int32_t>(dst, src, n, op);
    case DType::i64: return dispatch_native<int64_t>(dst, src, n, op);
  }
}

// dst *= factor, computed in fp32 for half types and in the native type otherwise.
template <class T>
void scale_native(T* x, size_t n, double f) {
  int nt = num_threads();
  T ft = T(f);
#pragma omp parallel for num_threads(nt) if (nt > 1 && n > kParallelGrain) schedule(static)
  for (ptrdiff_t i = 0; i < ptrdiff_t(n); ++i) x[i] = x[i] * ft;
}

template <LoadN Load, StoreN Store>
void scale_half(uint16_t* x, size_t n, double f) {
  float ff = float(f);
  for_half_blocks(n, [&](size_t lo, size_t m) {
    float a[kHalfBlock];
    Load(x + lo, a, m);
    for (size_t i = 0; i < m; ++i) a[i] *= ff;
    Store(a, x + lo, m);
  });
}

// Sum of squares in double, 8 partial sums so the loop vectorizes without reassociating a
// single accumulator; single-threaded (it runs beside the training step's own threads).
// load turns a stored element into a value (fp16/bf16 bits to float, or a plain read).
template <typename T, typename Load>
double sum_squares(const T* x, size_t n, Load load) {
  double acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  size_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int j = 0; j < 8; ++j) { const double v = load(x[i + j]); acc[j] += v * v; }
  for (; i < n; ++i) { const double v = load(x[i]); acc[0] += v * v; }
  return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
}

}  // namespace

void register_reduce(nb::module_& m) {
  m.def(
      "reduce_into",
      [](HostArray dst, HostInput src, int dtype, int op) {
        DType t = dtype_from_int(dtype);
        if (op < 0 || op > 3) throw std::invalid_argument("reduce_into: unknown op code");
        check_same_size(dst.nbytes(), src.nbytes(), t, "reduce_into");
        size_t n = dst.nbytes() / dtype_size(t);
        nb::gil_scoped_release nogil;
        // Views at odd byte offsets (received bytes) are reduced through aligned copies.
        AlignedView d(dst.data(), n * dtype_size(t), dtype_size(t));
        AlignedView s(src.data(), n * dtype_size(t), dtype_size(t));
        reduce_raw(d.get(), s.get(), n, t, static_cast<Op>(op));
        d.commit();
      },
      nb::arg("dst"), nb::arg("src"), nb::arg("dtype"), nb::arg("op"),
      "dst = dst (op) src elementwise; fp16/bf16 are combined in fp32 and rounded once.");
  m.def(
      "scale",
      [](HostArray x, int dtype, double factor) {
        DType t = dtype_from_int(dtype);
        size_t n = x.nbytes() / dtype_size(t);
        nb::gil_scoped_release nogil;
        AlignedView view(x.data(), n * dtype_size(t), dtype_size(t));
        void* p = view.get();
        struct Commit { AlignedView& v; ~Commit() { v.commit(); } } commit{view};
        switch (t) {
          case DType::f16: return scale_half<f16_to_float_n, float_to_f16_n>(static_cast<uint16_t*>(p), n, factor);
          case DType::bf16: return scale_half<bf16_to_float_n, float_to_bf16_n>(static_cast<uint16_t*>(p), n, factor);
          case DType::f32: return scale_native<float>(static_cast<float*>(p), n, factor);
          case DType::f64: return scale_native<double>(static_cast<double*>(p), n, factor);
          default: throw std::invalid_argument("scale: only floating-point dtypes can be scaled");
        }
      },
      nb::arg("x"), nb::arg("dtype"), nb::arg("factor"),
      "x *= factor in place (fp32 arithmetic for fp16/bf16).");
  m.def(
      "sum_squares",
      [](HostInput x, int dtype) {
        DType t = dtype_from_int(dtype);
        size_t n = x.nbytes() / dtype_size(t);
        nb::gil_scoped_release nogil;
        AlignedView view(x.data(), n * dtype_size(t), dtype_size(t));
        const void* p = view.get();
        switch (t) {
          case DType::f16: return sum_squares(static_cast<const uint16_t*>(p), n, f16_to_float);
          case DType::bf16: return sum_squares(static_cast<const uint16_t*>(p), n, bf16_to_float);
          case DType::f32: return sum_squares(static_cast<const float*>(p), n, [](float v) { return v; });
          case DType::f64: return sum_squares(static_cast<const double*>(p), n, [](double v) { return v; });
          default: throw std::invalid_argument("sum_squares: only floating-point dtypes");
        }
      },
      nb::arg("x"), nb::arg("dtype"),
      "Sum of x*x over a contiguous array, accumulated in double (NaN/Inf propagate).");
  m.def(
      "half_to_float",
      [](HostInput src, HostArray dst, int dtype) {
        DType t = dtype_from_int(dtype);
        size_t n = src.nbytes() / 2;
        if (dst.nbytes() != n * 4) throw std::invalid_argument("half_to_float: dst must hold n float32");
        if (t != DType::f16 && t != DType::bf16)
          throw std::invalid_argument("half_to_float: dtype must be float16 or bfloat16");
        nb::gil_scoped_release nogil;
        AlignedView sv(src.data(), n * 2, 2), dv(dst.data(), n * 4, 4);
        auto* s = static_cast<const uint16_t*>(sv.get());
        auto* d = static_cast<float*>(dv.get());
        if (t == DType::f16) f16_to_float_n(s, d, n);
        else bf16_to_float_n(s, d, n);
        dv.commit();
      },
      nb::arg("src"), nb::arg("dst"), nb::arg("dtype"), "Widen fp16/bf16 bit patterns to float32.");
  m.def(
      "float_to_half",
      [](HostInput src, HostArray dst, int dtype) {
        DType t = dtype_from_int(dtype);
        size_t n = dst.nbytes() / 2;
        if (src.nbytes() != n * 4) throw std::invalid_argument("float_to_half: src must hold n float32");
        if (t != DType::f16 && t != DType::bf16)
          throw std::invalid_argument("float_to_half: dtype must be float16 or bfloat16");
        nb::gil_scoped_release nogil;
        AlignedView sv(src.data(), n * 4, 4), dv(dst.data(), n * 2, 2);
        auto* s = static_cast<const float*>(sv.get());
        auto* d = static_cast<uint16_t*>(dv.get());
        if (t == DType::f16) float_to_f16_n(s, d, n);
        else float_to_bf16_n(s, d, n);
        dv.commit();
      },
      nb::arg("src"), nb::arg("dst"), nb::arg("dtype"),
      "Round float32 to fp16/bf16 bit patterns (nearest, ties to even; NaN stays NaN).");
}

}  // namespace compcoll
