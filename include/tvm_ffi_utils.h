// Shared plumbing for every scale_lib kernel: argument checks, dtype constants and dispatch,
// device routing, CUDA device guard, stream lookup and launch checks.
//
// Kernels and bindings include this header and nothing else from TVM-FFI, so the contract a
// kernel author works against lives in one file.
#ifndef SCALE_LIB_TVM_FFI_UTILS_H_
#define SCALE_LIB_TVM_FFI_UTILS_H_

#include <tvm/ffi/container/tensor.h>
#include <tvm/ffi/dtype.h>
#include <tvm/ffi/error.h>
#include <tvm/ffi/extra/c_env_api.h>
#include <tvm/ffi/function.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <sstream>
#include <string>

#if defined(__CUDACC__)
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <tvm/ffi/extra/cuda/base.h>
#include <tvm/ffi/extra/cuda/device_guard.h>
#endif

namespace scale_lib {

namespace ffi = tvm::ffi;

// ---------------------------------------------------------------------------------------------
// Dtypes
// ---------------------------------------------------------------------------------------------
// [dtypes.begin]
inline constexpr DLDataType kFloat16{kDLFloat, 16, 1};
inline constexpr DLDataType kBFloat16{kDLBfloat, 16, 1};
inline constexpr DLDataType kFloat32{kDLFloat, 32, 1};
inline constexpr DLDataType kFloat64{kDLFloat, 64, 1};
inline constexpr DLDataType kInt64{kDLInt, 64, 1};
inline constexpr DLDataType kUInt8{kDLUInt, 8, 1};

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
// Adding a dtype to every floating-point op is one line here.
#define SCALE_LIB_FOR_EACH_FLOATING_DTYPE(X)                     \
  X(::scale_lib::kFloat16, ::scale_lib::float16_t, "float16")    \
  X(::scale_lib::kBFloat16, ::scale_lib::bfloat16_t, "bfloat16") \
  X(::scale_lib::kFloat32, float, "float32")                     \
  X(::scale_lib::kFloat64, double, "float64")
// [dtypes.end]

// Never throws, so it is safe inside an error message: TVM-FFI's own formatter throws for codes it
// does not know (complex, for one), and a throw while building an error aborts the process.
inline std::string DTypeString(DLDataType dtype) {
  if (dtype.code == kDLComplex) return "complex" + std::to_string(dtype.bits);
  try {
    return std::string(ffi::DLDataTypeToString(dtype));
  } catch (...) {
    return "dtype(code=" + std::to_string(dtype.code) + ", bits=" + std::to_string(dtype.bits) +
           ", lanes=" + std::to_string(dtype.lanes) + ")";
  }
}

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
  TVM_FFI_THROW(TypeError) << arg_name << " has unsupported dtype " << DTypeString(dtype)
                           << "; expected one of " << FloatingDTypeNames();
}
// [dispatch.end]

// ---------------------------------------------------------------------------------------------
// Tensor access
// ---------------------------------------------------------------------------------------------
// DLPack producers may describe a view as (data, byte_offset); TensorView::data_ptr() returns
// `data` alone. Every kernel reads and writes through these helpers so views stay correct.
template <typename T>
T* DataPtr(const ffi::TensorView& t) {
  return reinterpret_cast<T*>(static_cast<char*>(t.data_ptr()) + t.byte_offset());
}

inline std::string ShapeString(const ffi::TensorView& t) {
  std::ostringstream os;
  os << '(';
  for (int32_t i = 0; i < t.ndim(); ++i) os << (i ? ", " : "") << t.size(i);
  os << (t.ndim() == 1 ? ",)" : ")");
  return os.str();
}

inline std::string StridesString(const ffi::TensorView& t) {
  std::ostringstream os;
  os << '(';
  for (int32_t i = 0; i < t.ndim(); ++i) os << (i ? ", " : "") << t.stride(i);
  os << (t.ndim() == 1 ? ",)" : ")");
  return os.str();
}

inline std::string DeviceString(DLDevice device) {
  std::ostringstream os;
  switch (device.device_type) {
    case kDLCPU:
      os << "cpu";
      break;
    case kDLCUDA:
      os << "cuda";
      break;
    case kDLCUDAHost:
      os << "cuda_host";
      break;
    case kDLCUDAManaged:
      os << "cuda_managed";
      break;
    case kDLROCM:
      os << "rocm";
      break;
    case kDLMetal:
      os << "metal";
      break;
    default:
      os << "device_type_" << static_cast<int>(device.device_type);
  }
  os << ':' << device.device_id;
  return os.str();
}

inline bool SameShape(const ffi::TensorView& a, const ffi::TensorView& b) {
  if (a.ndim() != b.ndim()) return false;
  for (int32_t i = 0; i < a.ndim(); ++i) {
    if (a.size(i) != b.size(i)) return false;
  }
  return true;
}

// Bytes from a tensor's first element to just past its last (strides must be non-negative,
// which every op checks first); 0 for an empty tensor.
inline int64_t SpanBytes(const ffi::TensorView& t) {
  if (t.numel() == 0) return 0;
  int64_t last = 0;
  for (int32_t i = 0; i < t.ndim(); ++i) last += (t.size(i) - 1) * t.stride(i);
  return static_cast<int64_t>(ffi::GetDataSize(last + 1, t.dtype()));
}

inline bool SameLayout(const ffi::TensorView& a, const ffi::TensorView& b) {
  if (!SameShape(a, b)) return false;
  for (int32_t i = 0; i < a.ndim(); ++i) {
    if (a.size(i) > 1 && a.stride(i) != b.stride(i)) return false;
  }
  return true;
}

// True when two tensors' memory overlaps other than as the very same array (same address, same
// layout: in-place use, which every op supports). A kernel could then read an element another
// thread already overwrote.
inline bool PartiallyOverlaps(const ffi::TensorView& a, const ffi::TensorView& b) {
  const auto* a_begin = DataPtr<const char>(a);
  const auto* b_begin = DataPtr<const char>(b);
  const int64_t a_bytes = SpanBytes(a);
  const int64_t b_bytes = SpanBytes(b);
  if (a_bytes == 0 || b_bytes == 0) return false;
  if (a_begin == b_begin && a.dtype() == b.dtype() && SameLayout(a, b)) return false;
  return a_begin < b_begin + b_bytes && b_begin < a_begin + a_bytes;
}

// ---------------------------------------------------------------------------------------------
// Argument checks. Each raises a TypeError/ValueError naming the offending argument(s) and is a
// single statement in any position (if/else bodies included).
// ---------------------------------------------------------------------------------------------
// [check_macros.begin]
#define CHECK_FLOATING(t)                                                                       \
  do {                                                                                          \
    if (!::scale_lib::IsFloatingDType((t).dtype())) {                                           \
      TVM_FFI_THROW(TypeError) << #t " has unsupported dtype "                                  \
                               << ::scale_lib::DTypeString((t).dtype()) << "; expected one of " \
                               << ::scale_lib::FloatingDTypeNames();                            \
    }                                                                                           \
  } while (0)

#define CHECK_CONTIGUOUS(t)                                                                     \
  do {                                                                                          \
    if (!(t).IsContiguous()) {                                                                  \
      TVM_FFI_THROW(ValueError) << #t " must be contiguous (row-major); got shape "             \
                                << ::scale_lib::ShapeString(t) << " with element strides "      \
                                << ::scale_lib::StridesString(t) << ". Pass a contiguous copy"; \
    }                                                                                           \
  } while (0)

#define CHECK_SAME_DTYPE(a, b)                                                     \
  do {                                                                             \
    if ((a).dtype() != (b).dtype()) {                                              \
      TVM_FFI_THROW(TypeError) << #a " and " #b " must have the same dtype; got "  \
                               << ::scale_lib::DTypeString((a).dtype()) << " and " \
                               << ::scale_lib::DTypeString((b).dtype());           \
    }                                                                              \
  } while (0)

#define CHECK_SAME_SHAPE(a, b)                                                     \
  do {                                                                             \
    if (!::scale_lib::SameShape((a), (b))) {                                       \
      TVM_FFI_THROW(ValueError) << #a " and " #b " must have the same shape; got " \
                                << ::scale_lib::ShapeString(a) << " and "          \
                                << ::scale_lib::ShapeString(b);                    \
    }                                                                              \
  } while (0)

#define CHECK_SAME_DEVICE(a, b)                                                       \
  do {                                                                                \
    if ((a).device().device_type != (b).device().device_type ||                       \
        (a).device().device_id != (b).device().device_id) {                           \
      TVM_FFI_THROW(ValueError) << #a " and " #b " must be on the same device; got "  \
                                << ::scale_lib::DeviceString((a).device()) << " and " \
                                << ::scale_lib::DeviceString((b).device());           \
    }                                                                                 \
  } while (0)

// `a` is like `b`: the same dtype, shape and device (each checked with its own message).
#define CHECK_LIKE(a, b)     \
  do {                       \
    CHECK_SAME_DTYPE(a, b);  \
    CHECK_SAME_SHAPE(a, b);  \
    CHECK_SAME_DEVICE(a, b); \
  } while (0)

#define CHECK_DTYPE(t, expected)                                                               \
  do {                                                                                         \
    if ((t).dtype() != (expected)) {                                                           \
      TVM_FFI_THROW(TypeError) << #t " must have dtype " << ::scale_lib::DTypeString(expected) \
                               << "; got " << ::scale_lib::DTypeString((t).dtype());           \
    }                                                                                          \
  } while (0)

#define CHECK_MIN_NDIM(t, n)                                                                 \
  do {                                                                                       \
    if ((t).ndim() < (n)) {                                                                  \
      TVM_FFI_THROW(ValueError) << #t " must have at least " << (n) << " dimension(s); got " \
                                << "shape " << ::scale_lib::ShapeString(t);                  \
    }                                                                                        \
  } while (0)

#define CHECK_NO_PARTIAL_OVERLAP(a, b)                                                         \
  do {                                                                                         \
    if (::scale_lib::PartiallyOverlaps((a), (b))) {                                            \
      TVM_FFI_THROW(ValueError) << #a " and " #b " overlap in memory without being the same "  \
                                << "array; pass the same array for in-place use, or disjoint " \
                                << "arrays";                                                   \
    }                                                                                          \
  } while (0)
// [check_macros.end]

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
  TVM_FFI_CHECK(HasFrameworkAllocator(), ValueError)
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

// ---------------------------------------------------------------------------------------------
// Device routing (used by bindings/)
// ---------------------------------------------------------------------------------------------
[[noreturn]] inline void ThrowBuiltWithoutCuda(const char* arg_name) {
  TVM_FFI_THROW(ValueError) << arg_name
                            << " is a CUDA tensor, but scale_lib was built without CUDA support. "
                               "Rebuild with the CUDA toolkit (nvcc) installed, or pass a CPU "
                               "tensor";
  TVM_FFI_UNREACHABLE();  // the error is thrown as the statement above ends
}

// The device type of `t` if scale_lib has kernels for it; a ValueError otherwise.
inline DLDeviceType CheckSupportedDevice(const ffi::TensorView& t, const char* arg_name) {
  const DLDeviceType type = t.device().device_type;
  if (type != kDLCPU && type != kDLCUDA) {
    TVM_FFI_THROW(ValueError) << arg_name << " is on unsupported device "
                              << DeviceString(t.device()) << "; scale_lib supports cpu and cuda";
  }
  return type;
}

#if defined(SCALE_LIB_WITH_CUDA)
void CheckCudaDriver();  // kernels/cuda_driver.cu: RuntimeError if the driver is too old
#define SCALE_LIB_CUDA_OR_THROW(cuda_call, arg_name) \
  do {                                               \
    ::scale_lib::CheckCudaDriver();                  \
    cuda_call;                                       \
  } while (0)
#else
#define SCALE_LIB_CUDA_OR_THROW(cuda_call, arg_name) ::scale_lib::ThrowBuiltWithoutCuda(arg_name)
#endif

// [route.begin]
// Runs `cpu_call` or `cuda_call` by the device of tensor `t`. In a CPU-only build the CUDA call
// is not compiled in, and a CUDA tensor raises a ValueError instead. For functions that return
// a value, write the calls as `return F(...)`.
#define SCALE_LIB_ROUTE_BY_DEVICE(t, cpu_call, cuda_call)       \
  do {                                                          \
    if (::scale_lib::CheckSupportedDevice((t), #t) == kDLCPU) { \
      cpu_call;                                                 \
    } else {                                                    \
      SCALE_LIB_CUDA_OR_THROW(cuda_call, #t);                   \
    }                                                           \
  } while (0)
// [route.end]

// ---------------------------------------------------------------------------------------------
// CUDA helpers (device code only)
// ---------------------------------------------------------------------------------------------
#if defined(__CUDACC__)
// [cuda_helpers.begin]
// RAII: makes the tensor's GPU current for the kernel launch and restores the caller's after.
using CUDADeviceGuard = ffi::CUDADeviceGuard;

// The stream the calling framework is using on `device` (torch's current stream, XLA's stream,
// or one set with tvm_ffi.use_raw_stream); the legacy default stream if none was set.
inline cudaStream_t GetCudaStream(DLDevice device) {
  return static_cast<cudaStream_t>(TVMFFIEnvGetStream(device.device_type, device.device_id));
}

// Raises a RuntimeError (with CUDA's name for the error) if the last launch failed.
#define CHECK_CUDA_LAUNCH() TVM_FFI_CHECK_CUDA_ERROR(cudaGetLastError())
// [cuda_helpers.end]

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
