// kiln.Tensor over kiln::Tensor, and the dtypes (kiln.float32, kiln.bfloat16, ...).
#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include "bindings.h"
#include "kiln/ops/functional.h"
#include "tensor_convert.h"

namespace py = pybind11;

namespace kiln::python {

namespace {

// Tensor(input_data, dtype): numpy arrays are viewed without a copy where the layout allows
// (tensor_convert.h); Python scalars and nested lists go through numpy.asarray.
Tensor make_tensor(const py::object& input_data, const std::optional<DType>& dtype) {
  Tensor result;
  if (py::isinstance<Tensor>(input_data)) {
    result = input_data.cast<Tensor>();
  } else if (py::isinstance<py::array>(input_data)) {
    result = from_numpy(input_data.cast<py::array>(), /*copy=*/false);
  } else {
    result = from_numpy(py::module_::import("numpy").attr("asarray")(input_data), true);
  }
  if (dtype && *dtype != result.dtype()) result = ops::cast(result, *dtype);
  return result;
}

Tensor scalar_like(double value, const Tensor& like) {
  return Tensor::scalar(value, is_floating(like.dtype()) ? like.dtype() : DType::f32);
}

py::tuple shape_tuple(const Tensor& t) {
  py::tuple shape(t.rank());
  for (int i = 0; i < t.rank(); ++i) shape[size_t(i)] = t.shape()[i];
  return shape;
}

}  // namespace

void bind_tensor(py::module_& m) {
  py::enum_<DType>(m, "DType")
      .value("float32", DType::f32)
      .value("float16", DType::f16)
      .value("bfloat16", DType::bf16)
      .value("int32", DType::i32)
      .value("int64", DType::i64)
      .value("uint8", DType::u8)
      .value("bool_", DType::boolean);

  py::class_<Tensor>(m, "Tensor")
      .def(py::init(&make_tensor), py::arg("input_data"), py::arg("dtype") = py::none())
      .def_static(
          "from_numpy", [](py::array array) { return from_numpy(std::move(array), false); },
          py::arg("array"), "A tensor viewing the array's memory where the layout allows")
      .def(
          "asnumpy", [](const Tensor& t) { return to_numpy(t); },
          "A numpy array viewing the tensor's memory (bf16: a float32 copy)")
      .def(
          "__array__",
          [](const Tensor& t, py::object dtype) {
            py::array array = to_numpy(t);
            return dtype.is_none() ? array : array.attr("astype")(dtype).cast<py::array>();
          },
          py::arg("dtype") = py::none())
      .def_property_readonly("shape", &shape_tuple)
      .def_property_readonly("dtype", &Tensor::dtype)
      .def_property_readonly("ndim", &Tensor::rank)
      .def_property_readonly("size", &Tensor::numel)
      .def_property_readonly("nbytes", &Tensor::nbytes)
      .def_property_readonly(
          "_data_ptr", [](const Tensor& t) { return reinterpret_cast<uintptr_t>(t.raw_data()); })
      .def_property("requires_grad", &Tensor::requires_grad,
                    [](Tensor& t, bool on) { t.set_requires_grad(on); })
      .def_property_readonly("grad",
                             [](const Tensor& t) -> py::object {
                               Tensor g = t.grad();
                               return g.defined() ? py::cast(g) : py::none();
                             })
      .def("is_contiguous", &Tensor::is_contiguous)
      .def("item",
           [](const Tensor& t) -> py::object {
             KILN_CHECK(t.numel() == 1, "item: ", describe(t), " has ", t.numel(),
                        " elements; item() needs exactly one");
             if (is_floating(t.dtype())) return py::float_(double(t.item<float>()));
             if (t.dtype() == DType::boolean) return py::bool_(t.item<float>() != 0);
             return py::int_(t.item<int64_t>());
           })
      .def("astype", [](const Tensor& t, DType dtype) { return ops::cast(t, dtype); })
      .def("reshape",
           [](const Tensor& t, py::args shape) {
             std::vector<int64_t> dims;
             if (shape.size() == 1 && !py::isinstance<py::int_>(shape[0])) {
               dims = shape[0].cast<std::vector<int64_t>>();
             } else {
               dims = shape.cast<std::vector<int64_t>>();
             }
             return ops::reshape(t, Shape(dims));
           })
      .def("copy", &Tensor::clone)
      .def("contiguous", &Tensor::contiguous)
      .def("__len__",
           [](const Tensor& t) {
             KILN_CHECK(t.rank() > 0, "len() of a 0-d tensor");
             return t.shape()[0];
           })
      .def("__repr__",
           [](const Tensor& t) {
             if (!t.defined()) return std::string("Tensor(undefined)");
             if (t.is_traced()) return "Tensor(symbolic " + describe(t) + ")";
             return "Tensor(shape=" + t.shape().str() +
                    ", dtype=" + std::string(dtype_name(t.dtype())) + ", value=\n" +
                    py::repr(to_numpy(t, /*writable=*/false)).cast<std::string>() + ")";
           })
      .def("__add__", [](const Tensor& a, const Tensor& b) { return ops::add(a, b); })
      .def("__add__", [](const Tensor& a, double s) { return ops::add_scalar(a, s); })
      .def("__radd__", [](const Tensor& a, double s) { return ops::add_scalar(a, s); })
      .def("__sub__", [](const Tensor& a, const Tensor& b) { return ops::sub(a, b); })
      .def("__sub__", [](const Tensor& a, double s) { return ops::add_scalar(a, -s); })
      .def("__rsub__", [](const Tensor& a, double s) { return ops::add_scalar(ops::neg(a), s); })
      .def("__mul__", [](const Tensor& a, const Tensor& b) { return ops::mul(a, b); })
      .def("__mul__", [](const Tensor& a, double s) { return ops::mul_scalar(a, s); })
      .def("__rmul__", [](const Tensor& a, double s) { return ops::mul_scalar(a, s); })
      .def("__truediv__", [](const Tensor& a, const Tensor& b) { return ops::div(a, b); })
      .def("__truediv__", [](const Tensor& a, double s) { return ops::mul_scalar(a, 1.0 / s); })
      .def("__rtruediv__", [](const Tensor& a, double s) { return ops::div(scalar_like(s, a), a); })
      .def("__pow__", [](const Tensor& a, double e) { return ops::pow_scalar(a, e); })
      .def("__pow__", [](const Tensor& a, const Tensor& e) { return ops::pow(a, e); })
      .def("__matmul__", [](const Tensor& a, const Tensor& b) { return ops::matmul(a, b); })
      .def("__neg__", [](const Tensor& a) { return ops::neg(a); })
      .def("__abs__", [](const Tensor& a) { return ops::abs(a); });
}

}  // namespace kiln::python
