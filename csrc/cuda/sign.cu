// CUDA twins of csrc/sign.cpp: sign bits (bit j of byte i = signbit(x[8i+j])) and per-bucket
// mean |x| over finite values. Loaded at run time through cupy.RawModule
// (compressors/cuda/__init__.py).
#ifndef __CUDACC_RTC__  // NVRTC has no <cstdint>: compressors.cuda's prelude gives the types
#include <cstdint>
#endif

// The bucket sum in the C++ kernel's order (csrc/sign.cpp): lane l < kLanes adds |x[i]| of the
// finite x[i] with i = l (mod kLanes) in index order, then the lanes are added as a fixed tree,
// so the scale is the same bits as on the CPU.
#define COMPCOLL_SIGN_LANES 16

// gridDim.x = buckets; blockDim.x a power of two >= 16; shared memory 2 * blockDim.x * 4 bytes.
extern "C" __global__ void compcoll_sign_pack(const float* __restrict__ x, long long n,
                                              long long bucket, unsigned char* __restrict__ bits,
                                              float* __restrict__ scales) {
  extern __shared__ float red[];
  float* ssum = red;
  int* scount = reinterpret_cast<int*>(red + blockDim.x);
  const long long lo = (long long)blockIdx.x * bucket;
  const long long len = min(bucket, n - lo);
  for (long long b = threadIdx.x; b * 8 < len; b += blockDim.x) {
    unsigned byte = 0;
    for (int s = 0; s < 8 && b * 8 + s < len; ++s)
      byte |= (__float_as_uint(x[lo + b * 8 + s]) >> 31) << s;
    bits[lo / 8 + b] = (unsigned char)byte;
  }
  float sum = 0.0f;
  int good = 0;
  if (threadIdx.x < COMPCOLL_SIGN_LANES) {
    for (long long i = threadIdx.x; i < len; i += COMPCOLL_SIGN_LANES) {
      const uint32_t u = __float_as_uint(x[lo + i]);
      if ((u & 0x7f800000u) != 0x7f800000u) {
        sum = __fadd_rn(sum, __uint_as_float(u & 0x7fffffffu));
        ++good;
      }
    }
  }
  ssum[threadIdx.x] = sum;
  scount[threadIdx.x] = good;
  __syncthreads();
  for (unsigned w = COMPCOLL_SIGN_LANES / 2; w > 0; w >>= 1) {
    if (threadIdx.x < w) {
      ssum[threadIdx.x] = __fadd_rn(ssum[threadIdx.x], ssum[threadIdx.x + w]);
      scount[threadIdx.x] += scount[threadIdx.x + w];
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) scales[blockIdx.x] = scount[0] ? __fdiv_rn(ssum[0], float(scount[0])) : 0.0f;
}

extern "C" __global__ void compcoll_sign_unpack(const unsigned char* __restrict__ bits,
                                                const float* __restrict__ scales, long long n,
                                                long long bucket, float* __restrict__ out) {
  const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const uint32_t s = __float_as_uint(scales[i / bucket]);
  out[i] = __uint_as_float(s ^ (uint32_t((bits[i / 8] >> (i % 8)) & 1u) << 31));
}
