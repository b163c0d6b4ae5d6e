"""Data the core's tests share: in-memory batches as a native data set."""
import os

import numpy as np

import kiln
from kiln import _kiln

# examples/python: the examples' network (lenet.py) and scripts, which the tests import and run.
EXAMPLES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "examples",
                        "python")


class ArrayDataset:
    """A batched in-memory data set in the engine (what kiln.dataset objects carry as _native)."""

    def __init__(self, images, labels, batch_size):
        self._native = _kiln._numpy_slices_dataset(
            [kiln.Tensor(images), kiln.Tensor(labels)], ["image", "label"], batch_size)

    def get_dataset_size(self):
        return self._native.get_dataset_size()


def fashion_like_batches(steps, batch_size, seed=0):
    """Deterministic 28x28 images whose label (in [0, 10)) is a bright row: learnable at once."""
    rng = np.random.default_rng(seed)
    images = rng.standard_normal((steps * batch_size, 1, 28, 28), dtype=np.float32)
    labels = rng.integers(0, 10, size=steps * batch_size).astype(np.int32)
    images[np.arange(len(labels)), 0, 2 * labels + 4, :] += 3.0
    return images, labels
