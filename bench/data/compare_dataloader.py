#!/usr/bin/python3
"""The PyTorch side of bench/data/compare_dataloader.sh: torch.utils.data.DataLoader doing the same
work as `kiln data bench`, and the generator of the image-folder data sets both sides read.

  compare_dataloader.py make-png DIR        60,000 Fashion-MNIST PNGs, DIR/<label>/<index>.png
  compare_dataloader.py make-rgb DIR N S FMT  N images (FMT jpg or png) of S x S RGB (Fashion-MNIST
                                             scaled up), for the decode-bound scaling case
  compare_dataloader.py memory WORKERS EPOCHS     in-memory uint8 images
  compare_dataloader.py png DIR WORKERS EPOCHS    PNG files, decoded with PIL

Each run prints one JSON line: {"side":"torch","case":..,"workers":..,"samples_per_sec":..}.
Transforms match kiln's rescale,hflip,hwc2chw: x / 255 as float32, a horizontal flip with
probability 0.5, HWC -> CHW; batches of 64 with drop_last, no shuffle.
"""
import gzip
import json
import os
import random
import resource
import sys
import time

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset

FMNIST = "/usr/share/datasets/fashion-mnist"
BATCH = 64


def load_fashion_mnist():
    with gzip.open(os.path.join(FMNIST, "train-images-idx3-ubyte.gz")) as f:
        images = np.frombuffer(f.read(), np.uint8, offset=16).reshape(-1, 28, 28, 1).copy()
    with gzip.open(os.path.join(FMNIST, "train-labels-idx1-ubyte.gz")) as f:
        labels = np.frombuffer(f.read(), np.uint8, offset=8).astype(np.int32)
    return images, labels


def transform(hwc_uint8):
    x = torch.from_numpy(hwc_uint8).to(torch.float32).div_(255.0)  # Rescale(1/255, 0)
    if random.random() < 0.5:  # RandomHorizontalFlip
        x = x.flip(1)
    return x.permute(2, 0, 1).contiguous()  # HWC2CHW


class MemoryDataset(Dataset):
    def __init__(self):
        self.images, self.labels = load_fashion_mnist()

    def __len__(self):
        return len(self.images)

    def __getitem__(self, i):
        return transform(self.images[i]), int(self.labels[i])


class PngFolder(Dataset):
    def __init__(self, root):
        from PIL import Image  # noqa: F401  (imported in workers too)
        self.items = []
        for label in sorted(os.listdir(root)):
            sub = os.path.join(root, label)
            if not os.path.isdir(sub):
                continue
            for name in sorted(os.listdir(sub)):
                self.items.append((os.path.join(sub, name), int(label)))

    def __len__(self):
        return len(self.items)

    def __getitem__(self, i):
        from PIL import Image
        path, label = self.items[i]
        with Image.open(path) as im:
            a = np.array(im)  # "L" mode: H x W uint8
        return transform(a[:, :, None]), label


def run(case, dataset, workers, epochs):
    loader = DataLoader(dataset, batch_size=BATCH, shuffle=False, drop_last=True,
                        num_workers=workers)
    rows = 0
    start = time.perf_counter()
    for _ in range(epochs):
        for images, labels in loader:
            rows += images.shape[0]
    seconds = time.perf_counter() - start
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    print(json.dumps({"side": "torch", "case": case, "workers": workers, "epochs": epochs,
                      "rows": rows, "seconds": round(seconds, 4),
                      "samples_per_sec": round(rows / seconds, 1),
                      "peak_rss_mb_main_process": round(peak_mb, 1)}), flush=True)


def make_png(root):
    from PIL import Image
    images, labels = load_fashion_mnist()
    for label in range(10):
        os.makedirs(os.path.join(root, str(label)), exist_ok=True)
    for i, (img, label) in enumerate(zip(images, labels)):
        Image.fromarray(img[:, :, 0], mode="L").save(os.path.join(root, str(label), f"{i:05d}.png"))


def make_rgb(root, count, size, fmt):
    from PIL import Image
    images, labels = load_fashion_mnist()
    rng = np.random.default_rng(0)
    for label in range(10):
        os.makedirs(os.path.join(root, str(label)), exist_ok=True)
    for i in range(count):
        gray = Image.fromarray(images[i][:, :, 0], mode="L").resize((size, size), Image.BILINEAR)
        rgb = Image.merge("RGB", (gray, gray.transpose(Image.FLIP_LEFT_RIGHT), gray))
        # Seeded sensor-like noise: photos do not compress like flat upscaled drawings.
        noisy = np.asarray(rgb).astype(np.int16) + rng.integers(-6, 7, (size, size, 3))
        rgb = Image.fromarray(np.clip(noisy, 0, 255).astype(np.uint8), mode="RGB")
        path = os.path.join(root, str(labels[i]), f"{i:05d}.{fmt}")
        if fmt == "jpg":
            rgb.save(path, quality=90)
        else:
            rgb.save(path)


def main(argv):
    torch.manual_seed(0)
    random.seed(0)
    mode = argv[1]
    if mode == "make-png":
        make_png(argv[2])
    elif mode == "make-rgb":
        make_rgb(argv[2], int(argv[3]), int(argv[4]), argv[5])
    elif mode == "memory":
        run("memory", MemoryDataset(), int(argv[2]), int(argv[3]))
    elif mode == "png":
        run("png", PngFolder(argv[2]), int(argv[3]), int(argv[4]))
    else:
        sys.exit(f"unknown mode {mode}")


if __name__ == "__main__":
    main(sys.argv)
