"""A compiled mixed-precision step keeps each bf16-cast weight's copy from one step to the next
(written by the optimizer update); a weight changed through a numpy view between steps must be
used as changed, in the very next step."""
import numpy as np

import kiln
from kiln import nn

from kiln_test_data import ArrayDataset, fashion_like_batches


def trained(mode, edit):
    """Two steps, `edit` on the first weight's numpy view, two more steps; the weights."""
    kiln.set_context(mode=mode, device_target="CPU")
    kiln.set_seed(3)
    net = nn.SequentialCell([nn.Flatten(), nn.Dense(784, 64), nn.ReLU(), nn.Dense(64, 10)])
    model = kiln.Model(net, loss_fn=nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean"),
                       optimizer=nn.Momentum(net.trainable_params(), learning_rate=0.05,
                                             momentum=0.9),
                       amp_level="O2", amp_dtype="bf16", amp_strict=True)
    images, labels = fashion_like_batches(4, 16)
    model.train(1, ArrayDataset(images[:32], labels[:32], 16))
    edit(net.trainable_params()[0].asnumpy())
    model.train(1, ArrayDataset(images[32:], labels[32:], 16))
    return [p.asnumpy().copy() for p in net.trainable_params()]


def test_a_weight_written_through_numpy_between_compiled_steps_is_used(capfd):
    def flip(w):
        w *= -1.0
    graph = trained(kiln.GRAPH_MODE, flip)
    log = capfd.readouterr().err
    eager = trained(kiln.PYNATIVE_MODE, flip)
    unedited = trained(kiln.PYNATIVE_MODE, lambda w: None)
    # The compiled step did keep copies (else this test would not test them).
    assert "bf16 weight copies" in log, log
    for g, e, u in zip(graph, eager, unedited):
        np.testing.assert_allclose(g, e, rtol=0.05, atol=2e-3)
    # And the edit mattered: a step that used the stale copy would have trained the unedited net.
    assert np.abs(graph[0] - unedited[0]).max() > 0.05
