// SPDX-License-Identifier: Apache-2.0
// ParallelFor: CPU kernels split large inputs across threads.
//
// The threads are a process-wide pool, started on the first call that needs them, spinning
// briefly and then asleep between calls: handing them work costs microseconds where starting a
// thread costs tens, so inputs of `min_per_thread` items per thread are worth splitting. One call
// uses the pool at a time; a call made while another holds it (from another Python thread) runs on
// its own thread instead of waiting. In a process forked from one that started the pool, the pool
// is started afresh (the child has none of the parent's threads). Calls come from Python with the
// GIL released. SCALE_LIB_NUM_THREADS caps the thread count (default: the hardware's, at most 16:
// memory-bound kernels gain little beyond that).
#ifndef SCALE_LIB_KERNELS_CPU_PARALLEL_H_
#define SCALE_LIB_KERNELS_CPU_PARALLEL_H_

#include <pthread.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <mutex>
#include <system_error>
#include <thread>

namespace scale_lib {
namespace host {

// The smallest share of an elementwise or row-wise kernel worth a thread of its own: about
// 256 KB of float32, against the few microseconds of waking a parked thread.
inline constexpr int64_t kMinItemsPerThread = int64_t{1} << 16;

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

namespace detail {

// How long an idle worker, and a caller waiting for its workers, spin before they sleep: waking a
// sleeping thread can take tens of microseconds on a virtual machine, about what a decode-size
// kernel takes, and the calls of a model step come back to back.
inline constexpr auto kSpin = std::chrono::microseconds(100);

inline void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#else
  std::this_thread::yield();
#endif
}

// Parked workers that run the tasks of one parallel region at a time, with the calling thread.
// Never destroyed: its threads wait until the process ends (the library is never unloaded).
class WorkerPool {
 public:
  explicit WorkerPool(int64_t workers) {
    for (int64_t i = 0; i < workers; ++i) {
      try {
        std::thread([this] { Work(); }).detach();
        ++workers_;
      } catch (const std::system_error&) {
        break;  // no more threads to be had: the pool works with those it has
      }
    }
  }

  // Runs task(i) for every i in [0, tasks) and returns when all have run; false, having run
  // nothing, when another region holds the pool.
  bool TryRun(int64_t tasks, const std::function<void(int64_t)>& task) {
    std::unique_lock<std::mutex> region(region_mutex_, std::try_to_lock);
    if (!region.owns_lock() || workers_ == 0) return false;
    task_ = &task;
    tasks_ = tasks;
    next_.store(0, std::memory_order_relaxed);
    busy_.store(workers_, std::memory_order_relaxed);
    {
      // Under the mutex, so that a worker about to sleep sees the new region or its wake-up.
      std::lock_guard<std::mutex> lock(mutex_);
      generation_.fetch_add(1, std::memory_order_release);
    }
    wake_.notify_all();
    RunTasks(task, tasks);
    const auto deadline = std::chrono::steady_clock::now() + kSpin;
    while (busy_.load(std::memory_order_acquire) != 0) {
      if (std::chrono::steady_clock::now() < deadline) {
        CpuRelax();
      } else {
        std::this_thread::yield();
      }
    }
    task_ = nullptr;
    return true;
  }

 private:
  void RunTasks(const std::function<void(int64_t)>& task, int64_t tasks) {
    for (int64_t i = next_.fetch_add(1); i < tasks; i = next_.fetch_add(1)) task(i);
  }

  // Waits for a region after `seen`: spinning for kSpin, then asleep.
  uint64_t WaitForRegion(uint64_t seen) {
    const auto deadline = std::chrono::steady_clock::now() + kSpin;
    while (std::chrono::steady_clock::now() < deadline) {
      for (int i = 0; i < 64; ++i) {
        const uint64_t generation = generation_.load(std::memory_order_acquire);
        if (generation != seen) return generation;
        CpuRelax();
      }
    }
    std::unique_lock<std::mutex> lock(mutex_);
    wake_.wait(lock, [&] { return generation_.load(std::memory_order_acquire) != seen; });
    return generation_.load(std::memory_order_acquire);
  }

  void Work() {
    uint64_t seen = 0;
    for (;;) {
      seen = WaitForRegion(seen);
      RunTasks(*task_, tasks_);
      busy_.fetch_sub(1, std::memory_order_acq_rel);
    }
  }

  std::mutex region_mutex_;  // held by the region using the pool
  std::mutex mutex_;         // parks the workers
  std::condition_variable wake_;
  // The region's task, published to the workers by the generation_ increment.
  const std::function<void(int64_t)>* task_ = nullptr;
  int64_t tasks_ = 0;
  std::atomic<int64_t> next_{0};
  int64_t workers_ = 0;
  std::atomic<int64_t> busy_{0};  // workers still in the current region
  std::atomic<uint64_t> generation_{0};
};

inline pthread_mutex_t pool_creation = PTHREAD_MUTEX_INITIALIZER;
inline WorkerPool* pool = nullptr;

// A forked child has only the forking thread: it starts a pool of its own when it needs one
// (the parent's, with its locks possibly held, is left alone).
inline void ForgetPoolInChild() {
  pool_creation = PTHREAD_MUTEX_INITIALIZER;
  pool = nullptr;
}

inline WorkerPool& Pool() {
  pthread_mutex_lock(&pool_creation);
  if (pool == nullptr) {
    static const bool registered = pthread_atfork(nullptr, nullptr, ForgetPoolInChild) == 0;
    (void)registered;
    pool = new WorkerPool(MaxThreads() - 1);
  }
  WorkerPool& result = *pool;
  pthread_mutex_unlock(&pool_creation);
  return result;
}

}  // namespace detail

// Calls body(begin, end) on disjoint ranges covering [0, n), each range a multiple of `align`
// items (but the last), on up to MaxThreads() threads with at least `min_per_thread` items each.
// `body` must not throw.
template <typename Body>
void ParallelFor(int64_t n, int64_t min_per_thread, int64_t align, const Body& body) {
  const int64_t threads = std::min(MaxThreads(), n / std::max<int64_t>(min_per_thread, 1));
  if (threads <= 1) {
    if (n > 0) body(0, n);
    return;
  }
  const int64_t chunk = ((n + threads - 1) / threads + align - 1) / align * align;
  const int64_t chunks = (n + chunk - 1) / chunk;
  const std::function<void(int64_t)> task = [&](int64_t i) {
    body(i * chunk, std::min(n, (i + 1) * chunk));
  };
  if (!detail::Pool().TryRun(chunks, task)) body(0, n);  // the pool is busy: run here
}

}  // namespace host
}  // namespace scale_lib

#endif  // SCALE_LIB_KERNELS_CPU_PARALLEL_H_
