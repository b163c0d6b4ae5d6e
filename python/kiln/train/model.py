"""Model: MindSpore's high-level training API over the engine's train::Model.

``Model(net, loss_fn=loss, optimizer=opt, metrics={"accuracy"}, amp_level="O2")`` then
``model.train(epoch, train_dataset, callbacks=[...], dataset_sink_mode=True)``. The loops run in
C++ with the GIL released; in GRAPH_MODE a Python-defined network's construct is traced once
per input shape and the compiled step runs with no Python after that.
"""
from .. import _kiln
from ..amp import LossScaleManager
from ..common.tensor import Tensor
from ..nn.metrics import Metric
from ..nn.wrap import TrainOneStepCell, network_and_loss


def _as_tensor(value):
    return value if isinstance(value, Tensor) else Tensor(value)


def _release_workers(dataset):
    """Stops the worker processes of a data set's python_multiprocessing map functions."""
    release = getattr(dataset, "_release_workers", None)
    if release is not None:
        release()


def _native_dataset(dataset, method):
    native = getattr(dataset, "_native", None)
    if native is None:
        raise TypeError(f"Model.{method}: {type(dataset).__name__} is not a Kiln data set; "
                        "build it with kiln.dataset (GeneratorDataset, MnistDataset, ...), whose "
                        "pipeline runs in the engine")
    columns = native.get_col_names()
    if len(columns) < 2:
        # A row is the network's inputs, then the label.
        raise ValueError(f"Model.{method}: the data set's rows have {len(columns)} column(s) "
                         f"{columns}; Kiln's Model trains on the network's inputs then the "
                         "label, (data, label) at least")
    return native


def _metric_names(metrics):
    """{user's name: engine's name} from a set/list of names or a dict of name -> metric."""
    if not metrics:
        return {}
    if isinstance(metrics, dict):
        pairs = metrics.items()
    else:
        pairs = ((m, m) for m in metrics)
    names = {}
    for user_name, metric in pairs:
        if isinstance(metric, Metric) or (isinstance(metric, type) and issubclass(metric, Metric)):
            metric = metric._kiln_name
        names[str(user_name)] = {"acc": "accuracy"}.get(metric, metric)
    return names


class Model:
    def __init__(self, network, loss_fn=None, optimizer=None, metrics=None, eval_network=None,
                 eval_indexes=None, amp_level="O0", boost_level="O0", keep_batchnorm_fp32=True,
                 loss_scale_manager=None, amp_dtype="bf16", amp_strict=False):
        if eval_network is not None or eval_indexes is not None:
            raise ValueError("Model: eval_network/eval_indexes are not available; Kiln evaluates "
                             "the network with loss_fn")
        if boost_level != "O0":
            raise ValueError(f"Model: boost_level {boost_level!r} is not available (only 'O0')")
        if loss_scale_manager is not None and not isinstance(loss_scale_manager, LossScaleManager):
            raise TypeError("Model: loss_scale_manager must be a kiln.amp.FixedLossScaleManager or "
                            "DynamicLossScaleManager")
        self._metrics = _metric_names(metrics)
        # MindSpore's other forms: Model(TrainOneStepCell(...)), and Model(net_with_loss,
        # optimizer=...) where the network computes the loss from (data, label) itself.
        if isinstance(network, TrainOneStepCell) and loss_fn is None and optimizer is None:
            network, optimizer = network.network, network.optimizer
        if loss_fn is None and optimizer is not None:
            network, loss_fn = network_and_loss(network)
        self._network = network
        self._loss_fn = loss_fn
        self._optimizer = optimizer
        self._native = None
        if loss_fn is not None and optimizer is not None:
            self._native = _kiln.train.Model(
                network, loss_fn, optimizer, sorted(set(self._metrics.values())), amp_level,
                keep_batchnorm_fp32, amp_dtype,
                loss_scale_manager._spec() if loss_scale_manager is not None else "",
                bool(amp_strict))

    def _require_native(self, method):
        if self._native is None:
            raise ValueError(f"Model.{method}: needs loss_fn and optimizer "
                             "(Model(net, loss_fn=..., optimizer=...))")
        return self._native

    @property
    def train_network(self):
        return self._network

    @property
    def predict_network(self):
        return self._network

    def train(self, epoch, train_dataset, callbacks=None, dataset_sink_mode=False, sink_size=-1,
              initial_epoch=0):
        """Trains to ``epoch`` epochs (passes over ``train_dataset``).

        With ``dataset_sink_mode=True`` each sink runs ``sink_size`` steps inside the engine
        (-1: the whole epoch), batches going from the pipeline straight into the step, with no
        Python in between; callbacks' step hooks fire once per sink, and
        ``cb_params.step_losses`` holds each of its steps' losses (LossMonitor prints them all
        at the sink's end). Ctrl-C ends training with KeyboardInterrupt at a sink's end.
        Unlike MindSpore, ``sink_size`` does not redefine an epoch: one that it does not divide
        ends with a shorter sink."""
        native = self._require_native("train")
        if callbacks is None:
            callbacks = []
        elif not isinstance(callbacks, (list, tuple)):
            callbacks = [callbacks]
        try:
            native.train(epoch, _native_dataset(train_dataset, "train"), list(callbacks),
                         dataset_sink_mode, sink_size, initial_epoch)
        finally:
            _release_workers(train_dataset)

    def train_step(self, *columns):
        """One training step on one batch: the network's inputs, then the label, as a dataset
        row holds them (``train_step(data, label)``, ``train_step(a, b, label)``); returns the
        loss as a float."""
        if len(columns) < 2:
            raise ValueError("Model.train_step: takes the network's inputs then the label, "
                             f"at least (data, label); got {len(columns)} argument(s)")
        native = self._require_native("train_step")
        return native.train_step([_as_tensor(c) for c in columns[:-1]], _as_tensor(columns[-1]))

    def eval(self, valid_dataset, callbacks=None, dataset_sink_mode=False):
        """{metric name: value} over one epoch of ``valid_dataset``."""
        native = self._require_native("eval")
        wanted = self._metrics or {"accuracy": "accuracy", "loss": "loss"}
        try:
            values = native.eval(_native_dataset(valid_dataset, "eval"),
                                 sorted(set(wanted.values())))
        finally:
            _release_workers(valid_dataset)
        return {user: values[engine] for user, engine in wanted.items()}

    def predict(self, *predict_data):
        """The network's output in evaluation mode, without gradients: a Tensor, or a tuple of
        them for a network of several outputs. A network of several inputs takes them all."""
        if not predict_data:
            raise ValueError("Model.predict: takes the network's input tensors, got none")
        inputs = [_as_tensor(d) for d in predict_data]
        if self._native is not None:
            return self._native.predict(inputs)
        was_training = self._network.training
        self._network.set_train(False)
        try:
            return self._network(*inputs)
        finally:
            self._network.set_train(was_training)

    @property
    def global_step(self):
        return self._require_native("global_step").global_step

    @property
    def skipped_steps(self):
        """Steps whose gradients overflowed and were dropped (with a loss-scale manager)."""
        return self._require_native("skipped_steps").skipped_steps

    @property
    def loss_scale(self):
        """The loss scale now (a DynamicLossScaleManager's changes as it trains); None without
        loss scaling."""
        return self._require_native("loss_scale").loss_scale
