"""Model trains on rows of (data, label): other column counts are refused with the columns named,
not trained on the wrong ones."""
import numpy as np
import pytest

import kiln
import kiln.dataset as ds
from kiln import nn


def test_rows_of_three_columns_are_refused_with_their_names():
    net = nn.SequentialCell([nn.Flatten(), nn.Dense(4, 3)])
    model = kiln.Model(net, loss_fn=nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean"),
                       optimizer=nn.Momentum(net.trainable_params(), learning_rate=0.1,
                                             momentum=0.9))
    data = {"a": np.ones((4, 4), np.float32), "b": np.ones((4, 4), np.float32),
            "label": np.zeros(4, np.int32)}
    three = ds.NumpySlicesDataset(data, shuffle=False).batch(2)
    with pytest.raises(ValueError, match=r"3 column\(s\) \['a', 'b', 'label'\]"):
        model.train(1, three)
    with pytest.raises(ValueError, match="dataset.project"):
        model.eval(three)
    model.train(1, three.project(["a", "label"]))
    assert model.global_step == 2
