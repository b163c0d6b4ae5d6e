// Model, callbacks (subclassable in Python), checkpoints and the model zoo.
//
// Model's loops run with the GIL released: the compiled step runs no Python, and Python code
// that C++ calls back (a Python construct while it is traced, a Python callback, a Python
// learning-rate function) takes the GIL itself through its override.
#include <pybind11/functional.h>
#include <pybind11/stl.h>

#include <chrono>

#include "bindings.h"
#include "kiln/data/dataset.h"
#include "kiln/models/lenet.h"
#include "kiln/models/zoo.h"
#include "kiln/train/callbacks.h"
#include "kiln/train/checkpoint.h"
#include "kiln/train/model.h"

namespace py = pybind11;

namespace kiln::python {

namespace {

class PythonCallback : public train::Callback {
 public:
  void on_train_begin(train::RunContext& ctx) override {
    PYBIND11_OVERRIDE(void, train::Callback, on_train_begin, std::ref(ctx));
  }
  void on_train_epoch_begin(train::RunContext& ctx) override {
    PYBIND11_OVERRIDE(void, train::Callback, on_train_epoch_begin, std::ref(ctx));
  }
  void on_train_step_begin(train::RunContext& ctx) override {
    PYBIND11_OVERRIDE(void, train::Callback, on_train_step_begin, std::ref(ctx));
  }
  void on_train_step_end(train::RunContext& ctx) override {
    PYBIND11_OVERRIDE(void, train::Callback, on_train_step_end, std::ref(ctx));
  }
  void on_train_epoch_end(train::RunContext& ctx) override {
    PYBIND11_OVERRIDE(void, train::Callback, on_train_epoch_end, std::ref(ctx));
  }
  void on_train_end(train::RunContext& ctx) override {
    PYBIND11_OVERRIDE(void, train::Callback, on_train_end, std::ref(ctx));
  }
};

// Ctrl-C while the engine trains with the GIL released: Python only notes the signal, so at a
// step's end (a sink's in sink mode) this checks for it under the GIL and ends training with
// the KeyboardInterrupt, unwinding the engine's loop (and its pipeline threads) on the way.
// Taking the GIL waits for the pipeline's threads that run Python, so it is taken at most every
// kInterval: soon enough for a person, rarely enough not to slow short steps.
class InterruptCheck : public train::Callback {
 public:
  void on_train_step_end(train::RunContext&) override {
    const auto now = std::chrono::steady_clock::now();
    if (now - last_check_ < kInterval) return;
    last_check_ = now;
    py::gil_scoped_acquire gil;
    if (PyErr_CheckSignals() != 0) throw py::error_already_set();
  }

 private:
  static constexpr std::chrono::milliseconds kInterval{20};
  std::chrono::steady_clock::time_point last_check_{};
};

std::vector<nn::NamedTensor> named_tensors_from(const py::object& value) {
  std::vector<nn::NamedTensor> out;
  if (py::isinstance<py::dict>(value)) {
    for (auto [name, tensor] : value.cast<py::dict>()) {
      out.emplace_back(name.cast<std::string>(), tensor.cast<Tensor>());
    }
    return out;
  }
  // MindSpore's list form: [{"name": ..., "data": ...}, ...], or (name, tensor) pairs.
  for (auto item : value.cast<py::iterable>()) {
    if (py::isinstance<py::dict>(item)) {
      out.emplace_back(item["name"].cast<std::string>(), item["data"].cast<Tensor>());
    } else {
      out.push_back(item.cast<nn::NamedTensor>());
    }
  }
  return out;
}

}  // namespace

void bind_train(py::module_& m) {
  py::module_ train = m.def_submodule("train", "Model, callbacks, checkpoints");

  py::class_<train::CallbackParams>(train, "CallbackParams")
      .def_property_readonly(
          "train_network",
          [](const train::CallbackParams& p) -> nn::Cell* { return p.train_network; },
          py::return_value_policy::reference)
      .def_property_readonly(
          "optimizer",
          [](const train::CallbackParams& p) -> optim::Optimizer* { return p.optimizer; },
          py::return_value_policy::reference)
      .def_readonly("epoch_num", &train::CallbackParams::epoch_num)
      .def_readonly("cur_epoch_num", &train::CallbackParams::cur_epoch_num)
      .def_readonly("batch_num", &train::CallbackParams::batch_num)
      .def_readonly("cur_step_num", &train::CallbackParams::cur_step_num)
      .def_readonly("cur_step_in_epoch", &train::CallbackParams::cur_step_in_epoch)
      .def_readonly("steps_this_sink", &train::CallbackParams::steps_this_sink)
      .def_readonly("net_outputs", &train::CallbackParams::net_outputs)
      .def_readonly("step_losses", &train::CallbackParams::step_losses)
      .def_readonly("dataset_sink_mode", &train::CallbackParams::dataset_sink_mode)
      .def_readonly("batch_size", &train::CallbackParams::batch_size);
  py::class_<train::RunContext>(train, "RunContext")
      .def("original_args", &train::RunContext::original_args, py::return_value_policy::reference)
      .def("request_stop", &train::RunContext::request_stop)
      .def("get_stop_requested", &train::RunContext::get_stop_requested);

  py::class_<train::Callback, PythonCallback, std::shared_ptr<train::Callback>>(train, "Callback")
      .def(py::init_alias<>())
      .def("on_train_begin", &train::Callback::on_train_begin)
      .def("on_train_epoch_begin", &train::Callback::on_train_epoch_begin)
      .def("on_train_step_begin", &train::Callback::on_train_step_begin)
      .def("on_train_step_end", &train::Callback::on_train_step_end)
      .def("on_train_epoch_end", &train::Callback::on_train_epoch_end)
      .def("on_train_end", &train::Callback::on_train_end);
  py::class_<train::LossMonitor, train::Callback, std::shared_ptr<train::LossMonitor>>(
      train, "LossMonitor")
      .def(py::init([](int64_t per_print_times) {
             return std::make_shared<train::LossMonitor>(per_print_times);
           }),
           py::arg("per_print_times") = 1);
  py::class_<train::TimeMonitor, train::Callback, std::shared_ptr<train::TimeMonitor>>(
      train, "TimeMonitor")
      .def(py::init([](std::optional<int64_t> data_size) {
             return std::make_shared<train::TimeMonitor>(data_size.value_or(0));
           }),
           py::arg("data_size") = py::none());
  py::class_<train::CheckpointConfig>(train, "CheckpointConfig")
      .def(py::init([](int64_t save_checkpoint_steps, int64_t keep_checkpoint_max,
                       bool save_at_epoch_end, bool save_optimizer_state) {
             return train::CheckpointConfig{.save_checkpoint_steps = save_checkpoint_steps,
                                            .keep_checkpoint_max = keep_checkpoint_max,
                                            .save_at_epoch_end = save_at_epoch_end,
                                            .save_optimizer_state = save_optimizer_state};
           }),
           py::arg("save_checkpoint_steps") = 1, py::arg("keep_checkpoint_max") = 5,
           py::arg("save_at_epoch_end") = false, py::arg("save_optimizer_state") = true)
      .def_readonly("save_checkpoint_steps", &train::CheckpointConfig::save_checkpoint_steps)
      .def_readonly("keep_checkpoint_max", &train::CheckpointConfig::keep_checkpoint_max);
  py::class_<train::ModelCheckpoint, train::Callback, std::shared_ptr<train::ModelCheckpoint>>(
      train, "ModelCheckpoint")
      .def(py::init([](const std::string& prefix, std::optional<std::string> directory,
                       std::optional<train::CheckpointConfig> config) {
             return std::make_shared<train::ModelCheckpoint>(
                 prefix, directory.value_or("."), config.value_or(train::CheckpointConfig{}));
           }),
           py::arg("prefix") = "CKP", py::arg("directory") = py::none(),
           py::arg("config") = py::none())
      .def_property_readonly("latest_checkpoint", &train::ModelCheckpoint::latest_checkpoint);

  py::class_<train::Model>(train, "Model")
      .def(py::init([](std::shared_ptr<nn::Cell> network, std::shared_ptr<nn::LossCell> loss_fn,
                       std::shared_ptr<optim::Optimizer> optimizer,
                       std::vector<std::string> metrics, const std::string& amp_level,
                       bool keep_batchnorm_fp32, const std::string& amp_dtype,
                       const std::string& loss_scale, bool amp_strict) {
             return std::make_unique<train::Model>(
                 std::move(network), std::move(loss_fn), std::move(optimizer),
                 train::ModelOptions{.amp_level = amp_level,
                                     .keep_batchnorm_fp32 = keep_batchnorm_fp32,
                                     .amp_dtype = amp_dtype,
                                     .amp_strict = amp_strict,
                                     .loss_scale = loss_scale,
                                     .metrics = std::move(metrics)});
           }),
           py::arg("network"), py::arg("loss_fn"), py::arg("optimizer"), py::arg("metrics"),
           py::arg("amp_level"), py::arg("keep_batchnorm_fp32"), py::arg("amp_dtype"),
           py::arg("loss_scale"), py::arg("amp_strict") = false, py::keep_alive<1, 2>(),
           py::keep_alive<1, 3>(), py::keep_alive<1, 4>())
      .def(
          "train",
          [](train::Model& model, int64_t epochs, const data::Dataset& dataset,
             const std::vector<train::CallbackPtr>& callbacks, bool dataset_sink_mode,
             int64_t sink_size, int64_t initial_epoch) {
            std::vector<train::CallbackPtr> with_interrupt = callbacks;
            with_interrupt.push_back(std::make_shared<InterruptCheck>());
            py::gil_scoped_release release;
            model.train(epochs, dataset, with_interrupt,
                        {.dataset_sink_mode = dataset_sink_mode,
                         .sink_size = sink_size,
                         .initial_epoch = initial_epoch});
          },
          py::arg("epoch"), py::arg("train_dataset"), py::arg("callbacks"),
          py::arg("dataset_sink_mode"), py::arg("sink_size"), py::arg("initial_epoch"))
      .def(
          "train_step",
          [](train::Model& model, const std::vector<Tensor>& inputs, const Tensor& label) {
            py::gil_scoped_release release;
            return model.train_step(inputs, label);
          },
          py::arg("inputs"), py::arg("label"))
      .def(
          "eval",
          [](train::Model& model, const data::Dataset& dataset,
             const std::vector<std::string>& metrics) {
            py::gil_scoped_release release;
            return model.eval(dataset, metrics);
          },
          py::arg("valid_dataset"), py::arg("metrics"))
      .def(
          "predict",
          [](train::Model& model, const std::vector<Tensor>& inputs) -> py::object {
            std::vector<Tensor> outputs;
            {
              py::gil_scoped_release release;
              outputs = model.predict(inputs);
            }
            if (outputs.size() == 1) return py::cast(outputs[0]);
            return py::tuple(py::cast(outputs));
          },
          py::arg("inputs"))
      .def_property_readonly("global_step", &train::Model::global_step)
      .def_property_readonly("skipped_steps", &train::Model::skipped_steps)
      .def_property_readonly("loss_scale", [](const train::Model& model) -> py::object {
        const auto* manager = model.loss_scale_manager();
        return manager ? py::cast(manager->scale()) : py::none();
      });

  train.def(
      "save_checkpoint",
      [](const py::object& save_obj, const std::string& path,
         std::map<std::string, std::string> metadata) {
        if (py::isinstance<nn::Cell>(save_obj)) {
          const auto& net = save_obj.cast<const nn::Cell&>();
          train::save_checkpoint(net, path, {.metadata = std::move(metadata)});
        } else {
          train::save_checkpoint(named_tensors_from(save_obj), path, metadata);
        }
      },
      py::arg("save_obj"), py::arg("ckpt_file_name"),
      py::arg("append_dict") = std::map<std::string, std::string>{});
  train.def(
      "load_checkpoint",
      [](const std::string& path) {
        train::Checkpoint checkpoint = train::load_checkpoint(path);
        py::dict out;
        for (const auto& [name, tensor] : checkpoint.tensors) out[py::str(name)] = tensor;
        return out;
      },
      py::arg("ckpt_file_name"));
  train.def(
      "load_param_into_net",
      [](nn::Cell& net, const py::object& parameter_dict, bool strict_load) {
        train::Checkpoint checkpoint{.source = "parameter_dict",
                                     .tensors = named_tensors_from(parameter_dict)};
        return train::load_param_into_net(net, checkpoint, strict_load);
      },
      py::arg("net"), py::arg("parameter_dict"), py::arg("strict_load") = false);

  py::module_ models = m.def_submodule("models", "The model zoo");
  models.def(
      "create",
      [](const std::string& name, int64_t num_classes, int64_t in_channels, int64_t image_size) {
        return models::create(name, {.num_classes = num_classes,
                                     .in_channels = in_channels,
                                     .image_height = image_size,
                                     .image_width = image_size});
      },
      py::arg("name"), py::arg("num_classes") = 10, py::arg("in_channels") = 1,
      py::arg("image_size") = 28);
  models.def("model_names", &models::model_names);
}

void bind_native_dataset_fallback(py::module_& m) {
  if (!py::detail::get_type_info(typeid(data::Dataset))) {
    py::class_<data::Dataset>(m, "_NativeDataset")
        .def("get_dataset_size", &data::Dataset::get_dataset_size);
  }
  // In-memory arrays as a batched native data set, for tests and benchmarks that need no
  // pipeline of their own.
  m.def(
      "_numpy_slices_dataset",
      [](std::vector<Tensor> columns, std::vector<std::string> column_names, int64_t batch_size,
         bool shuffle) -> data::Dataset {
        return data::NumpySlicesDataset(std::move(columns), std::move(column_names),
                                        {.num_parallel_workers = 1, .shuffle = shuffle})
            .batch(batch_size, /*drop_remainder=*/true);
      },
      py::arg("columns"), py::arg("column_names"), py::arg("batch_size"),
      py::arg("shuffle") = false);
}

}  // namespace kiln::python
