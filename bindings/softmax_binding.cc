// SPDX-License-Identifier: Apache-2.0
// ABI of softmax: softmax(out, x), and its backward. Routing only; the math is in kernels/.
#include "functional.h"
#include "softmax/softmax.h"

namespace scale_lib {

void Softmax(ffi::TensorView out, ffi::TensorView x) {
  SCALE_LIB_ROUTE_BY_DEVICE(x, SoftmaxCPU(out, x), SoftmaxCUDA(out, x));
}

// softmax_ahead_of_time(out, x): the same, with the CUDA kernel compiled ahead of time for any
// row length, never the runtime-compiled one (tests and benchmarks compare the two).
void SoftmaxAheadOfTime(ffi::TensorView out, ffi::TensorView x) {
  SCALE_LIB_ROUTE_BY_DEVICE(x, SoftmaxCPU(out, x), SoftmaxCUDA(out, x, false));
}

void SoftmaxBackward(ffi::TensorView grad_x, ffi::TensorView y, ffi::TensorView grad) {
  SCALE_LIB_ROUTE_BY_DEVICE(y, SoftmaxBackwardCPU(grad_x, y, grad),
                            SoftmaxBackwardCUDA(grad_x, y, grad));
}

}  // namespace scale_lib

// softmax(out, x): writes out, which may be x itself (in-place).
SCALE_LIB_EXPORT(softmax, scale_lib::Softmax, "out", "x", "out=x");
// softmax_new(x): the functional form, returning a new output (functional.h).
SCALE_LIB_EXPORT_NEW(softmax, scale_lib::Softmax, "x");
SCALE_LIB_EXPORT(softmax_ahead_of_time, scale_lib::SoftmaxAheadOfTime, "out", "x", "out=x");
// softmax_backward(grad_x, y, grad): grad_x = y * (grad - sum(grad * y)) over the last dimension,
// for y = softmax(x) and the gradient grad of y; grad_x may be y or grad itself (in-place).
SCALE_LIB_EXPORT(softmax_backward, scale_lib::SoftmaxBackward, "grad_x", "y, grad",
                 "grad_x=y, grad_x=grad");
SCALE_LIB_EXPORT_NEW(softmax_backward, scale_lib::SoftmaxBackward, "y, grad");
