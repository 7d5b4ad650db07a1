// SPDX-License-Identifier: Apache-2.0
// softmax: out = exp(x - max(x)) / sum(exp(x - max(x))) over the last dimension.
//
// The example of a kernel compiled at run time (docs/nvrtc.md): on CUDA, the first call for a
// row length, dtype and GPU compiles a kernel specialised on them with NVRTC
// (python/scale_lib/nvrtc_kernels/softmax.cu), which keeps each row in registers; the
// ahead-of-time kernel of kernels/softmax/softmax.cu, for any row length, is the fallback.
//
// Its backward, softmax_backward(grad_x, y, grad) for y = softmax(x): grad_x = y * (grad -
// sum(grad * y)) over the last dimension, a row-wise op (kernels/rowwise.h) whose math is
// SoftmaxBackwardFn below, run by both implementations.
//
// The one header shared by the CPU twin, the CUDA kernel and the binding: the argument checks
// both implementations run first, the backward's math, and their declarations.
#ifndef SCALE_LIB_KERNELS_SOFTMAX_H_
#define SCALE_LIB_KERNELS_SOFTMAX_H_

#include <cmath>
#include <cstdint>

#include "elementwise.h"  // SCALE_LIB_HOST_DEVICE
#include "tvm_ffi_utils.h"

namespace scale_lib {

// Step 1 of every softmax implementation.
inline void CheckSoftmaxArgs(const ffi::TensorView& out, const ffi::TensorView& x) {
  CHECK_FLOATING(x);
  CHECK_MIN_NDIM(x, 1);
  CHECK_LIKE(out, x);
  CHECK_CONTIGUOUS(x);
  CHECK_CONTIGUOUS(out);
}

inline void CheckSoftmaxBackwardArgs(const ffi::TensorView& grad_x, const ffi::TensorView& y,
                                     const ffi::TensorView& grad) {
  CHECK_FLOATING(y);
  CHECK_MIN_NDIM(y, 1);
  CHECK_LIKE(grad, y);
  CHECK_LIKE(grad_x, y);
  CHECK_CONTIGUOUS(y);
  CHECK_CONTIGUOUS(grad);
  CHECK_CONTIGUOUS(grad_x);
}

// [softmax_backward.begin]
// The backward's math, in the compute type C, as the row-wise launchers take it: the row sums
// y * grad, and each element is y * (grad - that sum).
template <typename C>
struct SoftmaxBackwardFn {
  struct Element {
    C y;
    C grad;
  };
  SCALE_LIB_HOST_DEVICE Element Value(C y, C grad) const { return {y, grad}; }
  SCALE_LIB_HOST_DEVICE C Term(Element e) const { return e.y * e.grad; }
  SCALE_LIB_HOST_DEVICE C Finish(Element e, C dot, int64_t) const { return e.y * (e.grad - dot); }
};
// [softmax_backward.end]

void SoftmaxCPU(ffi::TensorView out, ffi::TensorView x);
void SoftmaxBackwardCPU(ffi::TensorView grad_x, ffi::TensorView y, ffi::TensorView grad);

#if defined(SCALE_LIB_WITH_CUDA)
// runtime_compiled=false: the ahead-of-time kernel only (softmax_ahead_of_time, for comparisons).
void SoftmaxCUDA(ffi::TensorView out, ffi::TensorView x, bool runtime_compiled = true);
void SoftmaxBackwardCUDA(ffi::TensorView grad_x, ffi::TensorView y, ffi::TensorView grad);
#endif

}  // namespace scale_lib

#endif  // SCALE_LIB_KERNELS_SOFTMAX_H_
