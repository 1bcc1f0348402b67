// Exact top-k on the GPU, first pass: a 4096-bin histogram of the magnitude keys' top 12 bits
// (bits(|x|) >> 19: the exponent and 4 mantissa bits; NaN and Inf in the highest bins). The
// caller finds the bin holding the k-th largest key, collects the few candidates at or above
// it (compcoll_select_above, sparse.cu) and cuts them exactly (compressors/cuda/topk.py).
#ifndef __CUDACC_RTC__  // NVRTC has no <cstdint>: compressors.cuda's prelude gives the types
#include <cstdint>
#endif

#define COMPCOLL_TOPK_BINS 4096
#define COMPCOLL_TOPK_SHIFT 19

// Block-local counts in shared memory, added to the global histogram once per block: one
// global atomic per bin and block instead of one per element. hist must be zeroed.
extern "C" __global__ void compcoll_key_histogram(const float* __restrict__ x, long long n,
                                                  unsigned* __restrict__ hist) {
  __shared__ unsigned local[COMPCOLL_TOPK_BINS];
  for (int b = threadIdx.x; b < COMPCOLL_TOPK_BINS; b += blockDim.x) local[b] = 0;
  __syncthreads();
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += (long long)gridDim.x * blockDim.x) {
    const unsigned key = __float_as_uint(x[i]) & 0x7fffffffu;
    atomicAdd(&local[key >> COMPCOLL_TOPK_SHIFT], 1u);
  }
  __syncthreads();
  for (int b = threadIdx.x; b < COMPCOLL_TOPK_BINS; b += blockDim.x)
    if (local[b]) atomicAdd(&hist[b], local[b]);
}
