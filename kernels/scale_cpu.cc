// SPDX-License-Identifier: Apache-2.0
// CPU twin of kernels/scale.cu.
#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "cpu_float.h"
#include "cpu_parallel.h"
#include "scale.h"

namespace scale_lib {
namespace {

constexpr int64_t kMinPerThread = int64_t{1} << 18;  // ~1 MB of float32 per thread

// No __restrict__: out may be x (in-place). float and double: one loop, which the compiler
// vectorises behind a runtime overlap check. 16-bit types: cache-sized chunks converted in bulk.
template <typename T>
void ScaleLoop(T* out, const T* x, int64_t n, double factor) {
  using Compute = typename host::FloatMath<T>::Compute;
  const auto f = static_cast<Compute>(factor);
  if constexpr (std::is_same_v<T, Compute>) {
    for (int64_t i = 0; i < n; ++i) out[i] = x[i] * f;
  } else {
    constexpr int64_t kChunk = 2048;
    Compute buf[kChunk];
    for (int64_t start = 0; start < n; start += kChunk) {
      const int64_t len = std::min(kChunk, n - start);
      host::LoadN(x + start, buf, len);
      for (int64_t i = 0; i < len; ++i) buf[i] *= f;
      host::StoreN(buf, out + start, len);
    }
  }
}

}  // namespace

// [scale_cpu.begin]
void ScaleCPU(ffi::TensorView out, ffi::TensorView x, double factor) {
  CheckScaleArgs(out, x);
  const int64_t n = x.numel();
  if (n == 0) return;
  DispatchFloating(x.dtype(), "x", [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* o = DataPtr<T>(out);
    const T* xs = DataPtr<const T>(x);
    host::ParallelFor(n, kMinPerThread, 64, [&](int64_t begin, int64_t end) {
      ScaleLoop<T>(o + begin, xs + begin, end - begin, factor);
    });
  });
}
// [scale_cpu.end]

}  // namespace scale_lib
