// SPDX-License-Identifier: Apache-2.0
// CPU twin of kernels/rms_norm/rms_norm.cu: the same math, one row at a time.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "cpu_float.h"
#include "cpu_parallel.h"
#include "rms_norm.h"

namespace scale_lib {
namespace {

template <typename T>
using Math = host::FloatMath<T>;
template <typename T>
using Acc = typename Math<T>::Compute;

// A row in the compute type: the row itself for float/double, else converted into `scratch`.
template <typename T>
const Acc<T>* RowInComputeType(const T* row, int64_t hidden, std::vector<Acc<T>>& scratch) {
  if constexpr (std::is_same_v<T, Acc<T>>) {
    return row;
  } else {
    host::LoadN(row, scratch.data(), hidden);
    return scratch.data();
  }
}

template <typename T>
Acc<T> RowRstd(const Acc<T>* row, int64_t hidden, Acc<T> eps) {
  return Acc<T>(1) /
         std::sqrt(host::SumOfSquares<Acc<T>>(row, hidden) / static_cast<Acc<T>>(hidden) + eps);
}

template <typename T>
[[gnu::always_inline]] inline void RmsNormRows(T* out, const T* x, const T* weight,
                                               RowLayout x_rows, int64_t out_stride, double eps,
                                               int64_t first_row, int64_t end_row) {
  const int64_t h = x_rows.hidden;
  std::vector<Acc<T>> row_scratch(static_cast<size_t>(h)), y(static_cast<size_t>(h));
  std::vector<Acc<T>> w(weight != nullptr ? static_cast<size_t>(h) : 0);
  if (weight != nullptr) host::LoadN(weight, w.data(), h);
  for (int64_t r = first_row; r < end_row; ++r) {
    const Acc<T>* row = RowInComputeType(x + r * x_rows.row_stride, h, row_scratch);
    const Acc<T> rstd = RowRstd<T>(row, h, EpsIn<Acc<T>>(eps));
    if (weight != nullptr) {
      for (int64_t j = 0; j < h; ++j) y[j] = row[j] * rstd * w[j];
    } else {
      for (int64_t j = 0; j < h; ++j) y[j] = row[j] * rstd;
    }
    host::StoreN(y.data(), out + r * out_stride, h);
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
    // Whole rows per thread, host::kMinItemsPerThread elements each at least.
    host::ParallelForRows(x_rows.rows, x_rows.hidden, [&](int64_t begin, int64_t end) {
      host::RunWidest([&]() SCALE_LIB_INLINE {
        RmsNormRows(DataPtr<T>(out), DataPtr<const T>(x), w, x_rows, out_stride, eps, begin, end);
      });
    });
  });
}

void RmsNormRstdCPU(ffi::TensorView rstd, ffi::TensorView x, double eps) {
  CheckRmsNormRstdArgs(rstd, x, eps);
  const RowLayout x_rows = AsRows(x, "x");
  DispatchFloating(x.dtype(), "x", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* x_data = DataPtr<const T>(x);
    double* out = DataPtr<double>(rstd);
    std::vector<Acc<T>> scratch(static_cast<size_t>(x_rows.hidden));
    for (int64_t r = 0; r < x_rows.rows; ++r) {
      const Acc<T>* row = RowInComputeType(x_data + r * x_rows.row_stride, x_rows.hidden, scratch);
      out[r] = RowRstd<T>(row, x_rows.hidden, EpsIn<Acc<T>>(eps));
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
        gx[r * h + j] =
            Math<T>::Store(rr * wj * Math<T>::Load(g_row[j]) - c * Math<T>::Load(x_row[j]));
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
          acc[j] += Math<T>::Load(g[r * x_rows.hidden + j]) *
                    Math<T>::Load(xs[r * x_rows.row_stride + j]) * rr;
        }
      }
      for (int64_t j = 0; j < x_rows.hidden; ++j)
        gw[group * x_rows.hidden + j] = Math<T>::Store(acc[j]);
    }
  });
}

}  // namespace scale_lib
