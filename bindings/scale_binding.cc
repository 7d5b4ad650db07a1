// ABI of scale: scale(out, x, factor). Routing only; the math is in kernels/.
#include "scale.h"

namespace scale_lib {

// [binding.begin]
void Scale(ffi::TensorView out, ffi::TensorView x, double factor) {
  SCALE_LIB_ROUTE_BY_DEVICE(x, ScaleCPU(out, x, factor), ScaleCUDA(out, x, factor));
}
// [binding.end]

}  // namespace scale_lib

// [export.begin]
TVM_FFI_DLL_EXPORT_TYPED_FUNC(scale, scale_lib::Scale);
// [export.end]
