// SPDX-License-Identifier: Apache-2.0
// CUDA implementation of softmax. The kernel specialised on the row length is compiled at the
// first call by NVRTC (python/scale_lib/nvrtc_kernels/softmax.cu, through RuntimeKernel); this
// file holds the launch and the ahead-of-time kernel for any row length, run where there is no
// NVRTC or for rows too long to keep in registers. The CPU twin is kernels/softmax/softmax_cpu.cc.
#include <algorithm>
#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

#include "cuda_float.cuh"
#include "rowwise.cuh"
#include "runtime_kernel.h"
#include "softmax.h"

namespace scale_lib {
namespace gpu {

constexpr int kSoftmaxThreads = 256;

// (max, sum of exp(v - max)) of a row part, combined so that neither overflows.
template <typename C>
struct MaxSum {
  C max;
  C sum;
};

template <typename C>
__device__ MaxSum<C> Combine(MaxSum<C> a, MaxSum<C> b) {
  if (a.max != a.max || b.max != b.max) return {a.max + b.max, C(1)};  // NaN: the output is NaN
  const C max = a.max > b.max ? a.max : b.max;
  if (max == -INFINITY) return {max, C(0)};
  return {max, a.sum * exp(a.max - max) + b.sum * exp(b.max - max)};
}

// One block per row (a grid-stride loop over rows), any row length: one pass reads the row for
// its running (max, sum), a second reads it again to write the output.
template <typename T>
__global__ void SoftmaxRowsKernel(T* __restrict__ out, const T* __restrict__ x, int64_t rows,
                                  int64_t cols) {
  AwaitPriorKernels();
  using M = FloatMath<T>;
  using C = typename M::Compute;
  __shared__ MaxSum<C> partial[kSoftmaxThreads / 32];
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const T* in = x + row * cols;
    MaxSum<C> mine{-INFINITY, C(0)};
    for (int64_t i = threadIdx.x; i < cols; i += blockDim.x) {
      const C v = M::Load(in[i]);  // one exp per element: rescale the sum when the max grows
      if (v == -INFINITY) continue;  // contributes exp(-inf) = 0
      if (v <= mine.max) {
        mine.sum += exp(v - mine.max);
      } else if (v == v) {
        mine.sum = mine.sum * exp(mine.max - v) + C(1);
        mine.max = v;
      } else {
        mine.max = v;  // NaN: the output is NaN
      }
    }
    for (int offset = 16; offset > 0; offset /= 2) {
      MaxSum<C> other{__shfl_xor_sync(0xffffffffu, mine.max, offset),
                      __shfl_xor_sync(0xffffffffu, mine.sum, offset)};
      mine = Combine(mine, other);
    }
    if (threadIdx.x % 32 == 0) partial[threadIdx.x / 32] = mine;
    __syncthreads();
    MaxSum<C> row_total = partial[0];
    for (int w = 1; w < kSoftmaxThreads / 32; ++w) row_total = Combine(row_total, partial[w]);
    __syncthreads();  // partial is rewritten for the next row
    // A +inf in the row makes it NaN, as exp(inf - inf) does in the other implementations.
    const C scale = row_total.max == INFINITY ? C(NAN) : C(1) / row_total.sum;
    T* o = out + row * cols;
    for (int64_t i = threadIdx.x; i < cols; i += blockDim.x) {
      o[i] = M::Store(exp(M::Load(in[i]) - row_total.max) * scale);
    }
  }
}

// [softmax_specialise.begin]
// The most elements of a row one thread of the runtime kernel keeps in registers: with 1024
// threads a thread has 64 registers, half for its elements.
template <typename T>
constexpr int64_t kMaxPerThread = sizeof(T) == 8 ? 16 : 32;

// The runtime kernel's specialisation for rows of `cols` elements of T, or false to run the
// ahead-of-time kernel (rows longer than 1024 threads hold). Everything here is static at the
// call: the row length, the dtype and whether 16-byte loads are possible.
template <typename T>
bool SoftmaxSpecialisation(int64_t cols, bool aligned, std::vector<std::string>* defines,
                           int* threads_per_row, int* rows_per_block) {
  if (cols < 1 || cols > 1024 * kMaxPerThread<T>) return false;
  const int vec = aligned && cols * sizeof(T) % 16 == 0 ? 16 / sizeof(T) : 1;
  // A warp per row (four rows per block) while it holds the row, else a block per row of the
  // fewest threads (64 to 1024) that hold at most half of kMaxPerThread each (all of it at 1024).
  int threads = 32;
  if (cols > 32 * kMaxPerThread<T>) {
    threads = 64;
    while (threads < 1024 && cols > threads * kMaxPerThread<T> / 2) threads *= 2;
  }
  *threads_per_row = threads;
  *rows_per_block = threads == 32 ? 4 : 1;
  const int dtype = std::is_same_v<T, float16_t>    ? 0
                    : std::is_same_v<T, bfloat16_t> ? 1
                    : std::is_same_v<T, float>      ? 2
                                                    : 3;
  *defines = {"SCALE_LIB_COLS=" + std::to_string(cols), "SCALE_LIB_DTYPE=" + std::to_string(dtype),
              "SCALE_LIB_THREADS_PER_ROW=" + std::to_string(threads),
              "SCALE_LIB_ROWS_PER_BLOCK=" + std::to_string(*rows_per_block),
              "SCALE_LIB_VEC=" + std::to_string(vec)};
  return true;
}
// [softmax_specialise.end]

}  // namespace gpu

// [softmax_cuda.begin]
void SoftmaxCUDA(ffi::TensorView out, ffi::TensorView x, bool runtime_compiled) {
  CheckSoftmaxArgs(out, x);  // 1. validate
  const int64_t n = x.numel();
  if (n == 0) return;
  const int64_t cols = x.size(x.ndim() - 1);
  const int64_t rows = n / cols;
  const int device = x.device().device_id;
  ffi::CUDADeviceGuard guard(device);               // 2. device guard
  cudaStream_t stream = GetCudaStream(x.device());  // 3. stream
  DispatchFloating(x.dtype(), "x", [&](auto tag) {  // 4. dtype dispatch + launch
    using T = typename decltype(tag)::type;
    T* out_ptr = DataPtr<T>(out);
    const T* x_ptr = DataPtr<const T>(x);
    std::vector<std::string> defines;
    int threads_per_row = 0, rows_per_block = 0;
    const bool aligned = gpu::IsAligned(out_ptr, 16) && gpu::IsAligned(x_ptr, 16);
    tvm::ffi::CubinKernel* kernel = nullptr;
    if (runtime_compiled &&
        gpu::SoftmaxSpecialisation<T>(cols, aligned, &defines, &threads_per_row, &rows_per_block)) {
      kernel = RuntimeKernel("softmax", "softmax_rows", defines, device, stream);
    }
    if (kernel != nullptr) {
      MakeContextCurrent(device);  // the CUBIN launcher launches in the current context
      void* out_arg = out_ptr;
      const void* x_arg = x_ptr;
      long long rows_arg = rows;
      void* args[] = {&out_arg, &x_arg, &rows_arg};
      const tvm::ffi::dim3 grid(gpu::GridSize(rows, rows_per_block));
      const tvm::ffi::dim3 block(threads_per_row * rows_per_block);
      TVM_FFI_CHECK_CUBIN_LAUNCHER_CUDA_ERROR(kernel->Launch(args, grid, block, stream));  // 5.
      return;
    }
    gpu::Launch(gpu::SoftmaxRowsKernel<T>, gpu::GridSize(rows, 1), gpu::kSoftmaxThreads, stream,
                out_ptr, x_ptr, rows, cols);  // 5. checked
  });
}
// [softmax_cuda.end]

void SoftmaxBackwardCUDA(ffi::TensorView grad_x, ffi::TensorView y, ffi::TensorView grad) {
  CheckSoftmaxBackwardArgs(grad_x, y, grad);  // 1. validate
  const int64_t n = y.numel();
  if (n == 0) return;
  const int64_t cols = y.size(y.ndim() - 1);
  ffi::CUDADeviceGuard guard(y.device().device_id);  // 2. device guard
  cudaStream_t stream = GetCudaStream(y.device());   // 3. stream
  DispatchFloating(y.dtype(), "y", [&](auto tag) {   // 4. dtype dispatch + launch (checked)
    using T = typename decltype(tag)::type;
    gpu::LaunchRowwise<T>(SoftmaxBackwardFn<gpu::Compute<T>>{}, n / cols, cols, stream,
                          DataPtr<T>(grad_x), DataPtr<const T>(y), DataPtr<const T>(grad));
  });
}

}  // namespace scale_lib
