"""Cells, layers, losses and optimizers with MindSpore's names (``mindspore.nn``)."""
from .cell import Cell
from .._kiln.nn import (AvgPool2d, BatchNorm2d, Conv2d, Dense, Dropout, Embedding, Flatten, GELU,
                        Identity, L1Loss, LayerNorm, LossBase, MaxPool2d, MSELoss, ReLU,
                        SequentialCell, Sigmoid, SoftmaxCrossEntropyWithLogits, SyncBatchNorm,
                        Tanh)
from .._kiln.nn import (Adam, AdamW, AdamWeightDecay, Momentum, Optimizer, SGD,
                        cosine_decay_lr, linear_warmup, piecewise_constant_lr, step_lr)
from .metrics import Accuracy, Loss
from .wrap import TrainOneStepCell, WithLossCell

_native_sequential_init = SequentialCell.__init__


def _sequential_init(self, *cells):
    """SequentialCell(cell, cell, ...) or SequentialCell([cells]), as MindSpore takes them."""
    if len(cells) == 1 and isinstance(cells[0], (list, tuple)):
        cells = cells[0]
    _native_sequential_init(self, list(cells))


SequentialCell.__init__ = _sequential_init
