// SPDX-License-Identifier: Apache-2.0
// ABI of scale: scale(out, x, factor). Routing only; the math is in kernels/.
#include "functional.h"
#include "scale/scale.h"

namespace scale_lib {

// [binding.begin]
void Scale(ffi::TensorView out, ffi::TensorView x, double factor) {
  SCALE_LIB_ROUTE_BY_DEVICE(x, ScaleCPU(out, x, factor), ScaleCUDA(out, x, factor));
}
// [binding.end]

}  // namespace scale_lib

// [export.begin]
// scale(out, x, factor): writes out, which may be x itself (in-place).
SCALE_LIB_EXPORT(scale, scale_lib::Scale, "out", "x, factor", "out=x");
// scale_new(x, factor): its functional form, returning a new output (functional.h).
SCALE_LIB_EXPORT_NEW(scale, scale_lib::Scale, "x, factor");
// [export.end]
