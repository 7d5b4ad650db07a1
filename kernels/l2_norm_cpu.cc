// CPU twin of kernels/l2_norm.cu. One pass: no workspace on the CPU.
#include <cmath>
#include <cstdint>

#include "cpu_float.h"
#include "l2_norm.h"

namespace scale_lib {

void L2NormCPU(ffi::TensorView out, ffi::TensorView x) {
  const int64_t groups = CheckL2NormArgs(out, x);
  if (groups == 0) return;
  const int64_t per_group = x.numel() / groups;
  DispatchFloating(x.dtype(), "x", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using Math = cpu::FloatMath<T>;
    const T* xs = DataPtr<const T>(x);
    T* norms = DataPtr<T>(out);
    for (int64_t g = 0; g < groups; ++g) {
      double sum_sq = 0;
      for (int64_t i = g * per_group; i < (g + 1) * per_group; ++i) {
        const double v = static_cast<double>(Math::Load(xs[i]));
        sum_sq += v * v;
      }
      norms[g] = Math::Store(static_cast<typename Math::Compute>(std::sqrt(sum_sq)));
    }
  });
}

}  // namespace scale_lib
