// SPDX-License-Identifier: Apache-2.0
// Load/compute/store rules for CUDA kernels (the twin of cpu_float.h): 16-bit floats compute in
// float32, float32 in float32, float64 in float64.
#ifndef SCALE_LIB_KERNELS_CUDA_FLOAT_CUH_
#define SCALE_LIB_KERNELS_CUDA_FLOAT_CUH_

#include <cuda/cmath>
#include <cuda/std/cstdint>
#include <cuda/std/limits>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <type_traits>
#include <utility>

#include "cuda_driver.h"
#include "tvm_ffi_utils.h"

namespace scale_lib {
namespace gpu {

template <typename T>
struct FloatMath {
  using Compute = T;
  __device__ static T Load(T v) { return v; }
  __device__ static T Store(T v) { return v; }
  // A double result (a sum kept in double) rounded once to T.
  __device__ static T StoreDouble(double v) { return static_cast<T>(v); }
};

template <>
struct FloatMath<float16_t> {
  using Compute = float;
  __device__ static float Load(float16_t v) { return __half2float(v); }
  __device__ static float16_t Store(float v) { return __float2half_rn(v); }
  __device__ static float16_t StoreDouble(double v) { return __double2half(v); }
};

template <>
struct FloatMath<bfloat16_t> {
  using Compute = float;
  // A bfloat16 is the top half of a float32: widening is a shift of the raw bits, which keeps
  // register pressure at fp16's level (the intrinsic's form cost a row-wise reduction kernel a
  // third more registers).
  __device__ static float Load(bfloat16_t v) {
    return __uint_as_float(static_cast<unsigned int>(__bfloat16_as_ushort(v)) << 16);
  }
  __device__ static bfloat16_t Store(float v) { return __float2bfloat16_rn(v); }
  __device__ static bfloat16_t StoreDouble(double v) { return __double2bfloat16(v); }
};

template <typename T>
using Compute = typename FloatMath<T>::Compute;

// kWidth elements of T in one aligned load/store (16 bytes for kWidth = 16 / sizeof(T)).
template <typename T, int kWidth>
struct alignas(sizeof(T) * kWidth) Pack {
  T v[kWidth];
};

// A pack widened to Compute values and narrowed back. 16-bit floats convert two at a time (one
// cvt.rn.{f16,bf16}x2.f32 per pair on the way out): converting element by element doubled the
// instruction count of bf16 kernels and cost a row-wise reduction a tenth of its bandwidth.
template <typename T, int kWidth>
__device__ void Widen(const Pack<T, kWidth>& p, typename FloatMath<T>::Compute (&out)[kWidth]) {
  if constexpr (std::is_same_v<T, bfloat16_t> && kWidth % 2 == 0) {
    // The element at the lower address is the low half of each 32-bit word.
    const auto* words = reinterpret_cast<const unsigned int*>(p.v);
#pragma unroll
    for (int i = 0; i < kWidth / 2; ++i) {
      out[2 * i] = __uint_as_float(words[i] << 16);
      out[2 * i + 1] = __uint_as_float(words[i] & 0xffff0000u);
    }
  } else if constexpr (std::is_same_v<T, float16_t> && kWidth % 2 == 0) {
    const auto* pairs = reinterpret_cast<const __half2*>(p.v);
#pragma unroll
    for (int i = 0; i < kWidth / 2; ++i) {
      const float2 f = __half22float2(pairs[i]);
      out[2 * i] = f.x;
      out[2 * i + 1] = f.y;
    }
  } else {
#pragma unroll
    for (int k = 0; k < kWidth; ++k) out[k] = FloatMath<T>::Load(p.v[k]);
  }
}

template <typename T, int kWidth>
__device__ void Narrow(const typename FloatMath<T>::Compute (&in)[kWidth], Pack<T, kWidth>& p) {
  if constexpr (std::is_same_v<T, bfloat16_t> && kWidth % 2 == 0) {
    auto* pairs = reinterpret_cast<__nv_bfloat162*>(p.v);
#pragma unroll
    for (int i = 0; i < kWidth / 2; ++i) pairs[i] = __floats2bfloat162_rn(in[2 * i], in[2 * i + 1]);
  } else if constexpr (std::is_same_v<T, float16_t> && kWidth % 2 == 0) {
    auto* pairs = reinterpret_cast<__half2*>(p.v);
#pragma unroll
    for (int i = 0; i < kWidth / 2; ++i) pairs[i] = __floats2half2_rn(in[2 * i], in[2 * i + 1]);
  } else {
#pragma unroll
    for (int k = 0; k < kWidth; ++k) p.v[k] = FloatMath<T>::Store(in[k]);
  }
}

template <typename T>
inline constexpr int kPackWidth = 16 / static_cast<int>(sizeof(T));  // elements per 16 bytes

inline bool IsAligned(const void* p, size_t bytes) {
  return reinterpret_cast<uintptr_t>(p) % bytes == 0;
}

// Blocks for `work_items` items, `items_per_block` each: at least 1, and at most 2^31 - 1 (the
// limit of grid dimension x); kernels' grid-stride loops cover any remainder. (libcu++'s
// `cuda::` is usable here: this library's helper namespace is `gpu`, not `cuda`.)
inline constexpr int64_t kMaxGridX = cuda::std::numeric_limits<cuda::std::int32_t>::max();
inline unsigned int GridSize(int64_t work_items, int64_t items_per_block) {
  const int64_t blocks = cuda::ceil_div(std::max<int64_t>(work_items, 0), items_per_block);
  return static_cast<unsigned int>(std::clamp<int64_t>(blocks, 1, kMaxGridX));
}

// [launch.begin]
// ---------------------------------------------------------------------------------------------
// Launching. gpu::Launch(kernel, grid, block, stream, args...) is
// kernel<<<grid, block, 0, stream>>>(args...) and checks the launch, except that where it can
// (the kernel's code compiled for compute capability 9.0+, a driver of CUDA 12.3+, which keeps
// it in CUDA graphs; not with SCALE_LIB_DEPENDENT_LAUNCH=0) the kernel is launched as a
// programmatic dependent: it may be scheduled while the kernel before it on the stream is
// finishing, so that the launch latency of a chain of small kernels (a decode step) overlaps
// the work. Such a kernel must call gpu::AwaitPriorKernels() before it reads or writes global
// memory; that call returns once the kernel before it on the stream has finished and its writes
// are visible (and so every kernel before that one: each of this library's waited in turn, or
// was launched with <<<>>>, which starts a kernel only after all before it). A kernel launched
// with <<<>>> needs nothing.
// ---------------------------------------------------------------------------------------------
__device__ __forceinline__ void AwaitPriorKernels() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
  // The next kernel may be scheduled from here on: it waits in turn for this one to finish.
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

namespace detail {
// Whether `kernel` may be launched as a programmatic dependent on the current device: its code
// there was compiled for compute capability 9.0+ (so it has AwaitPriorKernels' wait; a build
// for older GPUs only, JIT-compiled for a newer one, has not), under a CUDA 12.3+ driver, and
// SCALE_LIB_DEPENDENT_LAUNCH is not 0 (read once: every kernel then starts after the one before
// it has finished, to rule such launches out when chasing a race). Known per kernel and device.
inline bool DependentLaunchAllowed(const void* kernel) {
  static const bool enabled = [] {
    const char* env = std::getenv("SCALE_LIB_DEPENDENT_LAUNCH");
    return !(env != nullptr && std::strcmp(env, "0") == 0) && CudaDriverVersion() >= 12030;
  }();
  if (!enabled) return false;
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  static std::mutex mutex;
  static std::map<std::pair<const void*, int>, bool> known;
  const std::lock_guard<std::mutex> lock(mutex);
  const auto found = known.find({kernel, device});
  if (found != known.end()) return found->second;
  cudaFuncAttributes attributes{};
  if (cudaFuncGetAttributes(&attributes, kernel) != cudaSuccess) {
    (void)cudaGetLastError();  // not cached: the launch that follows reports what is wrong
    return false;
  }
  const bool allowed = attributes.ptxVersion >= 90;
  known.emplace(std::make_pair(kernel, device), allowed);
  return allowed;
}
}  // namespace detail

template <typename... Params, typename... Args>
void Launch(void (*kernel)(Params...), dim3 grid, dim3 block, cudaStream_t stream, Args&&... args) {
  if (!detail::DependentLaunchAllowed(reinterpret_cast<const void*>(kernel))) {
    kernel<<<grid, block, 0, stream>>>(std::forward<Args>(args)...);
    CHECK_CUDA_LAUNCH();
    return;
  }
  cudaLaunchAttribute dependent{};
  dependent.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  dependent.val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t config{};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = 0;
  config.stream = stream;
  config.attrs = &dependent;
  config.numAttrs = 1;
  const cudaError_t launched = cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...);
  // Reported here: cleared, so that a later launch's check does not report it again.
  if (launched != cudaSuccess) (void)cudaGetLastError();
  TVM_FFI_CHECK_CUDA_ERROR(launched);
}
// [launch.end]

}  // namespace gpu
}  // namespace scale_lib

#endif  // SCALE_LIB_KERNELS_CUDA_FLOAT_CUH_
