// kiln._kiln.nn: Cell (subclassable in Python), every layer and loss, the initializers.
//
// A Python subclass of Cell is a PythonCell underneath: C++ (Model, the graph tracer) calls its
// `construct` through the override below, with the GIL taken there, so a traced construct runs
// Python once per compiled shape and never again. The Python package (kiln/nn/cell.py) adds
// attribute registration: assigning a Cell or a Parameter to an attribute registers it here.
#include <pybind11/functional.h>
#include <pybind11/stl.h>

#include "bindings.h"
#include "kiln/nn/nn.h"
#include "tensor_convert.h"

namespace py = pybind11;

namespace kiln::python {

namespace {

// A Python construct's result as the cell's outputs: a Tensor, or a tuple or list of them.
nn::Tensors outputs_of(const py::object& result, const std::string& cell) {
  if (py::isinstance<Tensor>(result)) return {result.cast<Tensor>()};
  KILN_CHECK(py::isinstance<py::tuple>(result) || py::isinstance<py::list>(result), cell,
             ".construct returned ", std::string(py::str(py::type::of(result).attr("__name__"))),
             "; a cell returns a Tensor or a tuple of Tensors");
  nn::Tensors outputs;
  for (const py::handle item : result) {
    KILN_CHECK(py::isinstance<Tensor>(item), cell, ".construct returned a ",
               std::string(py::str(py::type::of(result).attr("__name__"))), " holding a ",
               std::string(py::str(py::type::of(item).attr("__name__"))),
               "; a cell returns a Tensor or a tuple of Tensors");
    outputs.push_back(item.cast<Tensor>());
  }
  return outputs;
}

// Python's construct(self, *inputs) serves both C++ forms: construct(x) calls it with one
// argument, construct_multi(inputs) with one argument per input, and takes a tuple back.
class PythonCell : public nn::Cell {
 public:
  explicit PythonCell(std::string name) : Cell(std::move(name)) {}
  Tensor construct(const Tensor& x) override {
    py::gil_scoped_acquire gil;
    const py::function override = py::get_override(static_cast<const nn::Cell*>(this), "construct");
    if (!override) return nn::Cell::construct(x);
    nn::Tensors outputs = outputs_of(override(x), cell_name());
    KILN_CHECK(outputs.size() == 1, cell_name(), ".construct returned ", outputs.size(),
               " outputs where one was expected; its first output is what Model trains on");
    return outputs[0];
  }
  nn::Tensors construct_multi(const nn::Tensors& inputs) override {
    py::gil_scoped_acquire gil;
    const py::function override = py::get_override(static_cast<const nn::Cell*>(this), "construct");
    if (!override) return nn::Cell::construct_multi(inputs);
    py::tuple args(inputs.size());
    for (size_t i = 0; i < inputs.size(); ++i) args[i] = py::cast(inputs[i]);
    return outputs_of(override(*args), cell_name());
  }
  void add_parameter(const std::string& name, const Tensor& value) {
    check_new_name(name);
    register_parameter(name, value);
  }
  void add_buffer(const std::string& name, const Tensor& value) {
    check_new_name(name);
    register_buffer(name, value);
  }
  void add_cell(const std::string& name, std::shared_ptr<Cell> cell) {
    check_new_name(name);
    register_cell(name, std::move(cell));
  }

 private:
  void check_new_name(const std::string& name) const {
    if (name.empty()) return;  // a child without prefix (auto_prefix=False): any number of them
    for (const auto& [child, cell] : children()) {
      KILN_CHECK(child != name, cell_name(), ": attribute '", name,
                 "' already holds a registered cell; a cell's children are fixed once assigned");
    }
    for (const auto& [path, tensor] : parameters_and_names()) {
      KILN_CHECK(path != name, cell_name(), ": attribute '", name,
                 "' already holds a registered parameter; assign new values in place instead");
    }
  }
};

class PythonLoss : public nn::LossCell {
 public:
  Tensor construct(const Tensor& logits, const Tensor& labels) override {
    PYBIND11_OVERRIDE_PURE(Tensor, nn::LossCell, construct, logits, labels);
  }
};

PythonCell& python_cell(nn::Cell& cell) {
  auto* python = dynamic_cast<PythonCell*>(&cell);
  KILN_CHECK(python, cell.cell_name(),
             ": only cells defined in Python register attributes; a built-in layer's are fixed");
  return *python;
}

// The initializer handle the bindings pass around (its C++ pointer is to const).
struct InitializerHandle {
  nn::InitializerPtr init;
};

// weight_init=None (the layer's default), a name ("normal", "he_uniform", ...) or an initializer.
nn::InitializerPtr initializer_from(const py::object& value) {
  if (value.is_none()) return nullptr;
  if (py::isinstance<py::str>(value)) return nn::initializer_by_name(value.cast<std::string>());
  return value.cast<InitializerHandle>().init;
}

py::list named_list(const std::vector<nn::NamedTensor>& named) {
  py::list out;
  for (const auto& [name, tensor] : named) out.append(py::make_tuple(name, tensor));
  return out;
}

template <class Pool>
void bind_pool(py::module_& nn, const char* name) {
  py::class_<Pool, nn::Cell, std::shared_ptr<Pool>>(nn, name).def(
      py::init([](const py::object& kernel_size, const py::object& stride,
                  const std::string& pad_mode, const py::object& padding) {
        auto kernel = pair_of(kernel_size, "kernel_size");
        return std::make_shared<Pool>(kernel,
                                      nn::Pool2dOptions{.stride = pair_of(stride, "stride"),
                                                        .pad_mode = pad_mode,
                                                        .padding = pair_of(padding, "padding")});
      }),
      py::arg("kernel_size") = 1, py::arg("stride") = 1, py::arg("pad_mode") = "valid",
      py::arg("padding") = 0);
}

template <class Layer>
void bind_plain_layer(py::module_& nn, const char* name) {
  py::class_<Layer, nn::Cell, std::shared_ptr<Layer>>(nn, name).def(py::init<>());
}

}  // namespace

void bind_nn(py::module_& m) {
  py::module_ nn = m.def_submodule("nn", "Cells, layers, losses and initializers");

  py::class_<nn::Cell, PythonCell, std::shared_ptr<nn::Cell>>(nn, "Cell")
      .def(py::init_alias<std::string>(), py::arg("name"))
      .def("construct", &nn::Cell::construct, py::arg("x"))
      .def("trainable_params", &nn::Cell::trainable_params)
      .def("_parameters_and_names",
           [](const nn::Cell& c) { return named_list(c.parameters_and_names()); })
      .def("_buffers_and_names",
           [](const nn::Cell& c) { return named_list(c.buffers_and_names()); })
      .def("_state_and_names", [](const nn::Cell& c) { return named_list(c.state_and_names()); })
      .def(
          "set_train",
          [](nn::Cell& c, bool mode) {
            c.set_train(mode);
            return &c;
          },
          py::arg("mode") = true, py::return_value_policy::reference)
      .def_property_readonly("training", &nn::Cell::training)
      .def_property_readonly("cell_name", &nn::Cell::cell_name)
      .def("_register_parameter",
           [](nn::Cell& c, const std::string& name, const Tensor& value) {
             python_cell(c).add_parameter(name, value);
           })
      .def("_register_buffer", [](nn::Cell& c, const std::string& name,
                                  const Tensor& value) { python_cell(c).add_buffer(name, value); })
      .def("_register_cell",
           [](nn::Cell& c, const std::string& name, std::shared_ptr<nn::Cell> child) {
             python_cell(c).add_cell(name, std::move(child));
           });

  py::class_<nn::LossCell, PythonLoss, std::shared_ptr<nn::LossCell>>(nn, "LossBase")
      .def(py::init_alias<>())
      .def("construct", &nn::LossCell::construct, py::arg("logits"), py::arg("labels"))
      .def("__call__", &nn::LossCell::construct, py::arg("logits"), py::arg("labels"));

  // Layers, with MindSpore's argument names and defaults.
  py::class_<nn::Dense, nn::Cell, std::shared_ptr<nn::Dense>>(nn, "Dense")
      .def(py::init([](int64_t in_channels, int64_t out_channels, const py::object& weight_init,
                       const py::object& bias_init, bool has_bias) {
             return std::make_shared<nn::Dense>(
                 in_channels, out_channels,
                 nn::DenseOptions{.has_bias = has_bias,
                                  .weight_init = initializer_from(weight_init),
                                  .bias_init = initializer_from(bias_init)});
           }),
           py::arg("in_channels"), py::arg("out_channels"), py::arg("weight_init") = py::none(),
           py::arg("bias_init") = py::none(), py::arg("has_bias") = true)
      .def_property_readonly("weight", &nn::Dense::weight)
      .def_property_readonly("bias", &nn::Dense::bias);
  py::class_<nn::Conv2d, nn::Cell, std::shared_ptr<nn::Conv2d>>(nn, "Conv2d")
      .def(py::init([](int64_t in_channels, int64_t out_channels, const py::object& kernel_size,
                       const py::object& stride, const std::string& pad_mode,
                       const py::object& padding, const py::object& dilation, int64_t group,
                       bool has_bias, const py::object& weight_init, const py::object& bias_init) {
             return std::make_shared<nn::Conv2d>(
                 in_channels, out_channels, pair_of(kernel_size, "Conv2d: kernel_size"),
                 nn::Conv2dOptions{.stride = pair_of(stride, "Conv2d: stride"),
                                   .pad_mode = pad_mode,
                                   .padding = pair_of(padding, "Conv2d: padding"),
                                   .dilation = pair_of(dilation, "Conv2d: dilation"),
                                   .group = group,
                                   .has_bias = has_bias,
                                   .weight_init = initializer_from(weight_init),
                                   .bias_init = initializer_from(bias_init)});
           }),
           py::arg("in_channels"), py::arg("out_channels"), py::arg("kernel_size"),
           py::arg("stride") = 1, py::arg("pad_mode") = "same", py::arg("padding") = 0,
           py::arg("dilation") = 1, py::arg("group") = 1, py::arg("has_bias") = false,
           py::arg("weight_init") = py::none(), py::arg("bias_init") = py::none())
      .def_property_readonly("weight", &nn::Conv2d::weight)
      .def_property_readonly("bias", &nn::Conv2d::bias);
  bind_pool<nn::MaxPool2d>(nn, "MaxPool2d");
  bind_pool<nn::AvgPool2d>(nn, "AvgPool2d");
  bind_plain_layer<nn::ReLU>(nn, "ReLU");
  bind_plain_layer<nn::GELU>(nn, "GELU");
  bind_plain_layer<nn::Sigmoid>(nn, "Sigmoid");
  bind_plain_layer<nn::Tanh>(nn, "Tanh");
  bind_plain_layer<nn::Flatten>(nn, "Flatten");
  bind_plain_layer<nn::Identity>(nn, "Identity");
  py::class_<nn::Dropout, nn::Cell, std::shared_ptr<nn::Dropout>>(nn, "Dropout")
      .def(py::init([](std::optional<double> keep_prob, std::optional<double> p) {
             KILN_CHECK(!(keep_prob && p), "Dropout: give keep_prob or p, not both");
             if (keep_prob) return nn::Dropout::with_keep_prob(*keep_prob);
             return std::make_shared<nn::Dropout>(p.value_or(0.5));
           }),
           py::arg("keep_prob") = py::none(), py::arg("p") = py::none())
      .def_property_readonly("p", &nn::Dropout::p);
  py::class_<nn::SequentialCell, nn::Cell, std::shared_ptr<nn::SequentialCell>>(nn,
                                                                                "SequentialCell")
      .def(py::init<std::vector<std::shared_ptr<nn::Cell>>>(), py::arg("cells"),
           py::keep_alive<1, 2>())
      .def("append", &nn::SequentialCell::append, py::keep_alive<1, 2>())
      .def("__len__", &nn::SequentialCell::size)
      .def("__getitem__", [](const nn::SequentialCell& s, size_t i) { return s[i]; });
  // BatchNorm2d's and SyncBatchNorm's constructor (MindSpore's arguments).
  auto batch_norm_init = [](auto& cls) {
    using Layer = typename std::remove_reference_t<decltype(cls)>::type;
    cls.def(py::init([](int64_t num_features, double eps, double momentum, bool affine,
                        const py::object& gamma_init, const py::object& beta_init) {
              return std::make_shared<Layer>(
                  num_features, nn::BatchNorm2dOptions{.eps = eps,
                                                       .momentum = momentum,
                                                       .affine = affine,
                                                       .gamma_init = initializer_from(gamma_init),
                                                       .beta_init = initializer_from(beta_init)});
            }),
            py::arg("num_features"), py::arg("eps") = 1e-5, py::arg("momentum") = 0.9,
            py::arg("affine") = true, py::arg("gamma_init") = py::none(),
            py::arg("beta_init") = py::none());
  };
  py::class_<nn::BatchNorm2d, nn::Cell, std::shared_ptr<nn::BatchNorm2d>> batch_norm(nn,
                                                                                     "BatchNorm2d");
  batch_norm_init(batch_norm);
  batch_norm.def_property_readonly("gamma", &nn::BatchNorm2d::gamma)
      .def_property_readonly("beta", &nn::BatchNorm2d::beta)
      .def_property_readonly("moving_mean", &nn::BatchNorm2d::moving_mean)
      .def_property_readonly("moving_variance", &nn::BatchNorm2d::moving_variance);
  py::class_<nn::SyncBatchNorm, nn::BatchNorm2d, std::shared_ptr<nn::SyncBatchNorm>>
      sync_batch_norm(nn, "SyncBatchNorm");
  batch_norm_init(sync_batch_norm);
  py::class_<nn::LayerNorm, nn::Cell, std::shared_ptr<nn::LayerNorm>>(nn, "LayerNorm")
      .def(py::init([](std::vector<int64_t> normalized_shape, const py::object& gamma_init,
                       const py::object& beta_init, double epsilon) {
             return std::make_shared<nn::LayerNorm>(
                 std::move(normalized_shape),
                 nn::LayerNormOptions{.eps = epsilon,
                                      .gamma_init = initializer_from(gamma_init),
                                      .beta_init = initializer_from(beta_init)});
           }),
           py::arg("normalized_shape"), py::arg("gamma_init") = py::none(),
           py::arg("beta_init") = py::none(), py::arg("epsilon") = 1e-7);
  py::class_<nn::Embedding, nn::Cell, std::shared_ptr<nn::Embedding>>(nn, "Embedding")
      .def(py::init([](int64_t vocab_size, int64_t embedding_size,
                       const py::object& embedding_table) {
             return std::make_shared<nn::Embedding>(
                 vocab_size, embedding_size,
                 nn::EmbeddingOptions{.embedding_table_init = initializer_from(embedding_table)});
           }),
           py::arg("vocab_size"), py::arg("embedding_size"),
           py::arg("embedding_table") = py::none())
      .def_property_readonly("embedding_table", &nn::Embedding::embedding_table);

  // Losses.
  py::class_<nn::SoftmaxCrossEntropyWithLogits, nn::LossCell,
             std::shared_ptr<nn::SoftmaxCrossEntropyWithLogits>>(nn,
                                                                 "SoftmaxCrossEntropyWithLogits")
      .def(py::init<bool, const std::string&>(), py::arg("sparse") = false,
           py::arg("reduction") = "none");
  py::class_<nn::MSELoss, nn::LossCell, std::shared_ptr<nn::MSELoss>>(nn, "MSELoss")
      .def(py::init<const std::string&>(), py::arg("reduction") = "mean");
  py::class_<nn::L1Loss, nn::LossCell, std::shared_ptr<nn::L1Loss>>(nn, "L1Loss")
      .def(py::init<const std::string&>(), py::arg("reduction") = "mean");

  // Initializers (mindspore.common.initializer).
  py::class_<InitializerHandle>(nn, "Initializer")
      .def("__repr__", [](const InitializerHandle& h) { return h.init->name(); })
      .def("__call__", [](const InitializerHandle& h, std::vector<int64_t> shape) {
        return nn::initializer(h.init, Shape(std::move(shape)));
      });
  auto wrap = [](nn::InitializerPtr p) { return InitializerHandle{std::move(p)}; };
  nn.def(
      "HeUniform",
      [wrap](double negative_slope, const std::string& mode, const std::string& nonlinearity) {
        return wrap(nn::HeUniform(negative_slope,
                                  mode == "fan_out" ? nn::FanMode::fan_out : nn::FanMode::fan_in,
                                  nonlinearity));
      },
      py::arg("negative_slope") = 0.0, py::arg("mode") = "fan_in",
      py::arg("nonlinearity") = "leaky_relu");
  nn.def(
      "HeNormal",
      [wrap](double negative_slope, const std::string& mode, const std::string& nonlinearity) {
        return wrap(nn::HeNormal(negative_slope,
                                 mode == "fan_out" ? nn::FanMode::fan_out : nn::FanMode::fan_in,
                                 nonlinearity));
      },
      py::arg("negative_slope") = 0.0, py::arg("mode") = "fan_in",
      py::arg("nonlinearity") = "leaky_relu");
  nn.def(
      "Normal", [wrap](double sigma, double mean) { return wrap(nn::Normal(sigma, mean)); },
      py::arg("sigma") = 0.01, py::arg("mean") = 0.0);
  nn.def(
      "Uniform", [wrap](double scale) { return wrap(nn::Uniform(scale)); },
      py::arg("scale") = 0.07);
  nn.def(
      "XavierUniform", [wrap](double gain) { return wrap(nn::XavierUniform(gain)); },
      py::arg("gain") = 1.0);
  nn.def(
      "TruncatedNormal",
      [wrap](double sigma, double mean) { return wrap(nn::TruncatedNormal(sigma, mean)); },
      py::arg("sigma") = 0.01, py::arg("mean") = 0.0);
  nn.def("Zero", [wrap]() { return wrap(nn::Zero()); });
  nn.def("One", [wrap]() { return wrap(nn::One()); });
  nn.def(
      "Constant", [wrap](double value) { return wrap(nn::Constant(value)); }, py::arg("value"));
}

}  // namespace kiln::python
