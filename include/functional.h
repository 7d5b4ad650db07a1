// SPDX-License-Identifier: Apache-2.0
// Functional forms: <op>_new(x, ...) returns a new output, allocated through the calling
// framework's allocator (PyTorch, Paddle), so that an allocating call from Python is one call
// into the library instead of an allocation in Python and a call. It runs the op's binding, with
// all of its checks; its arguments are the op's without the output. Callers that publish no
// allocator get library-owned host memory on the CPU (as an output the library allocates itself
// does) and a ValueError on CUDA. An op whose output is like its first input (its shape and
// dtype) exports its functional form in one line, beside the op (the scaffolds write it):
//   SCALE_LIB_EXPORT(scale, scale_lib::Scale, "out", "x, factor", "out=x");
//   SCALE_LIB_EXPORT_NEW(scale, scale_lib::Scale, "x, factor");   // scale_new(x, factor)
// An output of another shape takes a function that calls CallNew with that shape:
//   ffi::Tensor NormNew(ffi::TensorView x) { return CallNew<&Norm>(ffi::ShapeView(), x); }
#ifndef SCALE_LIB_FUNCTIONAL_H_
#define SCALE_LIB_FUNCTIONAL_H_

#include <array>
#include <cstddef>
#include <utility>

#include "tvm_ffi_utils.h"

namespace scale_lib {
namespace detail {

// A new contiguous array of `shape` with x's dtype, on x's device; `x_name` names x in the error
// for an unsupported device.
inline ffi::Tensor NewOutput(ffi::ShapeView shape, const ffi::TensorView& x, const char* x_name) {
  const bool cpu = CheckSupportedDevice(x, x_name) == kDLCPU;  // before allocating on it
  return cpu ? AllocHostResult(shape, x.dtype()) : AllocFromFramework(shape, x.dtype(), x.device());
}

// The first name of an ABI's inputs ("grad" of "grad, x"), at compile time.
template <const Abi& kAbi>
inline constexpr auto kFirstInput = [] {
  std::array<char, 64> name{};
  size_t n = 0;
  for (const char* c = kAbi.inputs; *c != '\0' && *c != ',' && n + 1 < name.size(); ++c) {
    if (*c != ' ') name[n++] = *c;
  }
  return name;
}();

}  // namespace detail

// out = a new contiguous array of `shape` with x's dtype and device; then fn(out, x, args...).
template <auto kFn, typename... Args>
ffi::Tensor CallNew(ffi::ShapeView shape, ffi::TensorView x, Args... args) {
  ffi::Tensor out = detail::NewOutput(shape, x, "x");
  kFn(out, x, std::move(args)...);
  return out;
}

// The functional form of kFn(out, x, args...) whose output is like x (its shape and dtype):
// kFn's arguments but the output, exported as kAbi by SCALE_LIB_EXPORT_NEW.
template <const detail::Abi& kAbi, auto kFn>
struct NewLikeFirstInput {
  static_assert(
      sizeof(decltype(kFn)) == 0,
      "SCALE_LIB_EXPORT_NEW: fn must be void(ffi::TensorView out, ffi::TensorView x, ...), "
      "its output first and like x; write another output's functional form with CallNew");
};

template <const detail::Abi& kAbi, typename... Args,
          void (*kFn)(ffi::TensorView, ffi::TensorView, Args...)>
struct NewLikeFirstInput<kAbi, kFn> {
  static ffi::Tensor Call(ffi::TensorView x, Args... args) {
    ffi::Tensor out = detail::NewOutput(x.shape(), x, detail::kFirstInput<kAbi>.data());
    kFn(out, x, std::move(args)...);
    return out;
  }
};

}  // namespace scale_lib

// Exports `name`_new, the functional form of `fn` (an op whose output is like its first input),
// with the names of its inputs, as SCALE_LIB_EXPORT names them.
#define SCALE_LIB_EXPORT_NEW(name, fn, inputs)                                               \
  SCALE_LIB_EXPORT(                                                                          \
      name##_new,                                                                            \
      (::scale_lib::NewLikeFirstInput<::scale_lib::detail::abi::name##_new, &fn>::Call), "", \
      inputs, "")

#endif  // SCALE_LIB_FUNCTIONAL_H_
