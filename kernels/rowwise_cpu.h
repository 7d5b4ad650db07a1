// SPDX-License-Identifier: Apache-2.0
// host::RunRowwise: the CPU launcher of row-wise ops (see kernels/rowwise.h).
//
//   host::RunRowwise<T>(fn, rows, cols, out, x, y, ...);
//
// Each row is summed and then written by one thread; inputs of more than about a megabyte are
// split across threads by rows.
#ifndef SCALE_LIB_KERNELS_ROWWISE_CPU_H_
#define SCALE_LIB_KERNELS_ROWWISE_CPU_H_

#include <cstdint>
#include <type_traits>

#include "cpu_float.h"
#include "cpu_parallel.h"
#include "rowwise.h"

namespace scale_lib {
namespace host {

template <typename T, typename Fn, typename... In>
void RunRowwise(const Fn& fn, int64_t rows, int64_t cols, T* out, const In*... ins) {
  static_assert((std::is_same_v<In, T> && ...),
                "RunRowwise: every input has the output's storage type");
  using M = FloatMath<T>;
  using C = Compute<T>;
  if (rows == 0 || cols == 0) return;
  ParallelForRows(rows, cols, [&](int64_t begin, int64_t end) {
    for (int64_t row = begin; row < end; ++row) {
      const int64_t base = row * cols;
      C sum = 0;
      for (int64_t i = 0; i < cols; ++i) sum += fn.Term(fn.Value(M::Load(ins[base + i])...));
      for (int64_t i = 0; i < cols; ++i) {
        out[base + i] = M::Store(fn.Finish(fn.Value(M::Load(ins[base + i])...), sum, cols));
      }
    }
  });
}

}  // namespace host
}  // namespace scale_lib

#endif  // SCALE_LIB_KERNELS_ROWWISE_CPU_H_
