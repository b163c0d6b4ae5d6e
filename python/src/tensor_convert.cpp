#include "tensor_convert.h"

#include <pybind11/stl.h>

#include <cstring>
#include <string>
#include <vector>

#include "kiln/core/error.h"

namespace py = pybind11;

namespace kiln::python {

namespace {

// A Python object held from C++: released under the GIL, and not at all once the interpreter is
// gone (a tensor outliving it at exit).
std::shared_ptr<void> hold_python_object(py::object object) {
  return std::shared_ptr<void>(new py::object(std::move(object)), [](void* held) {
    auto* object = static_cast<py::object*>(held);
    if (Py_IsInitialized()) {
      py::gil_scoped_acquire gil;
      delete object;
    } else {
      object->release();
      delete object;
    }
  });
}

bool viewable(const py::array& array) {
  const int flags = py::detail::array_proxy(array.ptr())->flags;
  return (flags & py::detail::npy_api::NPY_ARRAY_C_CONTIGUOUS_) &&
         (flags & py::detail::npy_api::NPY_ARRAY_ALIGNED_) &&
         (flags & py::detail::npy_api::NPY_ARRAY_WRITEABLE_);
}

}  // namespace

py::dtype numpy_dtype(DType dtype) {
  switch (dtype) {
    case DType::f32:
    case DType::bf16:
      return py::dtype::of<float>();
    case DType::f16:
      return py::dtype("float16");
    case DType::i32:
      return py::dtype::of<int32_t>();
    case DType::i64:
      return py::dtype::of<int64_t>();
    case DType::u8:
      return py::dtype::of<uint8_t>();
    case DType::boolean:
      return py::dtype::of<bool>();
  }
  throw Error("numpy_dtype: unknown dtype");
}

DType kiln_dtype(const py::dtype& dtype) {
  const char kind = dtype.kind();
  const auto size = dtype.itemsize();
  if (kind == 'f' && size == 4) return DType::f32;
  if (kind == 'f' && size == 2) return DType::f16;
  if (kind == 'i' && size == 4) return DType::i32;
  if (kind == 'i' && size == 8) return DType::i64;
  if (kind == 'u' && size == 1) return DType::u8;
  if (kind == 'b') return DType::boolean;
  throw Error("Tensor: numpy dtype " + py::str(static_cast<py::handle>(dtype)).cast<std::string>() +
              " has no Kiln dtype (Kiln has float32, float16, bfloat16, int32, int64, uint8, "
              "bool); convert it first, e.g. array.astype(numpy.float32)");
}

py::array to_numpy(const Tensor& tensor, bool writable) {
  KILN_CHECK(tensor.defined(), "asnumpy: the tensor is empty (default-constructed)");
  KILN_CHECK(!tensor.is_traced(), "asnumpy: ", describe(tensor),
             " is a symbolic tensor of a graph being traced; it has no values until the graph "
             "runs (call asnumpy outside construct, or use PYNATIVE_MODE to debug)");
  if (tensor.dtype() == DType::bf16) {
    Tensor widened = Tensor::empty(tensor.shape(), DType::f32);
    widened.copy_from(tensor);
    return to_numpy(widened, writable);
  }
  const size_t item = dtype_size(tensor.dtype());
  std::vector<py::ssize_t> shape(tensor.shape().begin(), tensor.shape().end());
  std::vector<py::ssize_t> strides;
  for (int64_t stride : tensor.strides()) strides.push_back(py::ssize_t(stride * int64_t(item)));
  // The capsule owns a handle to the tensor, so the array keeps its storage alive.
  auto* owner = new Tensor(tensor);
  py::capsule keeper(owner, [](void* held) { delete static_cast<Tensor*>(held); });
  py::array array(numpy_dtype(tensor.dtype()), shape, strides, tensor.raw_data(), keeper);
  if (writable) {
    tensor.impl()->storage->mark_untracked();  // Kiln no longer sees every write to it
  } else {
    array.attr("setflags")(py::arg("write") = false);
  }
  return array;
}

Tensor from_numpy(py::array array, bool copy) {
  if (array.dtype().kind() == 'f' && array.dtype().itemsize() == 8) {
    array = py::array_t<float, py::array::c_style | py::array::forcecast>::ensure(array);
    copy = false;  // ensure() made a fresh float32 array the tensor may keep
  }
  const DType dtype = kiln_dtype(array.dtype());
  Shape shape(std::vector<int64_t>(array.shape(), array.shape() + array.ndim()));
  if (!copy && viewable(array)) {
    void* data = array.mutable_data();
    return Tensor::from_blob(data, shape, dtype, hold_python_object(array));
  }
  Tensor result = Tensor::empty(shape, dtype);
  py::array contiguous = py::array::ensure(array, py::array::c_style);
  std::memcpy(result.raw_data(), contiguous.data(), result.nbytes());
  return result;
}

std::array<int64_t, 2> pair_of(const py::object& value, const char* what) {
  if (py::isinstance<py::int_>(value)) {
    const auto v = value.cast<int64_t>();
    return {v, v};
  }
  auto values = value.cast<std::vector<int64_t>>();
  KILN_CHECK(values.size() == 2, what, " must be an int or a pair, got ", values.size(), " values");
  return {values[0], values[1]};
}

}  // namespace kiln::python
