// SPDX-License-Identifier: Apache-2.0
// host::RunElementwise: the CPU launcher of elementwise ops (see kernels/elementwise.h).
//
//   host::RunElementwise<T>(fn, n, out, x, y, ...);
//
// runs out[i] = fn(x[i], y[i], ...) for i in [0, n), in fn's compute type. Every pointer is a
// T* (DataPtr<T>) of n contiguous elements.
#ifndef SCALE_LIB_KERNELS_ELEMENTWISE_CPU_H_
#define SCALE_LIB_KERNELS_ELEMENTWISE_CPU_H_

#include <cstdint>
#include <cstring>
#include <type_traits>
#include <utility>

#include "cpu_float.h"
#include "cpu_parallel.h"
#include "elementwise.h"

namespace scale_lib {
namespace host {
namespace elementwise {

// 16-bit types: a block of host::kBlock values of each input converted to float, the math on
// float arrays, the block converted back, all inlined into one loop (ConvertBlock); the
// last n % kBlock values through zero-padded blocks, by the same instructions. No __restrict__:
// out may be an input (in-place): a block is read whole before it is written. fn is taken by
// value (see PlainLoop).
template <typename T, typename Fn, typename Level, size_t... I, typename... In>
[[gnu::always_inline]] inline void BlockLoop(Level level, const Fn fn, int64_t n, T* out,
                                             std::index_sequence<I...>, const In*... ins) {
  constexpr size_t N = sizeof...(In);
  Compute<T> buf[N][kBlock];
  Compute<T> result[kBlock];
  int64_t start = 0;
  for (; start + kBlock <= n; start += kBlock) {
    (ConvertBlock(level, ins + start, buf[I]), ...);
    for (int k = 0; k < kBlock; ++k) result[k] = fn(buf[I][k]...);
    ConvertBlock(level, result, out + start);
  }
  if (start < n) {
    const auto tail = static_cast<size_t>(n - start);
    T block[N][kBlock] = {};
    T converted[kBlock];
    (std::memcpy(block[I], ins + start, tail * sizeof(T)), ...);
    (ConvertBlock(level, block[I], buf[I]), ...);
    for (int k = 0; k < kBlock; ++k) result[k] = fn(buf[I][k]...);
    ConvertBlock(level, result, converted);
    std::memcpy(out + start, converted, tail * sizeof(T));
  }
}

// float and double: one loop, which the compiler vectorises behind a runtime overlap check.
// fn is taken by value: a local copy, which no store through `out` can change, so its members
// stay in registers across the loop.
template <typename T, typename Fn, size_t... I, typename... In>
[[gnu::always_inline]] inline void PlainLoop(const Fn fn, int64_t n, T* out,
                                             std::index_sequence<I...>, const In*... ins) {
  for (int64_t i = 0; i < n; ++i) out[i] = fn(ins[i]...);
}

template <typename T, typename Fn, typename Level, size_t... I, typename... In>
[[gnu::always_inline]] inline void AnyLoop(Level level, const Fn& fn, int64_t n, T* out,
                                           std::index_sequence<I...> inputs, const In*... ins) {
  if constexpr (std::is_same_v<T, Compute<T>>) {
    PlainLoop<T>(fn, n, out, inputs, ins...);
  } else {
    BlockLoop<T>(level, fn, n, out, inputs, ins...);
  }
}

}  // namespace elementwise

// [run_elementwise.begin]
template <typename T, typename Fn, typename... In>
void RunElementwise(const Fn& fn, int64_t n, T* out, const In*... ins) {
  static_assert(sizeof...(In) >= 1 && (std::is_same_v<In, T> && ...),
                "RunElementwise: every input has the output's storage type");
  // Ranges of whole 64-element blocks, so each thread's vector loop starts aligned.
  ParallelFor(n, kMinItemsPerThread, 64, [&](int64_t begin, int64_t end) {
    // fn is inlined into each level's loop (RunWidest), so its math is vectorised 8 or 16 wide.
    RunWidest([&](auto level) SCALE_LIB_INLINE {
      elementwise::AnyLoop<T>(level, fn, end - begin, out + begin, std::index_sequence_for<In...>{},
                              (ins + begin)...);
    });
  });
}
// [run_elementwise.end]

}  // namespace host
}  // namespace scale_lib

#endif  // SCALE_LIB_KERNELS_ELEMENTWISE_CPU_H_
