// CPU twin of kernels/scale.cu.
#include <cstdint>

#include "cpu_float.h"
#include "scale.h"

namespace scale_lib {
namespace {

// No __restrict__: out may be x (in-place). The compiler vectorizes float/double behind a
// runtime overlap check.
template <typename T>
void ScaleLoop(T* out, const T* x, int64_t n, double factor) {
  using Math = cpu::FloatMath<T>;
  const auto f = static_cast<typename Math::Compute>(factor);
  for (int64_t i = 0; i < n; ++i) out[i] = Math::Store(Math::Load(x[i]) * f);
}

}  // namespace

// [scale_cpu.begin]
void ScaleCPU(ffi::TensorView out, ffi::TensorView x, double factor) {
  CheckScaleArgs(out, x);
  const int64_t n = x.numel();
  if (n == 0) return;
  DispatchFloating(x.dtype(), "x", [&](auto tag) {
    using T = typename decltype(tag)::type;
    ScaleLoop<T>(DataPtr<T>(out), DataPtr<const T>(x), n, factor);
  });
}
// [scale_cpu.end]

}  // namespace scale_lib
