"""What the examples share: LeNet-5 (lenet.py) as a kiln.Model, and Fashion-MNIST through kiln.dataset
(the native reader) or as a Python source for GeneratorDataset.

Debian's dataset-fashion-mnist puts the files in /usr/share/datasets/fashion-mnist (the path the
C++ presets use); pass another folder as the examples' first argument.
"""
import gzip
import os
import sys

import numpy as np

import kiln
import kiln.dataset as ds
import kiln.dataset.transforms as transforms
import kiln.dataset.vision as vision
from kiln import nn
from lenet import LeNet5

FASHION_MNIST = sys.argv[1] if len(sys.argv) > 1 else "/usr/share/datasets/fashion-mnist"


def fashion_mnist(usage="train", batch_size=64, num_parallel_workers=2):
    dataset = ds.FashionMnistDataset(FASHION_MNIST, usage=usage, shuffle=usage == "train")
    dataset = dataset.map(operations=[vision.Rescale(1.0 / 255.0, 0.0), vision.HWC2CHW()],
                          input_columns="image", num_parallel_workers=num_parallel_workers)
    dataset = dataset.map(operations=transforms.TypeCast(kiln.int32), input_columns="label")
    dataset = dataset.batch(batch_size, drop_remainder=True)
    # The examples' smoke test (tests/python/test_examples.py) runs each on a few batches.
    batches = int(os.environ.get("KILN_EXAMPLE_BATCHES", "0"))
    return dataset.take(batches) if batches > 0 else dataset


class FashionMnistSource:
    """Random-access source (__getitem__ + __len__): row i is (HWC uint8 image, int32 label),
    read from the IDX files once; worker processes share the arrays (fork)."""

    def __init__(self, directory, usage="train"):
        prefix = "train" if usage == "train" else "t10k"
        with gzip.open(os.path.join(directory, f"{prefix}-images-idx3-ubyte.gz")) as f:
            self.images = np.frombuffer(f.read(), np.uint8, offset=16).reshape(-1, 28, 28, 1)
        with gzip.open(os.path.join(directory, f"{prefix}-labels-idx1-ubyte.gz")) as f:
            self.labels = np.frombuffer(f.read(), np.uint8, offset=8).astype(np.int32)

    def __getitem__(self, index):
        return self.images[index], self.labels[index]

    def __len__(self):
        return len(self.labels)


def lenet_model(**model_kwargs):
    net = LeNet5()
    loss = nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")
    opt = nn.Momentum(net.trainable_params(), learning_rate=0.01, momentum=0.9)
    return kiln.Model(net, loss_fn=loss, optimizer=opt, metrics={"accuracy"}, **model_kwargs)
