// kiln._kiln.ops: the op table's functional API (ops/functional.h), eager or traced alike.
// Each binding is one dispatcher call, so the per-op cost from Python is pybind11's argument
// conversion and nothing else.
#include <pybind11/stl.h>

#include <chrono>

#include "bindings.h"
#include "kiln/ops/functional.h"
#include "tensor_convert.h"

namespace py = pybind11;

namespace kiln::python {

namespace {

Tensor optional_tensor(const std::optional<Tensor>& t) {
  return t ? *t : Tensor();
}

}  // namespace

void bind_ops(py::module_& m) {
  py::module_ ops = m.def_submodule("ops", "The op table's ops as functions");
  using T = const Tensor&;
  // Elementwise.
  ops.def("add", [](T a, T b) { return ops::add(a, b); });
  ops.def("sub", [](T a, T b) { return ops::sub(a, b); });
  ops.def("mul", [](T a, T b) { return ops::mul(a, b); });
  ops.def("div", [](T a, T b) { return ops::div(a, b); });
  ops.def("maximum", [](T a, T b) { return ops::maximum(a, b); });
  ops.def("minimum", [](T a, T b) { return ops::minimum(a, b); });
  ops.def("pow", [](T a, T b) { return ops::pow(a, b); });
  ops.def("pow", [](T a, double e) { return ops::pow_scalar(a, e); });
  ops.def("neg", [](T x) { return ops::neg(x); });
  ops.def("exp", [](T x) { return ops::exp(x); });
  ops.def("log", [](T x) { return ops::log(x); });
  ops.def("sqrt", [](T x) { return ops::sqrt(x); });
  ops.def("rsqrt", [](T x) { return ops::rsqrt(x); });
  ops.def("abs", [](T x) { return ops::abs(x); });
  ops.def("relu", [](T x) { return ops::relu(x); });
  ops.def("gelu", [](T x) { return ops::gelu(x); });
  ops.def("sigmoid", [](T x) { return ops::sigmoid(x); });
  ops.def("tanh", [](T x) { return ops::tanh(x); });
  ops.def("square", [](T x) { return ops::square(x); });
  ops.def("sign", [](T x) { return ops::sign(x); });
  ops.def("add_scalar", [](T x, double s) { return ops::add_scalar(x, s); });
  ops.def("mul_scalar", [](T x, double s) { return ops::mul_scalar(x, s); });
  ops.def("relu_grad", [](T g, T y) { return ops::relu_grad(g, y); });
  ops.def("gelu_grad", [](T g, T x) { return ops::gelu_grad(g, x); });
  ops.def("where_positive", [](T c, T a, T b) { return ops::where_positive(c, a, b); });
  ops.def("equal", [](T a, T b) { return ops::compare_equal(a, b); });
  // Reductions.
  ops.def(
      "sum",
      [](T x, std::vector<int64_t> axis, bool keep_dims) {
        return ops::sum(x, std::move(axis), keep_dims);
      },
      py::arg("x"), py::arg("axis") = std::vector<int64_t>{}, py::arg("keep_dims") = false);
  ops.def(
      "mean",
      [](T x, std::vector<int64_t> axis, bool keep_dims) {
        return ops::mean(x, std::move(axis), keep_dims);
      },
      py::arg("x"), py::arg("axis") = std::vector<int64_t>{}, py::arg("keep_dims") = false);
  ops.def(
      "max",
      [](T x, std::vector<int64_t> axis, bool keep_dims) {
        return ops::max(x, std::move(axis), keep_dims);
      },
      py::arg("x"), py::arg("axis") = std::vector<int64_t>{}, py::arg("keep_dims") = false);
  ops.def(
      "argmax", [](T x, int64_t axis, bool keep_dims) { return ops::argmax(x, axis, keep_dims); },
      py::arg("x"), py::arg("axis") = -1, py::arg("keep_dims") = false);
  ops.def("sum_to_shape",
          [](T x, std::vector<int64_t> shape) { return ops::sum_to_shape(x, Shape(shape)); });
  ops.def("broadcast_to",
          [](T x, std::vector<int64_t> shape) { return ops::broadcast_to(x, Shape(shape)); });
  // Shape.
  ops.def("reshape", [](T x, std::vector<int64_t> shape) { return ops::reshape(x, Shape(shape)); });
  ops.def("flatten", [](T x) { return ops::flatten(x); });
  ops.def("transpose", [](T x, std::vector<int64_t> perm) { return ops::transpose(x, perm); });
  ops.def("swapaxes", [](T x, int64_t a, int64_t b) { return ops::transpose(x, a, b); });
  ops.def(
      "concat", [](const std::vector<Tensor>& xs, int64_t axis) { return ops::concat(xs, axis); },
      py::arg("tensors"), py::arg("axis") = 0);
  ops.def(
      "slice",
      [](T x, int64_t axis, int64_t start, int64_t end, int64_t step) {
        return ops::slice(x, axis, start, end, step);
      },
      py::arg("x"), py::arg("axis"), py::arg("start"), py::arg("end"), py::arg("step") = 1);
  ops.def("cast", [](T x, DType dtype) { return ops::cast(x, dtype); });
  ops.def(
      "one_hot",
      [](T indices, int64_t depth, DType dtype) { return ops::one_hot(indices, depth, dtype); },
      py::arg("indices"), py::arg("depth"), py::arg("dtype") = DType::f32);
  ops.def("contiguous", [](T x) { return ops::contiguous(x); });
  // Neural-network ops.
  ops.def(
      "softmax", [](T x, int64_t axis) { return ops::softmax(x, axis); }, py::arg("x"),
      py::arg("axis") = -1);
  ops.def(
      "log_softmax", [](T x, int64_t axis) { return ops::log_softmax(x, axis); }, py::arg("x"),
      py::arg("axis") = -1);
  ops.def(
      "matmul",
      [](T a, T b, bool transpose_a, bool transpose_b) {
        return ops::matmul(a, b, transpose_a, transpose_b);
      },
      py::arg("a"), py::arg("b"), py::arg("transpose_a") = false, py::arg("transpose_b") = false);
  ops.def(
      "conv2d",
      [](T x, T w, const std::optional<Tensor>& bias, const py::object& stride,
         const py::object& padding, const py::object& dilation, int64_t groups) {
        return ops::conv2d(x, w, optional_tensor(bias),
                           {.stride = pair_of(stride, "conv2d: stride"),
                            .padding = pair_of(padding, "conv2d: padding"),
                            .dilation = pair_of(dilation, "conv2d: dilation"),
                            .groups = groups});
      },
      py::arg("x"), py::arg("weight"), py::arg("bias") = py::none(), py::arg("stride") = 1,
      py::arg("padding") = 0, py::arg("dilation") = 1, py::arg("groups") = 1);
  auto pool = [](auto op, const char* name) {
    return [op, name](T x, const py::object& kernel_size, const py::object& stride,
                      const py::object& padding) {
      const std::array<int64_t, 2> kernel = pair_of(kernel_size, name);
      return op(x, ops::Pool2dOptions{.kernel = kernel,
                                      .stride = stride.is_none() ? kernel : pair_of(stride, name),
                                      .padding = pair_of(padding, name)});
    };
  };
  ops.def("max_pool2d", pool(&ops::max_pool2d, "max_pool2d"), py::arg("x"), py::arg("kernel_size"),
          py::arg("stride") = py::none(), py::arg("padding") = 0);
  ops.def("avg_pool2d", pool(&ops::avg_pool2d, "avg_pool2d"), py::arg("x"), py::arg("kernel_size"),
          py::arg("stride") = py::none(), py::arg("padding") = 0);
  ops.def("batch_norm", &ops::batch_norm, py::arg("x"), py::arg("gamma"), py::arg("beta"),
          py::arg("running_mean"), py::arg("running_var"), py::arg("training"),
          py::arg("momentum") = 0.9, py::arg("eps") = 1e-5, py::arg("sync_ranks") = false);
  ops.def("layer_norm", &ops::layer_norm, py::arg("x"), py::arg("gamma"), py::arg("beta"),
          py::arg("eps") = 1e-7);
  ops.def("dropout", &ops::dropout, py::arg("x"), py::arg("p") = 0.5, py::arg("training") = true);
  ops.def(
      "softmax_cross_entropy",
      [](T logits, T labels, const std::string& reduction) {
        const int64_t code = reduction == "mean"   ? 0
                             : reduction == "sum"  ? 1
                             : reduction == "none" ? 2
                                                   : -1;
        KILN_CHECK(code >= 0, "softmax_cross_entropy: reduction '", reduction,
                   "' is none of mean, sum, none");
        return ops::softmax_cross_entropy(logits, labels, code);
      },
      py::arg("logits"), py::arg("labels"), py::arg("reduction") = "mean");
  ops.def("embedding", [](T table, T indices) { return ops::embedding(table, indices); });

  // For the binding-overhead benchmark: seconds for n relu calls made from C++, to subtract
  // from the same n calls made from Python.
  ops.def("_relu_loop_seconds", [](T x, int64_t n) {
    const auto start = std::chrono::steady_clock::now();
    for (int64_t i = 0; i < n; ++i) ops::relu(x);
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  });
}

}  // namespace kiln::python
