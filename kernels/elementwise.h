// SPDX-License-Identifier: Apache-2.0
// Elementwise ops: the math is written once, as a function object in the op's header (compiled
// by both the host compiler and nvcc), and run by two shared launchers:
//   gpu::LaunchElementwise (kernels/elementwise.cuh): 16-byte vectors, aligned and unaligned
//     paths, the tail, a no-loop path for small inputs, 64-bit indices, the launch check;
//   host::RunElementwise (kernels/elementwise_cpu.h): threads for large inputs, loops the
//     compiler vectorises, 16-bit storage converted 16 values at a time inside them.
// The function object takes one value per input in the compute type C (float for 16-bit and
// float32 storage, double for float64) and returns the output's value in C. Its parameters
// (factors, ...) are members, converted to C once by the caller:
//
//   template <typename C>
//   struct ScaleFn {
//     C factor;
//     SCALE_LIB_HOST_DEVICE C operator()(C x) const { return x * factor; }
//   };
//
// Launchers read every input of an element before writing its output, and each element is
// read and written by one thread, so the output may be one of the inputs (in-place use).
#ifndef SCALE_LIB_KERNELS_ELEMENTWISE_H_
#define SCALE_LIB_KERNELS_ELEMENTWISE_H_

// Marks a function object's call operator for both devices (and inlines it).
#if defined(__CUDACC__)
#define SCALE_LIB_HOST_DEVICE __host__ __device__ __forceinline__
#else
#define SCALE_LIB_HOST_DEVICE inline
#endif

#endif  // SCALE_LIB_KERNELS_ELEMENTWISE_H_
