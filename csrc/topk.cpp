// Top-k by magnitude in O(n): a sample of |x| gives a threshold that keeps a little more than k
// candidates, one parallel pass collects them, and nth_element on the few candidates finds the
// exact k-th largest. Ties are broken by the lower index, so the selection is a function of x
// alone (same on every rank, for any thread count). Indices come back in ascending order.
// The sampled-threshold variant (Lin et al. 2018, DGC) stops after the pass: no exact cut.
#include <algorithm>
#include <cmath>
#include <utility>

#include "compress_common.h"

namespace compcoll {
namespace {

using Index = int64_t;
constexpr size_t kChunk = size_t(1) << 16;
constexpr size_t kSample = size_t(1) << 16;

// Indices of keys >= thr in ascending order; chunks are fixed-size so the output is identical
// for any thread count.
std::vector<Index> collect(const float* x, size_t n, uint32_t thr) {
  const size_t nc = (n + kChunk - 1) / kChunk;
  std::vector<std::vector<Index>> parts(nc);
  int nt = num_threads();
#pragma omp parallel for num_threads(nt) if (parallel_ok(nt, n)) schedule(static)
  for (ptrdiff_t c = 0; c < ptrdiff_t(nc); ++c) {
    const size_t lo = size_t(c) * kChunk, hi = std::min(n, lo + kChunk);
    auto& p = parts[c];
    for (size_t i = lo; i < hi; ++i)
      if (abs_key(x[i]) >= thr) p.push_back(Index(i));
  }
  size_t total = 0;
  for (auto& p : parts) total += p.size();
  std::vector<Index> out;
  out.reserve(total);
  for (auto& p : parts) out.insert(out.end(), p.begin(), p.end());
  return out;
}

// The r-th largest key (1-based) of a sample of x drawn at positions hashed from seed.
uint32_t sample_threshold(const float* x, size_t n, size_t r, uint64_t seed) {
  const size_t s = std::min(n, kSample);
  if (r == 0) return 0xffffffffu;
  if (r > s) return 0;
  std::vector<uint32_t> keys(s);
  for (size_t i = 0; i < s; ++i) {
    size_t pos;
    if (s == n) {
      pos = i;
    } else {
      uint64_t h = (uint64_t(mix32(uint32_t(i) ^ uint32_t(seed))) << 32) |
                   mix32(uint32_t(i) * 0x9e3779b9u ^ uint32_t(seed >> 32) ^ 0x5bd1e995u);
      pos = size_t(h % n);
    }
    keys[i] = abs_key(x[pos]);
  }
  std::nth_element(keys.begin(), keys.begin() + (r - 1), keys.end(), std::greater<uint32_t>());
  return keys[r - 1];
}

// Keep exactly k of the candidates (ascending indices): the largest keys, lower index on ties.
std::vector<Index> exact_cut(const float* x, std::vector<Index> cand, size_t k) {
  if (cand.size() <= k) return cand;
  std::vector<std::pair<uint32_t, Index>> kv(cand.size());
  for (size_t i = 0; i < cand.size(); ++i) kv[i] = {abs_key(x[cand[i]]), cand[i]};
  auto before = [](const std::pair<uint32_t, Index>& a, const std::pair<uint32_t, Index>& b) {
    return a.first > b.first || (a.first == b.first && a.second < b.second);
  };
  std::nth_element(kv.begin(), kv.begin() + (k - 1), kv.end(), before);
  const auto pivot = kv[k - 1];
  std::vector<Index> out;
  out.reserve(k);
  for (Index i : cand) {
    uint32_t key = abs_key(x[i]);
    if (key > pivot.first || (key == pivot.first && i <= pivot.second)) out.push_back(i);
  }
  return out;
}

std::vector<Index> topk_exact(const float* x, size_t n, size_t k) {
  if (k == 0) return {};
  const size_t s = std::min(n, kSample);
  // Aim the sample rank above k's expected share by a few standard deviations, so one pass
  // almost always collects >= k candidates; if not, fall back to taking every element.
  double expect = double(k) * double(s) / double(n);
  size_t r = size_t(std::ceil(expect * 1.05 + 4.0 * std::sqrt(expect) + 8.0));
  uint32_t thr = (s == n || r >= s) ? 0 : sample_threshold(x, n, r, 0x243f6a8885a308d3ull);
  std::vector<Index> cand = collect(x, n, thr);
  if (cand.size() < k) cand = collect(x, n, 0);
  return exact_cut(x, std::move(cand), k);
}

std::vector<Index> topk_sampled(const float* x, size_t n, size_t k, uint64_t seed) {
  if (k == 0) return {};
  const size_t s = std::min(n, kSample);
  size_t r = std::max<size_t>(1, size_t(std::llround(double(k) * double(s) / double(n))));
  std::vector<Index> cand = collect(x, n, sample_threshold(x, n, std::min(r, s), seed));
  // A badly low threshold would overflow the expected payload: cut back to exactly k then.
  if (cand.size() > 2 * k) cand = exact_cut(x, std::move(cand), k);
  return cand;
}

nb::ndarray<nb::numpy, Index, nb::ndim<1>> to_numpy(std::vector<Index>&& v) {
  auto* heap = new std::vector<Index>(std::move(v));
  nb::capsule owner(heap, [](void* p) noexcept { delete static_cast<std::vector<Index>*>(p); });
  return nb::ndarray<nb::numpy, Index, nb::ndim<1>>(heap->data(), {heap->size()}, owner);
}

}  // namespace

void register_topk(nb::module_& m) {
  m.def(
      "topk_indices",
      [](HostArray x, size_t k) {
        const float* xp = f32_data(x, "topk_indices");
        size_t n = x.size();
        std::vector<Index> out;
        {
          nb::gil_scoped_release nogil;
          out = k >= n ? collect(xp, n, 0) : topk_exact(xp, n, k);
        }
        return to_numpy(std::move(out));
      },
      nb::arg("x"), nb::arg("k"),
      "Ascending int64 indices of the k largest |x| (NaN > Inf > finite; ties -> lower index).");
  m.def(
      "topk_sampled_indices",
      [](HostArray x, size_t k, uint64_t seed) {
        const float* xp = f32_data(x, "topk_sampled_indices");
        size_t n = x.size();
        std::vector<Index> out;
        {
          nb::gil_scoped_release nogil;
          out = k >= n ? collect(xp, n, 0) : topk_sampled(xp, n, k, seed);
        }
        return to_numpy(std::move(out));
      },
      nb::arg("x"), nb::arg("k"), nb::arg("seed"),
      "Ascending indices with |x| >= a threshold estimated from a seeded sample (about k; at "
      "most 2k).");
  m.def(
      "select_above",
      [](HostArray x, float tau) {
        const float* xp = f32_data(x, "select_above");
        if (!(tau >= 0.0f) || !std::isfinite(tau))
          throw std::invalid_argument("select_above: tau must be finite and >= 0");
        std::vector<Index> out;
        {
          nb::gil_scoped_release nogil;
          out = collect(xp, x.size(), abs_key(tau) + 1);
        }
        return to_numpy(std::move(out));
      },
      nb::arg("x"), nb::arg("tau"), "Ascending indices with |x| > tau (non-finite always kept).");
}

}  // namespace compcoll
