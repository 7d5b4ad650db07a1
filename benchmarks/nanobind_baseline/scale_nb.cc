// The overhead baseline: scale_lib's CPU scale kernel (kernels/scale/scale_cpu.cc, unchanged)
// behind a nanobind binding instead of TVM-FFI. Built by benchmarks/bench_overhead.py only; never
// part of the wheel.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>

#include "scale.h"

namespace nb = nanobind;

namespace {

// nanobind hands over its own view of the array; the kernel takes a DLTensor view.
DLTensor AsDLTensor(const nb::ndarray<nb::device::cpu>& a) {
  DLTensor t{};
  t.data = const_cast<void*>(a.data());
  t.device = DLDevice{kDLCPU, 0};
  t.ndim = static_cast<int32_t>(a.ndim());
  t.dtype = DLDataType{a.dtype().code, a.dtype().bits, a.dtype().lanes};
  t.shape = const_cast<int64_t*>(a.shape_ptr());
  t.strides = const_cast<int64_t*>(a.stride_ptr());
  return t;
}

void Scale(nb::ndarray<nb::device::cpu> out, nb::ndarray<nb::device::cpu> x, double factor) {
  DLTensor out_t = AsDLTensor(out);
  DLTensor x_t = AsDLTensor(x);
  scale_lib::ScaleCPU(scale_lib::ffi::TensorView(&out_t), scale_lib::ffi::TensorView(&x_t), factor);
}

}  // namespace

NB_MODULE(scale_nb, m) { m.def("scale", &Scale, nb::arg("out"), nb::arg("x"), nb::arg("factor")); }
