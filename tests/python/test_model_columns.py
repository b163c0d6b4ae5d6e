"""Model trains on rows of the network's inputs then the label: a Python cell of two inputs
(construct(self, a, b)) trains from three-column rows exactly as the same function of one
concatenated input does, eagerly and compiled; one of several outputs trains on its first."""
import numpy as np
import pytest

import kiln
import kiln.dataset as ds
from kiln import nn

ROWS, FEATURES, CLASSES, BATCH = 32, 4, 3, 8


def columns(seed=5):
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((ROWS, FEATURES)).astype(np.float32)
    b = rng.standard_normal((ROWS, FEATURES)).astype(np.float32)
    label = (np.argmax(a[:, :CLASSES] + b[:, :CLASSES], axis=1)).astype(np.int32)
    return a, b, label


class TwoTowers(nn.Cell):
    """dense_a(a) + dense_b(b): a network of two inputs."""

    def __init__(self):
        super().__init__()
        self.dense_a = nn.Dense(FEATURES, CLASSES)
        self.dense_b = nn.Dense(FEATURES, CLASSES, has_bias=False)

    def construct(self, a, b):
        return kiln.ops.add(self.dense_a(a), self.dense_b(b))


class TowersAndFeatures(TwoTowers):
    """The same logits, and the first tower's as a second output (features a user keeps)."""

    def construct(self, a, b):
        features = self.dense_a(a)
        return kiln.ops.add(features, self.dense_b(b)), features


def same_function_of_one_input(towers):
    """Dense(2F, C) on concat(a, b) with weight [W_a | W_b] and bias b_a: the same function, and
    the same training under momentum (its gradients are the towers' side by side)."""
    dense = nn.Dense(2 * FEATURES, CLASSES)
    dense.weight.asnumpy()[...] = np.concatenate(
        [towers.dense_a.weight.asnumpy(), towers.dense_b.weight.asnumpy()], axis=1)
    dense.bias.asnumpy()[...] = towers.dense_a.bias.asnumpy()
    return dense


def model_of(net):
    return kiln.Model(net, loss_fn=nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean"),
                      optimizer=nn.Momentum(net.trainable_params(), learning_rate=0.1,
                                            momentum=0.9))


class Losses(kiln.train.callback.Callback):
    def __init__(self):
        super().__init__()
        self.values = []

    def on_train_step_end(self, run_context):
        self.values.append(float(run_context.original_args().net_outputs))


def train_losses(net, data, epochs=2):
    losses = Losses()
    model_of(net).train(epochs, ds.NumpySlicesDataset(data, shuffle=False).batch(BATCH),
                        callbacks=[losses])
    return np.array(losses.values)


@pytest.mark.parametrize("mode", [kiln.PYNATIVE_MODE, kiln.GRAPH_MODE], ids=["eager", "graph"])
def test_a_cell_of_two_inputs_trains_as_its_one_input_equivalent(mode):
    kiln.set_context(mode=mode)
    a, b, label = columns()
    towers = TwoTowers()
    single = same_function_of_one_input(towers)
    two = train_losses(towers, {"a": a, "b": b, "label": label})
    one = train_losses(single, {"ab": np.concatenate([a, b], axis=1), "label": label})
    assert len(two) == 2 * ROWS // BATCH
    np.testing.assert_allclose(two, one, rtol=1e-5, atol=1e-6)
    assert two[-1] < two[0]
    trained = same_function_of_one_input(towers)
    np.testing.assert_allclose(trained.weight.asnumpy(), single.weight.asnumpy(), rtol=1e-5,
                               atol=1e-6)


def test_eager_and_graph_agree_on_two_inputs():
    a, b, label = columns(7)
    kiln.set_seed(3)
    eager = train_losses(TwoTowers(), {"a": a, "b": b, "label": label})
    kiln.set_context(mode=kiln.GRAPH_MODE)
    kiln.set_seed(3)
    graph = train_losses(TwoTowers(), {"a": a, "b": b, "label": label})
    np.testing.assert_allclose(graph, eager, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("mode", [kiln.PYNATIVE_MODE, kiln.GRAPH_MODE], ids=["eager", "graph"])
def test_several_outputs_train_on_the_first_and_predict_returns_them_all(mode):
    kiln.set_context(mode=mode)
    a, b, label = columns(9)
    kiln.set_seed(4)
    plain = train_losses(TwoTowers(), {"a": a, "b": b, "label": label})
    kiln.set_seed(4)
    net = TowersAndFeatures()
    with_features = train_losses(net, {"a": a, "b": b, "label": label})
    np.testing.assert_allclose(with_features, plain, rtol=1e-5, atol=1e-6)
    model = model_of(net)
    logits, features = model.predict(kiln.Tensor(a[:5]), kiln.Tensor(b[:5]))
    assert logits.shape == (5, CLASSES) and features.shape == (5, CLASSES)
    expected = a[:5] @ net.dense_a.weight.asnumpy().T + net.dense_a.bias.asnumpy()
    np.testing.assert_allclose(features.asnumpy(), expected, rtol=1e-5, atol=1e-6)
    metrics = model.eval(ds.NumpySlicesDataset({"a": a, "b": b, "label": label},
                                               shuffle=False).batch(BATCH))
    assert 0.0 <= metrics["accuracy"] <= 1.0 and np.isfinite(metrics["loss"])


def test_train_one_step_cell_takes_every_input_of_its_backbone():
    a, b, label = columns(11)
    kiln.set_seed(6)
    towers = TwoTowers()
    step = nn.TrainOneStepCell(
        nn.WithLossCell(towers, nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")),
        nn.Momentum(towers.trainable_params(), learning_rate=0.1, momentum=0.9))
    first = float(step(kiln.Tensor(a[:BATCH]), kiln.Tensor(b[:BATCH]),
                       kiln.Tensor(label[:BATCH])).asnumpy())
    kiln.set_seed(6)
    fresh = TwoTowers()
    logits = fresh(kiln.Tensor(a[:BATCH]), kiln.Tensor(b[:BATCH])).asnumpy()
    shifted = logits - logits.max(axis=1, keepdims=True)
    log_probs = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
    assert first == pytest.approx(-log_probs[np.arange(BATCH), label[:BATCH]].mean(), rel=1e-5)


def test_more_columns_than_the_network_takes_is_a_clear_error():
    net = nn.SequentialCell([nn.Flatten(), nn.Dense(4, 3)])
    model = model_of(net)
    data = {"a": np.ones((4, 4), np.float32), "b": np.ones((4, 4), np.float32),
            "label": np.zeros(4, np.int32)}
    three = ds.NumpySlicesDataset(data, shuffle=False).batch(2)
    with pytest.raises(Exception, match=r"SequentialCell takes one input .*got 2"):
        model.train(1, three)
    model.train(1, three.project(["a", "label"]))
    assert model.global_step == 2


def test_one_column_is_refused_with_its_name():
    net = nn.Dense(4, 3)
    only = ds.NumpySlicesDataset({"a": np.ones((4, 4), np.float32)}, shuffle=False).batch(2)
    with pytest.raises(ValueError, match=r"1 column\(s\) \['a'\]"):
        model_of(net).train(1, only)


def test_columns_of_different_batch_sizes_are_named():
    with pytest.raises(Exception, match=r"different numbers of samples"):
        model_of(TwoTowers()).train_step(kiln.Tensor(np.ones((4, FEATURES), np.float32)),
                                         kiln.Tensor(np.ones((3, FEATURES), np.float32)),
                                         kiln.Tensor(np.zeros(4, np.int32)))
