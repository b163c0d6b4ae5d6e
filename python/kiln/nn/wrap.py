"""MindSpore's training wrappers: WithLossCell (network + loss) and TrainOneStepCell (one
optimizer step per call)::

    net_with_loss = nn.WithLossCell(net, loss_fn)
    train_net = nn.TrainOneStepCell(net_with_loss, optimizer)
    train_net.set_train()
    for data, label in dataset.create_tuple_iterator():
        loss = train_net(data, label)

A TrainOneStepCell runs its step in the engine's train::Model: eagerly in PYNATIVE_MODE, and in
GRAPH_MODE compiled once per input shape (forward, backward and update in one graph), as
Model.train runs it. Both keep their children's parameter names (MindSpore's auto_prefix=False),
so a checkpoint of the wrapper loads into the bare network.
"""
import numpy as np

from .. import _kiln
from ..common.tensor import Tensor
from .cell import Cell


def _as_tensor(value):
    return value if isinstance(value, Tensor) else Tensor(np.asarray(value))


class WithLossCell(Cell):
    """``loss_fn(backbone(data), label)``; for a backbone of several inputs, ``(a, b, label)``
    gives ``loss_fn(backbone(a, b), label)`` (the loss sees the backbone's first output)."""

    def __init__(self, backbone, loss_fn):
        super().__init__(auto_prefix=False)
        if not isinstance(backbone, Cell):
            raise TypeError(f"WithLossCell: backbone must be a Cell, got {type(backbone).__name__}")
        if not isinstance(loss_fn, _kiln.nn.LossBase):
            raise TypeError("WithLossCell: loss_fn must be a loss (nn.SoftmaxCrossEntropyWithLogits, "
                            f"nn.MSELoss, a LossBase subclass, ...), got {type(loss_fn).__name__}")
        self._backbone = backbone
        self._loss_fn = loss_fn
        self._register_cell("", backbone)

    def construct(self, *columns):
        """The backbone takes every column but the last (the label); the loss sees its first
        output, as the engine's Model trains it."""
        if len(columns) < 2:
            raise ValueError("WithLossCell: takes the backbone's inputs then the label, at least "
                             f"(data, label); got {len(columns)} input(s)")
        out = self._backbone(*columns[:-1])
        if isinstance(out, (tuple, list)):
            out = out[0]
        return self._loss_fn(out, columns[-1])

    @property
    def backbone_network(self):
        return self._backbone


class _CellAsLoss(_kiln.nn.LossBase):
    """A cell computing the loss from (data, label) in the engine's loss slot, behind an identity
    network: train::Model then trains any such cell, eagerly or compiled."""

    def __init__(self, cell):
        _kiln.nn.LossBase.__init__(self)
        self._cell = cell

    def construct(self, logits, labels):
        return self._cell(logits, labels)


def network_and_loss(network_with_loss):
    """(network, loss) for the engine's Model from a cell that computes the loss itself."""
    if isinstance(network_with_loss, WithLossCell):
        return network_with_loss.backbone_network, network_with_loss._loss_fn
    return _kiln.nn.Identity(), _CellAsLoss(network_with_loss)


class TrainOneStepCell(Cell):
    """Each call runs forward, backward and one optimizer update on (data, label) and returns the
    loss (a scalar Tensor). `network` computes the loss: a WithLossCell or any cell whose
    construct takes (data, label)."""

    def __init__(self, network, optimizer, sens=None):
        super().__init__(auto_prefix=False)
        if not isinstance(network, Cell):
            raise TypeError(f"TrainOneStepCell: network must be a Cell, got "
                            f"{type(network).__name__}")
        if not isinstance(optimizer, _kiln.nn.Optimizer):
            raise TypeError("TrainOneStepCell: optimizer must be an optimizer (nn.Momentum, "
                            f"nn.Adam, ...), got {type(optimizer).__name__}")
        if sens is not None and float(sens) != 1.0:
            raise ValueError(f"TrainOneStepCell: sens={sens} is not available (only 1.0); for "
                             "loss scaling give Model(..., loss_scale_manager=...)")
        self.network = network
        self.optimizer = optimizer
        self.weights = optimizer.parameters
        self.sens = 1.0
        net, loss = network_and_loss(network)
        self._step = _kiln.train.Model(net, loss, optimizer, [], "O0", True, "bf16", "", False)

    def construct(self, *inputs):
        own_loss = not isinstance(self.network, WithLossCell)
        if len(inputs) < 2 or (own_loss and len(inputs) != 2):
            raise ValueError(f"TrainOneStepCell: takes (data, label), got {len(inputs)} input(s); "
                             "a backbone of several inputs trains as "
                             "TrainOneStepCell(WithLossCell(backbone, loss_fn), optimizer) with "
                             "(input, ..., label)")
        loss = self._step.train_step([_as_tensor(x) for x in inputs[:-1]], _as_tensor(inputs[-1]))
        return Tensor(np.array(loss, dtype=np.float32))
