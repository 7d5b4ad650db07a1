// SPDX-License-Identifier: Apache-2.0
// CUDA l2_norm: pass 1 writes one float64 partial sum of squares per block into the workspace
// (blocks x groups), pass 2 (one block per group) adds a group's partials in a fixed order and
// takes the square root. Norms of at most kL2NormOneBlockMax elements (decode sizes) take one
// block each and one launch: the block finishes its norm itself, with no workspace.
#include <cub/block/block_reduce.cuh>
#include <cstdint>

#include "cuda_float.cuh"
#include "l2_norm.h"

namespace scale_lib {
namespace {

constexpr int kThreads = static_cast<int>(kL2NormThreads);
constexpr int kMaxBlocks = static_cast<int>(kL2NormMaxBlocks);

template <typename T>
__global__ void __launch_bounds__(kThreads)
    SumOfSquaresKernel(const T* x, int64_t per_group, double* partials, T* out) {
  gpu::AwaitPriorKernels();
  using BlockReduce = cub::BlockReduce<double, kThreads>;
  __shared__ typename BlockReduce::TempStorage storage;
  const T* group = x + static_cast<int64_t>(blockIdx.y) * per_group;
  double sum = 0;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * kThreads;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x; i < per_group;
       i += stride) {
    const double v = static_cast<double>(gpu::FloatMath<T>::Load(group[i]));
    sum += v * v;
  }
  sum = BlockReduce(storage).Sum(sum);
  if (threadIdx.x != 0) return;
  if (partials == nullptr) {  // one block per norm: finish it here
    out[blockIdx.y] = gpu::FloatMath<T>::StoreDouble(sqrt(sum));
  } else {
    partials[static_cast<int64_t>(blockIdx.y) * gridDim.x + blockIdx.x] = sum;
  }
}

template <typename T>
__global__ void __launch_bounds__(kMaxBlocks)
    FinishNormKernel(const double* partials, int blocks_per_group, T* out) {
  gpu::AwaitPriorKernels();
  using BlockReduce = cub::BlockReduce<double, kMaxBlocks>;
  __shared__ typename BlockReduce::TempStorage storage;
  const double* group = partials + static_cast<int64_t>(blockIdx.x) * blocks_per_group;
  const double sum =
      BlockReduce(storage).Sum(threadIdx.x < blocks_per_group ? group[threadIdx.x] : 0.0);
  if (threadIdx.x == 0) out[blockIdx.x] = gpu::FloatMath<T>::StoreDouble(sqrt(sum));
}

}  // namespace

// [workspace_use.begin]
void L2NormCUDA(ffi::TensorView out, ffi::TensorView x, ffi::Optional<ffi::TensorView> workspace) {
  const int64_t groups = CheckL2NormArgs(out, x);
  if (workspace.has_value()) CheckWorkspace(workspace.value(), x, groups);
  if (groups == 0) return;
  SCALE_LIB_CHECK(groups <= 65535, ValueError)
      << "l2_norm supports at most 65535 norms at once; got " << groups;
  const int64_t per_group = x.numel() / groups;
  ffi::CUDADeviceGuard guard(x.device().device_id);
  cudaStream_t stream = GetCudaStream(x.device());
  const bool one_pass = per_group <= kL2NormOneBlockMax;
  const int64_t blocks = one_pass ? 1 : L2NormBlocksPerGroup(per_group);
  // In two passes, the caller's workspace, or one from the caller's framework: never a hidden
  // cudaMalloc. In one pass, none.
  ffi::Tensor framework_workspace;
  double* partials = nullptr;
  if (!one_pass) {
    if (workspace.has_value()) {
      partials = DataPtr<double>(workspace.value());
    } else {
      SCALE_LIB_CHECK(HasFrameworkAllocator(), ValueError)
          << "l2_norm on CUDA needs a workspace: call l2_norm_with_workspace(out, workspace, x) "
             "with at least l2_norm_workspace_bytes(numel, groups) bytes, or call through a "
             "framework that publishes its allocator (PyTorch, Paddle, JAX)";
      framework_workspace = AllocFromFramework(ffi::Shape({groups * blocks}), kFloat64, x.device());
      partials = static_cast<double*>(framework_workspace.data_ptr());
    }
  }
  DispatchFloating(x.dtype(), "x", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const dim3 grid(static_cast<unsigned int>(blocks), static_cast<unsigned int>(groups));
    gpu::Launch(SumOfSquaresKernel<T>, grid, kThreads, stream, DataPtr<const T>(x), per_group,
                partials, DataPtr<T>(out));
    if (one_pass) return;
    gpu::Launch(FinishNormKernel<T>, static_cast<unsigned int>(groups), kMaxBlocks, stream,
                partials, static_cast<int>(blocks), DataPtr<T>(out));
  });
}
// [workspace_use.end]

}  // namespace scale_lib
