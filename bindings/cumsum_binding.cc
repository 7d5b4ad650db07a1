// SPDX-License-Identifier: Apache-2.0
// ABI of cumsum: cumsum(out, x, reverse). Routing only; the math is in kernels/.
#include "cumsum/cumsum.h"
#include "functional.h"

namespace scale_lib {

void Cumsum(ffi::TensorView out, ffi::TensorView x, bool reverse) {
  SCALE_LIB_ROUTE_BY_DEVICE(x, CumsumCPU(out, x, reverse), CumsumCUDA(out, x, reverse));
}

}  // namespace scale_lib

// cumsum(out, x, reverse): writes out, which may be x itself (in-place).
SCALE_LIB_EXPORT(cumsum, scale_lib::Cumsum, "out", "x, reverse", "out=x");
// cumsum_new(x, reverse): the functional form, returning a new output (functional.h).
SCALE_LIB_EXPORT_NEW(cumsum, scale_lib::Cumsum, "x, reverse");
