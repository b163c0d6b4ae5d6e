// Optimizers (kiln._kiln.nn, as MindSpore places them) and learning-rate schedules.
#include <pybind11/functional.h>
#include <pybind11/stl.h>

#include "bindings.h"
#include "kiln/optim/adam.h"
#include "kiln/optim/lr_schedule.h"
#include "kiln/optim/momentum.h"
#include "kiln/optim/sgd.h"

namespace py = pybind11;

namespace kiln::python {

namespace {

// A schedule made in C++ (piecewise_constant_lr, ...): kept as a C++ function, so a step reads
// its learning rate without the GIL.
struct Schedule {
  optim::LearningRate lr;
};

// learning_rate: a number, a Schedule, a list of per-step values (MindSpore's dynamic learning
// rate: the last value after the list ends) or a Python callable of the step.
optim::LearningRate learning_rate_from(const py::object& value) {
  if (py::isinstance<py::float_>(value) || py::isinstance<py::int_>(value)) {
    return optim::constant_lr(value.cast<double>());
  }
  if (py::isinstance<Schedule>(value)) return value.cast<Schedule>().lr;
  if (py::isinstance<py::list>(value) || py::isinstance<py::tuple>(value)) {
    auto values = value.cast<std::vector<double>>();
    KILN_CHECK(!values.empty(), "learning_rate: the list of per-step values is empty");
    return [values](int64_t step) {
      return values[size_t(std::min<int64_t>(step, int64_t(values.size()) - 1))];
    };
  }
  if (PyCallable_Check(value.ptr())) return value.cast<optim::LearningRate>();
  throw Error(
      "learning_rate: expected a number, a list of per-step values, a schedule or a "
      "callable of the step, got " +
      py::repr(value).cast<std::string>());
}

std::vector<Tensor> params_from(const py::iterable& params) {
  std::vector<Tensor> out;
  for (auto p : params) out.push_back(p.cast<Tensor>());
  KILN_CHECK(!out.empty(), "optimizer: params is empty (pass net.trainable_params())");
  return out;
}

}  // namespace

void bind_optim(py::module_& m) {
  py::module_ nn = m.attr("nn");
  py::class_<optim::Optimizer, std::shared_ptr<optim::Optimizer>>(nn, "Optimizer")
      .def("step", &optim::Optimizer::step)
      .def("zero_grad", &optim::Optimizer::zero_grad)
      .def_property_readonly("parameters", &optim::Optimizer::parameters)
      .def_property("global_step", &optim::Optimizer::global_step,
                    &optim::Optimizer::set_global_step)
      .def("get_lr", &optim::Optimizer::current_lr)
      .def_property_readonly("name", &optim::Optimizer::name);
  py::class_<optim::Momentum, optim::Optimizer, std::shared_ptr<optim::Momentum>>(nn, "Momentum")
      .def(py::init([](const py::iterable& params, const py::object& learning_rate, double momentum,
                       double weight_decay, bool use_nesterov) {
             return std::make_shared<optim::Momentum>(
                 params_from(params), learning_rate_from(learning_rate),
                 optim::MomentumOptions{
                     .momentum = momentum, .weight_decay = weight_decay, .nesterov = use_nesterov});
           }),
           py::arg("params"), py::arg("learning_rate"), py::arg("momentum"),
           py::arg("weight_decay") = 0.0, py::arg("use_nesterov") = false);
  py::class_<optim::SGD, optim::Optimizer, std::shared_ptr<optim::SGD>>(nn, "SGD").def(
      py::init(
          [](const py::iterable& params, const py::object& learning_rate, double weight_decay) {
            return std::make_shared<optim::SGD>(params_from(params),
                                                learning_rate_from(learning_rate), weight_decay);
          }),
      py::arg("params"), py::arg("learning_rate") = 0.1, py::arg("weight_decay") = 0.0);
  py::class_<optim::Adam, optim::Optimizer, std::shared_ptr<optim::Adam>>(nn, "Adam")
      .def(py::init([](const py::iterable& params, const py::object& learning_rate, double beta1,
                       double beta2, double eps, double weight_decay) {
             return std::make_shared<optim::Adam>(
                 params_from(params), learning_rate_from(learning_rate),
                 optim::AdamOptions{
                     .beta1 = beta1, .beta2 = beta2, .eps = eps, .weight_decay = weight_decay});
           }),
           py::arg("params"), py::arg("learning_rate") = 1e-3, py::arg("beta1") = 0.9,
           py::arg("beta2") = 0.999, py::arg("eps") = 1e-8, py::arg("weight_decay") = 0.0);
  py::class_<optim::AdamW, optim::Adam, std::shared_ptr<optim::AdamW>>(nn, "AdamWeightDecay")
      .def(py::init([](const py::iterable& params, const py::object& learning_rate, double beta1,
                       double beta2, double eps, double weight_decay) {
             return std::make_shared<optim::AdamW>(
                 params_from(params), learning_rate_from(learning_rate),
                 optim::AdamOptions{
                     .beta1 = beta1, .beta2 = beta2, .eps = eps, .weight_decay = weight_decay});
           }),
           py::arg("params"), py::arg("learning_rate") = 1e-3, py::arg("beta1") = 0.9,
           py::arg("beta2") = 0.999, py::arg("eps") = 1e-6, py::arg("weight_decay") = 0.0);
  nn.attr("AdamW") = nn.attr("AdamWeightDecay");

  py::class_<Schedule>(nn, "LearningRateSchedule")
      .def("__call__", [](const Schedule& s, int64_t step) { return s.lr(step); });
  nn.def(
      "piecewise_constant_lr",
      [](std::vector<int64_t> milestone, std::vector<double> values) {
        return Schedule{optim::piecewise_constant_lr(std::move(milestone), std::move(values))};
      },
      py::arg("milestone"), py::arg("learning_rates"));
  nn.def(
      "cosine_decay_lr",
      [](double min_lr, double max_lr, int64_t total_step) {
        return Schedule{optim::cosine_decay_lr(min_lr, max_lr, total_step)};
      },
      py::arg("min_lr"), py::arg("max_lr"), py::arg("total_step"));
  nn.def(
      "step_lr",
      [](double base, int64_t step_size, double gamma) {
        return Schedule{optim::step_lr(base, step_size, gamma)};
      },
      py::arg("learning_rate"), py::arg("step_size"), py::arg("gamma") = 0.1);
  nn.def(
      "linear_warmup",
      [](const Schedule& after, int64_t warmup_steps, double start_factor) {
        return Schedule{optim::linear_warmup(after.lr, warmup_steps, start_factor)};
      },
      py::arg("after"), py::arg("warmup_steps"), py::arg("start_factor") = 0.0);
}

}  // namespace kiln::python
