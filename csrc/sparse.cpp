// Gather and scatter for sparse payloads (index + value lists). Scatter of unique indices runs
// in parallel; accumulation with possible duplicates runs in index-list order on one thread,
// so summing the same lists always rounds the same way.
#include <algorithm>
#include <cstring>
#include <string>

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

// out = 0 except out[idx[j]] = vals[j] (the last of equal indices wins). Ascending indices are
// written a block at a time: each block is zeroed and gets its entries while it sits in L1, one
// pass over out instead of a fill and then a scatter of cache misses.
template <class T, class I>
void scatter_dense_t(T* out, size_t n, const I* idx, const T* vals, size_t k) {
  bool sorted = true;
  for (size_t j = 0; j < k; ++j) {
    if (idx[j] < 0 || size_t(idx[j]) >= n)
      throw std::out_of_range("scatter_dense: index out of range");
    sorted &= j == 0 || idx[j - 1] <= idx[j];
  }
  int nt = num_threads();
  if (!sorted) {
    std::fill(out, out + n, T(0));
    for (size_t j = 0; j < k; ++j) out[idx[j]] = vals[j];
    return;
  }
  constexpr size_t kBlock = 16384 / sizeof(T);
  const size_t nb = (n + kBlock - 1) / kBlock;
#pragma omp parallel for num_threads(nt) if (parallel_ok(nt, n)) schedule(static)
  for (ptrdiff_t b = 0; b < ptrdiff_t(nb); ++b) {
    const size_t lo = size_t(b) * kBlock, hi = std::min(n, lo + kBlock);
    std::memset(out + lo, 0, (hi - lo) * sizeof(T));
    size_t j = size_t(std::lower_bound(idx, idx + k, I(lo)) - idx);
    for (; j < k && size_t(idx[j]) < hi; ++j) out[idx[j]] = vals[j];
  }
}

template <class F>
void dispatch(const HostArray& vals, const HostArray& idx, const char* what, F&& f) {
  bool i32 = idx.dtype() == nb::dtype<int32_t>(), i64 = idx.dtype() == nb::dtype<int64_t>();
  bool f32 = vals.dtype() == nb::dtype<float>(), f64 = vals.dtype() == nb::dtype<double>();
  if (!(i32 || i64) || !(f32 || f64))
    throw std::invalid_argument(std::string(what) +
                                ": values must be float32/float64 and indices int32/int64");
  if (f32 && i32) f(float(), int32_t());
  else if (f32) f(float(), int64_t());
  else if (i32) f(double(), int32_t());
  else f(double(), int64_t());
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
      [](HostArray x, HostArray idx, HostArray out) {
        if (x.dtype() != out.dtype() || idx.size() != out.size())
          throw std::invalid_argument("gather: out must match x's dtype and idx's length");
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
      [](HostArray out, HostArray idx, HostArray vals, bool accumulate) {
        if (out.dtype() != vals.dtype() || idx.size() != vals.size())
          throw std::invalid_argument("scatter: vals must match out's dtype and idx's length");
        dispatch(out, idx, "scatter", [&](auto t, auto i) {
          using T = decltype(t);
          using I = decltype(i);
          auto* op = static_cast<T*>(out.data());
          auto* ip = static_cast<const I*>(idx.data());
          auto* vp = static_cast<const T*>(vals.data());
          nb::gil_scoped_release nogil;
          scatter_t<T, I>(op, out.size(), ip, vp, idx.size(), accumulate);
        });
      },
      nb::arg("out"), nb::arg("idx"), nb::arg("vals"), nb::arg("accumulate"),
      "out[idx[j]] = vals[j], or += when accumulate (in list order); bounds-checked.");
  m.def(
      "scatter_dense",
      [](HostArray out, HostArray idx, HostArray vals) {
        if (out.dtype() != vals.dtype() || idx.size() != vals.size())
          throw std::invalid_argument(
              "scatter_dense: vals must match out's dtype and idx's length");
        dispatch(out, idx, "scatter_dense", [&](auto t, auto i) {
          using T = decltype(t);
          using I = decltype(i);
          auto* op = static_cast<T*>(out.data());
          auto* ip = static_cast<const I*>(idx.data());
          auto* vp = static_cast<const T*>(vals.data());
          nb::gil_scoped_release nogil;
          scatter_dense_t<T, I>(op, out.size(), ip, vp, idx.size());
        });
      },
      nb::arg("out"), nb::arg("idx"), nb::arg("vals"),
      "out = 0 except out[idx[j]] = vals[j] (the last of equal indices wins); bounds-checked. "
      "One pass over out when idx ascends.");
  m.def(
      "merge_sorted",
      [](HostArray ia, HostArray va, HostArray ib, HostArray vb, HostArray io, HostArray vo) {
        const size_t na = ia.size(), nb = ib.size();
        auto* pia = typed_data<int64_t>(ia, na, "merge_sorted a indices");
        auto* pib = typed_data<int64_t>(ib, nb, "merge_sorted b indices");
        auto* pio = typed_data<int64_t>(io, na + nb, "merge_sorted out indices");
        if (va.dtype() == nb::dtype<float>()) {
          auto* a = typed_data<float>(va, na, "merge_sorted a values");
          auto* b = typed_data<float>(vb, nb, "merge_sorted b values");
          auto* o = typed_data<float>(vo, na + nb, "merge_sorted out values");
          nb::gil_scoped_release nogil;
          return merge_t<float>(pia, a, na, pib, b, nb, pio, o);
        }
        auto* a = typed_data<double>(va, na, "merge_sorted a values");
        auto* b = typed_data<double>(vb, nb, "merge_sorted b values");
        auto* o = typed_data<double>(vo, na + nb, "merge_sorted out values");
        nb::gil_scoped_release nogil;
        return merge_t<double>(pia, a, na, pib, b, nb, pio, o);
      },
      nb::arg("ia"), nb::arg("va"), nb::arg("ib"), nb::arg("vb"), nb::arg("io"), nb::arg("vo"),
      "Union of two sorted unique int64 index lists (float32 or float64 values, a + b where "
      "both have an index) into io/vo; returns its length.");
}

}  // namespace compcoll
