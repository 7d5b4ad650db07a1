// SPDX-License-Identifier: Apache-2.0
// CPU twin of the axpby CUBIN kernels.
#include <cstdint>

#include "axpby.h"
#include "cpu_float.h"
#include "cpu_parallel.h"

namespace scale_lib {

void AxpbyCPU(ffi::TensorView out, ffi::TensorView x, ffi::TensorView y, double a, double b) {
  CheckAxpbyArgs(out, x, y);
  const int64_t n = x.numel();
  if (n == 0) return;
  DispatchFloating(x.dtype(), "x", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using Math = host::FloatMath<T>;
    const auto ac = static_cast<typename Math::Compute>(a);
    const auto bc = static_cast<typename Math::Compute>(b);
    T* o = DataPtr<T>(out);
    const T* xs = DataPtr<const T>(x);
    const T* ys = DataPtr<const T>(y);
    host::ParallelFor(n, int64_t{1} << 18, 64, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i)
        o[i] = Math::Store(ac * Math::Load(xs[i]) + bc * Math::Load(ys[i]));
    });
  });
}

}  // namespace scale_lib
