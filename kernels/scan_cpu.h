// SPDX-License-Identifier: Apache-2.0
// host::RunScan: the CPU launcher of scan ops (see kernels/scan.h).
//
//   host::RunScan<T>(fn, rows, cols, reverse, out, x, y, ...);
//
// Each row is scanned by one thread, the running combination (the function object's operator, see
// kernels/scan.h) in the operator's state (the compute type, or a product's m * 2^e); inputs of
// more than about a hundred kilobytes are split across the CPU pool by rows. A row is scanned
// kChunk elements at a time (unless its operator does not say that its stretches stay finite where
// the row does: then in order), each chunk as kSegments contiguous segments scanned side by side,
// then each segment's prefixes combined with the row's combination up to the segment
// (scan_cpu::ScanRow). One running combination makes every element wait for the one before (a sum:
// the latency of an addition an element); four independent ones keep the CPU's pipelines full, and
// the second pass vectorises. The grouping is fixed by the row's length: the same bits on any
// thread count and instruction set.
#ifndef SCALE_LIB_KERNELS_SCAN_CPU_H_
#define SCALE_LIB_KERNELS_SCAN_CPU_H_

#include <cstdint>
#include <type_traits>

#include "cpu_float.h"
#include "cpu_parallel.h"
#include "scan.h"

namespace scale_lib {
namespace host {

namespace scan_cpu {

// Four running combinations side by side hide the latency of one (an addition's, 3 to 4 cycles).
constexpr int kSegments = 4;
// Elements a chunk: their prefixes, in the operator's state (16 to 64 KB), stay in the nearest
// cache for the second pass.
constexpr int64_t kChunk = 4096;
// Shorter rows are scanned in order, in one pass: there the second pass costs more than it saves.
constexpr int64_t kSegmentedFrom = 64;

// [scan_row.begin]
// One row, from its end with kReverse; out and ins point at the row's first element.
template <bool kReverse, typename T, typename Fn, typename... In>
[[gnu::always_inline]] inline void ScanRow(const Fn& fn, int64_t cols, T* out, const In*... ins) {
  using M = FloatMath<T>;
  using C = Compute<T>;
  using Op = typename ScanOpOf<Fn, C>::type;
  using Carry = ScanCarry<Op, C>;
  using S = typename Carry::State;
  const Op op{};
  S before = Op::Identity();  // the row's combination up to the current segment
  // Short rows, and operators that do not say that their stretches stay finite (kernels/scan.h):
  // in order, one pass.
  if (cols < kSegmentedFrom || !StretchesStayFinite<Op>::value) {
    for (int64_t j = 0; j < cols; ++j) {
      const int64_t i = kReverse ? cols - 1 - j : j;
      before = op(before, Carry::Lift(fn.Value(M::Load(ins[i])...)));
      out[i] = M::Store(fn.Finish(Carry::Lower(before)));
    }
    return;
  }
  S prefixes[kChunk];  // each segment's own running combination, by chunk position
  for (int64_t start = 0; start < cols; start += kChunk) {
    // The element at chunk position q, in scan order.
    const auto at = [&](int64_t q)
                        SCALE_LIB_INLINE { return kReverse ? cols - 1 - (start + q) : start + q; };
    const int64_t len = cols - start < kChunk ? cols - start : kChunk;
    const int64_t seg = len / kSegments;  // the length of every segment but the last
    S running[kSegments];
    for (int s = 0; s < kSegments; ++s) running[s] = Op::Identity();
    for (int64_t j = 0; j < seg; ++j) {
      for (int s = 0; s < kSegments; ++s) {
        const int64_t q = s * seg + j;
        running[s] = op(running[s], Carry::Lift(fn.Value(M::Load(ins[at(q)])...)));
        prefixes[q] = running[s];
      }
    }
    for (int64_t q = kSegments * seg; q < len; ++q) {  // the last segment's extra elements
      running[kSegments - 1] =
          op(running[kSegments - 1], Carry::Lift(fn.Value(M::Load(ins[at(q)])...)));
      prefixes[q] = running[kSegments - 1];
    }
    // Every element of the chunk has been read: now it is written (out may be an input).
    for (int s = 0; s < kSegments; ++s) {
      const int64_t end = s == kSegments - 1 ? len : (s + 1) * seg;
      for (int64_t q = s * seg; q < end; ++q) {
        out[at(q)] = M::Store(fn.Finish(Carry::Lower(op(before, prefixes[q]))));
      }
      before = op(before, running[s]);
    }
  }
}
// [scan_row.end]

}  // namespace scan_cpu

// [scan_cpu.begin]
template <typename T, typename Fn, typename... In>
void RunScan(const Fn& fn, int64_t rows, int64_t cols, bool reverse, T* out, const In*... ins) {
  static_assert((std::is_same_v<In, T> && ...),
                "RunScan: every input has the output's storage type");
  if (rows == 0 || cols == 0) return;
  ParallelForRows(rows, cols, [&](int64_t begin, int64_t end) {
    // Compiled for each instruction set (RunWidest): the second pass vectorises.
    RunWidest([&]() SCALE_LIB_INLINE {
      for (int64_t row = begin; row < end; ++row) {
        const int64_t base = row * cols;
        if (reverse) {
          scan_cpu::ScanRow<true>(fn, cols, out + base, (ins + base)...);
        } else {
          scan_cpu::ScanRow<false>(fn, cols, out + base, (ins + base)...);
        }
      }
    });
  });
}
// [scan_cpu.end]

}  // namespace host
}  // namespace scale_lib

#endif  // SCALE_LIB_KERNELS_SCAN_CPU_H_
