// SPDX-License-Identifier: Apache-2.0
// CPU twin of the axpby CUBIN kernels: AxpbyFn (kernels/axpby/axpby.h), run by the shared CPU
// elementwise launcher.
#include <cstdint>

#include "axpby.h"
#include "elementwise_cpu.h"

namespace scale_lib {

void AxpbyCPU(ffi::TensorView out, ffi::TensorView x, ffi::TensorView y, double a, double b) {
  CheckAxpbyArgs(out, x, y);
  const int64_t n = x.numel();
  if (n == 0) return;
  DispatchFloating(x.dtype(), "x", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using C = host::Compute<T>;
    host::RunElementwise<T>(AxpbyFn<C>{static_cast<C>(a), static_cast<C>(b)}, n, DataPtr<T>(out),
                            DataPtr<const T>(x), DataPtr<const T>(y));
  });
}

}  // namespace scale_lib
