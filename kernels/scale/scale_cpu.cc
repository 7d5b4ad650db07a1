// SPDX-License-Identifier: Apache-2.0
// CPU twin of kernels/scale/scale.cu: the same ScaleFn, run by the shared CPU elementwise launcher.
#include <cstdint>

#include "elementwise_cpu.h"
#include "scale.h"

namespace scale_lib {

// [scale_cpu.begin]
void ScaleCPU(ffi::TensorView out, ffi::TensorView x, double factor) {
  CheckScaleArgs(out, x);
  const int64_t n = x.numel();
  if (n == 0) return;
  DispatchFloating(x.dtype(), "x", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using C = host::Compute<T>;
    host::RunElementwise<T>(ScaleFn<C>{static_cast<C>(factor)}, n, DataPtr<T>(out),
                            DataPtr<const T>(x));
  });
}
// [scale_cpu.end]

}  // namespace scale_lib
