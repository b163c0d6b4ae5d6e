"""PyTorch side of bench/compare_torch: trains LeNet-5, ResNet-20 or the MLP on Fashion-MNIST
held in memory, exactly as `kiln train` does, and prints one JSON line with images/s.

Run with Debian's interpreter (/usr/bin/python3, python3-torch 1.13) in PyTorch's best
configuration on this machine (set by compare_torch.sh): tuned OpenBLAS/glibc environment and,
for the conv nets, channels-last memory format.
"""
import argparse
import gzip
import json
import resource
import struct
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


def load_idx(path):
    with gzip.open(path, "rb") as f:
        data = f.read()
    magic, = struct.unpack(">I", data[:4])
    ndim = magic & 0xFF
    dims = struct.unpack(">" + "I" * ndim, data[4:4 + 4 * ndim])
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim).reshape(dims)


class LeNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 6, 5, padding=2)
        self.conv2 = nn.Conv2d(6, 16, 5)
        self.fc1 = nn.Linear(400, 120)
        self.fc2 = nn.Linear(120, 84)
        self.fc3 = nn.Linear(84, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        x = torch.flatten(x, 1)
        return self.fc3(F.relu(self.fc2(F.relu(self.fc1(x)))))


class BasicBlock(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.shortcut = None
        if stride != 1 or cin != cout:  # option B: 1x1 conv + BN projection
            self.shortcut = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False),
                                          nn.BatchNorm2d(cout))

    def forward(self, x):
        y = F.relu(self.bn1(self.conv1(x)))
        y = self.bn2(self.conv2(y))
        return F.relu(y + (x if self.shortcut is None else self.shortcut(x)))


class ResNet20(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(1, 16, 3, 1, 1, bias=False)
        self.bn = nn.BatchNorm2d(16)
        layers, cin = [], 16
        for cout, stride in ((16, 1), (32, 2), (64, 2)):
            for i in range(3):
                layers.append(BasicBlock(cin, cout, stride if i == 0 else 1))
                cin = cout
        self.layers = nn.Sequential(*layers)
        self.fc = nn.Linear(64, 10)

    def forward(self, x):
        x = self.layers(F.relu(self.bn(self.conv(x))))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Flatten(), nn.Linear(784, 1024), nn.ReLU(),
                                 nn.Linear(1024, 1024), nn.ReLU(), nn.Linear(1024, 10))

    def forward(self, x):
        return self.net(x)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--model", default="lenet", choices=["lenet", "resnet20", "mlp"])
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--amp", default="O0", choices=["O0", "bf16"])
    p.add_argument("--data-dir", default="/usr/share/datasets/fashion-mnist")
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(1)

    images = load_idx(f"{a.data_dir}/train-images-idx3-ubyte.gz")
    labels = load_idx(f"{a.data_dir}/train-labels-idx1-ubyte.gz")
    x_all = torch.from_numpy(images.astype(np.float32) / 255.0).unsqueeze(1)
    y_all = torch.from_numpy(labels.astype(np.int64))
    channels_last = a.model in ("lenet", "resnet20")
    if channels_last:
        x_all = x_all.contiguous(memory_format=torch.channels_last)

    model = {"lenet": LeNet, "resnet20": ResNet20, "mlp": MLP}[a.model]()
    if channels_last:
        model = model.to(memory_format=torch.channels_last)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    model.train()
    n = x_all.shape[0]
    b = a.batch_size
    warmup = 10
    start = None
    for step in range(a.steps + warmup):
        i = (step * b) % (n - b)
        x, y = x_all[i:i + b], y_all[i:i + b]
        if a.amp == "bf16":
            with torch.autocast("cpu", dtype=torch.bfloat16):
                loss = F.cross_entropy(model(x), y)
        else:
            loss = F.cross_entropy(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if step == warmup - 1:
            start = time.perf_counter()
    elapsed = time.perf_counter() - start
    print(json.dumps({
        "framework": "pytorch", "version": torch.__version__, "model": a.model,
        "batch_size": b, "steps": a.steps, "threads": a.threads, "amp": a.amp,
        "images_per_sec": a.steps * b / elapsed, "final_loss": float(loss),
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0,
    }))


if __name__ == "__main__":
    main()
