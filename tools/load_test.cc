// SPDX-License-Identifier: Apache-2.0
// Load test of a built library on an old C/C++ runtime (tools/manylinux.py builds and runs it):
//
//   load_test LIBTVM_FFI LIBRARY [RUNTIME_PREFIX]
//
// Loads libtvm_ffi.so (as `import tvm_ffi` does: global) and the library with every symbol bound
// at once (RTLD_NOW), so that a symbol version the C or C++ runtime lacks fails the load, the
// way it fails `import` on a machine with that runtime. Then, through TVM-FFI's C ABI only (no
// C++ object crosses), it calls the exported `scale`: once on float32 arrays large enough for
// the CPU thread pool, checking the result; once with an argument of the wrong type and once
// with mismatched shapes, each of which must come back as a raised error of the kind the Python
// user sees (TypeError, ValueError): a C++ exception thrown and caught inside the library, then
// handed to libtvm_ffi. With RUNTIME_PREFIX, the C and C++ runtimes the process loaded must come
// from under it (the old root's, not this machine's). Prints what it did; exits non-zero on any
// failure.
#include <dlfcn.h>
#include <link.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "tvm/ffi/c_api.h"

namespace {

using ErrorMoveFromRaised = void (*)(TVMFFIObjectHandle*);
using ObjectDecRef = int (*)(TVMFFIObjectHandle);

ErrorMoveFromRaised error_move_from_raised = nullptr;
ObjectDecRef object_dec_ref = nullptr;

TVMFFIAny TensorArg(DLTensor* tensor) {
  TVMFFIAny any{};
  any.type_index = kTVMFFIDLTensorPtr;
  any.v_ptr = tensor;
  return any;
}

TVMFFIAny FloatArg(double value) {
  TVMFFIAny any{};
  any.type_index = kTVMFFIFloat;
  any.v_float64 = value;
  return any;
}

TVMFFIAny IntArg(int64_t value) {
  TVMFFIAny any{};
  any.type_index = kTVMFFIInt;
  any.v_int64 = value;
  return any;
}

// A contiguous float32 vector; strides given (TVM-FFI's TensorView reads them).
DLTensor Float32Vector(float* data, int64_t* shape) {
  static int64_t unit_stride = 1;
  DLTensor tensor{};
  tensor.data = data;
  tensor.device = DLDevice{kDLCPU, 0};
  tensor.ndim = 1;
  tensor.dtype = DLDataType{kDLFloat, 32, 1};
  tensor.shape = shape;
  tensor.strides = &unit_stride;
  return tensor;
}

// Calls fn(args); returns "" on success, else "<kind>: <message>" of the raised error.
std::string Call(TVMFFISafeCallType fn, std::vector<TVMFFIAny> args) {
  TVMFFIAny result{};
  result.type_index = kTVMFFINone;
  if (fn(nullptr, args.data(), static_cast<int32_t>(args.size()), &result) == 0) {
    if (result.type_index >= kTVMFFIStaticObjectBegin) object_dec_ref(result.v_obj);
    return "";
  }
  TVMFFIObjectHandle error = nullptr;
  error_move_from_raised(&error);
  if (error == nullptr) return "(a failure with no error raised)";
  const TVMFFIErrorCell* cell = TVMFFIErrorGetCellPtr(error);
  std::string text = std::string(cell->kind.data, cell->kind.size) + ": " +
                     std::string(cell->message.data, cell->message.size);
  object_dec_ref(error);
  return text;
}

// The paths of the loaded C and C++ runtimes.
int CollectRuntime(dl_phdr_info* info, size_t, void* out) {
  const char* runtimes[] = {"/libc.so.6", "/libm.so.6", "/libstdc++.so.6", "/libgcc_s.so.1",
                            "/libpthread.so.0"};
  std::string name = info->dlpi_name ? info->dlpi_name : "";
  for (const char* runtime : runtimes) {
    if (name.size() > std::strlen(runtime) &&
        name.compare(name.size() - std::strlen(runtime), std::string::npos, runtime) == 0) {
      static_cast<std::vector<std::string>*>(out)->push_back(name);
    }
  }
  return 0;
}

int Fail(const std::string& message) {
  std::fprintf(stderr, "load_test: FAILED: %s\n", message.c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3 && argc != 4) {
    std::fprintf(stderr, "usage: %s LIBTVM_FFI LIBRARY [RUNTIME_PREFIX]\n", argv[0]);
    return 2;
  }
  void* tvm_ffi = dlopen(argv[1], RTLD_NOW | RTLD_GLOBAL);
  if (tvm_ffi == nullptr) return Fail(std::string("cannot load libtvm_ffi: ") + dlerror());
  void* library = dlopen(argv[2], RTLD_NOW | RTLD_LOCAL);
  if (library == nullptr) return Fail(std::string("cannot load the library: ") + dlerror());
  std::printf("load_test: loaded %s\n", argv[2]);

  std::vector<std::string> runtimes;
  dl_iterate_phdr(CollectRuntime, &runtimes);
  for (const std::string& runtime : runtimes) {
    std::printf("load_test: runtime %s\n", runtime.c_str());
    if (argc == 4 && runtime.compare(0, std::strlen(argv[3]), argv[3]) != 0) {
      return Fail(runtime + " is not under " + argv[3]);
    }
  }

  error_move_from_raised =
      reinterpret_cast<ErrorMoveFromRaised>(dlsym(tvm_ffi, "TVMFFIErrorMoveFromRaised"));
  object_dec_ref = reinterpret_cast<ObjectDecRef>(dlsym(tvm_ffi, "TVMFFIObjectDecRef"));
  auto scale = reinterpret_cast<TVMFFISafeCallType>(dlsym(library, "__tvm_ffi_scale"));
  if (!error_move_from_raised || !object_dec_ref || !scale) return Fail("a symbol is missing");

  // A valid call, large enough to run on the CPU thread pool.
  int64_t n = int64_t{1} << 22;
  std::vector<float> x(n), out(n);
  for (int64_t i = 0; i < n; ++i) x[i] = static_cast<float>(i % 1000);
  DLTensor x_tensor = Float32Vector(x.data(), &n);
  DLTensor out_tensor = Float32Vector(out.data(), &n);
  std::string error = Call(scale, {TensorArg(&out_tensor), TensorArg(&x_tensor), FloatArg(2.0)});
  if (!error.empty()) return Fail("scale(out, x, 2.0) raised " + error);
  for (int64_t i = 0; i < n; ++i) {
    if (out[i] != 2.0f * x[i]) return Fail("scale(out, x, 2.0) computed a wrong value");
  }
  std::printf("load_test: scale(out, x, 2.0) on %lld floats: ok\n", static_cast<long long>(n));

  // Errors the library raises, as TVM-FFI hands them to any caller.
  struct Expected {
    const char* what;
    std::vector<TVMFFIAny> args;
    const char* kind;
  };
  int64_t short_n = 3;
  DLTensor short_out = Float32Vector(out.data(), &short_n);
  DLTensor no_strides = Float32Vector(out.data(), &n);
  no_strides.strides = nullptr;  // allowed by DLPack; refused by the library, never read
  const Expected cases[] = {
      {"scale(1, x, 2.0)", {IntArg(1), TensorArg(&x_tensor), FloatArg(2.0)}, "TypeError"},
      {"scale(out[:3], x, 2.0)",
       {TensorArg(&short_out), TensorArg(&x_tensor), FloatArg(2.0)},
       "ValueError"},
      {"scale(out without strides, x, 2.0)",
       {TensorArg(&no_strides), TensorArg(&x_tensor), FloatArg(2.0)},
       "ValueError"},
  };
  for (const Expected& expected : cases) {
    error = Call(scale, expected.args);
    std::printf("load_test: %s raised %s\n", expected.what,
                error.empty() ? "nothing" : error.c_str());
    if (error.compare(0, std::strlen(expected.kind) + 1, std::string(expected.kind) + ":") != 0) {
      return Fail(std::string(expected.what) + " must raise " + expected.kind);
    }
  }
  std::printf("load_test: ok\n");
  return 0;
}
