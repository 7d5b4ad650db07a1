// SPDX-License-Identifier: Apache-2.0
// IeeeSubnormals: the one floating-point mode of the library's CPU code. Every CPU kernel runs
// with subnormal numbers honoured (no flush-to-zero, no denormals-are-zero), on the calling
// thread (SCALE_LIB_ROUTE_BY_DEVICE) and on every pool thread (host::ParallelFor), whatever mode
// the caller's thread or the thread that started the pool was in: the same input gives the same
// bits from every caller and with any thread count.
#ifndef SCALE_LIB_FLOAT_ENV_H_
#define SCALE_LIB_FLOAT_ENV_H_

#include <cstdint>

#if defined(__x86_64__) || defined(__i386__)
#include <xmmintrin.h>
#endif

namespace scale_lib {

// Subnormal numbers are honoured while the guard lives, whatever the thread's mode was: some
// callers run the library on threads with flush-to-zero and denormals-are-zero on (XLA's CPU
// threads; PyTorch after torch.set_flush_denormal(True)). The thread's mode is restored after.
// Kernel authors do not construct it: the routing macro and ParallelFor do.
class IeeeSubnormals {
 public:
  IeeeSubnormals() {
#if defined(__x86_64__) || defined(__i386__)
    saved_ = _mm_getcsr();
    if (saved_ & kFlushBits) _mm_setcsr(saved_ & ~kFlushBits);
#elif defined(__aarch64__)
    __asm__ __volatile__("mrs %0, fpcr" : "=r"(saved_));
    if (saved_ & kFlushBits) __asm__ __volatile__("msr fpcr, %0" : : "r"(saved_ & ~kFlushBits));
#endif
  }
  ~IeeeSubnormals() {
#if defined(__x86_64__) || defined(__i386__)
    if (saved_ & kFlushBits) _mm_setcsr(saved_);
#elif defined(__aarch64__)
    if (saved_ & kFlushBits) __asm__ __volatile__("msr fpcr, %0" : : "r"(saved_));
#endif
  }
  IeeeSubnormals(const IeeeSubnormals&) = delete;
  IeeeSubnormals& operator=(const IeeeSubnormals&) = delete;

 private:
#if defined(__x86_64__) || defined(__i386__)
  static constexpr unsigned int kFlushBits = 0x8040u;  // MXCSR: flush-to-zero, denormals-are-zero
  unsigned int saved_ = 0;
#elif defined(__aarch64__)
  static constexpr uint64_t kFlushBits =
      (uint64_t{1} << 24) | (uint64_t{1} << 19);  // FPCR FZ, FZ16
  uint64_t saved_ = 0;
#else
  static constexpr unsigned int kFlushBits = 0;
  unsigned int saved_ = 0;
#endif
};

}  // namespace scale_lib

#endif  // SCALE_LIB_FLOAT_ENV_H_
