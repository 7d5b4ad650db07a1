// SPDX-License-Identifier: Apache-2.0
// CUDA flatnonzero: a stream compaction in three kernels (count per block, scan of the block
// counts, ordered scatter), with one device-to-host copy of the total in between: the output
// cannot be allocated before its size is known. That synchronisation is inherent to any op
// with a data-dependent output size (torch.nonzero has it too), so this op cannot be captured
// in a CUDA graph.
#include <cub/block/block_reduce.cuh>
#include <cub/block/block_scan.cuh>
#include <cstdint>

#include "cuda_float.cuh"
#include "flatnonzero.h"

namespace scale_lib {
namespace {

constexpr int kThreads = 256;
constexpr int kMaxBlocks = 1024;  // the scan of block counts is one block of this many threads
constexpr int64_t kMinItemsPerBlock = kThreads * 8;

template <typename T>
__device__ bool IsNonzero(T v) {
  return gpu::FloatMath<T>::Load(v) != 0;
}

template <typename T>
__global__ void __launch_bounds__(kThreads)
    CountNonzeroKernel(const T* x, int64_t n, int64_t chunk, int64_t* counts) {
  using BlockReduce = cub::BlockReduce<int64_t, kThreads>;
  __shared__ typename BlockReduce::TempStorage storage;
  const int64_t begin = static_cast<int64_t>(blockIdx.x) * chunk;
  const int64_t end = begin + chunk < n ? begin + chunk : n;
  int64_t count = 0;
  for (int64_t i = begin + threadIdx.x; i < end; i += kThreads) count += IsNonzero(x[i]);
  count = BlockReduce(storage).Sum(count);
  if (threadIdx.x == 0) counts[blockIdx.x] = count;
}

__global__ void __launch_bounds__(kMaxBlocks)
    ScanCountsKernel(const int64_t* counts, int blocks, int64_t* offsets, int64_t* total) {
  using BlockScan = cub::BlockScan<int64_t, kMaxBlocks>;
  __shared__ typename BlockScan::TempStorage storage;
  const int64_t count = threadIdx.x < blocks ? counts[threadIdx.x] : 0;
  int64_t offset = 0;
  int64_t sum = 0;
  BlockScan(storage).ExclusiveSum(count, offset, sum);
  if (threadIdx.x < blocks) offsets[threadIdx.x] = offset;
  if (threadIdx.x == 0) *total = sum;
}

template <typename T>
__global__ void __launch_bounds__(kThreads)
    ScatterNonzeroKernel(const T* x, int64_t n, int64_t chunk, const int64_t* offsets,
                         int64_t* out) {
  using BlockScan = cub::BlockScan<int, kThreads>;
  __shared__ typename BlockScan::TempStorage storage;
  const int64_t begin = static_cast<int64_t>(blockIdx.x) * chunk;
  const int64_t end = begin + chunk < n ? begin + chunk : n;
  int64_t next = offsets[blockIdx.x];
  for (int64_t tile = begin; tile < end; tile += kThreads) {  // uniform across the block
    const int64_t i = tile + threadIdx.x;
    const int flag = i < end && IsNonzero(x[i]);
    int position = 0;
    int tile_count = 0;
    BlockScan(storage).ExclusiveSum(flag, position, tile_count);
    if (flag) out[next + position] = i;
    next += tile_count;
    __syncthreads();  // storage is reused by the next tile's scan
  }
}

}  // namespace

ffi::Tensor FlatNonzeroCUDA(ffi::TensorView x) {
  CheckFlatNonzeroArgs(x);
  const int64_t n = x.numel();
  const DLDevice device = x.device();
  ffi::CUDADeviceGuard guard(device.device_id);
  cudaStream_t stream = GetCudaStream(device);
  if (n == 0) return AllocCudaResult(ffi::Shape({0}), kInt64, device);

  const int64_t blocks =
      std::min<int64_t>(kMaxBlocks, (n + kMinItemsPerBlock - 1) / kMinItemsPerBlock);
  const int64_t chunk = (n + blocks - 1) / blocks;
  // Scratch: per-block counts, their exclusive scan, and the total.
  ffi::Tensor scratch = AllocCudaResult(ffi::Shape({2 * blocks + 1}), kInt64, device);
  int64_t* counts = static_cast<int64_t*>(scratch.data_ptr());
  int64_t* offsets = counts + blocks;
  int64_t* total = offsets + blocks;

  ffi::Tensor result;
  DispatchFloating(x.dtype(), "x", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* xs = DataPtr<const T>(x);
    CountNonzeroKernel<T><<<blocks, kThreads, 0, stream>>>(xs, n, chunk, counts);
    CHECK_CUDA_LAUNCH();
    ScanCountsKernel<<<1, kMaxBlocks, 0, stream>>>(counts, static_cast<int>(blocks), offsets,
                                                   total);
    CHECK_CUDA_LAUNCH();
    int64_t count = 0;
    TVM_FFI_CHECK_CUDA_ERROR(
        cudaMemcpyAsync(&count, total, sizeof(count), cudaMemcpyDeviceToHost, stream));
    TVM_FFI_CHECK_CUDA_ERROR(cudaStreamSynchronize(stream));
    result = AllocCudaResult(ffi::Shape({count}), kInt64, device);
    if (count == 0) return;
    ScatterNonzeroKernel<T><<<blocks, kThreads, 0, stream>>>(
        xs, n, chunk, offsets, static_cast<int64_t*>(result.data_ptr()));
    CHECK_CUDA_LAUNCH();
  });
  return result;
}

}  // namespace scale_lib
