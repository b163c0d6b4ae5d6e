"""Distributed training (guide §4.2, §4.3): data parallel over the job's ranks. Each rank reads
its shard of Fashion-MNIST (GeneratorDataset with num_shards/shard_id), computes the gradients of
its batches, and the ranks average them (gradients_mean=True) before every update, so all ranks
keep the same weights. Run it under mpirun:

    mpirun -np 2 python3 distributed.py [FASHION_MNIST_DIR]

Alone it is a job of one rank and trains on the whole data set."""
import os
import time

import numpy as np

import kiln.dataset as ds
import kiln.dataset.vision as vision
from kiln import context
from kiln.communication import get_group_size, get_rank, init
from kiln.train.callback import LossMonitor

from lenet_fashion import FASHION_MNIST, FashionMnistSource, lenet_model

context.set_context(mode=context.GRAPH_MODE, device_target="CPU")
init()
rank_id = get_rank()
rank_size = get_group_size()
context.set_auto_parallel_context(parallel_mode=context.ParallelMode.DATA_PARALLEL,
                                  gradients_mean=True, device_num=rank_size)

batch_size = 64  # per rank: the global batch is batch_size * rank_size
# The examples' smoke test (tests/python/test_examples.py) runs each on a few batches.
batches = int(os.environ.get("KILN_EXAMPLE_BATCHES", "0"))
train_ds = ds.GeneratorDataset(source=FashionMnistSource(FASHION_MNIST),
                               column_names=["data", "label"], num_shards=rank_size,
                               shard_id=rank_id,
                               num_samples=batches * batch_size if batches > 0 else None)
train_ds = train_ds.map(operations=[vision.Rescale(1.0 / 255.0, 0.0), vision.HWC2CHW()],
                        input_columns="data")
# Every rank the same number of steps, each batch the same shape: no step waits for a rank
# that has none, and the graph is compiled once.
train_ds = train_ds.batch(batch_size, drop_remainder=True)

model = lenet_model()
start = time.perf_counter()
model.train(1, train_ds, callbacks=[LossMonitor(300)] if rank_id == 0 else [])
# The ranks applied the same averaged gradients to the same (rank 0's) initial weights.
checksum = sum(float(np.abs(p.asnumpy()).sum()) for p in model.train_network.trainable_params())
print(f"rank {rank_id} of {rank_size}: {train_ds.get_dataset_size()} steps of {batch_size} rows "
      f"in {time.perf_counter() - start:.1f} s, weights checksum {checksum:.6f}", flush=True)
