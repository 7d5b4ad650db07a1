// CPU twin of kernels/rms_norm.cu: the same math, one row at a time.
#include <cmath>
#include <algorithm>
#include <cstdint>
#include <vector>

#include "cpu_float.h"
#include "rms_norm.h"

namespace scale_lib {
namespace {

template <typename T>
using Math = cpu::FloatMath<T>;
template <typename T>
using Acc = typename Math<T>::Compute;

template <typename T>
Acc<T> RowRstd(const T* x_row, int64_t hidden, Acc<T> eps) {
  Acc<T> sum_sq = 0;
  for (int64_t j = 0; j < hidden; ++j) {
    const Acc<T> v = Math<T>::Load(x_row[j]);
    sum_sq += v * v;
  }
  return Acc<T>(1) / std::sqrt(sum_sq / static_cast<Acc<T>>(hidden) + eps);
}

template <typename T>
void RmsNormRows(T* out, const T* x, const T* weight, RowLayout x_rows, int64_t out_stride,
                 double eps) {
  for (int64_t r = 0; r < x_rows.rows; ++r) {
    const T* x_row = x + r * x_rows.row_stride;
    T* out_row = out + r * out_stride;
    const Acc<T> rstd = RowRstd(x_row, x_rows.hidden, static_cast<Acc<T>>(eps));
    for (int64_t j = 0; j < x_rows.hidden; ++j) {
      Acc<T> y = Math<T>::Load(x_row[j]) * rstd;
      if (weight != nullptr) y *= Math<T>::Load(weight[j]);
      out_row[j] = Math<T>::Store(y);
    }
  }
}

}  // namespace

void RmsNormCPU(ffi::TensorView out, ffi::TensorView x, ffi::Optional<ffi::TensorView> weight,
                double eps) {
  CheckRmsNormArgs(out, x, weight, eps);
  if (x.numel() == 0) return;
  const RowLayout x_rows = AsRows(x, "x");
  const int64_t out_stride = AsRows(out, "out").row_stride;
  DispatchFloating(x.dtype(), "x", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* w = weight.has_value() ? DataPtr<const T>(weight.value()) : nullptr;
    RmsNormRows<T>(DataPtr<T>(out), DataPtr<const T>(x), w, x_rows, out_stride, eps);
  });
}

void RmsNormRstdCPU(ffi::TensorView rstd, ffi::TensorView x, double eps) {
  CHECK_FLOATING(x);
  CHECK_MIN_NDIM(x, 1);
  CheckRstd(rstd, x);
  TVM_FFI_CHECK(eps >= 0, ValueError) << "eps must be non-negative; got " << eps;
  const RowLayout x_rows = AsRows(x, "x");
  DispatchFloating(x.dtype(), "x", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* x_data = DataPtr<const T>(x);
    double* out = DataPtr<double>(rstd);
    for (int64_t r = 0; r < x_rows.rows; ++r) {
      out[r] = RowRstd(x_data + r * x_rows.row_stride, x_rows.hidden, static_cast<Acc<T>>(eps));
    }
  });
}

void RmsNormBackwardCPU(ffi::TensorView grad_x, ffi::TensorView grad, ffi::TensorView x,
                        ffi::Optional<ffi::TensorView> weight, ffi::TensorView rstd) {
  CheckRmsNormBackwardArgs(grad_x, grad, x, weight, rstd);
  if (x.numel() == 0) return;
  const RowLayout x_rows = AsRows(x, "x");
  DispatchFloating(x.dtype(), "x", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* w = weight.has_value() ? DataPtr<const T>(weight.value()) : nullptr;
    const T* g = DataPtr<const T>(grad);
    const T* xs = DataPtr<const T>(x);
    T* gx = DataPtr<T>(grad_x);
    const double* rs = DataPtr<const double>(rstd);
    const int64_t h = x_rows.hidden;
    for (int64_t r = 0; r < x_rows.rows; ++r) {
      const T* g_row = g + r * h;
      const T* x_row = xs + r * x_rows.row_stride;
      Acc<T> dot = 0;
      for (int64_t j = 0; j < h; ++j) {
        const Acc<T> wj = w != nullptr ? Math<T>::Load(w[j]) : Acc<T>(1);
        dot += wj * Math<T>::Load(g_row[j]) * Math<T>::Load(x_row[j]);
      }
      const auto rr = static_cast<Acc<T>>(rs[r]);
      const Acc<T> c = rr * rr * rr * dot / static_cast<Acc<T>>(h);
      for (int64_t j = 0; j < h; ++j) {
        const Acc<T> wj = w != nullptr ? Math<T>::Load(w[j]) : Acc<T>(1);
        gx[r * h + j] = Math<T>::Store(rr * wj * Math<T>::Load(g_row[j]) - c * Math<T>::Load(x_row[j]));
      }
    }
  });
}

void RmsNormWeightGradCPU(ffi::TensorView grad_weight, ffi::TensorView grad, ffi::TensorView x,
                          ffi::TensorView rstd) {
  CheckRmsNormWeightGradArgs(grad_weight, grad, x, rstd);
  const RowLayout x_rows = AsRows(x, "x");
  const int64_t groups = WeightGradGroups(grad_weight, x);
  if (groups == 0) return;
  const int64_t rows_per_group = x_rows.rows / groups;
  DispatchFloating(x.dtype(), "x", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* g = DataPtr<const T>(grad);
    const T* xs = DataPtr<const T>(x);
    const double* rs = DataPtr<const double>(rstd);
    T* gw = DataPtr<T>(grad_weight);
    std::vector<Acc<T>> acc(static_cast<size_t>(x_rows.hidden));
    for (int64_t group = 0; group < groups; ++group) {
      std::fill(acc.begin(), acc.end(), Acc<T>(0));
      for (int64_t r = group * rows_per_group; r < (group + 1) * rows_per_group; ++r) {
        const auto rr = static_cast<Acc<T>>(rs[r]);
        for (int64_t j = 0; j < x_rows.hidden; ++j) {
          acc[j] += Math<T>::Load(g[r * x_rows.hidden + j]) * Math<T>::Load(xs[r * x_rows.row_stride + j]) * rr;
        }
      }
      for (int64_t j = 0; j < x_rows.hidden; ++j) gw[group * x_rows.hidden + j] = Math<T>::Store(acc[j]);
    }
  });
}

}  // namespace scale_lib
