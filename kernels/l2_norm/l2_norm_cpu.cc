// SPDX-License-Identifier: Apache-2.0
// CPU twin of kernels/l2_norm/l2_norm.cu. One pass: no workspace on the CPU.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "cpu_float.h"
#include "cpu_parallel.h"
#include "l2_norm.h"

namespace scale_lib {

void L2NormCPU(ffi::TensorView out, ffi::TensorView x) {
  const int64_t groups = CheckL2NormArgs(out, x);
  if (groups == 0) return;
  const int64_t per_group = x.numel() / groups;
  DispatchFloating(x.dtype(), "x", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using Math = host::FloatMath<T>;
    const T* xs = DataPtr<const T>(x);
    T* norms = DataPtr<T>(out);
    // Fixed-size blocks summed in a fixed order: the same bits whatever the thread count.
    constexpr int64_t kBlock = int64_t{1} << 16;
    for (int64_t g = 0; g < groups; ++g) {
      const T* group = xs + g * per_group;
      const int64_t blocks = (per_group + kBlock - 1) / kBlock;
      std::vector<double> partial(static_cast<size_t>(blocks));
      // A block is more than a thread's minimum share (host::kMinItemsPerThread).
      host::ParallelFor(blocks, 1, 1, [&](int64_t begin, int64_t end) {
        for (int64_t b = begin; b < end; ++b) {
          const int64_t first = b * kBlock;
          partial[b] =
              host::SumOfSquares<double>(group + first, std::min(per_group - first, kBlock));
        }
      });
      double sum_sq = 0;
      for (double p : partial) sum_sq += p;
      norms[g] = Math::StoreDouble(std::sqrt(sum_sq));
    }
  });
}

}  // namespace scale_lib
