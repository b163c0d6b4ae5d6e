"""Model(..., loss_scale_manager=...) with MindSpore's managers and argument names: fp16 training
with a fixed or dynamic loss scale, overflowed steps dropped, the dynamic scale divided on
overflow and multiplied after scale_window clean steps."""
import numpy as np
import pytest

import kiln
from kiln import nn
from kiln.amp import DynamicLossScaleManager, FixedLossScaleManager

from kiln_test_data import ArrayDataset, fashion_like_batches

STEPS = 12


def net_and_model(loss_scale_manager):
    kiln.set_seed(5)
    net = nn.SequentialCell([nn.Flatten(), nn.Dense(784, 32), nn.ReLU(), nn.Dense(32, 10)])
    model = kiln.Model(net, loss_fn=nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean"),
                       optimizer=nn.Momentum(net.trainable_params(), learning_rate=0.01,
                                             momentum=0.9),
                       amp_level="O2", amp_dtype="fp16", loss_scale_manager=loss_scale_manager)
    return net, model


def weights(net):
    return [p.asnumpy().copy() for p in net.trainable_params()]


def train(model):
    images, labels = fashion_like_batches(STEPS, 8)
    model.train(1, ArrayDataset(images, labels, 8))
    assert model.global_step == STEPS


@pytest.mark.parametrize("mode", [kiln.PYNATIVE_MODE, kiln.GRAPH_MODE], ids=["eager", "graph"])
def test_fixed_loss_scale_trains_fp16(mode):
    kiln.set_context(mode=mode, device_target="CPU")
    manager = FixedLossScaleManager(loss_scale=128.0, drop_overflow_update=True)
    assert manager.get_loss_scale() == 128.0
    net, model = net_and_model(manager)
    before = weights(net)
    train(model)
    assert model.skipped_steps == 0
    assert model.loss_scale == 128.0
    after = weights(net)
    assert all(np.isfinite(w).all() for w in after)
    assert any(not np.array_equal(a, b) for a, b in zip(after, before))


@pytest.mark.parametrize("mode", [kiln.PYNATIVE_MODE, kiln.GRAPH_MODE], ids=["eager", "graph"])
def test_fixed_loss_scale_that_overflows_fp16_drops_every_update(mode):
    kiln.set_context(mode=mode, device_target="CPU")
    net, model = net_and_model(FixedLossScaleManager(loss_scale=1e9, drop_overflow_update=True))
    before = weights(net)
    train(model)
    assert model.skipped_steps == STEPS
    for a, b in zip(weights(net), before):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("mode", [kiln.PYNATIVE_MODE, kiln.GRAPH_MODE], ids=["eager", "graph"])
def test_dynamic_loss_scale_grows_after_each_clean_window(mode):
    kiln.set_context(mode=mode, device_target="CPU")
    manager = DynamicLossScaleManager(init_loss_scale=2.0, scale_factor=4, scale_window=5)
    assert manager.get_loss_scale() == 2.0
    net, model = net_and_model(manager)
    train(model)
    # 12 clean steps: multiplied by 4 after steps 5 and 10.
    assert model.skipped_steps == 0
    assert model.loss_scale == 2.0 * 4 * 4


@pytest.mark.parametrize("mode", [kiln.PYNATIVE_MODE, kiln.GRAPH_MODE], ids=["eager", "graph"])
def test_dynamic_loss_scale_from_mindspores_default_falls_until_fp16_holds_the_gradients(mode):
    kiln.set_context(mode=mode, device_target="CPU")
    net, model = net_and_model(DynamicLossScaleManager())
    before = weights(net)
    train(model)
    skipped = model.skipped_steps
    # 2**24 overflows fp16 (max 65504): each overflow halves the scale and drops the step.
    assert 0 < skipped < STEPS
    assert model.loss_scale == 2.0 ** 24 / 2 ** skipped
    assert any(not np.array_equal(a, b) for a, b in zip(weights(net), before))


def test_dynamic_loss_scale_manager_checks_mindspores_arguments():
    with pytest.raises(ValueError, match="scale_factor"):
        DynamicLossScaleManager(scale_factor=1)
    with pytest.raises(ValueError, match="scale_window"):
        DynamicLossScaleManager(scale_window=0)
    with pytest.raises(ValueError, match="init_loss_scale"):
        DynamicLossScaleManager(init_loss_scale=0.5)
