// The NVIDIA driver this build of the CUDA kernels needs, checked once before the first CUDA call.
//
// A library built with CUDA toolkit X.Y links the X.Y runtime statically and runs on any driver
// that supports CUDA X.0 or newer (CUDA minor-version compatibility); a driver older than that
// cannot run it at all. CheckCudaDriver() turns that case into a RuntimeError naming both
// versions, instead of an opaque error from the first kernel launch. Defined in
// kernels/cuda_driver.cu (CUDA builds only).
#ifndef SCALE_LIB_CUDA_DRIVER_H_
#define SCALE_LIB_CUDA_DRIVER_H_

namespace scale_lib {

// Versions are encoded as CUDA encodes them: 1000 * major + 10 * minor (12090 is 12.9).

// The CUDA runtime this library was compiled with and links statically (CUDART_VERSION).
int CudaRuntimeVersion();

// The oldest CUDA version a driver must support to run this library: the runtime's major, .0.
int MinimumCudaDriverVersion();

// The CUDA version the installed driver supports (cudaDriverGetVersion); 0 when no driver is
// installed. Read once per process. The environment variable SCALE_LIB_FAKE_CUDA_DRIVER_VERSION
// (same encoding) replaces it, so that the check can be tested without an old driver.
int CudaDriverVersion();

// Raises RuntimeError if a driver is installed and supports a CUDA version older than
// MinimumCudaDriverVersion(). Without any driver it returns, and the CUDA call that follows
// reports the missing driver itself. Thread-safe; the driver is queried once.
void CheckCudaDriver();

}  // namespace scale_lib

#endif  // SCALE_LIB_CUDA_DRIVER_H_
