// SPDX-License-Identifier: Apache-2.0
// ParallelFor: CPU kernels split large inputs across threads.
//
// The threads are a process-wide pool, started on the first call that needs them, spinning
// briefly and then asleep between calls: handing them work costs microseconds where starting a
// thread costs tens, so inputs of `min_per_thread` items per thread are worth splitting. One call
// uses the pool at a time; a call made while another holds it (from another Python thread) runs on
// its own thread instead of waiting. In a process forked from one that started the pool, the pool
// is started afresh (the child has none of the parent's threads). Calls come from Python with the
// GIL released. Every task runs in the library's floating-point environment (float_env.h: round
// to nearest, subnormals honoured), whatever the environment of the caller or of the thread that
// started the pool, and an exception thrown by a task (std::bad_alloc, say) is caught on its
// thread and rethrown to the caller once every task of the call has ended: none escapes a pool
// thread, and a failed call leaves the pool as usable as before. SCALE_LIB_NUM_THREADS caps the
// thread count (at most 1024; default: the hardware's, at most 16: memory-bound kernels gain
// little beyond that).
#ifndef SCALE_LIB_KERNELS_CPU_PARALLEL_H_
#define SCALE_LIB_KERNELS_CPU_PARALLEL_H_

#include <pthread.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdlib>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>

#include "float_env.h"

namespace scale_lib {
namespace host {

// The smallest share of an elementwise or row-wise kernel worth a thread of its own: 128 KB of
// float32 (PyTorch's grain size too), several microseconds of work against the one or two of
// handing it to a spinning thread. Not less: while a framework's own CPU threads are busy (after
// a PyTorch op, its OpenMP threads spin on every core for a while), a worker that is descheduled
// holding a share delays the whole call, and small inputs are better off on the calling thread.
inline constexpr int64_t kMinItemsPerThread = int64_t{1} << 15;

// The most threads SCALE_LIB_NUM_THREADS may ask for.
inline constexpr long kThreadsCap = 1024;

inline int64_t MaxThreads() {
  static const int64_t threads = [] {
    if (const char* env = std::getenv("SCALE_LIB_NUM_THREADS")) {
      const long requested = std::strtol(env, nullptr, 10);
      if (requested >= 1) return static_cast<int64_t>(std::min(requested, kThreadsCap));
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
// Task i belongs to thread i (the caller is thread 0, worker k thread k), which is the one woken
// for it and claims it first, then any task still unclaimed; threads past the task count stay
// out. So a task goes to the same thread from one call to the next, as OpenMP's static schedule
// does, and finds its part of an input that fits the caches (a decode step's activations) in its
// own core's: a region of 1 MB in and out on two cores took 52-54 us when its tasks went to
// whichever thread asked first, 21-24 this way. And a region is over when its tasks have run, not
// when every worker has looked in: a worker the scheduler is slow to run (the cores busy with
// another pool, say a framework's OpenMP threads) leaves its task to the threads that are
// running, the caller included, instead of holding the region up. Never destroyed: its threads
// wait until the process ends (the library is never unloaded).
class WorkerPool {
 public:
  // Up to `workers` threads of its own, and regions of up to workers + 1 tasks.
  explicit WorkerPool(int64_t workers)
      : claimed_(new std::atomic<uint64_t>[workers + 1]()),
        wakes_(new std::condition_variable[workers + 1]) {
    for (int64_t i = 1; i <= workers; ++i) {
      try {
        std::thread([this, i] { Work(i); }).detach();
        ++workers_;
      } catch (...) {  // std::system_error, or std::bad_alloc under memory pressure
        break;  // no more threads to be had: the pool works with those it has
      }
    }
  }

  // Runs task(i) for every i in [0, tasks) (tasks <= MaxThreads(), the pool's `workers` + 1) and
  // returns when all have run; false, having run nothing, when another region holds the pool.
  bool TryRun(int64_t tasks, const std::function<void(int64_t)>& task) {
    std::unique_lock<std::mutex> region(region_mutex_, std::try_to_lock);
    if (!region.owns_lock() || workers_ == 0) return false;
    task_ = &task;
    done_.store(0, std::memory_order_relaxed);
    const uint64_t generation = Generation(state_.load(std::memory_order_relaxed)) + 1;
    {
      // Under the mutex, so that a worker about to sleep sees the new region or its wake-up.
      std::lock_guard<std::mutex> lock(mutex_);
      state_.store(generation << kCountBits | static_cast<uint64_t>(tasks),
                   std::memory_order_release);
    }
    for (int64_t i = 1; i < std::min(tasks, workers_ + 1); ++i) wakes_[i].notify_one();
    RunTasks(0);  // every task left unclaimed, so the wait below ends
    const auto deadline = std::chrono::steady_clock::now() + kSpin;
    while (done_.load(std::memory_order_acquire) < tasks) {
      if (std::chrono::steady_clock::now() < deadline) {
        CpuRelax();
      } else {
        std::this_thread::yield();
      }
    }
    return true;
  }

 private:
  // state_: the region's task count (bits 0-10: at most MaxThreads()) and its generation (bits
  // 11-63: 2^53 regions, centuries of a million a second; Claim needs them to grow).
  static constexpr int kCountBits = 11;
  static_assert(kThreadsCap < (1L << kCountBits), "a task count fits its bits");
  static uint64_t Generation(uint64_t state) { return state >> kCountBits; }
  static int64_t TaskCount(uint64_t state) {
    return static_cast<int64_t>(state & ((uint64_t{1} << kCountBits) - 1));
  }

  // Claims task i for the region of `generation`: claimed_[i] holds the generation of the last
  // region that claimed it, so a claim fails once the task is taken, and for a stale region
  // (every task of which was claimed before it ended). The values only grow, so a thread still
  // running a stale region cannot take a newer region's task; a relaxed load suffices, as the
  // compare-and-swap reads the latest value, and a claimer of the current region has acquired
  // state_, after every claim of the regions before.
  bool Claim(int64_t i, uint64_t generation) {
    uint64_t seen = claimed_[i].load(std::memory_order_relaxed);
    return seen < generation &&
           claimed_[i].compare_exchange_strong(seen, generation, std::memory_order_acq_rel);
  }

  // Runs task `own` of the current region if it is still unclaimed, then every task still
  // unclaimed, upwards from it; a thread with no task of its own in the region does nothing
  // (taking others' would take them from their threads). task_ is read only for a claimed task:
  // the region (and its task) lasts until every claimed task is done.
  void RunTasks(int64_t own) {
    const uint64_t state = state_.load(std::memory_order_acquire);
    const uint64_t generation = Generation(state);
    const int64_t tasks = TaskCount(state);
    if (own >= tasks) return;
    for (int64_t k = 0; k < tasks; ++k) {
      const int64_t i = (own + k) % tasks;
      if (Claim(i, generation)) {
        (*task_)(i);
        done_.fetch_add(1, std::memory_order_release);
      }
    }
  }

  // Waits for a region after generation `seen`: spinning for kSpin, then asleep until a region
  // with a task for thread `index` wakes it.
  uint64_t WaitForRegion(uint64_t seen, int64_t index) {
    const auto fresh = [&] { return Generation(state_.load(std::memory_order_acquire)) != seen; };
    const auto deadline = std::chrono::steady_clock::now() + kSpin;
    while (std::chrono::steady_clock::now() < deadline) {
      for (int i = 0; i < 64; ++i) {
        if (fresh()) return Generation(state_.load(std::memory_order_acquire));
        CpuRelax();
      }
    }
    std::unique_lock<std::mutex> lock(mutex_);
    wakes_[index].wait(lock, fresh);
    return Generation(state_.load(std::memory_order_acquire));
  }

  void Work(int64_t index) {
    // A thread starts in the environment of the thread that started it (a caller's rounding
    // direction, say): the worker's own is the library's for good, so the guard of each task
    // (ParallelFor) finds nothing to change. That guard still runs: it is what makes a task's
    // environment the library's, whatever happened on the thread before.
    const IeeeSubnormals ieee;
    uint64_t seen = 0;
    for (;;) {
      seen = WaitForRegion(seen, index);
      RunTasks(index);
    }
  }

  std::mutex region_mutex_;  // held by the region using the pool
  std::mutex mutex_;  // parks the workers
  // The region's task, published to the workers by the release store of state_.
  const std::function<void(int64_t)>* task_ = nullptr;
  std::atomic<uint64_t> state_{0};
  std::unique_ptr<std::atomic<uint64_t>[]> claimed_;  // per task (workers + 1): Claim
  std::unique_ptr<std::condition_variable[]> wakes_;   // per thread (workers + 1; 0 unused)
  std::atomic<int64_t> done_{0};  // the current region's tasks that have run
  int64_t workers_ = 0;
};

inline pthread_mutex_t pool_creation = PTHREAD_MUTEX_INITIALIZER;
inline WorkerPool* pool = nullptr;

// A forked child has only the forking thread: it starts a pool of its own when it needs one
// (the parent's, with its locks possibly held, is left alone).
inline void ForgetPoolInChild() {
  pool_creation = PTHREAD_MUTEX_INITIALIZER;
  pool = nullptr;
}

// Throws std::bad_alloc, with no pool made and nothing held, when the pool cannot be allocated.
inline WorkerPool& Pool() {
  pthread_mutex_lock(&pool_creation);
  if (pool == nullptr) {
    static const bool registered = pthread_atfork(nullptr, nullptr, ForgetPoolInChild) == 0;
    (void)registered;
    try {
      pool = new WorkerPool(MaxThreads() - 1);
    } catch (...) {
      pthread_mutex_unlock(&pool_creation);
      throw;
    }
  }
  WorkerPool& result = *pool;
  pthread_mutex_unlock(&pool_creation);
  return result;
}

}  // namespace detail

// Calls body(begin, end) on disjoint ranges covering [0, n), each range a multiple of `align`
// items (but the last), on up to MaxThreads() threads with at least `min_per_thread` items each,
// every one in the library's floating-point environment. If `body` throws, the first exception is
// rethrown here after every range has ended (the others may or may not have run).
template <typename Body>
void ParallelFor(int64_t n, int64_t min_per_thread, int64_t align, const Body& body) {
  const int64_t threads = std::min(MaxThreads(), n / std::max<int64_t>(min_per_thread, 1));
  if (threads <= 1) {
    const IeeeSubnormals ieee;
    if (n > 0) body(0, n);
    return;
  }
  const int64_t chunk = ((n + threads - 1) / threads + align - 1) / align * align;
  const int64_t chunks = (n + chunk - 1) / chunk;
  std::exception_ptr error;
  std::atomic<bool> failed{false};
  const std::function<void(int64_t)> task = [&](int64_t i) noexcept {
    const IeeeSubnormals ieee;
    try {
      body(i * chunk, std::min(n, (i + 1) * chunk));
    } catch (...) {
      if (!failed.exchange(true, std::memory_order_acq_rel)) error = std::current_exception();
    }
  };
  if (!detail::Pool().TryRun(chunks, task)) {  // the pool is busy: run here
    const IeeeSubnormals ieee;
    body(0, n);
  }
  if (error) std::rethrow_exception(error);
}

// ParallelFor over the rows of a rows x cols problem (row-wise kernels, scans): body(begin, end)
// gets whole rows, at least kMinItemsPerThread elements' worth on each thread, divided by
// cost_per_item where an element costs as much as several simple ones (an exp per element).
template <typename Body>
void ParallelForRows(int64_t rows, int64_t cols, const Body& body, int64_t cost_per_item = 1) {
  const int64_t min_items = kMinItemsPerThread / std::max<int64_t>(cost_per_item, 1);
  ParallelFor(rows, std::max<int64_t>(1, min_items / std::max<int64_t>(cols, 1)), 1, body);
}

}  // namespace host
}  // namespace scale_lib

#endif  // SCALE_LIB_KERNELS_CPU_PARALLEL_H_
