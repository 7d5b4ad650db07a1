// SPDX-License-Identifier: Apache-2.0
// axpby: out = a * x + b * y, elementwise. The CUDA kernels ship as an embedded CUBIN/fatbin
// (kernels/axpby/cubin/axpby_kernels.cu, launched by kernels/axpby/axpby.cu); the CPU twin is
// axpby_cpu.cc.
#ifndef SCALE_LIB_KERNELS_AXPBY_H_
#define SCALE_LIB_KERNELS_AXPBY_H_

#include "elementwise.h"
#include "tvm_ffi_utils.h"

namespace scale_lib {

// The math of the CPU twin, in the compute type C. (The CUBIN kernels, self-contained by design,
// write the same expression.)
template <typename C>
struct AxpbyFn {
  C a;
  C b;
  SCALE_LIB_HOST_DEVICE C operator()(C x, C y) const { return a * x + b * y; }
};

inline void CheckAxpbyArgs(const ffi::TensorView& out, const ffi::TensorView& x,
                           const ffi::TensorView& y) {
  CHECK_FLOATING(x);
  CHECK_LIKE(y, x);
  CHECK_LIKE(out, x);
  CHECK_CONTIGUOUS(x);
  CHECK_CONTIGUOUS(y);
  CHECK_CONTIGUOUS(out);
}

void AxpbyCPU(ffi::TensorView out, ffi::TensorView x, ffi::TensorView y, double a, double b);

#if defined(SCALE_LIB_WITH_CUDA)
void AxpbyCUDA(ffi::TensorView out, ffi::TensorView x, ffi::TensorView y, double a, double b);
#endif

}  // namespace scale_lib

#endif  // SCALE_LIB_KERNELS_AXPBY_H_
