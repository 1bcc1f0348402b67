// Top-k by magnitude in O(n): a sample of |x| gives a threshold that keeps a little more than k
// candidates, one parallel pass collects them, and nth_element on the few candidates finds the
// exact k-th largest. Ties are broken by the lower index, so the selection is a function of x
// alone (same on every rank, for any thread count). Indices come back in ascending order.
// The sampled-threshold variant (Lin et al. 2018, DGC) stops after the pass: no exact cut.
// topk_feedback / select_above_feedback fold error feedback into the pass: x + residual is
// formed, filtered and written back (selected entries as 0) in one visit of the data.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <utility>

#ifdef __AVX512F__
#include <immintrin.h>
#endif

#include "compress_common.h"

namespace compcoll {
namespace {

using Index = int64_t;
constexpr size_t kChunk = size_t(1) << 16;
constexpr size_t kSample = size_t(1) << 16;

// Appends to p the indices in [lo, hi) whose key is >= thr, ascending. Hits are a small
// minority at the usual thresholds, so 16 keys are compared at once (branch-free) and only a
// group with a hit is looked at element by element.
void collect_range(const float* __restrict x, size_t lo, size_t hi, uint32_t thr,
                   std::vector<Index>& p) {
  size_t i = lo;
#ifdef __AVX512F__
  const __m512i thrv = _mm512_set1_epi32(int(thr)), absm = _mm512_set1_epi32(0x7fffffff);
  constexpr size_t kAhead = 1024;  // a page ahead, as in keep_pass
  for (; i + 16 <= hi; i += 16) {
    if (i + kAhead < hi) __builtin_prefetch(x + i + kAhead);
    const __m512i key = _mm512_and_si512(_mm512_castps_si512(_mm512_loadu_ps(x + i)), absm);
    for (uint32_t hit = _mm512_cmpge_epu32_mask(key, thrv); hit; hit &= hit - 1)
      p.push_back(Index(i + size_t(__builtin_ctz(hit))));
  }
#endif
  for (; i + 16 <= hi; i += 16) {
    uint32_t any = 0;
    for (size_t l = 0; l < 16; ++l) any |= uint32_t(abs_key(x[i + l]) >= thr);
    if (!any) continue;
    for (size_t l = 0; l < 16; ++l)
      if (abs_key(x[i + l]) >= thr) p.push_back(Index(i + l));
  }
  for (; i < hi; ++i)
    if (abs_key(x[i]) >= thr) p.push_back(Index(i));
}

// Indices of keys >= thr in ascending order; chunks are fixed-size so the output is identical
// for any thread count. ``share``: the fraction expected to pass (room is made for it up front).
std::vector<Index> collect(const float* x, size_t n, uint32_t thr, double share = 0.0) {
  const size_t nc = (n + kChunk - 1) / kChunk;
  std::vector<std::vector<Index>> parts(nc);
  const size_t room = size_t(share * 1.25 * double(kChunk)) + 64;
  int nt = num_threads();
#pragma omp parallel for num_threads(nt) if (parallel_ok(nt, n)) schedule(static)
  for (ptrdiff_t c = 0; c < ptrdiff_t(nc); ++c) {
    const size_t lo = size_t(c) * kChunk, hi = std::min(n, lo + kChunk);
    if (share > 0) parts[c].reserve(std::min(room, hi - lo));
    collect_range(x, lo, hi, thr, parts[c]);
  }
  size_t total = 0;
  for (auto& p : parts) total += p.size();
  std::vector<Index> out;
  out.reserve(total);
  for (auto& p : parts) out.insert(out.end(), p.begin(), p.end());
  return out;
}

// The r-th largest key (1-based) of a sample of the values get(pos) at positions hashed from
// seed (every position when n <= kSample).
template <class Get>
uint32_t sample_threshold_of(Get&& get, size_t n, size_t r, uint64_t seed) {
  const size_t s = std::min(n, kSample);
  if (r == 0) return 0xffffffffu;
  if (r > s) return 0;
  std::vector<uint32_t> keys(s);
  if (s == n) {
    for (size_t i = 0; i < s; ++i) keys[i] = abs_key(get(i));
  } else {
    auto pos = [&](size_t i) {
      uint64_t h = (uint64_t(mix32(uint32_t(i) ^ uint32_t(seed))) << 32) |
                   mix32(uint32_t(i) * 0x9e3779b9u ^ uint32_t(seed >> 32) ^ 0x5bd1e995u);
      return size_t(h % n);
    };
    constexpr size_t kAhead = 16;  // random reads: ask for the lines ahead
    for (size_t i = 0; i < s; ++i) {
      if (i + kAhead < s) get.prefetch(pos(i + kAhead));
      keys[i] = abs_key(get(pos(i)));
    }
  }
  std::nth_element(keys.begin(), keys.begin() + (r - 1), keys.end(), std::greater<uint32_t>());
  return keys[r - 1];
}

// The r-th largest key (1-based) of s values get(pos), one at a hashed place in each of s
// equal strata of [0, n): no worse an estimate than s independent draws, and the reads run
// forward through memory (a fraction of the cost of s random reads of a large array).
template <class Get>
uint32_t strata_threshold(Get&& get, size_t n, size_t s, size_t r, uint64_t seed) {
  if (r == 0) return 0xffffffffu;
  if (r > s) return 0;
  std::vector<uint32_t> keys(s);
  const uint32_t salt = uint32_t(seed) ^ uint32_t(seed >> 32);
  auto pos = [&](size_t j) {
    const size_t lo = j * n / s, width = (j + 1) * n / s - lo;
    return lo + size_t(mix32(uint32_t(j) ^ salt)) % width;
  };
  constexpr size_t kAhead = 16;
  for (size_t j = 0; j < s; ++j) {
    if (j + kAhead < s) get.prefetch(pos(j + kAhead));
    keys[j] = abs_key(get(pos(j)));
  }
  std::nth_element(keys.begin(), keys.begin() + (r - 1), keys.end(), std::greater<uint32_t>());
  return keys[r - 1];
}

// Values of one array, for the samplers.
struct ValuesOf {
  const float* x;
  float operator()(size_t i) const { return x[i]; }
  void prefetch(size_t i) const { __builtin_prefetch(x + i); }
};

uint32_t sample_threshold(const float* x, size_t n, size_t r, uint64_t seed) {
  return sample_threshold_of(ValuesOf{x}, n, r, seed);
}

// Keep exactly k of the candidates (ascending indices): the largest keys, lower index on ties.
// The k-th largest key alone is found (a histogram of the keys' high bits finds its bin, and
// only that bin's keys are ordered); the keys above it all stay, and of the keys equal to it
// the lowest indices, as many as are still needed (the candidates come in ascending index
// order). The same selection as ordering (key, index) pairs, at a fraction of the cost.
std::vector<Index> exact_cut(const float* x, std::vector<Index> cand, size_t k) {
  if (cand.size() <= k) return cand;
  std::vector<uint32_t> keys(cand.size());
  for (size_t i = 0; i < cand.size(); ++i) keys[i] = abs_key(x[cand[i]]);
  constexpr int kShift = 15;  // keys < 2^31: 2^16 bins of their high bits
  std::vector<uint32_t> hist(size_t(1) << (31 - kShift), 0);
  for (uint32_t key : keys) ++hist[key >> kShift];
  size_t bin = hist.size(), higher = 0;  // keys in the bins above `bin`
  while (higher + hist[bin - 1] < k) higher += hist[--bin];
  --bin;
  std::vector<uint32_t> in_bin;
  in_bin.reserve(hist[bin]);
  for (uint32_t key : keys)
    if ((key >> kShift) == bin) in_bin.push_back(key);
  const size_t rank = k - higher;  // the pivot is the rank-th largest key of its bin
  std::nth_element(in_bin.begin(), in_bin.begin() + (rank - 1), in_bin.end(),
                   std::greater<uint32_t>());
  const uint32_t pivot = in_bin[rank - 1];
  size_t above = 0;
  for (uint32_t key : keys) above += key > pivot;
  size_t ties = k - above;  // keys equal to the pivot that still go in, lowest index first
  std::vector<Index> out;
  out.reserve(k);
  for (size_t i = 0; i < cand.size(); ++i) {
    if (keys[i] > pivot || (keys[i] == pivot && ties > 0 && ties--)) out.push_back(cand[i]);
  }
  return out;
}

// Fewer than k nonzero elements (cand: every one, ascending): the selection is all of them and
// the lowest-index zeros up to k (the tie rule: lower index first), in one merge. Ordering
// millions of tied zeros instead cost tens of milliseconds on a sparse gradient.
std::vector<Index> with_zeros(std::vector<Index> cand, size_t n, size_t k) {
  std::vector<Index> out;
  out.reserve(k);
  size_t j = 0, zeros = 0;
  const size_t need = k - cand.size();
  for (size_t i = 0; i < n && zeros < need; ++i) {
    if (j < cand.size() && cand[j] == i) {
      ++j;
    } else {
      ++zeros;
    }
    out.push_back(Index(i));
  }
  for (; j < cand.size(); ++j) out.push_back(cand[j]);
  return out;
}

constexpr uint64_t kExactSeed = 0x243f6a8885a308d3ull;
// Strata of the exact selection's sample: fewer reads than kSample, for a few percent more
// candidates.
constexpr size_t kStrata = size_t(1) << 14;

// The sample rank whose key makes the exact selection's threshold: above k's expected share by
// a few standard deviations, so one pass almost always keeps >= k candidates. 0: no sample
// (every element is a candidate).
size_t exact_sample_rank(size_t n, size_t k, size_t s) {
  double expect = double(k) * double(s) / double(n);
  size_t r = size_t(std::ceil(expect * 1.05 + 4.0 * std::sqrt(expect) + 8.0));
  return (s == n || r >= s) ? 0 : r;
}

std::vector<Index> topk_exact(const float* x, size_t n, size_t k) {
  if (k == 0) return {};
  // If the sample misses (fewer than k candidates), fall back to taking every element. Any
  // threshold gives the same result (only the work varies): strata read fastest.
  const size_t se = std::min(n, kStrata);
  const size_t r = exact_sample_rank(n, k, se);
  // Zeros are never candidates (key >= 1): they only make up a shortfall, in index order.
  uint32_t thr = std::max<uint32_t>(
      1, r == 0 ? 0 : strata_threshold(ValuesOf{x}, n, se, r, kExactSeed));
  std::vector<Index> cand = collect(x, n, thr, r == 0 ? 0.0 : double(r) / double(se));
  if (cand.size() < k && thr > 1) cand = collect(x, n, 1);
  if (cand.size() < k) return with_zeros(std::move(cand), n, k);
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

// ---- Selection with error feedback folded in -------------------------------------------
// v = x + residual is formed, stored as the new residual and filtered against a threshold in
// one pass; the exact cut then orders only the candidates, and the sent entries (and any
// non-finite ones) are zeroed. The selection is the one topk_indices / topk_sampled_indices /
// select_above make of x + residual, values included.

// Indices and values of the elements a pass keeps, in ascending index order. The vectors'
// tails past `size` are scratch: a block writes its hits there before they are counted.
struct Kept {
  std::unique_ptr<uint32_t[]> idx;  // not value-initialized: growing touches no memory
  std::unique_ptr<float[]> val;
  size_t size = 0, cap = 0;
  void room(size_t m) {
    if (size + m <= cap) return;
    const size_t c = std::max(size + m, cap * 2);
    std::unique_ptr<uint32_t[]> i(new uint32_t[c]);
    std::unique_ptr<float[]> v(new float[c]);
    std::copy_n(idx.get(), size, i.get());
    std::copy_n(val.get(), size, v.get());
    idx = std::move(i);
    val = std::move(v);
    cap = c;
  }
};

constexpr size_t kPassBlock = 4096;

// Over [lo, hi): (i, v) appended to kept where abs_key(v) >= thr, with v = res[i] + x[i] stored
// back into res as 0 where kept and v elsewhere (ADD: the residual as if everything kept were
// sent), or v = res[i], read only (!ADD). Returns whether some v was not finite.
template <bool ADD>
bool keep_pass(const float* __restrict x, float* __restrict res, size_t lo, size_t hi,
               uint32_t thr, Kept& kept) {
  bool bad = false;
  for (size_t b = lo; b < hi; b += kPassBlock) {
    const size_t e = std::min(hi, b + kPassBlock);
    kept.room(e - b);
    uint32_t* __restrict ki = kept.idx.get() + kept.size;
    float* __restrict kv = kept.val.get() + kept.size;
    size_t m = 0, i = b;
#ifdef __AVX512F__
    // 16 lanes at a time; the hits of a vector go out with compress-stores.
    const __m512i thrv = _mm512_set1_epi32(int(thr));
    const __m512i absm = _mm512_set1_epi32(0x7fffffff), inf = _mm512_set1_epi32(0x7f800000);
    __m512i iv = _mm512_add_epi32(_mm512_set1_epi32(int(uint32_t(i))),
                                  _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12,
                                                    13, 14, 15));
    const __m512i step = _mm512_set1_epi32(16);
    __mmask16 badm = 0;
    // Prefetch a page ahead: hardware prefetch alone leaves a fifth of the bandwidth unused.
    constexpr size_t kAhead = 1024;
    for (; i + 16 <= e; i += 16) {
      if (i + kAhead < hi) {
        __builtin_prefetch(res + i + kAhead);
        if constexpr (ADD) __builtin_prefetch(x + i + kAhead);
      }
      __m512 v = _mm512_loadu_ps(res + i);
      if constexpr (ADD) {
        v = _mm512_add_ps(v, _mm512_loadu_ps(x + i));
      }
      const __m512i key = _mm512_and_si512(_mm512_castps_si512(v), absm);
      const __mmask16 hit = _mm512_cmpge_epu32_mask(key, thrv);
      if constexpr (ADD) _mm512_storeu_ps(res + i, _mm512_maskz_mov_ps(__mmask16(~hit), v));
      badm |= _mm512_cmpge_epu32_mask(key, inf);
      if (hit) {
        _mm512_mask_compressstoreu_epi32(ki + m, hit, iv);
        _mm512_mask_compressstoreu_ps(kv + m, hit, v);
        m += size_t(__builtin_popcount(hit));
      }
      iv = _mm512_add_epi32(iv, step);
    }
    bad |= badm != 0;
#endif
    // Elsewhere (and for the tail): the arithmetic in one loop the compiler vectorizes, the
    // values kept in an L1 buffer; then a scan of the buffer appends the hits (a minority at
    // the usual thresholds: a well-predicted branch).
    if (i < e) {
      alignas(64) float vb[kPassBlock];
      const size_t len = e - i;
      uint32_t hits = 0, badg = 0;
      for (size_t l = 0; l < len; ++l) {
        float v = res[i + l];
        if constexpr (ADD) v += x[i + l];
        vb[l] = v;
        const uint32_t key = abs_key(v);
        const uint32_t hit = key >= thr;
        if constexpr (ADD) res[i + l] = hit ? 0.0f : v;
        hits += hit;
        badg |= key >= 0x7f800000u;
      }
      bad |= badg != 0;
      for (size_t l = 0; hits && l < len; ++l) {
        if (abs_key(vb[l]) >= thr) {
          ki[m] = uint32_t(i + l);
          kv[m] = vb[l];
          ++m;
          --hits;
        }
      }
    }
    kept.size += m;
  }
  return bad;
}

// keep_pass over [0, n) on the kernel threads: contiguous ranges, concatenated in order, so
// the result does not depend on the thread count.
template <bool ADD>
bool keep_all(const float* x, float* res, size_t n, uint32_t thr, size_t expect, Kept& kept) {
  const int nt = parallel_ok(num_threads(), n) ? num_threads() : 1;
  kept.size = 0;
  if (nt == 1) {
    kept.room(std::min(n, expect));
    return keep_pass<ADD>(x, res, 0, n, thr, kept);
  }
  std::vector<Kept> parts(static_cast<size_t>(nt));
  bool bad = false;
  const size_t per = (n / size_t(nt) + 15) / 16 * 16;
#pragma omp parallel for num_threads(nt) schedule(static) reduction(|| : bad)
  for (int t = 0; t < nt; ++t) {
    const size_t lo = std::min(n, size_t(t) * per), hi = t + 1 == nt ? n : std::min(n, lo + per);
    parts[size_t(t)].room(std::min(hi - lo, expect / size_t(nt) + kPassBlock));
    bad = keep_pass<ADD>(x, res, lo, hi, thr, parts[size_t(t)]) || bad;
  }
  size_t total = 0;
  for (auto& p : parts) total += p.size;
  kept.room(total);
  for (auto& p : parts) {
    std::copy_n(p.idx.get(), p.size, kept.idx.get() + kept.size);
    std::copy_n(p.val.get(), p.size, kept.val.get() + kept.size);
    kept.size += p.size;
  }
  return bad;
}

// Keeps exactly k of the kept elements, still in ascending index order: the largest keys, the
// lower index on ties; the others go to `dropped` (appended). A rank packs key and
// inverted index into one integer (larger: goes first). A histogram of the keys finds the bin
// that holds the k-th; only that bin's ranks are ordered (nth_element), and a compaction keeps
// the ranks at or above the k-th.
void cut_kept(Kept& kept, size_t k, Kept& dropped) {
  const size_t m = kept.size;
  const uint32_t* idx = kept.idx.get();
  const float* val = kept.val.get();
  if (m <= k) return;
  dropped.room(m - k + 1);  // + 1: the compaction writes one slot past the last counted
  uint32_t* di = dropped.idx.get() + dropped.size;
  float* dv = dropped.val.get() + dropped.size;
  dropped.size += m - k;
  if (k == 0) {
    std::copy_n(idx, m, di);
    std::copy_n(val, m, dv);
    kept.size = 0;
    return;
  }
  uint32_t lo = 0xffffffffu, hi = 0;
  for (size_t j = 0; j < m; ++j) {
    lo = std::min(lo, abs_key(val[j]));
    hi = std::max(hi, abs_key(val[j]));
  }
  constexpr size_t kBins = 4096;
  int shift = 0;
  while (((hi - lo) >> shift) >= kBins) ++shift;
  std::vector<uint32_t> hist(kBins, 0);
  for (size_t j = 0; j < m; ++j) ++hist[(abs_key(val[j]) - lo) >> shift];
  size_t bin = (hi - lo) >> shift, above = 0;  // kept elements in bins above `bin`
  while (above + hist[bin] < k) above += hist[bin--];
  auto rank_of = [&](size_t j) {
    return (uint64_t(abs_key(val[j])) << 32) | uint64_t(~idx[j]);
  };
  std::vector<uint64_t> ranks;
  ranks.reserve(hist[bin]);
  for (size_t j = 0; j < m; ++j)
    if (((abs_key(val[j]) - lo) >> shift) == bin) ranks.push_back(rank_of(j));
  const size_t need = k - above;  // of this bin, 1..hist[bin]
  std::nth_element(ranks.begin(), ranks.begin() + ptrdiff_t(need - 1), ranks.end(),
                   std::greater<uint64_t>());
  const uint64_t pivot = ranks[need - 1];
  uint32_t* io = kept.idx.get();
  float* vo = kept.val.get();
  size_t o = 0, d = 0;
  for (size_t j = 0; j < m; ++j) {  // branch-free: both slots written, one counted
    const bool in = rank_of(j) >= pivot;
    const uint32_t i = idx[j];
    const float v = val[j];
    io[o] = i;
    vo[o] = v;
    di[d] = i;
    dv[d] = v;
    o += in;
    d += !in;
  }
  kept.size = o;
}

// Fewer than k nonzero elements of v (kept: every one, ascending; res holds v, +-0, elsewhere):
// kept grows to k with the lowest-index zeros (the tie rule), sent, so their residual is 0.
// Ordering millions of tied zeros instead cost tens of milliseconds on a sparse gradient.
void fill_zeros(float* res, size_t n, size_t k, Kept& kept) {
  Kept out;
  out.room(k);
  size_t j = 0, o = 0, zeros = 0;
  const size_t need = k - kept.size;
  for (size_t i = 0; i < n && zeros < need; ++i, ++o) {
    out.idx[o] = uint32_t(i);
    if (j < kept.size && kept.idx[j] == i) {
      out.val[o] = kept.val[j++];
    } else {
      out.val[o] = res[i];
      res[i] = 0.0f;
      ++zeros;
    }
  }
  for (; j < kept.size; ++j, ++o) {
    out.idx[o] = kept.idx[j];
    out.val[o] = kept.val[j];
  }
  out.size = o;
  kept = std::move(out);
}

enum class Select { exact, sampled, above };

// The selection of v = x + res that `how` names (k, seed; tau's key bound for `above`), with
// res left holding v minus what was kept (sent entries and non-finite ones are 0), into kept.
void select_feedback(const float* x, float* res, size_t n, Select how, size_t k, uint64_t seed,
                     uint32_t above, Kept& kept) {
  kept.size = 0;
  if (n == 0) return;
  struct {
    const float* x;
    const float* res;
    float operator()(size_t i) const { return res[i] + x[i]; }
    void prefetch(size_t i) const {
      __builtin_prefetch(res + i);
      __builtin_prefetch(x + i);
    }
  } v_at{x, res};
  const size_t s = std::min(n, kSample);
  uint32_t thr = 0;  // k >= n: everything
  size_t expect = n;
  if (how == Select::above) {
    thr = above;
    expect = kPassBlock;
  } else if (k == 0) {
    thr = 0xffffffffu;  // nothing: keys stop at 0x7fffffff
    expect = 0;
  } else if (k < n && how == Select::exact) {
    const size_t se = std::min(n, kStrata);
    const size_t r = exact_sample_rank(n, k, se);
    if (r) {
      // Any threshold gives the same result (only the work varies): strata read fastest.
      thr = strata_threshold(v_at, n, se, r, kExactSeed);
      expect = size_t(double(r) * double(n) / double(se)) + kPassBlock;
    }
    thr = std::max<uint32_t>(thr, 1);  // zeros only make up a shortfall: fill_zeros
  } else if (k < n) {
    const size_t r = std::max<size_t>(1, size_t(std::llround(double(k) * double(s) / double(n))));
    thr = sample_threshold_of(v_at, n, std::min(r, s), seed);
    expect = 2 * k + kPassBlock;
  }
  bool bad = keep_all<true>(x, res, n, thr, expect, kept);
  // res holds 0 where kept: what is cut below goes back (NaN/Inf stay 0, see below), after
  // the cut, with the writes' cache lines asked for ahead (they are scattered over res).
  thread_local Kept back;
  back.size = 0;
  if (how == Select::exact) {
    if (kept.size < k && thr > 1) {  // the sample missed: every nonzero is a candidate
      for (size_t j = 0; j < kept.size; ++j) res[kept.idx[j]] = kept.val[j];
      keep_all<false>(nullptr, res, n, 1, n, kept);
      for (size_t j = 0; j < kept.size; ++j) res[kept.idx[j]] = 0.0f;
    }
    if (kept.size < k) fill_zeros(res, n, k, kept);  // fewer than k nonzero
    cut_kept(kept, k, back);
  } else if (how == Select::sampled && k < n && kept.size > 2 * k) {
    cut_kept(kept, k, back);  // a badly low threshold: back to exactly k
  }
  constexpr size_t kAhead = 16;
  for (size_t q = 0; q < back.size; ++q) {
    if (q + kAhead < back.size) __builtin_prefetch(res + back.idx[q + kAhead], 1);
    if (is_finite_bits(float_to_bits(back.val[q]))) res[back.idx[q]] = back.val[q];
  }
  if (back.cap > (size_t(1) << 22)) back = Kept();
  if (bad) {  // NaN/Inf left behind would poison every later step
    for (size_t i = 0; i < n; ++i)
      if (!is_finite_bits(float_to_bits(res[i]))) res[i] = 0.0f;
  }
}

// select_feedback into candidate space kept per thread (fresh memory costs a page fault per
// 4 KiB), then (int32 indices, float32 values) arrays of the selection's own size. Both live in
// one allocation: freed together, it is one chunk the allocator keeps for the next call
// (two half-size ones were handed back to the system and faulted in again every call).
nb::tuple select_feedback_numpy(const float* x, float* res, size_t n, Select how, size_t k,
                                uint64_t seed, uint32_t above) {
  thread_local Kept scratch;
  void* block;
  size_t m;
  {
    nb::gil_scoped_release nogil;
    select_feedback(x, res, n, how, k, seed, above, scratch);
    m = scratch.size;
    block = ::operator new(std::max<size_t>(m, 1) * (sizeof(int32_t) + sizeof(float)));
    // indices < 2^31: int32, as payloads keep them; nothing to copy (and the scratch may
    // hold no memory at all) when nothing was selected
    if (m) {
      std::memcpy(block, scratch.idx.get(), m * sizeof(int32_t));
      std::memcpy(static_cast<char*>(block) + m * sizeof(int32_t), scratch.val.get(),
                  m * sizeof(float));
    }
    if (scratch.cap > (size_t(1) << 22)) scratch = Kept();  // keep at most 32 MiB around
  }
  nb::capsule owner(block, [](void* q) noexcept { ::operator delete(q); });
  auto* ip = static_cast<int32_t*>(block);
  auto* vp = reinterpret_cast<float*>(static_cast<char*>(block) + m * sizeof(int32_t));
  return nb::make_tuple(nb::ndarray<nb::numpy, int32_t, nb::ndim<1>>(ip, {m}, owner),
                        nb::ndarray<nb::numpy, float, nb::ndim<1>>(vp, {m}, owner));
}

float* residual_data(HostArray& res, size_t n, const char* what) {
  float* rp = typed_data<float>(res, n, what);
  if (n >= (size_t(1) << 31))
    throw std::invalid_argument(std::string(what) + ": more than 2^31 - 1 elements");
  return rp;
}

}  // namespace

void register_topk(nb::module_& m) {
  m.def(
      "topk_indices",
      [](HostInput x, size_t k) {
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
      [](HostInput x, size_t k, uint64_t seed) {
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
      [](HostInput x, float tau) {
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
  m.def(
      "topk_feedback",
      [](HostInput x, HostArray res, size_t k, bool approximate, uint64_t seed) {
        const float* xp = f32_data(x, "topk_feedback");
        const size_t n = x.size();
        float* rp = residual_data(res, n, "topk_feedback residual");
        return select_feedback_numpy(xp, rp, n, approximate ? Select::sampled : Select::exact,
                                     std::min(k, n), seed, 0);
      },
      nb::arg("x"), nb::arg("residual"), nb::arg("k"), nb::arg("approximate"), nb::arg("seed"),
      "residual += x, then (int32 indices, float32 values) of topk_indices(residual, k) (or "
      "topk_sampled_indices(residual, k, seed) when approximate); the kept entries and any "
      "non-finite ones of residual are zeroed. One pass over x and residual; n < 2^31.");
  m.def(
      "select_above_feedback",
      [](HostInput x, HostArray res, float tau) {
        const float* xp = f32_data(x, "select_above_feedback");
        const size_t n = x.size();
        float* rp = residual_data(res, n, "select_above_feedback residual");
        if (!(tau >= 0.0f) || !std::isfinite(tau))
          throw std::invalid_argument("select_above_feedback: tau must be finite and >= 0");
        return select_feedback_numpy(xp, rp, n, Select::above, 0, 0, abs_key(tau) + 1);
      },
      nb::arg("x"), nb::arg("residual"), nb::arg("tau"),
      "residual += x, then (int32 indices, float32 values) of select_above(residual, tau); "
      "the kept entries and any non-finite ones of residual are zeroed; n < 2^31.");
}

}  // namespace compcoll
