// SPDX-License-Identifier: Apache-2.0
// gpu::LaunchElementwise: the CUDA launcher of elementwise ops (see kernels/elementwise.h).
//
//   gpu::LaunchElementwise<T>(fn, n, stream, out, x, y, ...);
//
// runs out[i] = fn(x[i], y[i], ...) for i in [0, n), in fn's compute type, on `stream`, and
// checks the launch. Every pointer is a T* (DataPtr<T>) of n contiguous elements.
#ifndef SCALE_LIB_KERNELS_ELEMENTWISE_CUH_
#define SCALE_LIB_KERNELS_ELEMENTWISE_CUH_

#include <cstdint>
#include <type_traits>
#include <utility>

#include "cuda_float.cuh"
#include "elementwise.h"

namespace scale_lib {
namespace gpu {
namespace elementwise {

// [cuda_kernel.begin]
// Memory-bound: 16-byte vectors, all of a thread's loads issued before its first store. Large
// inputs: a grid-stride loop, 4 vectors per thread (64 bytes of each input in flight). Inputs
// below about one full wave of the GPU: one vector per thread and no loop, spreading the bytes
// over more blocks; at those sizes the loop's setup alone cost 0.1-0.3 us per kernel (5-8% of
// `scale` at 2^12-2^20 float32, measured against PyTorch's kernel on an H100).
constexpr int kThreads = 256;
constexpr int kVecBytes = 16;
constexpr int kVecsPerThread = 4;
constexpr int64_t kManyVecs = int64_t{1} << 20;

template <typename T>
using Vec = Pack<T, kPackWidth<T>>;

// The inputs' data pointers, passed to a kernel by value.
template <typename T, int N>
struct Inputs {
  const T* p[N];
};

// out = fn(in[0], ..., in[N - 1]), element by element over one vector of each input.
template <typename T, int N, typename Fn, size_t... I>
__device__ __forceinline__ void ApplyVec(const Fn& fn, const Vec<T> (&in)[N], Vec<T>& out,
                                         std::index_sequence<I...>) {
  constexpr int kWidth = kPackWidth<T>;
  Compute<T> v[N][kWidth];
  (Widen(in[I], v[I]), ...);
  Compute<T> r[kWidth];
#pragma unroll
  for (int k = 0; k < kWidth; ++k) r[k] = fn(v[I][k]...);
  Narrow(r, out);
}

template <typename T, int N, typename Fn, size_t... I>
__device__ __forceinline__ void ApplyAt(const Fn& fn, T* out, const Inputs<T, N>& in, int64_t i,
                                        std::index_sequence<I...>) {
  out[i] = FloatMath<T>::Store(fn(FloatMath<T>::Load(in.p[I][i])...));
}

// The last n % kWidth elements do not fill a vector: block 0 does them, one per thread.
template <typename T, int N, typename Fn>
__device__ void Tail(const Fn& fn, T* out, const Inputs<T, N>& in, int64_t n) {
  const int64_t i = n / kPackWidth<T> * kPackWidth<T> + threadIdx.x;
  if (blockIdx.x == 0 && i < n) ApplyAt(fn, out, in, i, std::make_index_sequence<N>{});
}

// out and the inputs are 16-byte aligned. No __restrict__: out may be an input (in-place), and
// each element is read and written by the same thread.
template <typename T, int N, typename Fn>
__global__ void __launch_bounds__(kThreads)
    VectorKernel(Fn fn, T* out, Inputs<T, N> in, int64_t n) {
  AwaitPriorKernels();
  const int64_t num_vecs = n / kPackWidth<T>;
  auto* out_vecs = reinterpret_cast<Vec<T>*>(out);
  const int64_t grid_stride = static_cast<int64_t>(gridDim.x) * kThreads * kVecsPerThread;
  for (int64_t base = static_cast<int64_t>(blockIdx.x) * kThreads * kVecsPerThread + threadIdx.x;
       base < num_vecs; base += grid_stride) {
    Vec<T> buf[kVecsPerThread][N];
#pragma unroll
    for (int u = 0; u < kVecsPerThread; ++u) {
      const int64_t i = base + static_cast<int64_t>(u) * kThreads;
      if (i < num_vecs) {
#pragma unroll
        for (int j = 0; j < N; ++j) buf[u][j] = reinterpret_cast<const Vec<T>*>(in.p[j])[i];
      }
    }
#pragma unroll
    for (int u = 0; u < kVecsPerThread; ++u) {
      const int64_t i = base + static_cast<int64_t>(u) * kThreads;
      if (i < num_vecs) {
        Vec<T> result;
        ApplyVec(fn, buf[u], result, std::make_index_sequence<N>{});
        out_vecs[i] = result;
      }
    }
  }
  Tail(fn, out, in, n);
}

// Fewer than kManyVecs vectors: the grid has a thread for each (and always fits gridDim.x).
template <typename T, int N, typename Fn>
__global__ void __launch_bounds__(kThreads) SmallKernel(Fn fn, T* out, Inputs<T, N> in, int64_t n) {
  AwaitPriorKernels();
  const int64_t i = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  if (i < n / kPackWidth<T>) {
    Vec<T> buf[N];
#pragma unroll
    for (int j = 0; j < N; ++j) buf[j] = reinterpret_cast<const Vec<T>*>(in.p[j])[i];
    Vec<T> result;
    ApplyVec(fn, buf, result, std::make_index_sequence<N>{});
    reinterpret_cast<Vec<T>*>(out)[i] = result;
  }
  Tail(fn, out, in, n);
}

// Any alignment (views such as x[1:]): one element per thread per step.
template <typename T, int N, typename Fn>
__global__ void __launch_bounds__(kThreads)
    ScalarKernel(Fn fn, T* out, Inputs<T, N> in, int64_t n) {
  AwaitPriorKernels();
  const int64_t grid_stride = static_cast<int64_t>(gridDim.x) * kThreads;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x; i < n;
       i += grid_stride) {
    ApplyAt(fn, out, in, i, std::make_index_sequence<N>{});
  }
}
// [cuda_kernel.end]

}  // namespace elementwise

// [launch_elementwise.begin]
template <typename T, typename Fn, typename... In>
void LaunchElementwise(const Fn& fn, int64_t n, cudaStream_t stream, T* out, const In*... ins) {
  static_assert(sizeof...(In) >= 1 && (std::is_same_v<In, T> && ...),
                "LaunchElementwise: every input has the output's storage type");
  namespace ew = elementwise;
  constexpr int N = static_cast<int>(sizeof...(In));
  const ew::Inputs<T, N> in{{ins...}};
  if (IsAligned(out, ew::kVecBytes) && (IsAligned(ins, ew::kVecBytes) && ...)) {
    const int64_t num_vecs = n / kPackWidth<T>;
    if (num_vecs >= ew::kManyVecs) {
      Launch(ew::VectorKernel<T, N, Fn>, GridSize(num_vecs, ew::kThreads * ew::kVecsPerThread),
             ew::kThreads, stream, fn, out, in, n);
    } else {
      Launch(ew::SmallKernel<T, N, Fn>, GridSize(num_vecs, ew::kThreads), ew::kThreads, stream, fn,
             out, in, n);
    }
  } else {
    Launch(ew::ScalarKernel<T, N, Fn>, GridSize(n, ew::kThreads), ew::kThreads, stream, fn, out, in,
           n);
  }
}
// [launch_elementwise.end]

}  // namespace gpu
}  // namespace scale_lib

#endif  // SCALE_LIB_KERNELS_ELEMENTWISE_CUH_
