"""A LeNet written in Python from kiln.nn layers trains exactly as the built-in C++ LeNet."""
import sys

import numpy as np
import pytest

import kiln
from kiln import _kiln, nn

from kiln_test_data import EXAMPLES, fashion_like_batches

sys.path.insert(0, EXAMPLES)
from lenet import LeNet5  # noqa: E402  (the examples' network)


def copy_weights(source, target):
    """Copies the C++ LeNet's initial weights into the Python one (same order, same shapes)."""
    src = source.trainable_params()
    dst = target.trainable_params()
    assert [p.shape for p in src] == [p.shape for p in dst]
    for s, d in zip(src, dst):
        np.copyto(d.asnumpy(), s.asnumpy())


def train_losses(net, images, labels, batch_size):
    loss = nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")
    opt = nn.Momentum(net.trainable_params(), learning_rate=0.01, momentum=0.9)
    model = kiln.Model(net, loss_fn=loss, optimizer=opt)
    losses = []
    for step in range(len(labels) // batch_size):
        rows = slice(step * batch_size, (step + 1) * batch_size)
        losses.append(model.train_step(kiln.Tensor(images[rows]), kiln.Tensor(labels[rows])))
    return np.array(losses)


@pytest.mark.parametrize("mode", [kiln.PYNATIVE_MODE, kiln.GRAPH_MODE], ids=["eager", "graph"])
def test_python_lenet_trains_as_the_cpp_lenet(mode):
    kiln.set_context(mode=mode, device_target="CPU")
    images, labels = fashion_like_batches(steps=20, batch_size=16)
    kiln.set_seed(1)
    cpp_net = _kiln.models.create("lenet")
    python_net = LeNet5()
    copy_weights(cpp_net, python_net)
    cpp_losses = train_losses(cpp_net, images, labels, 16)
    python_losses = train_losses(python_net, images, labels, 16)
    assert len(cpp_losses) == 20
    assert np.all(np.isfinite(cpp_losses))
    assert cpp_losses[-1] < cpp_losses[0]  # it learns, so the comparison means something
    np.testing.assert_allclose(python_losses, cpp_losses, rtol=1e-6)
    # The trained weights agree too: the updates went to the Python cell's own parameters.
    for s, d in zip(cpp_net.trainable_params(), python_net.trainable_params()):
        np.testing.assert_allclose(d.asnumpy(), s.asnumpy(), rtol=1e-5, atol=1e-6)
