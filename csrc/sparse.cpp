// Gather and scatter for sparse payloads (index + value lists). Scatter of unique indices runs
// in parallel; accumulation with possible duplicates runs in index-list order on one thread,
// so summing the same lists always rounds the same way.
#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#if defined(__SSE2__)
#include <immintrin.h>
#endif

#include "compress_common.h"

namespace compcoll {
namespace {

template <class T, class I>
void gather_t(const T* x, size_t n, const I* idx, size_t k, T* out) {
  for (size_t j = 0; j < k; ++j)
    if (idx[j] < 0 || size_t(idx[j]) >= n) throw std::out_of_range("gather: index out of range");
  int nt = num_threads();
#pragma omp parallel for num_threads(nt) if (parallel_ok(nt, k)) schedule(static)
  for (ptrdiff_t j = 0; j < ptrdiff_t(k); ++j) out[j] = x[idx[j]];
}

template <class T, class I>
void scatter_t(T* out, size_t n, const I* idx, const T* vals, size_t k, bool accumulate) {
  for (size_t j = 0; j < k; ++j)
    if (idx[j] < 0 || size_t(idx[j]) >= n) throw std::out_of_range("scatter: index out of range");
  if (accumulate) {
    for (size_t j = 0; j < k; ++j) out[idx[j]] += vals[j];
    return;
  }
  int nt = num_threads();
#pragma omp parallel for num_threads(nt) if (parallel_ok(nt, k)) schedule(static)
  for (ptrdiff_t j = 0; j < ptrdiff_t(k); ++j) out[idx[j]] = vals[j];
}

// Copies 64 bytes from an aligned buffer to 64-byte aligned dst with non-temporal stores where
// the machine has them: a line written whole needs no read of its old contents first.
inline void stream_line(void* dst, const void* src) {
#if defined(__AVX512F__)
  _mm512_stream_si512(static_cast<__m512i*>(dst), _mm512_load_si512(src));
#elif defined(__AVX__)
  for (int h = 0; h < 2; ++h)
    _mm256_stream_si256(static_cast<__m256i*>(dst) + h,
                        _mm256_load_si256(static_cast<const __m256i*>(src) + h));
#elif defined(__SSE2__)
  for (int h = 0; h < 4; ++h)
    _mm_stream_si128(static_cast<__m128i*>(dst) + h,
                     _mm_load_si128(static_cast<const __m128i*>(src) + h));
#else
  std::memcpy(dst, src, 64);
#endif
}

inline void stream_fence() {
#if defined(__SSE2__)
  _mm_sfence();
#endif
}

// out = 0 except out[idx[j]] = vals[j] (the last of equal indices wins). Ascending indices are
// written a block at a time: each block's entries go into a zeroed L1 buffer that is then
// streamed out whole, so out is written once, without the read of its old contents that a fill
// costs, and the entries cost no cache misses; the buffer's touched places are zeroed again.
template <class T, class I>
void scatter_dense_t(T* out, size_t n, const I* idx, const T* vals, size_t k) {
  bool sorted = true;
  for (size_t j = 0; j < k; ++j) {
    if (idx[j] < 0 || size_t(idx[j]) >= n)
      throw std::out_of_range("scatter_dense: index out of range");
    sorted &= j == 0 || idx[j - 1] <= idx[j];
  }
  auto plain = [&](size_t lo, size_t hi) {  // fill, then the entries of [lo, hi)
    std::fill(out + lo, out + hi, T(0));
    size_t j = size_t(std::lower_bound(idx, idx + k, I(lo)) - idx);
    for (; j < k && size_t(idx[j]) < hi; ++j) out[idx[j]] = vals[j];
  };
  if (!sorted) {
    std::fill(out, out + n, T(0));
    for (size_t j = 0; j < k; ++j) out[idx[j]] = vals[j];
    return;
  }
  if (reinterpret_cast<uintptr_t>(out) % sizeof(T) != 0) return plain(0, n);
  constexpr size_t kBlock = 16384 / sizeof(T), kLine = 64 / sizeof(T);
  // Blocks start on a 64-byte boundary of out; the ragged head and tail are written plainly.
  const size_t head = std::min(n, ((64 - reinterpret_cast<uintptr_t>(out) % 64) % 64) / sizeof(T));
  const size_t nb = (n - head) / kBlock, body_end = head + nb * kBlock;
  plain(0, head);
  plain(body_end, n);
  const int nt = num_threads();
#pragma omp parallel num_threads(nt) if (parallel_ok(nt, n))
  {
    alignas(64) T buf[kBlock] = {};
#pragma omp for schedule(static)
    for (ptrdiff_t b = 0; b < ptrdiff_t(nb); ++b) {
      const size_t lo = head + size_t(b) * kBlock, hi = lo + kBlock;
      const size_t j0 = size_t(std::lower_bound(idx, idx + k, I(lo)) - idx);
      size_t j = j0;
      for (; j < k && size_t(idx[j]) < hi; ++j) buf[size_t(idx[j]) - lo] = vals[j];
      for (size_t t = 0; t < kBlock; t += kLine) stream_line(out + lo + t, buf + t);
      for (size_t q = j0; q < j; ++q) buf[size_t(idx[q]) - lo] = T(0);
    }
    stream_fence();
  }
}

// out = the dense form of the union of sorted sets (strictly ascending int64 indices), values
// of an index in several sets summed in list order ((s0 + s1) + s2 ...), an index in one set
// taking its value as it is: what merge_sorted over the list then scatter_dense write, bit for
// bit, without building the merged set. Block by block as in scatter_dense; a flag per place
// of the block tells a first value from one to add to.
template <class T>
void merge_dense_t(T* out, size_t n, const std::vector<const int64_t*>& idx,
                   const std::vector<const T*>& vals, const std::vector<size_t>& len) {
  const size_t ns = idx.size();
  for (size_t s = 0; s < ns; ++s)
    for (size_t j = 0; j < len[s]; ++j)
      if (idx[s][j] < 0 || size_t(idx[s][j]) >= n || (j && idx[s][j - 1] >= idx[s][j]))
        throw std::invalid_argument("merge_dense: each set's indices must ascend strictly "
                                    "within [0, n)");
  constexpr size_t kBlock = 16384 / sizeof(T), kLine = 64 / sizeof(T);
  const bool aligned = reinterpret_cast<uintptr_t>(out) % sizeof(T) == 0;
  const size_t head =
      aligned ? std::min(n, ((64 - reinterpret_cast<uintptr_t>(out) % 64) % 64) / sizeof(T)) : 0;
  // Pieces: [0, head), then blocks of kBlock (the last may be short).
  const size_t nblocks = n > head ? (n - head + kBlock - 1) / kBlock : 0;
  const int nt = num_threads();
#pragma omp parallel num_threads(nt) if (parallel_ok(nt, n))
  {
    alignas(64) T buf[kBlock] = {};
    uint8_t seen[kBlock] = {};
    // Per set, its first entry at or after `next`: a thread's pieces mostly follow one
    // another, so the cursors carry on; a piece elsewhere searches for its place.
    std::vector<size_t> first(ns), at(ns);
    size_t next = ~size_t(0);
    auto piece = [&](size_t lo, size_t hi) {
      for (size_t s = 0; s < ns; ++s) {
        const int64_t* ix = idx[s];
        const T* vx = vals[s];
        size_t j = lo == next ? at[s] : size_t(std::lower_bound(ix, ix + len[s], int64_t(lo)) - ix);
        first[s] = j;
        for (; j < len[s] && size_t(ix[j]) < hi; ++j) {
          const size_t p = size_t(ix[j]) - lo;
          buf[p] = seen[p] ? buf[p] + vx[j] : vx[j];
          seen[p] = 1;
        }
        at[s] = j;
      }
      next = hi;
      const size_t m = hi - lo;
      if (aligned && m == kBlock && (lo - head) % kBlock == 0 && lo >= head)
        for (size_t t = 0; t < m; t += kLine) stream_line(out + lo + t, buf + t);
      else
        std::memcpy(out + lo, buf, m * sizeof(T));
      for (size_t s = 0; s < ns; ++s)
        for (size_t j = first[s]; j < len[s] && size_t(idx[s][j]) < hi; ++j) {
          const size_t p = size_t(idx[s][j]) - lo;
          buf[p] = T(0);
          seen[p] = 0;
        }
    };
#pragma omp single nowait
    if (head) piece(0, head);
#pragma omp for schedule(static)
    for (ptrdiff_t b = 0; b < ptrdiff_t(nblocks); ++b) {
      const size_t lo = head + size_t(b) * kBlock;
      piece(lo, std::min(n, lo + kBlock));
    }
    stream_fence();
  }
}

template <class V, class F>
void dispatch(const V& vals, const HostInput& idx, const char* what, F&& f) {
  bool i32 = idx.dtype() == nb::dtype<int32_t>(), i64 = idx.dtype() == nb::dtype<int64_t>();
  bool f32 = vals.dtype() == nb::dtype<float>(), f64 = vals.dtype() == nb::dtype<double>();
  if (!(i32 || i64) || !(f32 || f64))
    throw std::invalid_argument(std::string(what) +
                                ": values must be float32/float64 and indices int32/int64");
  require_aligned(vals, f32 ? 4 : 8, what);
  require_aligned(idx, i32 ? 4 : 8, what);
  if (f32 && i32) f(float(), int32_t());
  else if (f32) f(float(), int64_t());
  else if (i32) f(double(), int32_t());
  else f(double(), int64_t());
}

// The typed pointers of a scatter's (out, idx, vals), checked, handed to f without the GIL.
template <class F>
void with_scatter_args(HostArray& out, const HostInput& idx, const HostInput& vals,
                       const char* what, F&& f) {
  if (out.dtype() != vals.dtype() || idx.size() != vals.size())
    throw std::invalid_argument(std::string(what) +
                                ": vals must match out's dtype and idx's length");
  require_aligned(vals, vals.itemsize(), what);
  dispatch(out, idx, what, [&](auto t, auto i) {
    using T = decltype(t);
    using I = decltype(i);
    auto* op = static_cast<T*>(out.data());
    auto* ip = static_cast<const I*>(idx.data());
    auto* vp = static_cast<const T*>(vals.data());
    nb::gil_scoped_release nogil;
    f(op, ip, vp);
  });
}

// Union of two sorted unique index lists, values of an index in both summed as a + b. Returns
// the length of the union (the outputs hold na + nb places).
template <class T>
size_t merge_t(const int64_t* ia, const T* va, size_t na, const int64_t* ib, const T* vb,
               size_t nb, int64_t* io, T* vo) {
  size_t i = 0, j = 0, k = 0;
  while (i < na && j < nb) {
    if (ia[i] < ib[j]) { io[k] = ia[i]; vo[k++] = va[i++]; }
    else if (ib[j] < ia[i]) { io[k] = ib[j]; vo[k++] = vb[j++]; }
    else { io[k] = ia[i]; vo[k++] = va[i++] + vb[j++]; }
  }
  for (; i < na; ++i, ++k) { io[k] = ia[i]; vo[k] = va[i]; }
  for (; j < nb; ++j, ++k) { io[k] = ib[j]; vo[k] = vb[j]; }
  return k;
}

}  // namespace

void register_sparse(nb::module_& m) {
  m.def(
      "gather",
      [](HostInput x, HostInput idx, HostArray out) {
        if (x.dtype() != out.dtype() || idx.size() != out.size())
          throw std::invalid_argument("gather: out must match x's dtype and idx's length");
        require_aligned(out, out.itemsize(), "gather out");
        dispatch(x, idx, "gather", [&](auto t, auto i) {
          using T = decltype(t);
          using I = decltype(i);
          auto* xp = static_cast<const T*>(x.data());
          auto* ip = static_cast<const I*>(idx.data());
          auto* op = static_cast<T*>(out.data());
          nb::gil_scoped_release nogil;
          gather_t<T, I>(xp, x.size(), ip, idx.size(), op);
        });
      },
      nb::arg("x"), nb::arg("idx"), nb::arg("out"), "out[j] = x[idx[j]] (bounds-checked).");
  m.def(
      "scatter",
      [](HostArray out, HostInput idx, HostInput vals, bool accumulate) {
        with_scatter_args(out, idx, vals, "scatter", [&](auto* op, const auto* ip, const auto* vp) {
          scatter_t(op, out.size(), ip, vp, idx.size(), accumulate);
        });
      },
      nb::arg("out"), nb::arg("idx"), nb::arg("vals"), nb::arg("accumulate"),
      "out[idx[j]] = vals[j], or += when accumulate (in list order); bounds-checked.");
  m.def(
      "scatter_dense",
      [](HostArray out, HostInput idx, HostInput vals) {
        with_scatter_args(out, idx, vals, "scatter_dense",
                          [&](auto* op, const auto* ip, const auto* vp) {
          scatter_dense_t(op, out.size(), ip, vp, idx.size());
        });
      },
      nb::arg("out"), nb::arg("idx"), nb::arg("vals"),
      "out = 0 except out[idx[j]] = vals[j] (the last of equal indices wins); bounds-checked. "
      "One pass over out when idx ascends.");
  m.def(
      "merge_dense",
      [](HostArray out, nb::list idx, nb::list vals) {
        if (idx.size() != vals.size())
          throw std::invalid_argument("merge_dense: as many value arrays as index arrays");
        std::vector<HostInput> ia, va;
        for (size_t s = 0; s < idx.size(); ++s) {
          ia.push_back(nb::cast<HostInput>(idx[s]));
          va.push_back(nb::cast<HostInput>(vals[s]));
        }
        std::deque<AlignedView> keep;  // aligned copies of sets received at odd offsets
        std::vector<const int64_t*> ip;
        std::vector<size_t> len;
        for (auto& a : ia) {
          ip.push_back(aligned_input<int64_t>(a, a.size(), "merge_dense indices", keep));
          len.push_back(a.size());
        }
        auto run = [&](auto t) {
          using T = decltype(t);
          std::vector<const T*> vp;
          for (size_t s = 0; s < va.size(); ++s)
            vp.push_back(aligned_input<T>(va[s], len[s], "merge_dense values", keep));
          T* op = typed_data<T>(out, out.size(), "merge_dense out");
          nb::gil_scoped_release nogil;
          merge_dense_t<T>(op, out.size(), ip, vp, len);
        };
        if (out.dtype() == nb::dtype<float>()) run(float());
        else if (out.dtype() == nb::dtype<double>()) run(double());
        else throw std::invalid_argument("merge_dense: out must be float32 or float64");
      },
      nb::arg("out"), nb::arg("idx"), nb::arg("vals"),
      "out = dense form of the union of sorted sets (lists of int64 index arrays and value "
      "arrays of out's dtype), values of a shared index summed in list order.");
  m.def(
      "merge_sorted",
      [](HostInput ia, HostInput va, HostInput ib, HostInput vb, HostArray io, HostArray vo) {
        const size_t na = ia.size(), nb = ib.size();
        std::deque<AlignedView> keep;  // aligned copies of inputs received at odd offsets
        auto* pia = aligned_input<int64_t>(ia, na, "merge_sorted a indices", keep);
        auto* pib = aligned_input<int64_t>(ib, nb, "merge_sorted b indices", keep);
        auto* pio = typed_data<int64_t>(io, na + nb, "merge_sorted out indices");
        if (va.dtype() == nb::dtype<float>()) {
          auto* a = aligned_input<float>(va, na, "merge_sorted a values", keep);
          auto* b = aligned_input<float>(vb, nb, "merge_sorted b values", keep);
          auto* o = typed_data<float>(vo, na + nb, "merge_sorted out values");
          nb::gil_scoped_release nogil;
          return merge_t<float>(pia, a, na, pib, b, nb, pio, o);
        }
        auto* a = aligned_input<double>(va, na, "merge_sorted a values", keep);
        auto* b = aligned_input<double>(vb, nb, "merge_sorted b values", keep);
        auto* o = typed_data<double>(vo, na + nb, "merge_sorted out values");
        nb::gil_scoped_release nogil;
        return merge_t<double>(pia, a, na, pib, b, nb, pio, o);
      },
      nb::arg("ia"), nb::arg("va"), nb::arg("ib"), nb::arg("vb"), nb::arg("io"), nb::arg("vo"),
      "Union of two sorted unique int64 index lists (float32 or float64 values, a + b where "
      "both have an index) into io/vo; returns its length.");
}

}  // namespace compcoll
