// SPDX-License-Identifier: Apache-2.0
// gpu::LaunchScan: the CUDA launcher of scan ops (see kernels/scan.h).
//
//   gpu::LaunchScan<T>(fn, rows, cols, reverse, stream, out, x, y, ...);
//
// The operator is the function object's (`Fn::Op`, a sum when it names none). Three paths,
// chosen by shape at launch, with 64-bit indices and every launch checked:
//   - short rows (cols < kScanBlockMinCols): ScanWarpRowsKernel, a group of kLanes lanes (4 to
//     32, from the row length) per row, several rows per block: each lane takes kScanItems
//     elements of a tile of kLanes x kScanItems (coalesced, lane-strided), the group scans them
//     with shuffles and carries the tile's total to the next tile;
//   - long rows, many of them: ScanRowsKernel, one block of kScanThreads threads per row (a
//     grid-stride loop over rows): the row taken in tiles of kScanThreads x kScanItems elements,
//     cub::BlockScan scanning each and a running prefix carried from tile to tile;
//   - long rows, too few of them to fill the GPU a block each (fewer than kScanFewRowsPerSm per
//     multiprocessor): reduce, then scan, over tiles of kScanTile elements (about 3n bytes of
//     traffic against a copy's 2n): TileTotalKernel writes each tile's total into a workspace,
//     ScanRowsKernel scans the totals of each row, TileScanKernel scans each tile from
//     the total of the tiles before it. The workspace comes from the calling framework's
//     allocator; a caller that publishes none (CuPy) gets the block-per-row path.
// Every combination happens in an order that the shape alone fixes (no decoupled look-back,
// whose grouping depends on timing), so the same input gives the same bits on every run.
#ifndef SCALE_LIB_KERNELS_SCAN_CUH_
#define SCALE_LIB_KERNELS_SCAN_CUH_

#include <cub/block/block_exchange.cuh>
#include <cub/block/block_reduce.cuh>
#include <cub/block/block_scan.cuh>

#include <cstdint>
#include <type_traits>

#include "cuda_float.cuh"
#include "scan.h"

namespace scale_lib {
namespace gpu {

inline constexpr int kScanThreads = 256;
inline constexpr int kScanItems = 4;  // elements per thread and tile (block and warp paths)
// Rows of fewer elements take the warp path; a block per row leaves most of its threads idle.
inline constexpr int64_t kScanBlockMinCols = 1024;
// The tiled path: tiles of kScanTileThreads x kScanTileItems elements, taken when the rows are
// fewer than kScanFewRowsPerSm per multiprocessor and each row has at least two tiles.
inline constexpr int kScanTileThreads = 256;
inline constexpr int kScanTileItems = 16;
inline constexpr int64_t kScanTile = int64_t{kScanTileThreads} * kScanTileItems;
inline constexpr int64_t kScanFewRowsPerSm = 4;
// Pass 3 holds a tile of kScanTileItems per thread through two block exchanges and a scan: left
// to itself the compiler gives it registers for 2 blocks per multiprocessor. 3 hide more of the
// memory latency (float32 (1, 2^24): 48.6 us against 54.3 on an H100) where the registers they
// leave suffice; a double tile would spill, so it keeps 2.
template <typename C>
inline constexpr int kScanTileScanBlocksPerSm = sizeof(C) > 4 ? 2 : 3;

// The index of the j-th element along the scan of the row starting at `base`.
__device__ __forceinline__ int64_t ScanIndex(int64_t base, int64_t cols, int64_t j, bool reverse) {
  return base + (reverse ? cols - 1 - j : j);
}

// [scan_prefix.begin]
// cub's block prefix callback: the first warp calls it once per tile with the tile's total and
// gets back what comes before the tile, the combination of the row's earlier tiles.
template <typename C, typename Op>
struct RunningPrefix {
  C total;
  Op op;
  __device__ C operator()(C tile_total) {
    const C before = total;
    total = op(total, tile_total);
    return before;
  }
};
// [scan_prefix.end]

// [scan_kernel.begin]
template <typename T, typename Op, typename Fn, typename... In>
__global__ void __launch_bounds__(kScanThreads)
    ScanRowsKernel(Fn fn, int64_t rows, int64_t cols, bool reverse, T* __restrict__ out,
                   const In*... ins) {
  using M = FloatMath<T>;
  using C = Compute<T>;
  using Scan = cub::BlockScan<C, kScanThreads>;
  __shared__ typename Scan::TempStorage temp;
  constexpr int64_t kTile = int64_t{kScanThreads} * kScanItems;
  const Op op{};
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const int64_t base = row * cols;
    RunningPrefix<C, Op> prefix{Op::Identity(), op};
    for (int64_t tile = 0; tile < cols; tile += kTile) {
      const int64_t first = tile + int64_t{threadIdx.x} * kScanItems;  // along the scan
      C values[kScanItems];
#pragma unroll
      for (int k = 0; k < kScanItems; ++k) {
        const int64_t j = first + k;
        values[k] = j < cols ? fn.Value(M::Load(ins[ScanIndex(base, cols, j, reverse)])...)
                             : Op::Identity();
      }
      Scan(temp).InclusiveScan(values, values, op, prefix);
#pragma unroll
      for (int k = 0; k < kScanItems; ++k) {
        const int64_t j = first + k;
        if (j < cols) out[ScanIndex(base, cols, j, reverse)] = M::Store(fn.Finish(values[k]));
      }
      __syncthreads();  // temp is reused by the next tile
    }
  }
}
// [scan_kernel.end]

// [scan_warp.begin]
// kLanes lanes (a power of two up to 32) per row, kScanThreads / kLanes rows per block. Every
// lane of a warp runs every shuffle (rows past the end scan identities), so the full mask holds.
template <int kLanes, typename T, typename Op, typename Fn, typename... In>
__global__ void __launch_bounds__(kScanThreads)
    ScanWarpRowsKernel(Fn fn, int64_t rows, int64_t cols, bool reverse, T* __restrict__ out,
                       const In*... ins) {
  static_assert(kLanes >= 2 && kLanes <= 32 && (kLanes & (kLanes - 1)) == 0);
  using M = FloatMath<T>;
  using C = Compute<T>;
  constexpr int kRowsPerBlock = kScanThreads / kLanes;
  constexpr int64_t kTile = int64_t{kLanes} * kScanItems;
  constexpr unsigned int kAll = 0xffffffffu;
  const Op op{};
  const int lane = static_cast<int>(threadIdx.x) % kLanes;
  const int group = static_cast<int>(threadIdx.x) / kLanes;
  for (int64_t first_row = int64_t{blockIdx.x} * kRowsPerBlock; first_row < rows;
       first_row += int64_t{gridDim.x} * kRowsPerBlock) {
    const int64_t row = first_row + group;
    const bool active = row < rows;
    const int64_t base = row * cols;
    C carry = Op::Identity();  // the combination of the row's earlier tiles
    for (int64_t tile = 0; tile < cols; tile += kTile) {
      C values[kScanItems];
#pragma unroll
      for (int k = 0; k < kScanItems; ++k) {
        const int64_t j = tile + int64_t{k} * kLanes + lane;
        values[k] = active && j < cols
                        ? fn.Value(M::Load(ins[ScanIndex(base, cols, j, reverse)])...)
                        : Op::Identity();
      }
      // Inclusive scans across the lanes, one per k (independent, interleaved).
#pragma unroll
      for (int d = 1; d < kLanes; d *= 2) {
#pragma unroll
        for (int k = 0; k < kScanItems; ++k) {
          const C before = __shfl_up_sync(kAll, values[k], d, kLanes);
          if (lane >= d) values[k] = op(before, values[k]);
        }
      }
      // Then in order along the row: each part after the combination of those before it.
#pragma unroll
      for (int k = 0; k < kScanItems; ++k) {
        const C total = __shfl_sync(kAll, values[k], kLanes - 1, kLanes);
        values[k] = op(carry, values[k]);
        carry = op(carry, total);
      }
#pragma unroll
      for (int k = 0; k < kScanItems; ++k) {
        const int64_t j = tile + int64_t{k} * kLanes + lane;
        if (active && j < cols)
          out[ScanIndex(base, cols, j, reverse)] = M::Store(fn.Finish(values[k]));
      }
    }
  }
}
// [scan_warp.end]

// [scan_tiles.begin]
// The tiled path. Tile t of a row covers elements [t * kScanTile, (t + 1) * kScanTile) along the
// scan; a block takes one tile at a time (a grid-stride loop over the rows x tiles of the input).
// In both passes over the data, warp w of the block reads the w-th 32 x kScanTileItems elements
// of the tile, lane-strided (coalesced): element k of lane l is at 32 k + l within the warp's part.
template <typename T, typename Fn, typename... In>
__device__ __forceinline__ void LoadTile(const Fn& fn, int64_t base, int64_t cols, int64_t start,
                                         bool reverse, Compute<T> (&values)[kScanTileItems],
                                         Compute<T> identity, const In*... ins) {
  const int warp = static_cast<int>(threadIdx.x) / 32;
  const int lane = static_cast<int>(threadIdx.x) % 32;
  const int64_t first = start + int64_t{warp} * 32 * kScanTileItems + lane;
#pragma unroll
  for (int k = 0; k < kScanTileItems; ++k) {
    const int64_t j = first + int64_t{k} * 32;
    values[k] = j < cols ? fn.Value(FloatMath<T>::Load(ins[ScanIndex(base, cols, j, reverse)])...)
                         : identity;
  }
}

// Pass 1: the combination of each tile's values, into totals[row * tiles + t].
template <typename T, typename Op, typename Fn, typename... In>
__global__ void __launch_bounds__(kScanTileThreads)
    TileTotalKernel(Fn fn, int64_t rows, int64_t cols, int64_t tiles, bool reverse,
                    Compute<T>* __restrict__ totals, const In*... ins) {
  using C = Compute<T>;
  using Reduce = cub::BlockReduce<C, kScanTileThreads>;
  __shared__ typename Reduce::TempStorage temp;
  const Op op{};
  // The last tiles first: pass 3 starts with the first ones, which this pass read last, so those
  // are still in L2 (a part of the input as large as L2 is read from memory once, not twice).
  for (int64_t i = blockIdx.x; i < rows * tiles; i += gridDim.x) {
    const int64_t id = rows * tiles - 1 - i;
    const int64_t row = id / tiles;
    const int64_t start = (id - row * tiles) * kScanTile;
    C values[kScanTileItems];
    LoadTile<T>(fn, row * cols, cols, start, reverse, values, Op::Identity(), ins...);
    C part = values[0];
#pragma unroll
    for (int k = 1; k < kScanTileItems; ++k) part = op(part, values[k]);
    const C total = Reduce(temp).Reduce(part, op);
    if (threadIdx.x == 0) totals[id] = total;
    __syncthreads();  // temp is reused by the next tile
  }
}

// What the block prefix callback of pass 3 returns: the combination of the tiles before this
// one, read from the scanned totals.
template <typename C>
struct FixedPrefix {
  C before;
  __device__ C operator()(C) const { return before; }
};

// Pass 3: each tile scanned from the combination of the row's tiles before it (`scanned`, the
// inclusive scan of each row's totals, from pass 2).
template <typename T, typename Op, typename Fn, typename... In>
__global__ void __launch_bounds__(kScanTileThreads, kScanTileScanBlocksPerSm<Compute<T>>)
    TileScanKernel(Fn fn, int64_t rows, int64_t cols, int64_t tiles, bool reverse,
                   const Compute<T>* __restrict__ scanned, T* __restrict__ out, const In*... ins) {
  using M = FloatMath<T>;
  using C = Compute<T>;
  using Exchange = cub::BlockExchange<C, kScanTileThreads, kScanTileItems>;
  using Scan = cub::BlockScan<C, kScanTileThreads>;
  __shared__ union {
    typename Exchange::TempStorage exchange;
    typename Scan::TempStorage scan;
  } temp;
  const Op op{};
  const int warp = static_cast<int>(threadIdx.x) / 32;
  const int lane = static_cast<int>(threadIdx.x) % 32;
  for (int64_t id = blockIdx.x; id < rows * tiles; id += gridDim.x) {
    const int64_t row = id / tiles;
    const int64_t tile = id - row * tiles;
    const int64_t start = tile * kScanTile;
    const int64_t base = row * cols;
    C values[kScanTileItems];
    LoadTile<T>(fn, base, cols, start, reverse, values, Op::Identity(), ins...);
    // Lane-strided within each warp's part to consecutive per thread (what BlockScan scans).
    Exchange(temp.exchange).WarpStripedToBlocked(values, values);
    __syncthreads();  // temp.exchange's last reads before temp.scan's writes
    FixedPrefix<C> prefix{tile == 0 ? Op::Identity() : scanned[id - 1]};
    Scan(temp.scan).InclusiveScan(values, values, op, prefix);
    __syncthreads();  // temp.scan's last reads before temp.exchange's writes
    Exchange(temp.exchange).BlockedToWarpStriped(values, values);
    const int64_t first = start + int64_t{warp} * 32 * kScanTileItems + lane;
#pragma unroll
    for (int k = 0; k < kScanTileItems; ++k) {
      const int64_t j = first + int64_t{k} * 32;
      if (j < cols) out[ScanIndex(base, cols, j, reverse)] = M::Store(fn.Finish(values[k]));
    }
    __syncthreads();  // temp is reused by the next tile
  }
}

// Pass 2's function object: a scan of the totals as they are.
template <typename C, typename Op_>
struct ScanTotalsFn {
  using Op = Op_;
  __device__ C Value(C total) const { return total; }
  __device__ C Finish(C prefix) const { return prefix; }
};
// [scan_tiles.end]

template <typename C>
inline DLDataType ScanComputeDType() {
  return std::is_same_v<C, double> ? kFloat64 : kFloat32;
}

// [scan_launch.begin]
template <typename T, typename Fn, typename... In>
void LaunchScan(const Fn& fn, int64_t rows, int64_t cols, bool reverse, cudaStream_t stream, T* out,
                const In*... ins) {
  static_assert((std::is_same_v<In, T> && ...),
                "LaunchScan: every input has the output's storage type");
  using C = Compute<T>;
  using Op = typename ScanOpOf<Fn, C>::type;
  if (rows == 0 || cols == 0) return;
  if (cols < kScanBlockMinCols) {  // short rows: a group of lanes per row
    const auto launch = [&](auto lanes) {
      constexpr int kLanes = decltype(lanes)::value;
      ScanWarpRowsKernel<kLanes, T, Op>
          <<<GridSize(rows, kScanThreads / kLanes), kScanThreads, 0, stream>>>(
              fn, rows, cols, reverse, out, ins...);
    };
    if (cols <= 4 * kScanItems) {
      launch(std::integral_constant<int, 4>{});
    } else if (cols <= 8 * kScanItems) {
      launch(std::integral_constant<int, 8>{});
    } else if (cols <= 16 * kScanItems) {
      launch(std::integral_constant<int, 16>{});
    } else {
      launch(std::integral_constant<int, 32>{});
    }
    CHECK_CUDA_LAUNCH();
    return;
  }
  int device = 0;
  int sms = 0;
  TVM_FFI_CHECK_CUDA_ERROR(cudaGetDevice(&device));
  TVM_FFI_CHECK_CUDA_ERROR(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  const int64_t tiles = cuda::ceil_div(cols, kScanTile);
  if (rows >= kScanFewRowsPerSm * sms || tiles < 2 || !HasFrameworkAllocator()) {
    ScanRowsKernel<T, Op>
        <<<GridSize(rows, 1), kScanThreads, 0, stream>>>(fn, rows, cols, reverse, out, ins...);
    CHECK_CUDA_LAUNCH();
    return;
  }
  // Few long rows: reduce, then scan, over tiles; the totals in the framework's memory.
  ffi::Tensor workspace = AllocFromFramework(ffi::Shape({2 * rows * tiles}), ScanComputeDType<C>(),
                                             DLDevice{kDLCUDA, device});
  C* totals = static_cast<C*>(workspace.data_ptr());
  C* scanned = totals + rows * tiles;
  const unsigned int grid = GridSize(rows * tiles, 1);
  TileTotalKernel<T, Op>
      <<<grid, kScanTileThreads, 0, stream>>>(fn, rows, cols, tiles, reverse, totals, ins...);
  CHECK_CUDA_LAUNCH();
  ScanRowsKernel<C, Op><<<GridSize(rows, 1), kScanThreads, 0, stream>>>(
      ScanTotalsFn<C, Op>{}, rows, tiles, false, scanned, static_cast<const C*>(totals));
  CHECK_CUDA_LAUNCH();
  TileScanKernel<T, Op>
      <<<grid, kScanTileThreads, 0, stream>>>(fn, rows, cols, tiles, reverse, scanned, out, ins...);
  CHECK_CUDA_LAUNCH();
  // The workspace goes back to the framework's allocator here; its stream-ordered reuse comes
  // after these launches on the same stream.
}
// [scan_launch.end]

}  // namespace gpu
}  // namespace scale_lib

#endif  // SCALE_LIB_KERNELS_SCAN_CUH_
