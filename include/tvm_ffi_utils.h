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
//                gpu::Launch (kernels/cuda_float.cuh) and the shared launchers check their own
// A binding (bindings/<op>_binding.cc) routes by device with SCALE_LIB_ROUTE_BY_DEVICE, or
// SCALE_LIB_ROUTE_CUDA_ONLY, and is exported with SCALE_LIB_EXPORT, which checks every tensor
// argument of every op before it runs: no null data with elements, and outputs disjoint from
// the other arguments (or the very same array, where the op declares in-place use).
// User errors are TypeError/ValueError naming the argument: TVM_FFI_THROW(ValueError) << ...,
// or SCALE_LIB_CHECK(cond, ValueError) << ...; TVM_FFI_ICHECK is for broken internal invariants.
// Ops that allocate their output use the allocation helpers at the end of this file.
//
// This header includes the TVM-FFI headers the contract needs. A file that uses more of TVM-FFI
// (the CUBIN launcher, containers) includes those headers itself.
//
// It reads top-down, each helper before the macro or function that uses it: message formatting,
// dtypes and dispatch, tensor data, argument checks, device routing, export, CUDA helpers,
// allocation. What the macros expand to (message formatting, the comparisons behind the checks,
// the routing errors, the memory-overlap test and the checks SCALE_LIB_EXPORT runs) is in
// namespace scale_lib::detail at the start of its section: not the author's API (bar the
// formatters, re-exported for messages of your own), and you need not read it.
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
#include <sstream>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

#if defined(__CUDACC__)
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <tvm/ffi/extra/cuda/base.h>
#include <tvm/ffi/extra/cuda/device_guard.h>
#endif

#include "float_env.h"

namespace scale_lib {

namespace ffi = tvm::ffi;

// ---------------------------------------------------------------------------------------------
// Message formatting, for the error messages of DispatchFloating, the checks, the routing and the
// export checks below. None of these throws: a throw while an error message is being built aborts
// the process.
// ---------------------------------------------------------------------------------------------
namespace detail {

// TVM-FFI's own formatter throws for codes it does not know (complex, for one).
inline std::string DTypeString(DLDataType dtype) {
  if (dtype.code == kDLComplex) return "complex" + std::to_string(dtype.bits);
  try {
    return std::string(ffi::DLDataTypeToString(dtype));
  } catch (...) {
    return "dtype(code=" + std::to_string(dtype.code) + ", bits=" + std::to_string(dtype.bits) +
           ", lanes=" + std::to_string(dtype.lanes) + ")";
  }
}

// A shape or a stride tuple as Python writes it: (), (3,), (2, 3).
inline std::string TupleString(const int64_t* values, int32_t n) {
  std::ostringstream os;
  os << '(';
  for (int32_t i = 0; i < n; ++i) os << (i ? ", " : "") << values[i];
  os << (n == 1 ? ",)" : ")");
  return os.str();
}

inline std::string ShapeString(const ffi::TensorView& t) {
  return TupleString(t.shape().data(), t.ndim());
}

inline std::string StridesString(const ffi::TensorView& t) {
  return TupleString(t.ndim() == 0 ? nullptr : t.strides().data(), t.ndim());
}

inline std::string DeviceString(DLDevice device) {
  const char* name = nullptr;
  switch (device.device_type) {
    case kDLCPU:
      name = "cpu";
      break;
    case kDLCUDA:
      name = "cuda";
      break;
    case kDLCUDAHost:
      name = "cuda_host";
      break;
    case kDLCUDAManaged:
      name = "cuda_managed";
      break;
    case kDLROCM:
      name = "rocm";
      break;
    case kDLMetal:
      name = "metal";
      break;
    case kDLExtDev:
      name = "meta";  // PyTorch's meta device exports as kDLExtDev
      break;
    default:
      return "device_type_" + std::to_string(static_cast<int>(device.device_type)) + ":" +
             std::to_string(device.device_id);
  }
  return std::string(name) + ":" + std::to_string(device.device_id);
}

}  // namespace detail

// For messages of your own: "(2, 3)", "float32", "cuda:0".
using detail::DeviceString;
using detail::DTypeString;
using detail::ShapeString;
using detail::StridesString;

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

// ---------------------------------------------------------------------------------------------
// Argument checks. Each raises a TypeError/ValueError naming the offending argument(s) and is a
// single statement in any position (if/else bodies included).
// ---------------------------------------------------------------------------------------------
namespace detail {

// The comparisons behind CHECK_SAME_SHAPE and CHECK_SAME_DEVICE (and the export checks below).
inline bool SameShape(const ffi::TensorView& a, const ffi::TensorView& b) {
  if (a.ndim() != b.ndim()) return false;
  for (int32_t i = 0; i < a.ndim(); ++i) {
    if (a.size(i) != b.size(i)) return false;
  }
  return true;
}

inline bool SameDevice(DLDevice a, DLDevice b) {
  return a.device_type == b.device_type && a.device_id == b.device_id;
}

}  // namespace detail

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
// Device routing (bindings/)
// ---------------------------------------------------------------------------------------------
namespace detail {

// The errors the routing macros below raise, as [[noreturn]] functions: a macro's branch stays
// one call, and a route whose calls are `return F(...)` needs no return after it.
[[noreturn]] inline void ThrowBuiltWithoutCuda(const char* arg_name) {
  TVM_FFI_THROW(ValueError) << arg_name
                            << " is a CUDA tensor, but scale_lib was built without CUDA support. "
                               "Rebuild with the CUDA toolkit (nvcc) installed, or pass a CPU "
                               "tensor";
  TVM_FFI_UNREACHABLE();
}

[[noreturn]] inline void ThrowBuiltWithoutTriton(const char* op_name) {
  TVM_FFI_THROW(ValueError) << op_name
                            << " has no CUDA kernel in this build of scale_lib: its CUDA kernel is "
                               "written in Triton, and the library was built without Triton. "
                               "Rebuild with triton installed in the build environment "
                               "(SCALE_LIB_TRITON=ON), or pass a CPU tensor";
  TVM_FFI_UNREACHABLE();
}

[[noreturn]] inline void ThrowCudaOnly(const char* arg_name) {
  TVM_FFI_THROW(ValueError) << arg_name
                            << " is a CPU tensor, but this op has only a CUDA implementation; "
                               "pass a CUDA tensor";
  TVM_FFI_UNREACHABLE();
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

}  // namespace detail

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

// ---------------------------------------------------------------------------------------------
// Export (bindings/). SCALE_LIB_EXPORT, at the end of this section, checks every tensor argument
// before the exported function runs: first the memory-overlap test, then those checks.
// ---------------------------------------------------------------------------------------------
namespace detail {

// Memory overlap, judged by the bytes of the elements (not the bytes between the first and the
// last element), so that interleaved views of one buffer, such as columns 0-3 and 4-7 of a
// (rows, 8) array, are disjoint.

// The bytes a tensor's elements occupy, as `count` runs of `run` bytes, `step` bytes apart from
// `begin`. Exact for every tensor whose elements form evenly spaced runs of contiguous elements
// (contiguous tensors, rows of a wider array, any such stack of rows); for other layouts
// (transposed, broadcast, negative strides) the one run from the lowest to the highest byte, which
// may only overstate the overlap.
struct Footprint {
  intptr_t begin;
  int64_t run;
  int64_t step;
  int64_t count;
};

inline Footprint FootprintOf(const ffi::TensorView& t) {
  const int64_t item = static_cast<int64_t>((t.dtype().bits * t.dtype().lanes + 7) / 8);
  const intptr_t base = reinterpret_cast<intptr_t>(t.data_ptr()) + t.byte_offset();
  // Collapse the dimensions, innermost first, into contiguous runs and a run stride.
  int64_t run_items = 1;  // elements per contiguous run
  int64_t runs = 1;  // number of runs
  int64_t run_stride = 0;  // elements between runs
  bool regular = true;
  for (int32_t i = t.ndim() - 1; i >= 0 && regular; --i) {
    const int64_t size = t.size(i);
    const int64_t stride = t.stride(i);
    if (size == 1) continue;
    if (runs == 1 && stride == run_items) {
      run_items *= size;  // still contiguous
    } else if (runs == 1) {
      runs = size;
      run_stride = stride;
      regular = stride >= run_items;  // runs must not interleave or run backwards
    } else {
      regular = stride == run_stride * runs;
      runs *= size;
    }
  }
  if (regular) return Footprint{base, run_items * item, run_stride * item, runs};
  int64_t low = 0;
  int64_t high = 0;
  for (int32_t i = 0; i < t.ndim(); ++i) {
    const int64_t reach = (t.size(i) - 1) * t.stride(i);
    (reach < 0 ? low : high) += reach;
  }
  return Footprint{base + low * item, (high - low + 1) * item, 0, 1};
}

inline int64_t FloorDiv(int64_t a, int64_t b) {  // b > 0
  return a >= 0 ? a / b : -((-a + b - 1) / b);
}

// Whether a run of `a` and a run of `b` share a byte.
inline bool FootprintsIntersect(const Footprint& a, const Footprint& b) {
  const intptr_t a_end = a.begin + (a.count - 1) * a.step + a.run;
  const intptr_t b_end = b.begin + (b.count - 1) * b.step + b.run;
  if (a_end <= b.begin || b_end <= a.begin) return false;  // the spans are apart
  if (a.count == 1 && b.count == 1) return true;
  if (a.count > 1 && b.count > 1 && a.step == b.step) {
    // Run i of a and run j of b meet when -b.run < d + k * step < a.run, with d the distance
    // from a's first run to b's and k = j - i in [-(a.count - 1), b.count - 1].
    const int64_t d = b.begin - a.begin;
    const int64_t s = a.step;
    const int64_t k = std::max(FloorDiv(-b.run - d, s) + 1, -(a.count - 1));
    return k <= b.count - 1 && d + k * s < a.run;
  }
  // Different steps: walk both sorted lists of runs, skipping runs that end before the other's
  // current run starts.
  int64_t i = 0;
  int64_t j = 0;
  while (i < a.count && j < b.count) {
    const intptr_t a0 = a.begin + i * a.step;
    const intptr_t b0 = b.begin + j * b.step;
    if (a0 + a.run <= b0) {
      i = a.count == 1 ? a.count : std::max(i + 1, FloorDiv(b0 - a.begin - a.run, a.step) + 1);
    } else if (b0 + b.run <= a0) {
      j = b.count == 1 ? b.count : std::max(j + 1, FloorDiv(a0 - b.begin - b.run, b.step) + 1);
    } else {
      return true;
    }
  }
  return false;
}

inline bool SameLayout(const ffi::TensorView& a, const ffi::TensorView& b) {
  if (!SameShape(a, b)) return false;
  for (int32_t i = 0; i < a.ndim(); ++i) {
    if (a.size(i) > 1 && a.stride(i) != b.stride(i)) return false;
  }
  return true;
}

// The very same array: same first element, dtype and layout (in-place use).
inline bool SameArray(const ffi::TensorView& a, const ffi::TensorView& b) {
  return a.data_ptr() != nullptr && SameDevice(a.device(), b.device()) &&
         static_cast<const char*>(a.data_ptr()) + a.byte_offset() ==
             static_cast<const char*>(b.data_ptr()) + b.byte_offset() &&
         a.dtype() == b.dtype() && SameLayout(a, b);
}

// Whether any element of `a` shares a byte with an element of `b`.
inline bool Overlaps(const ffi::TensorView& a, const ffi::TensorView& b) {
  if (a.numel() == 0 || b.numel() == 0 || a.data_ptr() == nullptr || b.data_ptr() == nullptr)
    return false;
  if (!SameDevice(a.device(), b.device())) return false;
  return FootprintsIntersect(FootprintOf(a), FootprintOf(b));
}

// The checks SCALE_LIB_EXPORT runs before every exported function, on all of its tensors.

// One exported function's argument names, as written in its SCALE_LIB_EXPORT.
struct Abi {
  const char* name;  // the exported name
  const char* outputs;  // "out": the arguments the function writes, which come first
  const char* inputs;  // "x, factor": the rest
  const char* in_place;  // "out=x": outputs that may be the very same array as an input
};

// The number of comma-separated names in `list` ("" has none).
constexpr int CountNames(std::string_view list) {
  int names = 0;
  bool in_name = false;
  for (char c : list) {
    if (c == ',') {
      in_name = false;
    } else if (c != ' ' && !in_name) {
      in_name = true;
      ++names;
    }
  }
  return names;
}

// The index-th name of `list` (index < CountNames(list)).
constexpr std::string_view NthName(std::string_view list, int index) {
  for (int i = 0;; ++i) {
    const size_t comma = list.find(',');
    std::string_view name = list.substr(0, comma);
    while (!name.empty() && name.front() == ' ') name.remove_prefix(1);
    while (!name.empty() && name.back() == ' ') name.remove_suffix(1);
    if (i == index || comma == std::string_view::npos) return name;
    list.remove_prefix(comma + 1);
  }
}

// The position of `name` in `list`, or -1.
constexpr int IndexOfName(std::string_view list, std::string_view name) {
  for (int i = 0; i < CountNames(list); ++i) {
    if (NthName(list, i) == name) return i;
  }
  return -1;
}

inline std::string ArgName(const Abi& abi, int index) {
  const int outputs = CountNames(abi.outputs);
  return std::string(index < outputs ? NthName(abi.outputs, index)
                                     : NthName(abi.inputs, index - outputs));
}

// abi.in_place as a bit set: bit (output * kMaxArgs + argument) for every "output=input" pair;
// kBadInPlace if a pair does not name an output and an input.
inline constexpr int kMaxArgs = 8;
inline constexpr uint64_t kBadInPlace = ~uint64_t{0};

constexpr uint64_t InPlaceMask(const Abi& abi) {
  uint64_t mask = 0;
  for (int p = 0; p < CountNames(abi.in_place); ++p) {
    const std::string_view pair = NthName(abi.in_place, p);
    const size_t eq = pair.find('=');
    if (eq == std::string_view::npos) return kBadInPlace;
    const int out = IndexOfName(abi.outputs, pair.substr(0, eq));
    const int in = IndexOfName(abi.inputs, pair.substr(eq + 1));
    if (out < 0 || in < 0) return kBadInPlace;
    mask |= uint64_t{1} << (out * kMaxArgs + CountNames(abi.outputs) + in);
  }
  return mask;
}

inline std::string AbiSignature(const Abi& abi) {
  std::string sig = std::string(abi.name) + "(" + abi.outputs;
  if (abi.outputs[0] != '\0' && abi.inputs[0] != '\0') sig += ", ";
  return sig + abi.inputs + ")";
}

// The docstring exported with each function (TVM_FFI_DLL_EXPORT_TYPED_FUNC_DOC): its signature
// with names, then which arguments it writes.
template <const Abi& kAbi>
const char* AbiDoc() {
  static const std::string doc = [] {
    std::string d = AbiSignature(kAbi) + "\n\nWrites: " +
                    (kAbi.outputs[0] != '\0' ? kAbi.outputs : "nothing (returns its result)");
    if (kAbi.in_place[0] != '\0')
      d += std::string("\nIn-place (the same array) allowed: ") + kAbi.in_place;
    return d + "\n";
  }();
  return doc.c_str();
}

// Each argument of an exported call as a tensor (or nullptr: not a tensor, or an absent one).
inline const ffi::TensorView* AsTensor(const ffi::TensorView& t) { return &t; }
inline const ffi::TensorView* AsTensor(const ffi::Optional<ffi::TensorView>& t) {
  return t.has_value() ? &*t : nullptr;
}
template <typename T>
const ffi::TensorView* AsTensor(const T&) {
  return nullptr;
}

[[noreturn]] inline void ThrowNoData(const Abi& abi, int i, const ffi::TensorView& t) {
  TVM_FFI_THROW(ValueError) << ArgName(abi, i) << " has " << t.numel()
                            << " elements but no memory (a null data pointer): its storage was "
                               "freed or resized to zero bytes. Pass an array with its data";
  TVM_FFI_UNREACHABLE();
}

// TensorView gives no other way to see a null strides pointer than its own internal check.
inline bool HasStrides(const ffi::TensorView& t) {
  if (t.ndim() == 0) return true;
  try {
    (void)t.strides();
  } catch (const ffi::Error&) {
    return false;
  }
  return true;
}

[[noreturn]] inline void ThrowNoStrides(const Abi& abi, int i) {
  TVM_FFI_THROW(ValueError) << ArgName(abi, i)
                            << " has no strides (a null strides pointer); pass a tensor whose "
                               "strides are given, as every framework's DLPack export does";
  TVM_FFI_UNREACHABLE();
}

[[noreturn]] inline void ThrowOverlap(const Abi& abi, int out, int in, bool in_place_allowed) {
  const std::string out_name = ArgName(abi, out);
  const std::string in_name = ArgName(abi, in);
  if (in_place_allowed) {
    TVM_FFI_THROW(ValueError) << out_name << " and " << in_name
                              << " overlap in memory without being the same array; pass the same "
                                 "array for in-place use, or arrays that do not overlap";
  }
  TVM_FFI_THROW(ValueError) << out_name << " and " << in_name << " overlap in memory; " << out_name
                            << " must not share memory with " << in_name;
  TVM_FFI_UNREACHABLE();
}

// No tensor is a null pointer with elements; no output overlaps another argument, except as the
// very same array where `in_place` (InPlaceMask) allows it.
inline void CheckTensorArgs(const Abi& abi, uint64_t in_place,
                            const ffi::TensorView* const* tensors, int n) {
  for (int i = 0; i < n; ++i) {
    const ffi::TensorView* t = tensors[i];
    // DLPack allows a null strides pointer (a compact array); every check and kernel here reads
    // strides, so a bare-ABI caller that passes none is refused before anything reads them.
    if (t != nullptr && !HasStrides(*t)) ThrowNoStrides(abi, i);
    if (t != nullptr && t->data_ptr() == nullptr && t->numel() > 0) ThrowNoData(abi, i, *t);
  }
  const int outputs = CountNames(abi.outputs);
  for (int o = 0; o < outputs; ++o) {
    if (tensors[o] == nullptr) continue;
    for (int i = o + 1; i < n; ++i) {  // earlier outputs were paired with this one already
      if (tensors[i] == nullptr || !Overlaps(*tensors[o], *tensors[i])) continue;
      const bool allowed = (in_place >> (o * kMaxArgs + i)) & 1u;
      if (allowed && SameArray(*tensors[o], *tensors[i])) continue;
      ThrowOverlap(abi, o, i, allowed);
    }
  }
}

// The function TVM_FFI_DLL_EXPORT_TYPED_FUNC exports for SCALE_LIB_EXPORT: the same signature
// (so the exported type schema is Fn's), checking the tensors before calling Fn.
template <const Abi& kAbi, auto kFn>
struct CheckedExport;

template <const Abi& kAbi, typename R, typename... Args, R (*kFn)(Args...)>
struct CheckedExport<kAbi, kFn> {
  static_assert(
      CountNames(kAbi.outputs) + CountNames(kAbi.inputs) == sizeof...(Args),
      "SCALE_LIB_EXPORT: the outputs and inputs must name every argument of the function");
  static_assert(sizeof...(Args) <= kMaxArgs, "SCALE_LIB_EXPORT: at most 8 arguments");
  static constexpr uint64_t kInPlace = InPlaceMask(kAbi);
  static_assert(kInPlace != kBadInPlace,
                "SCALE_LIB_EXPORT: each in-place pair is output=input, both named in the lists");
  static R Call(Args... args) {
    if constexpr (sizeof...(Args) > 0) {
      const ffi::TensorView* tensors[] = {AsTensor(args)...};
      CheckTensorArgs(kAbi, kInPlace, tensors, static_cast<int>(sizeof...(Args)));
    }
    return kFn(std::move(args)...);
  }
};

}  // namespace detail

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
