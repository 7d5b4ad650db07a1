// SPDX-License-Identifier: Apache-2.0
// ABI of flatnonzero: flatnonzero(x) -> int64 tensor. The one op that returns a tensor: its
// size depends on the data. Routing only; the math is in kernels/.
#include "flatnonzero/flatnonzero.h"

namespace scale_lib {

ffi::Tensor FlatNonzero(ffi::TensorView x) {
  SCALE_LIB_ROUTE_BY_DEVICE(x, return FlatNonzeroCPU(x), return FlatNonzeroCUDA(x));
}

}  // namespace scale_lib

SCALE_LIB_EXPORT(flatnonzero, scale_lib::FlatNonzero, "", "x", "");
