// SPDX-License-Identifier: Apache-2.0
// CUDA rms_norm and its backward pieces. The CPU twin is kernels/rms_norm/rms_norm_cpu.cc.
//
// Forward: a row is normalised by a group of threads that keeps the row in registers, so x is
// read from memory once. Narrow rows (up to 128 16-byte packs) share a warp among 4-32 threads
// each; wider rows get a block each; rows too wide for the block's registers are read twice.
#include <cstdint>

#include "cuda_float.cuh"
#include "rms_norm.h"

namespace scale_lib {
namespace {

template <typename T>
using Acc = typename gpu::FloatMath<T>::Compute;  // float, or double for double

// A cached row lives in registers: at most 4 packs of 16 bytes per thread in the group kernel
// (rows up to 128 packs), 8 in the block kernel. The block kernel is capped at 512 threads so
// that it may use up to 128 registers: at 1024 threads the cap of 64 made the cached row spill.
constexpr int kGroupPacksPerThread = 4;
constexpr int kBlockPacksPerThread = 8;
constexpr int kGroupKernelThreads = 256;
constexpr int kMaxBlockThreads = 512;
constexpr int64_t kMaxPacksForGroups = 32 * kGroupPacksPerThread;

// Sum over the kWidth consecutive lanes of a group (a power of two up to 32); every lane of the
// warp must call it.
template <int kWidth, typename A>
__device__ A GroupSum(A v) {
#pragma unroll
  for (int offset = kWidth / 2; offset > 0; offset /= 2) {
    v += __shfl_xor_sync(0xffffffffu, v, offset, kWidth);
  }
  return v;
}

// Sum over the block, returned to every thread. `scratch` holds one value per warp.
template <typename A>
__device__ A BlockSum(A v, A* scratch) {
  v = GroupSum<32>(v);
  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  __syncthreads();  // the previous call's readers are done with scratch
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  const int warps = (blockDim.x + 31) / 32;
  return GroupSum<32>(lane < warps ? scratch[lane] : A(0));
}

// v *= rstd * weight[pack p] (weight may be null).
template <typename T, int kWidth>
__device__ void ScaleByRstdAndWeight(Acc<T> (&v)[kWidth], Acc<T> rstd, const T* weight, int64_t p) {
  Acc<T> w[kWidth];
  if (weight != nullptr) {
    const gpu::Pack<T, kWidth> packed = reinterpret_cast<const gpu::Pack<T, kWidth>*>(weight)[p];
    gpu::Widen(packed, w);  // from a register copy: one 16-byte load, not one per word
  }
#pragma unroll
  for (int k = 0; k < kWidth; ++k) {
    v[k] *= rstd;
    if (weight != nullptr) v[k] *= w[k];
  }
}

// [rms_norm_row.begin]
// One row, held in registers as packs of kWidth elements: thread `lane` of `lanes` holds packs
// lane, lane + lanes, ... Inactive threads (past the last row) still take part in `reduce`.
template <typename T, int kWidth, int kMaxPacks, typename Reduce>
__device__ void NormalizeCachedRow(T* out_row, const T* x_row, const T* weight, int64_t hidden,
                                   Acc<T> eps, int lane, int lanes, bool active, Reduce reduce) {
  using P = gpu::Pack<T, kWidth>;
  const int64_t packs = hidden / kWidth;
  P buf[kMaxPacks];
  Acc<T> sum_sq = 0;
#pragma unroll
  for (int i = 0; i < kMaxPacks; ++i) {
    const int64_t p = lane + static_cast<int64_t>(i) * lanes;
    if (active && p < packs) {
      buf[i] = reinterpret_cast<const P*>(x_row)[p];
      Acc<T> v[kWidth];
      gpu::Widen(buf[i], v);
#pragma unroll
      for (int k = 0; k < kWidth; ++k) sum_sq += v[k] * v[k];
    }
  }
  const Acc<T> rstd = rsqrt(reduce(sum_sq) / static_cast<Acc<T>>(hidden) + eps);
#pragma unroll
  for (int i = 0; i < kMaxPacks; ++i) {
    const int64_t p = lane + static_cast<int64_t>(i) * lanes;
    if (active && p < packs) {
      Acc<T> v[kWidth];
      gpu::Widen(buf[i], v);
      ScaleByRstdAndWeight(v, rstd, weight, p);
      gpu::Narrow(v, buf[i]);
      reinterpret_cast<P*>(out_row)[p] = buf[i];
    }
  }
}
// [rms_norm_row.end]

// Rows of at most kMaxPacksForGroups packs: kGroup threads per row, 256 / kGroup rows per block.
template <typename T, int kWidth, int kGroup>
__global__ void __launch_bounds__(kGroupKernelThreads)
    RmsNormGroupKernel(T* out, const T* x, const T* weight, RowLayout x_rows, int64_t out_stride,
                       Acc<T> eps) {
  gpu::AwaitPriorKernels();
  constexpr int kRowsPerBlock = kGroupKernelThreads / kGroup;
  const int lane = threadIdx.x % kGroup;
  // The loop bound is uniform across the block, so whole warps iterate together.
  for (int64_t first = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock; first < x_rows.rows;
       first += static_cast<int64_t>(gridDim.x) * kRowsPerBlock) {
    const int64_t row = first + threadIdx.x / kGroup;
    const bool active = row < x_rows.rows;
    const int64_t r = active ? row : 0;
    NormalizeCachedRow<T, kWidth, kGroupPacksPerThread>(
        out + r * out_stride, x + r * x_rows.row_stride, weight, x_rows.hidden, eps, lane, kGroup,
        active, [](Acc<T> v) { return GroupSum<kGroup>(v); });
  }
}

// Wider rows: one block per row. kCacheRow: the row fits in the block's registers (at most
// kBlockPacksPerThread packs per thread); otherwise it is read twice (the second time mostly
// from L2).
template <typename T, int kWidth, bool kCacheRow>
__global__ void __launch_bounds__(kMaxBlockThreads)
    RmsNormBlockKernel(T* out, const T* x, const T* weight, RowLayout x_rows, int64_t out_stride,
                       Acc<T> eps) {
  gpu::AwaitPriorKernels();
  using P = gpu::Pack<T, kWidth>;
  __shared__ Acc<T> scratch[32];
  const int64_t packs = x_rows.hidden / kWidth;
  for (int64_t row = blockIdx.x; row < x_rows.rows; row += gridDim.x) {
    const T* x_row = x + row * x_rows.row_stride;
    T* out_row = out + row * out_stride;
    auto reduce = [&](Acc<T> v) { return BlockSum(v, scratch); };
    if constexpr (kCacheRow) {
      NormalizeCachedRow<T, kWidth, kBlockPacksPerThread>(
          out_row, x_row, weight, x_rows.hidden, eps, threadIdx.x, blockDim.x, true, reduce);
    } else {
      Acc<T> sum_sq = 0;
      for (int64_t p = threadIdx.x; p < packs; p += blockDim.x) {
        const P packed = reinterpret_cast<const P*>(x_row)[p];
        Acc<T> v[kWidth];
        gpu::Widen(packed, v);
#pragma unroll
        for (int k = 0; k < kWidth; ++k) sum_sq += v[k] * v[k];
      }
      const Acc<T> rstd = rsqrt(reduce(sum_sq) / static_cast<Acc<T>>(x_rows.hidden) + eps);
      for (int64_t p = threadIdx.x; p < packs; p += blockDim.x) {
        P packed = reinterpret_cast<const P*>(x_row)[p];
        Acc<T> v[kWidth];
        gpu::Widen(packed, v);
        ScaleByRstdAndWeight(v, rstd, weight, p);
        gpu::Narrow(v, packed);
        reinterpret_cast<P*>(out_row)[p] = packed;
      }
    }
  }
}

int NextPowerOfTwo(int64_t v) {
  int p = 1;
  while (p < v) p *= 2;
  return p;
}

template <typename T, int kWidth>
void LaunchRmsNorm(T* out, const T* x, const T* weight, RowLayout x_rows, int64_t out_stride,
                   double eps, cudaStream_t stream) {
  const int64_t packs = x_rows.hidden / kWidth;
  const Acc<T> e = EpsIn<Acc<T>>(eps);
  if (packs <= kMaxPacksForGroups) {
    // Aim for two packs per thread: enough loads in flight, many rows per block.
    const int group = std::min(32, std::max(4, NextPowerOfTwo((packs + 1) / 2)));
    const unsigned int grid = gpu::GridSize(x_rows.rows, kGroupKernelThreads / group);
    switch (group) {
#define SCALE_LIB_GROUP_CASE(G)                                                              \
  case G:                                                                                    \
    gpu::Launch(RmsNormGroupKernel<T, kWidth, G>, grid, kGroupKernelThreads, stream, out, x, \
                weight, x_rows, out_stride, e);                                              \
    break;
      SCALE_LIB_GROUP_CASE(4)
      SCALE_LIB_GROUP_CASE(8)
      SCALE_LIB_GROUP_CASE(16)
      SCALE_LIB_GROUP_CASE(32)
#undef SCALE_LIB_GROUP_CASE
      default:
        TVM_FFI_ICHECK(false) << "unexpected group size " << group;
    }
    return;
  }
  // About four packs per thread, within 64..kMaxBlockThreads threads.
  const int64_t threads =
      std::min<int64_t>(kMaxBlockThreads, std::max<int64_t>(64, ((packs + 3) / 4 + 31) / 32 * 32));
  const unsigned int grid = gpu::GridSize(x_rows.rows, 1);
  if (packs <= threads * kBlockPacksPerThread) {
    gpu::Launch(RmsNormBlockKernel<T, kWidth, true>, grid, static_cast<unsigned int>(threads),
                stream, out, x, weight, x_rows, out_stride, e);
  } else {
    gpu::Launch(RmsNormBlockKernel<T, kWidth, false>, grid, static_cast<unsigned int>(threads),
                stream, out, x, weight, x_rows, out_stride, e);
  }
}

// ---------------------------------------------------------------------------------------------
// Backward pieces: one block per row (rstd, grad_x), one block per kWeightGradColumns columns
// (grad_weight).
// Correct and deterministic rather than tuned.
// ---------------------------------------------------------------------------------------------
constexpr int kBackwardThreads = 256;

template <typename T>
__global__ void __launch_bounds__(kBackwardThreads)
    RmsNormRstdKernel(double* rstd, const T* x, RowLayout x_rows, Acc<T> eps) {
  gpu::AwaitPriorKernels();
  using Math = gpu::FloatMath<T>;
  __shared__ Acc<T> scratch[32];
  for (int64_t row = blockIdx.x; row < x_rows.rows; row += gridDim.x) {
    const T* x_row = x + row * x_rows.row_stride;
    Acc<T> sum_sq = 0;
    for (int64_t j = threadIdx.x; j < x_rows.hidden; j += blockDim.x) {
      const Acc<T> v = Math::Load(x_row[j]);
      sum_sq += v * v;
    }
    sum_sq = BlockSum(sum_sq, scratch);
    if (threadIdx.x == 0) rstd[row] = rsqrt(sum_sq / static_cast<Acc<T>>(x_rows.hidden) + eps);
  }
}

// grad_x = rstd * w * g - rstd^3 / hidden * dot(w * g, x) * x
template <typename T>
__global__ void __launch_bounds__(kBackwardThreads)
    RmsNormBackwardKernel(T* grad_x, const T* grad, const T* x, const T* weight, const double* rstd,
                          RowLayout x_rows) {
  gpu::AwaitPriorKernels();
  using Math = gpu::FloatMath<T>;
  __shared__ Acc<T> scratch[32];
  const int64_t hidden = x_rows.hidden;
  for (int64_t row = blockIdx.x; row < x_rows.rows; row += gridDim.x) {
    const T* g = grad + row * hidden;
    const T* x_row = x + row * x_rows.row_stride;
    Acc<T> dot = 0;
    for (int64_t j = threadIdx.x; j < hidden; j += blockDim.x) {
      const Acc<T> w = weight != nullptr ? Math::Load(weight[j]) : Acc<T>(1);
      dot += w * Math::Load(g[j]) * Math::Load(x_row[j]);
    }
    dot = BlockSum(dot, scratch);
    const auto r = static_cast<Acc<T>>(rstd[row]);
    const Acc<T> c = r * r * r * dot / static_cast<Acc<T>>(hidden);
    for (int64_t j = threadIdx.x; j < hidden; j += blockDim.x) {
      const Acc<T> w = weight != nullptr ? Math::Load(weight[j]) : Acc<T>(1);
      grad_x[row * hidden + j] = Math::Store(r * w * Math::Load(g[j]) - c * Math::Load(x_row[j]));
    }
  }
}

// grad_weight[g, j] = sum over the rows of group g of grad * x * rstd. Block: kWeightGradColumns
// columns (one warp, reading consecutive elements of a row) x kWeightGradRowLanes rows; grid:
// column blocks x groups.
constexpr int kWeightGradColumns = 32;
constexpr int kWeightGradRowLanes = 8;

template <typename T>
__global__ void __launch_bounds__(kWeightGradColumns* kWeightGradRowLanes)
    RmsNormWeightGradKernel(T* grad_weight, const T* grad, const T* x, const double* rstd,
                            RowLayout x_rows, int64_t rows_per_group) {
  gpu::AwaitPriorKernels();
  using Math = gpu::FloatMath<T>;
  // One column of padding: the final sum reads a column of `partial` per thread, and a row
  // length of 33 puts those reads in different shared-memory banks.
  __shared__ Acc<T> partial[kWeightGradRowLanes][kWeightGradColumns + 1];
  const int64_t hidden = x_rows.hidden;
  const int64_t col = static_cast<int64_t>(blockIdx.x) * kWeightGradColumns + threadIdx.x;
  const int64_t first_row = static_cast<int64_t>(blockIdx.y) * rows_per_group;
  const int64_t end_row = first_row + rows_per_group;
  Acc<T> acc = 0;
  if (col < hidden) {
    for (int64_t row = first_row + threadIdx.y; row < end_row; row += kWeightGradRowLanes) {
      acc += Math::Load(grad[row * hidden + col]) * Math::Load(x[row * x_rows.row_stride + col]) *
             static_cast<Acc<T>>(rstd[row]);
    }
  }
  partial[threadIdx.y][threadIdx.x] = acc;
  __syncthreads();
  if (threadIdx.y == 0 && col < hidden) {
    Acc<T> sum = 0;
#pragma unroll
    for (int i = 0; i < kWeightGradRowLanes; ++i) sum += partial[i][threadIdx.x];
    grad_weight[blockIdx.y * hidden + col] = Math::Store(sum);
  }
}

// Every row starts on a 16-byte boundary: the first is aligned and the stride keeps it so.
bool RowsArePacked(const void* first_row, int64_t row_stride, int width) {
  return gpu::IsAligned(first_row, 16) && row_stride % width == 0;
}

}  // namespace

// [rms_norm_cuda.begin]
void RmsNormCUDA(ffi::TensorView out, ffi::TensorView x, ffi::Optional<ffi::TensorView> weight,
                 double eps) {
  CheckRmsNormArgs(out, x, weight, eps);
  if (x.numel() == 0) return;
  const RowLayout x_rows = AsRows(x, "x");
  const int64_t out_stride = AsRows(out, "out").row_stride;
  ffi::CUDADeviceGuard guard(x.device().device_id);
  cudaStream_t stream = GetCudaStream(x.device());
  DispatchFloating(x.dtype(), "x", [&](auto tag) {
    using T = typename decltype(tag)::type;
    constexpr int kWidth = gpu::kPackWidth<T>;
    const T* w = weight.has_value() ? DataPtr<const T>(weight.value()) : nullptr;
    // 16-byte packs when every row of x, out and weight starts 16-byte aligned.
    const bool packed = x_rows.hidden % kWidth == 0 &&
                        RowsArePacked(DataPtr<const T>(x), x_rows.row_stride, kWidth) &&
                        RowsArePacked(DataPtr<T>(out), out_stride, kWidth) &&
                        (w == nullptr || gpu::IsAligned(w, 16));
    if (packed) {
      LaunchRmsNorm<T, kWidth>(DataPtr<T>(out), DataPtr<const T>(x), w, x_rows, out_stride, eps,
                               stream);
    } else {
      LaunchRmsNorm<T, 1>(DataPtr<T>(out), DataPtr<const T>(x), w, x_rows, out_stride, eps, stream);
    }
  });
  CHECK_CUDA_LAUNCH();
}
// [rms_norm_cuda.end]

void RmsNormRstdCUDA(ffi::TensorView rstd, ffi::TensorView x, double eps) {
  CheckRmsNormRstdArgs(rstd, x, eps);
  const RowLayout x_rows = AsRows(x, "x");
  if (x_rows.rows == 0) return;
  ffi::CUDADeviceGuard guard(x.device().device_id);
  cudaStream_t stream = GetCudaStream(x.device());
  DispatchFloating(x.dtype(), "x", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const unsigned int grid = gpu::GridSize(x_rows.rows, 1);
    gpu::Launch(RmsNormRstdKernel<T>, grid, kBackwardThreads, stream, DataPtr<double>(rstd),
                DataPtr<const T>(x), x_rows, EpsIn<Acc<T>>(eps));
  });
  CHECK_CUDA_LAUNCH();
}

void RmsNormBackwardCUDA(ffi::TensorView grad_x, ffi::TensorView grad, ffi::TensorView x,
                         ffi::Optional<ffi::TensorView> weight, ffi::TensorView rstd) {
  CheckRmsNormBackwardArgs(grad_x, grad, x, weight, rstd);
  if (x.numel() == 0) return;
  const RowLayout x_rows = AsRows(x, "x");
  ffi::CUDADeviceGuard guard(x.device().device_id);
  cudaStream_t stream = GetCudaStream(x.device());
  DispatchFloating(x.dtype(), "x", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* w = weight.has_value() ? DataPtr<const T>(weight.value()) : nullptr;
    const unsigned int grid = gpu::GridSize(x_rows.rows, 1);
    gpu::Launch(RmsNormBackwardKernel<T>, grid, kBackwardThreads, stream, DataPtr<T>(grad_x),
                DataPtr<const T>(grad), DataPtr<const T>(x), w, DataPtr<const double>(rstd),
                x_rows);
  });
  CHECK_CUDA_LAUNCH();
}

void RmsNormWeightGradCUDA(ffi::TensorView grad_weight, ffi::TensorView grad, ffi::TensorView x,
                           ffi::TensorView rstd) {
  CheckRmsNormWeightGradArgs(grad_weight, grad, x, rstd);
  const RowLayout x_rows = AsRows(x, "x");
  const int64_t groups = WeightGradGroups(grad_weight, x);
  if (x_rows.hidden == 0 || groups == 0) return;
  SCALE_LIB_CHECK(groups <= 65535, ValueError)
      << "rms_norm_weight_grad supports at most 65535 batch groups; got " << groups;
  ffi::CUDADeviceGuard guard(x.device().device_id);
  cudaStream_t stream = GetCudaStream(x.device());
  DispatchFloating(x.dtype(), "x", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const dim3 grid(gpu::GridSize(x_rows.hidden, kWeightGradColumns),
                    static_cast<unsigned int>(groups));
    gpu::Launch(RmsNormWeightGradKernel<T>, grid, dim3(kWeightGradColumns, kWeightGradRowLanes),
                stream, DataPtr<T>(grad_weight), DataPtr<const T>(grad), DataPtr<const T>(x),
                DataPtr<const double>(rstd), x_rows, x_rows.rows / groups);
  });
  CHECK_CUDA_LAUNCH();
}

}  // namespace scale_lib
