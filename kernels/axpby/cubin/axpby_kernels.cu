// SPDX-License-Identifier: Apache-2.0
// Device code of axpby (out = a * x + b * y), compiled on its own into a fatbin (every
// architecture of the build, plus PTX) that is embedded into the library and launched through
// TVM-FFI's CUBIN launcher (kernels/axpby/axpby.cu). Only extern "C" kernels: the launcher finds
// them by name.
//
// This file is how a kernel produced elsewhere (NVRTC, Triton, a vendor) ships in scale_lib: any
// CUBIN/fatbin with extern "C" entry points can take its place. See docs/kernels/cubin.md. So it
// is self-contained on purpose, CUDA headers only: its small Math helper restates
// kernels/cuda_float.cuh rather than include the library's headers.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

namespace {

template <typename T>
struct Math {
  using Compute = T;
  __device__ static T Load(T v) { return v; }
  __device__ static T Store(T v) { return v; }
};
template <>
struct Math<__half> {
  using Compute = float;
  __device__ static float Load(__half v) { return __half2float(v); }
  __device__ static __half Store(float v) { return __float2half_rn(v); }
};
template <>
struct Math<__nv_bfloat16> {
  using Compute = float;
  __device__ static float Load(__nv_bfloat16 v) { return __bfloat162float(v); }
  __device__ static __nv_bfloat16 Store(float v) { return __float2bfloat16_rn(v); }
};

template <typename T>
struct alignas(16) Pack {
  static constexpr int kWidth = 16 / sizeof(T);
  T v[kWidth];
};

// out, x, y 16-byte aligned: one 16-byte pack of each per thread per step, then the tail.
template <typename T>
__device__ void AxpbyPacked(T* out, const T* x, const T* y, typename Math<T>::Compute a,
                            typename Math<T>::Compute b, int64_t n) {
  constexpr int kWidth = Pack<T>::kWidth;
  const int64_t packs = n / kWidth;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t p = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; p < packs;
       p += stride) {
    const Pack<T> xv = reinterpret_cast<const Pack<T>*>(x)[p];
    const Pack<T> yv = reinterpret_cast<const Pack<T>*>(y)[p];
    Pack<T> r;
#pragma unroll
    for (int k = 0; k < kWidth; ++k) {
      r.v[k] = Math<T>::Store(a * Math<T>::Load(xv.v[k]) + b * Math<T>::Load(yv.v[k]));
    }
    reinterpret_cast<Pack<T>*>(out)[p] = r;
  }
  const int64_t i = packs * kWidth + static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (blockIdx.x == 0 && i < n)
    out[i] = Math<T>::Store(a * Math<T>::Load(x[i]) + b * Math<T>::Load(y[i]));
}

template <typename T>
__device__ void AxpbyAnyAlignment(T* out, const T* x, const T* y, typename Math<T>::Compute a,
                                  typename Math<T>::Compute b, int64_t n) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride) {
    out[i] = Math<T>::Store(a * Math<T>::Load(x[i]) + b * Math<T>::Load(y[i]));
  }
}

}  // namespace

// [cubin_entry_points.begin]
#define SCALE_LIB_AXPBY_ENTRY_POINTS(T, NAME)                                              \
  extern "C" __global__ void axpby_packed_##NAME(                                          \
      T* out, const T* x, const T* y, Math<T>::Compute a, Math<T>::Compute b, int64_t n) { \
    AxpbyPacked<T>(out, x, y, a, b, n);                                                    \
  }                                                                                        \
  extern "C" __global__ void axpby_any_alignment_##NAME(                                   \
      T* out, const T* x, const T* y, Math<T>::Compute a, Math<T>::Compute b, int64_t n) { \
    AxpbyAnyAlignment<T>(out, x, y, a, b, n);                                              \
  }

SCALE_LIB_AXPBY_ENTRY_POINTS(__half, float16)
SCALE_LIB_AXPBY_ENTRY_POINTS(__nv_bfloat16, bfloat16)
SCALE_LIB_AXPBY_ENTRY_POINTS(float, float32)
SCALE_LIB_AXPBY_ENTRY_POINTS(double, float64)
// [cubin_entry_points.end]
