"""How often Python runs a cell's construct: in GRAPH_MODE once per input shape however many steps
train (the compiled step runs with no Python), in PYNATIVE_MODE once per step."""
import numpy as np
import pytest

import kiln
import kiln.dataset as ds
from kiln import nn

from kiln_test_data import fashion_like_batches


class CountingNet(nn.Cell):
    def __init__(self):
        super().__init__()
        self.flatten = nn.Flatten()
        self.dense = nn.Dense(784, 10)
        self.construct_calls = 0

    def construct(self, x):
        self.construct_calls += 1
        return self.dense(self.flatten(x))


def model_of(net):
    return kiln.Model(net, loss_fn=nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean"),
                      optimizer=nn.Momentum(net.trainable_params(), learning_rate=0.01,
                                            momentum=0.9))


def two_shape_dataset():
    """50 rows in batches of 8: 6 full batches and one of 2 rows per epoch, so two shapes."""
    images, labels = fashion_like_batches(steps=50, batch_size=1)
    return ds.NumpySlicesDataset((images, labels), ["image", "label"], shuffle=False).batch(8)


def test_graph_mode_runs_construct_once_per_input_shape_over_many_steps():
    kiln.set_context(mode=kiln.GRAPH_MODE, device_target="CPU")
    net = CountingNet()
    model = model_of(net)
    model.train(6, two_shape_dataset())
    assert model.global_step == 6 * 7
    assert net.construct_calls == 2
    # More steps of shapes already seen: no more Python.
    images, labels = fashion_like_batches(steps=5, batch_size=8, seed=1)
    for step in range(5):
        rows = slice(step * 8, step * 8 + 8)
        model.train_step(kiln.Tensor(images[rows]), kiln.Tensor(labels[rows]))
    assert net.construct_calls == 2
    # A new shape is traced once.
    for _ in range(3):
        model.train_step(kiln.Tensor(images[:5]), kiln.Tensor(labels[:5]))
    assert net.construct_calls == 3


@pytest.mark.parametrize("sink_size", [-1, 3])
def test_graph_mode_sink_runs_construct_once_per_input_shape(sink_size):
    kiln.set_context(mode=kiln.GRAPH_MODE, device_target="CPU")
    net = CountingNet()
    model = model_of(net)
    model.train(4, two_shape_dataset(), dataset_sink_mode=True, sink_size=sink_size)
    assert model.global_step == 4 * 7
    assert net.construct_calls == 2


def test_pynative_mode_runs_construct_every_step():
    kiln.set_context(mode=kiln.PYNATIVE_MODE, device_target="CPU")
    net = CountingNet()
    model = model_of(net)
    model.train(3, two_shape_dataset())
    assert model.global_step == 3 * 7
    assert net.construct_calls == 3 * 7
    images, labels = fashion_like_batches(steps=1, batch_size=8)
    for _ in range(4):
        model.train_step(kiln.Tensor(images), kiln.Tensor(labels))
    assert net.construct_calls == 3 * 7 + 4
    assert np.isfinite(net.dense.weight.asnumpy()).all()
