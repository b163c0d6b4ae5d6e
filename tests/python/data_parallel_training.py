"""Trains a Python-defined network for a few steps and writes each step's loss and the final
weights to OUT.rank<R>.npz. Under mpirun with DATA_PARALLEL (gradients_mean=True) each rank takes
its contiguous part of every global batch; alone, the one process takes the whole batch.
test_data_parallel.py runs it both ways and compares.

    data_parallel_training.py MODE(graph|pynative) OUT_PREFIX"""
import sys

import numpy as np

import kiln
from kiln import _kiln, nn
from kiln.communication import get_group_size, get_rank, init

from kiln_test_data import fashion_like_batches

GLOBAL_BATCH = 16
STEPS = 12


class SmallNet(nn.Cell):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(1, 4, 3)
        self.norm = nn.SyncBatchNorm(4)  # under DATA_PARALLEL, the whole global batch's statistics
        self.flatten = nn.Flatten()
        self.hidden = nn.Dense(4 * 784, 32)
        self.act = nn.ReLU()
        self.out = nn.Dense(32, 10)

    def construct(self, x):
        x = self.act(self.norm(self.conv(x)))
        return self.out(self.act(self.hidden(self.flatten(x))))


def main(mode, out_prefix):
    _kiln.set_num_threads(1)
    kiln.set_context(mode=kiln.GRAPH_MODE if mode == "graph" else kiln.PYNATIVE_MODE,
                     device_target="CPU")
    init()
    rank, ranks = get_rank(), get_group_size()
    if ranks > 1:
        kiln.set_auto_parallel_context(parallel_mode=kiln.ParallelMode.DATA_PARALLEL,
                                       gradients_mean=True, device_num=ranks)
    kiln.set_seed(7)  # the same initial weights in every process
    net = SmallNet()
    model = kiln.Model(net, loss_fn=nn.SoftmaxCrossEntropyWithLogits(sparse=True,
                                                                      reduction="mean"),
                       optimizer=nn.Momentum(net.trainable_params(), learning_rate=0.05,
                                             momentum=0.9))
    images, labels = fashion_like_batches(STEPS, GLOBAL_BATCH, seed=3)
    per_rank = GLOBAL_BATCH // ranks
    losses = []
    for step in range(STEPS):
        first = step * GLOBAL_BATCH + rank * per_rank
        rows = slice(first, first + per_rank)
        losses.append(model.train_step(kiln.Tensor(images[rows]), kiln.Tensor(labels[rows])))
    weights = {name: p.asnumpy().copy() for name, p in net.parameters_and_names()}
    np.savez(f"{out_prefix}.rank{rank}.npz", losses=np.array(losses, dtype=np.float64), **weights)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
