"""What the examples share: LeNet-5 written in Python, and Fashion-MNIST through kiln.dataset.

Debian's dataset-fashion-mnist puts the files in /usr/share/datasets/fashion-mnist (the path the
C++ presets use); pass another folder as the examples' first argument.
"""
import sys

import kiln
import kiln.dataset as ds
import kiln.dataset.transforms as transforms
import kiln.dataset.vision as vision
from kiln import nn

FASHION_MNIST = sys.argv[1] if len(sys.argv) > 1 else "/usr/share/datasets/fashion-mnist"


class LeNet5(nn.Cell):
    def __init__(self, num_classes=10):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 6, 5, pad_mode="pad", padding=2, has_bias=True)
        self.conv2 = nn.Conv2d(6, 16, 5, pad_mode="valid", has_bias=True)
        self.relu = nn.ReLU()
        self.pool = nn.MaxPool2d(kernel_size=2, stride=2)
        self.flatten = nn.Flatten()
        self.fc1 = nn.Dense(400, 120)
        self.fc2 = nn.Dense(120, 84)
        self.fc3 = nn.Dense(84, num_classes)

    def construct(self, x):
        x = self.pool(self.relu(self.conv1(x)))
        x = self.pool(self.relu(self.conv2(x)))
        x = self.flatten(x)
        return self.fc3(self.relu(self.fc2(self.relu(self.fc1(x)))))


def fashion_mnist(usage="train", batch_size=64, num_parallel_workers=2):
    dataset = ds.FashionMnistDataset(FASHION_MNIST, usage=usage, shuffle=usage == "train")
    dataset = dataset.map(operations=[vision.Rescale(1.0 / 255.0, 0.0), vision.HWC2CHW()],
                          input_columns="image", num_parallel_workers=num_parallel_workers)
    dataset = dataset.map(operations=transforms.TypeCast(kiln.int32), input_columns="label")
    return dataset.batch(batch_size, drop_remainder=True)


def lenet_model(**model_kwargs):
    net = LeNet5()
    loss = nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")
    opt = nn.Momentum(net.trainable_params(), learning_rate=0.01, momentum=0.9)
    return kiln.Model(net, loss_fn=loss, optimizer=opt, metrics={"accuracy"}, **model_kwargs)
