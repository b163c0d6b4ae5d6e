"""Data pipeline (guide §2.2): Fashion-MNIST read by a Python source through GeneratorDataset with
num_parallel_workers, the vision transforms in map (C++ threads, no GIL), a Python function in map,
and batch(drop_remainder=True) to keep shapes static. python_multiprocessing=True runs the Python
source and the Python map function in worker processes (the guide's advice for GIL-bound
loading); the same pipeline with False runs them in this process's threads, one at a time
under the GIL. Which wins depends on the Python work per row: for this cheap source (an array
index and np.roll) the hand-off through shared memory costs more than it saves; a PIL decode per
row gains (bench/python/data_generator_bench.py)."""
import os
import time

import numpy as np

import kiln.dataset as ds
import kiln.dataset.vision as vision
from kiln import context
from kiln.train.callback import LossMonitor

from lenet_fashion import FASHION_MNIST, FashionMnistSource, lenet_model


def jitter(image):
    """A Python transform (runs with the GIL): shift the image by up to 2 pixels."""
    dy, dx = np.random.randint(-2, 3, size=2)
    return np.roll(image, (int(dy), int(dx)), axis=(1, 2))


def pipeline(source, python_multiprocessing, num_workers=2, batch_size=64):
    # The examples' smoke test (tests/python/test_examples.py) runs each on a few batches.
    batches = int(os.environ.get("KILN_EXAMPLE_BATCHES", "0"))
    dataset = ds.GeneratorDataset(source=source, column_names=["image", "label"],
                                  num_parallel_workers=num_workers, shuffle=True,
                                  num_samples=batches * batch_size if batches > 0 else None,
                                  python_multiprocessing=python_multiprocessing)
    trans = [vision.Rescale(1.0 / 255.0, 0.0), vision.HWC2CHW()]
    dataset = dataset.map(operations=trans, input_columns="image",
                          num_parallel_workers=num_workers, python_multiprocessing=False)
    dataset = dataset.map(operations=jitter, input_columns="image",
                          num_parallel_workers=num_workers,
                          python_multiprocessing=python_multiprocessing)
    return dataset.batch(batch_size, drop_remainder=True)


context.set_context(mode=context.GRAPH_MODE, device_target="CPU", enable_graph_kernel=True)
source = FashionMnistSource(FASHION_MNIST)
for python_multiprocessing in (False, True):
    train_ds = pipeline(source, python_multiprocessing)
    start = time.perf_counter()
    rows = sum(len(label) for _, label in train_ds.create_tuple_iterator(num_epochs=1,
                                                                          output_numpy=True))
    read = time.perf_counter() - start
    model = lenet_model()
    start = time.perf_counter()
    model.train(1, train_ds, callbacks=[LossMonitor(300)])
    print(f"python_multiprocessing={python_multiprocessing}: read {rows} rows in {read:.2f} s, "
          f"one epoch of training in {time.perf_counter() - start:.1f} s")
