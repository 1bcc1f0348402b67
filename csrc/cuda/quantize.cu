// CUDA twins of csrc/quantize.cpp, loaded at run time through cupy.RawModule
// (compressors/cuda/__init__.py). One block per bucket; codes, mins, scales and decoded values
// match the CPU kernels bit for bit (same counter RNG of (seed, index); no contracted
// multiply-adds on either side), so ranks on CPUs and GPUs agree.
#ifndef __CUDACC_RTC__  // NVRTC has no <cstdint>: compressors.cuda's prelude gives the types
#include <cstdint>
#endif

__device__ __forceinline__ uint32_t mix32(uint32_t h) {
  h ^= h >> 16; h *= 0x85ebca6bu; h ^= h >> 13; h *= 0xc2b2ae35u; h ^= h >> 16;
  return h;
}

// csrc/compress_common.h's counter RNG: a Weyl sequence per seed and 2^32 block of indices
// through murmur3's finalizer; 24 random bits as a float in [0, 1).
__device__ __forceinline__ float counter_uniform(uint64_t seed, uint64_t i) {
  const uint32_t a = mix32(uint32_t(seed) ^ mix32(uint32_t(seed >> 32) ^
                                                  (uint32_t(i >> 32) * 0x9e3779b9u)));
  const uint32_t mul = mix32(a + 0x6a09e667u) | 1u;
  return float(int32_t(mix32(a + uint32_t(i) * mul) >> 8)) * (1.0f / 16777216.0f);
}

__device__ __forceinline__ bool finite_bits(float x) {
  return (__float_as_uint(x) & 0x7f800000u) != 0x7f800000u;
}

// Launch with gridDim.x = number of buckets, blockDim.x a power of two <= 1024,
// dynamic shared memory 2 * blockDim.x * sizeof(float). bucket_size is a multiple of 8.
extern "C" __global__ void compcoll_quantize(const float* __restrict__ x, long long n, int bits,
                                             long long bucket, unsigned long long seed,
                                             int stochastic, unsigned char* __restrict__ codes,
                                             float* __restrict__ mins, float* __restrict__ scales) {
  extern __shared__ float red[];
  float* smin = red;
  float* smax = red + blockDim.x;
  const long long lo = (long long)blockIdx.x * bucket;
  const long long len = min(bucket, n - lo);
  float mn = INFINITY, mx = -INFINITY;
  for (long long i = threadIdx.x; i < len; i += blockDim.x) {
    float v = x[lo + i];
    if (finite_bits(v)) { mn = fminf(mn, v); mx = fmaxf(mx, v); }
  }
  smin[threadIdx.x] = mn;
  smax[threadIdx.x] = mx;
  __syncthreads();
  for (unsigned s = blockDim.x / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) {
      smin[threadIdx.x] = fminf(smin[threadIdx.x], smin[threadIdx.x + s]);
      smax[threadIdx.x] = fmaxf(smax[threadIdx.x], smax[threadIdx.x + s]);
    }
    __syncthreads();
  }
  mn = smin[0];
  mx = smax[0];
  if (mn > mx) mn = mx = 0.0f;
  const int top = (1 << bits) - 1;
  // The host kernel's grid (csrc/quantize.cpp, bucket_grid): where the range spans zero
  // (4 bits and up), shifted at one level fewer so that code zc decodes to exactly zero.
  float scale = float((double(mx) - double(mn)) / double(top));
  int zc = mn == 0.0f ? 0 : -1;
  if (mn < 0.0f && mx >= 0.0f && top >= 15) {
    const double step = mx == 0.0f ? -double(mn) / top : (double(mx) - double(mn)) / (top - 1);
    const float s = float(step);
    int k = top;
    if (mx != 0.0f) k = min(max(int(ceil(-double(mn) / step)), 1), top - 1);
    const float kscale = __fmul_rn(float(k), s);
    if (isfinite(kscale) && s > 0.0f) { mn = -kscale; scale = s; zc = k; }
  }
  float inv = scale > 0.0f ? 1.0f / scale : 0.0f;
  if (inv > 3.402823466e38f) inv = 3.402823466e38f;
  if (threadIdx.x == 0) { mins[blockIdx.x] = mn; scales[blockIdx.x] = scale; }
  const int per = 8 / bits;
  // each thread owns whole output bytes, so packing needs no atomics
  for (long long b = threadIdx.x; b * per < len; b += blockDim.x) {
    unsigned byte = 0;
    for (int s = 0; s < per && b * per + s < len; ++s) {
      const long long i = lo + b * per + s;
      const float xv = x[i];
      float v = fminf(fmaxf((xv - mn) * inv, 0.0f), float(top));
      if (v != v) v = 0.0f;
      const float f = truncf(v);
      const float frac = __fsub_rn(v, f);
      const int up = stochastic ? (counter_uniform(seed, (uint64_t)i) < frac) : (frac >= 0.5f);
      const int c = !finite_bits(xv) ? 0 : (xv == 0.0f && zc >= 0) ? zc : min(int(f) + up, top);
      byte |= unsigned(c) << (s * bits);
    }
    codes[lo / per + b] = (unsigned char)byte;
  }
}

extern "C" __global__ void compcoll_dequantize(const unsigned char* __restrict__ codes,
                                               const float* __restrict__ mins,
                                               const float* __restrict__ scales, long long n,
                                               int bits, long long bucket,
                                               float* __restrict__ out) {
  const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const int per = 8 / bits;
  const unsigned c = (codes[i / per] >> ((i % per) * bits)) & ((1u << bits) - 1);
  const long long b = i / bucket;
  out[i] = __fadd_rn(mins[b], __fmul_rn(float(c), scales[b]));
}
