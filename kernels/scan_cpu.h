// SPDX-License-Identifier: Apache-2.0
// host::RunScan: the CPU launcher of scan ops (see kernels/scan.h).
//
//   host::RunScan<T>(fn, rows, cols, reverse, out, x, y, ...);
//
// Each row is scanned in order by one thread, the running combination (the function object's
// operator, see kernels/scan.h) in the compute type, element after element from the operator's
// identity; inputs of more than about a hundred kilobytes are split across the CPU pool by rows.
#ifndef SCALE_LIB_KERNELS_SCAN_CPU_H_
#define SCALE_LIB_KERNELS_SCAN_CPU_H_

#include <cstdint>
#include <type_traits>

#include "cpu_float.h"
#include "cpu_parallel.h"
#include "scan.h"

namespace scale_lib {
namespace host {

// [scan_cpu.begin]
template <typename T, typename Fn, typename... In>
void RunScan(const Fn& fn, int64_t rows, int64_t cols, bool reverse, T* out, const In*... ins) {
  static_assert((std::is_same_v<In, T> && ...),
                "RunScan: every input has the output's storage type");
  using M = FloatMath<T>;
  using C = Compute<T>;
  using Op = typename ScanOpOf<Fn, C>::type;
  if (rows == 0 || cols == 0) return;
  ParallelForRows(rows, cols, [&](int64_t begin, int64_t end) {
    const Op op{};
    for (int64_t row = begin; row < end; ++row) {
      C prefix = Op::Identity();
      for (int64_t j = 0; j < cols; ++j) {
        const int64_t i = row * cols + (reverse ? cols - 1 - j : j);
        prefix = op(prefix, fn.Value(M::Load(ins[i])...));
        out[i] = M::Store(fn.Finish(prefix));
      }
    }
  });
}
// [scan_cpu.end]

}  // namespace host
}  // namespace scale_lib

#endif  // SCALE_LIB_KERNELS_SCAN_CPU_H_
