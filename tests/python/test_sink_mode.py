"""Data sink mode from Python: Model.train(..., dataset_sink_mode=True, sink_size=N) runs N steps
per sink inside the engine and trains exactly what per-step training trains."""
import sys

import numpy as np
import pytest

import kiln
import kiln.dataset as ds
from kiln import nn
from kiln.train.callback import Callback, LossMonitor

from kiln_test_data import EXAMPLES, fashion_like_batches

sys.path.insert(0, EXAMPLES)
from lenet import LeNet5  # noqa: E402  (the examples' network)


class SinkRecord(Callback):
    """What the step hooks see, call by call; losses from each sink's step_losses."""

    def __init__(self):
        super().__init__()
        self.begins = 0
        self.steps, self.steps_in_epoch, self.sinks, self.losses = [], [], [], []

    def on_train_step_begin(self, run_context):
        self.begins += 1

    def on_train_step_end(self, run_context):
        p = run_context.original_args()
        self.steps.append(p.cur_step_num)
        self.steps_in_epoch.append(p.cur_step_in_epoch)
        self.sinks.append(p.steps_this_sink)
        assert len(p.step_losses) == p.steps_this_sink
        assert p.step_losses[-1] == p.net_outputs
        self.losses.extend(p.step_losses)


class Rows:
    """A random-access Python source (GeneratorDataset reads it on the pipeline's threads)."""

    def __init__(self, images, labels):
        self.images, self.labels = images, labels

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, i):
        return self.images[i], self.labels[i]


def lenet_model(seed=1):
    kiln.set_seed(seed)
    net = LeNet5()
    opt = nn.Momentum(net.trainable_params(), learning_rate=0.01, momentum=0.9)
    loss = nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")
    return net, kiln.Model(net, loss_fn=loss, optimizer=opt)


def python_source_dataset(steps, batch_size, multiprocessing):
    images, labels = fashion_like_batches(steps, batch_size)
    dataset = ds.GeneratorDataset(Rows(images, labels), ["image", "label"], shuffle=False,
                                  num_parallel_workers=2, python_multiprocessing=multiprocessing)
    return dataset.batch(batch_size, drop_remainder=True)


@pytest.mark.parametrize("multiprocessing", [False, True], ids=["threads", "processes"])
@pytest.mark.parametrize("mode", [kiln.PYNATIVE_MODE, kiln.GRAPH_MODE], ids=["eager", "graph"])
def test_sink_and_per_step_training_give_the_same_losses_and_weights(mode, multiprocessing):
    kiln.set_context(mode=mode, device_target="CPU")
    runs = []
    for sink in (False, True):
        net, model = lenet_model()
        record = SinkRecord()
        model.train(2, python_source_dataset(10, 8, multiprocessing), callbacks=[record],
                    dataset_sink_mode=sink, sink_size=4)
        runs.append((record, [p.asnumpy().copy() for p in net.trainable_params()]))
    (per_step, per_step_weights), (sunk, sunk_weights) = runs
    assert per_step.sinks == [1] * 20
    assert sunk.sinks == [4, 4, 2, 4, 4, 2]
    assert len(per_step.losses) == 20 and per_step.losses[-1] < per_step.losses[0]
    assert sunk.losses == per_step.losses  # the same steps, bit for bit
    for a, b in zip(sunk_weights, per_step_weights):
        np.testing.assert_array_equal(a, b)


def test_callbacks_fire_once_per_sink_with_the_sinks_last_step():
    kiln.set_context(mode=kiln.GRAPH_MODE, device_target="CPU")
    _, model = lenet_model()
    record = SinkRecord()
    # An epoch of 10 steps in sinks of 4: 4, 4 and a last sink of 2.
    model.train(2, python_source_dataset(10, 8, False), callbacks=[record],
                dataset_sink_mode=True, sink_size=4)
    assert record.begins == 6
    assert record.steps == [4, 8, 10, 14, 18, 20]
    assert record.steps_in_epoch == [4, 8, 10, 4, 8, 10]
    assert record.sinks == [4, 4, 2, 4, 4, 2]
    assert model.global_step == 20


def test_loss_monitor_shows_every_step_at_the_sinks_end(capfd):
    class SinkEnd(Callback):
        def on_train_step_end(self, run_context):
            print("sink end", flush=True)

    kiln.set_context(mode=kiln.GRAPH_MODE, device_target="CPU")
    _, model = lenet_model()
    model.train(1, python_source_dataset(10, 8, False), callbacks=[LossMonitor(), SinkEnd()],
                dataset_sink_mode=True, sink_size=4)
    lines = capfd.readouterr().out.splitlines()
    shown = [line.split(",")[0] for line in lines]
    assert shown == [f"epoch: 1 step: {s}" for s in (1, 2, 3, 4)] + ["sink end"] + \
        [f"epoch: 1 step: {s}" for s in (5, 6, 7, 8)] + ["sink end"] + \
        [f"epoch: 1 step: {s}" for s in (9, 10)] + ["sink end"], lines


def test_a_sink_size_of_zero_is_refused_with_its_value():
    _, model = lenet_model()
    images, labels = fashion_like_batches(2, 8)
    dataset = ds.NumpySlicesDataset((images, labels), ["image", "label"]).batch(8)
    with pytest.raises(RuntimeError, match="sink_size must be -1 or > 0, got 0"):
        model.train(1, dataset, dataset_sink_mode=True, sink_size=0)
