// SPDX-License-Identifier: Apache-2.0
// ParallelFor: CPU kernels split large inputs across threads.
//
// Threads are started per call and joined before it returns: nothing outlives a call (so the
// library stays fork-safe and has no pool to shut down), at the price of tens of microseconds per
// call, which is why only inputs of at least `min_per_thread` items per thread are split. Calls
// come from Python with the GIL released. SCALE_LIB_NUM_THREADS caps the thread count (default:
// the hardware's, at most 16: memory-bound kernels gain little beyond that).
#ifndef SCALE_LIB_KERNELS_CPU_PARALLEL_H_
#define SCALE_LIB_KERNELS_CPU_PARALLEL_H_

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <system_error>
#include <thread>
#include <vector>

namespace scale_lib {
namespace host {

// The smallest share of an elementwise or row-wise kernel worth a thread of its own: about 1 MB
// of float32, against the tens of microseconds a thread costs.
inline constexpr int64_t kMinItemsPerThread = int64_t{1} << 18;

inline int64_t MaxThreads() {
  static const int64_t threads = [] {
    if (const char* env = std::getenv("SCALE_LIB_NUM_THREADS")) {
      const long requested = std::strtol(env, nullptr, 10);
      if (requested >= 1) return static_cast<int64_t>(requested);
    }
    return std::clamp<int64_t>(std::thread::hardware_concurrency(), 1, 16);
  }();
  return threads;
}

// Calls body(begin, end) on disjoint ranges covering [0, n), each range a multiple of `align`
// items (but the last). `body` must not throw.
template <typename Body>
void ParallelFor(int64_t n, int64_t min_per_thread, int64_t align, const Body& body) {
  const int64_t threads = std::min(MaxThreads(), n / std::max<int64_t>(min_per_thread, 1));
  if (threads <= 1) {
    if (n > 0) body(0, n);
    return;
  }
  const int64_t chunk = ((n + threads - 1) / threads + align - 1) / align * align;
  std::vector<std::thread> workers;
  workers.reserve(static_cast<size_t>(threads - 1));
  int64_t begin = chunk;  // the calling thread takes [0, chunk)
  for (; begin < n; begin += chunk) {
    const int64_t end = std::min(n, begin + chunk);
    try {
      workers.emplace_back([&body, begin, end] { body(begin, end); });
    } catch (const std::system_error&) {
      break;  // no thread to be had: the calling thread does the rest
    }
  }
  body(0, std::min(n, chunk));
  for (; begin < n; begin += chunk) body(begin, std::min(n, begin + chunk));
  for (std::thread& worker : workers) worker.join();
}

}  // namespace host
}  // namespace scale_lib

#endif  // SCALE_LIB_KERNELS_CPU_PARALLEL_H_
