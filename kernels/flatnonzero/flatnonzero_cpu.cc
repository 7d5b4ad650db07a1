// SPDX-License-Identifier: Apache-2.0
// CPU twin of kernels/flatnonzero/flatnonzero.cu: count, allocate exactly, fill.
#include <cstdint>

#include "cpu_float.h"
#include "flatnonzero.h"

namespace scale_lib {

ffi::Tensor FlatNonzeroCPU(ffi::TensorView x) {
  CheckFlatNonzeroArgs(x);
  ffi::Tensor result;
  DispatchFloating(x.dtype(), "x", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using Math = host::FloatMath<T>;
    const T* xs = DataPtr<const T>(x);
    const int64_t n = x.numel();
    int64_t count = 0;
    for (int64_t i = 0; i < n; ++i) count += Math::Load(xs[i]) != 0;
    result = AllocHostResult(ffi::Shape({count}), kInt64);
    int64_t* out = static_cast<int64_t*>(result.data_ptr());
    for (int64_t i = 0, k = 0; i < n; ++i) {
      if (Math::Load(xs[i]) != 0) out[k++] = i;
    }
  });
  return result;
}

}  // namespace scale_lib
