// ABI of rms_norm and its backward pieces. Routing only; the math is in kernels/.
#include "rms_norm.h"

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

TVM_FFI_DLL_EXPORT_TYPED_FUNC(rms_norm, scale_lib::RmsNorm);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(rms_norm_rstd, scale_lib::RmsNormRstd);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(rms_norm_backward, scale_lib::RmsNormBackward);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(rms_norm_weight_grad, scale_lib::RmsNormWeightGrad);
