// SPDX-License-Identifier: Apache-2.0
// ABI of silu_and_mul and its backward. Routing only; the math is in kernels/ (the CUDA kernels
// in Triton: a build without Triton raises a ValueError for CUDA arrays, SCALE_LIB_TRITON_CALL).
#include <vector>

#include "functional.h"
#include "silu_and_mul/silu_and_mul.h"

namespace scale_lib {

void SiluAndMul(ffi::TensorView out, ffi::TensorView x) {
  SCALE_LIB_ROUTE_BY_DEVICE(x, SiluAndMulCPU(out, x),
                            SCALE_LIB_TRITON_CALL(SiluAndMulCUDA(out, x), "silu_and_mul"));
}

// silu_and_mul_new(x): the functional form, returning a new output of shape (..., d).
ffi::Tensor SiluAndMulNew(ffi::TensorView x) {
  CheckSiluAndMulInput(x);  // before the shape is read from it
  std::vector<int64_t> shape(x.shape().begin(), x.shape().end());
  shape.back() /= 2;
  return CallNew<&SiluAndMul>(ffi::ShapeView(shape.data(), shape.size()), x);
}

void SiluAndMulBackward(ffi::TensorView grad_x, ffi::TensorView x, ffi::TensorView grad) {
  SCALE_LIB_ROUTE_BY_DEVICE(
      x, SiluAndMulBackwardCPU(grad_x, x, grad),
      SCALE_LIB_TRITON_CALL(SiluAndMulBackwardCUDA(grad_x, x, grad), "silu_and_mul_backward"));
}

}  // namespace scale_lib

SCALE_LIB_EXPORT(silu_and_mul, scale_lib::SiluAndMul, "out", "x", "");
SCALE_LIB_EXPORT(silu_and_mul_new, scale_lib::SiluAndMulNew, "", "x", "");
SCALE_LIB_EXPORT(silu_and_mul_backward, scale_lib::SiluAndMulBackward, "grad_x", "x, grad",
                 "grad_x=x");
SCALE_LIB_EXPORT_NEW(silu_and_mul_backward, scale_lib::SiluAndMulBackward, "x, grad");
