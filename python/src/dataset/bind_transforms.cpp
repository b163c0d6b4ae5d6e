// Transforms for Dataset.map: the native vision and general transforms (run on the pipeline's
// threads without the GIL) and PyFunc, a Python callable run under the GIL. Each can also be
// called eagerly on a numpy array, as in MindSpore.
#include <pybind11/stl.h>

#include <map>
#include <random>

#include "dataset/bind_dataset.h"
#include "dataset/python_call.h"
#include "kiln/core/error.h"
#include "kiln/data/transforms.h"
#include "kiln/data/vision.h"
#include "tensor_convert.h"

namespace kiln::python {

namespace {

using TransformPtr = std::shared_ptr<data::TensorTransform>;

// A Python callable as a transform: called with the row's input columns as numpy arrays (read-only
// views; the pipeline may share them), returns one value or a tuple of them.
class PyFunc : public data::TensorTransform {
 public:
  PyFunc(py::object fn, std::string name) : fn_(hold(std::move(fn))), name_(std::move(name)) {}
  std::string name() const override { return name_; }
  void apply(std::vector<Tensor>& columns, data::RowRng&) const override {
    py::gil_scoped_acquire gil;
    try {
      py::object result = (*fn_)(*row_to_python(columns, /*writeable=*/false));
      const bool many = py::isinstance<py::tuple>(result);
      row_from_python(result, many ? size_t(py::len(result)) : 1, columns, name_ + " result");
    } catch (py::error_already_set& e) {
      throw_python_error(e, name_);
    }
  }

 private:
  PyHandle fn_;
  std::string name_;
};

data::vision::Inter inter_from_name(const std::string& name) {
  if (name == "bilinear" || name == "linear") return data::vision::Inter::bilinear;
  if (name == "nearest") return data::vision::Inter::nearest;
  throw Error("interpolation: '" + name + "' is not one of bilinear, nearest");
}

DType dtype_from_name(const std::string& name) {
  static const std::map<std::string, DType> names = {
      {"float32", DType::f32}, {"float16", DType::f16}, {"bfloat16", DType::bf16},
      {"int32", DType::i32},   {"int64", DType::i64},   {"uint8", DType::u8},
      {"bool", DType::boolean}};
  auto it = names.find(name);
  if (it == names.end()) {
    throw Error("TypeCast: dtype '" + name +
                "' is not one of float32, float16, bfloat16, int32, int64, uint8, bool");
  }
  return it->second;
}

// transform(array) or transform(a, b, ...): the eager call MindSpore allows.
py::object call_eagerly(const data::TensorTransform& t, py::args args) {
  std::vector<Tensor> columns;
  for (auto& a : args) columns.push_back(tensor_from_python(a, t.name() + " input"));
  data::RowRng rng(data::mix_seed(uint64_t(std::random_device()()), 0));
  t.apply(columns, rng);
  py::tuple out = row_to_python(columns);
  if (out.size() == 1) return out[0];
  return std::move(out);
}

template <class T, class... Args>
TransformPtr make(Args&&... args) {
  return std::make_shared<T>(std::forward<Args>(args)...);
}

}  // namespace

void bind_transforms(py::module_& m) {
  using py::arg;
  namespace vision = data::vision;
  namespace tf = data::transforms;
  py::class_<data::TensorTransform, TransformPtr>(m, "Transform")
      .def_property_readonly("name", &data::TensorTransform::name)
      .def("__call__", &call_eagerly)
      .def("__repr__",
           [](const data::TensorTransform& t) { return "<Transform " + t.name() + ">"; });

  m.def(
      "PyFunc", [](py::object fn, std::string name) { return make<PyFunc>(fn, name); }, arg("fn"),
      arg("name"));
  m.def("Compose", [](std::vector<TransformPtr> ops) {
    return make<tf::Compose>(std::vector<data::Op>(ops.begin(), ops.end()));
  });
  m.def(
      "TypeCast",
      [](const std::string& dtype) { return make<tf::TypeCast>(dtype_from_name(dtype)); },
      arg("data_type"));
  m.def(
      "OneHot", [](int64_t num_classes) { return make<tf::OneHot>(num_classes); },
      arg("num_classes"));

  m.def(
      "Decode", [](bool rgb) { return make<vision::Decode>(rgb); }, arg("rgb") = true);
  m.def(
      "Resize",
      [](std::vector<int64_t> size, const std::string& interpolation) {
        return make<vision::Resize>(std::move(size), inter_from_name(interpolation));
      },
      arg("size"), arg("interpolation") = "bilinear");
  m.def(
      "CenterCrop", [](std::vector<int64_t> size) { return make<vision::CenterCrop>(size); },
      arg("size"));
  m.def(
      "RandomCrop",
      [](std::vector<int64_t> size, std::vector<int64_t> padding, bool pad_if_needed,
         double fill_value) {
        return make<vision::RandomCrop>(std::move(size), std::move(padding), pad_if_needed,
                                        fill_value);
      },
      arg("size"), arg("padding") = std::vector<int64_t>{}, arg("pad_if_needed") = false,
      arg("fill_value") = 0.0);
  m.def(
      "RandomResizedCrop",
      [](std::vector<int64_t> size, std::pair<double, double> scale,
         std::pair<double, double> ratio, const std::string& interpolation, int max_attempts) {
        return make<vision::RandomResizedCrop>(std::move(size), scale, ratio,
                                               inter_from_name(interpolation), max_attempts);
      },
      arg("size"), arg("scale") = std::pair<double, double>{0.08, 1.0},
      arg("ratio") = std::pair<double, double>{3.0 / 4.0, 4.0 / 3.0},
      arg("interpolation") = "bilinear", arg("max_attempts") = 10);
  m.def(
      "RandomHorizontalFlip", [](double prob) { return make<vision::RandomHorizontalFlip>(prob); },
      arg("prob") = 0.5);
  m.def(
      "RandomVerticalFlip", [](double prob) { return make<vision::RandomVerticalFlip>(prob); },
      arg("prob") = 0.5);
  m.def(
      "RandomRotation",
      [](std::vector<double> degrees, const std::string& resample, bool expand, double fill_value) {
        return make<vision::RandomRotation>(std::move(degrees), inter_from_name(resample), expand,
                                            fill_value);
      },
      arg("degrees"), arg("resample") = "nearest", arg("expand") = false, arg("fill_value") = 0.0);
  m.def(
      "Rescale", [](double rescale, double shift) { return make<vision::Rescale>(rescale, shift); },
      arg("rescale"), arg("shift"));
  m.def(
      "Normalize",
      [](std::vector<float> mean, std::vector<float> std, bool is_hwc) {
        return make<vision::Normalize>(std::move(mean), std::move(std), is_hwc);
      },
      arg("mean"), arg("std"), arg("is_hwc") = true);
  m.def("HWC2CHW", [] { return make<vision::HWC2CHW>(); });
}

}  // namespace kiln::python
