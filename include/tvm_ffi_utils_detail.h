// SPDX-License-Identifier: Apache-2.0
// Internals of tvm_ffi_utils.h: error-message formatting, the memory-overlap test, the checks
// SCALE_LIB_EXPORT runs on every exported function's tensors, and device routing. A kernel
// author does not need to read this file: everything here is reached through the macros and
// functions that tvm_ffi_utils.h documents.
#ifndef SCALE_LIB_TVM_FFI_UTILS_DETAIL_H_
#define SCALE_LIB_TVM_FFI_UTILS_DETAIL_H_

#include <tvm/ffi/container/tensor.h>
#include <tvm/ffi/dtype.h>
#include <tvm/ffi/error.h>
#include <tvm/ffi/optional.h>

#include <algorithm>
#include <cstdint>
#include <sstream>
#include <string>
#include <string_view>
#include <utility>

namespace scale_lib {
namespace detail {

namespace ffi = tvm::ffi;

// ---------------------------------------------------------------------------------------------
// Formatting, for error messages. None of these throws: a throw while an error message is being
// built aborts the process.
// ---------------------------------------------------------------------------------------------

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

// ---------------------------------------------------------------------------------------------
// Memory overlap, judged by the bytes of the elements (not the bytes between the first and the
// last element), so that interleaved views of one buffer, such as columns 0-3 and 4-7 of a
// (rows, 8) array, are disjoint.
// ---------------------------------------------------------------------------------------------

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
  int64_t run_items = 1;   // elements per contiguous run
  int64_t runs = 1;        // number of runs
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

// ---------------------------------------------------------------------------------------------
// The checks SCALE_LIB_EXPORT runs before every exported function, on all of its tensors.
// ---------------------------------------------------------------------------------------------

// One exported function's argument names, as written in its SCALE_LIB_EXPORT.
struct Abi {
  const char* name;      // the exported name
  const char* outputs;   // "out": the arguments the function writes, which come first
  const char* inputs;    // "x, factor": the rest
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

// ---------------------------------------------------------------------------------------------
// Device routing
// ---------------------------------------------------------------------------------------------
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
}  // namespace scale_lib

#endif  // SCALE_LIB_TVM_FFI_UTILS_DETAIL_H_
