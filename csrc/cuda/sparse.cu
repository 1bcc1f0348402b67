// CUDA twins of csrc/topk.cpp (threshold selection) and csrc/sparse.cpp (gather/scatter).
// Top-k on the GPU: a threshold from a sample (computed by the caller, e.g. cupy.partition
// on a sample of |x|), then compcoll_select_above with a global counter, then an exact cut
// of the few candidates. Loaded at run time through cupy.RawModule
// (compressors/cuda/__init__.py).
#ifndef __CUDACC_RTC__  // NVRTC has no <cstdint>: compressors.cuda's prelude gives the types
#include <cstdint>
#endif

// Indices i with (bits(|x_i|) >= thr_key) appended through an atomic counter; the caller
// sorts them afterwards (order of appends is not deterministic, the set is). Writes at most
// capacity indices; *count may exceed capacity, which tells the caller to retry larger.
extern "C" __global__ void compcoll_select_above(const float* __restrict__ x, long long n,
                                                 unsigned thr_key, long long capacity,
                                                 long long* __restrict__ idx,
                                                 unsigned long long* __restrict__ count) {
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += (long long)gridDim.x * blockDim.x) {
    const unsigned key = __float_as_uint(x[i]) & 0x7fffffffu;
    if (key >= thr_key) {
      const unsigned long long slot = atomicAdd(count, 1ull);
      if (slot < (unsigned long long)capacity) idx[slot] = i;
    }
  }
}

// Indices come from payloads: one outside [0, n) is skipped and raises *error, which the
// Python wrapper turns into an exception after the launch.
extern "C" __global__ void compcoll_gather(const float* __restrict__ x, long long n,
                                           const long long* __restrict__ idx, long long k,
                                           float* __restrict__ out, int* __restrict__ error) {
  const long long j = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (j >= k) return;
  const long long i = idx[j];
  if (i < 0 || i >= n) {
    out[j] = 0.0f;
    atomicExch(error, 1);
    return;
  }
  out[j] = x[i];
}

// out[idx[j]] = vals[j] (unique indices) or += with atomics (duplicates; order-dependent
// rounding, so collectives use it only where every rank sums the same way). Out-of-range
// indices are skipped and flagged as in compcoll_gather.
extern "C" __global__ void compcoll_scatter(float* __restrict__ out, long long n,
                                            const long long* __restrict__ idx,
                                            const float* __restrict__ vals, long long k,
                                            int accumulate, int* __restrict__ error) {
  const long long j = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (j >= k) return;
  const long long i = idx[j];
  if (i < 0 || i >= n) {
    atomicExch(error, 1);
    return;
  }
  if (accumulate) atomicAdd(out + i, vals[j]);
  else out[i] = vals[j];
}
