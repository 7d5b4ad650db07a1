// SPDX-License-Identifier: Apache-2.0
// ABI of rms_norm and its backward pieces. Routing only; the math is in kernels/.
#include "functional.h"
#include "rms_norm/rms_norm.h"

namespace scale_lib {

void RmsNorm(ffi::TensorView out, ffi::TensorView x, ffi::Optional<ffi::TensorView> weight,
             double eps) {
  SCALE_LIB_ROUTE_BY_DEVICE(x, RmsNormCPU(out, x, weight, eps), RmsNormCUDA(out, x, weight, eps));
}

void RmsNormRstd(ffi::TensorView rstd, ffi::TensorView x, double eps) {
  SCALE_LIB_ROUTE_BY_DEVICE(x, RmsNormRstdCPU(rstd, x, eps), RmsNormRstdCUDA(rstd, x, eps));
}

void RmsNormBackward(ffi::TensorView grad_x, ffi::TensorView grad, ffi::TensorView x,
                     ffi::Optional<ffi::TensorView> weight, ffi::TensorView rstd) {
  SCALE_LIB_ROUTE_BY_DEVICE(x, RmsNormBackwardCPU(grad_x, grad, x, weight, rstd),
                            RmsNormBackwardCUDA(grad_x, grad, x, weight, rstd));
}

void RmsNormWeightGrad(ffi::TensorView grad_weight, ffi::TensorView grad, ffi::TensorView x,
                       ffi::TensorView rstd) {
  SCALE_LIB_ROUTE_BY_DEVICE(x, RmsNormWeightGradCPU(grad_weight, grad, x, rstd),
                            RmsNormWeightGradCUDA(grad_weight, grad, x, rstd));
}

}  // namespace scale_lib

SCALE_LIB_EXPORT(rms_norm, scale_lib::RmsNorm, "out", "x, weight, eps", "out=x");
// The functional forms, returning a new output (functional.h).
SCALE_LIB_EXPORT_NEW(rms_norm, scale_lib::RmsNorm, "x, weight, eps");
SCALE_LIB_EXPORT(rms_norm_rstd, scale_lib::RmsNormRstd, "rstd", "x, eps", "");
SCALE_LIB_EXPORT(rms_norm_backward, scale_lib::RmsNormBackward, "grad_x", "grad, x, weight, rstd",
                 "grad_x=grad, grad_x=x");
SCALE_LIB_EXPORT_NEW(rms_norm_backward, scale_lib::RmsNormBackward, "grad, x, weight, rstd");
SCALE_LIB_EXPORT(rms_norm_weight_grad, scale_lib::RmsNormWeightGrad, "grad_weight", "grad, x, rstd",
                 "");
