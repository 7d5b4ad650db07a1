// SPDX-License-Identifier: Apache-2.0
// Functional forms: <op>_new(x, ...) returns a new output, allocated through the calling
// framework's allocator (PyTorch, Paddle), so that an allocating call from Python is one call
// into the library instead of an allocation in Python and a call. It runs the op's binding, with
// all of its checks; its arguments are the op's without the output. Callers that publish no
// allocator get library-owned host memory on the CPU (as an output the library allocates itself
// does) and a ValueError on CUDA. An op's binding file defines and exports its functional form:
//   ffi::Tensor ScaleNew(ffi::TensorView x, double factor) {
//     return CallNew<&Scale>(x.shape(), x, factor);
//   }
//   SCALE_LIB_EXPORT(scale_new, scale_lib::ScaleNew, "", "x, factor", "");
#ifndef SCALE_LIB_FUNCTIONAL_H_
#define SCALE_LIB_FUNCTIONAL_H_

#include <utility>

#include "tvm_ffi_utils.h"

namespace scale_lib {

// out = a new contiguous array of `shape` with x's dtype and device; then fn(out, x, args...).
template <auto kFn, typename... Args>
ffi::Tensor CallNew(ffi::ShapeView shape, ffi::TensorView x, Args... args) {
  const bool cpu = detail::CheckSupportedDevice(x, "x") == kDLCPU;  // before allocating on it
  ffi::Tensor out =
      cpu ? AllocHostResult(shape, x.dtype()) : AllocFromFramework(shape, x.dtype(), x.device());
  kFn(out, x, std::move(args)...);
  return out;
}

}  // namespace scale_lib

#endif  // SCALE_LIB_FUNCTIONAL_H_
