// SPDX-License-Identifier: Apache-2.0
// IeeeSubnormals: the one floating-point environment of the library's CPU code, IEEE 754's
// default: round to nearest-even, subnormal numbers honoured (no flush-to-zero, no
// denormals-are-zero) and no floating-point traps (an overflow gives inf, an invalid operation
// NaN). Every CPU kernel runs in it, on the calling thread (SCALE_LIB_ROUTE_BY_DEVICE) and on
// every pool thread (host::ParallelFor), whatever environment the caller's thread or the thread
// that started the pool was in: the same input gives the same bits from every caller and with
// any thread count.
#ifndef SCALE_LIB_FLOAT_ENV_H_
#define SCALE_LIB_FLOAT_ENV_H_

#include <cstdint>

namespace scale_lib {

// The library's environment while the guard lives, whatever the thread's was: some callers run
// the library on threads with flush-to-zero and denormals-are-zero on (XLA's CPU threads; PyTorch
// after torch.set_flush_denormal(True)), others with another rounding direction (fesetround) or
// with traps enabled (feenableexcept), and the pool's threads inherit the environment of the
// thread that started them. The thread's environment is restored after, exactly as it was.
// Named for its first duty; it sets the whole environment. Every CPU call constructs one, so it
// reads the control registers and writes them only where they differ from the library's (a few
// cycles when the caller is in the default environment, the common case). Kernel authors do not
// construct it: the routing macro and ParallelFor do.
// The control registers are written by asm statements that clobber "memory": the compiler keeps
// the kernel's loads and stores between the guard's set and its restore.
class IeeeSubnormals {
 public:
  IeeeSubnormals() {
#if defined(__x86_64__) || defined(__i386__)
    // SSE arithmetic (all of the kernels' float math) follows MXCSR; x87 arithmetic (long double,
    // and some libm functions) its own control word, which fesetround sets too.
    __asm__ __volatile__("stmxcsr %0" : "=m"(mxcsr_));
    if ((mxcsr_ & kMxcsrControl) != kMxcsrIeee) {
      const uint32_t ieee = (mxcsr_ & ~kMxcsrControl) | kMxcsrIeee;
      __asm__ __volatile__("ldmxcsr %0" : : "m"(ieee) : "memory");
      restore_ |= kRestoreMxcsr;
    }
    __asm__ __volatile__("fnstcw %0" : "=m"(x87_));
    if ((x87_ & kX87Control) != kX87Ieee) {
      const uint16_t ieee = static_cast<uint16_t>((x87_ & ~kX87Control) | kX87Ieee);
      __asm__ __volatile__("fldcw %0" : : "m"(ieee) : "memory");
      restore_ |= kRestoreX87;
    }
#elif defined(__aarch64__)
    __asm__ __volatile__("mrs %0, fpcr" : "=r"(fpcr_) : : "memory");
    if (fpcr_ & kFpcrControl) {
      const uint64_t ieee = fpcr_ & ~kFpcrControl;
      __asm__ __volatile__("msr fpcr, %0" : : "r"(ieee) : "memory");
      restore_ = true;
    }
#endif
  }
  ~IeeeSubnormals() {
#if defined(__x86_64__) || defined(__i386__)
    if (restore_ & kRestoreMxcsr) __asm__ __volatile__("ldmxcsr %0" : : "m"(mxcsr_) : "memory");
    if (restore_ & kRestoreX87) __asm__ __volatile__("fldcw %0" : : "m"(x87_) : "memory");
#elif defined(__aarch64__)
    if (restore_) __asm__ __volatile__("msr fpcr, %0" : : "r"(fpcr_) : "memory");
#endif
  }
  IeeeSubnormals(const IeeeSubnormals&) = delete;
  IeeeSubnormals& operator=(const IeeeSubnormals&) = delete;

 private:
#if defined(__x86_64__) || defined(__i386__)
  // MXCSR: bits 0-5 are the sticky exception flags, not part of the comparison; the control
  // bits are denormals-are-zero (6), the exception masks (7-12), the rounding control (13-14)
  // and flush-to-zero (15). The library's: every exception masked, round to nearest, no flushing.
  static constexpr uint32_t kMxcsrControl = 0xFFC0u;
  static constexpr uint32_t kMxcsrIeee = 0x1F80u;
  // x87 control word: the exception masks (0-5), precision control (8-9) and rounding control
  // (10-11). The library's (the x86-64 ABI's initial one): every exception masked, 64-bit
  // significands, round to nearest.
  static constexpr uint16_t kX87Control = 0x0F3Fu;
  static constexpr uint16_t kX87Ieee = 0x033Fu;
  static constexpr unsigned int kRestoreMxcsr = 1u;
  static constexpr unsigned int kRestoreX87 = 2u;
  uint32_t mxcsr_ = 0;
  uint16_t x87_ = 0;
  unsigned int restore_ = 0;
#elif defined(__aarch64__)
  // FPCR bits that change results, all 0 in the library's environment: FIZ, AH, NEP (0-2,
  // FEAT_AFP: flushing inputs, alternate NaN and subnormal handling; read as 0 without it), the
  // trap enables IOE, DZE, OFE, UFE, IXE (8-12) and IDE (15), EBF (13, FEAT_EBF16), FZ16 (19),
  // RMode (22-23, 0: round to nearest), FZ (24), DN (25, default NaN) and AHP (26, alternative
  // half precision).
  static constexpr uint64_t kFpcrControl = uint64_t{0x7} | uint64_t{0x1F} << 8 | uint64_t{1} << 13 |
                                           uint64_t{1} << 15 | uint64_t{1} << 19 |
                                           uint64_t{3} << 22 | uint64_t{7} << 24;
  uint64_t fpcr_ = 0;
  bool restore_ = false;
#endif
};

}  // namespace scale_lib

#endif  // SCALE_LIB_FLOAT_ENV_H_
