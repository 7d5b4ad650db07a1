// SPDX-License-Identifier: Apache-2.0
// CPU twin of kernels/softmax/softmax.cu: rows split across threads, each row's max, then its sum
// of exponentials, in the compute type.
#include <cstdint>

#include "cpu_float.h"
#include "cpu_parallel.h"
#include "softmax.h"

namespace scale_lib {

void SoftmaxCPU(ffi::TensorView out, ffi::TensorView x) {
  CheckSoftmaxArgs(out, x);
  const int64_t n = x.numel();
  if (n == 0) return;
  const int64_t cols = x.size(x.ndim() - 1);
  const int64_t rows = n / cols;
  DispatchFloating(x.dtype(), "x", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using M = host::FloatMath<T>;
    using C = host::Compute<T>;
    T* outs = DataPtr<T>(out);
    const T* xs = DataPtr<const T>(x);
    host::ParallelForRows(rows, cols, [&](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r) {
        const T* in = xs + r * cols;
        T* o = outs + r * cols;
        C max = M::Load(in[0]);
        for (int64_t i = 1; i < cols; ++i) {
          const C v = M::Load(in[i]);
          max = (v > max || v != v) && max == max ? v : max;  // NaN wins
        }
        C sum = 0;
        for (int64_t i = 0; i < cols; ++i) sum += std::exp(M::Load(in[i]) - max);
        const C scale = C(1) / sum;
        // Reads each element before writing it: out may be x.
        for (int64_t i = 0; i < cols; ++i) o[i] = M::Store(std::exp(M::Load(in[i]) - max) * scale);
      }
    });
  });
}

}  // namespace scale_lib
