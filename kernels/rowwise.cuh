// SPDX-License-Identifier: Apache-2.0
// gpu::LaunchRowwise: the CUDA launcher of row-wise ops (see kernels/rowwise.h).
//
//   gpu::LaunchRowwise<T>(fn, rows, cols, stream, out, x, y, ...);
//
// One block of kRowThreads threads per row: each thread sums the terms of a strided share of the
// row, cub::BlockReduce adds the shares, and the same threads then write their elements. Rows
// beyond the grid's 2^31 - 1 blocks are taken by a grid-stride loop; indices are 64-bit.
#ifndef SCALE_LIB_KERNELS_ROWWISE_CUH_
#define SCALE_LIB_KERNELS_ROWWISE_CUH_

#include <cub/block/block_reduce.cuh>

#include <cstdint>
#include <type_traits>

#include "cuda_float.cuh"
#include "rowwise.h"

namespace scale_lib {
namespace gpu {

inline constexpr int kRowThreads = 256;

template <typename T, typename Fn, typename... In>
__global__ void __launch_bounds__(kRowThreads)
    RowwiseKernel(Fn fn, int64_t rows, int64_t cols, T* __restrict__ out, const In*... ins) {
  AwaitPriorKernels();
  using M = FloatMath<T>;
  using C = Compute<T>;
  using Reduce = cub::BlockReduce<C, kRowThreads>;
  __shared__ typename Reduce::TempStorage temp;
  __shared__ C row_sum;
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const int64_t base = row * cols;
    C partial = 0;
    for (int64_t i = threadIdx.x; i < cols; i += kRowThreads) {
      partial += fn.Term(fn.Value(M::Load(ins[base + i])...));
    }
    const C total = Reduce(temp).Sum(partial);
    if (threadIdx.x == 0) row_sum = total;
    __syncthreads();
    const C sum = row_sum;
    for (int64_t i = threadIdx.x; i < cols; i += kRowThreads) {
      out[base + i] = M::Store(fn.Finish(fn.Value(M::Load(ins[base + i])...), sum, cols));
    }
    __syncthreads();  // temp and row_sum are reused by the block's next row
  }
}

template <typename T, typename Fn, typename... In>
void LaunchRowwise(const Fn& fn, int64_t rows, int64_t cols, cudaStream_t stream, T* out,
                   const In*... ins) {
  static_assert((std::is_same_v<In, T> && ...),
                "LaunchRowwise: every input has the output's storage type");
  if (rows == 0 || cols == 0) return;
  Launch(RowwiseKernel<T, Fn, In...>, GridSize(rows, 1), kRowThreads, stream, fn, rows, cols, out,
         ins...);
}

}  // namespace gpu
}  // namespace scale_lib

#endif  // SCALE_LIB_KERNELS_ROWWISE_CUH_
