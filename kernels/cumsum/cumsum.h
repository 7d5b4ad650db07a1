// SPDX-License-Identifier: Apache-2.0
// cumsum: out = cumsum(x, axis=-1), the running sum along the last dimension (from the end of
// each row with reverse): the library's example of the scan pattern (kernels/scan.h).
//
// The one header shared by the CPU twin, the CUDA kernel and the binding: the math, the argument
// checks both implementations run first, and their declarations.
#ifndef SCALE_LIB_KERNELS_CUMSUM_H_
#define SCALE_LIB_KERNELS_CUMSUM_H_

#include <cmath>
#include <cstdint>

#include "scan.h"
#include "tvm_ffi_utils.h"

namespace scale_lib {

// The math, for both devices, in the compute type C (see kernels/scan.h).
template <typename C>
struct CumsumFn {
  using Op = ScanSum<C>;  // values combine by addition
  SCALE_LIB_HOST_DEVICE C Value(C x) const {
    // The value of one element, from one value per input.
    return x;
  }
  SCALE_LIB_HOST_DEVICE C Finish(C prefix) const {
    // The output of one element, from the sum of the values of its row up to it, itself
    // included (with reverse: from it to the row's end).
    return prefix;
  }
};

// Step 1 of every cumsum implementation: the checks of cumsum's arguments.
inline void CheckCumsumArgs(const ffi::TensorView& out, const ffi::TensorView& x) {
  CHECK_FLOATING(x);
  CHECK_LIKE(out, x);
  CHECK_MIN_NDIM(x, 1);
  CHECK_CONTIGUOUS(x);
  CHECK_CONTIGUOUS(out);
}

void CumsumCPU(ffi::TensorView out, ffi::TensorView x, bool reverse);

#if defined(SCALE_LIB_WITH_CUDA)
void CumsumCUDA(ffi::TensorView out, ffi::TensorView x, bool reverse);
#endif

}  // namespace scale_lib

#endif  // SCALE_LIB_KERNELS_CUMSUM_H_
