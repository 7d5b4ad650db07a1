// SPDX-License-Identifier: Apache-2.0
// The contract every kernel and binding of scale_lib works against.
//
// A kernel function (kernels/scale/scale.cu is the model) does, in order:
//   1. validate  its op's Check<Op>Args (kernels/<op>/<op>.h), built from the CHECK_* macros below;
//                zero-size inputs then return early
//   2. guard     ffi::CUDADeviceGuard guard(x.device().device_id);   (CUDA only)
//   3. stream    cudaStream_t stream = GetCudaStream(x.device());    (CUDA only)
//   4. dispatch  DispatchFloating(x.dtype(), "x", [&](auto tag) { using T = ...; launch });
//                data through DataPtr<T>(t), which adds DLPack's byte_offset; 64-bit indices
//   5. check     CHECK_CUDA_LAUNCH();                                 (CUDA only)
// A binding (bindings/<op>_binding.cc) routes by device with SCALE_LIB_ROUTE_BY_DEVICE, or
// SCALE_LIB_ROUTE_CUDA_ONLY, and is exported with SCALE_LIB_EXPORT, which checks every tensor
// argument of every op before it runs: no null data with elements, and outputs disjoint from
// the other arguments (or the very same array, where the op declares in-place use).
// User errors are TypeError/ValueError naming the argument: TVM_FFI_THROW(ValueError) << ...,
// or SCALE_LIB_CHECK(cond, ValueError) << ...; TVM_FFI_ICHECK is for broken internal invariants.
// Ops that allocate their output use the allocation helpers at the end of this file.
//
// This header includes the TVM-FFI headers the contract needs. A file that uses more of TVM-FFI
// (the CUBIN launcher, containers) includes those headers itself. Internals (message formatting,
// the overlap test, the export checks) are in tvm_ffi_utils_detail.h; you need not read it.
#ifndef SCALE_LIB_TVM_FFI_UTILS_H_
#define SCALE_LIB_TVM_FFI_UTILS_H_

#include <tvm/ffi/container/tensor.h>
#include <tvm/ffi/dtype.h>
#include <tvm/ffi/error.h>
#include <tvm/ffi/extra/c_env_api.h>
#include <tvm/ffi/function.h>
#include <tvm/ffi/optional.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <type_traits>

#if defined(__CUDACC__)
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <tvm/ffi/extra/cuda/base.h>
#include <tvm/ffi/extra/cuda/device_guard.h>
#endif

#include "float_env.h"
#include "tvm_ffi_utils_detail.h"

namespace scale_lib {

namespace ffi = tvm::ffi;

// ---------------------------------------------------------------------------------------------
// Dtypes and dispatch
// ---------------------------------------------------------------------------------------------
// [dtypes.begin]
inline constexpr DLDataType kFloat16{kDLFloat, 16, 1};
inline constexpr DLDataType kBFloat16{kDLBfloat, 16, 1};
inline constexpr DLDataType kFloat32{kDLFloat, 32, 1};
inline constexpr DLDataType kFloat64{kDLFloat, 64, 1};
inline constexpr DLDataType kInt64{kDLInt, 64, 1};

// The 16-bit float storage types. Device code (any .cu file) uses CUDA's own types. Host-only
// translation units must also compile without the CUDA toolkit (CPU-only builds), so they get
// plain 16-bit containers; CPU kernels convert them with kernels/cpu_float.h.
#if defined(__CUDACC__)
using float16_t = __half;
using bfloat16_t = __nv_bfloat16;
#else
struct float16_t {
  uint16_t bits;
};
struct bfloat16_t {
  uint16_t bits;
};
#endif

// Every floating dtype an op may accept, as (DLPack dtype, C++ storage type, name).
// DispatchFloating and CHECK_FLOATING accept exactly this list. A new entry also needs its
// storage type handled by each kernel: FloatMath and the conversions in kernels/cpu_float.h and
// kernels/cuda_float.cuh, an entry point per dtype in kernels/<op>/cubin/, and the dtype lists of
// the Python package and the tests.
#define SCALE_LIB_FOR_EACH_FLOATING_DTYPE(X)                     \
  X(::scale_lib::kFloat16, ::scale_lib::float16_t, "float16")    \
  X(::scale_lib::kBFloat16, ::scale_lib::bfloat16_t, "bfloat16") \
  X(::scale_lib::kFloat32, float, "float32")                     \
  X(::scale_lib::kFloat64, double, "float64")
// [dtypes.end]

inline bool IsFloatingDType(DLDataType dtype) {
#define SCALE_LIB_MATCH_DTYPE(dl_dtype, ctype, name) \
  if (dtype == dl_dtype) return true;
  SCALE_LIB_FOR_EACH_FLOATING_DTYPE(SCALE_LIB_MATCH_DTYPE)
#undef SCALE_LIB_MATCH_DTYPE
  return false;
}

inline std::string FloatingDTypeNames() {
  std::string names;
#define SCALE_LIB_APPEND_DTYPE_NAME(dl_dtype, ctype, name) \
  names += names.empty() ? name : ", " name;
  SCALE_LIB_FOR_EACH_FLOATING_DTYPE(SCALE_LIB_APPEND_DTYPE_NAME)
#undef SCALE_LIB_APPEND_DTYPE_NAME
  return names;
}

// The name of storage type T ("float16", ...): the suffix of the per-dtype entry points of
// embedded CUBIN and Triton kernels.
template <typename T>
constexpr const char* DTypeName() {
#define SCALE_LIB_NAME_IF(dl_dtype, ctype, name) \
  if constexpr (std::is_same_v<T, ctype>) {      \
    return name;                                 \
  } else
  SCALE_LIB_FOR_EACH_FLOATING_DTYPE(SCALE_LIB_NAME_IF) {
    static_assert(!sizeof(T), "DTypeName: not a floating storage type");
    return nullptr;
  }
#undef SCALE_LIB_NAME_IF
}

// A value-less stand-in for a type, so a generic lambda can receive "the dtype" as an argument.
template <typename T>
struct TypeTag {
  using type = T;
};

// [dispatch.begin]
// Calls fn(TypeTag<T>{}) with T the storage type of `dtype`; `arg_name` names the tensor the
// dtype came from in the TypeError raised for anything else. Usage:
//   DispatchFloating(x.dtype(), "x", [&](auto tag) {
//     using T = typename decltype(tag)::type;
//     ...
//   });
template <typename Fn>
void DispatchFloating(DLDataType dtype, const char* arg_name, Fn&& fn) {
#define SCALE_LIB_DISPATCH_CASE(dl_dtype, ctype, name) \
  if (dtype == dl_dtype) return fn(TypeTag<ctype>{});
  SCALE_LIB_FOR_EACH_FLOATING_DTYPE(SCALE_LIB_DISPATCH_CASE)
#undef SCALE_LIB_DISPATCH_CASE
  TVM_FFI_THROW(TypeError) << arg_name << " has unsupported dtype " << detail::DTypeString(dtype)
                           << "; expected one of " << FloatingDTypeNames();
}
// [dispatch.end]

// ---------------------------------------------------------------------------------------------
// Tensor data
// ---------------------------------------------------------------------------------------------
// DLPack producers may describe a view as (data, byte_offset); TensorView::data_ptr() returns
// `data` alone. Every kernel reads and writes through DataPtr so views stay correct.
template <typename T>
T* DataPtr(const ffi::TensorView& t) {
  return reinterpret_cast<T*>(static_cast<char*>(t.data_ptr()) + t.byte_offset());
}

// For messages of your own: "(2, 3)", "float32", "cuda:0".
using detail::DeviceString;
using detail::DTypeString;
using detail::ShapeString;
using detail::StridesString;

// ---------------------------------------------------------------------------------------------
// Argument checks. Each raises a TypeError/ValueError naming the offending argument(s) and is a
// single statement in any position (if/else bodies included).
// ---------------------------------------------------------------------------------------------
// [check_macros.begin]
// A user-error check with a plain message (TVM_FFI_CHECK would prefix "Check failed: ..."):
//   SCALE_LIB_CHECK(eps >= 0, ValueError) << "eps must be non-negative; got " << eps;
#define SCALE_LIB_CHECK(cond, ErrorKind) \
  if (cond) {                            \
  } else                                 \
    TVM_FFI_THROW(ErrorKind)

#define CHECK_FLOATING(t)                                                                    \
  do {                                                                                       \
    if (!::scale_lib::IsFloatingDType((t).dtype())) {                                        \
      TVM_FFI_THROW(TypeError) << #t " has unsupported dtype "                               \
                               << ::scale_lib::detail::DTypeString((t).dtype())              \
                               << "; expected one of " << ::scale_lib::FloatingDTypeNames(); \
    }                                                                                        \
  } while (0)

#define CHECK_CONTIGUOUS(t)                                                                        \
  do {                                                                                             \
    if (!(t).IsContiguous()) {                                                                     \
      TVM_FFI_THROW(ValueError) << #t " must be contiguous (row-major); got shape "                \
                                << ::scale_lib::detail::ShapeString(t) << " with element strides " \
                                << ::scale_lib::detail::StridesString(t)                           \
                                << ". Pass a contiguous copy";                                     \
    }                                                                                              \
  } while (0)

#define CHECK_SAME_DTYPE(a, b)                                                             \
  do {                                                                                     \
    if ((a).dtype() != (b).dtype()) {                                                      \
      TVM_FFI_THROW(TypeError) << #a " and " #b " must have the same dtype; got "          \
                               << ::scale_lib::detail::DTypeString((a).dtype()) << " and " \
                               << ::scale_lib::detail::DTypeString((b).dtype());           \
    }                                                                                      \
  } while (0)

#define CHECK_SAME_SHAPE(a, b)                                                     \
  do {                                                                             \
    if (!::scale_lib::detail::SameShape((a), (b))) {                               \
      TVM_FFI_THROW(ValueError) << #a " and " #b " must have the same shape; got " \
                                << ::scale_lib::detail::ShapeString(a) << " and "  \
                                << ::scale_lib::detail::ShapeString(b);            \
    }                                                                              \
  } while (0)

#define CHECK_SAME_DEVICE(a, b)                                                               \
  do {                                                                                        \
    if (!::scale_lib::detail::SameDevice((a).device(), (b).device())) {                       \
      TVM_FFI_THROW(ValueError) << #a " and " #b " must be on the same device; got "          \
                                << ::scale_lib::detail::DeviceString((a).device()) << " and " \
                                << ::scale_lib::detail::DeviceString((b).device());           \
    }                                                                                         \
  } while (0)

// `a` is like `b`: the same dtype, shape and device (each checked with its own message).
#define CHECK_LIKE(a, b)     \
  do {                       \
    CHECK_SAME_DTYPE(a, b);  \
    CHECK_SAME_SHAPE(a, b);  \
    CHECK_SAME_DEVICE(a, b); \
  } while (0)

#define CHECK_DTYPE(t, expected)                                                         \
  do {                                                                                   \
    if ((t).dtype() != (expected)) {                                                     \
      TVM_FFI_THROW(TypeError) << #t " must have dtype "                                 \
                               << ::scale_lib::detail::DTypeString(expected) << "; got " \
                               << ::scale_lib::detail::DTypeString((t).dtype());         \
    }                                                                                    \
  } while (0)

#define CHECK_MIN_NDIM(t, n)                                                                 \
  do {                                                                                       \
    if ((t).ndim() < (n)) {                                                                  \
      TVM_FFI_THROW(ValueError) << #t " must have at least " << (n) << " dimension(s); got " \
                                << "shape " << ::scale_lib::detail::ShapeString(t);          \
    }                                                                                        \
  } while (0)
// [check_macros.end]

// ---------------------------------------------------------------------------------------------
// Device routing and export (bindings/)
// ---------------------------------------------------------------------------------------------
#if defined(SCALE_LIB_WITH_CUDA)
void CheckCudaDriver();  // kernels/cuda_driver.cu: RuntimeError if the driver is too old
#define SCALE_LIB_CUDA_OR_THROW(cuda_call, arg_name) \
  do {                                               \
    ::scale_lib::CheckCudaDriver();                  \
    cuda_call;                                       \
  } while (0)
#else
#define SCALE_LIB_CUDA_OR_THROW(cuda_call, arg_name) \
  ::scale_lib::detail::ThrowBuiltWithoutCuda(arg_name)
#endif

// The CUDA call of an op whose CUDA kernels are written in Triton (docs/triton.md): compiled
// only when the build had Triton (SCALE_LIB_TRITON); otherwise a CUDA tensor raises a ValueError
// naming the op. Use it as the cuda_call of SCALE_LIB_ROUTE_BY_DEVICE.
#if defined(SCALE_LIB_WITH_TRITON)
#define SCALE_LIB_TRITON_CALL(cuda_call, op_name) cuda_call
#else
#define SCALE_LIB_TRITON_CALL(cuda_call, op_name) \
  ::scale_lib::detail::ThrowBuiltWithoutTriton(op_name)
#endif

// [route.begin]
// Runs `cpu_call` or `cuda_call` by the device of tensor `t`. In a CPU-only build the CUDA call
// is not compiled in, and a CUDA tensor raises a ValueError instead. `cpu_call` runs in the
// library's floating-point mode (float_env.h), whatever the calling thread's. For functions that
// return a value, write the calls as `return F(...)`.
#define SCALE_LIB_ROUTE_BY_DEVICE(t, cpu_call, cuda_call)               \
  do {                                                                  \
    if (::scale_lib::detail::CheckSupportedDevice((t), #t) == kDLCPU) { \
      const ::scale_lib::IeeeSubnormals ieee_mode_;                     \
      cpu_call;                                                         \
    } else {                                                            \
      SCALE_LIB_CUDA_OR_THROW(cuda_call, #t);                           \
    }                                                                   \
  } while (0)

// For an op with only a CUDA implementation: a CPU tensor raises a ValueError saying so (and a
// CUDA tensor in a CPU-only build the same error as above).
#define SCALE_LIB_ROUTE_CUDA_ONLY(t, cuda_call)                         \
  do {                                                                  \
    if (::scale_lib::detail::CheckSupportedDevice((t), #t) == kDLCPU) { \
      ::scale_lib::detail::ThrowCudaOnly(#t);                           \
    } else {                                                            \
      SCALE_LIB_CUDA_OR_THROW(cuda_call, #t);                           \
    }                                                                   \
  } while (0)
// [route.end]

// [export_macro.begin]
// Exports `fn` as `name` with its argument names, outputs first, and the output=input pairs
// that may be the very same array (in-place use):
//   SCALE_LIB_EXPORT(scale, scale_lib::Scale, "out", "x, factor", "out=x");
// Before `fn` runs, every tensor argument is checked, so every op gets these for free: none may
// be a null data pointer with elements (a freed storage), and no output may share an element
// with another argument except as the very same array where the last list allows it. The names
// must cover the function's arguments (checked at compile time); they are exported as its
// docstring, beside the type schema TVM-FFI exports (see docs/adding_an_op.md).
#define SCALE_LIB_EXPORT(name, fn, outputs, inputs, in_place)                                 \
  namespace scale_lib::detail::abi {                                                          \
  inline constexpr Abi name{#name, outputs, inputs, in_place};                                \
  }                                                                                           \
  TVM_FFI_DLL_EXPORT_TYPED_FUNC(                                                              \
      name, (::scale_lib::detail::CheckedExport<::scale_lib::detail::abi::name, &fn>::Call)); \
  TVM_FFI_DLL_EXPORT_TYPED_FUNC_DOC(name,                                                     \
                                    ::scale_lib::detail::AbiDoc<::scale_lib::detail::abi::name>())
// [export_macro.end]

// ---------------------------------------------------------------------------------------------
// CUDA: device guard, stream, launch check (device code only)
// ---------------------------------------------------------------------------------------------
#if defined(__CUDACC__)
// [cuda_helpers.begin]
// Device guard: ffi::CUDADeviceGuard guard(x.device().device_id) makes the tensor's GPU current
// for the launch and restores the caller's after (RAII, from tvm/ffi/extra/cuda/device_guard.h).

// The stream the calling framework is using on `device` (torch's current stream, XLA's stream,
// or one set with tvm_ffi.use_raw_stream); the legacy default stream if none was set.
inline cudaStream_t GetCudaStream(DLDevice device) {
  return static_cast<cudaStream_t>(TVMFFIEnvGetStream(device.device_type, device.device_id));
}

// Raises a RuntimeError (with CUDA's name for the error) if the last launch failed.
#define CHECK_CUDA_LAUNCH() TVM_FFI_CHECK_CUDA_ERROR(cudaGetLastError())

// Before a launch through TVM-FFI's CUBIN launcher (embedded CUBIN and Triton kernels). Built
// with a CUDA runtime older than 12.8, the launcher uses the driver API, which launches in the
// calling thread's current context, and a thread that has made no CUDA runtime call yet (PyTorch's
// autograd worker, a new Python thread) has none: CUDA_ERROR_INVALID_CONTEXT. cudaSetDevice makes
// the device's primary context current (CUDA 12+). The runtime API (12.8+) needs nothing.
inline void MakeContextCurrent(int device_id) {
#if CUDART_VERSION < 12080
  TVM_FFI_CHECK_CUDA_ERROR(cudaSetDevice(device_id));
#else
  (void)device_id;
#endif
}
// [cuda_helpers.end]
#endif  // __CUDACC__

// ---------------------------------------------------------------------------------------------
// Allocation, for ops whose output size depends on the data or that need scratch memory
// ---------------------------------------------------------------------------------------------
// [alloc.begin]
// Whether the calling framework published its allocator for this call: PyTorch and Paddle do,
// and so does jax-tvm-ffi for targets registered with a workspace. NumPy and CuPy do not.
inline bool HasFrameworkAllocator() {
  return TVMFFIEnvGetDLPackManagedTensorAllocator() != nullptr;
}

// A tensor from the calling framework's allocator (its caching allocator, memory accounting and
// stream semantics apply); ValueError if the caller published none.
inline ffi::Tensor AllocFromFramework(ffi::ShapeView shape, DLDataType dtype, DLDevice device) {
  SCALE_LIB_CHECK(HasFrameworkAllocator(), ValueError)
      << "this call needs the calling framework's allocator, and none was published";
  return ffi::Tensor::FromEnvAlloc(TVMFFIEnvTensorAlloc, shape, dtype, device);
}

// Host memory the library owns, for results returned to callers without an allocator (NumPy).
// The deleter is code in this library: a tensor made here must not outlive the library. The
// Python package loads the library for the life of the process, so none does.
struct HostMallocAlloc {
  void AllocData(DLTensor* t) {
    t->data = std::malloc(std::max<size_t>(ffi::GetDataSize(*t), 1));
    if (t->data == nullptr) TVM_FFI_THROW(RuntimeError) << "out of host memory";
  }
  void FreeData(DLTensor* t) { std::free(t->data); }
};

inline ffi::Tensor AllocHostResult(ffi::ShapeView shape, DLDataType dtype) {
  const DLDevice cpu{kDLCPU, 0};
  if (HasFrameworkAllocator())
    return ffi::Tensor::FromEnvAlloc(TVMFFIEnvTensorAlloc, shape, dtype, cpu);
  return ffi::Tensor::FromNDAlloc(HostMallocAlloc{}, shape, dtype, cpu);
}
// [alloc.end]

#if defined(__CUDACC__)
// Device memory the library owns (cudaMalloc), for results returned to callers that publish no
// allocator (CuPy). Same lifetime rule as HostMallocAlloc.
struct CudaMallocAlloc {
  void AllocData(DLTensor* t) {
    TVM_FFI_CHECK_CUDA_ERROR(cudaMalloc(&t->data, std::max<size_t>(ffi::GetDataSize(*t), 1)));
  }
  void FreeData(DLTensor* t) { cudaFree(t->data); }  // no throw: runs in a destructor
};

inline ffi::Tensor AllocCudaResult(ffi::ShapeView shape, DLDataType dtype, DLDevice device) {
  if (HasFrameworkAllocator())
    return ffi::Tensor::FromEnvAlloc(TVMFFIEnvTensorAlloc, shape, dtype, device);
  return ffi::Tensor::FromNDAlloc(CudaMallocAlloc{}, shape, dtype, device);
}
#endif  // __CUDACC__

}  // namespace scale_lib

#endif  // SCALE_LIB_TVM_FFI_UTILS_H_
