// SPDX-License-Identifier: Apache-2.0
// ABI of axpby: axpby(out, x, y, a, b). Routing only; the math is in kernels/.
#include "axpby/axpby.h"
#include "functional.h"

namespace scale_lib {

void Axpby(ffi::TensorView out, ffi::TensorView x, ffi::TensorView y, double a, double b) {
  SCALE_LIB_ROUTE_BY_DEVICE(x, AxpbyCPU(out, x, y, a, b), AxpbyCUDA(out, x, y, a, b));
}

}  // namespace scale_lib

SCALE_LIB_EXPORT(axpby, scale_lib::Axpby, "out", "x, y, a, b", "out=x, out=y");
// axpby_new(x, y, a, b): the functional form, returning a new output (functional.h).
SCALE_LIB_EXPORT_NEW(axpby, scale_lib::Axpby, "x, y, a, b");
