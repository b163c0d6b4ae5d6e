"""nn.Cell subclassed in Python: registration, parameters, eager calls; layers and ops."""
import numpy as np
import pytest

import kiln
from kiln import Parameter, Tensor, nn, ops


class Scale(nn.Cell):
    def __init__(self):
        super().__init__()
        self.factor = Parameter(Tensor(np.full((3,), 2.0, np.float32)), name="factor")

    def construct(self, x):
        return x * self.factor


class TwoLayers(nn.Cell):
    def __init__(self):
        super().__init__()
        self.dense = nn.Dense(4, 3)
        self.scale = Scale()
        self.act = nn.ReLU()

    def construct(self, x):
        return self.act(self.scale(self.dense(x)))


def test_assigned_cells_and_parameters_are_registered_by_attribute_name():
    net = TwoLayers()
    names = [name for name, _ in net.parameters_and_names()]
    assert names == ["dense.weight", "dense.bias", "scale.factor"]
    assert len(net.trainable_params()) == 3
    assert isinstance(net.dense, nn.Cell) and isinstance(net, nn.Cell)
    # The registered parameter is the attribute's tensor, not a copy.
    assert net.parameters_dict()["scale.factor"]._data_ptr == net.scale.factor._data_ptr


def test_a_python_cell_runs_eagerly():
    net = TwoLayers()
    x = np.random.default_rng(0).standard_normal((5, 4)).astype(np.float32)
    w = net.dense.weight.asnumpy()
    b = net.dense.bias.asnumpy()
    expected = np.maximum((x @ w.T + b) * 2.0, 0)
    np.testing.assert_allclose(net(Tensor(x)).asnumpy(), expected, rtol=1e-5, atol=1e-6)


def test_reassigning_a_registered_child_is_refused():
    net = TwoLayers()
    with pytest.raises(RuntimeError, match="'dense' already holds"):
        net.dense = nn.Dense(4, 3)


def test_a_cell_without_construct_says_so():
    class Empty(nn.Cell):
        pass

    with pytest.raises(RuntimeError, match="construct"):
        Empty()(Tensor(np.zeros((1, 2), np.float32)))


def test_sequential_cell_takes_python_and_builtin_cells():
    seq = nn.SequentialCell([nn.Dense(4, 3), Scale()])
    assert len(seq) == 2
    assert [n for n, _ in seq.parameters_and_names()] == ["0.weight", "0.bias", "1.factor"]
    out = seq(Tensor(np.ones((2, 4), np.float32)))
    assert out.shape == (2, 3)


def test_layer_arguments_take_mindspore_names():
    conv = nn.Conv2d(3, 8, kernel_size=3, stride=1, pad_mode="same", has_bias=True,
                     weight_init="normal")
    assert conv.weight.shape == (8, 3, 3, 3) and conv.bias.shape == (8,)
    assert nn.Dropout(keep_prob=0.9).p == pytest.approx(0.1)
    bn = nn.BatchNorm2d(8)
    y = bn(conv(Tensor(np.ones((2, 3, 5, 5), np.float32))))
    assert y.shape == (2, 8, 5, 5)
    pooled = nn.MaxPool2d(kernel_size=2, stride=2)(y)
    assert pooled.shape == (2, 8, 2, 2)
    with pytest.raises(RuntimeError, match="pad_mode"):
        nn.Conv2d(3, 8, 3, pad_mode="circular")


def test_ops_functions_match_numpy():
    x = np.random.default_rng(1).standard_normal((3, 5)).astype(np.float32)
    t = Tensor(x)
    np.testing.assert_allclose(ops.relu(t).asnumpy(), np.maximum(x, 0))
    np.testing.assert_allclose(ops.reduce_mean(t, [1]).asnumpy(), x.mean(axis=1), rtol=1e-6)
    soft = ops.softmax(t).asnumpy()
    ref = np.exp(x - x.max(1, keepdims=True))
    np.testing.assert_allclose(soft, ref / ref.sum(1, keepdims=True), rtol=1e-5)
    np.testing.assert_array_equal(ops.argmax(t, 1).asnumpy(), x.argmax(1))
    np.testing.assert_allclose(ops.transpose(t, [1, 0]).asnumpy(), x.T)
    assert ops.cast(t, kiln.int32).dtype == kiln.int32
