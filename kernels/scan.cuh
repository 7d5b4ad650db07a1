// SPDX-License-Identifier: Apache-2.0
// gpu::LaunchScan: the CUDA launcher of scan ops (see kernels/scan.h).
//
//   gpu::LaunchScan<T>(fn, rows, cols, reverse, stream, out, x, y, ...);
//
// One block of kScanThreads threads per row. The row is taken in tiles of kScanThreads x
// kScanItems elements: each thread loads kScanItems consecutive values, cub::BlockScan computes
// their inclusive prefix sums across the block, and a running prefix (cub's block prefix callback)
// adds the sum of the row's earlier tiles. Rows beyond the grid's 2^31 - 1 blocks are taken by a
// grid-stride loop; indices are 64-bit.
#ifndef SCALE_LIB_KERNELS_SCAN_CUH_
#define SCALE_LIB_KERNELS_SCAN_CUH_

#include <cub/block/block_scan.cuh>

#include <cstdint>
#include <type_traits>

#include "cuda_float.cuh"
#include "scan.h"

namespace scale_lib {
namespace gpu {

inline constexpr int kScanThreads = 256;
inline constexpr int kScanItems = 4;  // consecutive elements per thread and tile

// [scan_prefix.begin]
// cub's block prefix callback: the first warp calls it once per tile with the tile's total and
// gets back what comes before the tile, the sum of the row's earlier tiles.
template <typename C>
struct RunningPrefix {
  C total;
  __device__ C operator()(C tile_total) {
    const C before = total;
    total += tile_total;
    return before;
  }
};
// [scan_prefix.end]

// [scan_kernel.begin]
template <typename T, typename Fn, typename... In>
__global__ void __launch_bounds__(kScanThreads)
    ScanKernel(Fn fn, int64_t rows, int64_t cols, bool reverse, T* __restrict__ out,
               const In*... ins) {
  using M = FloatMath<T>;
  using C = Compute<T>;
  using Scan = cub::BlockScan<C, kScanThreads>;
  __shared__ typename Scan::TempStorage temp;
  constexpr int64_t kTile = int64_t{kScanThreads} * kScanItems;
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const int64_t base = row * cols;
    RunningPrefix<C> prefix{C(0)};
    for (int64_t tile = 0; tile < cols; tile += kTile) {
      const int64_t first = tile + int64_t{threadIdx.x} * kScanItems;  // along the scan
      C values[kScanItems];
#pragma unroll
      for (int k = 0; k < kScanItems; ++k) {
        const int64_t j = first + k;
        const int64_t i = base + (reverse ? cols - 1 - j : j);
        values[k] = j < cols ? fn.Value(M::Load(ins[i])...) : C(0);
      }
      Scan(temp).InclusiveSum(values, values, prefix);
#pragma unroll
      for (int k = 0; k < kScanItems; ++k) {
        const int64_t j = first + k;
        if (j < cols) out[base + (reverse ? cols - 1 - j : j)] = M::Store(fn.Finish(values[k]));
      }
      __syncthreads();  // temp is reused by the next tile
    }
  }
}
// [scan_kernel.end]

template <typename T, typename Fn, typename... In>
void LaunchScan(const Fn& fn, int64_t rows, int64_t cols, bool reverse, cudaStream_t stream, T* out,
                const In*... ins) {
  static_assert((std::is_same_v<In, T> && ...),
                "LaunchScan: every input has the output's storage type");
  if (rows == 0 || cols == 0) return;
  ScanKernel<T>
      <<<GridSize(rows, 1), kScanThreads, 0, stream>>>(fn, rows, cols, reverse, out, ins...);
  CHECK_CUDA_LAUNCH();
}

}  // namespace gpu
}  // namespace scale_lib

#endif  // SCALE_LIB_KERNELS_SCAN_CUH_
