// SPDX-License-Identifier: Apache-2.0
// scale: out = x * factor, elementwise.
//
// The one header shared by the CPU twin, the CUDA kernel and the binding: declarations and the
// argument checks both implementations run first.
#ifndef SCALE_LIB_KERNELS_SCALE_H_
#define SCALE_LIB_KERNELS_SCALE_H_

#include "elementwise.h"
#include "tvm_ffi_utils.h"

namespace scale_lib {

// [scale_fn.begin]
// The math, for both devices, in the compute type C.
template <typename C>
struct ScaleFn {
  C factor;
  SCALE_LIB_HOST_DEVICE C operator()(C x) const { return x * factor; }
};
// [scale_fn.end]

// [scale_checks.begin]
// Step 1 of every scale implementation: x and out are floating, alike and contiguous. (That out
// is x itself or shares no memory with it is checked at the export, for every op: see
// SCALE_LIB_EXPORT in bindings/scale_binding.cc.)
inline void CheckScaleArgs(const ffi::TensorView& out, const ffi::TensorView& x) {
  CHECK_FLOATING(x);
  CHECK_LIKE(out, x);
  CHECK_CONTIGUOUS(x);
  CHECK_CONTIGUOUS(out);
}
// [scale_checks.end]

void ScaleCPU(ffi::TensorView out, ffi::TensorView x, double factor);

#if defined(SCALE_LIB_WITH_CUDA)
void ScaleCUDA(ffi::TensorView out, ffi::TensorView x, double factor);
#endif

}  // namespace scale_lib

#endif  // SCALE_LIB_KERNELS_SCALE_H_
