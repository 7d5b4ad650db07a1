// SPDX-License-Identifier: Apache-2.0
// IeeeSubnormals: host code that must see subnormal numbers as such, whatever the calling
// thread's floating-point mode.
#ifndef SCALE_LIB_KERNELS_FLOAT_ENV_H_
#define SCALE_LIB_KERNELS_FLOAT_ENV_H_

#include <cstdint>

#if defined(__x86_64__) || defined(__i386__)
#include <xmmintrin.h>
#endif

namespace scale_lib {

// Subnormal numbers are honoured while the guard lives, whatever the thread's mode was: some
// callers run the library on threads with flush-to-zero and denormals-are-zero on (XLA's CPU
// threads), where a subnormal eps would count as zero. The caller's mode is restored after.
// Used by the code whose documented result depends on it (rms_norm's eps); the others run in
// the caller's mode, as the caller's own operations do.
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

#endif  // SCALE_LIB_KERNELS_FLOAT_ENV_H_
