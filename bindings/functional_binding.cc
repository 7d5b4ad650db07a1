// Functional forms: <op>_new(x, ...) returns a new output, allocated through the calling
// framework's allocator (PyTorch, Paddle), so that an allocating call from Python is one call
// into the library instead of an allocation in Python and a call. Each runs the op's own
// binding, with all of its checks; the arguments are those of the op without its output.
// Callers that publish no allocator get library-owned host memory on the CPU (as flatnonzero's
// result) and a ValueError on CUDA.
#include "axpby.h"
#include "l2_norm.h"
#include "rms_norm.h"
#include "scale.h"

namespace scale_lib {

// The bindings (bindings/<op>_binding.cc).
void Scale(ffi::TensorView out, ffi::TensorView x, double factor);
void Axpby(ffi::TensorView out, ffi::TensorView x, ffi::TensorView y, double a, double b);
void RmsNorm(ffi::TensorView out, ffi::TensorView x, ffi::Optional<ffi::TensorView> weight,
             double eps);
void L2Norm(ffi::TensorView out, ffi::TensorView x);

namespace {

// out = a new contiguous array with x's shape (or `shape`), dtype and device; then fn(out, x, ...).
template <auto kFn, typename... Args>
ffi::Tensor New(ffi::ShapeView shape, ffi::TensorView x, Args... args) {
  const bool cpu = detail::CheckSupportedDevice(x, "x") == kDLCPU;  // before allocating on it
  ffi::Tensor out =
      cpu ? AllocHostResult(shape, x.dtype()) : AllocFromFramework(shape, x.dtype(), x.device());
  kFn(out, x, std::move(args)...);
  return out;
}

ffi::Tensor ScaleNew(ffi::TensorView x, double factor) { return New<&Scale>(x.shape(), x, factor); }

ffi::Tensor AxpbyNew(ffi::TensorView x, ffi::TensorView y, double a, double b) {
  return New<&Axpby>(x.shape(), x, y, a, b);
}

ffi::Tensor RmsNormNew(ffi::TensorView x, ffi::Optional<ffi::TensorView> weight, double eps) {
  return New<&RmsNorm>(x.shape(), x, weight, eps);
}

ffi::Tensor L2NormNew(ffi::TensorView x) { return New<&L2Norm>(ffi::ShapeView(), x); }

}  // namespace
}  // namespace scale_lib

SCALE_LIB_EXPORT(scale_new, scale_lib::ScaleNew, "", "x, factor", "");
SCALE_LIB_EXPORT(axpby_new, scale_lib::AxpbyNew, "", "x, y, a, b", "");
SCALE_LIB_EXPORT(rms_norm_new, scale_lib::RmsNormNew, "", "x, weight, eps", "");
SCALE_LIB_EXPORT(l2_norm_new, scale_lib::L2NormNew, "", "x", "");
